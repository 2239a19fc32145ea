"""The aggregate engine without Spark: small change ranges folded on the driver with pyarrow.

A refresh after a small upstream commit touches a few thousand detail rows and rewrites a few thousand groups;
Spark's fixed costs (SQL analysis, several jobs for the change read, the aggregation and the upsert) are most
of its time. When the query and the range allow it, the same fold runs with pyarrow on the driver: the
upstream commit's change images (hudilite.reader.changes.local_changes), a hash aggregation of the signed
images, the affected groups' stored state, and an upsert of Arrow rows (hudilite/writer/local.py). Its result
is the one the Spark path computes (same group keys, state and output types); anything it does not cover
returns None and the Spark path runs.
"""

from __future__ import annotations

import datetime
import decimal
import functools
import re
import zoneinfo
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

import pyarrow as pa
import pyarrow.compute as pc

from hudilite.aggregate import state as st
from hudilite.aggregate.query import GROUP_KEY, IDENT, ROWS, AggregateQuery, default_name, unquote
from hudilite.aggregate.where import arrow_filter
from hudilite.reader.changes import LOCAL_SNAPSHOT_MAX_BYTES, local_changes, local_snapshot
from hudilite.reader.merge import SliceDesc, merge_slices
from hudilite.reader.planner import plan_read, table_schema
from hudilite.storage import storage_for
from hudilite.table import HoodieTable


def _plain_column(expr: str, q: AggregateQuery, names: List[str]) -> Optional[str]:
    """The detail column `expr` names when it is a bare (optionally qualified) column reference."""
    m = re.match(rf"^\s*(?:({IDENT})\s*\.\s*)?({IDENT})\s*$", expr)
    if not m:
        return None
    return _resolve(q, names, [unquote(m.group(1))] if m.group(1) else [], unquote(m.group(2)))


def _resolve(q: AggregateQuery, names: List[str], qualifier: List[str], column: str) -> Optional[str]:
    """The detail column a reference names (qualified by the FROM alias or table name, matched without case
    as Spark resolves it); None when it names none or several."""
    if len(qualifier) > 1 or (qualifier and qualifier[0].lower() not in {
            (q.alias or "").lower(), unquote(q.relation.split(".")[-1]).lower()}):
        return None
    hits = [n for n in names if n.lower() == column.lower()]
    return hits[0] if len(hits) == 1 else None


def _json_string(v: str) -> str:
    """A JSON string as Spark's to_json writes it (Jackson: short escapes for \\b \\t \\n \\f \\r, \\u00XX for
    other control characters, non-ASCII as is)."""
    return '"' + v.translate(_JSON_ESCAPES) + '"'


_JSON_ESCAPES = {i: f"\\u{i:04X}" for i in range(32)}
_JSON_ESCAPES.update({ord('"'): '\\"', ord("\\"): "\\\\", 8: "\\b", 9: "\\t", 10: "\\n", 12: "\\f", 13: "\\r"})


def _json_value(v, kind: str) -> str:
    if kind == "string":
        return _json_string(v)
    if kind == "bool":
        return "true" if v else "false"
    if kind == "date":
        return f'"{v.year:04d}-{v.month:02d}-{v.day:02d}"'
    if kind.startswith("timestamp:"):
        return _json_timestamp(v, kind[len("timestamp:"):])
    return str(int(v))


def _json_timestamp(v: datetime.datetime, tz: str) -> str:
    """A timestamp as to_json writes it: `yyyy-MM-dd'T'HH:mm:ss.SSSXXX` in the session time zone `tz`
    (milliseconds truncated; offset Z when zero, else +HH:MM, +HH:MM:ss for a local mean time)."""
    local_time = v.astimezone(zoneinfo.ZoneInfo(tz))
    off = local_time.utcoffset() or datetime.timedelta(0)
    if off:
        secs = int(off.total_seconds())
        h, rest = divmod(abs(secs), 3600)
        offset = f"{'+' if secs > 0 else '-'}{h:02d}:{rest // 60:02d}" + (f":{rest % 60:02d}" if rest % 60 else "")
    else:
        offset = "Z"
    t = local_time
    return (f'"{t.year:04d}-{t.month:02d}-{t.day:02d}T{t.hour:02d}:{t.minute:02d}:{t.second:02d}'
            f'.{t.microsecond // 1000:03d}{offset}"')


