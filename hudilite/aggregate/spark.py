"""The aggregate engine on Spark: full builds and change folds as Spark SQL over views of the detail rows.

Per group the aggregate table keeps hidden state (`_hudilite_agg_rows` = rows in the group, sums and non-null
counts for sum/avg/count(x)), so count/sum/avg fold the signed change images in; min/max/count(distinct) are
recomputed for the affected groups from the detail snapshot (the driver-local path, `local.py`, folds them
through value multisets instead). Groups whose row count drops to 0 are written as deletes.
"""

from __future__ import annotations

import re
import uuid
from typing import List, Optional

from pyspark.sql import functions as F
from pyspark.sql.types import (
    ByteType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    ShortType,
    StructField,
    StructType,
)

from hudilite.aggregate.query import GROUP_KEY, ROWS, AggregateQuery, Item, default_name
from hudilite.api import Table
from hudilite.reader.changes import snapshot_plan
from hudilite.reader.planner import table_schema
from hudilite.spark.changes import changes
from hudilite.spark.read import plan_to_dataframe
from hudilite.table import HoodieTable


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
    return isinstance(t, DecimalType)


def _fractional_over_integral(stored, new) -> bool:
    """A sum stored as an integer whose delta is now a float or double: cast to the stored type it would lose
    the fraction (2.25 -> 2)."""
    return isinstance(stored, (ByteType, ShortType, IntegerType, LongType)) and isinstance(new, (FloatType, DoubleType))


def _view(df, tag: str) -> str:
    name = f"hudilite_agg_{tag}_{uuid.uuid4().hex[:10]}"
    df.createOrReplaceTempView(name)
    return _q(name)


def _snapshot(spark, detail: str, end: Optional[str]):
    return plan_to_dataframe(spark, snapshot_plan(HoodieTable.open(detail), end))


def _out_schema(spark, q: AggregateQuery, view: str):
    where = f" WHERE {q.where}" if q.where else ""
    select = ", ".join(
        (i.expr if i.is_key else (f"count(DISTINCT {i.expr})" if i.distinct else f"{i.func}({i.expr})"))
        + f" AS {_q(i.name or f'_c{n}')}" for n, i in enumerate(q.items))
    df = spark.sql(f"SELECT {select} FROM {_from(q, view)}{where} GROUP BY {', '.join(q.group_by)}")
    return StructType([StructField(i.name or default_name(i), f.dataType, True)
                       for i, f in zip(q.items, df.schema.fields)])


def _default_name(i: Item) -> str:
    inner = "1" if i.expr == "*" else i.expr
    return f"{i.func}({'DISTINCT ' if i.distinct else ''}{inner})"


# ---- the engine ------------------------------------------------------------------------------------------
def full_frame(spark, q: AggregateQuery, detail: str, end: Optional[str]):
    """(rows to write, visible columns): the aggregate computed in full from the detail as of `end`."""
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
    cols = detail_columns(q, table_schema(HoodieTable.open(detail)).names)
    ch = changes(spark, detail, begin=start, end=end, before_image=True, completion_bounds=True, columns=cols)
    ch = ch.withColumn("__hl_sign", F.when(F.col("_change_op").isin("I", "U"), F.lit(1)).otherwise(F.lit(-1)))
    cview = _view(ch, "chg")
    snap = _view(_snapshot(spark, detail, end), "snap")
    out_schema = _out_schema(spark, q, snap)
    # the per-group deltas, persisted: the change rows are read once, however often the plan below uses them
    delta = spark.sql(_state_sql(q, cview, signed=True)).persist()
    cur = Table(agg_path, spark=spark).read()
    stored = {f.name: f.dataType for f in cur.schema.fields}
    state_cols = [c for c in delta.columns if c.startswith("_hudilite_agg_") or c == ROWS]
    cur = cur.select(F.col(GROUP_KEY), *[F.col(c).alias(f"__cur_{c}") for c in state_cols])
    j = delta.join(cur, GROUP_KEY, "left")
    merged = [F.col(GROUP_KEY)] + [F.col(_q(f"__hl_k{i}")) for i in range(len(q.keys))]
    for c in state_cols:  # old state + delta, in the stored column's type
        v = F.coalesce(F.col(f"__cur_{c}"), F.lit(0)) + F.coalesce(F.col(c), F.lit(0))
        t = stored.get(c)
        if t is not None and _fractional_over_integral(t, delta.schema[c].dataType):
            t = delta.schema[c].dataType  # the detail column was widened (long -> double): so is the sum
        merged.append((v.cast(t) if t is not None else v).alias(c))
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


