"""`dbt run --empty` with hudilite's read macros: `hudilite.changes(ref(...))` and `hudilite.read(ref(...))` give
no rows, as dbt's own ref() does in that mode, and a changes model's checkpoint does not move, so the next run
reads the changes the empty run skipped. (Before, both macros read the upstream's rows, and an empty run of a
changes model consumed real changes.) An `aggregate` model under --empty: an existing one is left as it is, a new
one is built without rows, neither keeps a checkpoint (before: a compilation error, "FROM must name one
table", on dbt's empty subquery)."""

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
AGG = ("{{ config(materialized='aggregate') }} "
       "select name, count(*) as n, sum(seq) as s from {{ ref('ods') }} group by name")


class TestEmptyRunOfReadMacros:
    @pytest.fixture(scope="class")
    def models(self):
        return {"ods.sql": ODS, "dwd.sql": DWD, "reader.sql": READER, "agg_old.sql": AGG, "agg_new.sql": AGG}

    def test_empty_run_reads_and_consumes_nothing(self, project):
        s = project.test_schema

        def ids(table, col="id"):
            return sorted(r[0] for r in project.run_sql(f"select {col} from {s}.{table}", fetch="all"))

        run_dbt(["run", "--exclude", "agg_new"])
        run_dbt(["run", "-s", "ods", "--vars", "{b: 2}"])
        models = ["dwd", "reader", "agg_old", "agg_new"]
        res = run_dbt(["run", "-s", *models, "--empty"])
        assert {r.node.name: r.adapter_response["rows_inserted"] for r in res.results} == \
            {"dwd": 0, "reader": 0, "agg_old": 0, "agg_new": 0}
        assert ids("dwd") == [1] and ids("reader") == [] and ids("agg_new", "name") == []
        assert project.run_sql(f"select name, n, s from {s}.agg_old", fetch="all") == [("r1", 1, 1)]
        run_dbt(["run", "-s", *models])
        assert ids("dwd") == [1, 2] and ids("reader") == [1, 2]
        for agg in ("agg_old", "agg_new"):
            got = sorted(tuple(r) for r in project.run_sql(f"select name, n, s from {s}.{agg}", fetch="all"))
            assert got == [("r1", 1, 1), ("r2", 1, 2)], (agg, got)
