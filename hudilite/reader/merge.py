"""Merge-on-read: one file slice (base file + log blocks) merged into the latest image of its records.

Engine-independent and picklable: the Spark read (`mapInArrow`), the Python data source and tests call
`merge_slice(SliceDesc, MergeSpec)` in whatever process reads the slice.

Semantics (hudi-format.md §4c, §7, §9; Java's file group reader / hudi-rs reader v2):
- A data or delete block counts iff its INSTANT_TIME is a completed write instant (or older than the active
  timeline: archived, committed), is <= `as_of`, and is not the target of a rollback COMMAND block in any log
  file of the slice. Corrupt byte ranges are skipped.
- Incremental reads merge the slice as of the range's end (base rows and blocks of any commit time) and keep
  the merged rows whose commit time is in the range: the latest image of each key the range changed, never a
  record that lost against an older one. (Tables without record keys cannot merge: their base file and the
  range's blocks are read as they are.)
- Log records are folded per record key in log order (instants in first-seen order, blocks in file order),
  then the folded log record is merged with the base record:
  - event time: the higher ordering value wins, ties to the newer record; a delete whose ordering value is
    the natural 0 (or absent) always wins against older records;
  - commit time: the newer record always wins.
- Without populated meta fields (no record keys) base rows and log records are appended, not merged.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from hudilite.errors import UnsupportedTableError, damaged_file
from hudilite.log.blocks import AvroDataBlock, CommandBlock, DeleteBlock, LogBlock, ParquetDataBlock
from hudilite.log.format import BlockType
from hudilite.log.reader import scan_log_file
from hudilite.log.vector_avro import fast_records  # numpy Avro decoding of flat records (fastavro otherwise)
from hudilite.reader import delete_vec
from hudilite.schema import has_promotion, map_leaves, nan_rank, ordering_at_least, promote, spark_leaf
from hudilite.storage import storage_for

EVENT_TIME = "EVENT_TIME_ORDERING"
COMMIT_TIME = "COMMIT_TIME_ORDERING"
KEY = "_hoodie_record_key"
COMMIT_TIME_COL = "_hoodie_commit_time"

_DATA, _ORDERED_DELETE, _NATURAL_DELETE = 0, 1, 2


@dataclass(frozen=True)
class SliceDesc:
    """One file slice to read: its base file (or None: log-only) and log files in log order."""

    partition: str
    file_id: str
    base_path: str | None
    log_paths: tuple[str, ...] = ()

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, s: str) -> "SliceDesc":
        d = json.loads(s)
        d["log_paths"] = tuple(d.get("log_paths") or ())
        return cls(**d)

    @classmethod
    def of(cls, sl) -> "SliceDesc":
        return cls(sl.partition, sl.file_id, sl.base_file.path if sl.base_file is not None else None,
                   tuple(lf.path for lf in sl.log_files))


@dataclass(frozen=True)
class MergeSpec:
    """What decides the merge of every slice of one read."""

    schema: pa.Schema  # table schema, meta fields first
    merge_mode: str = EVENT_TIME
    ordering_field: str | None = None
    as_of: str | None = None  # blocks of later instants are ignored
    committed: frozenset = frozenset()  # completed write instants of the active timeline
    known: frozenset = frozenset()  # every instant of the active timeline (any state)
    archived_before: str | None = None  # instants older than this and not `known` count as committed
    block_range: frozenset | None = None  # incremental: only blocks of these instants
    row_range: frozenset | None = None  # incremental: only merged rows with these commit times
    keyed: bool = True  # meta fields populated: merge by record key (else append-only)
    # a simple key generator over one signed integer column: record keys are that column's decimal strings, so
    # base rows can be matched on the column's values (see slice_overlay)
    int_key: str | None = None

    def is_committed(self, t: str) -> bool:
        if t in self.committed:
            return True
        return self.archived_before is not None and t < self.archived_before and t not in self.known

    @property
    def event_time(self) -> bool:
        return (self.merge_mode == EVENT_TIME and self.ordering_field is not None
                and self.ordering_field in self.schema.names)


# ---- conforming tables to the table schema ------------------------------------------------------------
def conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """Select, order and cast `table`'s columns as `schema`; missing columns become nulls. Numbers stored where
    the schema says string (Java's timestamp key generators) become their string form."""
    cols = []
    names = table.column_names
    for f in schema:
        if f.name not in names:
            cols.append(pa.nulls(table.num_rows, f.type))
            continue
        col = table.column(f.name)
        if col.type != f.type:
            col = _cast(col, f.type, f.name)
        cols.append(col)
    return pa.Table.from_arrays(cols, schema=pa.schema([f.with_nullable(True) for f in schema],
                                                        metadata=schema.metadata))


def _cast(col: pa.ChunkedArray, t: pa.DataType, name: str) -> pa.ChunkedArray:
    if has_promotion(col.type, t):  # also nested: Apache Hudi's number promotions, not Arrow's safe cast
        return promote(col, t)
    try:
        return col.cast(t)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        if pa.types.is_string(t) or pa.types.is_large_string(t):
            try:
                return pc.cast(pc.cast(col, pa.string()), t)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
                pass
        if pa.types.is_struct(t) and pa.types.is_struct(col.type):
            return _cast_struct(col, t, name)
        raise UnsupportedTableError(f"column {name!r}: cannot read {col.type} as {t}") from None


def _cast_struct(col: pa.ChunkedArray, t: pa.StructType, name: str) -> pa.ChunkedArray:
    """Struct -> struct by field name (fields missing in the data become nulls)."""
    arr = col.combine_chunks()
    have = {arr.type.field(i).name: i for i in range(arr.type.num_fields)}
    children = []
    for i in range(t.num_fields):
        f = t.field(i)
        if f.name in have:
            child = pa.chunked_array([arr.field(have[f.name])])
            children.append(_cast(child, f.type, f"{name}.{f.name}").combine_chunks())
        else:
            children.append(pa.nulls(len(arr), f.type))
    return pa.chunked_array([pa.StructArray.from_arrays(children, fields=list(t), mask=arr.is_null())])


# ---- reading --------------------------------------------------------------------------------------------
def read_base(path: str, spec: MergeSpec) -> pa.Table:
    with damaged_file(path):
        t = storage_for(path).read_parquet(path)
    return conform(t, spec.schema)


def in_row_range(t: pa.Table, spec: MergeSpec) -> pa.Table:
    """Incremental reads: the merged rows whose commit time is in the range. Applied after merging, so a log
    record that loses against an older base row (a late record) is not returned for being in the range."""
    if spec.row_range is None or t.num_rows == 0:
        return t
    mask = pc.is_in(t.column(COMMIT_TIME_COL), value_set=pa.array(sorted(spec.row_range), pa.string()))
    return t.filter(pc.fill_null(mask, False))


def valid_blocks(log_paths, spec: MergeSpec) -> list[LogBlock]:
    """Data and delete blocks that count, in processing order (instants in first-seen order, blocks in file
    order within an instant). `log_paths`: the slice's log files in log order, as paths or as their bytes
    (`scan_log_file` takes either: the log fuzz merges in memory)."""
    order: list[str] = []
    by_instant: dict[str, list[LogBlock]] = {}
    rolled_back: set[str] = set()
    for path in log_paths:
        for item in scan_log_file(path):
            if not isinstance(item, LogBlock):
                continue  # a corrupt byte range
            t = item.instant_time
            if not t:
                continue
            if isinstance(item, CommandBlock):
                if item.is_rollback and item.target_instant_time:
                    rolled_back.add(item.target_instant_time)
                continue
            if item.block_type not in (BlockType.AVRO_DATA, BlockType.PARQUET_DATA, BlockType.DELETE):
                if item.block_type == BlockType.HFILE_DATA:
                    raise UnsupportedTableError(f"{path}: HFile data blocks are only used by the metadata table")
                continue  # CDC blocks: supplementary change data, not table records
            if spec.as_of is not None and t > spec.as_of:
                continue
            if not spec.is_committed(t):
                continue
            if spec.block_range is not None and t not in spec.block_range:
                continue
            if t not in by_instant:
                by_instant[t] = []
                order.append(t)
            by_instant[t].append(item)
    return [b for t in order if t not in rolled_back for b in by_instant[t]]


def _is_natural(value) -> bool:
    return value is None or (isinstance(value, int) and not isinstance(value, bool) and value == 0)


def _delete_orderings(values: list, t: pa.DataType | None) -> tuple[np.ndarray, pa.Array | None]:
    """(kind per delete, ordering values cast to the ordering column type)."""
    natural = np.array([_is_natural(v) for v in values], dtype=bool)
    return _delete_kinds(natural, lambda: pa.array([None if k else v for k, v in zip(natural, values)]), t)


def _int_delete_orderings(vals: np.ndarray, present: np.ndarray, t: pa.DataType | None):
    """`_delete_orderings` of integer ordering values (`present`: not null), without a Python object each."""
    natural = ~present | (vals == 0)
    return _delete_kinds(natural, lambda: pa.array(vals, pa.int64(), mask=natural), t)


def _delete_kinds(natural: np.ndarray, values, t: pa.DataType | None) -> tuple[np.ndarray, pa.Array | None]:
    """(kind per delete, ordering values cast to `t`) from which deletes are natural (null or 0 ordering value)
    and `values()`: their ordering values as an Arrow array, null where natural."""
    n = len(natural)
    if t is None:
        return np.full(n, _NATURAL_DELETE, dtype=np.int8), None
    kinds = np.where(natural, _NATURAL_DELETE, _ORDERED_DELETE).astype(np.int8)
    if natural.all():
        return kinds, pa.nulls(n, t)
    try:
        return kinds, values().cast(t)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError, TypeError):
        # not comparable with the ordering column: the newer delete wins, as a natural one does
        return np.full(n, _NATURAL_DELETE, dtype=np.int8), pa.nulls(n, t)


