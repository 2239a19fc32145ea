"""Markers of a write on s3:// against the real S3 server: the batched marker service is the default there and
rewrites whole `MARKERS<n>` objects; rollback finds a failed write's files from either marker type, so no orphan
object remains (in-process failure: the write's own rollback; a writer that died: `Table.rollback(force=True)`)."""

import pyarrow as pa
import pytest

import hudilite
from hudilite.markers import DIRECT, TIMELINE_SERVER_BASED, MarkerService, ServiceMarkers, list_markers, marker_type
from hudilite.storage import storage_for
from hudilite.storage.base import register_storage
from hudilite.storage.s3 import S3Storage, register
from hudilite.writer import client as write_client
from hudilite.writer.transaction import Transaction


class Boom(RuntimeError):
    pass


def _rows(ids, v=1):
    ids = list(ids)
    return pa.table({"id": ids, "v": [v] * len(ids), "p": [f"p{i % 3}" for i in ids]})


@pytest.fixture
def s3_base(s3_server, s3_bucket):
    register_storage("s3", lambda _scheme: S3Storage(s3_server.storage_options))
    yield f"s3://{s3_bucket}"
    register()


def _objects(fs, base):
    return {p[len(base) + 1:] for p in fs.walk_files(base)}


def _data(objs):
    return {p for p in objs if not p.startswith(".hoodie/")}


def pending_instant(seen):
    return next(iter(seen["temp"])).split("/")[2]


def test_marker_type_default_by_storage():
    assert marker_type("/tmp/t") == DIRECT
    assert marker_type("s3://b/t") == TIMELINE_SERVER_BASED
    assert marker_type("gs://b/t") == TIMELINE_SERVER_BASED
    assert marker_type("s3://b/t", {"hoodie.write.markers.type": "direct"}) == DIRECT
    assert marker_type("/tmp/t", {"hoodie.write.markers.type": TIMELINE_SERVER_BASED}) == TIMELINE_SERVER_BASED


@pytest.mark.parametrize("kind", [None, DIRECT])  # None: the default on s3, the batched service
@pytest.mark.parametrize("crash", [False, True])
def test_failed_write_leaves_no_orphan_objects(s3_base, monkeypatch, kind, crash):
    base = f"{s3_base}/t"
    fs = storage_for(base)
    opts = {} if kind is None else {"hoodie.write.markers.type": kind}
    t = hudilite.Table.create(base, record_key="id", precombine_field="v", partition_by=("p",))
    t.write(_rows(range(9)), "insert", options=opts)
    before = _objects(fs, base)
    assert not [p for p in before if p.startswith(".hoodie/.temp/")]  # a commit deletes its markers

    seen: dict = {}

    def failing_complete(self, inst, metadata, *a, **kw):
        # the data files are written: record what the markers look like, then fail before the commit
        seen["temp"] = {p for p in _objects(fs, base) if p.startswith(f".hoodie/.temp/{inst.timestamp}/")}
        seen["data"] = _data(_objects(fs, base)) - _data(before)
        seen["marked"] = {f"{part}/{name}" for part, name, _ in list_markers(base, inst.timestamp)}
        raise Boom("commit failed")

    monkeypatch.setattr(Transaction, "complete", failing_complete)
    if crash:  # a writer that dies leaves its pending instant for the next one to roll back
        monkeypatch.setattr(write_client, "abort_write", lambda *a, **kw: [])
    with pytest.raises(Exception, match="commit failed"):
        t.write(_rows(range(5, 14), v=2), "upsert", options=opts)
    monkeypatch.undo()

    names = {p.rsplit("/", 1)[-1] for p in seen["temp"]}
    if kind is None:  # one MARKERS object per worker, no object per data file
        assert "MARKERS.type" in names and any(n.startswith("MARKERS") and n[7:].isdigit() for n in names)
        assert not [n for n in names if ".marker." in n]
        if crash:  # still there until the rollback
            typ = f"{base}/.hoodie/.temp/{pending_instant(seen)}/MARKERS.type"
            assert fs.read_bytes(typ) == b"TIMELINE_SERVER_BASED"
    else:
        assert len([n for n in names if ".marker." in n]) >= len(seen["data"])
    assert seen["data"], "the failed write wrote no data file before its commit"
    assert seen["data"] <= seen["marked"], "a data file without a marker: rollback could miss it"

    if crash:
        t = hudilite.Table.open(base)
        assert t.services.rollback(force=True)
    after = _objects(fs, base)
    assert _data(after) == _data(before), "orphan data objects after the rollback"
    assert not [p for p in after if p.startswith(".hoodie/.temp/")]
    t = hudilite.Table.open(base)
    t.write(_rows(range(5, 14), v=3), "upsert", options=opts)
    assert {r["id"]: r["v"] for r in t.to_arrow(["id", "v"]).to_pylist()} == \
        {i: 1 for i in range(5)} | {i: 3 for i in range(5, 14)}


def test_service_on_s3_rewrites_whole_objects_and_continues_after_restart(s3_base, s3_server):
    base = f"{s3_base}/svc"
    fs = storage_for(base)
    with MarkerService(base, num_threads=1, batch_interval_ms=5) as svc:
        m = ServiceMarkers(svc.start(), base, "001")
        for i in range(3):
            m.create("p1", f"f{i}.parquet", "CREATE")
        assert not m.try_create("p1", "f0.parquet", "CREATE")
    with MarkerService(base, num_threads=1) as svc:  # a new life continues MARKERS0, never overwrites it
        m = ServiceMarkers(svc.start(), base, "001")
        assert not m.try_create("p1", "f1.parquet", "CREATE")
        m.create("p2", "g.parquet", "MERGE")
    temp = f"{base}/.hoodie/.temp/001"
    assert sorted(fs.listdir(temp)) == ["MARKERS.type", "MARKERS0"]
    assert fs.read_bytes(f"{temp}/MARKERS0").decode().splitlines() == \
        [f"p1/f{i}.parquet.marker.CREATE" for i in range(3)] + ["p2/g.parquet.marker.MERGE"]
    assert sorted(list_markers(base, "001")) == \
        [("p1", f"f{i}.parquet", "CREATE") for i in range(3)] + [("p2", "g.parquet", "MERGE")]
