"""Merge-on-read slices as a Spark DataFrame: base files through Spark's native parquet scan, minus the base rows
that log records supersede, plus the log rows that win.

Only the log side goes through Python: a few tasks run `merge.slice_overlay` (log blocks decoded and
folded, decided against the base file's key/ordering columns) and yield the winning log rows and the positions
of the superseded base rows, as 64-row blocks: (block key, bit mask of the block's superseded rows). A base
row's block key is one long computed in the JVM, `file id << 26 | ((row index >> 6) ^ (file id & (2**26 - 1)))`
(`_metadata.row_index`), so dropping the superseded rows is a broadcast left join on a long key plus a bit test
of the row's mask. Blocks instead of single rows: ~4x fewer entries at 7% superseded rows, a hash table that
stays in the CPU caches, and fewer rows out of Python and into the broadcast. (The xor matters: Spark's long
hash map picks slots from the low 32 bits; with the bare block index there, the same blocks of different files
would all collide.)
The file id is the base file's size (`_metadata.file_size`, a per-file constant: no per-row work) when the sizes
of the read's base files are distinct and below 2**32; otherwise a 32-bit window of Spark's
`xxhash64(_metadata.file_name)`, chosen on the driver so that it is distinct for every base file of the read
(exact, and no per-row join to map file names to ids); without such a window (e.g. two base files of one name)
the slices are merged whole in Python instead.
The overlay reaches the JVM in one of two ways. Snapshot reads of a writable table keep it as parquet files beside
the table (`overlay_cache`) for slices with enough log data: a Spark job writes the entries a read lacks, then the
winning rows and the blocks are native parquet scans - only the columns a query reads, vectorised, no Python->JVM
row conversion - and later reads of the same slices find them written. Otherwise (slices with small logs,
incremental reads, read-only tables) the Python output is
local-checkpointed (serialized, spilling to disk under memory pressure) so that the log side is computed once
although the plan reads it twice (blocks for the join, rows for the union); the checkpoint is dropped with the
DataFrame.
"""

from __future__ import annotations

import logging
import os

import numpy as np
import pyarrow as pa

from hudilite.reader import overlay_cache
from hudilite.reader.merge import SliceDesc, slice_overlay, to_spark_arrow
from hudilite.reader.overlay_cache import BLOCK, BLOCK_BITS, BLOCKS_ARROW, KEY_BITS, MASK, ROW_BITS
from hudilite.spark.files import read_parquet_files
from hudilite.spark.schema import to_jvm_arrow
from hudilite.spark.session import default_parallelism
from hudilite.storage import capture_bindings, install_bindings

log = logging.getLogger(__name__)

GONE = "_hl_superseded"  # the superseded blocks (array of (key, mask) structs); null on log rows
BLOCKS_PER_ROW = 1 << 16  # superseded blocks travel as arrays of up to this many (one output row per chunk)
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