def log_records(blocks: list[LogBlock], spec: MergeSpec):
    """(data rows in the table schema, events) where events = (keys, kinds, ordering values, data row index
    or -1), in processing order."""
    schema = spec.schema
    ord_field = spec.ordering_field if spec.event_time else None
    ord_type = schema.field(ord_field).type if ord_field else None
    data_parts: list[pa.Table] = []
    keys, kinds, ords, idx = [], [], [], []
    n_data = 0
    for b in blocks:
        if isinstance(b, (AvroDataBlock, ParquetDataBlock)):
            t = conform(fast_records(b) if isinstance(b, AvroDataBlock) else b.records(), schema)
            if t.num_rows == 0:
                continue
            data_parts.append(t)
            keys.append(t.column(KEY).combine_chunks())
            kinds.append(np.full(t.num_rows, _DATA, dtype=np.int8))
            if ord_field:
                ords.append(t.column(ord_field).combine_chunks())
            idx.append(np.arange(n_data, n_data + t.num_rows, dtype=np.int64))
            n_data += t.num_rows
        elif isinstance(b, DeleteBlock):
            vec = delete_vec.decode(b.content)
            if vec is not None:  # integer (or no) ordering values: decoded without a Python object per record
                dkeys, vals, present = vec
                if not len(dkeys):
                    continue
                k, o = _int_delete_orderings(vals, present, ord_type)
                keys.append(dkeys)
            else:
                recs = b.delete_keys()
                if not recs:
                    continue
                k, o = _delete_orderings([r.ordering_val for r in recs], ord_type)
                keys.append(pa.array([r.record_key for r in recs], pa.string()))
            n_del = len(k)
            kinds.append(k)
            if ord_field:
                ords.append(o)
            idx.append(np.full(n_del, -1, dtype=np.int64))
    data = pa.concat_tables(data_parts) if data_parts else conform(pa.table({}), schema).slice(0, 0)
    if not keys:
        return data, None
    key_arr = pa.concat_arrays([k.cast(pa.string()) for k in keys])
    ord_arr = pa.concat_arrays(ords) if ord_field else None
    kind_arr, idx_arr = np.concatenate(kinds), np.concatenate(idx)
    if key_arr.null_count:  # records without a key cannot be merged: dropped
        ok = key_arr.is_valid()
        okn = ok.to_numpy(zero_copy_only=False)
        key_arr, kind_arr, idx_arr = key_arr.filter(ok), kind_arr[okn], idx_arr[okn]
        ord_arr = ord_arr.filter(ok) if ord_arr is not None else None
    if len(key_arr) == 0:
        return data, None
    return data, (key_arr, kind_arr, ord_arr, idx_arr)


