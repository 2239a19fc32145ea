"""What dbt reports about hudilite tables: the rows a full build removes as well as those it inserts (run result
and adapter response), and the tables' real row counts in the docs catalog (from commit metadata, no scan)."""

import json
import os

import pytest
from dbt.tests.util import run_dbt

from hudilite.table import HoodieTable
from tests.functional.dbt.conftest import table_dir

# an incremental model (a --full-refresh rebuilds it) and a merge-on-read one whose rows only a merge counts
NUMBERS = """
{{ config(materialized='incremental', unique_key='id') }}
select id, id * 10 as v from range({{ var('n', 5) }}) as t(id)
"""
NUMBERS_MOR = """
{{ config(materialized='incremental', unique_key='id', table_type='mor') }}
select id, {{ var('v', 1) }} as v from range({{ var('n', 4) }}) as t(id)
"""


# an aggregate of the incremental model: a --full-refresh rebuilds it from the detail's snapshot
TOTALS = """
{{ config(materialized='aggregate') }}
select id % 2 as parity, count(*) as n, sum(v) as total from {{ ref('numbers') }} group by id % 2
"""


class TestReporting:
    @pytest.fixture(scope="class")
    def models(self):
        return {"numbers.sql": NUMBERS, "numbers_mor.sql": NUMBERS_MOR, "totals.sql": TOTALS}

    def test_full_refresh_counts_and_catalog_rows(self, project):
        run_dbt(["run"])
        res = run_dbt(["run", "-s", "numbers", "--full-refresh", "--vars", "{n: 3}"])
        by = {r.node.name: r.adapter_response for r in res.results}
        resp = by["numbers"]
        assert resp["operation"] == "insert_overwrite_table"
        assert (resp["rows_inserted"], resp["rows_removed"]) == (3, 5)
        assert resp["_message"] == "INSERT_OVERWRITE_TABLE 3 inserted, 0 updated, 0 deleted, 5 removed"
        assert resp["rows_affected"] == 8
        # the aggregate's full build over its 2 stored groups reports them as removed, as a table model does
        res = run_dbt(["run", "-s", "totals", "--full-refresh"])
        resp = res.results[0].adapter_response
        assert (resp["rows_inserted"], resp["rows_removed"]) == (2, 2), resp["_message"]

        # an update of the merge-on-read table lands in a log file: counted by the merged read
        run_dbt(["run", "-s", "numbers_mor", "--vars", "{n: 2, v: 2}"])
        res = run_dbt(["run", "-s", "numbers_mor", "--full-refresh", "--vars", "{n: 1}"])
        assert res.results[0].adapter_response["rows_removed"] == 4

        run_dbt(["run", "-s", "numbers_mor", "--vars", "{n: 6, v: 3}"])   # 1 updated, 5 new: log files
        run_dbt(["docs", "generate"])
        with open(os.path.join(str(project.project_root), "target", "catalog.json")) as f:
            nodes = json.load(f)["nodes"]
        stats = nodes["model.test.numbers"]["stats"]
        assert stats["rows"]["value"] == 3 and stats["rows"]["include"]
        files = HoodieTable.open(table_dir(project, "numbers")).snapshot_stats()
        assert stats["bytes"]["value"] == files["bytes"] > 0
        # a merge-on-read table with log files: no row count rather than a wrong one
        assert "rows" not in nodes["model.test.numbers_mor"]["stats"]
