"""Global index (Apache Hudi's `GLOBAL_BLOOM` / `GLOBAL_SIMPLE`): a record key is unique in the whole table.

`hoodie.index.type` chooses the scope of the key lookup: `BLOOM` / `SIMPLE` (hudilite's default) look a key up
in the partition its row names (the same key in two partitions is two records), `GLOBAL_BLOOM` /
`GLOBAL_SIMPLE` look it up in every partition. Both kinds of each scope are served by the same key-range
index (`range_index.py`); the names are Hudi's so that options carry over. Apache Hudi keeps the index type a
write option (it is not in `hoodie.properties`), and so does hudilite: writers that disagree give the table
the semantics of each write (a partition-scoped write of a key stored elsewhere inserts a second record).

A global write turns the batch into a partition-scoped one before tagging, so the rest of the write (tagging
within the partition, routing, copy-on-write merges, merge-on-read log appends, change images, markers,
rollback) is unchanged:
1. rows of one key collapse to the batch's latest (precombine decides across partitions);
2. the partitions holding each incoming key are found: every partition's files whose key range covers an
   incoming key are candidates, and only their stored keys are read (merge-on-read slices with log files:
   their merged keys, so a key deleted by a log is not found);
3. `relocate`: a row whose key is stored in another partition either moves
   (`hoodie.{bloom,simple}.index.update.partition.path=true`, the default: a delete of the key in the old
   partition plus the row in its new one, in the same instant) or is routed to the old partition (`false`:
   the row keeps its old partition path). Deletes go wherever the key is stored. A row that loses against
   the stored record (lower precombine value) goes to the stored record's partition, where the merge keeps
   the stored record, so a late record never moves a key.

Rows that belong to a move carry `MOVED_COL`: the copy-on-write merge writes their change images as the
before image ('B', old partition) and update ('U', new partition) of one record, and commits of a global
write name their index type in the commit metadata (`META_KEY`) so that change reads over several commits or
merge-on-read slices match a key deleted in one partition and written in another as one update.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from hudilite.columns import DELETE_COL, KEY_COL, MOVED_COL, PART_COL
from hudilite.errors import damaged_file
from hudilite.index.range_index import FileRange, RangeIndex
from hudilite.options import BLOOM_UPDATE_PARTITION_PATH, INDEX_TYPE, SIMPLE_UPDATE_PARTITION_PATH
from hudilite.reader.merge import MergeSpec, SliceDesc, merge_slice
from hudilite.storage import storage_for
from hudilite.writer.handle import sort_indices

INDEX_TYPE_KEY = INDEX_TYPE.key
PARTITION_SCOPED = ("BLOOM", "SIMPLE")
UPDATE_PARTITION_PATH = {"GLOBAL_BLOOM": BLOOM_UPDATE_PARTITION_PATH, "GLOBAL_SIMPLE": SIMPLE_UPDATE_PARTITION_PATH}
DEFAULT_INDEX_TYPE = INDEX_TYPE.default  # see docs/incremental.md "Keys that change partition" for the reason
META_KEY = "hudilite.index.type"  # commit extraMetadata of global writes
# stored keys found for the batch: incoming row, partition holding the key, stored ordering value
FOUND_ROW, FOUND_PART, FOUND_PC = "_hl_row", "_hl_gpart", "_hl_gpc"


@dataclass(frozen=True)
class IndexChoice:
    kind: str = DEFAULT_INDEX_TYPE
    update_partition_path: bool = True

    @property
    def is_global(self) -> bool:
        return self.kind in UPDATE_PARTITION_PATH


def index_choice(options: dict) -> IndexChoice:
    """The write's index from its options; an unknown type or a non-boolean flag raises before any write."""
    kind = INDEX_TYPE.get(options)
    if kind in PARTITION_SCOPED:
        return IndexChoice(kind)
    return IndexChoice(kind, UPDATE_PARTITION_PATH[kind].get(options))


# ---- finding the partitions that hold the incoming keys ----------------------------------------------------------
def incoming_keys(rows: pa.Table, index: RangeIndex) -> np.ndarray:
    """The incoming keys in the order the range index compares them (int64 for a numeric key, else strings)."""
    if index.numeric_key:
        return rows.column(index.numeric_key).cast(pa.int64()).to_numpy(zero_copy_only=False)
    return np.asarray(rows.column(KEY_COL).to_pylist(), dtype=str)