def _fold_log(events, event_time: bool):
    """Per record key, the folded log record: (keys, kinds, ordering values, data row index)."""
    keys, kinds, ords, idx = events
    n = len(keys)
    enc = pc.dictionary_encode(keys)
    if len(enc.dictionary) == n:  # every key once: each record is its own fold (the common case)
        return keys, kinds, ords if event_time else None, idx
    codes = enc.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    order = np.argsort(codes, kind="stable")  # by key, log order within a key
    sc = codes[order]
    starts = np.flatnonzero(np.r_[True, sc[1:] != sc[:-1]]) if n else np.array([], dtype=np.int64)
    lengths = np.diff(np.r_[starts, n])
    grp = np.repeat(np.arange(len(starts)), lengths)
    pos = np.arange(n)
    k_sorted = kinds[order]
    if not event_time:  # the newest record of each key
        last = starts + lengths - 1
        win = order[last]
    else:
        # The fold restarts at a key's last natural delete: that delete beats everything before it, and the
        # first data record after it beats the delete; from there the highest ordering value wins, ties to
        # the newer record.
        p = np.maximum.reduceat(np.where(k_sorted == _NATURAL_DELETE, pos, -1), starts)
        big = n + 1
        q = np.minimum.reduceat(np.where((k_sorted == _DATA) & (pos > p[grp]), pos, big), starts)
        cand = np.where(p[grp] >= 0, pos >= q[grp], True)
        win = np.empty(len(starts), dtype=np.int64)
        natural_only = (p >= 0) & (q == big)
        win[natural_only] = order[p[natural_only]]
        cpos = pos[cand]
        if len(cpos):
            ord_sorted = ords.take(pa.array(order[cpos]))
            null_ord = ord_sorted.is_null().to_numpy(zero_copy_only=False)
            nan = nan_rank(ord_sorted)  # NaN above every number
            tbl = pa.table({"g": pa.array(grp[cpos]), "o": ord_sorted, "p": pa.array(cpos),
                            **({"n": nan} if nan is not None else {})})
            by = ["g"] + (["n"] if nan is not None else []) + ["o", "p"]
            si = pc.sort_indices(tbl, sort_keys=[(c, "ascending") for c in by]).to_numpy(zero_copy_only=False)
            g_sorted = grp[cpos][si]
            last_of_group = np.r_[g_sorted[1:] != g_sorted[:-1], True]
            win[g_sorted[last_of_group]] = order[cpos[si[last_of_group]]]
            if null_ord.any():  # a null ordering value on either side: the newer record wins (sequential fold)
                for g in np.unique(grp[cpos][null_ord]):
                    members = cpos[grp[cpos] == g]
                    cur = members[0]
                    for m in members[1:]:
                        a, b = ords[int(order[m])].as_py(), ords[int(order[cur])].as_py()
                        if a is None or b is None or _ge(a, b):
                            cur = m
                    win[g] = order[cur]
    return (keys.take(pa.array(win)), kinds[win], ords.take(pa.array(win)) if event_time else None, idx[win])


