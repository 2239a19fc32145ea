"""Concurrent writers with default options, lazy (heartbeat-based) rollback of dead writers, the lock lease as a
fence, and sessions whose Python workers cannot run hudilite.

The multi-writer tests run real processes writing through `hudilite.write` with Arrow data (the driver-local
writer: no Spark job, so several processes fit on a small machine)."""

from __future__ import annotations

import glob
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import time

import pyarrow as pa
import pytest

import hudilite
from hudilite.errors import WorkerEnvironmentError
from hudilite.lock import FileLock, LockLostError
from hudilite.spark.session import check_workers
from hudilite.table import HoodieTable
from hudilite.timeline.heartbeat import heartbeat_path, read_heartbeat
from hudilite.writer import transaction as tx
from hudilite.writer.transaction import Transaction
from tests.hudi_rs import read_hudi_rs

SPAWN = mp.get_context("spawn")
WRITE = {"record_key": "id", "precombine_field": "ver", "partition_by": ("part",)}


def rows(part: str, first: int, n: int, ver: int = 1) -> pa.Table:
    ids = list(range(first, first + n))
    return pa.table({"id": pa.array(ids, pa.int64()), "part": [part] * n, "val": pa.array(ids, pa.int64()),
                     "ver": pa.array([ver] * n, pa.int64())})


def snapshot_ids(path: str) -> list[int]:
    t = read_hudi_rs(path)
    return sorted(t.column("id").to_pylist()) if t is not None else []


# ------------------------------------------------------------------------------------------------
# issue 19.3: 4 processes x 4 commits into disjoint partitions, default options
def _insert_worker(path: str, part: str, first: int, commits: int, barrier, out: str) -> None:
    barrier.wait()
    done, errors = [], []
    for i in range(commits):
        try:
            done.append(str(hudilite.write(rows(part, first + 100 * i, 20), path, operation="insert", **WRITE)))
        except Exception as e:  # noqa: BLE001 - counted by the parent
            errors.append(f"{type(e).__name__}: {e}")
    with open(out, "w") as f:
        f.write("\n".join([f"ok {t}" for t in done] + [f"err {e}" for e in errors]))


def test_four_processes_with_default_options_all_commit(tmp_path):
    path = str(tmp_path / "t")
    hudilite.write(rows("seed", 0, 5), path, operation="insert", **WRITE)
    procs, commits = 4, 4
    barrier = SPAWN.Barrier(procs)
    outs = [str(tmp_path / f"w{w}.txt") for w in range(procs)]
    ps = [SPAWN.Process(target=_insert_worker, args=(path, f"p{w}", 10_000 * (w + 1), commits, barrier, outs[w]))
          for w in range(procs)]
    for p in ps:
        p.start()
    for p in ps:
        p.join(600)
        assert p.exitcode == 0
    lines = [ln for o in outs for ln in open(o).read().splitlines()]
    errors = [ln for ln in lines if ln.startswith("err")]
    print(f"\n{procs} processes x {commits} commits, default options: "
          f"{sum(ln.startswith('ok') for ln in lines)} committed, {len(errors)} failed")
    assert not errors, errors[:3]
    tl = HoodieTable.open(path).reload()
    assert len(tl.completed()) == 1 + procs * commits and not tl.pending()
    expected = list(range(5)) + [10_000 * (w + 1) + 100 * i + k for w in range(procs) for i in range(commits)
                                 for k in range(20)]
    assert snapshot_ids(path) == sorted(expected)


# ------------------------------------------------------------------------------------------------
# a writer SIGKILLed mid-write is rolled back once its heartbeat is older than its own tolerance, not before
HB_INTERVAL_MS, HB_MISSES = 1000, 2
SHORT_HB = {"hoodie.client.heartbeat.interval_in_ms": str(HB_INTERVAL_MS),
            "hoodie.client.heartbeat.tolerable.misses": str(HB_MISSES)}


def _writer_stalled_at_commit(path: str, ready: str, options: dict) -> None:
    def stall(self, inst, metadata, *a, **k):  # data files written, commit not: killed here
        with open(ready, "w") as f:
            f.write(inst.timestamp)
        time.sleep(600)

    tx.Transaction.complete = stall
    hudilite.write(rows("dead", 500, 30), path, operation="insert", options=options, **WRITE)


