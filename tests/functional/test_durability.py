"""Durable commits: a completed instant only ever names durable files. Every data file a commit names (base files
of bulk inserts, copy-on-write merges, compaction and clustering; log files) is fsynced, and so is every
directory holding one, before the completed instant file is linked; the timeline directory is fsynced after.
Checked by recording os.fsync / os.link calls of driver-local Arrow writes and in-process services."""

from __future__ import annotations

import json
import os

import pyarrow as pa
import pytest

import hudilite
from hudilite.services.clustering import run_clustering, schedule_clustering
from hudilite.services.compaction import run_compaction, schedule_compaction
from hudilite.storage.local import directories_of


def batch(ids, v):
    return pa.table({"id": pa.array(ids, pa.int64()), "v": pa.array([v] * len(ids), pa.int64()),
                     "dt": pa.array([f"2024-01-0{1 + i % 2}" for i in ids], pa.string())})


def put(path, ids, v, *, op="upsert", mor=False, options=None):
    return hudilite.write(batch(ids, v), path, record_key="id", precombine_field="v", partition_by=("dt",),
                          operation=op, table_type="MERGE_ON_READ" if mor else "COPY_ON_WRITE", options=options)


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
    meta = os.path.realpath(os.path.join(path, ".hoodie"))
    done = [e for e in os.listdir(meta) if e.startswith(instant + ".") and e.count(".") == 1
            and not e.endswith(".inflight")]
    assert len(done) == 1, done
    done = done[0]
    at = events.index(("link", os.path.join(meta, done)))
    synced_before = {p for kind, p in events[:at] if kind == "fsync"}
    with open(os.path.join(meta, done)) as f:
        md = json.load(f)
    rels = [s["path"] for ss in md["partitionToWriteStats"].values() for s in ss]
    assert rels
    base = os.path.realpath(path)
    for rel in rels:
        assert os.path.join(base, rel) in synced_before, f"{rel} is not fsynced before {done}"
    for d in directories_of(base, rels):
        assert d in synced_before, f"directory {d} is not fsynced before {done}"
    assert ("fsync", meta) in events[at + 1:], f"the timeline directory is not fsynced after linking {done}"
    return len(rels)


def test_every_file_a_commit_names_and_its_directories_are_fsynced_before_the_commit(tmp_path, io_events):
    cow, mor = str(tmp_path / "cow"), str(tmp_path / "mor")
    commits = [(cow, put(cow, list(range(40)), 1, op="bulk_insert"))]  # streaming base file writer
    commits.append((cow, put(cow, list(range(0, 60, 3)), 2)))  # merges + a new file group
    for k in range(3):  # more small groups for clustering
        commits.append((cow, put(cow, list(range(100 + 10 * k, 110 + 10 * k)), 1, op="bulk_insert")))
    c = schedule_clustering(cow)
    assert run_clustering(cow) == [c]
    commits.append((cow, c))
    commits.append((mor, put(mor, list(range(40)), 1, op="bulk_insert", mor=True)))
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
    assert ("fsync", os.path.realpath(os.path.join(path, ".hoodie"))) in io_events
    with pytest.raises(hudilite.errors.InvalidWriteError, match="hoodie.write.fsync"):
        put(path, [1], 2, options={"hoodie.write.fsync": "maybe"})
    with pytest.raises(hudilite.errors.InvalidWriteError, match="hoodie.write.fsync"):  # services: before any file
        run_clustering(path, {"hoodie.write.fsync": "maybe"})
