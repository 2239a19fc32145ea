"""A `hudilite.changes()` consumer whose `location_root` changes between runs moves: the new location has no
table and no checkpoint, so the model is built there from the upstream's full snapshot - not from the changes
since the checkpoint its old table holds (that built the moved model from one batch of changes)."""

import pytest
from dbt.tests.util import run_dbt

from hudilite.table import HoodieTable
from tests.functional.dbt.test_upstream_rebuild import DETAIL  # batch 1: ids 1-3; batch 2: 1 updated, 4 new

CONSUMER = """
{{ config(materialized='incremental', unique_key='id', location_root=var('root', none)) }}
select id, g, amt, _change_op = 'D' as _hoodie_is_deleted from {{ hudilite.changes(ref('detail')) }}
"""


class TestAMovedConsumer:
    @pytest.fixture(scope="class")
    def models(self):
        return {"detail.sql": DETAIL, "consumer.sql": CONSUMER}

    def test_moved_consumer_is_built_from_the_full_snapshot(self, project, tmp_path_factory):
        s = project.test_schema
        rows = lambda q: sorted(tuple(r) for r in project.run_sql(q, fetch="all"))  # noqa: E731
        run_dbt(["run"])
        assert rows(f"select id, g, amt from {s}.consumer") == [(1, "a", 10), (2, "a", 20), (3, "b", 5)]
        root = str(tmp_path_factory.mktemp("moved"))
        run_dbt(["run", "--vars", f"{{batch: 2, root: '{root}'}}"])
        expected = [(1, "a", 15), (2, "a", 20), (3, "b", 5), (4, "a", 30)]
        assert rows(f"select id, g, amt from {s}.detail") == expected
        assert rows(f"select id, g, amt from {s}.consumer") == expected
        assert HoodieTable.exists(f"{root}/consumer")
        # and it continues incrementally at its new location: the next run consumes only detail's new commit
        run_dbt(["run", "--vars", f"{{batch: 2, root: '{root}'}}"])
        assert rows(f"select id, g, amt from {s}.consumer") == expected
        timeline = HoodieTable.open(f"{root}/consumer").timeline
        last = timeline.read_metadata(timeline.completed()[-1])
        assert sum(st["numUpdateWrites"] + st["numInserts"]
                   for ss in last["partitionToWriteStats"].values() for st in ss) == 2  # ids 1 and 4
