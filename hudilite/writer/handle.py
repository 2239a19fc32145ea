"""Executor-side file writing with Arrow: merge one file group, or stream new base files.

Runs inside Spark tasks (Python workers); no Spark calls here. Every data file gets its marker before it
is opened.
"""

from __future__ import annotations

import itertools
import json
import os
import secrets
import sys
import threading

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from hudilite import change_images
from hudilite.columns import DELETE_COL, KEY_COL, META_FIELDS, MOVED_COL, PART_COL, SEQ_COL
from hudilite.errors import damaged_file
from hudilite.file_group import base_file_name, new_file_id
from hudilite.keygen import partition_path_problem
from hudilite.markers import CREATE, MERGE
from hudilite.schema import cast_table_to_schema, nan_rank, ordering_at_least, storage_schema, to_storage
from hudilite.storage.local import storage_for
from hudilite.writer.context import WriteContext

STAT_SCHEMA = pa.schema([pa.field("stat", pa.string())])


_LOCAL_TOKENS = {"pid": None, "stage": 0, "next": None}
_LOCAL_TOKENS_LOCK = threading.Lock()


def _process_tokens() -> dict:
    """This process's random number (1 .. 2^31-1: Java parses each token field as an int) and attempt counter,
    re-drawn after a fork."""
    with _LOCAL_TOKENS_LOCK:
        if _LOCAL_TOKENS["pid"] != os.getpid():
            _LOCAL_TOKENS.update(pid=os.getpid(), stage=secrets.randbelow(2 ** 31 - 1) + 1,
                                 next=itertools.count(1))
        return _LOCAL_TOKENS


def _local_attempt() -> tuple[int, int]:
    """(stage, attempt) for a file written outside Spark (driver-local writes, table services): a random
    per-process number and a per-process counter, so no two driver-local writers - threads, processes, machines
    - compute the same file name (log files are named by the slice, not the writer's instant: a shared name
    would let one writer's rollback delete the other's log)."""
    tokens = _process_tokens()
    with _LOCAL_TOKENS_LOCK:
        return tokens["stage"], next(tokens["next"])


def task_info() -> tuple[int, int, int]:
    """The write token fields `(partition, stage, attempt)`, unique to this call's task attempt across processes
    and Spark applications. In a Spark task: (partition id, this Python worker's random number, task attempt
    id). Spark's stage and task attempt ids are counters that restart at 0 in every application, so two
    applications writing one table (two instances of a job) would name the log file they append to a slice
    alike (`<fileId>_<baseInstant>.log.<version>_<token>`, same version when both list the slice before either
    appends) and append into one file, whose rollback by the loser could then delete the winner's blocks. The
    attempt id keeps tasks of one application apart, the per-process number applications. Outside Spark:
    (0, the random per-process number, a fresh counter value) (see `_local_attempt`)."""
    # A Spark Python worker has pyspark loaded; a process without it is no Spark task (and need not import it).
    pyspark = sys.modules.get("pyspark")
    try:
        tc = pyspark.TaskContext.get() if pyspark is not None else None
        if tc is not None:
            return tc.partitionId(), _process_tokens()["stage"], tc.taskAttemptId()
    except Exception:  # noqa: BLE001 - not in a Spark worker
        pass
    return (0, *_local_attempt())


def sort_indices(tbl: pa.Table, keys: list[tuple[str, str]], nulls: str) -> pa.Array:
    """`pc.sort_indices` with nulls placed `nulls` ("at_start"/"at_end") for every key: per sort key where pyarrow
    takes it that way (the table-wide `null_placement` is deprecated since pyarrow 25), else table-wide."""
    try:
        return pc.sort_indices(tbl, sort_keys=[(name, order, nulls) for name, order in keys])
    except (TypeError, ValueError, pa.ArrowInvalid):  # pyarrow before per-key null placement
        return pc.sort_indices(tbl, sort_keys=keys, null_placement=nulls)


_NAN_RANK = "_hl_nan_rank"  # a sort key only
_PART_CODE = "_hl_part_code"  # a sort key only


