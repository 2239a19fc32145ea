"""TIMESTAMP_NTZ columns of dbt models keep their type and wall clock through table builds and incremental
upserts on both table types (before, they came back as TIMESTAMP, shifted by the session's time zone)."""

import pytest
from dbt.tests.util import run_dbt

MODEL = """
{{{{ config(materialized='incremental', unique_key='id', table_type='{table_type}') }}}}
{{% if var('batch', 1) == 1 %}}
select 1 as id, TIMESTAMP_NTZ'2024-01-01 11:00:00' as t, 1 as v
union all select 2, TIMESTAMP_NTZ'2024-03-10 02:30:00', 1
{{% else %}}
select 1 as id, TIMESTAMP_NTZ'2024-11-03 01:30:00' as t, 2 as v
union all select 3, TIMESTAMP_NTZ'2024-06-01 00:00:00', 1
{{% endif %}}
"""


class TestWallClockColumns:
    @pytest.fixture(scope="class")
    def models(self):
        return {"ntz_cow.sql": MODEL.format(table_type="cow"), "ntz_mor.sql": MODEL.format(table_type="mor")}

    def test_type_and_values_survive_runs_in_another_time_zone(self, project):
        spark = project.adapter.connections.env.spark
        run_dbt(["run"])
        run_dbt(["run", "--vars", "{batch: 2}"])
        s = project.test_schema
        for name in ("ntz_cow", "ntz_mor"):
            cols = {r[0]: r[1] for r in project.run_sql(f"describe {s}.{name}", fetch="all")}
            assert cols["t"] == "timestamp_ntz", name
            old = spark.conf.get("spark.sql.session.timeZone")
            spark.conf.set("spark.sql.session.timeZone", "America/New_York")
            try:
                got = sorted(tuple(r) for r in project.run_sql(
                    f"select id, cast(t as string), typeof(t) from {s}.{name}", fetch="all"))
            finally:
                spark.conf.set("spark.sql.session.timeZone", old)
            assert got == [(1, "2024-11-03 01:30:00", "timestamp_ntz"), (2, "2024-03-10 02:30:00", "timestamp_ntz"),
                           (3, "2024-06-01 00:00:00", "timestamp_ntz")], name