def merged_dataframe(spark, plan, schema, slices, ids, scan, riders=()):
    """The merged rows of `slices` (all with log files) in `schema`, plus the rows of the `riders` (slices without
    log files, read as they are: their base files join the same native scan, where no superseded block matches
    them); `ids` from `file_ids` of `slices + riders`. `scan(files)` is the native scan of base files in the
    table schema with FILE / SIZE / ROW columns (`_metadata.file_name`, `_metadata.file_size`,
    `_metadata.row_index`), rows of an incremental read's commit times only."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F
    from pyspark.sql.types import ArrayType, LongType, StructField, StructType

    spec = plan.merge_spec()
    out_schema = to_spark_arrow(plan.schema)
    blocks_spark = StructType([StructField(f.name, LongType(), False) for f in BLOCKS_ARROW])
    shift, fids = ids
    descs = [(SliceDesc.of(s), fid) for s, fid in zip(slices, fids)]  # riders' ids come after the slices'
    based = [s.base_file.path for s in list(slices) + list(riders) if s.base_file is not None]
    # slices with overlay entries (`overlay_cache`: big enough logs, writable table) and those merged here
    cached = []
    if overlay_cache.enabled(spark, plan):
        least = overlay_cache.min_log_bytes(spark)
        cached = [i for i, s in enumerate(slices) if sum(lf.size for lf in s.log_files) >= least]
    files = overlay_files(spark, plan, [slices[i] for i in cached], [descs[i] for i in cached], spec,
                          out_schema) if cached else None
    if files is None:
        cached = []
    rows_parts, gone_parts = [], []
    if files is not None:  # native scans of the overlay files
        rows_files, block_files = files
        rows_parts.append(read_parquet_files(spark, schema, rows_files))
        if based:
            gone_parts.append(read_parquet_files(spark, blocks_spark, block_files))
    merged_here = [descs[i] for i in sorted(set(range(len(descs))) - set(cached))]
    if merged_here:
        batch_schema = to_jvm_arrow(out_schema)
        ov_arrow = batch_schema.append(pa.field(GONE, pa.list_(pa.field("element", pa.struct(BLOCKS_ARROW), False)),
                                              True))
        ov_spark = StructType(schema.fields + [StructField(GONE, ArrayType(blocks_spark, False), True)])
        # A few tasks, each merging every n-th slice: a Python task costs tens of ms however little it does, and
        # `range` feeds the tasks without a Python input stage (the slice list travels in the task closure).
        n = _tasks(spark, len(merged_here))
        sdf = spark.range(0, n, 1, n)
        bindings = capture_bindings(plan.table.base_path)

        def overlay_task(batches):
            install_bindings(bindings)
            for b in batches:
                for t in b.column(0).to_pylist():
                    for desc, fid in merged_here[t::n]:
                        yield from _overlay_batches(slice_overlay(desc, spec), desc, fid, batch_schema, ov_arrow)

        # serialized blocks: a third of the memory of row objects (~90 vs ~250 MB for 0.65M log rows of 18
        # columns) for as long as the DataFrame lives, and fewer objects for the JVM's collector to trace
        overlay = sdf.mapInArrow(overlay_task, ov_spark).localCheckpoint(eager=False,
                                                                         storageLevel=StorageLevel.MEMORY_AND_DISK)
        # SQL text rather than Column objects where it saves py4j round trips (a few hundred of ~0.25 ms each)
        rows_parts.append(overlay.where(f"`{GONE}` IS NULL").drop(GONE))
        if based:
            gone_parts.append(overlay.where(f"`{GONE}` IS NOT NULL").selectExpr(f"inline(`{GONE}`)"))
    log_rows = rows_parts[0] if len(rows_parts) == 1 else rows_parts[0].unionByName(rows_parts[1])
    if not based:
        return log_rows
    gone = gone_parts[0] if len(gone_parts) == 1 else gone_parts[0].unionByName(gone_parts[1])
    if sum(lf.size for s in slices for lf in s.log_files) <= BROADCAST_LOG_BYTES:
        gone = F.broadcast(gone)
    fid = f"`{SIZE}`" if shift is None else f"(shiftrightunsigned(xxhash64(`{FILE}`), {shift}) & {(1 << ROW_BITS) - 1})"
    low = (1 << KEY_BITS) - 1
    key = F.expr(f"shiftleft({fid}, {KEY_BITS}) | (shiftright(`{ROW}`, {BLOCK_BITS}) ^ ({fid} & {low}))")
    kept = F.expr(f"`{MASK}` IS NULL OR (shiftrightunsigned(`{MASK}`, CAST(`{ROW}` & {(1 << BLOCK_BITS) - 1} AS INT))"
                  " & 1) = 0")
    base = scan(based).withColumn(BLOCK, key).join(gone, BLOCK, "left").filter(kept)
    base = base.drop(BLOCK, MASK, FILE, SIZE, ROW)  # the table's columns, in order (the join key came first)
    return base.unionByName(log_rows)


def _tasks(spark, n_slices: int) -> int:
    """How many Python tasks compute the overlays of `n_slices` slices (each task every n-th slice)."""
    return max(1, min(n_slices, 2 * default_parallelism(spark)))


# Up to this many slices a read finds its overlay entries from the driver (log block headers read there); more,
# and a Spark job finds them (the headers read by the executors, in parallel).
DRIVER_ENTRY_LOOKUPS = 64


def overlay_files(spark, plan, slices, descs, spec, out_schema: pa.Schema):
    """(rows files, blocks files) of the slices' overlay cache entries (`overlay_cache`), the missing ones computed
    and written first by a Spark job. Each slice's entry is found from its log block headers: on the driver for
    up to DRIVER_ENTRY_LOOKUPS slices (a read whose entries all exist runs no job), else in that job. None if
    entries cannot be written (e.g. storage the executors may not write to): the read then goes without files."""
    base_path = plan.table.base_path
    items = [(d, fid, s.base_instant) for s, (d, fid) in zip(slices, descs)]
    found = None
    if len(items) <= DRIVER_ENTRY_LOOKUPS:
        found = [overlay_cache.entry_path(base_path, inst, d, spec, fid, overlay_cache.slice_blocks(d, spec))
                 for d, fid, inst in items]
        todo = [(item, p) for item, p in zip(items, found) if not overlay_cache.is_complete(p)]
        if not todo:
            return _entry_files(found)
    else:
        todo = [(item, None) for item in items]
    n = _tasks(spark, len(todo))
    bindings = capture_bindings(base_path)

    def entry_task(batches):
        install_bindings(bindings)
        for b in batches:
            for t in b.column(0).to_pylist():
                prefixes, errors = [], []
                for (desc, fid, base_instant), prefix in todo[t::n]:
                    blocks = overlay_cache.slice_blocks(desc, spec)  # once: for the entry's key and its overlay
                    prefix = prefix or overlay_cache.entry_path(base_path, base_instant, desc, spec, fid, blocks)
                    error = None
                    if not any(errors) and not overlay_cache.is_complete(prefix):
                        try:
                            overlay_cache.compute_entry(prefix, desc, spec, fid, blocks, out_schema)
                        except OSError as e:
                            error = f"{prefix}: {e}"
                    prefixes.append(prefix)
                    errors.append(error)
                yield pa.RecordBatch.from_arrays([pa.array(prefixes, pa.string()), pa.array(errors, pa.string())],
                                                 names=["prefix", "failed"])

    got = spark.range(0, n, 1, n).mapInArrow(entry_task, "prefix string, failed string").collect()
    failed = [r.failed for r in got if r.failed]
    if failed:
        log.warning("merged read of %s without overlay files: cannot write %s", base_path, failed[0])
        return None
    return _entry_files(found if found is not None else [r.prefix for r in got])


def _entry_files(prefixes) -> tuple[list[str], list[str]]:
    return [p + overlay_cache.ROWS for p in prefixes], [p + overlay_cache.BLOCKS for p in prefixes]


def _overlay_batches(ov, desc, fid, out_schema: pa.Schema, ov_arrow: pa.Schema):
    """A slice's overlay as batches of `ov_arrow` (the table schema + GONE): the winning log rows (GONE null),
    then the superseded base rows as (block key, mask) structs, BLOCKS_PER_ROW per row in GONE (table columns
    null: a few rows instead of one per position, so little crosses into the JVM and the checkpoint). One
    output schema for both, so one Python pass yields both."""
    rows = ov.rows.cast(out_schema) if ov.rows.schema != out_schema else ov.rows
    if rows.num_rows:
        rows = rows.append_column(ov_arrow.field(GONE), pa.nulls(rows.num_rows, ov_arrow.field(GONE).type))
        yield from rows.to_batches(max_chunksize=65536)
    if not len(ov.superseded):
        return
    keys, masks = overlay_cache.block_masks(ov, desc, fid)
    structs = pa.StructArray.from_arrays([pa.array(keys.view(np.int64)), pa.array(masks.view(np.int64))],
                                         fields=list(ov_arrow.field(GONE).type.value_type))
    offsets = np.append(np.arange(0, len(structs), BLOCKS_PER_ROW), len(structs)).astype(np.int32)
    lists = pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), structs, type=ov_arrow.field(GONE).type)
    cols = [pa.nulls(len(lists), f.type) for f in out_schema] + [lists]
    yield pa.RecordBatch.from_arrays(cols, schema=ov_arrow)