def dedup_latest(tbl: pa.Table, ctx: WriteContext, *, per_partition: bool = False) -> pa.Table:
    """Collapse rows with the same record key to one: the highest precombine value (event time), ties and
    commit-time mode to the latest arrival (`_hl_seq`). `per_partition`: rows with one key in two partitions
    stay two (a partition-scoped index keys records by (partition, key))."""
    if tbl.num_rows <= 1:
        return tbl
    work = tbl
    keys = []
    if per_partition and PART_COL in tbl.column_names and pc.count_distinct(tbl.column(PART_COL)).as_py() > 1:
        # the partition's code (order of first appearance) groups as the path does, and sorts as an int
        codes = pc.dictionary_encode(tbl.column(PART_COL).combine_chunks()).indices
        work = work.append_column(_PART_CODE, codes)
        keys.append((_PART_CODE, "ascending"))
    keys.append((ctx.int_key if ctx.int_key in tbl.column_names else KEY_COL, "ascending"))
    if ctx.event_time and ctx.precombine_field and ctx.precombine_field in tbl.column_names:
        nan = nan_rank(tbl.column(ctx.precombine_field))
        if nan is not None:  # NaN above every number
            work = work.append_column(_NAN_RANK, nan)
            keys.append((_NAN_RANK, "ascending"))
        keys.append((ctx.precombine_field, "ascending"))
    keys.append((SEQ_COL, "ascending"))
    order = sort_indices(work, keys, "at_start")
    t = tbl.take(order)
    last = np.zeros(t.num_rows, dtype=bool)
    last[-1] = True
    grouping = keys[:2] if keys[0][0] == _PART_CODE else keys[:1]
    for name, _ in grouping:  # a row is its group's last where the next row has another key or partition
        k = (work.column(name).take(order) if name == _PART_CODE else t.column(name)).combine_chunks()
        last[:-1] |= pc.not_equal(k.slice(0, len(k) - 1), k.slice(1)).to_numpy(zero_copy_only=False)
    if last.all():
        return t
    return t.filter(pa.array(last))


def newest_per_key(tbl: pa.Table, record_key: list[str], precombine: str | None,
                   arrival: str | None = None) -> pa.Table:
    """Each record key's newest row of `tbl` (`hudilite.write.newest.per.key`): the highest `precombine`
    value (nulls lowest), then the latest arrival - the values of the column `arrival`, else the row order.
    What `hudilite.sql_merge.latest_per_key` computes in Spark; null keys are one key, as there. The rows
    kept stay in their order."""
    n = tbl.num_rows
    if n <= 1 or not record_key:
        return tbl
    pos = pa.array(np.arange(n, dtype=np.int64))
    cols = {f"k{i}": tbl.column(k) for i, k in enumerate(record_key)}
    nan = nan_rank(tbl.column(precombine)) if precombine else None
    order = ([("nan", "descending")] if nan is not None else []) + ([("pc", "descending")] if precombine else []) \
        + [("arrival", "descending")]
    work = pa.table({**cols, **({"nan": nan} if nan is not None else {}),
                     **({"pc": tbl.column(precombine)} if precombine else {}),
                     "arrival": tbl.column(arrival) if arrival else pos, "pos": pos})
    ranked = work.take(sort_indices(work, order, "at_end"))
    ranked = ranked.append_column("rank", pa.array(np.arange(n, dtype=np.int64)))
    first = ranked.select([*cols, "rank"]).group_by(list(cols), use_threads=False).aggregate([("rank", "min")])
    if first.num_rows == n:
        return tbl
    kept = ranked.column("pos").take(first.column("rank_min"))
    return tbl.take(kept.take(pc.sort_indices(kept)))


def key_columns(ctx: WriteContext, stored: pa.Table, incoming: pa.Table) -> tuple[pa.ChunkedArray, pa.ChunkedArray]:
    """The columns that identify the records of `stored` rows and `incoming` rows, of one type: a simple
    integer record key compares as int64 (hashing integers costs a fraction of hashing the key strings), any
    other key as the `_hoodie_record_key` strings."""
    c = ctx.int_key
    if c and c in stored.column_names and c in incoming.column_names:
        return stored.column(c).cast(pa.int64()), incoming.column(c).cast(pa.int64())
    return stored.column("_hoodie_record_key").cast(pa.string()), incoming.column(KEY_COL)


def const_string(value: str, n: int) -> pa.Array:
    return pa.array([value], pa.string()).take(pa.array(np.zeros(n, dtype=np.int32)))


