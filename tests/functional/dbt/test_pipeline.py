"""The sample pipeline (sample_project/: ods -> dwd via hudilite.changes -> ads via materialized='aggregate')
run in-process with a late upstream commit and a failed run in the middle: every ODS commit is consumed by
exactly one DWD run, and every table equals the reference computed in plain Python. Plus the changes macro's
ranges / as_of and the aggregate materialization's errors."""

import glob
import os
import sys

import pytest
from dbt.tests.util import run_dbt, run_dbt_and_capture

from tests.functional.dbt.conftest import table_dir

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
SAMPLE = os.path.join(ROOT, "sample_project")
sys.path.insert(0, SAMPLE)
import pipeline  # noqa: E402


def _read(rel):
    with open(os.path.join(SAMPLE, rel), encoding="utf-8") as f:
        return f.read()


def _tree(sub, ext):
    return {os.path.basename(p): _read(os.path.relpath(p, SAMPLE))
            for p in glob.glob(os.path.join(SAMPLE, sub, "**", f"*.{ext}"), recursive=True)}


class TestSamplePipeline:
    @pytest.fixture(scope="class")
    def seeds(self):
        return _tree("seeds", "csv")

    @pytest.fixture(scope="class")
    def models(self):
        return {**_tree("models", "sql"), "schema.yml": _read("models/schema.yml")}

    @pytest.fixture(scope="class")
    def tests(self):
        return _tree("tests", "sql")

    @pytest.fixture(scope="class")
    def project_config_update(self):
        return {
            "vars": {"batch": 1, "fail_dwd": False},
            "seeds": {"test": {"order_events": {"+column_types": {
                "order_id": "bigint", "event_seq": "bigint", "amount": "decimal(10,2)", "order_date": "date",
                "created_at": "timestamp", "changed_at": "timestamp"}}}},
        }

    def test_every_row_exactly_once(self, project, spark):
        def dbt(*args, ok=True):
            return run_dbt(list(args), expect_pass=ok)

        warehouse = os.path.dirname(os.path.dirname(table_dir(project, "x")))
        seen = pipeline.run(dbt, lambda: spark, project.test_schema, warehouse)
        assert pipeline.check(spark, project.test_schema, seen) == []
        # the reference is not trivially satisfied: the late batch and the failure matter
        assert pipeline.expected_dwd() != pipeline.expected_dwd([1, 2, 3, 4])
        assert seen["dwd_commits_unchanged_by_failure"]


ORDERS = """
{{ config(materialized='incremental', unique_key='id', precombine_field='v', delete_condition="op = 'd'") }}
{% set b = var('batch', 1) %}
{% if b == 1 %} select 1 as id, 1 as v, 'a' as name, 'i' as op union all select 2, 1, 'b', 'i'
{% elif b == 2 %} select 2 as id, 2 as v, 'b2' as name, 'u' as op union all select 3, 1, 'c', 'i'
{% else %} select 1 as id, 3 as v, 'a' as name, 'd' as op {% endif %}
"""
CONSUMER = """
{{ config(materialized='incremental', unique_key='id') }}
select id, name, _change_op as last_op, _change_op = 'D' as _hoodie_is_deleted
from {{ hudilite.changes(ref('orders')) }}
"""
LOG = """
{{ config(materialized='incremental', incremental_strategy='append') }}
select id, name, _change_op as op, {{ var('batch', 1) }} as run from {{ hudilite.changes(ref('orders')) }}
"""
BAD_AGG = """
{{ config(materialized='aggregate') }}
select name, sum(id) + 1 as s from {{ ref('orders') }} group by name
"""


class TestChangesMacro:
    @pytest.fixture(scope="class")
    def models(self):
        return {"orders.sql": ORDERS, "consumer.sql": CONSUMER, "change_log.sql": LOG}

    def test_checkpointed_changes(self, project):
        s = project.test_schema
        rows = lambda q: sorted(tuple(r) for r in project.run_sql(q, fetch="all"))  # noqa: E731
        run_dbt(["run"])
        run_dbt(["run", "--vars", "{batch: 2}"])
        run_dbt(["run", "-s", "consumer", "change_log", "--vars", "{batch: 2}"])  # nothing new: no rows
        run_dbt(["run", "--vars", "{batch: 3}"])
        assert rows(f"select id, name, last_op from {s}.consumer") == [(2, "b2", "U"), (3, "c", "I")]
        # each upstream change exactly once, in the run that followed it
        assert rows(f"select id, name, op, run from {s}.change_log") == [
            (1, "a", "D", 3), (1, "a", "I", 1), (2, "b", "I", 1), (2, "b2", "U", 2), (3, "c", "I", 2)]
        # explicit ranges and time travel (no checkpoint) in ad-hoc SQL
        from hudilite.table import HoodieTable

        tl = HoodieTable.open(table_dir(project, "orders")).timeline
        c1, c2, _ = [i.timestamp for i in tl.completed()]
        res = run_dbt(["show", "--inline", f"select id, _change_op from {{{{ hudilite.changes(ref('orders'), "
                       f"begin='{c1}', end='{c2}') }}}} order by id"])
        assert [tuple(r) for r in res.results[0].agate_table.rows] == [(2, "U"), (3, "I")]
        res = run_dbt(["show", "--inline", f"select id from {{{{ hudilite.as_of(ref('orders'), '{c1}') }}}} "
                       "order by id"])
        assert [r[0] for r in res.results[0].agate_table.rows] == [1, 2]
        # --full-refresh: the whole snapshot again (only live rows)
        run_dbt(["run", "-s", "consumer", "--full-refresh", "--vars", "{batch: 3}"])
        assert rows(f"select id, name, last_op from {s}.consumer") == [(2, "b2", "I"), (3, "c", "I")]


