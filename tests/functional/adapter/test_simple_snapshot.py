"""dbt-tests-adapter `simple_snapshot` classes against `type: hudilite` (snapshots are hudilite tables keyed by
dbt_scd_id; later runs are one upsert commit)."""

from dbt.tests.adapter.simple_snapshot.test_snapshot import BaseSimpleSnapshot, BaseSnapshotCheck


class TestSimpleSnapshotHudilite(BaseSimpleSnapshot):
    pass


class TestSnapshotCheckHudilite(BaseSnapshotCheck):
    pass
