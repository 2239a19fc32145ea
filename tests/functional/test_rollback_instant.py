"""Rolling back a failed write leaves a rollback instant, as Apache Hudi does: `<t>.rollback.requested` (Avro
HoodieRollbackPlan), `<t>.rollback.inflight`, then the completed rollback (`<t>.rollback` on version 6,
`<t>_<c>.rollback` under `.hoodie/timeline/` on 8/9) with HoodieRollbackMetadata; a rollback killed half-way
is finished, for the same instant, by the next one; archival moves completed rollbacks into the archive or the
LSM history; readers (ours, hudi-rs) ignore them for data."""

from __future__ import annotations

import glob
import io
import os

import fastavro
import pyarrow as pa
import pytest

from hudilite.api import Table
from hudilite.reader.merge import SliceDesc, merge_slice
from hudilite.reader.planner import plan_read
from hudilite.services.archival import archive
from hudilite.services.clean import run_clean
from hudilite.table import HoodieTable
from hudilite.timeline.lsm import history_dir, read_records
from hudilite.writer.transaction import Transaction

hudi = pytest.importorskip("hudi")
from tests.hudi_rs import read_hudi_rs  # noqa: E402

COLS = ("id", "p", "v")
CASES = [(v, tt) for v in ("6", "9") for tt in ("COPY_ON_WRITE", "MERGE_ON_READ")]


def _rows(ids, v=1):
    return pa.table({"id": pa.array(ids, pa.int64()), "p": pa.array([f"p{i % 2}" for i in ids]),
                     "v": pa.array([v] * len(ids), pa.int64())})


def _table(path, version, table_type, **options):
    return Table.create(path, record_key="id", precombine_field="v", partition_by=("p",), table_type=table_type,
                        options={"hoodie.write.table.version": version, **options})


def ours(path, **kw) -> list[tuple]:
    plan = plan_read(path, **kw)
    spec = plan.merge_spec()
    parts = [merge_slice(SliceDesc.of(s), spec) for s in plan.slices]
    return sorted(tuple(r[c] for c in COLS) for t in parts for r in t.select(list(COLS)).to_pylist())


def rs(path, **kw) -> list[tuple]:
    t = read_hudi_rs(path, **kw)
    return [] if t is None else sorted(tuple(r[c] for c in COLS) for r in t.select(list(COLS)).to_pylist())


def _avro(path) -> dict:
    with open(path, "rb") as f:
        return next(iter(fastavro.reader(f)))


def _failed_write(t, ids, v):
    """A write that wrote its files and never completed, its writer dead (heartbeat stopped)."""
    pending = t.write(_rows(ids, v), commit=False)
    pending.heartbeat.stop()
    return pending.instant_time


def _rollback_files(path, version) -> dict[str, str]:
    """state -> file name of the table's one rollback instant."""
    tdir = os.path.join(path, ".hoodie", "timeline" if version == "9" else "")
    names = sorted(os.path.basename(p) for p in glob.glob(os.path.join(tdir, "*rollback*")))
    return {("requested" if n.endswith(".requested") else "inflight" if n.endswith(".inflight") else "completed"): n
            for n in names}


@pytest.mark.parametrize("version,table_type", CASES)
def test_rollback_writes_hudis_rollback_instant(tmp_path, version, table_type):
    path = str(tmp_path / "t")
    t = _table(path, version, table_type)
    first = t.write(_rows(range(6)))
    t.write(_rows([1, 2], 2))  # merge-on-read: log files the failed write appends to (version 6)
    before = ours(path)
    failed = _failed_write(t, [1, 3, 9], 3)
    action = "deltacommit" if table_type == "MERGE_ON_READ" else "commit"
    assert t.services.rollback(force=True) == [failed]

    tl = HoodieTable.open(path).timeline
    rb = tl.instants[-1]
    assert (rb.action, rb.is_completed) == ("rollback", True) and rb.timestamp > failed
    assert tl.get(failed) is None and not tl.pending()
    names = _rollback_files(path, version)
    if version == "9":
        assert rb.completion and rb.completion > rb.timestamp
        assert names == {"requested": f"{rb.timestamp}.rollback.requested",
                         "inflight": f"{rb.timestamp}.rollback.inflight",
                         "completed": f"{rb.timestamp}_{rb.completion}.rollback"}
    else:
        assert names == {"requested": f"{rb.timestamp}.rollback.requested",
                         "inflight": f"{rb.timestamp}.rollback.inflight", "completed": f"{rb.timestamp}.rollback"}
    meta = os.path.dirname(tl.instant_path(rb))
    plan = _avro(os.path.join(meta, names["requested"]))
    assert plan["instantToRollback"] == {"commitTime": failed, "action": action} and plan["version"] == 1
    planned = {p for r in plan["RollbackRequests"] for p in r["filesToBeDeleted"]}
    commanded = {p for r in plan["RollbackRequests"] for p in (r["logBlocksToBeDeleted"] or {})}
    assert planned | commanded and all(r["fileId"] for r in plan["RollbackRequests"])
    md = _avro(tl.instant_path(rb))
    assert md["startRollbackTime"] == rb.timestamp and md["commitsRollback"] == [failed]
    assert md["instantsRollback"] == [{"commitTime": failed, "action": action}]
    deleted = {p for m in md["partitionMetadata"].values() for p in m["successDeleteFiles"]}
    assert deleted == planned and md["totalFilesDeleted"] == len(deleted) > 0
    assert not any(os.path.exists(p) for p in deleted)
    assert not any(m["failedDeleteFiles"] for m in md["partitionMetadata"].values())
    assert {p for m in md["partitionMetadata"].values() for p in (m["rollbackLogFiles"] or {})} == commanded
    if version == "9":
        assert not commanded  # 1.x log files are named by the write: deleted whole

    # readers ignore the rollback for data: ours and hudi-rs read what was there before
    assert ours(path) == before == rs(path)
    assert ours(path, as_of=first) == rs(path, as_of=first)
    # later writes go on; change reads across the rollback see only them
    pos, table_id = t.position()
    nxt = t.write(_rows([3, 11], 4))
    assert nxt > rb.timestamp and ours(path) == rs(path)
    assert t.position()[1] == table_id
    assert ours(path, begin=pos, end=t.position()[0], completion_bounds=True) == [(3, "p1", 4), (11, "p1", 4)]
    b, e = first, nxt
    if version == "9":  # version 9 orders incremental ranges by completion time (hudi-rs too)
        tl = HoodieTable.open(path).timeline
        b, e = tl.completion_time(tl.get(first)), tl.completion_time(tl.get(nxt))
    assert rs(path, begin=b, end=e) == ours(path, begin=b, end=e) != []


