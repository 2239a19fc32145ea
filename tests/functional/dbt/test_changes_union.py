"""Several `hudilite.changes()` of one table in one query: each call renders its own relation, so a 2- and a
3-part `union all` of different ranges returns exactly the rows of each range (the reference: each range read
alone through `hudilite.changes` in Python); a rendered view keeps its rows when the same call renders again
later; an unbounded call in `dbt show --inline` says that an ad-hoc query keeps no checkpoint."""

import pytest
from dbt.tests.util import run_dbt

from tests.functional.dbt.conftest import table_dir

ORDERS = """
{{ config(materialized='incremental', unique_key='id', precombine_field='v', table_type=var('tt', 'cow'),
          delete_condition="op = 'd'") }}
{% set b = var('batch', 1) %}
select id, {{ b }} as v, concat('n', id, '-', {{ b }}) as name, case when id % 7 = {{ b }} then 'd' else 'i' end as op
from (select explode(sequence({{ b }} * 3, {{ b }} * 3 + 5)) as id)
"""

PART = "select id, name, _change_op, '{tag}' as part from {{{{ hudilite.changes(ref('orders'){args}) }}}}"


def _model(ranges):
    return "{{ config(materialized='table') }}\n" + "\nunion all\n".join(
        PART.format(tag=i, args="".join(f", {k}=var('{k}{i}')" for k in r)) for i, r in enumerate(ranges))


TWO = _model([("begin",), ("begin", "end")])
THREE = _model([("begin",), ("begin", "end"), ("begin", "end")])


class TestChangesUnion:
    tt = "cow"  # merge-on-read tables in the dbt catalog are another work item

    @pytest.fixture(scope="class")
    def models(self):
        return {"orders.sql": ORDERS, "two.sql": TWO, "three.sql": THREE}

    def test_unions_of_ranges(self, project, spark):
        tt = self.tt
        import hudilite
        from hudilite.table import HoodieTable

        s = project.test_schema
        for b in range(1, 6):
            run_dbt(["run", "-s", "orders", "--vars", f"{{batch: {b}, tt: {tt}}}"])
        path = table_dir(project, "orders")
        c = [i.timestamp for i in HoodieTable.open(path).timeline.completed() if i.action != "clean"]
        assert len(c) >= 5
        ranges = [(c[2], None), (c[3], c[4]), (c[0], c[2])]
        variables = {"begin0": c[2], "begin1": c[3], "end1": c[4], "begin2": c[0], "end2": c[2]}

        def ref(parts):
            out = []
            for i, (b, e) in enumerate(ranges[:parts]):
                df = hudilite.changes(spark, path, begin=b, end=e)
                out += [(r["id"], r["name"], r["_change_op"], str(i)) for r in df.collect()]
            return sorted(out)

        run_dbt(["run", "-s", "two", "three", "--vars", str({**variables, "tt": tt})])  # two threads
        for name, parts in (("two", 2), ("three", 3)):
            got = sorted(tuple(r) for r in project.run_sql(
                f"select id, name, _change_op, part from {s}.{name}", fetch="all"))
            assert got == ref(parts), name

        # A rendered name stays bound to its rows: the same call after the upstream moved on (an open range
        # now ends later) gets a name of its own instead of replacing the view a query already refers to
        # (dbt's threads share the session).
        from types import SimpleNamespace

        from dbt.adapters.hudilite.incremental import changes_relation

        env = project.adapter.env
        rel = SimpleNamespace(schema=s, identifier="orders")
        q = "select id, _change_op from {}"
        first = changes_relation(env, None, rel, begin=c[3])
        before = sorted(map(tuple, env.spark.sql(q.format(first)).collect()))
        run_dbt(["run", "-s", "orders", "--vars", f"{{batch: 6, tt: {tt}}}"])
        second = changes_relation(env, None, rel, begin=c[3])
        assert sorted(map(tuple, env.spark.sql(q.format(first)).collect())) == before
        assert first != second
        assert len(env.spark.sql(q.format(second)).collect()) > len(before)

        # without bounds in an ad-hoc query: no checkpoint to read from, said as such (not "a view model")
        with pytest.raises(Exception, match=r"in an ad-hoc query \(dbt show --inline") as ei:
            run_dbt(["show", "--inline", "select id from {{ hudilite.changes(ref('orders')) }}"])
        assert "view model" not in str(ei.value)
