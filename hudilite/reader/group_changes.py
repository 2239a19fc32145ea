"""Change classification of one file group between two points of its timeline, with pyarrow (one task per group).

Engine-independent and picklable: `hudilite.spark.changes` runs these functions in Spark tasks (`mapInArrow`).
Two passes:

1. `classify(task, ctx)` reads only the record keys (and commit times) of the group's slice as of `begin`
   ("before") and as of `end` ("after") and returns one row per candidate change: (group, kind, key, pos) with
   kind 'U' (after row whose commit time is in the range and whose key existed at begin), 'I' (same, key new
   to this group), 'D' (key present at begin, absent at end: pos is its row in the before slice), 'B' (the
   before row of a 'U'), 'P' (every key present at end: only asked for partitions with replaced groups).
2. After the caller resolved keys that moved between file groups (`resolve`), `images(task, ctx, picks)`
   reads the full rows at the picked positions: copy-on-write base files read only the row groups holding
   them (a merge writes the commit's rows in row groups of their own, so changed rows are cheap to reach).

Merge-on-read slices are merged (`hudilite.reader.merge.merge_slice`); positions then index the merged rows,
which are deterministic for a slice and spec.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from hudilite.change_images import BEFORE, DELETE, INSERT, UPDATE
from hudilite.reader.merge import COMMIT_TIME_COL, KEY, MergeSpec, SliceDesc, conform, merge_slice
from hudilite.storage import storage_for

PRESENT = "P"  # candidate kind only: a key present at end
CANDIDATES = pa.schema([("grp", pa.int32()), ("kind", pa.string()), ("key", pa.string()), ("pos", pa.int64())])


@dataclass(frozen=True)
class GroupTask:
    """One touched file group: its slice as of `end` (None: gone, e.g. replaced) and as of `begin` (None: not
    needed, or the group did not exist)."""

    grp: int
    partition: str
    file_id: str
    after: SliceDesc | None
    before: SliceDesc | None
    deletes: bool  # the range may have removed keys from this group
    present: bool  # report every key present at end ('P'): keys of replaced groups may have moved here

    def to_json(self) -> str:
        d = asdict(self)
        d["after"] = self.after.to_json() if self.after else None
        d["before"] = self.before.to_json() if self.before else None
        return json.dumps(d)

    @classmethod
    def from_json(cls, s: str) -> "GroupTask":
        d = json.loads(s)
        d["after"] = SliceDesc.from_json(d["after"]) if d["after"] else None
        d["before"] = SliceDesc.from_json(d["before"]) if d["before"] else None
        return cls(**d)


@dataclass(frozen=True)
class ChangeContext:
    """What every group task of one change read shares."""

    times: tuple  # write instants in the range: an after row whose commit time is one of them changed
    after_spec: MergeSpec  # merge-on-read slices as of end
    before_spec: MergeSpec  # ... as of begin
    before_image: bool
    columns: tuple | None = None  # output columns of the table schema (None: all)


# ---- reading ------------------------------------------------------------------------------------------------
def _keys_of(table: pa.Table, name: str) -> pa.Array:
    col = table.column(name)
    want = pa.int64() if pa.types.is_integer(col.type) else pa.string()
    col = col.cast(want) if col.type != want else col
    return col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)


def _key_column(task: GroupTask, ctx: ChangeContext) -> str:
    """The column keys are compared on: the integer record-key column when the table's keys are its decimal
    strings and every base file of the task stores it (hashing integers costs a fraction of hashing the key
    strings of every row of both slices); else the record key strings."""
    c = ctx.after_spec.int_key
    if not c:
        return KEY
    for desc in (task.after, task.before):
        base = desc.base_path if desc is not None else None
        if base is not None and c not in storage_for(base).parquet_schema(base).names:
            return KEY
    return c


def _read_keys(desc: SliceDesc, spec: MergeSpec, with_times: bool, key: str = KEY):
    """(keys, commit times or None) of every row of the slice."""
    if desc.log_paths or desc.base_path is None:
        t = merge_slice(desc, spec)
    else:
        cols = [key, COMMIT_TIME_COL] if with_times else [key]
        t = storage_for(desc.base_path).read_parquet(desc.base_path, columns=cols)
    return _keys_of(t, key), (_keys_of(t, COMMIT_TIME_COL) if with_times else None)


def _after_keys(desc: SliceDesc, spec: MergeSpec, times: tuple, all_keys: bool, key: str = KEY):
    """(positions, keys) of the rows whose commit time is in `times`, and every key of the slice when
    `all_keys` (else None). Merge-on-read slices are merged once for both."""
    if desc.log_paths or desc.base_path is None:
        keys, ct = _read_keys(desc, spec, True, key)
        pos = np.flatnonzero(pc.is_in(ct, value_set=pa.array(sorted(times), pa.string())).to_numpy(
            zero_copy_only=False))
        return pos, keys.take(pa.array(pos, pa.int64())), (keys if all_keys else None)
    pos, keys = _changed_rows(desc, times, key)
    return pos, keys, (_read_keys(desc, spec, False, key)[0] if all_keys else None)


def _changed_rows(desc: SliceDesc, times: tuple, key: str = KEY):
    """(positions, keys) of the rows of a base file whose commit time is in `times`: only the row groups whose
    commit-time statistics overlap the range are read."""
    value_set = pa.array(sorted(times), pa.string())
    pf = storage_for(desc.base_path).parquet_file(desc.base_path)
    lo, hi = min(times), max(times)
    md = pf.metadata
    paths = [md.schema.column(j).path for j in range(md.num_columns)]  # parquet leaf columns (not arrow fields)
    ci = paths.index(COMMIT_TIME_COL) if COMMIT_TIME_COL in paths else -1
    starts = _row_group_starts(md)
    wanted = []
    for i in range(md.num_row_groups):
        st = md.row_group(i).column(ci).statistics if ci >= 0 else None
        if st is None or not st.has_min_max or not (_text(st.max) < lo or _text(st.min) > hi):
            wanted.append(i)
    if not wanted:
        return np.array([], np.int64), pa.array([], pa.string() if key == KEY else pa.int64())
    t = pf.read_row_groups(wanted, columns=[key, COMMIT_TIME_COL])
    local = np.flatnonzero(pc.is_in(_keys_of(t, COMMIT_TIME_COL), value_set=value_set).to_numpy(zero_copy_only=False))
    offsets = np.concatenate([np.arange(starts[i], starts[i + 1], dtype=np.int64) for i in wanted])
    return offsets[local], _keys_of(t, key).take(pa.array(local, pa.int64()))


def _text(v) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _row_group_starts(md) -> np.ndarray:
    return np.concatenate([[0], np.cumsum([md.row_group(i).num_rows for i in range(md.num_row_groups)])]).astype(
        np.int64)


def read_rows(desc: SliceDesc, spec: MergeSpec, pos: np.ndarray, columns: tuple | None = None) -> pa.Table:
    """Rows at positions `pos` of the slice, in the order of `pos`: the table schema's `columns` (None: all)."""
    take = pa.array(pos, pa.int64())
    schema = spec.schema if columns is None else pa.schema([spec.schema.field(c) for c in columns])
    if desc.log_paths or desc.base_path is None:
        return conform(merge_slice(desc, spec).take(take), schema)
    pf = storage_for(desc.base_path).parquet_file(desc.base_path)
    starts = _row_group_starts(pf.metadata)
    rg = np.searchsorted(starts, pos, side="right") - 1
    wanted = np.unique(rg)
    stored = set(pf.schema_arrow.names)
    t = pf.read_row_groups(wanted.tolist(), columns=None if columns is None else [c for c in columns if c in stored])
    # position in the concatenation of the wanted row groups: row - start of its group + rows of wanted groups before
    sizes = starts[wanted + 1] - starts[wanted]
    before = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    local = pos - starts[rg] + before[np.searchsorted(wanted, rg)]
    return conform(t.take(pa.array(local, pa.int64())), schema)


