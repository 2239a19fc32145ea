"""`materialized='aggregate'`: an aggregate table kept up to date from its detail table's changes.

Supported model SQL (one statement, parsed with sqlparse; anything else is a compilation error naming why):

    select <group key expr> [as k], ..., count(*), count(x), sum(x), avg(x), min(x), max(x), count(distinct y)
    from {{ ref('detail') }} [alias]
    [where <condition on detail columns>]
    group by <the key expressions, their aliases or ordinals>

First run (and --full-refresh, or after the model's SQL changed): computed in full from the detail snapshot
as of the end fixed when the model starts. Later runs read the detail's changes since the checkpoint with
before images (`hudilite.changes`): inserted rows add (+1), the before image of an updated row retracts (-1)
and its new image adds (+1), deleted rows retract; the WHERE applies to each image. Per group the table keeps
hidden state (`_hudilite_agg_rows` = rows in the group, sums and non-null counts for sum/avg/count(x)), so
count/sum/avg fold the deltas in. min/max/count(distinct) fold into value multisets kept beside the table
(`agg_state`) on the driver-local path, and are recomputed for the affected groups from the detail snapshot
in the Spark path. Groups whose row count drops to 0 are deleted. The
result is ONE upsert commit keyed by the group keys (`_hudilite_group_key`), carrying the checkpoint:
re-running the same range is idempotent.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from dbt.adapters.events.logging import AdapterLogger
from dbt_common.exceptions import CompilationError, DbtRuntimeError

from dbt.adapters.hudilite import agg_state as st
from dbt.adapters.hudilite.incremental import CHECKPOINT_KEY

logger = AdapterLogger("Hudilite")

GROUP_KEY = "_hudilite_group_key"
ROWS = "_hudilite_agg_rows"
SIGNATURE_KEY = "hudilite.aggregate.signature"
_AGG_FUNCS = ("count", "sum", "min", "max", "avg")
_OTHER_AGGS = re.compile(
    r"(?i)\b(count|sum|min|max|avg|mean|first|last|any_value|collect_list|collect_set|stddev\w*|std|var\w*|"
    r"percentile\w*|approx_\w+|median|mode|bool_and|bool_or|every|some|max_by|min_by|count_if|array_agg|"
    r"string_agg|listagg|corr|covar\w*|kurtosis|skewness|grouping\w*|bit_\w+|regr_\w+|histogram_numeric|"
    r"row_number|rank|dense_rank|lag|lead|ntile)\s*\(")
_IDENT = r"(?:`[^`]+`|[A-Za-z_][A-Za-z0-9_]*)"


def _err(msg: str) -> CompilationError:
    return CompilationError(
        f"materialized='aggregate': {msg}. Supported: select <group keys>, count(*), count(x), sum(x), avg(x), "
        "min(x), max(x), count(distinct x) from {{ ref('detail') }} [where ...] group by <keys>")


@dataclass
class Item:
    expr: str  # SQL text (aggregates: the argument; '*' for count(*))
    name: str  # output column name
    func: Optional[str] = None  # None: a group key
    distinct: bool = False

    @property
    def is_key(self) -> bool:
        return self.func is None


@dataclass
class AggregateQuery:
    items: List[Item]
    relation: str  # as written (e.g. `schema`.`detail`)
    alias: Optional[str]
    where: Optional[str]
    group_by: List[str] = field(default_factory=list)  # key expressions

    @property
    def keys(self) -> List[Item]:
        return [i for i in self.items if i.is_key]

    @property
    def aggs(self) -> List[Item]:
        return [i for i in self.items if not i.is_key]

    @property
    def recomputed(self) -> List[Item]:
        return [i for i in self.aggs if i.func in ("min", "max") or i.distinct]

    def signature(self) -> str:
        blob = json.dumps([[i.expr, i.name, i.func, i.distinct] for i in self.items] + [self.where or ""])
        return hashlib.sha1(blob.encode()).hexdigest()[:16]


# ---- parsing -------------------------------------------------------------------------------------------
def _split_top(text: str, sep: str = ",") -> List[str]:
    out, depth, cur, quote = [], 0, [], None
    for ch in text:
        if quote:
            cur.append(ch)
            if ch == quote:
                quote = None
            continue
        if ch in ("'", '"', "`"):
            quote = ch
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == sep and depth == 0:
            out.append("".join(cur).strip())
            cur = []
            continue
        cur.append(ch)
    if "".join(cur).strip():
        out.append("".join(cur).strip())
    return out


def _norm(expr: str) -> str:
    return re.sub(r"\s+", " ", expr.strip().replace("`", "")).lower()


def _unquote(name: str) -> str:
    return name[1:-1] if name.startswith("`") and name.endswith("`") else name


def _call(expr: str):
    """(func, inner) when `expr` is exactly one call `f(...)` of a supported aggregate."""
    m = re.match(r"(?is)^\s*([A-Za-z_]+)\s*\((.*)\)\s*$", expr)
    if not m or m.group(1).lower() not in _AGG_FUNCS:
        return None
    inner = m.group(2)
    depth = 0
    for ch in inner:  # the closing parenthesis must be the call's own
        depth += ch == "("
        depth -= ch == ")"
        if depth < 0:
            return None
    return m.group(1).lower(), inner.strip()


def _item(text: str) -> Item:
    import sqlparse
    from sqlparse.sql import Identifier

    alias = None
    parsed = [t for t in sqlparse.parse(text)[0].tokens if not t.is_whitespace]
    if len(parsed) == 1 and isinstance(parsed[0], Identifier) and parsed[0].get_alias():
        m = re.match(rf"(?is)^(.*?)\s+(?:as\s+)?({_IDENT})\s*$", text)
        if m:
            text, alias = m.group(1).strip(), _unquote(m.group(2))
    call = _call(text)
    if call is None:
        if _OTHER_AGGS.search(text):
            raise _err(f"unsupported select expression {text!r} (an aggregate must be a single call, not part of "
                       "an expression)")
        return Item(text, alias or _unquote(text.split(".")[-1].strip()))
    func, inner = call
    distinct = bool(re.match(r"(?is)^distinct\s+", inner))
    if distinct:
        inner = re.sub(r"(?is)^distinct\s+", "", inner).strip()
        if func != "count":
            raise _err(f"{func}(distinct ...) is not supported (only count(distinct x))")
    if inner == "*" and (func != "count" or distinct):
        raise _err(f"{func}(*) is not supported")
    if inner in ("1",) and func == "count":
        inner = "*"
    if _OTHER_AGGS.search(inner):
        raise _err(f"nested aggregate in {text!r}")
    if "," in _split_top(inner)[0] or len(_split_top(inner)) != 1:
        raise _err(f"{text!r}: one argument expected")
    return Item(inner, alias or "", func, distinct)


def parse(sql: str) -> AggregateQuery:
    import sqlparse
    from sqlparse.sql import Where
    from sqlparse.tokens import CTE, DML, Keyword, Punctuation

    text = sqlparse.format(sql, strip_comments=True).strip().rstrip(";").strip()
    stmts = [s for s in sqlparse.parse(text) if str(s).strip()]
    if len(stmts) != 1:
        raise _err("the model must be exactly one SELECT statement")
    section, parts = None, {"select": [], "from": [], "where": [], "group": []}
    for tok in stmts[0].tokens:
        if tok.is_whitespace:
            continue
        v = tok.value.upper() if tok.ttype is not None else ""
        if tok.ttype is CTE:
            raise _err("WITH (common table expressions) is not supported")
        if tok.ttype is DML:
            if v != "SELECT" or section is not None:
                raise _err(f"unexpected {tok.value}")
            section = "select"
            continue
        if isinstance(tok, Where):
            if section != "from":
                raise _err("WHERE in an unexpected place")
            section = "where"
            parts["where"].append(str(tok)[len("where"):].strip())
            continue
        if tok.ttype in Keyword and v == "FROM":
            section = "from"
            continue
        if tok.ttype in Keyword and re.sub(r"\s+", " ", v) == "GROUP BY":
            section = "group"
            continue
        if tok.ttype in Keyword and v in ("DISTINCT", "ALL") and section == "select" and not parts["select"]:
            raise _err("SELECT DISTINCT is not supported")
        if tok.ttype in Keyword and section in ("from", "where", "group"):
            what = re.sub(r"\s+", " ", v)
            if "JOIN" in what:
                raise _err("joins are not supported (aggregate one hudilite table; join in the detail model)")
            raise _err(f"{what} is not supported")
        if tok.ttype is Punctuation and tok.value == ";":
            continue
        if section is None:
            raise _err("the model must be a SELECT")
        parts[section].append(str(tok))
    if not parts["select"] or not parts["from"]:
        raise _err("SELECT ... FROM expected")
    if not parts["group"]:
        raise _err("GROUP BY expected")
    rel_text = " ".join(parts["from"]).strip()
    m = re.match(rf"(?is)^({_IDENT}(?:\.{_IDENT})*)(?:\s+(?:as\s+)?({_IDENT}))?$", rel_text)
    if not m:
        raise _err(f"FROM must name one table (got {rel_text!r}; subqueries and joins are not supported)")
    items = [_item(t) for t in _split_top(" ".join(parts["select"]))]
    if not any(not i.is_key for i in items):
        raise _err("no aggregate in the select list")
    keys = [i for i in items if i.is_key]
    group = _split_top(" ".join(parts["group"]))
    matched: List[Item] = []
    for g in group:
        hit = None
        if g.strip().isdigit():
            n = int(g)
            if not 1 <= n <= len(items) or not items[n - 1].is_key:
                raise _err(f"GROUP BY {g}: not the position of a group key in the select list")
            hit = items[n - 1]
        else:
            for k in keys:
                if _norm(k.expr) == _norm(g) or _norm(k.name) == _norm(g):
                    hit = k
                    break
        if hit is None:
            raise _err(f"GROUP BY {g.strip()!r} must also be in the select list (the group keys are the table's key)")
        matched.append(hit)
    missing = [k.expr for k in keys if all(k is not h for h in matched)]
    if missing:
        raise _err(f"select expressions {missing} are neither aggregates nor in GROUP BY")
    if not keys:
        raise _err("at least one group key is needed (the group keys are the table's record key)")
    where = " ".join(parts["where"]).strip() or None
    if where and _OTHER_AGGS.search(where) and re.search(r"(?i)\b(count|sum|min|max|avg)\s*\(", where):
        raise _err("aggregates in WHERE are not supported (HAVING is not supported either)")
    return AggregateQuery(items, m.group(1), _unquote(m.group(2)) if m.group(2) else None, where,
                          [k.expr for k in keys])


# ---- SQL over a view of the detail rows -------------------------------------------------------------------
def _q(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _from(q: AggregateQuery, view: str) -> str:
    return f"{view} {_q(q.alias)}" if q.alias else f"{view} {_q(q.relation.split('.')[-1].strip('`'))}"


def _group_key_sql(keys: List[str]) -> str:
    return "to_json(named_struct(" + ", ".join(f"'k{i}', {k}" for i, k in enumerate(keys)) + "))"


def _state_sql(q: AggregateQuery, view: str, signed: bool) -> str:
    """Per group: keys, row count and the foldable state (sums and non-null counts); `signed`: each image
    contributes +1/-1 (column __hl_sign)."""
    sign = "__hl_sign" if signed else "1"
    cols = [f"{k.expr} AS {_q(f'__hl_k{i}')}" for i, k in enumerate(q.keys)]
    cols.append(f"{_group_key_sql([k.expr for k in q.keys])} AS {GROUP_KEY}")
    cols.append(f"sum({sign}) AS {ROWS}")
    for n, a in enumerate(q.aggs):
        if a.func in ("sum", "avg"):
            cols.append(f"sum({sign} * ({a.expr})) AS {_q(f'_hudilite_agg_s{n}')}")
        if a.func in ("sum", "avg") or (a.func == "count" and a.expr != "*" and not a.distinct):
            cols.append(f"sum(CASE WHEN ({a.expr}) IS NOT NULL THEN {sign} ELSE 0 END) AS {_q(f'_hudilite_agg_c{n}')}")
    where = f" WHERE {q.where}" if q.where else ""
    return f"SELECT {', '.join(cols)} FROM {_from(q, view)}{where} GROUP BY {', '.join(q.group_by)}"


def _recompute_sql(q: AggregateQuery, view: str) -> str:
    cols = [f"{_group_key_sql([k.expr for k in q.keys])} AS {GROUP_KEY}"]
    for n, a in enumerate(q.aggs):
        if a in q.recomputed:
            fn = f"count(DISTINCT {a.expr})" if a.distinct else f"{a.func}({a.expr})"
            cols.append(f"{fn} AS {_q(f'_hudilite_agg_r{n}')}")
    where = f" WHERE {q.where}" if q.where else ""
    return f"SELECT {', '.join(cols)} FROM {_from(q, view)}{where} GROUP BY {', '.join(q.group_by)}"


def _outputs(q: AggregateQuery, out_schema):
    """Output columns (model's names and types) from the state columns."""
    from pyspark.sql import functions as F

    cols = []
    for i, item in enumerate(q.items):
        field = out_schema.fields[i]
        if item.is_key:
            expr = F.col(_q(f"__hl_k{q.keys.index(item)}"))
        else:
            n = q.aggs.index(item)
            s, c = F.col(f"_hudilite_agg_s{n}"), F.col(f"_hudilite_agg_c{n}")
            if item.func == "count" and item.expr == "*":
                expr = F.col(ROWS)
            elif item.func == "count" and not item.distinct:
                expr = c
            elif item.func == "sum":
                expr = F.when(c > 0, s)
            elif item.func == "avg":
                expr = F.when(c > 0, s.cast("double") / c.cast("double")) if not _is_decimal(field.dataType) \
                    else F.when(c > 0, s / c.cast("decimal(20,0)"))
            else:
                expr = F.col(f"_hudilite_agg_r{n}")
        cols.append(expr.cast(field.dataType).alias(field.name))
    return cols


def _is_decimal(t) -> bool:
    from pyspark.sql.types import DecimalType

    return isinstance(t, DecimalType)


# ---- the materialization --------------------------------------------------------------------------------
def materialize_aggregate(env, schema: str, identifier: str, sql: str, cfg: Dict[str, Any]):
    from dbt.adapters.hudilite.environment import ModelSpec
    from dbt.adapters.hudilite.incremental import model_key, resume_position, run_state
    from hudilite.table import HoodieTable

    from dbt.adapters.hudilite.incremental import set_publish_options

    q = parse(sql)
    spec = ModelSpec.from_config(cfg)
    set_publish_options(env, schema, identifier, cfg)
    if spec.record_key:
        raise CompilationError("materialized='aggregate': the group keys are the table's key; do not set unique_key")
    names = [i.name for i in q.items]
    if spec.partition_by and any(p not in [k.name for k in q.keys] for p in spec.partition_by):
        raise CompilationError(f"materialized='aggregate': partition_by {spec.partition_by} must name group keys")
    parts = [p.strip("`") for p in re.findall(_IDENT, q.relation)]
    d_schema = parts[-2] if len(parts) >= 2 else env.spark.catalog.currentDatabase()
    d_entry = env.describe(d_schema, parts[-1])
    if d_entry is None or not d_entry.is_hudilite:
        raise CompilationError(f"materialized='aggregate': {q.relation} is not a hudilite table (aggregate a "
                               "ref() to a hudilite model)")
    detail = d_entry.path
    key = model_key(schema, identifier)
    state = run_state(env)
    end, detail_id = state.fixed_position(key, detail)
    state.set_extra(key, {SIGNATURE_KEY: q.signature()})
    with env._table_lock(schema, identifier):
        entry = env.describe(schema, identifier)
        path = env.table_path(schema, identifier, spec)
        start = None
        if (entry is not None and entry.is_hudilite and not spec.full_refresh and HoodieTable.exists(path)
                and _stored_signature(path) == q.signature()):
            start, rebuilt = resume_position(path, detail, detail_id)
            if rebuilt:  # the state folds changes of another table: recompute from the new snapshot
                logger.warning(f"hudilite: {q.relation} was rebuilt since the checkpoint of {schema}.{identifier}: "
                               "recomputing the aggregate from its snapshot")
        spec.record_key = [GROUP_KEY]
        if start is None:
            return _full(env, q, schema, identifier, path, detail, end, spec, entry)
        return _incremental(env, q, schema, identifier, path, detail, start, end, spec, entry, names)


def _stored_signature(path: str) -> Optional[str]:
    from hudilite.table import HoodieTable

    tl = HoodieTable.open(path).timeline
    for inst in reversed(tl.completed()):
        v = (tl.read_metadata(inst).get("extraMetadata") or {}).get(SIGNATURE_KEY)
        if v:
            return v
    return None


def _view(df, tag: str) -> str:
    import uuid

    name = f"hudilite_agg_{tag}_{uuid.uuid4().hex[:10]}"
    df.createOrReplaceTempView(name)
    return _q(name)


def _snapshot(spark, detail: str, end: Optional[str]):
    from hudilite.reader.changes import snapshot_plan
    from hudilite.spark.read import plan_to_dataframe
    from hudilite.table import HoodieTable

    return plan_to_dataframe(spark, snapshot_plan(HoodieTable.open(detail), end))


def _out_schema(spark, q: AggregateQuery, view: str):
    from pyspark.sql.types import StructField, StructType

    where = f" WHERE {q.where}" if q.where else ""
    select = ", ".join(
        (i.expr if i.is_key else (f"count(DISTINCT {i.expr})" if i.distinct else f"{i.func}({i.expr})"))
        + f" AS {_q(i.name or f'_c{n}')}" for n, i in enumerate(q.items))
    df = spark.sql(f"SELECT {select} FROM {_from(q, view)}{where} GROUP BY {', '.join(q.group_by)}")
    return StructType([StructField(i.name or _default_name(i), f.dataType, True)
                       for i, f in zip(q.items, df.schema.fields)])


def _default_name(i: Item) -> str:
    inner = "1" if i.expr == "*" else i.expr
    return f"{i.func}({'DISTINCT ' if i.distinct else ''}{inner})"


# ---- the engine (SparkSession only: dbt, the property test and the benchmark use it) -----------------------
def full_frame(spark, q: AggregateQuery, detail: str, end: Optional[str]):
    """(rows to write, visible columns): the aggregate computed in full from the detail as of `end`."""
    from pyspark.sql import functions as F

    snap = _view(_snapshot(spark, detail, end), "snap")
    out_schema = _out_schema(spark, q, snap)
    st = spark.sql(_state_sql(q, snap, signed=False))
    if q.recomputed:
        st = st.join(spark.sql(_recompute_sql(q, snap)), GROUP_KEY, "left")
    hidden = [c for c in st.columns if c.startswith("_hudilite_agg_") or c == ROWS]
    df = st.select(*_outputs(q, out_schema), F.col(GROUP_KEY), *[F.col(c) for c in hidden])
    return df, [f.name for f in out_schema.fields]


def detail_columns(q: AggregateQuery, names: List[str]) -> List[str]:
    """The detail columns the query may reference: every identifier of its SQL text that names a column (a
    superset is harmless; Spark resolves names case-insensitively); the record key when none is."""
    text = " ".join([i.expr for i in q.items] + [q.where or ""] + list(q.group_by))
    tokens = {t.strip("`").lower() for t in re.findall(r"`[^`]+`|[A-Za-z_][A-Za-z0-9_]*", text)}
    return [n for n in names if n.lower() in tokens] or ["_hoodie_record_key"]


def incremental_frame(spark, q: AggregateQuery, detail: str, agg_path: str, start: str, end: str):
    """(upsert rows incl. `_hoodie_is_deleted`, visible columns, persisted frames to release): the detail's
    changes in (start, end] folded into the affected groups of the aggregate table at `agg_path`."""
    import hudilite
    from pyspark.sql import functions as F

    from hudilite.spark.changes import changes
    from hudilite.reader.planner import table_schema
    from hudilite.table import HoodieTable

    cols = detail_columns(q, table_schema(HoodieTable.open(detail)).names)
    ch = changes(spark, detail, begin=start, end=end, before_image=True, completion_bounds=True, columns=cols)
    ch = ch.withColumn("__hl_sign", F.when(F.col("_change_op").isin("I", "U"), F.lit(1)).otherwise(F.lit(-1)))
    cview = _view(ch, "chg")
    snap = _view(_snapshot(spark, detail, end), "snap")
    out_schema = _out_schema(spark, q, snap)
    # the per-group deltas, persisted: the change rows are read once, however often the plan below uses them
    delta = spark.sql(_state_sql(q, cview, signed=True)).persist()
    cur = hudilite.read(spark, agg_path)
    stored = {f.name: f.dataType for f in cur.schema.fields}
    state_cols = [c for c in delta.columns if c.startswith("_hudilite_agg_") or c == ROWS]
    cur = cur.select(F.col(GROUP_KEY), *[F.col(c).alias(f"__cur_{c}") for c in state_cols])
    j = delta.join(cur, GROUP_KEY, "left")
    merged = [F.col(GROUP_KEY)] + [F.col(_q(f"__hl_k{i}")) for i in range(len(q.keys))]
    for c in state_cols:  # old state + delta, in the stored column's type
        v = F.coalesce(F.col(f"__cur_{c}"), F.lit(0)) + F.coalesce(F.col(c), F.lit(0))
        merged.append((v.cast(stored[c]) if c in stored else v).alias(c))
    new = j.select(*merged)
    if q.recomputed:  # min / max / count(distinct): only the affected groups, from the detail snapshot
        aff = _view(delta.select(*[_q(f"__hl_k{i}") for i in range(len(q.keys))]), "aff")
        alias = _from(q, snap).split(" ", 1)[1]
        # a broadcast semi join on the group key expressions (null-safe: a null key is a group too)
        on = " AND ".join(f"({k.expr}) <=> __hl_a.{_q(f'__hl_k{i}')}" for i, k in enumerate(q.keys))
        rows_of = _view(spark.sql(
            f"SELECT /*+ BROADCAST(__hl_a) */ {alias}.* FROM {_from(q, snap)} LEFT SEMI JOIN {aff} __hl_a ON {on}"),
            "rows")
        new = new.join(spark.sql(_recompute_sql(q, rows_of)), GROUP_KEY, "left")
    hidden = [c for c in new.columns if c.startswith("_hudilite_agg_") or c == ROWS]
    # one pass: groups whose row count dropped to 0 are written as deletes
    out = new.select(*_outputs(q, out_schema), F.col(GROUP_KEY), *[F.col(c) for c in hidden],
                     (F.col(ROWS) <= 0).alias("_hoodie_is_deleted"))
    return out, [f.name for f in out_schema.fields], [delta]


# ---- the engine without Spark: small deltas folded in this process ------------------------------------------
# A refresh after a small upstream commit touches a few thousand detail rows and rewrites a few thousand groups;
# Spark's fixed costs (SQL analysis, several jobs for the change read, the aggregation and the upsert) are most
# of its time. When the query and the range allow it, the same fold runs with pyarrow on the driver: the
# upstream commit's change images (hudilite.reader.changes.local_changes), a hash aggregation of the signed
# images, the affected groups' stored state, and an upsert of Arrow rows (hudilite/writer/local.py). Its result
# is the one the Spark path computes (same group keys, state and output types); anything it does not cover
# returns None and the Spark path runs.
def _plain_column(expr: str, q: AggregateQuery, names: List[str]) -> Optional[str]:
    """The detail column `expr` names when it is a bare (optionally qualified) column reference."""
    m = re.match(rf"^\s*(?:({_IDENT})\s*\.\s*)?({_IDENT})\s*$", expr)
    if not m:
        return None
    qual = _unquote(m.group(1)).lower() if m.group(1) else None
    if qual is not None and qual not in {(q.alias or "").lower(), _unquote(q.relation.split(".")[-1]).lower()}:
        return None
    col = _unquote(m.group(2)).lower()
    hits = [n for n in names if n.lower() == col]
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
    return str(int(v))


def arrow_group_keys(columns, kinds: List[str]):
    """`_hudilite_group_key` of each row of the key columns, exactly as `to_json(named_struct('k0', ...))`
    computes it in Spark (null fields left out)."""
    import pyarrow as pa

    values = [c.to_pylist() for c in columns]
    out = []
    for row in zip(*values):
        out.append("{" + ",".join(f'"k{i}":{_json_value(v, kinds[i])}' for i, v in enumerate(row)
                                  if v is not None) + "}")
    return pa.array(out, pa.string())


def _key_kind(t) -> Optional[str]:
    import pyarrow as pa

    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "string"
    if pa.types.is_integer(t):
        return "int"
    if pa.types.is_boolean(t):
        return "bool"
    if pa.types.is_date32(t):
        return "date"
    return None


def _plain_keys(q: AggregateQuery, detail_schema) -> Optional[List[tuple]]:
    """The group keys as (detail column, kind, output name) when each is a plain detail column of a kind the
    Arrow fold groups by; else None."""
    out = []
    for k in q.keys:
        c = _plain_column(k.expr, q, detail_schema.names)
        kind = _key_kind(detail_schema.field(c).type) if c else None
        if kind is None:
            return None
        out.append((c, kind, k.name))
    return out


def _recomputed_column(a, q: AggregateQuery, detail_schema) -> Optional[str]:
    """The detail column of a min / max / count(distinct) item when it is a plain column of a type whose order
    and equality Arrow shares with Spark; else None."""
    c = _plain_column(a.expr, q, detail_schema.names)
    return c if c is not None and _key_kind(detail_schema.field(c).type) is not None else None


@dataclass
class _ArrowPlan:
    keys: List[tuple]  # (detail column, kind, output name)
    aggs: List[tuple]  # (n, item, detail column or None for count(*), output name, output type)
    columns: List[str]  # detail columns to read
    stored: Any  # the aggregate table's schema


def _arrow_plan(q: AggregateQuery, detail_schema, agg_schema) -> Optional[_ArrowPlan]:
    """What the Arrow fold needs, when the query is plain columns grouped and folded (count/sum/avg, no
    WHERE) and the aggregate table stores exactly the types the Spark path gives; else None."""
    import pyarrow as pa

    if q.where:
        return None
    names = detail_schema.names
    stored = {f.name: f.type for f in agg_schema}
    keys = _plain_keys(q, detail_schema)
    if keys is None or any(stored.get(name) != detail_schema.field(c).type for c, _, name in keys):
        return None
    aggs, cols = [], [c for c, _, _ in keys]
    for n, a in enumerate(q.aggs):
        name = a.name or _default_name(a)
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
            else:
                return None
            if a.func in ("sum", "avg") and stored.get(f"_hudilite_agg_s{n}") != (
                    pa.int64() if pa.types.is_integer(t) else pa.float64()):
                return None
            if stored.get(f"_hudilite_agg_c{n}") != pa.int64():
                return None
            cols.append(col)
        if stored.get(name) != want:
            return None
        aggs.append((n, a, col, name, want))
    if stored.get(ROWS) != pa.int64() or stored.get(GROUP_KEY) != pa.string():
        return None
    return _ArrowPlan(keys, aggs, sorted(set(cols), key=names.index), agg_schema)


def _member(col, values):
    """Whether each value of `col` (a chunked array, maybe dictionary-encoded) is among `values` (null is a
    member when `values` has a null); None when every value is. Dictionary columns are tested on their
    dictionaries, then per index."""
    import pyarrow as pa
    import pyarrow.compute as pc

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
    """The state (`agg_state`) of each of `items` ((n, detail column, kind)) built from the detail's snapshot
    as of `end` read in this process — only the rows of `groups` (their key columns `__k<i>`) when given;
    None when the snapshot needs Spark (log files to merge, too large)."""
    import pyarrow as pa

    from hudilite.reader.changes import LOCAL_SNAPSHOT_MAX_BYTES, local_snapshot

    key_cols = [c for c, _, _ in plan.keys]
    value_cols = {c for _, c, _ in items}
    # string group keys read dictionary-encoded: ~1,000s of distinct values over millions of rows
    snap = local_snapshot(detail, end, sorted(set(key_cols) | value_cols), LOCAL_SNAPSHOT_MAX_BYTES,
                          dictionary=tuple(c for c in key_cols if c not in value_cols))
    if snap is None:
        return None
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


def _state_items(plan: _ArrowPlan, q: AggregateQuery):
    """(n, detail column, kind) of the aggregates kept as value multisets: min, max, count(distinct)."""
    return [(n, col, st.DISTINCT if a.distinct else a.func) for n, a, col, _, _ in plan.aggs if a in q.recomputed]


def incremental_arrow(q: AggregateQuery, detail: str, agg_path: str, start: str, end: str):
    """(upsert rows as an Arrow table incl. `_hoodie_is_deleted`, visible columns, extraMetadata of the
    aggregate's value multisets) computed in this process, as `incremental_frame` computes them in Spark; None
    when the query, the tables or the range need Spark.

    count / sum / avg fold the signed change images into the stored per-group state. min / max /
    count(distinct) fold them into their value multisets (`agg_state`: loaded for `start`, or built from the
    detail snapshot when the table has none for it) and take the affected groups' values from there; a group
    whose min / max buffer emptied is read again from the snapshot (its rows only)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from hudilite.reader.changes import local_changes
    from hudilite.reader.planner import plan_read, table_schema
    from hudilite.table import HoodieTable

    agg_plan = plan_read(agg_path)
    if agg_plan.merged_slices:  # merge-on-read aggregate table with logs: read through Spark
        return None
    plan = _arrow_plan(q, table_schema(HoodieTable.open(detail)), agg_plan.schema)
    if plan is None:
        return None
    ch = local_changes(detail, start, end, before_image=True, completion_bounds=True,
                       columns=plan.columns or None)
    if ch is None:
        return None
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
        if a.func in ("sum", "avg"):
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
    gkey = arrow_group_keys([delta.column(k) for k in key_names], [k[1] for k in plan.keys])
    delta = delta.append_column(GROUP_KEY, gkey)
    # the affected groups' stored state
    stored_cols = [GROUP_KEY] + state
    cur = [pq.read_table(f, columns=stored_cols) for f in agg_plan.plain_files]
    cur = pa.concat_tables(cur) if cur else pa.schema([plan.stored.field(c) for c in stored_cols]).empty_table()
    cur = cur.filter(pc.is_in(cur.column(GROUP_KEY), value_set=gkey))
    cur = cur.rename_columns([GROUP_KEY] + [f"__cur{c}" for c in stored_cols[1:]])
    j = delta.join(cur, GROUP_KEY, join_type="left outer", use_threads=False)

    def new_state(c):
        t = plan.stored.field(c).type
        return pc.add(pc.fill_null(j.column(f"__cur{c}").cast(t), 0), pc.fill_null(j.column(c).cast(t), 0))

    items = _state_items(plan, q)
    state_extra = {}
    if items:  # min / max / count(distinct): the value multisets folded, the affected groups' values read off
        current = st.stored_entry(agg_path, CHECKPOINT_KEY)
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
                    v = pc.if_else(some, new[f"_hudilite_agg_s{n}"], pa.scalar(None, want))
                else:
                    v = pc.if_else(some, pc.divide(new[f"_hudilite_agg_s{n}"].cast(pa.float64()),
                                                   c.cast(pa.float64())), pa.scalar(None, pa.float64()))
            out[name] = v.cast(want)
        visible.append(name)
    out[GROUP_KEY] = j.column(GROUP_KEY)
    out.update(new)
    out["_hoodie_is_deleted"] = pc.less_equal(new[ROWS], 0)
    return pa.table(out), visible, state_extra


def full_state(q: AggregateQuery, detail: str, agg_path: str, end: Optional[str]) -> Dict[str, str]:
    """For a full build: the value multisets of min / max / count(distinct) of the whole detail as of `end`,
    saved beside the aggregate table; the extraMetadata entry for the build's commit ({} when the query has
    none, the driver-local fold would not apply to it, or the snapshot needs Spark: the first driver-local
    refresh then builds them)."""
    import pyarrow as pa

    from hudilite.reader.planner import table_schema
    from hudilite.table import HoodieTable

    if not q.recomputed or q.where or end is None:
        return {}
    schema = table_schema(HoodieTable.open(detail))
    keys = _plain_keys(q, schema)
    items = [(n, _recomputed_column(a, q, schema), st.DISTINCT if a.distinct else a.func)
             for n, a in enumerate(q.aggs) if a in q.recomputed]
    if keys is None or any(c is None for _, c, _ in items):
        return {}
    plan = _ArrowPlan(keys, [], [], pa.schema([(name, schema.field(c).type) for c, _, name in keys]))
    states = _snapshot_states(plan, detail, end, items)
    if states is None:
        return {}
    return st.save(agg_path, states, q.signature(), detail, end, st.stored_entry(agg_path, CHECKPOINT_KEY))


def _fold_states(plan: _ArrowPlan, q: AggregateQuery, detail: str, agg_path: str, current, start: str,
                 end: str, ch, sign, items):
    """The value multiset of each item as of `end`: the stored state (`current`) of `start` with the signed
    change images folded in (groups whose min / max buffer emptied read again from the snapshot), or (no
    usable stored state) built from the detail snapshot as of `end`; None when a snapshot read needs Spark."""
    import pyarrow as pa

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


def refresh(spark, q: AggregateQuery, detail: str, agg_path: str, options: Optional[Dict[str, str]] = None):
    """Bring the aggregate table at `agg_path` up to date with `detail` outside dbt (same engine, same
    checkpoint metadata): full when it has no checkpoint for `detail` (or another signature), else
    incremental. Returns the commit (None: nothing new upstream)."""
    import hudilite
    from dbt.adapters.hudilite.incremental import checkpoint_entries, resume_position
    from hudilite.reader.changes import checkpoint
    from hudilite.table import HoodieTable

    end, detail_id = checkpoint(detail)
    start = None
    if HoodieTable.exists(agg_path) and _stored_signature(agg_path) == q.signature():
        start, _rebuilt = resume_position(agg_path, detail, detail_id)  # rebuilt detail: recompute in full
    extra = {SIGNATURE_KEY: q.signature(), **checkpoint_entries({detail: (end, detail_id)})}
    opts = {"hoodie.write.input.persist": "true", **(options or {})}
    if start is None:
        df, _ = full_frame(spark, q, detail, end)
        op = "insert_overwrite_table" if HoodieTable.exists(agg_path) else "insert"
        extra.update(full_state(q, detail, agg_path, end))
        return hudilite.write(df, agg_path, record_key=GROUP_KEY, operation=op, options=opts, extra_metadata=extra)
    if end is None or start >= end:
        return None
    local = incremental_arrow(q, detail, agg_path, start, end)
    if local is not None:
        return hudilite.write(local[0], agg_path, record_key=GROUP_KEY, operation="upsert", options=opts,
                              extra_metadata={**extra, **local[2]})
    df, _, release = incremental_frame(spark, q, detail, agg_path, start, end)
    try:
        return hudilite.write(df, agg_path, record_key=GROUP_KEY, operation="upsert", options=opts,
                              extra_metadata=extra)
    finally:
        for r in release:
            r.unpersist()


# ---- dbt: write + publish ----------------------------------------------------------------------------
def _full(env, q, schema, identifier, path, detail, end, spec, entry):
    from hudilite.table import HoodieTable

    from dbt.adapters.hudilite.incremental import model_key, run_state

    df, visible = _spark_errors(lambda: full_frame(env.spark, q, detail, end))
    options = env._options(spec, identifier)
    exists = HoodieTable.exists(path)
    run_state(env).set_extra(model_key(schema, identifier), full_state(q, detail, path, end))
    if exists and env._compatible(path, spec, [GROUP_KEY], df):
        op = "insert_overwrite_table"
        result = env._write(df, path, [GROUP_KEY], spec, op, options, schema, identifier)
    elif exists:
        op = "insert"
        result = env._rebuild_beside(df, path, [GROUP_KEY], spec, op, options, schema, identifier)
    else:
        op = "insert"
        result = env._write(df, path, [GROUP_KEY], spec, op, options, schema, identifier)
    env.publish(schema, identifier, path, visible, env._props(spec, [GROUP_KEY], True), entry)
    return env._response(op, result, path, strategy="aggregate")


def _incremental(env, q, schema, identifier, path, detail, start, end, spec, entry, names):
    import hudilite
    from dbt.adapters.hudilite.incremental import model_key, run_state

    if end is None or start >= end:  # nothing committed upstream since the checkpoint
        run_state(env).take(model_key(schema, identifier))
        return _no_change(env, path)
    try:
        local = incremental_arrow(q, detail, path, start, end)
        if local is not None:
            (df, visible, state_extra), release = local, []
            run_state(env).set_extra(model_key(schema, identifier), state_extra)
        else:
            df, visible, release = _spark_errors(lambda: incremental_frame(env.spark, q, detail, path, start, end))
    except hudilite.RangeUnavailableError as e:
        raise DbtRuntimeError(f"aggregate {schema}.{identifier}: {e}") from None
    try:
        result = env._write(df, path, [GROUP_KEY], spec, "upsert", env._options(spec, identifier), schema,
                            identifier)
    finally:
        for r in release:
            r.unpersist()
    env.publish(schema, identifier, path, visible, env._props(spec, [GROUP_KEY], True), entry)
    return env._response("upsert", result, path, strategy="aggregate")


def _spark_errors(fn):
    from pyspark.errors import PySparkException

    try:
        return fn()
    except PySparkException as e:
        raise DbtRuntimeError(f"materialized='aggregate': {e}") from None


def _no_change(env, path):
    from dbt.adapters.hudilite.impl import HudiliteAdapterResponse

    return HudiliteAdapterResponse(_message="AGGREGATE up to date (no upstream commits)", code="UPSERT",
                                   rows_affected=0, rows_inserted=0, rows_updated=0, rows_deleted=0,
                                   commit_time=None, operation="none", strategy="aggregate", table_path=path,
                                   files_written=0, replaced_file_groups=0)
