"""Executor-side merge-on-read append: one file group's updates and deletes -> one new log file.

Runs inside a Spark task (no Spark calls). For the current slice of a file group (base file + logs):
- rows whose key is present in the slice's merged state (base file + committed logs): updates -> one data
  block (Avro by default, Parquet with `hoodie.logfile.data.block.format=parquet`; late ones dropped),
  deletes -> delete block(s);
- rows whose key is not present (never in the group, or deleted by its logs): inserts -> a new base file in a
  new file group (the copy-on-write create path), deletes of such keys are dropped.

The log file is a new version of the slice, named as table version 6 does:
`.<fileId>_<baseInstant>.log.<version>_<writeToken>` (versions 8/9: `.<fileId>_<deltacommit>.log.1_<token>`,
attached to a slice by its completion time); its APPEND marker (named after the log file) is created
before the file. Every log file holds blocks of this one instant only, so a rollback may delete it whole. A write
never appends to an existing log file: on object stores, which cannot append, that is one put-if-absent per
file group and deltacommit (Apache Hudi's writer rolls to a new version there too), and the same file layout
as on a local table.
Log records carry the 5 meta fields; `_hoodie_file_name` holds the fileId, as Java writes it.
"""

from __future__ import annotations

import datetime as dt
import logging
import os

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from hudilite.columns import DELETE_COL, KEY_COL, PART_COL
from hudilite.errors import damaged_file
from hudilite.file_group import new_file_id, parse_base_file_name
from hudilite.log.blocks import DeleteBlock, ParquetDataBlock
from hudilite.log.format import format_log_file_name, list_log_files
from hudilite.log.vector_avro import avro_block
from hudilite.log.writer import create_log_file, version_after
from hudilite.markers import APPEND
from hudilite.options import LOG_BLOCK_FORMAT
from hudilite.reader.merge import SliceDesc, conform, slice_overlay
from hudilite.reader.overlay_cache import write_slice_entry
from hudilite.reader.planner import ReadPlan
from hudilite.schema import arrow_to_avro, avro_to_arrow, avro_to_json, with_meta_fields_arrow, with_meta_fields_avro
from hudilite.storage.local import storage_for
from hudilite.writer.context import WriteContext
from hudilite.writer.handle import (
    dedup_latest,
    dictionary_columns,
    incoming_wins,
    key_columns,
    merge_file_group,
    orders_by_event_time,
    task_info,
    with_meta,
)

log = logging.getLogger(__name__)

LOG_BLOCK_FORMAT_KEY = LOG_BLOCK_FORMAT.key


def log_schema_json(ctx: WriteContext) -> str:
    """The SCHEMA header of data blocks: the table's Avro record schema with the 5 meta fields first."""
    return avro_to_json(with_meta_fields_avro(arrow_to_avro(ctx.data_schema, ctx.table_name)))


def _ordering_type(t: pa.DataType) -> str | None:
    """Delete-block orderingVal branch for an ordering column type (None: not representable)."""
    T = pa.types
    if T.is_boolean(t):
        return "boolean"
    if T.is_int8(t) or T.is_int16(t) or T.is_int32(t) or T.is_uint8(t) or T.is_uint16(t):
        return "int"
    if T.is_integer(t):
        return "long"
    if T.is_float16(t) or T.is_float32(t):
        return "float"
    if T.is_float64(t):
        return "double"
    if T.is_string(t) or T.is_large_string(t):
        return "string"
    if T.is_binary(t) or T.is_large_binary(t):
        return "bytes"
    if T.is_date(t):
        return "date"
    if T.is_timestamp(t):
        return "timestamp-micros"
    if T.is_decimal(t):
        return "decimal"
    return None