def _ge(a, b) -> bool:
    if isinstance(a, float) and a != a:
        return True  # NaN is above every number and equal to NaN (Java's and Spark's order)
    if isinstance(b, float) and b != b:
        return False
    try:
        return a >= b
    except TypeError:
        return True


def resolve(base: pa.Table, data: pa.Table, events, spec: MergeSpec) -> tuple[np.ndarray, pa.Table]:
    """Decide folded log records against base rows: (superseded: bool mask over `base`'s rows that a log record
    replaces or deletes, the log rows that win). `base` needs only the record key and, for event-time
    ordering, the ordering column (in the table schema's types)."""
    keep_base = np.ones(base.num_rows, dtype=bool)
    if events is None:
        return ~keep_base, data.slice(0, 0)
    event_time = spec.event_time
    lkeys, lkinds, lords, lidx = _fold_log(events, event_time)
    if base.num_rows:
        m_base, m_log = _match(base.column(KEY), lkeys)
    else:
        m_base = m_log = np.array([], dtype=np.int64)
    log_wins = np.ones(len(m_base), dtype=bool)
    if event_time and len(m_base):
        natural = lkinds[m_log] == _NATURAL_DELETE
        b_ord = base.column(spec.ordering_field).take(pa.array(m_base))
        l_ord = lords.take(pa.array(m_log))
        ge = pc.fill_null(ordering_at_least(l_ord, b_ord), True).to_numpy(zero_copy_only=False)
        log_wins = natural | ge
    keep_base[m_base[log_wins]] = False
    keep_log = lkinds == _DATA
    keep_log[m_log[~log_wins]] = False
    return ~keep_base, _rows(data, lidx[keep_log])


