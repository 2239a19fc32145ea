"""The dbt-tests-adapter `incremental` classes test_incremental.py runs (and BaseMicrobatch) on a project whose
models are all merge-on-read (`+table_type: mor` in dbt_project.yml), so every incremental run after the first
is a delta commit whose updates and deletes live in log files that `ref()` / the tests' comparisons only see
through the merged read. Plus: a merge-on-read incremental model with inline compaction keeps its rows across
the runs that compact.

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
from dbt.tests.util import run_dbt

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
