"""The adapter writes a model's (and a seed's) small batch with the driver-local writer by default (no Spark
jobs), a model that sets `options: {hudilite.write.small.batch.enabled: false}` takes the Spark write, and both
store the same rows and report the same counts."""

import pytest
from dbt.tests.util import run_dbt

EVENTS_CSV = """id,version,name,deleted,batch
1,1,alice,false,1
2,1,bob,false,1
3,1,carol,false,1
1,2,alice2,false,2
2,2,bob,true,2
4,1,dave,false,2
4,3,dave3,false,2
"""

MODEL = """
{{{{ config(materialized='incremental', unique_key='id', precombine_field='version',
            delete_condition='deleted'{extra}) }}}}
select id, version, name, deleted from {{{{ ref('events') }}}} where batch = {{{{ var('batch', 1) }}}}
"""
OPT_OUT = ", options={'hudilite.write.small.batch.enabled': 'false'}"


class TestSmallBatchDefault:
    @pytest.fixture(scope="class")
    def seeds(self):
        return {"events.csv": EVENTS_CSV}

    @pytest.fixture(scope="class")
    def models(self):
        return {"fast_m.sql": MODEL.format(extra=""), "spark_m.sql": MODEL.format(extra=OPT_OUT)}

    def test_driver_path_by_default_opt_out_takes_spark_same_rows(self, project):
        s = project.test_schema
        seeded = run_dbt(["seed"])
        assert {r.adapter_response["engine"] for r in seeded.results} == {"driver"}
        for batch in (1, 2):
            res = run_dbt(["run", "--vars", f"{{batch: {batch}}}"])
            by = {r.node.name: r.adapter_response for r in res.results}
            assert by["fast_m"]["engine"] == "driver" and by["spark_m"]["engine"] == "spark"
            counts = ("rows_inserted", "rows_updated", "rows_deleted")
            assert [by["fast_m"][k] for k in counts] == [by["spark_m"][k] for k in counts]
        fast = sorted(project.run_sql(f"select id, version, name from {s}.fast_m", fetch="all"))
        slow = sorted(project.run_sql(f"select id, version, name from {s}.spark_m", fetch="all"))
        assert [tuple(r) for r in fast] == [tuple(r) for r in slow] == [
            (1, 2, "alice2"), (3, 1, "carol"), (4, 3, "dave3")]