def _delete_blocks(ctx: WriteContext, dels: pa.Table) -> list[DeleteBlock]:
    """Delete blocks for `dels` (key + partition + data columns). Deletes carry the natural ordering value
    (int 0: they win against older records) unless the write orders by event time and the delete row holds an
    ordering value, which then decides against the stored record (the `delete` operation always wins). One
    block per ordering-value branch."""
    keys = dels.column(KEY_COL).to_pylist()
    parts = dels.column(PART_COL).to_pylist()
    pcf = ctx.precombine_field
    kind = None
    if ctx.event_time and not ctx.delete_operation and pcf and pcf in dels.column_names:
        kind = _ordering_type(ctx.data_schema.field(pcf).type) if pcf in ctx.data_schema.names else None
    ordered, natural = [], []
    if kind is not None:
        vals = dels.column(pcf).to_pylist()
        for k, p, v in zip(keys, parts, vals):
            if v is None:
                natural.append((k, p, None))
            else:
                if isinstance(v, dt.datetime) and v.tzinfo is None:
                    v = v.replace(tzinfo=dt.timezone.utc)
                ordered.append((k, p, v))
    else:
        natural = [(k, p, None) for k, p in zip(keys, parts)]
    out = []
    if natural:
        out.append(DeleteBlock.from_keys(natural, ctx.instant, ordering_type="int"))
    if ordered:
        out.append(DeleteBlock.from_keys(ordered, ctx.instant, ordering_type=kind))
    return out


def _log_rows(ctx: WriteContext, rows: pa.Table, fid: str, pid: int) -> pa.Table:
    """Incoming rows -> log records: file schema, fresh commit time and seqno, `_hoodie_file_name` = fileId."""
    return with_meta(rows, ctx, fid, pid, 0)


