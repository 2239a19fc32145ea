"""Archival of version-9 tables into the LSM timeline history (driver-local writes, no Spark): reads before and
after archival agree (ours and hudi-rs), the history's levels compact, and a crash at any storage step of an
archival leaves a table that reads the same and that the next archival finishes."""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from hudilite.errors import RangeUnavailableError
from hudilite.reader.planner import plan_read
from hudilite.reader.ranges import resolve_range
from hudilite.services import archival
from hudilite.storage.local import LocalStorage
from hudilite.table import HoodieTable
from hudilite.timeline import lsm
from hudilite.timeline.timeline import _ARCHIVE_CACHE
from hudilite.writer import client
from tests.hudi_rs import read_hudi_rs

LAYOUT = dict(record_key="id", precombine_field="v", partition_by=("p",))
OPTS = {"hoodie.keep.min.commits": "2", "hoodie.keep.max.commits": "3", "hoodie.timeline.compaction.batch.size": "2"}
V9 = {"hoodie.write.table.version": "9"}


def _write(path, n, table_type):
    ids = [n % 4, 10 + n]  # an update of an older key and a new key per commit
    rows = pa.table({"id": pa.array(ids, pa.int64()), "p": pa.array([f"p{i % 2}" for i in ids]),
                     "v": pa.array([n] * len(ids), pa.int64())})
    client.write(rows, path, operation="upsert", table_type=table_type, options=V9, **LAYOUT)


def _rs(path, **kw):
    t = read_hudi_rs(path, **kw)
    return [] if t is None else sorted((r["id"], r["v"], r["_hoodie_commit_time"]) for r in t.to_pylist())


def _completions(path):
    """instant -> completion time of every completed write, active and archived."""
    tl = HoodieTable.open(path).timeline
    out = dict(tl.archived.completion_times)
    out.update({i.timestamp: tl.completion_time(i) for i in tl.completed()})
    return out


def _ours(path, as_of):
    """Our time travel: the planned slices (files), and for slices without logs their rows."""
    plan = plan_read(path, as_of=as_of)
    rows = sorted((r["id"], r["v"]) for f in plan.plain_files for r in pq.read_table(f).to_pylist())
    return sorted(tuple(s.files) for s in plan.slices), rows


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_archival_keeps_every_read(tmp_path, table_type):
    path = str(tmp_path / "t")
    _ARCHIVE_CACHE.clear()
    expect, done = {}, {}
    runs = 0
    for n in range(10):
        _write(path, n, table_type)
        tl = HoodieTable.open(path).timeline
        for i in tl.completed():  # reads of every instant while it is still active
            expect.setdefault(("as_of", i.timestamp), _rs(path, as_of=i.timestamp))
            if table_type == "COPY_ON_WRITE":
                expect.setdefault(("ours", i.timestamp), _ours(path, tl.completion_time(i)))
        done = _completions(path)
        c = sorted(done.values())
        # hudi-rs reads only the active timeline, so its change reads are compared on the active range (the
        # archived range is Apache Hudi's to judge: tests/judge/test_apache_hudi_lsm.py)
        snap, inc = _rs(path), _rs(path, begin=c[-2], end=c[-1]) if len(c) > 1 else None
        runs += bool(archival.archive(path, OPTS))
        assert _rs(path) == snap and _completions(path) == done
        assert inc is None or _rs(path, begin=c[-2], end=c[-1]) == inc
    assert runs >= 4
    tl = HoodieTable.open(path).timeline
    archived = sorted(tl.archived.completed_write_times)
    assert len(tl.completed()) == 2 and len(archived) == 8 and not set(archived) & tl.all_times
    assert _completions(path) == done
    for (kind, t), want in expect.items():
        got = _rs(path, as_of=t) if kind == "as_of" else _ours(path, t)
        assert got == want, f"{kind} {t}"
    # the history compacted its levels (batch 2) and cleaned what no kept snapshot names
    hd = lsm.history_dir(tl.meta_dir)
    live = [n for n, _ in lsm.read_manifest(hd, lsm.latest_version(hd))]
    assert any(n.endswith("_1.parquet") or n.endswith("_2.parquet") for n in live)
    assert [r.instant_time for r in lsm.read_records(hd)] == archived
    assert len(lsm.manifest_versions(hd)) <= 3
    # our change ranges reaching into the history are refused (as on version 6: archived instants' changes
    # cannot be read completely); ranges on the active timeline resolve
    assert [i.timestamp for i in resolve_range(HoodieTable.open(path), c[-2], completion_bounds=True).in_range] \
        == [tl.completed()[-1].timestamp]
    c = sorted(done.values())
    with pytest.raises(RangeUnavailableError):
        resolve_range(HoodieTable.open(path), c[0], completion_bounds=True)
