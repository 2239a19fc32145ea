"""Snapshots (SCD2) on hudilite tables: `timestamp` and `check` strategies, hard deletes (invalidate and
new_record), a source that gains a column; each snapshot run is one commit."""

import pytest
from dbt.tests.util import run_dbt

SRC = """
{{ config(materialized='table') }}
{% if var('batch', 1) == 1 %}
select 1 as id, 'a' as name, timestamp'2024-01-01 00:00:00' as updated_at
union all select 2, 'b', timestamp'2024-01-01 00:00:00'
union all select 3, 'c', timestamp'2024-01-01 00:00:00'
{% else %}
select 1 as id, 'a2' as name, timestamp'2024-01-02 00:00:00' as updated_at, 10 as tier
union all select 2, 'b', timestamp'2024-01-01 00:00:00', 20
union all select 4, 'd', timestamp'2024-01-02 00:00:00', 40
{% endif %}
"""

SNAP_TS = """
{% snapshot snap_ts %}
{{ config(target_schema=schema, unique_key='id', strategy='timestamp', updated_at='updated_at',
          invalidate_hard_deletes=True) }}
select * from {{ ref('src') }}
{% endsnapshot %}
"""

SNAP_CHECK = """
{% snapshot snap_check %}
{{ config(target_schema=schema, unique_key='id', strategy='check', check_cols=['name'],
          hard_deletes='new_record') }}
select id, name from {{ ref('src') }}
{% endsnapshot %}
"""


class TestSnapshots:
    @pytest.fixture(scope="class")
    def models(self):
        return {"src.sql": SRC}

    @pytest.fixture(scope="class")
    def snapshots(self):
        return {"snap_ts.sql": SNAP_TS, "snap_check.sql": SNAP_CHECK}

    def test_scd2(self, project):
        s = project.test_schema
        run_dbt(["run"])
        res = run_dbt(["snapshot"])
        assert {r.adapter_response["rows_inserted"] for r in res.results} == {3}
        run_dbt(["run", "--vars", "{batch: 2}"])
        res = run_dbt(["snapshot", "--vars", "{batch: 2}"])
        by = {r.node.name: r.adapter_response for r in res.results}
        # timestamp: id 1 closed + new version, id 3 closed (hard delete), id 4 new
        assert (by["snap_ts"]["rows_inserted"], by["snap_ts"]["rows_updated"]) == (2, 2)
        ts = sorted(project.run_sql(
            f"select id, name, dbt_valid_to is null from {s}.snap_ts", fetch="all"))
        assert [tuple(r) for r in ts] == [(1, "a", False), (1, "a2", True), (2, "b", True), (3, "c", False),
                                          (4, "d", True)]
        # the source gained `tier`: dbt adds the column, and only new versions have values in it (the closed
        # versions' only change is dbt_valid_to; they used to take the new version's value)
        tiers = sorted(tuple(r) for r in project.run_sql(f"select id, name, tier from {s}.snap_ts", fetch="all"))
        assert tiers == [(1, "a", None), (1, "a2", 10), (2, "b", None), (3, "c", None), (4, "d", 40)]
        # check + new_record: the deleted id 3 gets a closing update and a new row flagged dbt_is_deleted
        ck = sorted(tuple(r) for r in project.run_sql(
            f"select id, name, dbt_valid_to is null, dbt_is_deleted from {s}.snap_check", fetch="all"))
        assert ck == [(1, "a", False, "False"), (1, "a2", True, "False"), (2, "b", True, "False"),
                      (3, "c", False, "False"), (3, "c", True, "True"), (4, "d", True, "False")]
        # running again with no source change writes nothing new
        res = run_dbt(["snapshot", "--vars", "{batch: 2}"])
        assert project.run_sql(f"select count(*) from {s}.snap_ts", fetch="one")[0] == 5