def candidate_files(index: RangeIndex, keys: np.ndarray) -> list[FileRange]:
    """Files of every partition whose key range covers at least one of `keys` (unknown ranges: always)."""
    s = np.sort(keys)
    out = []
    for r in index.files():
        if not r.path:
            continue  # log-only groups: the partition-scoped tagging does not see them either
        if r.lo is None or np.searchsorted(s, r.hi, "right") > np.searchsorted(s, r.lo, "left"):
            out.append(r)
    return out


def slice_keys(desc: SliceDesc, key_col: str, pcf: str | None, spec: MergeSpec | None,
               wanted: pa.Array | None = None) -> pa.Table:
    """(key, partition, stored ordering value) of the records one slice holds now: its base file's keys, or the
    merged keys when it has log files (a key a log deleted is not held). `wanted`: only these keys."""
    if desc.log_paths and spec is not None:
        t = merge_slice(desc, spec)
        names = t.column_names
    else:
        with damaged_file(desc.base_path):
            fs = storage_for(desc.base_path)
            names = fs.parquet_schema(desc.base_path).names
            t = fs.read_parquet(desc.base_path, columns=[c for c in dict.fromkeys([key_col, pcf]) if c and c in names])
    key = t.column(key_col)
    if key_col != KEY_COL:
        key = key.cast(pa.int64())
    pcv = t.column(pcf) if pcf and pcf in names else pa.nulls(t.num_rows)
    out = pa.table({"key": key, FOUND_PART: pa.repeat(pa.scalar(desc.partition, pa.string()), t.num_rows),
                    FOUND_PC: pcv})
    if wanted is not None:
        out = out.filter(pc.is_in(out.column("key"), value_set=wanted))
    return out


def find_local(rows: pa.Table, index: RangeIndex, slices: list, pcf: str | None, spec: MergeSpec | None) -> pa.Table:
    """`FOUND_*` rows for an Arrow batch: which stored partitions hold each incoming row's key."""
    keys = incoming_keys(rows, index)
    cands = candidate_files(index, keys)
    empty = pa.table({FOUND_ROW: pa.array([], pa.int64()), FOUND_PART: pa.array([], pa.string()),
                      FOUND_PC: pa.nulls(0)})
    if not cands:
        return empty
    by_id = {(s.partition, s.file_id): s for s in slices}
    key_col = index.numeric_key or KEY_COL
    wanted = pa.array(keys)
    descs = [SliceDesc.of(by_id[(r.partition, r.file_id)]) for r in cands if (r.partition, r.file_id) in by_id]

    def one(d):
        return slice_keys(d, key_col, pcf, spec, wanted)

    if len(descs) == 1:
        parts = [one(descs[0])]
    else:
        with ThreadPoolExecutor(max_workers=4) as pool:
            parts = list(pool.map(one, descs))
    parts = [p for p in parts if p.num_rows]
    if not parts:
        return empty
    stored = pa.concat_tables(parts, promote_options="permissive")
    pos = pc.index_in(stored.column("key"), value_set=wanted)  # dedup'd batch: one row per key
    return pa.table({FOUND_ROW: pos.cast(pa.int64()), FOUND_PART: stored.column(FOUND_PART),
                     FOUND_PC: stored.column(FOUND_PC)})


