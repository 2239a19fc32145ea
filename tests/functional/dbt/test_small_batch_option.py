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


ORDERS_CSV = """id,customer,status,amount,batch
1,c1,PAID,10.50,1
2,c1,PENDING,3.25,1
3,c2,PAID,7.00,1
2,c1,PAID,3.25,2
4,c3,PAID,1.10,2
"""
ORDERS = """
{{ config(materialized='incremental', unique_key='id') }}
select id, customer, status, amount from {{ ref('orders_csv') }} where batch = {{ var('batch', 1) }}
"""
# a WHERE the driver-local fold does not translate (a function call) and a decimal sum: the fold runs in
# Spark (aggregate/spark.py), whose frames join the per-group state, the stored groups and the recomputed
# max / count(distinct)
AGG = """
{{{{ config(materialized='aggregate'{extra}) }}}}
select customer, count(*) as n, sum(amount) as total, max(amount) as top, count(distinct status) as kinds
from {{{{ ref('orders') }}}} where upper(status) <> 'CANCELLED' group by customer
"""


class TestSmallBatchAggregate:
    """The aggregate materialization's rows (a build, then a fold of the detail's changes in Spark) take the
    driver-local writer by default although Spark's size estimate of its joined frames is large; an
    opted-out aggregate takes the Spark write; both store the same rows."""

    @pytest.fixture(scope="class")
    def seeds(self):
        return {"orders_csv.csv": ORDERS_CSV}

    @pytest.fixture(scope="class")
    def project_config_update(self):
        return {"seeds": {"test": {"orders_csv": {"+column_types": {"amount": "decimal(10,2)"}}}}}

    @pytest.fixture(scope="class")
    def models(self):
        return {"orders.sql": ORDERS, "agg_fast.sql": AGG.format(extra=""),
                "agg_mor.sql": AGG.format(extra=", table_type='mor'"), "agg_spark.sql": AGG.format(extra=OPT_OUT)}

    def test_aggregates_written_on_the_driver(self, project):
        s = project.test_schema
        run_dbt(["seed"])
        rows = lambda t: sorted(tuple(r) for r in project.run_sql(  # noqa: E731
            f"select customer, n, cast(total as string), cast(top as string), kinds from {s}.{t}", fetch="all"))
        for batch in (1, 2):
            res = run_dbt(["run", "--vars", f"{{batch: {batch}}}"])
            by = {r.node.name: r.adapter_response for r in res.results}
            assert by["agg_fast"]["engine"] == by["agg_mor"]["engine"] == "driver", by
            assert by["agg_spark"]["engine"] == "spark"
            assert rows("agg_fast") == rows("agg_mor") == rows("agg_spark") == rows_of(project, s)
        assert rows("agg_fast") == [("c1", 2, "13.75", "10.50", 1), ("c2", 1, "7.00", "7.00", 1),
                                    ("c3", 1, "1.10", "1.10", 1)]


def rows_of(project, s):
    return sorted(tuple(r) for r in project.run_sql(
        f"select customer, count(*), cast(sum(amount) as string), cast(max(amount) as string), "
        f"count(distinct status) from {s}.orders where status <> 'CANCELLED' group by customer", fetch="all"))