# ---- pass 1: classify keys ------------------------------------------------------------------------------------
def classify(task: GroupTask, ctx: ChangeContext) -> pa.Table:
    """Candidate changes of one group (schema CANDIDATES)."""
    parts: list[tuple[str, pa.Array, np.ndarray]] = []
    a_keys = None
    key = _key_column(task, ctx)
    if task.after is not None:
        # every key at end only to find the keys gone / still there
        chg_pos, chg_keys, a_keys = _after_keys(task.after, ctx.after_spec, ctx.times, task.deletes or task.present,
                                                key)
        if task.present:
            parts.append((PRESENT, a_keys, np.full(len(a_keys), -1, np.int64)))
    else:
        chg_pos, chg_keys = np.array([], np.int64), pa.array([], pa.string() if key == KEY else pa.int64())
    if task.before is None:
        parts.append((INSERT, chg_keys, chg_pos))
        return _candidates(task.grp, parts)
    b_keys, _ = _read_keys(task.before, ctx.before_spec, False, key)
    gone = None
    if a_keys is not None:
        # one probe answers both questions: where each before key is at end (null: gone), hence updated ones
        at = pc.index_in(b_keys, value_set=a_keys)
        gone = at.is_null().to_numpy(zero_copy_only=False)
        found = at.drop_null().to_numpy(zero_copy_only=False).astype(np.int64)
        changed_at_end = np.zeros(len(a_keys), bool)
        changed_at_end[chg_pos] = True
        is_upd = np.zeros(len(b_keys), bool)
        is_upd[np.flatnonzero(~gone)[changed_at_end[found]]] = True
        existed = np.zeros(len(a_keys), bool)
        existed[found] = True
        had = existed[chg_pos]
    else:
        # probe the (large) before keys against the (small) changed keys: hashing only the small side
        is_upd = pc.is_in(b_keys, value_set=chg_keys).to_numpy(zero_copy_only=False)
        had = pc.is_in(chg_keys, value_set=b_keys.filter(pa.array(is_upd))).to_numpy(zero_copy_only=False)
    upd_keys = b_keys.filter(pa.array(is_upd))
    parts.append((UPDATE, chg_keys.filter(pa.array(had)), chg_pos[had]))
    parts.append((INSERT, chg_keys.filter(pa.array(~had)), chg_pos[~had]))
    if ctx.before_image and len(upd_keys):
        parts.append((BEFORE, upd_keys, np.flatnonzero(is_upd)))
    if task.deletes or task.after is None:
        gone = np.ones(len(b_keys), bool) if a_keys is None else gone
        parts.append((DELETE, b_keys.filter(pa.array(gone)), np.flatnonzero(gone)))
    return _candidates(task.grp, parts)


