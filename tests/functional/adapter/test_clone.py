"""dbt-tests-adapter `dbt_clone` classes against `type: hudilite`, plus what a hudilite clone is: a new table
with the source's rows and layout (one commit, its own table id) that no longer needs the source's files
(dbt/adapters/hudilite/clone.py says why a copy and not a table referencing them)."""

import os
import shutil
from copy import deepcopy

import pytest
from dbt.tests.adapter.dbt_clone.test_dbt_clone import BaseClonePossible
from dbt.tests.util import run_dbt

import hudilite


class OtherSchemaCleanup:
    # as dbt-spark's clone test: the harness drops only the test schema; the seeds' and the clone's schemas too
    @pytest.fixture(autouse=True)
    def clean_up(self, project, other_schema):
        yield
        with project.adapter.connection_named("__test"):
            for schema in (f"{project.test_schema}_seeds", other_schema):
                project.adapter.drop_schema(project.adapter.Relation.create(database=project.database,
                                                                            schema=schema))


class TestClonePossibleHudilite(OtherSchemaCleanup, BaseClonePossible):
    pass


EVENTS = """
{{ config(materialized='incremental', table_type='mor', unique_key='id', precombine_field='ts',
          partition_by='part') }}
select * from values (1, 'a', 'p1', 1), (2, 'b', 'p2', 1)
{% if is_incremental() %} , (1, 'a2', 'p1', 2) {% endif %} as t(id, v, part, ts)
"""


class TestCloneIsIndependentHudilite(OtherSchemaCleanup):
    @pytest.fixture(scope="class")
    def models(self):
        return {"events.sql": EVENTS}

    @pytest.fixture(scope="class")
    def other_schema(self, unique_schema):
        return unique_schema + "_other"

    @pytest.fixture(scope="class")
    def profiles_config_update(self, dbt_profile_target, unique_schema, other_schema):
        outputs = {"default": dbt_profile_target, "otherschema": deepcopy(dbt_profile_target)}
        outputs["default"]["schema"] = unique_schema
        outputs["otherschema"]["schema"] = other_schema
        return {"test": {"outputs": outputs, "target": "default"}}

    def test_clone_copies_rows_and_layout(self, project, other_schema):
        run_dbt(["run"])
        run_dbt(["run"])  # a second commit: a log file over the base file (merge-on-read)
        os.makedirs(os.path.join(project.project_root, "state"), exist_ok=True)
        shutil.copyfile(os.path.join(project.project_root, "target", "manifest.json"),
                        os.path.join(project.project_root, "state", "manifest.json"))
        res = run_dbt(["clone", "--state", "state", "--target", "otherschema"])
        # one commit; keyed with a precombine field, a first build is an `insert` (keys de-duplicated)
        assert res.results[0].adapter_response["operation"] == "insert"

        warehouse = os.path.join(project.project_root, "warehouse")
        src = os.path.join(warehouse, project.test_schema, "events")
        dst = os.path.join(warehouse, other_schema, "events")
        a, b = hudilite.Table.open(src).layout(), hudilite.Table.open(dst).layout()
        assert (b.table_type, b.record_key, b.precombine_field, b.partition_by) == \
            ("MERGE_ON_READ", ["id"], "ts", ["part"])
        assert a.table_id != b.table_id
        shutil.rmtree(src)  # the clone reads none of the source's files
        assert sorted(project.run_sql(f"select id, v, part from {other_schema}.events", fetch="all")) == [
            (1, "a2", "p1"), (2, "b", "p2")]
        # the clone is an incremental model's table in its own right
        run_dbt(["run", "--target", "otherschema"])
        assert len(project.run_sql(f"select * from {other_schema}.events", fetch="all")) == 2
