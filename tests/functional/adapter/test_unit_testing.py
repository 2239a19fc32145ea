"""dbt unit tests (`unit_tests:`) on hudilite: dbt-tests-adapter's unit-testing classes, and one project with a
table model, an incremental model with an `is_incremental()` override and `this` fixture, and models reading
`hudilite.changes()` from a fixture (the given rows as 'I' changes; a `format: sql` fixture with its own
`_change_op` under `hudilite_fixture_change_ops`)."""

import pytest
from dbt.tests.adapter.unit_testing.test_case_insensitivity import BaseUnitTestCaseInsensivity
from dbt.tests.adapter.unit_testing.test_invalid_input import BaseUnitTestInvalidInput
from dbt.tests.adapter.unit_testing import test_quoted_reserved_word_column_names as qr
from dbt.tests.adapter.unit_testing.test_quoted_reserved_word_column_names import (
    BaseUnitTestQuotedReservedWordColumnNames,
)
from dbt.tests.adapter.unit_testing.test_types import BaseUnitTestingTypes
from dbt.tests.util import run_dbt


class TestUnitTestingTypesHudilite(BaseUnitTestingTypes):
    @pytest.fixture
    def data_types(self):
        # Spark SQL literals instead of Postgres' (`::numeric`, `::json`, TIMESTAMPTZ), as dbt-spark's list
        return [
            ["1", "1"],
            ["2.0", "2.0"],
            ["'12345'", "12345"],
            ["'string'", "string"],
            ["true", "true"],
            ["date '2011-11-11'", "2011-11-11"],
            ["timestamp '2013-11-03 00:00:00-0'", "2013-11-03 00:00:00-0"],
            ["array(1, 2, 3)", "'array(1, 2, 3)'"],
            ["map('10', 't', '15', 'f', '20', NULL)", """'map("10", "t", "15", "f", "20", NULL)'"""],
            ['named_struct("a", 1, "b", 2, "c", 3)', """'named_struct("a", 1, "b", 2, "c", 3)'"""],
        ]


class TestUnitTestCaseInsensitivityHudilite(BaseUnitTestCaseInsensivity):
    pass


class TestUnitTestInvalidInputHudilite(BaseUnitTestInvalidInput):
    pass


class TestUnitTestQuotedReservedWordColumnNamesHudilite(BaseUnitTestQuotedReservedWordColumnNames):
    @pytest.fixture(scope="class")
    def models(self):
        # Spark quotes identifiers with backticks: `select 1 as "GROUP"` is a string alias Spark rejects here
        return {"my_model.sql": qr.my_model_sql, "my_upstream_model.sql": "select 1 as `GROUP`",
                "unit_tests.yml": qr.test_my_model_csv_fixtures_yml}


_ORDERS = """
{{ config(materialized='table', unique_key='id') }}
select cast(id as bigint) as id, cast(amount as int) as amount, cast(ts as timestamp) as updated_at
from values (1, 10, '2024-01-01 00:00:00'), (2, 20, '2024-01-02 00:00:00') as t(id, amount, ts)
"""

_TOTALS = """
{{ config(materialized='table') }}
select count(*) as orders, sum(amount) as amount from {{ ref('orders') }}
"""

_RECENT = """
{{ config(materialized='incremental', unique_key='id') }}
select id, amount, updated_at from {{ ref('orders') }}
{% if is_incremental() %}
where updated_at > (select max(updated_at) from {{ this }})
{% endif %}
"""

_FROM_CHANGES = """
{{ config(materialized='incremental', unique_key='id', delete_condition="_change_op = 'D'") }}
select id, amount * 2 as doubled, _change_op from {{ hudilite.changes(ref('orders')) }}
"""

_UNIT_TESTS = """
unit_tests:
  - name: totals_sum_orders
    model: totals
    given:
      - input: ref('orders')
        rows:
          - {id: 1, amount: 5}
          - {id: 2, amount: 7}
    expect:
      rows:
        - {orders: 2, amount: 12}
  - name: recent_full_build
    model: recent
    overrides:
      macros: {is_incremental: false}
    given:
      - input: ref('orders')
        rows:
          - {id: 1, amount: 5, updated_at: '2024-01-01 00:00:00'}
    expect:
      rows:
        - {id: 1, amount: 5}
  - name: recent_only_newer_rows
    model: recent
    overrides:
      macros: {is_incremental: true}
    given:
      - input: ref('orders')
        rows:
          - {id: 1, amount: 5, updated_at: '2024-01-01 00:00:00'}
          - {id: 3, amount: 9, updated_at: '2024-01-05 00:00:00'}
      - input: this
        rows:
          - {id: 1, amount: 5, updated_at: '2024-01-02 00:00:00'}
    expect:
      rows:
        - {id: 3, amount: 9}
  - name: changes_fixture_rows_are_inserts
    model: from_changes
    given:
      - input: ref('orders')
        rows:
          - {id: 1, amount: 5}
    expect:
      rows:
        - {id: 1, doubled: 10, _change_op: 'I'}
  - name: changes_fixture_with_ops
    model: from_changes
    overrides:
      vars: {hudilite_fixture_change_ops: true}
    given:
      - input: ref('orders')
        format: sql
        rows: |
          select cast(1 as bigint) as id, 5 as amount, timestamp '2024-01-01' as updated_at, 'U' as _change_op
          union all
          select cast(2 as bigint), 7, timestamp '2024-01-01', 'D'
    expect:
      rows:
        - {id: 1, doubled: 10, _change_op: 'U'}
        - {id: 2, doubled: 14, _change_op: 'D'}
  - name: totals_wrong_expectation
    model: totals
    given:
      - input: ref('orders')
        rows:
          - {id: 1, amount: 5}
    expect:
      rows:
        - {orders: 1, amount: 6}
"""


class TestUnitTestsOnHudiliteModels:
    @pytest.fixture(scope="class")
    def models(self):
        return {"orders.sql": _ORDERS, "totals.sql": _TOTALS, "recent.sql": _RECENT,
                "from_changes.sql": _FROM_CHANGES, "unit_tests.yml": _UNIT_TESTS}

    def test_unit_tests(self, project):
        run_dbt(["run"])  # dict fixtures take their column types from the built upstream
        results = run_dbt(["test", "--select", "test_type:unit"], expect_pass=False)
        status = {r.node.name: str(r.status) for r in results}
        assert status == {"totals_sum_orders": "pass", "recent_full_build": "pass",
                          "recent_only_newer_rows": "pass", "changes_fixture_rows_are_inserts": "pass",
                          "changes_fixture_with_ops": "pass", "totals_wrong_expectation": "fail"}, status