def _wait_for(path: str, proc, timeout: float = 300) -> str:
    deadline = time.time() + timeout
    while not os.path.exists(path):
        assert time.time() < deadline and proc.is_alive(), "the child writer did not reach its stall point"
        time.sleep(0.02)
    time.sleep(0.05)
    return open(path).read()


def test_killed_writer_is_rolled_back_after_its_heartbeat_bound_and_not_before(tmp_path):
    path, ready = str(tmp_path / "t"), str(tmp_path / "ready")
    hudilite.write(rows("a", 0, 10), path, operation="insert", **WRITE)
    child = SPAWN.Process(target=_writer_stalled_at_commit, args=(path, ready, SHORT_HB), daemon=True)
    child.start()
    try:
        t = _wait_for(ready, child)
        data = glob.glob(os.path.join(path, "part=dead", f"*_{t}.parquet"))
        assert data and os.path.isdir(os.path.join(path, ".hoodie", ".temp", t))
        assert read_heartbeat(path, t)["tolerance_ms"] == HB_INTERVAL_MS * HB_MISSES
        # alive (beating), the writer is left alone by writers with default options, however long it takes
        time.sleep(HB_INTERVAL_MS * HB_MISSES / 1000 + 0.5)
        c = hudilite.write(rows("b", 100, 10), path, operation="insert", **WRITE)
        assert Transaction(HoodieTable.open(path), {}).rollback_failed_writes() == []
        assert HoodieTable.open(path).reload().get(t) is not None
        os.kill(child.pid, signal.SIGKILL)
        killed = time.time()
        child.join(10)
        # dead: rolled back by the first check after (last beat + interval x misses) - the last beat was at most
        # one interval before the kill - by a checker whose own tolerance (default 120 s) is far longer
        rolled_at = None
        while rolled_at is None:
            assert time.time() - killed < 30, "the dead writer's instant was never rolled back"
            if Transaction(HoodieTable.open(path), {}).rollback_failed_writes() == [t]:
                rolled_at = time.time() - killed
            else:
                time.sleep(0.05)
        print(f"\nheartbeat {HB_INTERVAL_MS} ms x {HB_MISSES}: killed at +0, rolled back at +{rolled_at:.2f} s")
        assert (HB_MISSES - 1) * HB_INTERVAL_MS / 1000 - 0.05 <= rolled_at <= HB_MISSES * HB_INTERVAL_MS / 1000 + 1.5
    finally:
        if child.is_alive():
            child.kill()
    assert HoodieTable.open(path).reload().get(t) is None
    assert not any(os.path.exists(p) for p in data)
    assert not os.path.exists(os.path.join(path, ".hoodie", ".temp", t))
    assert not os.path.exists(heartbeat_path(path, t)) and not os.path.isdir(os.path.join(path, "part=dead"))
    assert snapshot_ids(path) == list(range(10)) + list(range(100, 110))
    assert str(c) in {i.timestamp for i in HoodieTable.open(path).reload().completed()}


# ------------------------------------------------------------------------------------------------
# issue 26.5: a writer is judged by its own heartbeat tolerance, not the checker's
def test_lazy_rollback_judges_a_writer_by_its_own_tolerance(tmp_path):
    path = str(tmp_path / "t")
    hudilite.write(rows("a", 0, 10), path, operation="insert", **WRITE)
    table = HoodieTable.open(path)
    slow = Transaction(table, {"hoodie.client.heartbeat.interval_in_ms": "1000",
                               "hoodie.client.heartbeat.tolerable.misses": "5"})
    inst = slow.start()  # its first beat; a writer beating every second is up to a second behind
    slow.mark_inflight(inst, {})
    time.sleep(0.6)
    # a writer with a much shorter tolerance (200 ms) writes: it must not take the slow writer for dead
    hudilite.write(rows("b", 100, 5), path, operation="insert", options={
        "hoodie.client.heartbeat.interval_in_ms": "100", "hoodie.client.heartbeat.tolerable.misses": "2"}, **WRITE)
    assert table.reload().get(inst.timestamp) is not None
    slow.complete(inst, {"partitionToWriteStats": {}, "operationType": "INSERT", "extraMetadata": {}})
    # a heartbeat that records no settings (an older writer's) is judged by the checker's tolerance
    old = slow.start()
    with open(heartbeat_path(path, old.timestamp), "w") as f:
        f.write(str(int(time.time() * 1000)))
    time.sleep(0.3)
    assert Transaction(table, {"hoodie.client.heartbeat.interval_in_ms": "100"}).rollback_failed_writes() == [
        old.timestamp]


