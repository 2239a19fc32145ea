"""Merge-on-read slices as a Spark DataFrame: base files through Spark's native parquet scan, minus the base rows
that log records supersede, plus the log rows that win.

Only the log side goes through Python: a few tasks run `merge.slice_overlay` (log blocks decoded and
folded, decided against the base file's key/ordering columns) and yields the winning log rows and the positions
of the superseded base rows. A base row is identified in the JVM by one long, `file id << 32 | (row index ^ file
id)` (`_metadata.row_index`), so the anti join against the superseded positions is a broadcast join on a long
key. (The xor matters: Spark's long hash map picks slots from the low 32 bits; with the bare row index there,
the same row positions of different files would all collide.)
The file id is the base file's size (`_metadata.file_size`, a per-file constant: no per-row work) when the sizes
of the read's base files are distinct and below 2**32; otherwise a 32-bit window of Spark's
`xxhash64(_metadata.file_name)`, chosen on the driver so that it is distinct for every base file of the read
(exact, and no per-row join to map file names to ids); without such a window (e.g. two base files of one name)
the slices are merged whole in Python instead.
The Python output is local-checkpointed so that the log side is computed once although the plan reads it twice
(positions for the anti join, rows for the union); the checkpoint is dropped with the DataFrame.
"""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa

from hudilite.errors import UnsupportedTableError

ROW_BITS = 32  # base files of up to 2**32 rows (Hudi base files are ~100 MB); 32-bit file ids
GONE = "_hl_superseded"  # the packed (file id, row) of a superseded base row; null on log rows
FILE = "_hl_file"
SIZE = "_hl_file_size"
ROW = "_hl_row"
# Above this much log data the superseded positions are not broadcast (Spark plans a shuffled join instead).
BROADCAST_LOG_BYTES = 2 << 30


def file_ids(spark, slices) -> tuple[int | None, list[int | None]] | None:
    """(shift, id per slice, None without a base file): shift None and the file sizes when they are distinct and
    known; else, for the first shift that gives every base file a distinct id,
    `(xxhash64(base file name) >>> shift) & 0xFFFFFFFF`; None if no shift does."""
    from pyspark.sql import functions as F

    names = [os.path.basename(s.base_file.path) for s in slices if s.base_file is not None]
    if not names:
        return 0, [None] * len(slices)
    sizes = [s.base_file.size for s in slices if s.base_file is not None]
    if all(0 < z < (1 << ROW_BITS) for z in sizes) and len(set(sizes)) == len(sizes):
        return None, [s.base_file.size if s.base_file is not None else None for s in slices]
    # evaluated on the driver (a projection of a local relation), with the very function the scan uses
    rows = spark.createDataFrame([(n,) for n in names], "n string").select(F.xxhash64("n")).collect()
    hashes = np.array([r[0] for r in rows], dtype=np.int64).view(np.uint64)
    mask = np.uint64((1 << ROW_BITS) - 1)
    for shift in range(64 - ROW_BITS + 1):
        ids = (hashes >> np.uint64(shift)) & mask
        if len(np.unique(ids)) == len(ids):
            it = iter(int(i) for i in ids)
            return shift, [next(it) if s.base_file is not None else None for s in slices]
    return None


def merged_dataframe(spark, plan, schema, slices, ids, scan):
    """The merged rows of `slices` (all with log files) in `schema`; `ids` from `file_ids`. `scan(files)` is the
    native scan of base files in the table schema with FILE / SIZE / ROW columns (`_metadata.file_name`,
    `_metadata.file_size`, `_metadata.row_index`), rows of an
    incremental read's commit times only."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import LongType, StructField, StructType

    from hudilite.reader.merge import SliceDesc, slice_overlay, to_spark_arrow

    spec = plan.merge_spec()
    out_schema = to_spark_arrow(plan.schema)
    ov_arrow = out_schema.append(pa.field(GONE, pa.int64(), True))
    ov_spark = StructType(schema.fields + [StructField(GONE, LongType(), True)])
    shift, fids = ids
    descs = [(SliceDesc.of(s), fid) for s, fid in zip(slices, fids)]
    # A few tasks, each merging every n-th slice: a Python task costs tens of ms however little it does, and
    # `range` feeds the tasks without a Python input stage (the slice list travels in the task closure).
    n = max(1, min(len(descs), 2 * spark.sparkContext.defaultParallelism))
    sdf = spark.range(0, n, 1, n)

    def overlay_task(batches):
        for b in batches:
            for t in b.column(0).to_pylist():
                for desc, fid in descs[t::n]:
                    yield from _overlay_batches(slice_overlay(desc, spec), desc, fid, out_schema, ov_arrow)

    overlay = sdf.mapInArrow(overlay_task, ov_spark).localCheckpoint(eager=False)
    log_rows = overlay.filter(F.col(GONE).isNull()).drop(GONE)
    based = [s.base_file.path for s in slices if s.base_file is not None]
    if not based:
        return log_rows
    gone = overlay.filter(F.col(GONE).isNotNull()).select(GONE)
    if sum(lf.size for s in slices for lf in s.log_files) <= BROADCAST_LOG_BYTES:
        gone = F.broadcast(gone)
    fid = F.col(SIZE) if shift is None else \
        F.shiftrightunsigned(F.xxhash64(F.col(FILE)), shift).bitwiseAND(F.lit((1 << ROW_BITS) - 1))
    base = scan(based).withColumn(GONE, F.shiftleft(fid, ROW_BITS).bitwiseOR(F.col(ROW).bitwiseXOR(fid)))
    base = base.join(gone, GONE, "left_anti").select(*[F.col(f"`{f.name}`") for f in schema.fields])
    return base.unionByName(log_rows)


def _overlay_batches(ov, desc, fid, out_schema: pa.Schema, ov_arrow: pa.Schema):
    """A slice's overlay as batches of `ov_arrow` (the table schema + GONE): the winning log rows (GONE null),
    then one row per superseded base row (table columns null, GONE its packed id). One output schema for both,
    so one Python pass yields both."""
    rows = ov.rows.cast(out_schema) if ov.rows.schema != out_schema else ov.rows
    if rows.num_rows:
        rows = rows.append_column(ov_arrow.field(GONE), pa.nulls(rows.num_rows, pa.int64()))
        yield from rows.to_batches(max_chunksize=65536)
    if len(ov.superseded) and ov.superseded[-1] >> ROW_BITS:
        raise UnsupportedTableError(f"{desc.base_path}: more than 2**{ROW_BITS} rows in a base file")
    for start in range(0, len(ov.superseded), 1 << 20):
        pos = ov.superseded[start:start + (1 << 20)]
        cols = [pa.nulls(len(pos), f.type) for f in out_schema]
        # two's complement, as the JVM's `shiftleft(id, 32) | (row ^ id)`
        packed = (np.uint64(fid) << np.uint64(ROW_BITS)) | (pos.astype(np.uint64) ^ np.uint64(fid))
        cols.append(pa.array(packed.view(np.int64), pa.int64()))
        yield pa.RecordBatch.from_arrays(cols, schema=ov_arrow)