def _candidates(grp: int, parts) -> pa.Table:
    """Candidates of one group; keys as strings (integer keys in decimal, the record-key strings of such
    tables), so that groups compare in `resolve` whichever column each compared on."""
    tables = [pa.table({"grp": pa.array(np.full(len(k), grp, np.int32)), "kind": pa.repeat(pa.scalar(kind), len(k)),
                        "key": k if k.type == pa.string() else pc.cast(k, pa.string()),
                        "pos": pa.array(pos, pa.int64())}, schema=CANDIDATES)
              for kind, k, pos in parts if len(k)]
    return pa.concat_tables(tables) if tables else CANDIDATES.empty_table()


# ---- between the passes: keys that moved between file groups ----------------------------------------------------
def resolve(cands: pa.Table, partition_of: list[str], *, include_deletes: bool, before_image: bool,
            by_key: bool = False) -> pa.Table:
    """Final (grp, kind, pos) picks from all groups' candidates. A key is matched by (partition, record key):
    a key gone from one group ('D') and written in range into another ('I', e.g. deleted and re-inserted
    elsewhere, or rewritten by insert_overwrite) is an update ('U', its old row the 'B'); a key gone from a
    replaced group and present elsewhere without a change (clustering keeps commit times) did not change.
    `by_key`: the range has global-index writes (a key is unique in the table), so a key gone from one
    partition and written in another moved: one update, matched by record key alone."""
    part = pa.array(partition_of, pa.string()).take(cands.column("grp"))
    c = cands.append_column("part", part)
    moves = c.set_column(c.schema.get_field_index("part"), "part", pa.repeat(pa.scalar("", pa.string()), c.num_rows)) \
        if by_key else c
    kind = c.column("kind")
    ins = moves.filter(pc.equal(kind, INSERT))
    dels = moves.filter(pc.equal(kind, DELETE))
    out = [c.filter(pc.is_in(kind, value_set=pa.array([UPDATE, BEFORE])))]
    moved_ins = np.zeros(ins.num_rows, bool)
    gone_del = np.zeros(dels.num_rows, bool)  # not a delete (moved)
    if ins.num_rows and dels.num_rows:
        moved_ins = _matches(ins, dels)
        moved_del = _matches(dels, ins)
        gone_del |= moved_del
        if before_image:
            out.append(_with_kind(dels.filter(pa.array(moved_del)), BEFORE))
    pres = c.filter(pc.equal(kind, PRESENT))
    if pres.num_rows and dels.num_rows:
        gone_del |= _matches(c.filter(pc.equal(kind, DELETE)), pres)
    out.append(_with_kind(ins.filter(pa.array(moved_ins)), UPDATE))
    out.append(ins.filter(pa.array(~moved_ins)))
    if include_deletes:
        out.append(dels.filter(pa.array(~gone_del)))
    picks = pa.concat_tables(out).select(["grp", "kind", "pos"])
    return picks