def test_a_restarted_stream_rolls_back_its_dead_runs_instants_at_once(tmp_path):
    """Spark runs one instance of a streaming query at a time: an unprepared instant tagged with the query's id
    whose heartbeat is still fresh belongs to its dead previous run (other writers still wait for expiry)."""
    path = str(tmp_path / "t")
    hudilite.write(rows("a", 0, 10), path, operation="insert", **WRITE)
    table = HoodieTable.open(path)
    dead = Transaction(table, {tx.WRITER_TAG_KEY: "stream:q1"}).start()
    assert Transaction(table, {}).rollback_failed_writes() == []
    assert Transaction(table, {tx.WRITER_TAG_KEY: "stream:q2"}).rollback_failed_writes() == []
    assert Transaction(table, {tx.WRITER_TAG_KEY: "stream:q1"}).rollback_failed_writes() == [dead.timestamp]


def test_heartbeat_options_are_validated(tmp_path):
    for bad in ({"hoodie.client.heartbeat.interval_in_ms": "0"}, {"hoodie.client.heartbeat.tolerable.misses": "x"}):
        with pytest.raises(hudilite.InvalidWriteError, match="heartbeat"):
            hudilite.write(rows("a", 0, 1), str(tmp_path / "t"), options=bad, **WRITE)
    assert not os.path.exists(tmp_path / "t")


# ------------------------------------------------------------------------------------------------
# issue 26.5: the lock lease fences the acts done under the lock
LEASE_MS = 1000  # long enough that a loaded machine never delays a renewal past it


def _stall_past_lease(lock: FileLock) -> None:
    """What a stalled process looks like to everybody else: its renewer stops, and the lease runs out."""
    lock._stop.set()
    lock._renewer.join()
    time.sleep(LEASE_MS / 1000 * 1.3)


def _lease_options():
    return {"hoodie.write.lock.filesystem.expire.ms": str(LEASE_MS)}


def test_file_lock_verify_renews_in_time_and_fails_once_the_lease_ran_out(tmp_path):
    path = str(tmp_path / "table.lock")
    a = FileLock(path, lease_ms=LEASE_MS)
    a.acquire()
    a._stop.set()
    a._renewer.join()
    time.sleep(LEASE_MS / 1000 * 0.5)
    before = time.time() * 1000
    until = a.verify()  # in time: renewed for a full lease from the call (bounds independent of scheduling delays)
    assert until >= before + LEASE_MS - 1 and FileLock.read_state(path)["expires_ms"] == until
    time.sleep(LEASE_MS / 1000 * 1.2)
    # nobody broke it yet, but a breaker may be capturing it right now: the holder must not act on it
    with pytest.raises(LockLostError, match="ran out"):
        a.verify()
    a.release()
    assert not os.path.exists(path)


def test_stalled_holder_cannot_complete_after_its_lease_ran_out(tmp_path):
    path = str(tmp_path / "t")
    hudilite.write(rows("a", 0, 10), path, operation="insert", **WRITE)
    table = HoodieTable.open(path)
    txn = Transaction(table, _lease_options())
    inst = txn.start()
    txn.mark_inflight(inst, {})
    with pytest.raises(LockLostError):  # stalls after the conflict check, before the commit file
        txn.complete(inst, {"partitionToWriteStats": {}, "operationType": "INSERT", "extraMetadata": {}},
                     validate=lambda _t: _stall_past_lease(txn.lock))
    assert not table.reload().get(inst.timestamp).is_completed


