"""`hudilite upgrade` on s3:// against the real S3 server: the commit point is a compare-and-swap of
hoodie.properties (S3 has no atomic rename), a concurrent change of the properties makes the upgrade fail with
the table still a readable version-6 table, and the next upgrade finishes it. Reads in-process; hudi-rs agrees."""

from __future__ import annotations

import os

import pytest

import hudilite
from hudilite.reader.merge import SliceDesc, merge_slice, read_base
from hudilite.reader.planner import plan_read
from hudilite.services import upgrade as upgrade_mod
from hudilite.services.upgrade import UpgradeError
from hudilite.storage.s3 import S3Storage
from hudilite.table import HoodieTable
from hudilite.timeline import WRITE_ACTIONS

from .tables import KEY, LEASE, hudi_rs_snapshot, rows, snapshot

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")


def _v6_table(path, table_type):
    t = hudilite.Table.create(path, **KEY, table_type=table_type, options={"hoodie.write.table.version": "6"})
    t.write(rows(range(20), 1), "insert", options=LEASE)
    t.write(rows(range(5, 12), 2), "upsert", options=LEASE)
    t.write(rows([0, 1], 0), "delete", options=LEASE)
    return hudilite.Table.open(path)


def _as_of_all(path) -> dict:
    tl = HoodieTable.open(path).timeline
    return {i.timestamp: snapshot_as_of(path, i.timestamp) for i in tl.completed(WRITE_ACTIONS)}


def snapshot_as_of(path, t):
    plan = plan_read(path, as_of=t)
    spec = plan.merge_spec()
    parts = [read_base(f, spec) for f in plan.plain_files] + [merge_slice(SliceDesc.of(s), spec)
                                                              for s in plan.merged_slices]
    return sorted((r["id"], r["v"]) for p in parts for r in p.select(["id", "v"]).to_pylist())


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_upgrade_on_s3_commits_by_compare_and_swap(s3_server, s3_tables, monkeypatch, table_type):
    path = f"{s3_tables}/{table_type.lower()}"
    t = _v6_table(path, table_type)
    before, history = snapshot(path), _as_of_all(path)
    assert t.info().version == 6

    swaps = []
    real = S3Storage.replace_if_match

    def spy(self, p, data, tag):
        swaps.append(os.path.basename(p))
        return real(self, p, data, tag)

    monkeypatch.setattr(S3Storage, "replace_if_match", spy)
    assert hudilite.Table.open(path).upgrade(options=LEASE)
    # the commit point is one conditional replace of the properties (the others renew the storage lock)
    assert [n for n in swaps if n != "table_lock.json"] == ["hoodie.properties"]

    t = hudilite.Table.open(path)
    assert t.info().version == 9
    assert snapshot(path) == before
    assert hudi_rs_snapshot(path, s3_server.storage_options) == before
    # every instant is still there for time travel (MOR: compacted by the upgrade, so one more commit)
    after = _as_of_all(path)
    assert {k: v for k, v in after.items() if k in history} == history
    # writes go on in the version-9 layout
    t.write(rows(range(30, 33), 3), "upsert", options=LEASE)
    assert snapshot(path) == sorted(before + [(i, 3) for i in range(30, 33)])
    fs = HoodieTable.open(path).fs
    assert not [n for n in fs.listdir(f"{path}/.hoodie") if n.endswith((".commit", ".deltacommit"))]


def test_properties_changed_during_the_upgrade_fails_it_and_the_next_run_finishes(s3_server, s3_tables,
                                                                                  monkeypatch):
    path = f"{s3_tables}/raced"
    _v6_table(path, "COPY_ON_WRITE")
    before = snapshot(path)
    real = upgrade_mod._write_history

    def racing_history(table, tl):
        real(table, tl)
        # another process rewrites hoodie.properties between the lock-holder's read and its commit point
        props = f"{path}/.hoodie/hoodie.properties"
        fs = table.fs
        fs.write_bytes(props, fs.read_bytes(props) + b"hoodie.table.comment=raced\n")

    monkeypatch.setattr(upgrade_mod, "_write_history", racing_history)
    with pytest.raises(UpgradeError, match="hoodie.properties changed during the upgrade"):
        hudilite.Table.open(path).upgrade(options=LEASE)
    # still version 6, readable, by us and hudi-rs; a version-6 write still commits
    t = hudilite.Table.open(path)
    assert t.info().version == 6
    assert snapshot(path) == before
    assert hudi_rs_snapshot(path, s3_server.storage_options) == before
    t.write(rows([50], 5), "upsert", options=LEASE)
    before = sorted(before + [(50, 5)])

    monkeypatch.setattr(upgrade_mod, "_write_history", real)
    assert hudilite.Table.open(path).upgrade(options=LEASE)
    t = hudilite.Table.open(path)
    assert t.info().version == 9
    assert snapshot(path) == before
    assert hudi_rs_snapshot(path, s3_server.storage_options) == before