@pytest.mark.parametrize("version", ["6", "9"])
@pytest.mark.parametrize("kill", ["before_execution", "before_completion"])
def test_a_rollback_killed_half_way_is_finished_by_the_next(tmp_path, monkeypatch, version, kill):
    path = str(tmp_path / "t")
    t = _table(path, version, "MERGE_ON_READ")
    t.write(_rows(range(6)))
    t.write(_rows([1, 2], 2))
    before = ours(path)
    failed = _failed_write(t, [1, 3, 9], 3)

    def die(*a, **k):
        raise KeyboardInterrupt("rollback killed")

    if kill == "before_execution":
        monkeypatch.setattr("hudilite.writer.transaction.execute_rollback", die)
    else:
        monkeypatch.setattr(Transaction, "fenced", die)
    with pytest.raises(KeyboardInterrupt):
        t.services.rollback(force=True)
    monkeypatch.undo()
    tl = HoodieTable.open(path).timeline
    (rb,) = tl.pending(("rollback",))
    assert (tl.get(failed) is None) == (kill == "before_completion")
    # the next rollback (even a lazy one) re-executes the pending plan for the same instant, no second one
    assert t.services.rollback() == [failed]
    tl = HoodieTable.open(path).timeline
    assert [(i.timestamp, i.is_completed) for i in tl.instants if i.action == "rollback"] == [(rb.timestamp, True)]
    assert tl.get(failed) is None and not tl.pending()
    md = _avro(tl.instant_path(tl.get(rb.timestamp)))
    assert md["commitsRollback"] == [failed] and md["totalFilesDeleted"] > 0
    assert ours(path) == before == rs(path)
    t.write(_rows([3], 4))
    assert ours(path) == rs(path) and (3, "p1", 4) in ours(path)


@pytest.mark.parametrize("version", ["6", "9"])
def test_archival_archives_completed_rollbacks_and_clean_keeps_working(tmp_path, version):
    path = str(tmp_path / "t")
    opts = {"hoodie.keep.min.commits": "2", "hoodie.keep.max.commits": "3", "hoodie.cleaner.commits.retained": "1"}
    t = _table(path, version, "COPY_ON_WRITE", **opts)
    t.write(_rows(range(4)))
    failed = _failed_write(t, [1], 2)
    t.services.rollback(force=True)
    rb = HoodieTable.open(path).timeline.instants[-1]
    assert rb.action == "rollback"
    for v in range(3, 7):
        t.write(_rows([0, 1], v))
    assert run_clean(path, opts)
    assert rb.timestamp in archive(path, opts, force=True)
    tl = HoodieTable.open(path).timeline
    assert tl.get(rb.timestamp) is None and tl.get(failed) is None
    (arch,) = [i for i in tl.archived.instants if i.timestamp == rb.timestamp and i.is_completed]
    assert arch.action == "rollback"
    if version == "9":
        (rec,) = [r for r in read_records(history_dir(tl.meta_dir)) if r.instant_time == rb.timestamp]
        assert rec.action == "rollback" and rec.completion_time == rb.completion
        # the completed rollback's Avro metadata, as Hudi keeps it in the history
        assert next(iter(fastavro.reader(io.BytesIO(rec.metadata))))["commitsRollback"] == [failed]
    else:
        assert tl.archived.completed_metadata(rb.timestamp)["commitsRollback"] == [failed]
    assert ours(path) == rs(path) == sorted([(0, "p0", 6), (1, "p1", 6), (2, "p0", 1), (3, "p1", 1)])
    t.write(_rows([5], 7))
    assert run_clean(path, opts) is not None and ours(path) == rs(path)
