"""dbt-core 1.11 run modes on hudilite models (a `table` and an incremental model each): `--sample`
(dbt-tests-adapter `sample_mode`), `--empty` (no rows written, the table and its columns created or kept),
`dbt retry` after a failed model, and `dbt build` running a model's tests before its dependents."""

import os
from unittest import mock

import freezegun
import pytest
from dbt.tests.adapter.sample_mode.test_sample_mode import BaseSampleModeTest
from dbt.tests.util import run_dbt

from hudilite.table import HoodieTable
from tests.functional.dbt.conftest import table_dir

SAMPLED_INCREMENTAL = """
{{ config(materialized='incremental', unique_key='id') }}
select * from {{ ref('input_model') }}
"""


class TestSampleModeHudilite(BaseSampleModeTest):
    @pytest.fixture(scope="class")
    def models(self, model_that_samples_input_sql, input_model_sql):
        return {"input_model.sql": input_model_sql,
                "model_that_samples_input_sql.sql": model_that_samples_input_sql,
                "incremental_that_samples_input.sql": SAMPLED_INCREMENTAL}

    @mock.patch.dict(os.environ, {"DBT_EXPERIMENTAL_SAMPLE_MODE": "True"})
    @freezegun.freeze_time("2025-01-03T02:03:0Z")
    def test_sample_mode_incremental(self, project):
        # after test_sample_mode: a full build (3 rows) then a sampled one; an incremental model's sampled run
        # upserts the sampled rows only, keeping the others
        run_dbt(["run", "--full-refresh", "-s", "incremental_that_samples_input"])
        self.assert_row_count(project, "incremental_that_samples_input", 3)
        run_dbt(["run", "--full-refresh", "--sample=1 day", "-s", "incremental_that_samples_input"])
        self.assert_row_count(project, "incremental_that_samples_input", 2)


SOURCE = """
{{ config(materialized='table') }}
select * from values (1, 'a'), (2, 'b') {% if env_var('HUDILITE_TEST_EXTRA', '2') == '1' %}, (3, 'c'){% endif %}
as t(id, v)
"""

INCREMENTAL = """
{{ config(materialized='incremental', unique_key='id', table_type='mor') }}
select id, upper(v) as v {% if env_var('HUDILITE_TEST_FAIL', '0') == '1' %}, cast(raise_error('boom') as int) as bad
{% endif %} from {{ ref('source_t') }}
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
        # first run --empty: every table exists with its columns and no rows
        run_dbt(["run", "--empty"])
        for name, cols in (("source_t", [("id", "int"), ("v", "string")]),
                           ("incr", [("id", "int"), ("v", "string")]),
                           ("downstream", [("id", "int"), ("v", "string"), ("w", "string")])):
            assert self.rows(project, name) == [] and self.columns(project, name) == cols
        run_dbt(["run"])
        assert self.rows(project, "incr") == [(1, "A"), (2, "B")]
        before = commits(project, "incr")
        # --empty on built tables: the table model is rebuilt empty (its schema kept), the incremental
        # model's empty batch changes nothing it holds
        run_dbt(["run", "--empty"])
        assert self.rows(project, "source_t") == [] and self.columns(project, "source_t") == [
            ("id", "int"), ("v", "string")]
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
