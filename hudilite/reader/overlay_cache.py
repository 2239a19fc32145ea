"""Merged-read overlays kept beside the table.

What a merge-on-read file slice's log files change in its base file (the winning log rows, and the superseded base
rows as 64-row blocks: see `hudilite.spark.merge`) is written as two parquet files by the deltacommit that makes the
slice state, or else by the first snapshot read that needs it, then read by Spark's native parquet scan, by every
read of the same slice state:

    <table>/.hoodie/.aux/hudilite_overlays/<partition>/<fileId>_<baseInstant>/<key>.blocks.parquet
                                                                              <key>.rows.parquet

Why files: rows handed from Python workers to the JVM are converted value by value, every column, whatever the
query reads; a native scan of a parquet file reads only the columns the query needs, vectorised. And a file
outlives the read that wrote it, so a DataFrame over it stays valid however late it is evaluated.

`key` hashes everything the overlay is a function of: the base file (its name is unique and the file never
changes), the log blocks that count (log file name, offset, size and instant: blocks are appended, never
rewritten, and a log file name that reappears after a rollback holds another instant's blocks; which blocks
count follows from the read's timeline, rollbacks and `as_of`), the table schema and merge settings, the file id
the block keys carry, and `FORMAT`. A deltacommit on the slice gives it a new key; a commit elsewhere in the
table leaves it valid. An entry is written as temp file + rename, blocks before rows: a rows file means a
complete entry (two writers of one key write the same rows). Clean removes a slice's entries with the
slice (`sweep`), so a reader pinned to a retained slice keeps its entries; of a live slice it keeps the newest
entry and those written in the last `KEEP_SECONDS` (a slice's superseded states would otherwise accumulate
until it is compacted and cleaned).

Used for snapshot reads (latest or `as_of`) when the table's `.hoodie` directory is writable - its permission
bits are honoured for root too, so a read-only table is never written to - and the Spark conf `CONF` is not
"false". Incremental reads (each range is read once) and read-only tables take the path without files.
A deltacommit writes the entries of the slice states it makes (`WRITE_OPTION`, on by default): each log append
writes its slice's entry in the write task, with the merge spec of the reads that follow the commit (the write's
instant counted as committed; `write_slice_entry`), so that the first read finds it. For the first
deltacommit on a slice (no late records: the writer drops them against the base file) the rows file is a copy of
the log's Parquet block. An entry of a write that never commits is never looked for (its blocks do not count).

Only slices whose log files hold at least `MIN_LOG_BYTES` (Spark conf `MIN_LOG_BYTES_CONF`) get entries, from
writes and reads alike: a small log is merged at read time by the Python tasks (the path without files) for less
than opening two more files costs, so a write touching many slices with a few records each (a small upsert over
hundreds of partitions) does not leave two files per slice nor make its reads open them.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import stat
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from hudilite import auxfiles
from hudilite.errors import UnsupportedTableError
from hudilite.file_group import parse_base_file_name
from hudilite.log.blocks import AvroDataBlock, ParquetDataBlock
from hudilite.log.format import try_parse_log_file_name
from hudilite.options import OVERLAY_CACHE, OVERLAY_MIN_LOG_BYTES, READ_OVERLAYS, spark_conf
from hudilite.reader.merge import SliceDesc, slice_overlay, to_spark_arrow, valid_blocks
from hudilite.reader.planner import ReadPlan
from hudilite.schema import avro_to_arrow, with_meta_fields_arrow
from hudilite.storage import is_local, relative_to, storage_for
from hudilite.version import __version__

DIR = auxfiles.relative(auxfiles.OVERLAYS)
CONF = OVERLAY_CACHE.key
# "true" (default): a deltacommit's log appends also write the overlay entries of the slices they make
WRITE_OPTION = READ_OVERLAYS.key
# slices whose log files total fewer bytes have no entries (see the module docstring)
MIN_LOG_BYTES_CONF = OVERLAY_MIN_LOG_BYTES.key
MIN_LOG_BYTES = OVERLAY_MIN_LOG_BYTES.default
# base rows superseded by log rows, as (block key, bit mask) pairs of 64-row blocks (see hudilite.spark.merge)
ROW_BITS = 32  # base files of up to 2**32 rows (Hudi base files are ~100 MB); 32-bit file ids
BLOCK_BITS = 6  # superseded rows travel as blocks of 2**6 = 64 rows: (block key, 64-bit mask)
KEY_BITS = ROW_BITS - BLOCK_BITS  # block index bits of a block key
BLOCK = "_hl_block"  # a block key
MASK = "_hl_mask"  # the bit mask of a block's superseded rows (bit i: row i of the block)
BLOCKS_ARROW = pa.schema([pa.field(BLOCK, pa.int64(), False), pa.field(MASK, pa.int64(), False)])
FORMAT = 1  # bump when the entries' content or layout changes: old entries are then never read
ROWS, BLOCKS = ".rows.parquet", ".blocks.parquet"


def enabled(spark, plan) -> bool:
    """Whether this read keeps its overlays as files (see the module docstring)."""
    return plan.query == "snapshot" and _usable(spark, plan.table)


def min_log_bytes(spark) -> int:
    """The log size from which a slice gets overlay entries (`MIN_LOG_BYTES_CONF`, else `MIN_LOG_BYTES`)."""
    return OVERLAY_MIN_LOG_BYTES.get(spark_conf(spark))


def _usable(spark, table) -> bool:
    """Overlay files not switched off (`CONF`) and the table's `.hoodie` writable."""
    if not OVERLAY_CACHE.get(spark_conf(spark)):
        return False
    meta = table.meta_path
    if not is_local(meta):
        return True  # an object store has no permission bits to look at
    try:
        mode = os.stat(meta).st_mode  # POSIX permission bits: local by nature
    except OSError:
        return False
    writable_bits = bool(mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
    return os.access(meta, os.W_OK) and (os.geteuid() != 0 or writable_bits)


def for_write(spark, table, schema_json: str, instant: str):
    """(merge spec, rows schema, `min_log_bytes`) of the snapshot reads that follow the write `instant`, whose
    commit records `schema_json`: its log appends write the overlay entries those reads look for
    (`WRITE_OPTION`). None when the table keeps no overlay files."""
    if not _usable(spark, table):
        return None
    schema = with_meta_fields_arrow(avro_to_arrow(schema_json))
    spec = ReadPlan(table, schema, [], "snapshot").merge_spec()
    return dataclasses.replace(spec, committed=spec.committed | {instant}), to_spark_arrow(schema), \
        min_log_bytes(spark)


def slice_dir(base_path: str, partition: str, file_id: str, base_instant: str) -> str:
    return os.path.join(base_path, DIR, partition, f"{file_id}_{base_instant}")


def entry_path(base_path: str, base_instant: str, desc, spec, fid: int | None, blocks: list) -> str:
    """The path prefix (without ROWS / BLOCKS) of the entry for the slice `desc` (base instant `base_instant`)
    read with `spec`; `blocks`: the slice's `merge.valid_blocks` (read from its log block headers)."""
    ident = [FORMAT, __version__, desc.partition, desc.file_id,
             os.path.basename(desc.base_path) if desc.base_path else None,
             [(os.path.basename(b.path), b.offset, b.size, b.instant_time) for b in blocks],
             hashlib.sha256(spec.schema.serialize().to_pybytes()).hexdigest(),
             spec.merge_mode, spec.ordering_field, spec.keyed, spec.int_key,
             sorted(spec.row_range) if spec.row_range is not None else None, fid]
    key = hashlib.sha256(json.dumps(ident).encode()).hexdigest()[:40]
    return os.path.join(slice_dir(base_path, desc.partition, desc.file_id, base_instant), key)


def is_complete(prefix: str) -> bool:
    return storage_for(prefix).exists(prefix + ROWS)


def write_entry(prefix: str, rows: pa.Table | bytes, block_keys: np.ndarray, masks: np.ndarray,
                rows_schema: pa.Schema, blocks_schema: pa.Schema) -> None:
    """Write one entry: the superseded blocks, then the winning rows (whose file marks the entry complete);
    `rows` as a table, or as the bytes of a parquet file holding them in `rows_schema`."""
    fs = storage_for(prefix)
    fs.makedirs(os.path.dirname(prefix))
    blocks = pa.table([pa.array(block_keys.view(np.int64)), pa.array(masks.view(np.int64))], schema=blocks_schema)
    if isinstance(rows, pa.Table) and rows.schema != rows_schema:
        rows = rows.cast(rows_schema)
    for suffix, content in ((BLOCKS, blocks), (ROWS, rows)):
        if isinstance(content, bytes):
            fs.write_bytes(prefix + suffix, content, fsync=False)
            continue
        tmp = fs.tmp_name(prefix + suffix)
        try:
            fs.write_parquet(tmp, [content], fsync=False, compression="snappy")
            fs.rename(tmp, prefix + suffix)
        except BaseException:
            fs.delete(tmp)
            raise


# A live slice's superseded entries (from before its latest deltacommit, or of a time-travel read) stay this long
# after they were written: a DataFrame planned over them may still run.
KEEP_SECONDS = 24 * 3600


def sweep(base_path: str, keep_seconds: float = KEEP_SECONDS) -> int:
    """Remove overlay files nobody needs: every entry of a file slice that no longer exists (cleaned, replaced and
    cleaned, or rolled back; also an entry a reader wrote while a clean removed its slice), and of a live slice
    the entries and leftover temp files older than `keep_seconds`, except its newest entry. Returns how many
    slice directories and entries were removed. A slice exists while its base file or one of its log files does
    (a log file names its slice's base instant in table version 6, the version written here)."""
    fs = storage_for(base_path)
    root = os.path.join(base_path, DIR)
    cutoff = time.time() - keep_seconds
    removed = 0
    stack = [root]
    while stack:
        d = stack.pop()
        try:
            dirs = fs.list_entries(d)[0]
        except (FileNotFoundError, NotADirectoryError):
            continue
        rel = relative_to(d, root)
        data_dir = os.path.join(base_path, rel) if rel else base_path
        # partition directories mirror the table's; a slice's directory has no counterpart there
        slices = [x for x in dirs if not fs.isdir(os.path.join(data_dir, x))]
        stack.extend(os.path.join(d, x) for x in sorted(dirs, reverse=True) if x not in slices)
        if not slices:
            continue
        live = set()
        for name in fs.listdir(data_dir):
            parsed = parse_base_file_name(name)
            if parsed is not None:
                live.add(f"{parsed[0]}_{parsed[2]}")
            else:
                ln = try_parse_log_file_name(name)
                if ln is not None:
                    live.add(f"{ln.file_id}_{ln.instant}")
        for x in slices:  # entries only below: not walked
            if x in live:
                removed += _prune(fs, os.path.join(d, x), cutoff)
            else:
                fs.delete_tree(os.path.join(d, x))
                removed += 1
    return removed


def _prune(fs, slice_path: str, cutoff: float) -> int:
    """Remove a live slice's entries (and temp files) written before `cutoff`, except its newest complete entry."""
    files = {e.name: e.stat().st_mtime for e in fs.scandir_files(slice_path)}
    entries = {n[: -len(ROWS)]: t for n, t in files.items() if n.endswith(ROWS) and not n.startswith(".")}
    newest = max(entries, key=entries.get) if entries else None
    removed = 0
    for key, written in entries.items():
        if key != newest and written < cutoff:
            fs.delete(os.path.join(slice_path, key + ROWS))  # the rows file first: the entry is incomplete now
            fs.delete(os.path.join(slice_path, key + BLOCKS))
            removed += 1
    for name, written in files.items():  # temp files of dead writers; blocks files of unfinished entries
        unfinished = name.endswith(BLOCKS) and name[: -len(BLOCKS)] not in entries
        if written < cutoff and (name.startswith(".") or unfinished):
            fs.delete(os.path.join(slice_path, name))
    return removed


def compute_entry(prefix: str, desc, spec, fid, blocks: list, out_schema: pa.Schema,
                   base_columns: pa.Table | None = None) -> None:
    """Compute and write the overlay entry `prefix` of the slice `desc` (`blocks`: its valid log blocks;
    `base_columns`: see `merge.read_base_keys`)."""
    ov = slice_overlay(desc, spec, blocks, base_columns)
    copy = _whole_block(blocks, ov.rows.num_rows, spec, out_schema)
    write_entry(prefix, ov.rows if copy is None else copy, *block_masks(ov, desc, fid), out_schema,
                              BLOCKS_ARROW)



def _whole_block(blocks: list, n_rows: int, spec, out_schema: pa.Schema) -> bytes | None:
    """The content of the slice's only data block when it is a Parquet block whose `n_rows` rows all win and
    whose columns are the rows file's (names and types): the rows file is then a copy of it, no encoding (the
    first deltacommit on a slice, whose late records the writer drops, gives exactly this)."""
    data = [b for b in blocks if isinstance(b, (AvroDataBlock, ParquetDataBlock))]
    if len(data) != 1 or not isinstance(data[0], ParquetDataBlock) or not n_rows:
        return None
    content = data[0].content
    f = pq.ParquetFile(pa.BufferReader(content))
    columns = [(x.name, x.type) for x in f.schema_arrow]
    if f.metadata.num_rows != n_rows or columns != [(x.name, x.type) for x in out_schema] \
            or columns != [(x.name, x.type) for x in spec.schema]:
        return None
    return content



def write_slice_entry(spec, out_schema: pa.Schema, table_path: str, partition: str, file_id: str,
                      base_file: str | None, base_instant: str, log_paths: list[str], blocks: list,
                      base_columns: pa.Table | None = None) -> str | None:
    """For a writer that appended `blocks` (written: their path, offset and size set) as the last of `log_paths`
    to the slice (`base_file`, `base_instant`): write the overlay entry a snapshot read of the slice will look
    for once the write commits (`spec`: that read's merge spec, the write's instant counted as committed). Its
    block keys use the base file's size as file id, as reads do when their base files' sizes are distinct (other
    reads compute their own). `base_columns`: see `merge.read_base_keys`. Returns the entry's prefix, None when
    no read would find it."""
    fid = storage_for(base_file).size(base_file) if base_file else None
    if fid is not None and not 0 < fid < 1 << ROW_BITS:
        return None
    desc = SliceDesc(partition, file_id, base_file, tuple(log_paths))
    # the blocks of earlier instants that count, then this write's (a new instant: no rollback targets it)
    blocks = (valid_blocks(log_paths[:-1], spec) if len(log_paths) > 1 else []) + list(blocks)
    prefix = entry_path(table_path, base_instant, desc, spec, fid, blocks)
    if not is_complete(prefix):
        compute_entry(prefix, desc, spec, fid, blocks, out_schema, base_columns)
    return prefix



def slice_blocks(desc, spec) -> list:
    """The valid log blocks of the slice `desc` read with `spec` (none without log files)."""
    return valid_blocks(desc.log_paths, spec) if desc.log_paths else []



def block_masks(ov, desc, fid) -> tuple[np.ndarray, np.ndarray]:
    """(block key, bit mask) of each 64-row block of the base file with superseded rows (uint64 arrays)."""
    if not len(ov.superseded):
        return np.zeros(0, dtype=np.uint64), np.zeros(0, dtype=np.uint64)
    if ov.superseded[-1] >> ROW_BITS:
        raise UnsupportedTableError(f"{desc.base_path}: more than 2**{ROW_BITS} rows in a base file")
    pos = ov.superseded.astype(np.uint64)  # ascending
    blocks = pos >> np.uint64(BLOCK_BITS)
    starts = np.flatnonzero(np.r_[True, blocks[1:] != blocks[:-1]])
    masks = np.bitwise_or.reduceat(np.uint64(1) << (pos & np.uint64((1 << BLOCK_BITS) - 1)), starts)
    # two's complement, as the JVM's `shiftleft(id, 26) | ((row >> 6) ^ (id & (2**26 - 1)))`
    f = np.uint64(fid)
    return (f << np.uint64(KEY_BITS)) | (blocks[starts] ^ (f & np.uint64((1 << KEY_BITS) - 1))), masks