@functools.lru_cache(maxsize=8)
def _known_zone(tz: Optional[str]) -> bool:
    """Whether `tz` names a zone of this process's time zone database (region ids and UTC; Spark also
    accepts offsets such as +01:00, left to Spark)."""
    try:
        return tz is not None and zoneinfo.ZoneInfo(tz) is not None
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        return False


def arrow_group_keys(columns, kinds: List[str]):
    """`_hudilite_group_key` of each row of the key columns, exactly as `to_json(named_struct('k0', ...))`
    computes it in Spark (null fields left out)."""

    values = [c.to_pylist() for c in columns]
    out = []
    for row in zip(*values):
        out.append("{" + ",".join(f'"k{i}":{_json_value(v, kinds[i])}' for i, v in enumerate(row)
                                  if v is not None) + "}")
    return pa.array(out, pa.string())


def _key_kind(t, session_tz: Optional[str] = None) -> Optional[str]:
    """How `arrow_group_keys` writes a key of type `t`; timestamps only with the Spark session's time zone
    (to_json writes them in it) when this process knows the zone."""
    if pa.types.is_timestamp(t) and t.tz == "UTC" and _known_zone(session_tz):
        return f"timestamp:{session_tz}"
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "string"
    if pa.types.is_integer(t):
        return "int"
    if pa.types.is_boolean(t):
        return "bool"
    if pa.types.is_date32(t):
        return "date"
    return None


def _plain_keys(q: AggregateQuery, detail_schema, session_tz: Optional[str] = None) -> Optional[List[tuple]]:
    """The group keys as (detail column, kind, output name) when each is a plain detail column of a kind the
    Arrow fold groups by; else None."""
    out = []
    for k in q.keys:
        c = _plain_column(k.expr, q, detail_schema.names)
        kind = _key_kind(detail_schema.field(c).type, session_tz) if c else None
        if kind is None:
            return None
        out.append((c, kind, k.name))
    return out


def _recomputed_column(a, q: AggregateQuery, detail_schema) -> Optional[str]:
    """The detail column of a min / max / count(distinct) item when it is a plain column of a type whose order
    and equality Arrow shares with Spark; else None."""
    c = _plain_column(a.expr, q, detail_schema.names)
    if c is None:
        return None
    t = detail_schema.field(c).type
    return c if _key_kind(t) is not None or pa.types.is_decimal128(t) else None


@dataclass
class _ArrowPlan:
    keys: List[tuple]  # (detail column, kind, output name)
    aggs: List[tuple]  # (n, item, detail column or None for count(*), output name, output type)
    columns: List[str]  # detail columns to read
    stored: Any  # the aggregate table's schema
    where: Any = None  # the WHERE clause as a pyarrow.compute expression (None: no WHERE)
    where_columns: List[str] = field(default_factory=list)  # the detail columns it reads

    def filtered(self, t: pa.Table) -> pa.Table:
        """The rows of `t` the WHERE clause keeps (a null condition drops the row, as in Spark)."""
        return t if self.where is None else t.filter(self.where)


def _where(q: AggregateQuery, detail_schema):
    """(expression, columns) of the query's WHERE clause, (None, []) without one; None when it needs Spark."""
    if not q.where:
        return None, []
    return arrow_filter(q.where, lambda parts: _resolve(q, detail_schema.names, parts[:-1], parts[-1]),
                        detail_schema)