def append_file_group(ctx: WriteContext, partition: str, fid: str, base_path: str | None, base_instant: str,
                      incoming: pa.Table, block_format: str = "parquet", slice_logs: tuple[str, ...] | None = None
                      ) -> list[dict]:
    """Append one file group's changes of this write as a new log file of its current slice; inserts of keys
    the group does not hold go to a new file group. Returns the write stats.

    `slice_logs` (table version 8/9): the slice's committed log files, as the file system view attached them by
    completion time; the new log file is then named with this write's instant (`.<fileId>_<instant>.log.1_*`),
    not the base instant, and belongs to whichever slice its completion time falls in."""
    pid, stage, attempt = task_info()
    nulls = incoming.column(KEY_COL).null_count
    if nulls:
        raise ValueError(f"HUDILITE_INVALID_INPUT: {ctx.null_key_message(nulls)}")
    incoming = dedup_latest(incoming, ctx)
    is_del = incoming.column(DELETE_COL).to_numpy(zero_copy_only=False).astype(bool)
    directory = os.path.join(ctx.base_path, partition) if partition else ctx.base_path
    by_instant = slice_logs is not None
    if by_instant:
        prior = []
    else:
        prior = list_log_files(directory, fid, base_instant) if storage_for(directory).isdir(directory) else []
    late = np.zeros(incoming.num_rows, dtype=bool)
    # the base file is the slice's own, not the previous slice's behind a pending compaction (whose logs the
    # read of this slice merges too)
    own_base = base_path is None or \
        (parse_base_file_name(os.path.basename(base_path)) or (None,) * 3)[2] == base_instant
    # this append writes its slice's overlay entry (not on 8/9: the entry is keyed by the slice's base instant
    # and log files, which a deltacommit completing after a compaction was planned moves to the next slice)
    entry = own_base and ctx.overlays is not None and not by_instant
    if base_path is not None:
        with damaged_file(base_path):
            pf = storage_for(base_path).parquet_file(base_path)
        key = ctx.int_key if ctx.int_key in pf.schema_arrow.names else "_hoodie_record_key"
        ordered = orders_by_event_time(ctx, incoming) and ctx.precombine_field in pf.schema_arrow.names
        # (the overlay entry uses the ordering column too)
        base_cols = pf.read(columns=list(dict.fromkeys([key, ctx.precombine_field] if ordered else [key])))
        # The current record of a key is the merge of the base file and the logs a read of this slice merges
        # (behind a pending compaction: the previous slice's logs too). A key they deleted is absent: its
        # re-insert takes the insert path (a new file group), as on copy-on-write, so no reader ever folds a
        # delete and a later record of the same key in one slice (Java and hudi-rs keep the delete's ordering
        # value then, a compaction does not: answers would depend on the reader and on compaction timing).
        # An update or ordered delete that loses against the current record (a late record) changes nothing
        # and is not written: a late delete whose ordering value is 0 would read as a natural delete (Apache
        # Hudi's sentinel for "no ordering value") and delete the newer record.
        if by_instant:
            logs = list(slice_logs or ())
        else:
            logs = ([] if own_base else _previous_logs(directory, fid, base_path)) + \
                [os.path.join(directory, f.name) for f in prior]
        stored = _merged_state(ctx, partition, fid, base_path, logs, base_cols) if logs else base_cols
        stored_keys, inc_keys = key_columns(ctx, stored, incoming)
        at = pc.index_in(inc_keys, value_set=stored_keys.combine_chunks())
        held = at.is_valid().to_numpy(zero_copy_only=False)
        if ordered:
            m_inc = np.flatnonzero(held)
            m_old = at.drop_null().to_numpy(zero_copy_only=False).astype(np.int64)
            try:
                lost = m_inc[~incoming_wins(ctx, incoming, stored, m_inc, m_old, is_del)]
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
                lost = m_inc[:0]  # ordering values not comparable here: every update is logged, reads decide
            late[lost] = True
    else:  # a log-only group: whatever the index routed here belongs to it
        held = np.ones(incoming.num_rows, dtype=bool)
    stats: list[dict] = []
    inserts = incoming.filter(pa.array(~held & ~is_del))
    if inserts.num_rows:
        st = merge_file_group(ctx, partition, new_file_id(), None, None, inserts)
        if st:
            stats.append(st)
    upd = incoming.filter(pa.array(held & ~is_del & ~late))
    dels = incoming.filter(pa.array(held & is_del & ~late))
    if upd.num_rows == 0 and dels.num_rows == 0:
        return stats

    blocks = []
    if upd.num_rows:
        records = _log_rows(ctx, upd, fid, pid)
        schema_json = log_schema_json(ctx)
        if block_format == "parquet":
            blocks.append(ParquetDataBlock.from_table(records, ctx.instant, schema=schema_json,
                                                      compression=ctx.compression,
                                                      use_dictionary=dictionary_columns(records)))
        else:
            blocks.append(avro_block(records, schema_json, ctx.instant))  # numpy encoding, fastavro fallback
    if dels.num_rows:
        blocks.extend(_delete_blocks(ctx, dels))

    fs = storage_for(directory)
    fs.makedirs(directory)
    token = f"{pid}-{stage}-{attempt}"
    version = version_after(prior)
    while True:
        name = format_log_file_name(fid, ctx.instant if by_instant else base_instant, version, token)
        if not fs.exists(os.path.join(directory, name)):
            break
        version += 1
    ctx.markers().create(partition, name, APPEND)
    path = os.path.join(directory, name)
    locations = create_log_file(path, blocks, fsync=ctx.fsync)
    size = fs.size(path)
    # (not behind a pending compaction: no read would find that entry; not for small logs: reads merge them)
    if entry and size + sum(fs.size(os.path.join(directory, f.name)) for f in prior) >= ctx.overlays[2]:
        for b, loc in zip(blocks, locations):
            b.path, b.offset, b.size = loc.path, loc.offset, loc.size
        _write_overlay_entry(ctx, partition, fid, base_path, base_instant,
                             [os.path.join(directory, f.name) for f in prior] + [path], blocks,
                             base_cols if base_path is not None else None)
    rel = f"{partition}/{name}" if partition else name
    base_name = os.path.basename(base_path) if base_path else ""
    n_upd, n_del = upd.num_rows, dels.num_rows
    stats.append({
        "fileId": fid, "path": rel, "prevCommit": base_instant, "partitionPath": partition,
        "numWrites": n_upd, "numDeletes": n_del, "numUpdateWrites": n_upd, "numInserts": 0,
        "totalWriteBytes": size, "totalWriteErrors": 0, "fileSizeInBytes": size, "tempPath": None,
        "minEventTime": None, "maxEventTime": None,
        "baseFile": base_name, "logFiles": [name], "logVersion": version,
        "logOffset": locations[0].offset if locations else 0,
        "totalLogRecords": 0, "totalLogFilesCompacted": 0, "totalLogSizeCompacted": 0,
        "totalUpdatedRecordsCompacted": 0, "totalLogBlocks": len(blocks), "totalCorruptLogBlock": 0,
        "totalRollbackBlocks": 0, "numIgnored": int(late.sum()),
    })
    return stats