def _rows(data: pa.Table, sel: np.ndarray) -> pa.Table:
    """`data.take(sel)`; ascending selections (the usual case: every key once in the log) as a filter, all rows
    without a copy."""
    if len(sel) and (len(sel) < 2 or bool((sel[1:] > sel[:-1]).all())):
        if len(sel) == data.num_rows:
            return data
        mask = np.zeros(data.num_rows, dtype=bool)
        mask[sel] = True
        return data.filter(pa.array(mask))
    return data.take(pa.array(sel, pa.int64()))


def _match(base_keys: pa.ChunkedArray, lkeys: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(base rows, log records) with equal keys: every base row whose key is one of `lkeys` (distinct), with the
    index of that log record. Integer base keys in strictly ascending order (base files written from sorted
    input) are matched by binary search of the log keys: no hash of every base key."""
    if (pa.types.is_int64(base_keys.type) and pa.types.is_int64(lkeys.type) and base_keys.null_count == 0
            and lkeys.null_count == 0):
        b = base_keys.to_numpy()
        if len(b) < 2 or bool((b[1:] > b[:-1]).all()):
            lk = lkeys.to_numpy(zero_copy_only=False)
            at = np.searchsorted(b, lk)
            at[at == len(b)] = 0
            hit = np.flatnonzero(b[at] == lk)
            m_base = at[hit]
            o = np.argsort(m_base, kind="stable")
            return m_base[o].astype(np.int64), hit[o].astype(np.int64)
    pos = pc.index_in(base_keys, value_set=lkeys)
    matched = pos.is_valid().to_numpy(zero_copy_only=False)
    return np.flatnonzero(matched), pos.drop_null().to_numpy(zero_copy_only=False).astype(np.int64)


def merge_records(base: pa.Table, data: pa.Table, events, spec: MergeSpec) -> pa.Table:
    """Merge folded log records into base rows (all in the table schema)."""
    if events is None:
        return base
    superseded, out_log = resolve(base, data, events, spec)
    out_base = base.filter(pa.array(~superseded)) if base.num_rows else base
    return pa.concat_tables([out_base, out_log]) if out_log.num_rows else out_base


def merge_slice(desc: SliceDesc, spec: MergeSpec) -> pa.Table:
    """The merged rows of one file slice, in the table schema."""
    base = read_base(desc.base_path, spec) if desc.base_path else conform(pa.table({}), spec.schema).slice(0, 0)
    if not desc.log_paths:
        return in_row_range(base, spec)
    blocks = valid_blocks(desc.log_paths, spec)
    if not blocks:
        return in_row_range(base, spec)
    data, events = log_records(blocks, spec)
    if not spec.keyed:  # no record keys: append-only
        return in_row_range(pa.concat_tables([base, data]) if data.num_rows else base, spec)
    return in_row_range(merge_records(base, data, events, spec), spec)


def merge_slices(descs, spec: MergeSpec) -> pa.Table:
    """The merged rows of several file slices (those of `merge_slice` of each, concatenated in some order) in
    one vectorized merge: each slice's record keys tagged with its position in `descs` (fixed width, so keys of
    different slices never meet), their log records and base rows concatenated, then one fold and one match for
    all. Per-slice order of log records is kept, so the fold of each key is that of its own slice."""
    descs = list(descs)
    if len(descs) == 1 or not spec.keyed:
        parts = [merge_slice(d, spec) for d in descs]
        return pa.concat_tables(parts) if parts else conform(pa.table({}), spec.schema).slice(0, 0)
    width = len(str(len(descs)))
    bases, base_keys, datas = [], [], []
    ev_keys, ev_kinds, ev_ords, ev_idx = [], [], [], []
    n_data = 0
    for i, d in enumerate(descs):
        tag = pa.scalar(f"{i:0{width}d}:")
        if d.base_path:
            pf = storage_for(d.base_path).parquet_file(d.base_path)
            b = conform(pf.read(use_threads=pf.metadata.num_rows > 65536), spec.schema)  # small: no thread pool
            if b.num_rows:
                bases.append(b)
                base_keys.append(pc.binary_join_element_wise(tag, b.column(KEY).cast(pa.string()), ""))
        blocks = valid_blocks(d.log_paths, spec) if d.log_paths else []
        if not blocks:
            continue
        data, events = log_records(blocks, spec)
        if data.num_rows:
            datas.append(data)
        if events is None:
            n_data += data.num_rows
            continue
        keys, kinds, ords, idx = events
        ev_keys.append(pc.binary_join_element_wise(tag, keys, ""))
        ev_kinds.append(kinds)
        ev_ords.append(ords)
        ev_idx.append(np.where(idx >= 0, idx + n_data, -1))
        n_data += data.num_rows
    empty = conform(pa.table({}), spec.schema).slice(0, 0)
    base = pa.concat_tables(bases) if bases else empty
    data = pa.concat_tables(datas) if datas else empty
    if not ev_keys:
        out = base
    else:
        events = (pa.concat_arrays(ev_keys), np.concatenate(ev_kinds),
                  pa.concat_arrays(ev_ords) if spec.event_time else None, np.concatenate(ev_idx))
        cols = {KEY: pa.chunked_array(base_keys, pa.string())}
        if spec.event_time:
            cols[spec.ordering_field] = base.column(spec.ordering_field)
        superseded, out_log = resolve(pa.table(cols), data, events, spec)
        out_base = base.filter(pa.array(~superseded)) if base.num_rows else base
        out = pa.concat_tables([out_base, out_log]) if out_log.num_rows else out_base
    return in_row_range(out, spec)


@dataclass(frozen=True)
class SliceOverlay:
    """What the log files change in a slice's base file: the base rows they supersede (row positions in the
    base file) and the log rows that win. base rows (minus `superseded`) + `rows` == merge_slice's rows."""

    rows: pa.Table  # in the table schema
    superseded: np.ndarray  # int64 row positions in the base file, ascending