def _arrow_plan(q: AggregateQuery, detail_schema, agg_schema, session_tz=None) -> Optional[_ArrowPlan]:
    """What the Arrow fold needs, when the query is plain columns grouped and folded, its WHERE clause (if any)
    translates (`where.py`) and the aggregate table stores exactly the types the Spark path gives; else None."""

    where = _where(q, detail_schema)
    if where is None:
        return None
    names = detail_schema.names
    stored = {f.name: f.type for f in agg_schema}
    keys = _plain_keys(q, detail_schema, session_tz)
    if keys is None or any(stored.get(name) != detail_schema.field(c).type for c, _, name in keys):
        return None
    aggs, cols = [], [c for c, _, _ in keys]
    for n, a in enumerate(q.aggs):
        name = a.name or default_name(a)
        if a.expr == "*":
            col, want = None, pa.int64()
        else:
            col = _recomputed_column(a, q, detail_schema) if a in q.recomputed else _plain_column(a.expr, q, names)
            if col is None:
                return None
            t = detail_schema.field(col).type
            if a in q.recomputed:
                want = pa.int64() if a.distinct else t
                if stored.get(name) != want or stored.get(f"_hudilite_agg_r{n}") != want:
                    return None
                cols.append(col)
                aggs.append((n, a, col, name, want))
                continue
            if a.func == "count":
                want = pa.int64()
            elif pa.types.is_integer(t):
                want = pa.int64() if a.func == "sum" else pa.float64()
            elif pa.types.is_floating(t):
                want = pa.float64()
            elif pa.types.is_decimal128(t) and a.func == "sum":  # Spark: sum(decimal(p, s)) is decimal(p + 10, s)
                want = pa.decimal128(min(38, t.precision + 10), t.scale)
            elif pa.types.is_decimal128(t):  # avg(decimal(p, s)) is decimal(p + 4, s + 4)
                want = pa.decimal128(min(38, t.precision + 4), min(38, t.scale + 4))
            else:
                return None
            kept = stored.get(f"_hudilite_agg_s{n}")
            if a.func in ("sum", "avg") and not (kept == (pa.int64() if pa.types.is_integer(t) else pa.float64())
                                                 or (pa.types.is_decimal128(t) and pa.types.is_decimal128(kept)
                                                     and kept.scale == t.scale)):
                return None
            if stored.get(f"_hudilite_agg_c{n}") != pa.int64():
                return None
            cols.append(col)
        if stored.get(name) != want:
            return None
        aggs.append((n, a, col, name, want))
    if stored.get(ROWS) != pa.int64() or stored.get(GROUP_KEY) != pa.string():
        return None
    cols += where[1]
    return _ArrowPlan(keys, aggs, sorted(set(cols), key=names.index), agg_schema, where[0], where[1])


def _member(col, values):
    """Whether each value of `col` (a chunked array, maybe dictionary-encoded) is among `values` (null is a
    member when `values` has a null); None when every value is. Dictionary columns are tested on their
    dictionaries, then per index."""

    if not pa.types.is_dictionary(col.type):
        hit = pc.is_in(col, value_set=values, skip_nulls=False)
        return None if pc.all(hit).as_py() is not False else hit
    has_null = values.null_count > 0
    out, every = [], True
    for ch in col.chunks:
        in_dict = pc.is_in(ch.dictionary, value_set=values, skip_nulls=False)
        if pc.all(in_dict).as_py() is not False and (has_null or ch.null_count == 0):
            out.append(pa.repeat(pa.scalar(True), len(ch)))
            continue
        every = False
        out.append(pc.fill_null(pc.take(in_dict, ch.indices), has_null))
    return None if every else pa.chunked_array(out, pa.bool_())


def _snapshot_states(plan: _ArrowPlan, detail: str, end: str, items, groups=None):
    """The state (`state.py`) of each of `items` ((n, detail column, kind)) built from the detail's snapshot
    as of `end` read in this process — only the rows of `groups` (their key columns `__k<i>`) when given;
    None when the snapshot needs Spark (log files to merge, too large)."""

    key_cols = [c for c, _, _ in plan.keys]
    value_cols = {c for _, c, _ in items} | set(plan.where_columns)
    # string group keys read dictionary-encoded: ~1,000s of distinct values over millions of rows (columns
    # the WHERE clause compares stay plain)
    snap = local_snapshot(detail, end, sorted(set(key_cols) | value_cols), LOCAL_SNAPSHOT_MAX_BYTES,
                          dictionary=tuple(c for c in key_cols if c not in value_cols))
    if snap is None:
        return None
    snap = plan.filtered(snap)
    if groups is not None and len(key_cols) == 1:
        hit = _member(snap.column(key_cols[0]), groups.column("__k0").combine_chunks())
        snap = snap if hit is None else snap.filter(hit)
    elif groups is not None:  # several keys: a null-safe semi join
        snap, jk = st.null_safe_keys(snap, key_cols)
        keyed, _ = st.null_safe_keys(groups, st.key_names(len(key_cols)))
        snap = snap.join(keyed.select(jk), jk, join_type="left semi", use_threads=True)
    keys = [snap.column(c) for c in key_cols]
    key_types = [plan.stored.field(name).type for _, _, name in plan.keys]
    out = {}
    for n, col, kind in items:
        t = snap.schema.field(col).type
        value_type = t.value_type if pa.types.is_dictionary(t) else t
        out[n] = st.build(keys, snap.column(col), kind).cast(st.state_schema(key_types, value_type))
    return out


