"""hudilite.aggregate.parse: the aggregate SQL the core maintains, split into clauses with sqlparse; and the
core not importing dbt."""

import re
import subprocess
import sys

import pytest

from hudilite.aggregate import AggregateQueryError, parse


def test_clauses_items_and_aliases():
    q = parse("""-- daily business
        select order_date, country c, count(*) as orders, sum(amount) revenue, avg(amount),
               max(amount) as largest, count(distinct customer_id) as customers  /* folded */
        from `sch`.`dwd_orders` o
        where status <> 'PENDING;' and left(country, 1) = 'D'
        group by order_date, 2;""")
    assert [(i.expr, i.name, i.func, i.distinct) for i in q.items] == [
        ("order_date", "order_date", None, False), ("country", "c", None, False), ("*", "orders", "count", False),
        ("amount", "revenue", "sum", False), ("amount", "", "avg", False), ("amount", "largest", "max", False),
        ("customer_id", "customers", "count", True)]
    assert (q.relation, q.alias, q.relation_parts()) == ("`sch`.`dwd_orders`", "o", ["sch", "dwd_orders"])
    assert q.where == "status <> 'PENDING;' and left(country, 1) = 'D'"
    assert q.group_by == ["order_date", "country"]
    assert [i.name for i in q.recomputed] == ["largest", "customers"]


def test_expressions_that_end_in_a_keyword_have_no_alias():
    q = parse("select case when x > 0 then 'p' else 'n' end, count(1) from t group by 1")
    assert [(i.expr, i.name) for i in q.keys] == [("case when x > 0 then 'p' else 'n' end",
                                                   "case when x > 0 then 'p' else 'n' end")]
    assert q.aggs[0].expr == "*"


def test_explicit_alias_after_an_expression_sqlparse_does_not_group():
    # `x is null as isn` is not one identifier to sqlparse: the trailing AS still names the item
    q = parse("select x is null as isn, g k, count(*) from t group by 1, k")
    assert [(i.expr, i.name) for i in q.keys] == [("x is null", "isn"), ("g", "k")]
    q = parse("select cast(x as int) as c, interval 1 day as i, count(*) from t group by c, i")
    assert [(i.expr, i.name) for i in q.keys] == [("cast(x as int)", "c"), ("interval 1 day", "i")]


def test_group_by_a_key_that_ends_in_is_null():
    q = parse("select x is null, count(*) from t group by x is null")
    assert q.group_by == ["x is null"]


def test_signature_follows_the_query():
    a = parse("select g, count(*) as n from t group by g")
    assert a.signature() == parse("select g,  count(*) as n from t group by g").signature()
    assert a.signature() != parse("select g, count(*) as n from t where x > 1 group by g").signature()


@pytest.mark.parametrize("sql, message", [
    ("select g, count(*) from a join b on a.id = b.id group by g", "joins are not supported"),
    ("select g, count(*) from t group by g having count(*) > 1", "HAVING is not supported"),
    ("select g, count(*) from t group by g order by g", "ORDER BY is not supported"),
    ("select g, count(*) from t group by g union all select g, count(*) from t group by g",
     "UNION ALL is not supported"),
    ("with x as (select 1) select g, count(*) from x group by g", "WITH (common table expressions)"),
    ("select distinct g, count(*) from t group by g", "SELECT DISTINCT is not supported"),
    ("select g, count(*) from (select * from t) s group by g", "FROM must name one table"),
    ("select g, count(*) from t; select 1", "exactly one SELECT statement"),
    ("select g, sum(x) + 1 from t group by g", "unsupported select expression 'sum(x) + 1'"),
    ("select g, count(*) from t", "GROUP BY expected"),
    ("select g, h, count(*) from t group by g", "neither aggregates nor in GROUP BY"),
    ("insert into t select 1", "unexpected insert"),
    ("select g, count(*) from t where sum(x) > 1 group by g", "aggregates in WHERE are not supported"),
])
def test_unsupported_shapes_name_why(sql, message):
    with pytest.raises(AggregateQueryError, match=re.escape(message)):
        parse(sql)


def test_core_does_not_import_dbt():
    code = ("import sys, hudilite, hudilite.aggregate, hudilite.checkpoints, hudilite.streaming, hudilite.cli; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'dbt'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
