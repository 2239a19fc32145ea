"""A unique_key model whose partition column changes keeps one row per key (the adapter writes tables with a
unique_key through the global index): dbt's `unique` test passes, hudi-rs reads the same rows, and the models
downstream of its changes - an incremental model keyed by the same unique_key and an aggregate - retract the
row of the old partition."""

import pytest
from dbt.tests.util import run_dbt

from tests.functional.dbt.conftest import table_dir
from tests.hudi_rs import read_hudi_rs

ORDERS = """
{{ config(materialized='incremental', unique_key='id', precombine_field='version', partition_by='status') }}
{% if var('batch', 1) == 1 %}
select 1 as id, 1 as version, 'open' as status, 10 as amount union all select 2, 1, 'open', 20
union all select 3, 1, 'open', 30
{% else %}
select 1 as id, 2 as version, 'closed' as status, 10 as amount union all select 3, 2, 'shipped', 35
{% endif %}
"""

MIRROR = """
{{ config(materialized='incremental', unique_key='id', partition_by='status') }}
select id, version, status, amount, o._change_op = 'D' as _hoodie_is_deleted
from {{ hudilite.changes(ref('orders')) }} o
"""

BY_STATUS = """
{{ config(materialized='aggregate') }}
select status, count(*) as n, sum(amount) as total from {{ ref('orders') }} group by status
"""

SCHEMA_YML = """
version: 2
models:
  - name: orders
    columns:
      - name: id
        data_tests: [unique]
  - name: mirror
    columns:
      - name: id
        data_tests: [unique]
"""


def rows(project, sql):
    return sorted(tuple(r) for r in project.run_sql(sql, fetch="all"))


class TestPartitionMove:
    @pytest.fixture(scope="class")
    def models(self):
        return {"orders.sql": ORDERS, "mirror.sql": MIRROR, "by_status.sql": BY_STATUS, "schema.yml": SCHEMA_YML}

    def test_moves(self, project):
        s = project.test_schema
        run_dbt(["run"])
        run_dbt(["run", "--vars", "{batch: 2}"])
        want = [(1, 2, "closed", 10), (2, 1, "open", 20), (3, 2, "shipped", 35)]
        for m in ("orders", "mirror"):
            assert rows(project, f"select id, version, status, amount from {s}.{m}") == want, m
        t = read_hudi_rs(table_dir(project, "orders"))
        assert sorted(zip(*(t.column(c).to_pylist() for c in ("id", "version", "status", "amount")))) == want
        assert rows(project, f"select status, n, total from {s}.by_status") == [
            ("closed", 1, 10), ("open", 1, 20), ("shipped", 1, 35)]
        run_dbt(["test"])  # unique passes on both models (it raised on the duplicate before)