def _meta_for_new_rows(n: int, ctx: WriteContext, file_name: str, pid: int, start: int) -> dict:
    counters = pc.cast(pa.array(np.arange(start, start + n, dtype=np.int64)), pa.string())
    seq = pc.binary_join_element_wise(const_string(f"{ctx.instant}_{pid}_", n), counters, "")
    return {
        "_hoodie_commit_time": const_string(ctx.instant, n),
        "_hoodie_commit_seqno": seq,
        "_hoodie_file_name": const_string(file_name, n),
    }


def with_meta(rows: pa.Table, ctx: WriteContext, file_name: str, pid: int, start: int) -> pa.Table:
    """Incoming rows (data + key + partition columns) -> rows in file schema with fresh meta values."""
    meta = _meta_for_new_rows(rows.num_rows, ctx, file_name, pid, start)
    data = cast_table_to_schema(rows.select([c for c in ctx.data_schema.names if c in rows.column_names]),
                                ctx.data_schema)
    cols = {
        "_hoodie_commit_time": meta["_hoodie_commit_time"],
        "_hoodie_commit_seqno": meta["_hoodie_commit_seqno"],
        "_hoodie_record_key": rows.column(KEY_COL),
        "_hoodie_partition_path": rows.column(PART_COL),
        "_hoodie_file_name": meta["_hoodie_file_name"],
    }
    arrays = [cols[m] for m in META_FIELDS] + [data.column(i) for i in range(data.num_columns)]
    return pa.Table.from_arrays(arrays, schema=ctx.file_schema)


def _footer_metadata(keys: pa.ChunkedArray) -> dict[bytes, bytes]:
    if len(keys) == 0:
        return {}
    mm = pc.min_max(keys)
    return {
        b"hoodie_min_record_key": str(mm["min"].as_py()).encode(),
        b"hoodie_max_record_key": str(mm["max"].as_py()).encode(),
    }


_HIGH_CARDINALITY_META = ("_hoodie_commit_seqno", "_hoodie_record_key")
_DICT_SAMPLE_ROWS = 16384
_DICT_PROBE_ROWS = 2048  # a first look: clearly low or clearly high cardinality decides without the sample