class TestAggregateErrors:
    @pytest.fixture(scope="class")
    def models(self):
        return {"orders.sql": ORDERS, "bad_agg.sql": BAD_AGG}

    def test_unsupported_shape_is_a_compile_error(self, project):
        run_dbt(["run", "-s", "orders"])
        _, out = run_dbt_and_capture(["run", "-s", "bad_agg"], expect_pass=False)
        assert "materialized='aggregate': unsupported select expression" in out
        assert not os.path.exists(table_dir(project, "bad_agg"))


FOLDED_AGG = """
{{ config(materialized='aggregate') }}
select name, count(*) as n, min(id) as lo, max(v) as hi, count(distinct v) as dv from {{ ref('orders') }}
group by name
"""


class TestAggregateFoldedOnTheDriver:
    """An aggregate over plain columns, one upstream commit per run: refreshed on the driver, its value
    multisets (min / max / count(distinct)) committed with its rows and checkpoint through the dbt glue."""

    @pytest.fixture(scope="class")
    def models(self):
        return {"orders.sql": ORDERS, "agg.sql": FOLDED_AGG}

    def test_runs_equal_a_recomputation(self, project):
        from hudilite.aggregate.state import STATE_KEY
        from hudilite.checkpoints import CHECKPOINT_KEY
        from hudilite.table import HoodieTable

        s = project.test_schema
        rows = lambda q: sorted(tuple(r) for r in project.run_sql(q, fetch="all"))  # noqa: E731
        for b in (1, 2, 3):
            run_dbt(["run", "--vars", f"{{batch: {b}}}"])
            assert rows(f"select name, n, lo, hi, dv from {s}.agg") == rows(
                f"select name, count(*), min(id), max(v), count(distinct v) from {s}.orders group by name")
        assert rows(f"select name, n, lo, hi, dv from {s}.agg") == [("b2", 1, 2, 2, 1), ("c", 1, 3, 1, 1)]
        tl = HoodieTable.open(table_dir(project, "agg")).timeline
        extras = [tl.read_metadata(i).get("extraMetadata") or {} for i in tl.completed()]
        # the full build and both refreshes (no Spark path: that one keeps no state) carry state + checkpoint
        assert len(extras) == 3 and all(STATE_KEY in e and CHECKPOINT_KEY in e for e in extras)


AUDITED = """
{{ config(materialized='incremental', unique_key='id', partition_by='dt', audit_before_publish=true,
          mark_ready=(var('batch', 1) != 3)) }}
{% set b = var('batch', 1) %}
{% if b == 1 %} select 1 as id, 'ok' as status, 'd1' as dt union all select 2, 'ok', 'd1'
{% elif b == 2 %} select 3 as id, 'BAD' as status, 'd2' as dt union all select 4, 'ok', 'd2'
{% else %} select 5 as id, 'ok' as status, 'd3' as dt {% endif %}
"""
AUDITED_YML = """
version: 2
models:
  - name: audited
    columns:
      - name: id
        data_tests: [unique, not_null]
      - name: status
        data_tests:
          - accepted_values: {arguments: {values: [ok]}}
"""


class TestWriteAuditPublish:
    @pytest.fixture(scope="class")
    def models(self):
        return {"audited.sql": AUDITED, "schema.yml": AUDITED_YML}

    def test_audit_gates_the_commit(self, project):
        from hudilite.table import HoodieTable

        s = project.test_schema
        path = table_dir(project, "audited")
        run_dbt(["run"])
        tl = HoodieTable.open(path).timeline
        assert len(tl.completed()) == 1
        assert tl.read_metadata(tl.completed()[0])["extraMetadata"]["hudilite.audited"] == "true"
        files = sorted(glob.glob(os.path.join(path, "**", "*.parquet"), recursive=True))
        _, out = run_dbt_and_capture(["run", "--vars", "{batch: 2}"], expect_pass=False)
        assert "audit of" in out and "accepted_values" in out and "nothing was published" in out
        # the table never showed the bad rows: same commits, same files, same catalog rows
        assert len(HoodieTable.open(path).timeline.instants) == 1
        assert sorted(glob.glob(os.path.join(path, "**", "*.parquet"), recursive=True)) == files
        assert sorted(tuple(r) for r in project.run_sql(f"select id, status from {s}.audited", fetch="all")) == [
            (1, "ok"), (2, "ok")]
        # a passing batch that does not mark its partition ready: committed, but not "ready"
        run_dbt(["run", "--vars", "{batch: 3}"])
        assert sorted(r[0] for r in project.run_sql(f"select id from {s}.audited", fetch="all")) == [1, 2, 5]
        res = run_dbt(["show", "--inline", "select id from {{ hudilite.read(ref('audited'), ready_only=true) }} "
                       "order by id"])
        assert [r[0] for r in res.results[0].agate_table.rows] == [1, 2]