def _decimal_avg(sums, counts, out_type):
    """avg of a decimal column as the Spark fold computes it from the stored state: `sum / cast(count as
    decimal(20,0))` (a Spark decimal division: the quotient to 38 places, then to the division's result scale,
    HALF_UP each time), cast to the output type (HALF_UP again; null where it does not fit); null for groups
    without values."""
    p1, s1 = sums.type.precision, sums.type.scale
    scale = max(6, s1 + 20 + 1)
    prec = p1 - s1 + scale
    if prec > 38:  # Spark's adjustPrecisionScale: keep the integer digits, at least 6 decimals
        scale = max(38 - (prec - scale), min(scale, 6))
        prec = 38
    ctx = decimal.Context(prec=120, rounding=decimal.ROUND_HALF_UP)
    out = []
    for s, c in zip(sums.to_pylist(), counts.to_pylist()):
        if s is None or not c or c <= 0:
            out.append(None)
            continue
        q = ctx.divide(s, decimal.Decimal(c)).quantize(decimal.Decimal(1).scaleb(-38), context=ctx)
        q = q.quantize(decimal.Decimal(1).scaleb(-scale), context=ctx)
        if not _fits(q, prec, scale):
            out.append(None)
            continue
        q = q.quantize(decimal.Decimal(1).scaleb(-out_type.scale), context=ctx)
        out.append(q if _fits(q, out_type.precision, out_type.scale) else None)
    return pa.array(out, out_type)


def _fits(v: decimal.Decimal, precision: int, scale: int) -> bool:
    return v == 0 or v.adjusted() < precision - scale


STORED_MERGE_MAX_BYTES = LOCAL_SNAPSHOT_MAX_BYTES  # log-file slices of the aggregate merged here at most


def _stored_rows(agg_plan, schema: pa.Schema) -> Optional[pa.Table]:
    """The `schema` columns of the aggregate table's latest rows, read in this process: base files as they
    are, merge-on-read slices with log files merged (`reader.merge`, the merge Spark's read runs in its
    workers); None when those slices exceed STORED_MERGE_MAX_BYTES (read through Spark)."""
    parts = [storage_for(f).read_parquet(f, columns=schema.names).cast(schema) for f in agg_plan.plain_files]
    merged = agg_plan.merged_slices
    if merged:
        files = [f for s in merged for f in ([s.base_file] if s.base_file is not None else []) + s.log_files]
        size = sum(f.size or agg_plan.table.fs.size(f.path) for f in files)
        if size > STORED_MERGE_MAX_BYTES:
            return None
        rows = merge_slices([SliceDesc.of(s) for s in merged], agg_plan.merge_spec())
        parts.append(rows.select(schema.names).cast(schema))
    return pa.concat_tables(parts) if parts else schema.empty_table()


def _state_items(plan: _ArrowPlan, q: AggregateQuery):
    """(n, detail column, kind) of the aggregates kept as value multisets: min, max, count(distinct)."""
    return [(n, col, st.DISTINCT if a.distinct else a.func) for n, a, col, _, _ in plan.aggs if a in q.recomputed]


def incremental_arrow(q: AggregateQuery, detail: str, agg_path: str, start: str, end: str,
                      session_tz: Optional[str] = None):
    """`_fold_arrow`, or None (the Spark fold) where Arrow refuses a value: a decimal sum that outgrows its
    stored or output type is null or an error in Spark depending on the session's ANSI mode, which this
    process does not decide."""
    try:
        return _fold_arrow(q, detail, agg_path, start, end, session_tz)
    except pa.ArrowInvalid:
        return None