def _previous_logs(directory: str, fid: str, base_path: str) -> list[str]:
    """Behind a pending compaction: the log files of the slice the base file starts (the compaction folds them
    in; until it completes reads merge them before the compaction slice's logs)."""
    base_instant = (parse_base_file_name(os.path.basename(base_path)) or (None,) * 3)[2]
    return [os.path.join(directory, f.name) for f in list_log_files(directory, fid, base_instant)] \
        if base_instant else []


def _merged_state(ctx: WriteContext, partition: str, fid: str, base_path: str, logs: list[str],
                  base_cols: pa.Table) -> pa.Table:
    """`base_cols` (key and ordering columns of the base file) of the keys present after merging the `logs`
    (committed blocks only): base rows no log record supersedes, plus the winning log records."""
    spec = ctx.state_spec
    if spec is None:
        raise ValueError("HUDILITE_INTERNAL: a merge-on-read append needs the write context's state_spec")
    ov = slice_overlay(SliceDesc(partition, fid, base_path, tuple(logs)), spec, base_columns=base_cols)
    keep = np.ones(base_cols.num_rows, dtype=bool)
    keep[ov.superseded] = False
    want = pa.schema([spec.schema.field(c) if c in spec.schema.names else base_cols.schema.field(c)
                      for c in base_cols.column_names])
    return pa.concat_tables([conform(base_cols.filter(pa.array(keep)), want), conform(ov.rows, want)])


def state_spec(table, schema_json: str):
    """The MergeSpec that gives a merge-on-read write the current records of the slices it appends to (the
    committed table it builds on)."""
    return ReadPlan(table, with_meta_fields_arrow(avro_to_arrow(schema_json)), [], "snapshot").merge_spec()


def _write_overlay_entry(ctx: WriteContext, partition: str, fid: str, base_path: str | None, base_instant: str,
                         log_paths: list[str], blocks: list, base_columns: pa.Table | None) -> None:
    """Write the merged-read overlay entry of the slice state this log file (`blocks`, written) makes
    (`reader/overlay_cache.py`), so that the first snapshot read after the commit finds it. A cache: failing to
    write it is logged, never fails the write (a read computes what it does not find)."""
    spec, out_schema, _ = ctx.overlays
    try:
        write_slice_entry(spec, out_schema, ctx.base_path, partition, fid, base_path, base_instant, log_paths,
                          blocks, base_columns)
    except Exception:  # noqa: BLE001 - see above
        log.warning("overlay entry of file group %s not written", fid, exc_info=True)


def block_format_option(options: dict) -> str:
    """`hoodie.logfile.data.block.format`: parquet (default: a columnar block encodes and decodes at a fraction of
    the cost of Avro records; Apache Hudi and hudi-rs read both) or avro (Java's default)."""
    return LOG_BLOCK_FORMAT.get(options)

