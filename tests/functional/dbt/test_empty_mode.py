"""`dbt run --empty` with hudilite's read macros: `hudilite.changes(ref(...))` and `hudilite.read(ref(...))` give
no rows, as dbt's own ref() does in that mode, and a changes model's checkpoint does not move, so the next run
reads the changes the empty run skipped. (Before, both macros read the upstream's rows, and an empty run of a
changes model consumed real changes.)"""

import pytest
from dbt.tests.util import run_dbt

ODS = """
{{ config(materialized='incremental', unique_key='id', precombine_field='seq') }}
select * from values ({{ var('b', 1) }}, {{ var('b', 1) }}, 'r{{ var("b", 1) }}') as t(id, seq, name)
"""
DWD = """
{{ config(materialized='incremental', unique_key='id') }}
select id, seq, name from {{ hudilite.changes(ref('ods')) }}
"""
READER = "{{ config(materialized='table') }} select id, name from {{ hudilite.read(ref('ods')) }}"


class TestEmptyRunOfReadMacros:
    @pytest.fixture(scope="class")
    def models(self):
        return {"ods.sql": ODS, "dwd.sql": DWD, "reader.sql": READER}

    def test_empty_run_reads_and_consumes_nothing(self, project):
        s = project.test_schema

        def ids(table):
            return sorted(r[0] for r in project.run_sql(f"select id from {s}.{table}", fetch="all"))

        run_dbt(["run"])
        run_dbt(["run", "-s", "ods", "--vars", "{b: 2}"])
        res = run_dbt(["run", "-s", "dwd", "reader", "--empty"])
        assert {r.node.name: r.adapter_response["rows_inserted"] for r in res.results} == {"dwd": 0, "reader": 0}
        assert ids("dwd") == [1] and ids("reader") == []
        run_dbt(["run", "-s", "dwd", "reader"])
        assert ids("dwd") == [1, 2] and ids("reader") == [1, 2]