def _matches(a: pa.Table, b: pa.Table) -> np.ndarray:
    """Rows of `a` whose (part, key) occurs in `b`."""
    sep = "\x00"  # partition paths and record keys never contain NUL
    ka = pc.binary_join_element_wise(a.column("part"), a.column("key"), sep)
    kb = pc.binary_join_element_wise(b.column("part"), b.column("key"), sep)
    return pc.is_in(ka, value_set=kb.combine_chunks()).to_numpy(zero_copy_only=False)


def _with_kind(t: pa.Table, kind: str) -> pa.Table:
    return t.set_column(t.schema.get_field_index("kind"), "kind", pa.repeat(pa.scalar(kind), t.num_rows))


# ---- pass 2: full rows of the picks -------------------------------------------------------------------------------
def images(task: GroupTask, ctx: ChangeContext, picks: pa.Table, out_schema: pa.Schema) -> pa.Table:
    """The picked rows of one group with `_change_op` (their kind), cast to `out_schema` (the table schema, or
    its `ctx.columns`, in Spark's Arrow types plus `_change_op`)."""
    kind = picks.column("kind")
    tables = []
    for side, spec, kinds in ((task.after, ctx.after_spec, (INSERT, UPDATE)),
                              (task.before, ctx.before_spec, (DELETE, BEFORE))):
        sel = picks.filter(pc.is_in(kind, value_set=pa.array(kinds)))
        if sel.num_rows == 0:
            continue
        if side is None:
            raise RuntimeError(f"file group {task.file_id}: change rows picked from a slice the task does not have")
        pos = sel.column("pos").to_numpy()
        rows = read_rows(side, spec, pos, ctx.columns)
        tables.append(rows.append_column("_change_op", sel.column("kind")))
    if not tables:
        return out_schema.empty_table()
    t = pa.concat_tables(tables)
    return t.cast(out_schema) if t.schema != out_schema else t