def test_start_and_rollback_reverify_the_lease(tmp_path, monkeypatch):
    path = str(tmp_path / "t")
    hudilite.write(rows("a", 0, 10), path, operation="insert", **WRITE)
    table = HoodieTable.open(path)
    before = [i.timestamp for i in table.reload().instants]
    # start: a stall while holding the lock for the clock-skew wait -> no instant, no heartbeat
    txn = Transaction(table, _lease_options())
    monkeypatch.setattr(tx, "wait_for_skew", lambda *a: _stall_past_lease(txn.lock))
    with pytest.raises(LockLostError):
        txn.start()
    monkeypatch.undo()
    assert [i.timestamp for i in table.reload().instants] == before
    assert not os.listdir(os.path.dirname(heartbeat_path(path, "x")))
    # rollback: a stall between judging a writer dead and deleting its files -> nothing deleted
    dead = Transaction(table, {}).start()
    os.unlink(heartbeat_path(path, dead.timestamp))
    checker = Transaction(table, _lease_options())

    def judged_then_stalled(*a):
        _stall_past_lease(checker.lock)
        return True

    monkeypatch.setattr(tx, "heartbeat_expired", judged_then_stalled)
    with pytest.raises(LockLostError):
        checker.rollback_failed_writes()
    monkeypatch.undo()
    assert table.reload().get(dead.timestamp) is not None


# issue 26.5: a stall *after* the last verify - inside the put of the commit file - is fenced as well: the
# commit file is published from the holder's lease directory, which the next holder revokes before it acts
COMMIT_MD = {"partitionToWriteStats": {}, "operationType": "INSERT", "extraMetadata": {}}


def _taken_over_and_rolled_back(table: HoodieTable, stalled: Transaction) -> list[str]:
    """The stalled holder's lease runs out; another writer takes the lock and rolls back every pending write."""
    _stall_past_lease(stalled.lock)
    taker = Transaction(table, {**_lease_options(), tx.CONCURRENCY_MODE_KEY: tx.SINGLE_WRITER})
    return taker.rollback_failed_writes()


def _assert_rolled_back_and_nothing_published(path: str, table: HoodieTable, t: str, before: list[int]) -> None:
    tl = table.reload()
    assert tl.get(t) is None
    assert not [n for n in os.listdir(tl.meta_dir) if n.lstrip(".").startswith(t)]  # no commit, no temp file
    assert snapshot_ids(path) == before
    assert not os.path.exists(os.path.join(path, ".hoodie", ".locks", "leases"))  # revoked, released


def _stall_after_verify(monkeypatch, table, txn, taken: list) -> None:
    """The holder's next lease renewal succeeds, then it stalls while another writer takes the expired lock and
    rolls its instant back (recorded in `taken`)."""
    real_verify = txn.lock.verify

    def verify_then_stall():
        until = real_verify()
        taken.extend(_taken_over_and_rolled_back(table, txn))
        return until

    monkeypatch.setattr(txn.lock, "verify", verify_then_stall)


@pytest.mark.parametrize("stall_at", ["after_verify", "inside_put"])
def test_holder_stalled_after_its_last_verify_cannot_commit_over_the_next_holders_rollback(tmp_path, monkeypatch,
                                                                                            stall_at):
    path = str(tmp_path / "t")
    hudilite.write(rows("a", 0, 10), path, operation="insert", **WRITE)
    before = snapshot_ids(path)
    table = HoodieTable.open(path)
    txn = Transaction(table, _lease_options())
    inst = txn.start()
    txn.mark_inflight(inst, {})
    taken: list[str] = []
    if stall_at == "after_verify":  # between the lease renewal and the put
        _stall_after_verify(monkeypatch, table, txn, taken)
    else:  # inside the put: its temp file is written, the link that publishes it not yet done
        real_link = os.link

        def stall_then_link(src, dst, *a, **k):
            if os.path.basename(dst).startswith(inst.timestamp) and not taken:
                taken.extend(_taken_over_and_rolled_back(table, txn))
            return real_link(src, dst, *a, **k)

        monkeypatch.setattr(os, "link", stall_then_link)
    with pytest.raises(LockLostError, match="was not committed"):
        txn.complete(inst, dict(COMMIT_MD))
    monkeypatch.undo()
    assert taken == [inst.timestamp]
    _assert_rolled_back_and_nothing_published(path, table, inst.timestamp, before)
    hudilite.write(rows("b", 100, 5), path, operation="insert", **WRITE)  # the table goes on
    assert snapshot_ids(path) == before + list(range(100, 105))