def dictionary_columns(table: pa.Table) -> list[str]:
    """The columns worth dictionary encoding: primitive columns with few distinct values in a sample of the
    rows. Dictionary-encoding high-cardinality columns (unique keys, seqnos, payloads) doubles the write time
    and ends in plain encoding anyway once the dictionary page overflows."""
    n = min(table.num_rows, _DICT_SAMPLE_ROWS)
    out = []
    for f in table.schema:
        if f.name in _HIGH_CARDINALITY_META or pa.types.is_boolean(f.type) or pa.types.is_nested(f.type):
            continue
        if n == 0:
            out.append(f.name)
            continue
        col = table.column(f.name)
        m = min(n, _DICT_PROBE_ROWS)
        d = pc.count_distinct(col.slice(0, m)).as_py()
        if m < n and d > m * 9 // 10:  # mostly distinct (keys, payloads, measurements)
            continue
        if (d <= m // 8 and m < n) or pc.count_distinct(col.slice(0, n)).as_py() <= max(n // 4, 1):
            out.append(f.name)
    return out


def write_parquet(path: str, table: pa.Table, ctx: WriteContext, *, new_rows_from: int | None = None) -> int:
    """Write one base file. `new_rows_from`: the rows from this index on are this commit's (a merge puts the
    carried-over rows first); they start a row group of their own, so the row-group statistics on
    `_hoodie_commit_time` let incremental reads skip every row group of unchanged rows."""
    table = to_storage(table).replace_schema_metadata({**(table.schema.metadata or {}), **_footer_metadata(
        table.column("_hoodie_record_key"))})
    opts = dict(compression=ctx.compression, write_statistics=True, use_dictionary=dictionary_columns(table))
    if not new_rows_from or new_rows_from >= table.num_rows:
        parts = [table]
    else:
        parts = [table.slice(0, new_rows_from), table.slice(new_rows_from)]
    return storage_for(path).write_parquet(path, parts, row_group_size=ctx.row_group_rows, fsync=ctx.fsync,
                                           **opts)


def _stat(ctx: WriteContext, partition: str, fid: str, name: str, size: int, *, prev: str, writes: int,
          inserts: int, updates: int, deletes: int, ignored: int = 0) -> dict:
    rel = f"{partition}/{name}" if partition else name
    return {
        "fileId": fid, "path": rel, "prevCommit": prev, "partitionPath": partition,
        "numWrites": writes, "numDeletes": deletes, "numUpdateWrites": updates, "numInserts": inserts,
        "totalWriteBytes": size, "totalWriteErrors": 0, "fileSizeInBytes": size, "tempPath": None,
        "minEventTime": None, "maxEventTime": None, "totalLogRecords": 0, "totalLogFilesCompacted": 0,
        "totalLogSizeCompacted": 0, "totalUpdatedRecordsCompacted": 0, "totalLogBlocks": 0,
        "totalCorruptLogBlock": 0, "totalRollbackBlocks": 0, "numIgnored": ignored,
    }


def orders_by_event_time(ctx: WriteContext, incoming: pa.Table) -> bool:
    """Whether incoming records are decided against stored ones by the precombine field."""
    return bool(ctx.event_time and ctx.precombine_field and ctx.precombine_field in incoming.column_names)


def incoming_wins(ctx: WriteContext, incoming: pa.Table, stored: pa.Table, m_inc: np.ndarray, m_old: np.ndarray,
                  is_del: np.ndarray) -> np.ndarray:
    """For each matched pair (incoming row m_inc[i], stored row m_old[i]) whether the incoming record replaces
    the stored one: under event-time ordering a higher or equal ordering value wins (a null on either side: the
    incoming record); the delete operation, and deletes without an ordering value, always win."""
    if not (orders_by_event_time(ctx, incoming) and len(m_old)):
        return np.ones(len(m_old), dtype=bool)
    inc_pc = incoming.column(ctx.precombine_field).take(pa.array(m_inc))
    old_pc = stored.column(ctx.precombine_field).take(pa.array(m_old))
    if inc_pc.type != old_pc.type:
        inc_pc = inc_pc.cast(old_pc.type)
    wins = pc.fill_null(ordering_at_least(inc_pc, old_pc), True).to_numpy(zero_copy_only=False)
    no_order = pc.is_null(inc_pc).to_numpy(zero_copy_only=False)
    wins |= is_del[m_inc] & (no_order | ctx.delete_operation)
    return wins


def merge_file_group(ctx: WriteContext, partition: str, fid: str, old_path: str | None, old_instant: str | None,
                     incoming: pa.Table) -> dict | None:
    """Copy-on-write merge of one file group: stored rows + this batch's rows for it -> one new base file.

    Unchanged rows keep their meta values (commit time, seqno) and come first; changed and inserted rows
    follow, so row groups holding only old rows can be skipped by incremental reads. Returns the write stat,
    or None when nothing changes (no file written).
    """
    pid, stage, attempt = task_info()
    token = f"{pid}-{stage}-{attempt}"
    nulls = incoming.column(KEY_COL).null_count
    if nulls:  # the profile rejects these; a non-deterministic input could still produce them here
        raise ValueError(f"HUDILITE_INVALID_INPUT: {ctx.null_key_message(nulls)}")
    incoming = dedup_latest(incoming, ctx)
    is_del = incoming.column(DELETE_COL).to_numpy(zero_copy_only=False).astype(bool)
    # global index: rows that are one side of a key changing partition (the new row / the old row's delete)
    moved = incoming.column(MOVED_COL).to_numpy(zero_copy_only=False).astype(bool) \
        if MOVED_COL in incoming.column_names else np.zeros(incoming.num_rows, dtype=bool)
    name = base_file_name(fid, token, ctx.instant)

    if old_path is None:
        ins = incoming.filter(pa.array(~is_del))
        if ins.num_rows == 0:
            return None
        ctx.markers().create(partition, name, CREATE)
        mv = moved[~is_del]
        if mv.any():  # moved rows first: their change images are updates
            order = np.concatenate([np.flatnonzero(mv), np.flatnonzero(~mv)])
            ins = ins.take(pa.array(order, pa.int64()))
        out = with_meta(ins, ctx, name, pid, 0)
        size = write_parquet(_data_path(ctx, partition, name), out, ctx)
        stat = _stat(ctx, partition, fid, name, size, prev="null", writes=out.num_rows, inserts=out.num_rows,
                     updates=0, deletes=0)
        if ctx.change_images and mv.any():
            n_mv = int(mv.sum())
            stat[change_images.STAT_IMAGES] = change_images.write(
                ctx.base_path, ctx.instant, fid, token,
                [(change_images.UPDATE, out.slice(0, n_mv)), (change_images.INSERT, out.slice(n_mv))],
                ctx.compression)
        elif ctx.change_images:  # every row of a new group is an insert: its base file is its change images
            stat[change_images.STAT_INSERTED] = True
        return stat

    with damaged_file(old_path):
        old = storage_for(old_path).read_parquet(old_path)
    old = cast_table_to_schema(old, ctx.file_schema)
    old_keys, inc_keys = key_columns(ctx, old, incoming)
    pos = pc.index_in(old_keys, value_set=inc_keys.combine_chunks())
    matched = pos.is_valid().to_numpy(zero_copy_only=False)
    m_old = np.nonzero(matched)[0]
    m_inc = pos.drop_null().to_numpy(zero_copy_only=False).astype(np.int64)
    wins = incoming_wins(ctx, incoming, old, m_inc, m_old, is_del)
    win_inc = m_inc[wins]
    upd_inc = win_inc[~is_del[win_inc]]
    del_inc = win_inc[is_del[win_inc]]
    seen = np.zeros(incoming.num_rows, dtype=bool)
    seen[m_inc] = True
    ins_inc = np.nonzero(~seen & ~is_del)[0]
    ignored = int(len(m_inc) - len(win_inc))
    if len(upd_inc) == 0 and len(del_inc) == 0 and len(ins_inc) == 0:
        # nothing to write; still report the records that lost against stored versions
        return {"fileId": fid, "countOnly": True, "numIgnored": ignored} if ignored else None

    won = m_old[wins]  # stored rows replaced: by updates (upd_old, in upd_inc's order) or deletes
    upd_old = won[~is_del[win_inc]]
    keep_old = np.ones(old.num_rows, dtype=bool)
    keep_old[won] = False
    kept = old.filter(pa.array(keep_old))
    kept = kept.set_column(kept.schema.get_field_index("_hoodie_file_name"), "_hoodie_file_name",
                           const_string(name, kept.num_rows))
    ins_inc = np.concatenate([ins_inc[moved[ins_inc]], ins_inc[~moved[ins_inc]]])  # moved in: images are updates
    changed_idx = np.concatenate([upd_inc, ins_inc])
    changed_src = incoming.take(pa.array(changed_idx, pa.int64()))
    changed = with_meta(changed_src, ctx, name, pid, 0)
    if ctx.partial_update and len(upd_inc):
        changed = _carry_missing_columns(ctx, changed, old, upd_old, len(upd_inc))
    out = pa.concat_tables([kept, changed])
    ctx.markers().create(partition, name, MERGE)
    size = write_parquet(_data_path(ctx, partition, name), out, ctx, new_rows_from=kept.num_rows)
    stat = _stat(ctx, partition, fid, name, size, prev=old_instant or "null", writes=out.num_rows,
                 inserts=len(ins_inc), updates=len(upd_inc), deletes=len(del_inc), ignored=ignored)
    if ctx.change_images:
        n_upd = len(upd_inc) + int(moved[ins_inc].sum())
        gone, gone_moved = won[is_del[win_inc]], moved[del_inc]  # a key moved out: the before image of its update
        parts = [(change_images.UPDATE, changed.slice(0, n_upd)), (change_images.INSERT, changed.slice(n_upd)),
                 (change_images.BEFORE, old.take(pa.array(np.concatenate([upd_old, gone[gone_moved]]), pa.int64()))),
                 (change_images.DELETE, old.take(pa.array(gone[~gone_moved], pa.int64())))]
        stat[change_images.STAT_IMAGES] = change_images.write(ctx.base_path, ctx.instant, fid, token, parts,
                                                              ctx.compression, fsync=ctx.fsync)
    return stat


def _carry_missing_columns(ctx: WriteContext, changed: pa.Table, old: pa.Table, old_pos: np.ndarray,
                           n_upd: int) -> pa.Table:
    """Partial update: for updated rows (the first n_upd of `changed`), columns absent from the batch keep
    the stored values."""
    missing = [c for c in ctx.data_schema.names if c not in ctx.incoming_columns]
    if not missing:
        return changed
    for c in missing:
        i = changed.schema.get_field_index(c)
        stored = old.column(c).take(pa.array(old_pos))
        rest = changed.column(c).slice(n_upd)
        col = pa.chunked_array(stored.chunks + rest.chunks, type=changed.schema.field(c).type)
        changed = changed.set_column(i, changed.schema.field(c), col)
    return changed


def _data_path(ctx: WriteContext, partition: str, name: str) -> str:
    d = os.path.join(ctx.base_path, partition) if partition else ctx.base_path
    storage_for(ctx.base_path).makedirs(d)
    return os.path.join(d, name)


def stats_table(stats: list[dict]) -> pa.Table:
    return pa.table({"stat": pa.array([json.dumps(s) for s in stats], pa.string())}, schema=STAT_SCHEMA)


class StreamingBaseFileWriter:
    """Bulk insert on one task: rows of any partitions stream into one open file per partition, rolled over
    at the target file size (measured on the bytes actually written)."""

    def __init__(self, ctx: WriteContext, file_ids=None):
        self.ctx = ctx
        self.pid, self.stage, self.attempt = task_info()
        self.markers = ctx.markers()
        self._new_fid = file_ids or new_file_id
        self.open: dict[str, dict] = {}
        self.stats: list[dict] = []
        self.counter = 0

    def _open(self, partition: str) -> dict:
        problem = partition_path_problem(partition, self.ctx.partition_depth, self.ctx.url_encoded,
                                         self.ctx.hive_style)  # bulk inserts are not profiled
        if problem:
            raise ValueError(f"HUDILITE_INVALID_INPUT: {problem}")
        fid = self._new_fid()
        name = base_file_name(fid, f"{self.pid}-{self.stage}-{self.attempt}", self.ctx.instant)
        self.markers.create(partition, name, CREATE)
        path = _data_path(self.ctx, partition, name)
        sink = storage_for(path).create_data_file(path)
        st = {"fid": fid, "name": name, "path": path, "sink": sink, "writer": None, "rows": 0, "pending": [],
              "pending_rows": 0, "min": None, "max": None}
        self.open[partition] = st
        return st

    def write(self, rows: pa.Table) -> None:
        """`rows`: data columns + _hoodie_record_key + _hoodie_partition_path."""
        if rows.num_rows == 0:
            return
        parts = rows.column(PART_COL)
        uniq = pc.unique(parts)
        for p in uniq.to_pylist():
            sub = rows if len(uniq) == 1 else rows.filter(pc.equal(parts, p))
            st = self.open.get(p) or self._open(p)
            st["pending"].append(sub)
            st["pending_rows"] += sub.num_rows
            if st["pending_rows"] >= self.ctx.row_group_rows:
                self._flush(p, st)

    def _flush(self, partition: str, st: dict) -> None:
        if not st["pending"]:
            return
        rows = pa.concat_tables(st["pending"])
        st["pending"], st["pending_rows"] = [], 0
        out = to_storage(with_meta(rows, self.ctx, st["name"], self.pid, self.counter))
        self.counter += out.num_rows
        keys = out.column("_hoodie_record_key")
        if len(keys):
            mm = pc.min_max(keys)
            lo, hi = mm["min"].as_py(), mm["max"].as_py()
            st["min"] = lo if st["min"] is None else min(st["min"], lo)
            st["max"] = hi if st["max"] is None else max(st["max"], hi)
        if st["writer"] is None:
            st["writer"] = pq.ParquetWriter(st["sink"], storage_schema(self.ctx.file_schema),
                                            compression=self.ctx.compression, use_dictionary=dictionary_columns(out))
        st["writer"].write_table(out, row_group_size=self.ctx.row_group_rows)
        st["rows"] += out.num_rows
        if st["sink"].tell() >= self.ctx.target_file_bytes:
            self._close(partition)

    def _close(self, partition: str) -> None:
        st = self.open.pop(partition)
        if st["writer"] is None:  # no rows reached the file (cannot happen through write(); stay valid anyway)
            st["writer"] = pq.ParquetWriter(st["sink"], storage_schema(self.ctx.file_schema),
                                            compression=self.ctx.compression)
        if st["min"] is not None:
            st["writer"].add_key_value_metadata(
                {"hoodie_min_record_key": str(st["min"]), "hoodie_max_record_key": str(st["max"])})
        st["writer"].close()
        st["sink"].close()
        if self.ctx.fsync:
            storage_for(st["path"]).fsync_file(st["path"])
        size = storage_for(st["path"]).size(st["path"])
        self.stats.append(_stat(self.ctx, partition, st["fid"], st["name"], size, prev="null", writes=st["rows"],
                                inserts=st["rows"], updates=0, deletes=0))

    def close(self) -> list[dict]:
        for p in list(self.open):
            self._flush(p, self.open[p])
            if p in self.open:
                self._close(p)
        return self.stats