def _fold_arrow(q: AggregateQuery, detail: str, agg_path: str, start: str, end: str,
                session_tz: Optional[str] = None):
    """(upsert rows as an Arrow table incl. `_hoodie_is_deleted`, visible columns, extraMetadata of the
    aggregate's value multisets) computed in this process, as `incremental_frame` computes them in Spark; None
    when the query, the tables or the range need Spark.

    count / sum / avg fold the signed change images into the stored per-group state. min / max /
    count(distinct) fold them into their value multisets (`state.py`: loaded for `start`, or built from the
    detail snapshot when the table has none for it) and take the affected groups' values from there; a group
    whose min / max buffer emptied is read again from the snapshot (its rows only).

    `session_tz`: the Spark session's time zone (`spark.sql.session.timeZone`), in which Spark writes
    timestamp group keys into `_hudilite_group_key`; without it a timestamp key leaves the fold to Spark."""

    agg_plan = plan_read(agg_path)
    plan = _arrow_plan(q, table_schema(HoodieTable.open(detail)), agg_plan.schema, session_tz)
    if plan is None:
        return None
    ch = local_changes(detail, start, end, before_image=True, completion_bounds=True,
                       columns=plan.columns or None)
    if ch is None:
        return None
    # before and after images each count where the clause holds for them (a row updated into or out of it
    # adds or retracts, as the Spark path's WHERE over the signed images does)
    ch = plan.filtered(ch)
    positive = pc.is_in(ch.column("_change_op"), value_set=pa.array(["I", "U"]))
    sign = pc.if_else(positive, pa.scalar(1, pa.int64()), pa.scalar(-1, pa.int64()))
    cols = {f"__k{i}": ch.column(c) for i, (c, _, _) in enumerate(plan.keys)}
    cols[ROWS] = sign
    specs = [(ROWS, "sum")]
    state = [ROWS]
    for n, a, col, _, _ in plan.aggs:
        if col is None or a in q.recomputed:
            continue
        x = ch.column(col)
        if a.func in ("sum", "avg") and pa.types.is_decimal128(x.type):
            # exact: widened to 38 digits, negated for retractions (the sum is cast to the stored type)
            wide = x.cast(pa.decimal128(38, x.type.scale))
            cols[f"_hudilite_agg_s{n}"] = pc.if_else(positive, wide, pc.negate_checked(wide))
            state.append(f"_hudilite_agg_s{n}")
            specs.append((f"_hudilite_agg_s{n}", "sum"))
        elif a.func in ("sum", "avg"):
            num = pa.int64() if pa.types.is_integer(x.type) else pa.float64()
            cols[f"_hudilite_agg_s{n}"] = pc.multiply(x.cast(num), sign.cast(num))
            state.append(f"_hudilite_agg_s{n}")
            specs.append((f"_hudilite_agg_s{n}", "sum"))
        cols[f"_hudilite_agg_c{n}"] = pc.if_else(pc.is_valid(x), sign, pa.scalar(0, pa.int64()))
        state.append(f"_hudilite_agg_c{n}")
        specs.append((f"_hudilite_agg_c{n}", "sum"))
    key_names = st.key_names(len(plan.keys))
    delta = pa.table(cols).group_by(key_names, use_threads=False).aggregate(specs)
    renamed = {f"{c}_{fn}": c for c, fn in specs}
    delta = delta.rename_columns([renamed.get(c, c) for c in delta.column_names])
    try:
        gkey = arrow_group_keys([delta.column(k) for k in key_names], [k[1] for k in plan.keys])
    except (ValueError, OverflowError):  # a timestamp beyond Python's years 1-9999: Spark writes the key
        return None
    delta = delta.append_column(GROUP_KEY, gkey)
    # the affected groups' stored state
    stored_cols = [GROUP_KEY] + state
    cur = _stored_rows(agg_plan, pa.schema([plan.stored.field(c) for c in stored_cols]))
    if cur is None:
        return None
    cur = cur.filter(pc.is_in(cur.column(GROUP_KEY), value_set=gkey))
    cur = cur.rename_columns([GROUP_KEY] + [f"__cur{c}" for c in stored_cols[1:]])
    j = delta.join(cur, GROUP_KEY, join_type="left outer", use_threads=False)

    def new_state(c):
        t = plan.stored.field(c).type
        zero = pa.scalar(decimal.Decimal(0) if pa.types.is_decimal(t) else 0, t)
        # decimal sums widen by a digit: back to the stored type (an overflow raises, never wraps)
        return pc.add(pc.fill_null(j.column(f"__cur{c}").cast(t), zero),
                      pc.fill_null(j.column(c).cast(t), zero)).cast(t)

    items = _state_items(plan, q)
    state_extra = {}
    if items:  # min / max / count(distinct): the value multisets folded, the affected groups' values read off
        current = st.stored_entry(agg_path)
        states = _fold_states(plan, q, detail, agg_path, current, start, end, ch, sign, items)
        if states is None:
            return None
        j, jk = st.null_safe_keys(j, key_names)
        for n, _, kind in items:
            per, _ = st.null_safe_keys(st.per_group(states[n], len(key_names), kind), key_names)
            per = per.drop_columns(key_names)
            j = j.join(per.rename_columns([f"__r{n}" if c == "__r" else c for c in per.column_names]), jk,
                       join_type="left outer", use_threads=False)
        state_extra = st.save(agg_path, states, q.signature(), detail, end, current)
    new = {c: new_state(c) for c in state}
    out, visible = {}, []
    for item in q.items:
        if item.is_key:
            i = q.keys.index(item)
            name = plan.keys[i][2]
            out[name] = j.column(f"__k{i}").cast(plan.stored.field(name).type)
        else:
            n, a, col, name, want = next(x for x in plan.aggs if x[1] is item)
            if a in q.recomputed:  # from the multiset: no value left -> min / max null, count(distinct) 0
                v = j.column(f"__r{n}").cast(want)
                v = pc.fill_null(v, 0) if a.distinct else v
                new[f"_hudilite_agg_r{n}"] = v
            elif col is None:
                v = new[ROWS]
            else:
                c = new[f"_hudilite_agg_c{n}"]
                some = pc.greater(c, 0)
                if a.func == "count":
                    v = c
                elif a.func == "sum":
                    v = pc.if_else(some, new[f"_hudilite_agg_s{n}"].cast(want), pa.scalar(None, want))
                elif pa.types.is_decimal(want):
                    v = _decimal_avg(new[f"_hudilite_agg_s{n}"], c, want)
                else:
                    v = pc.if_else(some, pc.divide(new[f"_hudilite_agg_s{n}"].cast(pa.float64()),
                                                   c.cast(pa.float64())), pa.scalar(None, pa.float64()))
            out[name] = v.cast(want)
        visible.append(name)
    out[GROUP_KEY] = j.column(GROUP_KEY)
    out.update(new)
    out["_hoodie_is_deleted"] = pc.less_equal(new[ROWS], 0)
    return pa.table(out), visible, state_extra


