"""`table` models: first build, rebuilds as one insert_overwrite_table commit, failed rebuilds."""

import glob
import os

import pytest
from dbt.tests.util import run_dbt, run_dbt_and_capture

import hudilite
from hudilite.table import HoodieTable
from tests.functional.dbt.conftest import table_dir

PEOPLE_CSV = """id,name,score,batch
1,alice,10,1
2,bob,20,1
3,carol,30,1
1,alice,11,2
4,dave,40,2
"""

PEOPLE_T = """
{{ config(materialized='table') }}
select id, name, score {% if var('extra', 0) %}, 'x' as extra{% endif %}
{% if var('fail', 0) %}, cast(raise_error('boom: this rebuild fails') as int) as bad{% endif %}
from {{ ref('people') }} where batch = {{ var('batch', 1) }}
"""

# the column type changes string -> int on the second build: not a commit on the old table
RETYPED_T = """
{{ config(materialized='table') }}
{% if var('batch', 1) == 1 %} select id, cast(score as string) as v from {{ ref('people') }} where batch = 1
{% else %} select id, score as v from {{ ref('people') }} where batch = 2 {% endif %}
"""


def rows(project, sql):
    return sorted(tuple(r) for r in project.run_sql(sql, fetch="all"))


def completed(path):
    return [i for i in HoodieTable.open(path).timeline.completed()]


class TestTableBuildAndRebuild:
    @pytest.fixture(scope="class")
    def seeds(self):
        return {"people.csv": PEOPLE_CSV}

    @pytest.fixture(scope="class")
    def models(self):
        return {"people_t.sql": PEOPLE_T, "retyped_t.sql": RETYPED_T}

    def test_build_rebuild_and_failed_rebuild(self, project):
        s = project.test_schema
        run_dbt(["seed"])
        res = run_dbt(["run"])
        by = {r.node.name: r for r in res.results}
        resp = by["people_t"].adapter_response
        assert resp["operation"] == "bulk_insert" and resp["rows_inserted"] == 3 and resp["rows_affected"] == 3
        assert resp["_message"] == "BULK_INSERT 3 inserted, 0 updated, 0 deleted"
        assert rows(project, f"select id, name, score from {s}.people_t") == [
            (1, "alice", 10), (2, "bob", 20), (3, "carol", 30)]
        path = table_dir(project, "people_t")
        first = completed(path)
        assert [i.action for i in first] == ["commit"]

        # rebuild: ONE replacecommit on the same table; the old snapshot stays readable (time travel)
        res = run_dbt(["run", "--vars", "{batch: 2, extra: 1}", "-s", "people_t"])
        resp = res.results[0].adapter_response
        assert resp["operation"] == "insert_overwrite_table" and resp["rows_inserted"] == 2
        after = completed(path)
        assert [i.action for i in after] == ["commit", "replacecommit"]
        assert rows(project, f"select id, name, score, extra from {s}.people_t") == [
            (1, "alice", 11, "x"), (4, "dave", 40, "x")]
        old = hudilite.read(project.adapter.connections.env.spark, path, as_of=first[0].timestamp)
        assert sorted((r["id"], r["score"]) for r in old.collect()) == [(1, 10), (2, 20), (3, 30)]
        # the model's columns only: no _hudilite_row_id, meta columns hidden from dbt
        cols = [c.name for c in project.adapter.get_columns_in_relation(
            project.adapter.get_relation(None, s, "people_t"))]
        assert cols == ["id", "name", "score", "extra"]

        # a failing rebuild: the command fails with the cause, the table is exactly as it was
        res, out = run_dbt_and_capture(["run", "--vars", "{batch: 1, fail: 1}", "-s", "people_t"],
                                       expect_pass=False)
        assert "boom: this rebuild fails" in out
        assert completed(path) == after
        done = {i.timestamp for i in after}
        data = glob.glob(os.path.join(path, "*.parquet"))
        assert data and all(os.path.basename(f).rsplit("_", 1)[1][:-8] in done for f in data)  # rolled back
        assert rows(project, f"select id, name, score from {s}.people_t") == [(1, "alice", 11), (4, "dave", 40)]

    def test_incompatible_rebuild_replaces_the_table(self, project):
        s = project.test_schema
        run_dbt(["run", "-s", "retyped_t"])
        assert rows(project, f"select id, v from {s}.retyped_t") == [(1, "10"), (2, "20"), (3, "30")]
        run_dbt(["run", "-s", "retyped_t", "--vars", "{batch: 2}"])
        assert rows(project, f"select id, v from {s}.retyped_t") == [(1, 11), (4, 40)]
        parent = os.path.dirname(table_dir(project, "retyped_t"))
        assert not [d for d in os.listdir(parent) if "hudilite-" in d]  # no staging/replaced leftovers


MORPH = """
{{ config(materialized=var('mat', 'table'), unique_key=('id' if var('mat', 'table') == 'incremental' else none)) }}
select 1 as id, 'x' as name
"""


class TestRelationTypeChangesAndDebug:
    @pytest.fixture(scope="class")
    def models(self):
        return {"morph.sql": MORPH}

    def test_relation_type_changes(self, project):
        s = project.test_schema
        env = project.adapter.connections.env
        path = table_dir(project, "morph")
        for mat in ("table", "view", "incremental", "incremental", "view", "table"):
            run_dbt(["run", "--vars", f"{{mat: {mat}}}"])
            entry = env.describe(s, "morph")
            assert entry.kind == ("VIEW" if mat == "view" else "TABLE"), mat
            assert entry.is_hudilite == (mat != "view")
            assert os.path.isdir(path) == (mat != "view"), mat  # dropping the table removed its data
            assert rows(project, f"select id, name from {s}.morph") == [(1, "x")]

    def test_debug_reports_spark_master_and_warehouse(self, project):
        _, out = run_dbt_and_capture(["debug"])
        assert "spark_version: " in out and "master: local[2]" in out
        assert "warehouse: " + os.path.join(str(project.project_root), "warehouse") in out
        assert "OK connection ok" in out and "All checks passed" in out
