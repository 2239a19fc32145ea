"""Consumers of an upstream that a --full-refresh rebuilt beside its old table (new key: a new table with a new
table id at the same path) converge to the rebuilt upstream instead of folding its whole snapshot on top of
what they hold: an aggregate recomputes from the new snapshot, a keyed `hudilite.changes()` consumer is
rebuilt from it (its own consumer receives the deletes this implies), an append consumer fails naming
--full-refresh."""

import pytest
from dbt.tests.util import run_dbt, run_dbt_and_capture

from hudilite.table import HoodieTable
from tests.functional.dbt.conftest import table_dir

DETAIL = """
{{ config(materialized='incremental', unique_key=var('key', 'id')) }}
{% if var('batch', 1) == 1 %}
select 1 as id, 'a' as g, 10 as amt union all select 2, 'a', 20 union all select 3, 'b', 5
{% else %}
select 1 as id, 'a' as g, 15 as amt union all select 4, 'a', 30
{% endif %}
"""
AGG = """
{{ config(materialized='aggregate') }}
select g, count(*) as n, sum(amt) as total, max(amt) as top from {{ ref('detail') }} group by g
"""
CONSUMER = """
{{ config(materialized='incremental', unique_key='id') }}
select id, g, amt, _change_op = 'D' as _hoodie_is_deleted from {{ hudilite.changes(ref('detail')) }}
"""
# a consumer of the consumer: sees the rebuild of `consumer` as ordinary changes (deletes included)
CONSUMER2 = """
{{ config(materialized='incremental', unique_key='id') }}
select id, g, amt, _change_op = 'D' as _hoodie_is_deleted from {{ hudilite.changes(ref('consumer')) }}
"""
LOG = """
{{ config(materialized='incremental') }}
select id, _change_op as op from {{ hudilite.changes(ref('detail')) }}
"""


class TestConsumersOfARebuiltUpstream:
    @pytest.fixture(scope="class")
    def models(self):
        return {"detail.sql": DETAIL, "agg.sql": AGG, "consumer.sql": CONSUMER, "consumer2.sql": CONSUMER2,
                "log.sql": LOG}

    def test_consumers_converge(self, project):
        s = project.test_schema
        rows = lambda q: sorted(tuple(r) for r in project.run_sql(q, fetch="all"))  # noqa: E731
        run_dbt(["run"])
        assert rows(f"select g, n, total, top from {s}.agg") == [("a", 2, 30, 20), ("b", 1, 5, 5)]
        old_id = HoodieTable.open(table_dir(project, "detail")).config.table_id
        # a new unique_key: the detail is rebuilt beside its old table and swapped in (a new table id)
        run_dbt(["run", "-s", "detail", "--full-refresh", "--vars", "{batch: 2, key: [id, g]}"])
        assert HoodieTable.open(table_dir(project, "detail")).config.table_id != old_id
        detail = rows(f"select id, g, amt from {s}.detail")
        assert detail == [(1, "a", 15), (4, "a", 30)]
        run_dbt(["run", "-s", "agg", "consumer", "--vars", "{batch: 2, key: [id, g]}"])
        # recomputed from the new snapshot; folding the whole new table on top gave ('a', 4, 75, 30), ('b', ...)
        assert rows(f"select g, n, total, top from {s}.agg") == rows(
            f"select g, count(*), sum(amt), max(amt) from {s}.detail group by g") == [("a", 2, 45, 30)]
        assert rows(f"select id, g, amt from {s}.consumer") == detail  # ids 2 and 3 are gone
        run_dbt(["run", "-s", "consumer2", "--vars", "{batch: 2, key: [id, g]}"])
        assert rows(f"select id, g, amt from {s}.consumer2") == detail
        # the next runs continue incrementally on the new table
        run_dbt(["run", "-s", "agg", "consumer", "--vars", "{batch: 2, key: [id, g]}"])
        assert rows(f"select g, n, total, top from {s}.agg") == [("a", 2, 45, 30)]
        # an append consumer cannot be recomputed from a snapshot: a clear error, nothing written
        log_commits = len(HoodieTable.open(table_dir(project, "log")).timeline.completed())
        _, out = run_dbt_and_capture(["run", "-s", "log", "--vars", "{batch: 2, key: [id, g]}"], expect_pass=False)
        assert "was rebuilt" in out and "--full-refresh" in out
        assert len(HoodieTable.open(table_dir(project, "log")).timeline.completed()) == log_commits