# ---- turning a global batch into a partition-scoped one --------------------------------------------------------------
def relocate(rows: pa.Table, found: pa.Table, choice: IndexChoice, pcf: str | None, event_time: bool) -> pa.Table:
    """The rows of a batch (one row per key, as deduplicated) with partitions assigned as the global index
    decides, given `found` (FOUND_ROW, FOUND_PART, FOUND_PC: the partitions holding each row's key). Adds
    MOVED_COL. Hard deletes (a key leaving a partition) carry a null ordering value: they always win."""
    n = rows.num_rows
    moved = np.zeros(n, dtype=bool)
    if found.num_rows == 0:
        return rows.append_column(MOVED_COL, pa.array(moved))
    # one entry per (row, partition), the highest stored ordering value first
    fr = found.column(FOUND_ROW).to_numpy(zero_copy_only=False).astype(np.int64)
    fp = np.asarray(found.column(FOUND_PART).to_pylist(), dtype=object)
    fpc = found.column(FOUND_PC)
    order = np.lexsort((np.arange(len(fr)),
                        -_ranks(fpc) if event_time else np.zeros(len(fr)), fr))
    fr, fp, fpc = fr[order], fp[order], fpc.take(pa.array(order))
    pair = {}
    keep_f = np.zeros(len(fr), dtype=bool)
    for j, (r, p) in enumerate(zip(fr.tolist(), fp.tolist())):
        if (r, p) not in pair:
            pair[(r, p)] = j
            keep_f[j] = True
    fr, fp, fpc = fr[keep_f], fp[keep_f], fpc.filter(pa.array(keep_f))
    own = np.asarray(rows.column(PART_COL).to_pylist(), dtype=object)
    is_del = rows.column(DELETE_COL).to_numpy(zero_copy_only=False).astype(bool)
    same = fp == own[fr]
    home = np.zeros(n, dtype=bool)
    home[fr[same]] = True
    first = np.ones(len(fr), dtype=bool)  # the best (highest ordering value) stored partition of each row
    first[1:] = fr[1:] != fr[:-1]
    best_part = np.empty(n, dtype=object)
    best_part[fr[first]] = fp[first]
    has = np.zeros(n, dtype=bool)
    has[fr] = True
    late = np.zeros(n, dtype=bool)
    if event_time and pcf and pcf in rows.column_names:
        cand = np.flatnonzero(has & ~home & ~is_del)
        if len(cand):
            inc = rows.column(pcf).take(pa.array(cand))
            st = fpc.filter(pa.array(first)).take(pa.array(np.searchsorted(fr[first], cand)))
            try:
                lt = pc.fill_null(pc.less(inc.cast(st.type) if inc.type != st.type else inc, st), False)
                late[cand] = lt.to_numpy(zero_copy_only=False)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
                pass  # not comparable: the incoming record wins, as the merges decide
    moving = has & ~home & ~is_del & ~late
    to_old = late | (moving & (not choice.update_partition_path))  # routed to the stored partition
    if choice.update_partition_path:
        moved |= moving
    new_part = own.copy()
    new_part[to_old] = best_part[to_old]
    # deletes: to every partition holding the key (the original row where it is stored, copies elsewhere)
    # upserts: hard deletes in every other partition holding the key (not for late rows: nothing changes)
    del_rows = is_del[fr] & ~same
    hard = ~is_del[fr] & ~late[fr] & (fp != new_part[fr])
    keep = ~(is_del & has & ~home)  # a delete of a key stored only elsewhere: replaced by its copies
    base = rows.filter(pa.array(keep)) if not keep.all() else rows
    base = base.set_column(base.schema.get_field_index(PART_COL), PART_COL,
                           pa.array(new_part[keep].tolist(), pa.string()))
    base = base.append_column(MOVED_COL, pa.array(moved[keep]))
    sel = del_rows | hard
    if not sel.any():
        return base
    copies = rows.take(pa.array(fr[sel]))
    copies = copies.set_column(copies.schema.get_field_index(PART_COL), PART_COL,
                               pa.array(fp[sel].tolist(), pa.string()))
    copies = copies.set_column(copies.schema.get_field_index(DELETE_COL), DELETE_COL,
                               pa.array(np.ones(int(sel.sum()), dtype=bool)))
    h = hard[sel]
    if pcf and pcf in rows.column_names and h.any():
        i = copies.schema.get_field_index(pcf)
        col = pc.if_else(pa.array(h), pa.nulls(len(h), copies.column(i).type), copies.column(i))
        copies = copies.set_column(i, copies.schema.field(i).with_nullable(True), col)
    copies = copies.append_column(MOVED_COL, pa.array(h))
    schema = pa.schema([copies.schema.field(f.name) if f.name == pcf else base.schema.field(f.name)
                        for f in base.schema])  # a non-nullable ordering field becomes nullable
    return pa.concat_tables([base.cast(schema), copies.select(schema.names).cast(schema)])


def _ranks(values: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """Ranks of ordering values (nulls lowest) for sorting values of any comparable type."""
    try:
        order = sort_indices(pa.table({"v": values}), [("v", "ascending")], "at_start")
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        return np.zeros(len(values), dtype=np.int64)
    ranks = np.empty(len(values), dtype=np.int64)
    ranks[order.to_numpy(zero_copy_only=False)] = np.arange(len(values))
    return ranks


def explode_found(rows: pa.Table, list_col: str) -> tuple[pa.Table, pa.Table]:
    """Spark path: rows carrying a list<struct<part, pc>> column of the partitions holding their key -> (rows
    without it, the FOUND_* table) for `relocate`."""
    col = rows.column(list_col).combine_chunks()
    rows = rows.drop_columns([list_col])
    if len(col) == 0 or col.null_count == len(col):
        empty = pa.table({FOUND_ROW: pa.array([], pa.int64()), FOUND_PART: pa.array([], pa.string()),
                          FOUND_PC: pa.nulls(0)})
        return rows, empty
    parents = pc.list_parent_indices(col)
    flat = pc.list_flatten(col)
    return rows, pa.table({FOUND_ROW: parents.cast(pa.int64()), FOUND_PART: flat.field(0), FOUND_PC: flat.field(1)})