def read_base_keys(path: str, spec: MergeSpec, key: str = KEY,
                   columns: pa.Table | None = None) -> tuple[pa.Table, np.ndarray]:
    """The base file's columns the merge decides on (record key; ordering field for event time), conformed like
    `read_base`, with each row's position in the file (every row: an incremental read decides against rows of
    any commit time and filters the merged rows afterwards, `in_row_range`). `key`: the
    column read as the key (the integer key column, see `slice_overlay`: returned as int64 under KEY; the
    record key strings when the file does not store it). `columns`: columns of the file read already (all of
    its rows), used when they include the ones needed."""
    with damaged_file(path):
        pf = storage_for(path).parquet_file(path)
    if key not in pf.schema_arrow.names:
        key = KEY
    cols = [key]
    if spec.event_time:
        cols.append(spec.ordering_field)
    cols = list(dict.fromkeys(cols))
    present = [c for c in cols if c in pf.schema_arrow.names]
    if columns is not None and present and all(c in columns.column_names for c in present):
        t = columns.select(present)
    else:
        t = pf.read(columns=present) if present else pa.table({"_": pa.nulls(pf.metadata.num_rows)})
    t = conform(t, pa.schema([spec.schema.field(c) for c in cols]))
    if key != KEY:  # the key column stays too: it may be the ordering field as well
        t = t.append_column(pa.field(KEY, pa.int64()), t.column(key).cast(pa.int64()))
    return t, np.arange(t.num_rows, dtype=np.int64)


