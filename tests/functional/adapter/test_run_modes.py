"""dbt-core 1.11 run modes on hudilite models (a `table` and an incremental model each): `--sample`
(as dbt-tests-adapter's `sample_mode`, on the real clock), `--empty` (no rows written, the table and its
columns created or kept), `dbt retry` after a failed model, and `dbt build` running a model's tests before
its dependents."""

import os
from unittest import mock

import pytest
from dbt.tests.util import run_dbt

from hudilite.table import HoodieTable
from tests.functional.dbt.conftest import table_dir

# dbt-tests-adapter's BaseSampleModeTest freezes time with freezegun; under it the first model never finished
# here (its dbt log stopped at "Began executing node"): the same check on the real clock instead, with rows
# well inside and outside the window
INPUT = """
{{ config(materialized='table', event_time='event_time') }}
select * from values (1, current_timestamp() - interval 5 days), (2, current_timestamp() - interval 3 hours),
  (3, current_timestamp() - interval 2 hours) as t(id, event_time)
"""

SAMPLED_TABLE = """
{{ config(materialized='table') }}
select * from {{ ref('input_model') }}
"""

SAMPLED_INCREMENTAL = """
{{ config(materialized='incremental', unique_key='id') }}
select * from {{ ref('input_model') }}
"""


class TestSampleModeHudilite:
    @pytest.fixture(scope="class")
    def models(self):
        return {"input_model.sql": INPUT, "sampled_table.sql": SAMPLED_TABLE,
                "sampled_incremental.sql": SAMPLED_INCREMENTAL}

    def count(self, project, name):
        return len(project.run_sql(f"select * from {project.test_schema}.{name}", fetch="all"))

    @mock.patch.dict(os.environ, {"DBT_EXPERIMENTAL_SAMPLE_MODE": "True"})
    def test_sample_mode(self, project):
        run_dbt(["run"])
        assert [self.count(project, n) for n in ("sampled_table", "sampled_incremental")] == [3, 3]
        run_dbt(["run", "--full-refresh", "--sample=1 day", "--exclude", "input_model"])
        assert [self.count(project, n) for n in ("sampled_table", "sampled_incremental")] == [2, 2]


SOURCE = """
{{ config(materialized='table') }}
select * from values (1, 'a'), (2, 'b') {% if env_var('HUDILITE_TEST_EXTRA', '2') == '1' %}, (3, 'c'){% endif %}
as t(id, v)
"""

INCREMENTAL = """
{{ config(materialized='incremental', unique_key='id', table_type='mor') }}
select id, upper(v) as v from {{ ref('source_t') }}
{% if env_var('HUDILITE_TEST_FAIL', '0') == '1' %} where cast(raise_error('boom') as boolean) is null {% endif %}
"""

DOWNSTREAM = """
{{ config(materialized='table') }}
select id, v, v || '!' as w from {{ ref('incr') }}
"""

SCHEMA_YML = """
version: 2
models:
  - name: source_t
    columns:
      - name: id
        data_tests:
          - accepted_values:
              arguments: {values: [1, 2, "{{ env_var('HUDILITE_TEST_EXTRA', '2') }}"], quote: false}
"""


def commits(project, name):
    return [i.timestamp for i in HoodieTable.open(table_dir(project, name)).timeline.completed()]


class TestEmptyRetryBuildHudilite:
    @pytest.fixture(scope="class")
    def models(self):
        return {"source_t.sql": SOURCE, "incr.sql": INCREMENTAL, "downstream.sql": DOWNSTREAM,
                "schema.yml": SCHEMA_YML}

    def rows(self, project, name):
        return sorted(project.run_sql(f"select * from {project.test_schema}.{name}", fetch="all"))

    def columns(self, project, name):
        rel = project.adapter.get_relation(None, project.test_schema, name)
        with project.adapter.connection_named("__test"):
            return [(c.name, c.dtype) for c in project.adapter.get_columns_in_relation(rel)]

    def test_empty(self, project):
        # first run --empty: the models reading refs exist with their columns and no rows (source_t reads no
        # ref: dbt leaves its query as it is)
        run_dbt(["run", "--empty"])
        for name, cols in (("incr", [("id", "int"), ("v", "string")]),
                           ("downstream", [("id", "int"), ("v", "string"), ("w", "string")])):
            assert self.rows(project, name) == [] and self.columns(project, name) == cols
        run_dbt(["run"])
        assert self.rows(project, "incr") == [(1, "A"), (2, "B")]
        before = commits(project, "incr")
        # --empty on built tables: the table model is rebuilt empty (its schema kept), the incremental
        # model's empty batch changes nothing it holds
        run_dbt(["run", "--empty"])
        assert self.rows(project, "downstream") == [] and self.columns(project, "downstream") == [
            ("id", "int"), ("v", "string"), ("w", "string")]
        assert self.rows(project, "incr") == [(1, "A"), (2, "B")]
        assert commits(project, "incr")[:len(before)] == before

    def test_retry_after_failed_model(self, project, monkeypatch):
        run_dbt(["run"])
        before = commits(project, "incr")
        monkeypatch.setenv("HUDILITE_TEST_FAIL", "1")
        res = run_dbt(["run"], expect_pass=False)
        status = {r.node.name: str(r.status) for r in res.results}
        assert status == {"source_t": "success", "incr": "error", "downstream": "skipped"}
        assert commits(project, "incr") == before  # the failed model wrote nothing
        monkeypatch.setenv("HUDILITE_TEST_FAIL", "0")
        res = run_dbt(["retry"])
        assert sorted(r.node.name for r in res.results) == ["downstream", "incr"]  # not source_t again
        assert len(commits(project, "incr")) == len(before) + 1  # the retried model committed once
        assert self.rows(project, "downstream") == [(1, "A", "A!"), (2, "B", "B!")]

    def test_build_runs_tests_between_models(self, project, monkeypatch):
        res = run_dbt(["build"])
        order = [r.node.unique_id.split(".")[0] + ":" + r.node.name for r in res.results]
        test = next(o for o in order if o.startswith("test:"))
        assert order.index("model:source_t") < order.index(test) < order.index("model:incr") < \
            order.index("model:downstream")
        before = commits(project, "incr")
        # a failing test on source_t: its dependents are skipped, their tables untouched
        monkeypatch.setenv("HUDILITE_TEST_EXTRA", "1")
        res = run_dbt(["build"], expect_pass=False)  # source_t gets a row 3 its test does not accept
        status = {r.node.name: str(r.status) for r in res.results}
        assert [s for n, s in status.items() if n.startswith("accepted_values")] == ["fail"]
        assert status["incr"] == "skipped" and status["downstream"] == "skipped"
        assert commits(project, "incr") == before
