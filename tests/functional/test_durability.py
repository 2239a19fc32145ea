"""Durable commits: a completed instant only ever names durable files. Every data file a commit names (base files
of bulk inserts, copy-on-write merges, compaction and clustering; log files) is fsynced, and so is every
directory holding one, before the completed instant file is linked; the timeline directory is fsynced after.
Checked by recording os.fsync / os.link calls of driver-local Arrow writes and in-process services."""

from __future__ import annotations

import os

import pyarrow as pa
import pytest

import hudilite
from hudilite.services.clustering import run_clustering, schedule_clustering
from hudilite.services.compaction import run_compaction, schedule_compaction
from hudilite.storage.local import directories_of
from hudilite.table import HoodieTable


def batch(ids, v):
    return pa.table({"id": pa.array(ids, pa.int64()), "v": pa.array([v] * len(ids), pa.int64()),
                     "dt": pa.array([f"2024-01-0{1 + i % 2}" for i in ids], pa.string())})


def put(path, ids, v, *, op="upsert", mor=False, options=None, version=None):
    version_opt = {"hoodie.write.table.version": str(version)} if version else {}
    return hudilite.write(batch(ids, v), path, record_key="id", precombine_field="v", partition_by=("dt",),
                          operation=op, table_type="MERGE_ON_READ" if mor else "COPY_ON_WRITE",
                          options={**version_opt, **(options or {})})


@pytest.fixture
def io_events(monkeypatch):
    """('fsync', path) and ('link', destination) in call order, from every thread."""
    events: list[tuple[str, str]] = []
    real_fsync, real_link = os.fsync, os.link

    def fsync(fd):
        events.append(("fsync", os.path.realpath(os.readlink(f"/proc/self/fd/{fd}"))))
        return real_fsync(fd)

    def link(src, dst, *a, **kw):
        out = real_link(src, dst, *a, **kw)
        events.append(("link", os.path.realpath(dst)))
        return out

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "link", link)
    return events


def check_durable_commit(path: str, instant: str, events) -> int:
    """Assert the ordering for the completed instant `instant`; returns the number of files it names."""
    tl = HoodieTable.open(path).timeline  # .hoodie (version 6) or .hoodie/timeline (8/9)
    [inst] = [i for i in tl.completed() if i.timestamp == instant]
    done = os.path.realpath(tl.instant_path(inst))
    meta = os.path.dirname(done)
    at = events.index(("link", done))
    synced_before = {p for kind, p in events[:at] if kind == "fsync"}
    md = tl.read_metadata(inst)
    rels = [s["path"] for ss in md["partitionToWriteStats"].values() for s in ss]
    assert rels
    base = os.path.realpath(path)
    for rel in rels:
        assert os.path.join(base, rel) in synced_before, f"{rel} is not fsynced before {done}"
    for d in directories_of(base, rels):
        assert d in synced_before, f"directory {d} is not fsynced before {done}"
    assert ("fsync", meta) in events[at + 1:], f"the timeline directory is not fsynced after linking {done}"
    return len(rels)


@pytest.mark.parametrize("version", [6, 9])
def test_every_file_a_commit_names_and_its_directories_are_fsynced_before_the_commit(tmp_path, io_events, version):
    cow, mor = str(tmp_path / "cow"), str(tmp_path / "mor")
    commits = [(cow, put(cow, list(range(40)), 1, op="bulk_insert", version=version))]  # streaming base file writer
    commits.append((cow, put(cow, list(range(0, 60, 3)), 2)))  # merges + a new file group
    for k in range(3):  # more small groups for clustering
        commits.append((cow, put(cow, list(range(100 + 10 * k, 110 + 10 * k)), 1, op="bulk_insert")))
    c = schedule_clustering(cow)
    assert run_clustering(cow) == [c]
    commits.append((cow, c))
    commits.append((mor, put(mor, list(range(40)), 1, op="bulk_insert", mor=True, version=version)))
    commits.append((mor, put(mor, list(range(0, 40, 4)), 2, mor=True)))  # log files
    c = schedule_compaction(mor, force=True)
    assert run_compaction(mor) == [c]
    commits.append((mor, c))
    assert sum(check_durable_commit(p, t, io_events) for p, t in commits) >= 14


def test_fsync_can_be_switched_off_for_scratch_tables(tmp_path, io_events):
    path = str(tmp_path / "t")
    t = put(path, list(range(20)), 1, op="bulk_insert", options={"hoodie.write.fsync": "false"})
    data = [p for kind, p in io_events if kind == "fsync" and p.endswith(".parquet")]
    assert t and data == []  # no data file synced; the completed instant itself still is
    assert ("fsync", os.path.realpath(HoodieTable.open(path).timeline.meta_dir)) in io_events
    with pytest.raises(hudilite.errors.InvalidWriteError, match="hoodie.write.fsync"):
        put(path, [1], 2, options={"hoodie.write.fsync": "maybe"})
    with pytest.raises(hudilite.errors.InvalidWriteError, match="hoodie.write.fsync"):  # services: before any file
        run_clustering(path, {"hoodie.write.fsync": "maybe"})