def _as_int_keys(keys: pa.Array) -> pa.Array | None:
    """The log records' keys as int64 when every one is the decimal string of its integer (so matching the
    integers matches the strings); else None."""
    try:
        ints = pc.cast(keys, pa.int64())
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None
    return ints if pc.all(pc.equal(pc.cast(ints, pa.string()), keys)).as_py() is not False else None


def slice_overlay(desc: SliceDesc, spec: MergeSpec, blocks: list[LogBlock] | None = None,
                  base_columns: pa.Table | None = None) -> SliceOverlay:
    """The log side of `merge_slice` without reading the base file's other columns (the Spark read scans base
    files natively and drops `superseded` rows there); `blocks`: the slice's `valid_blocks`, if known;
    `base_columns`: columns of the base file read already (see `read_base_keys`)."""
    empty = conform(pa.table({}), spec.schema).slice(0, 0)
    none = np.array([], dtype=np.int64)
    if blocks is None:
        blocks = valid_blocks(desc.log_paths, spec) if desc.log_paths else []
    if not blocks:
        return SliceOverlay(empty, none)
    data, events = log_records(blocks, spec)
    if not spec.keyed:  # no record keys: append-only
        return SliceOverlay(in_row_range(data, spec), none)
    if events is None:
        return SliceOverlay(empty, none)
    if desc.base_path:
        # integers hash and compare at a fraction of the cost of the key strings of every base row
        int_keys = _as_int_keys(events[0]) if spec.int_key else None
        keys, pos = read_base_keys(desc.base_path, spec, spec.int_key if int_keys is not None else KEY,
                                   base_columns)
        if keys.column(KEY).type == pa.int64():
            events = (int_keys,) + tuple(events[1:])
    else:
        keys, pos = conform(pa.table({}), pa.schema([spec.schema.field(KEY)])).slice(0, 0), none
    superseded, rows = resolve(keys, data, events, spec)
    # (superseded base rows stay listed whatever their commit time: the base scan filters by the range itself)
    return SliceOverlay(in_row_range(rows, spec), pos[superseded])


def to_spark_arrow(schema: pa.Schema) -> pa.Schema:
    """The Arrow schema Spark expects for `arrow_to_spark(schema)` (timestamps in us/UTC, etc.), all nullable."""
    return pa.schema([pa.field(f.name, map_leaves(f.type, spark_leaf, f.name), True) for f in schema])