def full_state(q: AggregateQuery, detail: str, agg_path: str, end: Optional[str],
               session_tz: Optional[str] = None) -> Dict[str, str]:
    """For a full build: the value multisets of min / max / count(distinct) of the whole detail as of `end`,
    saved beside the aggregate table; the extraMetadata entry for the build's commit ({} when the query has
    none, the driver-local fold would not apply to it, or the snapshot needs Spark: the first driver-local
    refresh then builds them)."""

    if not q.recomputed or end is None:
        return {}
    schema = table_schema(HoodieTable.open(detail))
    keys = _plain_keys(q, schema, session_tz)
    where = _where(q, schema)
    items = [(n, _recomputed_column(a, q, schema), st.DISTINCT if a.distinct else a.func)
             for n, a in enumerate(q.aggs) if a in q.recomputed]
    if keys is None or where is None or any(c is None for _, c, _ in items):
        return {}
    plan = _ArrowPlan(keys, [], [], pa.schema([(name, schema.field(c).type) for c, _, name in keys]), *where)
    states = _snapshot_states(plan, detail, end, items)
    if states is None:
        return {}
    return st.save(agg_path, states, q.signature(), detail, end, st.stored_entry(agg_path))


def _fold_states(plan: _ArrowPlan, q: AggregateQuery, detail: str, agg_path: str, current, start: str,
                 end: str, ch, sign, items):
    """The value multiset of each item as of `end`: the stored state (`current`) of `start` with the signed
    change images folded in (groups whose min / max buffer emptied read again from the snapshot), or (no
    usable stored state) built from the detail snapshot as of `end`; None when a snapshot read needs Spark."""

    key_types = [plan.stored.field(name).type for _, _, name in plan.keys]
    schemas = {n: st.state_schema(key_types, ch.schema.field(col).type) for n, col, _ in items}
    states = st.load(agg_path, current, q.signature(), detail, start, schemas)
    if states is None:
        return _snapshot_states(plan, detail, end, items)
    keys = [ch.column(c) for c, _, _ in plan.keys]
    out = {}
    for item in items:
        n, col, kind = item
        out[n], emptied = st.fold(states[n], keys, ch.column(col), sign, kind)
        if emptied is not None and emptied.num_rows:  # min / max buffers emptied: those groups' snapshot rows
            again = _snapshot_states(plan, detail, end, [item], emptied)
            if again is None:
                return None
            out[n] = pa.concat_tables([out[n], again[n].cast(out[n].schema)])
    return out