def test_holder_stalled_in_prepare_cannot_resurrect_a_rolled_back_instant_as_prepared(tmp_path, monkeypatch):
    path = str(tmp_path / "t")
    hudilite.write(rows("a", 0, 10), path, operation="insert", **WRITE)
    before = snapshot_ids(path)
    table = HoodieTable.open(path)
    txn = Transaction(table, _lease_options())
    inst = txn.start()
    txn.mark_inflight(inst, {})
    taken: list[str] = []
    _stall_after_verify(monkeypatch, table, txn, taken)
    with pytest.raises(LockLostError, match="was not committed"):
        txn.prepare(inst, dict(COMMIT_MD))
    monkeypatch.undo()
    assert taken == [inst.timestamp]
    _assert_rolled_back_and_nothing_published(path, table, inst.timestamp, before)


def test_taking_the_lock_revokes_the_previous_holders_lease_directory(tmp_path):
    lock_path, root = str(tmp_path / "table.lock"), str(tmp_path / "leases")
    a = FileLock(lock_path, lease_ms=LEASE_MS, fence_root=root)
    b = FileLock(lock_path, lease_ms=LEASE_MS, fence_root=root)
    a.acquire()
    stage_a = a.fence_dir()
    assert os.listdir(root) == [os.path.basename(stage_a)]
    staged = os.path.join(stage_a, "staged")
    with open(staged, "wb") as f:
        f.write(b"x")
    _stall_past_lease(a)
    b.acquire()  # breaks the expired lock, then revokes a's lease directory before returning
    assert os.listdir(root) == [os.path.basename(b.fence_dir())]
    with pytest.raises(FileNotFoundError):
        os.link(staged, str(tmp_path / "published"))
    with pytest.raises(LockLostError):
        a.verify()
    a.release()  # leaves b's lock and lease directory alone
    assert os.listdir(root) == [os.path.basename(b.fence_dir())] and FileLock.read_state(lock_path)
    b.release()
    assert not os.path.exists(root) and not os.path.exists(lock_path)


# ------------------------------------------------------------------------------------------------
# issue 19.4: a session whose Python workers cannot import hudilite fails readably, before anything is written
def test_workers_without_hudilite_fail_readably_and_nothing_is_written(spark, tmp_path):
    bare = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True)
    bare_python = str(bare / "bin" / "python")
    session = spark.newSession()
    session.conf.set("spark.sql.execution.pyspark.python", bare_python)
    df = session.createDataFrame([(1, "a", 1, 1)], "id long, part string, val long, ver long")
    path = str(tmp_path / "t")
    with pytest.raises(WorkerEnvironmentError) as ei:
        hudilite.write(df, path, **WRITE)
    msg = str(ei.value)
    assert bare_python in msg and "No module named" in msg and "PYSPARK_PYTHON" in msg and sys.executable in msg
    assert "at org.apache" not in msg and not os.path.exists(path)
    hudilite.write(rows("a", 0, 3), path, operation="insert", **WRITE)  # (driver-local: no workers involved)
    with pytest.raises(WorkerEnvironmentError, match="bare"):
        hudilite.read(session, path)
    # a missing interpreter too; the healthy session is checked once and keeps working
    session.conf.set("spark.sql.execution.pyspark.python", str(tmp_path / "no-such-python"))
    with pytest.raises(WorkerEnvironmentError, match="no-such-python.*Cannot run program"):
        hudilite.write(df, path, **WRITE)
    assert sorted(r.id for r in hudilite.read(spark, path).collect()) == [0, 1, 2]


def test_worker_check_runs_once_per_context_and_interpreter(spark, monkeypatch):
    """PySpark wraps every streaming micro-batch in a new session object: the check must not rerun per batch."""
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    check_workers(spark)
    wrapper = SparkSession(spark.sparkContext, spark._jsparkSession)  # what foreachBatch hands the sink

    def no_job(*a, **k):
        raise AssertionError("the worker check ran a job again")

    monkeypatch.setattr(F, "udf", no_job)
    check_workers(wrapper)
    check_workers(spark.newSession())
