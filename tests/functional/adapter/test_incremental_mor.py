"""The dbt-tests-adapter `incremental` classes test_incremental.py runs (and BaseMicrobatch) on a project whose
models are all merge-on-read (`+table_type: mor` in dbt_project.yml), so every incremental run after the first
is a delta commit whose updates and deletes live in log files that `ref()` / the tests' comparisons only see
through the merged read. Plus: a merge-on-read incremental model with inline compaction keeps its rows across
the runs that compact; a filtered view of a merge-on-read model is not read as the model.

The only overrides are the `project_config_update` fixtures: the classes that set one themselves
(BaseIncrementalPredicates) get theirs with `+table_type: mor` added; the others get it alone.
"""

import os

import pytest
from dbt.tests.adapter.incremental.test_incremental_merge_exclude_columns import BaseMergeExcludeColumns
from dbt.tests.adapter.incremental.test_incremental_microbatch import BaseMicrobatch
from dbt.tests.adapter.incremental.test_incremental_on_schema_change import BaseIncrementalOnSchemaChange
from dbt.tests.adapter.incremental.test_incremental_predicates import BaseIncrementalPredicates
from dbt.tests.adapter.incremental.test_incremental_unique_id import BaseIncrementalUniqueKey
from dbt.tests.util import run_dbt, run_dbt_and_capture

import hudilite

_MOR = {"+table_type": "mor"}


class TestIncrementalUniqueKeyMorHudilite(BaseIncrementalUniqueKey):
    @pytest.fixture(scope="class")
    def project_config_update(self):
        return {"models": dict(_MOR)}


class TestMergeExcludeColumnsMorHudilite(BaseMergeExcludeColumns):
    @pytest.fixture(scope="class")
    def project_config_update(self):
        return {"models": dict(_MOR)}


class TestIncrementalPredicatesDeleteInsertMorHudilite(BaseIncrementalPredicates):
    @pytest.fixture(scope="class")
    def project_config_update(self):
        # the base class's own settings, with the table type added
        return {"models": {"+incremental_predicates": ["id != 2"], "+incremental_strategy": "delete+insert",
                           **_MOR}}


class TestIncrementalOnSchemaChangeMorHudilite(BaseIncrementalOnSchemaChange):
    @pytest.fixture(scope="class")
    def project_config_update(self):
        return {"models": dict(_MOR)}


class TestMicrobatchMorHudilite(BaseMicrobatch):
    @pytest.fixture(scope="class")
    def project_config_update(self):
        return {"models": dict(_MOR)}


_SOURCE = """
{{ config(materialized='table') }}
select cast(id as bigint) as id, cast(v as bigint) as v from values {{ var('rows') }} as t(id, v)
"""

# upsert with deletes: run n sends ids 1..n+2 with v = n, and deletes id 1 from run 3 on
_UPSERT = """
{{ config(materialized='incremental', unique_key='id', delete_condition='v < 0',
          options={'hoodie.compact.inline': 'true', 'hoodie.compact.inline.max.delta.commits': '2'}) }}
select id, v from {{ ref('source') }}
"""


class TestMorInlineCompactionHudilite:
    """A merge-on-read incremental model with `hoodie.compact.inline` (compaction after every 2nd delta
    commit): its 2nd, 3rd and 4th runs write log files, compact them inline and still show the right rows."""

    @pytest.fixture(scope="class")
    def project_config_update(self):
        return {"models": dict(_MOR)}

    @pytest.fixture(scope="class")
    def models(self):
        return {"source.sql": _SOURCE, "upsert_mor.sql": _UPSERT}

    def test_runs_with_inline_compaction(self, project):
        path = os.path.join(str(project.project_root), "warehouse", project.test_schema, "upsert_mor")
        expected = {}
        for run in range(1, 5):
            rows = {i: run for i in range(1, run + 3)}
            if run >= 3:
                rows[1] = -1  # a delete
            run_dbt(["run", "--vars", "{rows: '" + ", ".join(f"({i}, {v})" for i, v in rows.items()) + "'}"])
            for i, v in rows.items():
                if v < 0:
                    expected.pop(i, None)
                else:
                    expected[i] = v
            got = dict(project.run_sql(f"select id, v from {project.test_schema}.upsert_mor", fetch="all"))
            assert got == expected, f"run {run}"
        timeline = hudilite.Table.open(path).timeline
        actions = [i.action for i in timeline.completed()]
        # the first build and the three incremental runs (delta commits), and at least one inline compaction
        # (a completed compaction is a `commit` on a merge-on-read timeline)
        assert actions.count("deltacommit") == 4, actions
        assert "commit" in actions, actions


_UP = """
{{ config(materialized='incremental', unique_key='id') }}
select id, v from {{ ref('source') }}
"""
_FILTERED_VIEW = """
{{ config(materialized='view') }}
select * from {{ ref('mor_up') }} where v > 1
"""
_CHANGES_OF_VIEW = """
{{ config(materialized='incremental', unique_key='id') }}
select id, v from {{ hudilite.changes(ref('filtered')) }}
"""
_AGGREGATE_OF_VIEW = """
{{ config(materialized='aggregate') }}
select v, count(*) as n from {{ ref('filtered') }} group by v
"""


class TestViewOverMorModelIsNotTheModel:
    """A view selecting `*` from a merge-on-read model carries the model's catalog entry in its columns'
    metadata (Spark keeps it through the projection). It is still a view: change reads and aggregates of it
    fail as for any view, instead of reading the model's table and dropping the view's filter."""

    @pytest.fixture(scope="class")
    def project_config_update(self):
        return {"models": dict(_MOR)}

    @pytest.fixture(scope="class")
    def models(self):
        return {"source.sql": _SOURCE, "mor_up.sql": _UP, "filtered.sql": _FILTERED_VIEW,
                "changes_of_view.sql": _CHANGES_OF_VIEW, "aggregate_of_view.sql": _AGGREGATE_OF_VIEW}

    def test_a_view_is_no_hudilite_upstream(self, project):
        run_dbt(["run", "--select", "source", "mor_up", "filtered", "--vars", "{rows: '(1, 1), (2, 2), (3, 3)'}"])
        got = sorted(project.run_sql(f"select id, v from {project.test_schema}.filtered", fetch="all"))
        assert [tuple(r) for r in got] == [(2, 2), (3, 3)]
        results, log = run_dbt_and_capture(["run", "--select", "changes_of_view", "aggregate_of_view",
                                            "--vars", "{rows: '(1, 1)'}"], expect_pass=False)
        assert len(results) == 2 and all(r.status == "error" for r in results), log
        name = f"{project.test_schema}.filtered"
        assert f"hudilite.changes/as_of: {name} is not a hudilite table" in log, log
        assert f"materialized='aggregate': {name} is not a hudilite table" in log, log
        for model in ("changes_of_view", "aggregate_of_view"):  # nothing was written
            path = os.path.join(str(project.project_root), "warehouse", project.test_schema, model)
            assert not hudilite.Table.exists(path), model
