"""Concurrency: optimistic concurrency control, the lock and its lease, collision-free instants under load,
and a writer killed mid-commit while another keeps committing.

Most tests use the storage core directly (Transaction + the Arrow merge of one file group, no Spark), in
several processes; the Spark tests run concurrent `hudilite.write` calls as threads of the shared session.
"""

from __future__ import annotations

import glob
import json
import multiprocessing as mp
import os
import signal
import threading
import time
import uuid
from collections import Counter

import pyarrow as pa
import pytest

import hudilite
from hudilite.config import WRITE_TABLE_VERSION, TableConfig
from hudilite.errors import CommitConflictError, InvalidWriteError, LockTimeoutError
from hudilite.lock import FileLock, InProcessLock, LockLostError, LockProvider, lock_for
from hudilite.markers import delete_markers
from hudilite.schema import arrow_to_avro, avro_to_json
from hudilite.table import HoodieTable
from hudilite.timeline import COMMIT, REPLACE_COMMIT
from hudilite.timeline.instant_time import format_instant, now_ms
from hudilite.timeline.timeline import parse_commit_metadata
from hudilite.writer.conflict import Footprint, check_conflicts, find_conflicts, read_basis
from hudilite.columns import DELETE_COL, KEY_COL, PART_COL, SEQ_COL
from hudilite.writer.context import WriteContext
from hudilite.writer.handle import merge_file_group
from hudilite.writer.options import resolve
from hudilite.writer.transaction import Transaction

DATA_SCHEMA = pa.schema([("id", pa.int64()), ("part", pa.string()), ("val", pa.int64()), ("ver", pa.int64())])
COLS = ["id", "part", "val", "ver"]
# fake_commit names files that are never written: nothing to make durable before completing those commits
OCC = {"hoodie.write.concurrency.mode": "optimistic_concurrency_control", "hoodie.write.fsync": "false"}
SINGLE = {"hoodie.write.concurrency.mode": "single_writer", "hoodie.write.fsync": "false"}
SPAWN = mp.get_context("spawn")


# ------------------------------------------------------------------------------------------------
# a Spark-free writer: Transaction + the executor-side Arrow merge of one file group per partition
def make_table(path: str, version: int = WRITE_TABLE_VERSION) -> HoodieTable:
    cfg = TableConfig.new(name="t", table_type="COPY_ON_WRITE", record_key_fields=["id"], precombine_field="ver",
                          partition_fields=["part"], hive_style=True,
                          create_schema=avro_to_json(arrow_to_avro(DATA_SCHEMA, "t")), version=version)
    return HoodieTable.create(path, cfg)


def _incoming(rows: list[tuple]) -> pa.Table:
    cols = list(zip(*rows))
    t = pa.table({c: pa.array(v, DATA_SCHEMA.field(c).type) for c, v in zip(COLS, cols)})
    return (t.append_column(KEY_COL, pa.array([str(r[0]) for r in rows]))
            .append_column(PART_COL, pa.array([f"part={r[1]}" for r in rows]))
            .append_column(DELETE_COL, pa.array([False] * len(rows)))
            .append_column(SEQ_COL, pa.array(range(len(rows)), pa.int64())))


def core_upsert(path: str, part: str, rows: list[tuple], options: dict, extra: dict | None = None) -> str:
    """Upsert `rows` (all in partition `part`) into that partition's file group (a new one if it has none),
    as one commit through the instant protocol. Returns the instant; a failure rolls it back."""
    from hudilite.services.rollback import rollback_instant
    from hudilite.timeline.heartbeat import Heartbeat

    table = HoodieTable.open(path)
    txn = Transaction(table, options)
    txn.rollback_failed_writes(heartbeat_tolerance_ms=int(options.get("hoodie.client.heartbeat.interval_in_ms",
                                                                      60_000)) * 2)
    table.reload()
    basis = read_basis(table)
    ppath = f"part={part}"
    slices = table.view().latest_slices([ppath]) if os.path.isdir(table.partition_dir(ppath)) else []
    sl = slices[0] if slices else None
    inst = txn.start(COMMIT, basis=basis)
    hb = Heartbeat(table.base_path, inst.timestamp, int(options.get("hoodie.client.heartbeat.interval_in_ms", 60_000)))
    hb.start()
    try:
        ctx = WriteContext(base_path=table.base_path, instant=inst.timestamp, table_name="t",
                           data_schema=DATA_SCHEMA, precombine_field="ver", event_time=True)
        ctx.markers().init()
        txn.mark_inflight(inst, {"partitionToWriteStats": {}, "operationType": "UPSERT", "extraMetadata": {}})
        fid = sl.file_id if sl else f"{uuid.uuid4()}-0"
        stat = merge_file_group(ctx, ppath, fid, sl.base_file.path if sl else None, sl.base_instant if sl else None,
                                _incoming(rows))
        table.ensure_partition_metadata(ppath, inst.timestamp)
        md = {"partitionToWriteStats": {ppath: [stat]}, "compacted": False, "operationType": "UPSERT",
              "extraMetadata": {"schema": avro_to_json(arrow_to_avro(DATA_SCHEMA, "t")), **(extra or {})}}
        txn.complete(inst, md)
    except BaseException:
        hb.stop()
        rollback_instant(table, table.reload().get(inst.timestamp) or inst, options)
        raise
    hb.stop()
    delete_markers(table.base_path, inst.timestamp)
    return inst.timestamp


def batch_rows(part: str, i: int) -> list[tuple]:
    """Commit i of the writer of `part`: updates keys 0..4 of the partition and inserts one new key."""
    base = {"a": 0, "b": 100_000, "c": 200_000}.get(part, 300_000)
    return [(base + k, part, i * 10 + k, i) for k in range(5)] + [(base + 1000 + i, part, -i, i)]


def replay(state: dict, rows) -> dict:
    for r in rows:
        cur = state.get(r[0])
        if cur is None or r[3] >= cur[3]:
            state[r[0]] = tuple(r)
    return state


def fake_commit(part: str, fids, replaced=()) -> dict:
    stats = {part: [{"fileId": f, "partitionPath": part, "path": f"{part}/{f}_0-0-0_x.parquet"} for f in fids]}
    md = {"partitionToWriteStats": stats, "extraMetadata": {}, "operationType": "UPSERT"}
    if replaced:
        md["partitionToReplaceFileIds"] = {part: list(replaced)}
        md["operationType"] = "INSERT_OVERWRITE"
    return md


# ------------------------------------------------------------------------------------------------
# conflict detection (core API, deterministic)
def test_overlapping_writers_conflict_disjoint_ones_commit(tmp_path):
    t = make_table(str(tmp_path / "t"))
    a, b = Transaction(t, OCC), Transaction(t, OCC)
    ia, ib = a.start(), b.start()
    b.complete(ib, fake_commit("p", ["g1", "g2"]))
    with pytest.raises(CommitConflictError) as ei:
        a.complete(ia, fake_commit("p", ["g2", "g3"]))
    msg = str(ei.value)
    assert ib.timestamp in msg and "p/g2" in msg and "retryable" in msg and "g3" not in msg
    assert ei.value.retryable and ei.value.conflicting_instants == [ib.timestamp]
    assert ei.value.file_groups == [("p", "g2")]
    # the same writer without overlap commits: new file groups never conflict
    a.complete(ia, fake_commit("p", ["g3", f"{uuid.uuid4()}-0"]))
    assert {i.timestamp for i in t.reload().completed()} == {ia.timestamp, ib.timestamp}


def test_commit_seen_in_basis_is_no_conflict_and_str_basis(tmp_path):
    t = make_table(str(tmp_path / "t"))
    w = Transaction(t, OCC)
    i0 = w.start()
    w.complete(i0, fake_commit("p", ["g1"]))
    # a writer whose plan read the table after i0 completed: updating g1 is fine
    basis = read_basis(t.reload())
    i1 = w.start(basis=basis)
    w.complete(i1, fake_commit("p", ["g1"]))
    # a writer whose plan was built before i1 (basis = {i0}) but that took its instant only now: conflict,
    # although i1 completed before this writer's instant was requested
    i2 = w.start(basis=basis)
    with pytest.raises(CommitConflictError, match=i1.timestamp):
        w.complete(i2, fake_commit("p", ["g1"]))
    # completion-time basis (no instant set kept): commits completed after the given time are unseen
    tl = t.reload()
    c1 = tl.completion_time(tl.get(i1.timestamp))
    assert find_conflicts(tl, "x", Footprint.of([("p", "g1")]), c1) == []
    c0 = tl.completion_time(tl.get(i0.timestamp))
    assert [c.instant for c in find_conflicts(tl, "x", Footprint.of([("p", "g1")]), c0)] == [i1.timestamp]
    assert [c.instant for c in find_conflicts(tl, "x", Footprint.of([("p", "g1")]), i0.timestamp)] == [
        i0.timestamp, i1.timestamp]


def test_replacecommit_conflicts_with_update_of_replaced_group(tmp_path):
    t = make_table(str(tmp_path / "t"))
    ow, up = Transaction(t, OCC), Transaction(t, OCC)
    io = ow.start(REPLACE_COMMIT)
    iu = up.start()
    ow.complete(io, fake_commit("p", [f"{uuid.uuid4()}-0"], replaced=["g1", "g2"]))
    with pytest.raises(CommitConflictError, match=rf"replacecommit {io.timestamp}.*p/g1"):
        up.complete(iu, fake_commit("p", ["g1"]))
    # and the other way round: the overwrite loses against an update of a group it replaces
    io2, iu2 = ow.start(REPLACE_COMMIT), up.start()
    up.complete(iu2, fake_commit("q", ["h1"]))
    with pytest.raises(CommitConflictError, match="q/h1"):
        ow.complete(io2, fake_commit("q", [f"{uuid.uuid4()}-0"], replaced=["h1"]))


def _write_plan(t: HoodieTable, name: str, body: dict, avro: bool) -> None:
    path = os.path.join(t.meta_path, name)
    if not avro:
        with open(path, "w") as f:
            json.dump(body, f)
        return
    import fastavro

    slice_rec = {"type": "record", "name": "Op", "fields": [
        {"name": "partitionPath", "type": "string"}, {"name": "fileId", "type": "string"}]}
    schema = {"type": "record", "name": "HoodieCompactionPlan", "fields": [
        {"name": "operations", "type": {"type": "array", "items": slice_rec}}]}
    with open(path, "wb") as f:
        fastavro.writer(f, fastavro.parse_schema(schema), [body])


@pytest.mark.parametrize("avro", [False, True], ids=["json", "avro"])
def test_pending_plans_guard_their_file_groups(tmp_path, avro):
    # version 6: the plans are hand-written as layout-1 files (JSON ones too) in .hoodie
    t = make_table(str(tmp_path / "t"), version=6)
    w = Transaction(t, OCC)
    plan_t = format_instant(now_ms() - 50_000)
    _write_plan(t, f"{plan_t}.compaction.requested",
                {"operations": [{"partitionPath": "p", "fileId": "g1"}]}, avro)
    i = w.start()
    with pytest.raises(CommitConflictError, match=rf"pending compaction plan {plan_t}.*p/g1"):
        w.complete(i, fake_commit("p", ["g1"]))
    w.complete(i, fake_commit("p", ["g2"]))  # outside the plan: fine
    # a clustering plan in a replacecommit.requested; an ordinary pending replacecommit guards nothing
    cl_t = format_instant(now_ms() - 40_000)
    with open(os.path.join(t.meta_path, f"{cl_t}.replacecommit.requested"), "w") as f:
        json.dump({"operationType": "CLUSTER", "clusteringPlan": {"inputGroups": [
            {"slices": [{"partitionPath": "p", "fileId": "g3", "dataFilePath": "x"}]}]}}, f)
    plain = Transaction(t, OCC).start(REPLACE_COMMIT)
    i2 = w.start()
    with pytest.raises(CommitConflictError, match=rf"pending clustering plan {cl_t}"):
        w.complete(i2, fake_commit("p", ["g3"]))
    w.complete(i2, fake_commit("p", ["g4"]))
    assert plain.timestamp not in {c.instant for c in find_conflicts(
        t.reload(), "x", Footprint.of([("p", "g3"), ("p", "g4")]), frozenset())}
    # failed-write rollback leaves plans alone, but removes the ordinary pending replacecommit
    assert Transaction(t, {}).rollback_failed_writes(lazy=False) == [plain.timestamp]
    assert os.path.exists(os.path.join(t.meta_path, f"{cl_t}.replacecommit.requested"))
    # a service completing its own plan excludes itself and checks writers that completed meanwhile
    with pytest.raises(CommitConflictError, match="p/g2"):
        check_conflicts(t, plan_t, Footprint.of([("p", "g1"), ("p", "g2")]), frozenset())
    check_conflicts(t, plan_t, Footprint.of([("p", "g1")]), frozenset())


def test_prepared_commit_is_guaranteed(tmp_path):
    t = make_table(str(tmp_path / "t"))
    s, other = Transaction(t, OCC), Transaction(t, OCC)
    ip = s.start()
    io = other.start()
    s.prepare(ip, fake_commit("p", ["g1"]))
    # other writers lose against the prepared commit's file groups ...
    with pytest.raises(CommitConflictError, match=rf"prepared commit {ip.timestamp}"):
        other.complete(io, fake_commit("p", ["g1"]))
    # ... failed-write rollback (eager, too) leaves it alone ...
    assert Transaction(t, {}).rollback_failed_writes(lazy=False) == [io.timestamp]
    assert t.reload().get(ip.timestamp) is not None
    # ... and it completes from its inflight metadata, idempotently, without the prepared marker
    c = Transaction(t, OCC).complete_prepared(ip)
    assert Transaction(t, OCC).complete_prepared(ip) == c
    md = t.reload().read_metadata(t.timeline.get(ip.timestamp))
    assert "hudilite.commit.prepared" not in md["extraMetadata"] and md["partitionToWriteStats"]["p"][0]["fileId"] == "g1"
    # prepare itself validates: a conflicting prepare fails and leaves the instant unprepared
    a, b = Transaction(t, OCC), Transaction(t, OCC)
    ia, ib = a.start(), b.start()
    a.complete(ia, fake_commit("p", ["g7"]))
    with pytest.raises(CommitConflictError):
        b.prepare(ib, fake_commit("p", ["g7"]))
    with pytest.raises(CommitConflictError, match="not a prepared commit"):
        b.complete_prepared(ib)


def test_single_writer_mode_is_safe_against_a_second_writer(tmp_path):
    """single_writer mode: the next writer rolls back every pending instant - a live one's too - under the lock;
    the live writer then fails at completion with a retryable conflict instead of committing deleted files."""
    t = make_table(str(tmp_path / "t"))
    a = Transaction(t, SINGLE)
    ia = a.start()
    a.mark_inflight(ia, {})
    assert Transaction(t, SINGLE).rollback_failed_writes() == [ia.timestamp]
    with pytest.raises(CommitConflictError, match="no longer on the timeline.*single_writer"):
        a.complete(ia, fake_commit("p", ["g1"]))
    assert not t.reload().completed()
    # OCC mode: a pending instant with a live heartbeat is not rolled back
    from hudilite.timeline.heartbeat import Heartbeat

    b = Transaction(t, OCC)
    ib = b.start()
    hb = Heartbeat(t.base_path, ib.timestamp, 100)
    hb.start()
    try:
        assert Transaction(t, OCC).rollback_failed_writes(heartbeat_tolerance_ms=5_000) == []
        b.complete(ib, fake_commit("p", ["g1"]))
    finally:
        hb.stop()


def test_concurrency_options_are_validated(tmp_path):
    for bad in ({"hoodie.write.concurrency.mode": "multi"}, {"hoodie.write.lock.provider": "zookeeper"},
                {"hoodie.write.lock.provider": "no.such.module.Lock"},
                {"hoodie.write.lock.wait_time_ms": "soon"}):
        with pytest.raises(InvalidWriteError):
            resolve(str(tmp_path / "x"), "id", None, (), "upsert", None, bad)
    assert not os.path.exists(tmp_path / "x")
    resolve(str(tmp_path / "x"), "id", None, (), "upsert", None,
            {"hoodie.write.lock.provider": "org.apache.hudi.client.transaction.lock.InProcessLockProvider",
             "hoodie.write.concurrency.mode": "OPTIMISTIC_CONCURRENCY_CONTROL"})


class _CountingLock(LockProvider):
    acquired = 0

    def __init__(self, base_path, options):
        self._inner = InProcessLock(base_path)

    def acquire(self):
        self._inner.acquire()
        type(self).acquired += 1

    def release(self):
        self._inner.release()


def test_lock_providers_are_pluggable(tmp_path):
    assert isinstance(lock_for(str(tmp_path), {}), FileLock)
    assert isinstance(lock_for(str(tmp_path), {"hoodie.write.lock.provider":
                                               "org.apache.hudi.client.transaction.lock.FileSystemBasedLockProvider"}),
                      FileLock)
    fl = lock_for(str(tmp_path), {"hoodie.write.lock.filesystem.expire": "2"})
    assert fl.lease_ms == 120_000  # Hudi's key is in minutes
    # in-process lock: exclusive between threads of this process
    l1 = lock_for(str(tmp_path), {"hoodie.write.lock.provider": "in_process"})
    l2 = lock_for(str(tmp_path), {"hoodie.write.lock.provider": "in_process", "hoodie.write.lock.wait_time_ms": "100"})
    with l1:
        with pytest.raises(LockTimeoutError):
            l2.acquire()
    with l2:
        pass
    # a custom provider by class path drives the whole protocol
    t = make_table(str(tmp_path / "t"))
    opts = {**OCC, "hoodie.write.lock.provider": f"{__name__}._CountingLock"}
    txn = Transaction(t, opts)
    before = _CountingLock.acquired
    txn.complete(txn.start(), fake_commit("p", ["g"]))
    assert _CountingLock.acquired - before == 2  # start, complete


# ------------------------------------------------------------------------------------------------
# the file lock's lease
def _hold_lock(path: str, lease_ms: int, ready: str) -> None:
    lk = FileLock(path, lease_ms=lease_ms)
    lk.acquire()
    with open(ready, "w") as f:
        f.write(str(os.getpid()))
    time.sleep(600)


def _start_holder(path: str, lease: int, ready: str):
    holder = SPAWN.Process(target=_hold_lock, args=(path, lease, ready), daemon=True)
    holder.start()
    deadline = time.time() + 120
    while not os.path.exists(ready):
        assert time.time() < deadline and holder.is_alive(), "the lock holder did not start"
        time.sleep(0.05)
    return holder


def test_file_lock_of_a_killed_holder_is_taken_at_once(tmp_path):
    path, ready = str(tmp_path / "table.lock"), str(tmp_path / "ready")
    lease = 1500
    holder = _start_holder(path, lease, ready)
    try:
        # alive, the holder renews its lease: nobody breaks it, even after several lease periods
        t0 = time.time()
        with pytest.raises(LockTimeoutError):
            FileLock(path, lease_ms=lease, timeout_ms=2 * lease).acquire()
        assert time.time() - t0 >= 2 * lease / 1000
        os.kill(holder.pid, signal.SIGKILL)
        holder.join(10)
        state = FileLock.read_state(path)
        assert state is not None and f":{holder.pid}:" in state["owner"] and f"/{holder.pid}/" in state["process"]
        # its process is gone (same machine and pid namespace): taken while the lease would still run
        taker = FileLock(path, lease_ms=60_000, timeout_ms=60_000)
        taker.acquire()
        assert now_ms() < state["expires_ms"], "waited for the lease"
        taker.release()
        assert not os.path.exists(path) and not glob.glob(path + ".*")
    finally:
        if holder.is_alive():
            holder.kill()


def test_file_lock_lease_expires_when_the_holder_cannot_be_checked(tmp_path):
    path, ready = str(tmp_path / "table.lock"), str(tmp_path / "ready")
    lease = 1500
    holder = _start_holder(path, lease, ready)
    try:
        os.kill(holder.pid, signal.SIGKILL)
        holder.join(10)
        killed_ms = now_ms()
        state = FileLock.read_state(path)
        expires = state["expires_ms"]
        assert expires > killed_ms  # renewed shortly before the kill: the lease still runs
        # the holder as another machine's (another boot id): whether it runs cannot be known here
        d = json.loads(state["raw"])
        d["process"] = "0" * 8 + d["process"][8:]
        with open(path, "w") as f:
            json.dump(d, f)
        # not before the lease expires ...
        early = FileLock(path, lease_ms=lease, timeout_ms=max(expires - now_ms() - 200, 50))
        with pytest.raises(LockTimeoutError):
            early.acquire()
        assert now_ms() < expires
        # ... and soon after it
        late = FileLock(path, lease_ms=lease, timeout_ms=30_000)
        late.acquire()
        got = now_ms()
        late.release()
        print(f"\nlease {lease} ms: killed at +0, lease ran until +{expires - killed_ms} ms, "
              f"acquired at +{got - killed_ms} ms")
        assert expires < got < expires + 3000
        assert not os.path.exists(path) and not glob.glob(path + ".*")
    finally:
        if holder.is_alive():
            holder.kill()


def test_file_lock_holder_notices_a_broken_lease(tmp_path):
    path = str(tmp_path / "table.lock")
    a = FileLock(path, lease_ms=200)
    a.acquire()
    a._stop.set()  # a stalled holder: its renewer stops
    a._renewer.join()
    b = FileLock(path, lease_ms=60_000, timeout_ms=5_000)
    b.acquire()  # breaks the expired lease
    with pytest.raises(LockLostError):
        a.verify()
    a.release()  # must not remove b's lock
    assert f":{os.getpid()}:" in FileLock.read_state(path)["owner"] and b._still_mine()
    b.verify()
    b.release()
    assert not os.path.exists(path)


# ------------------------------------------------------------------------------------------------
# collision-free instants under load: many processes, each committing as fast as it can
def _instant_worker(path: str, mode: str, n: int, barrier, out: str, wid: int) -> None:
    table = HoodieTable.open(path) if mode == "lock" else None
    txn = Transaction(table, OCC) if table else None
    meta = os.path.join(path, ".hoodie")
    records, last = [], 0
    barrier.wait()
    for i in range(n):
        md = fake_commit("p", [f"{uuid.uuid4()}-0"])
        md["extraMetadata"].update({"writer": str(wid), "seq": str(i)})
        if mode == "lock":
            inst = txn.start()
            txn.mark_inflight(inst, {})
            completion = txn.complete(inst, md)
            records.append((inst.timestamp, completion))
        else:
            # instant time from the local clock, monotonic per process, no lock, plain file writes
            last = max(now_ms(), last + 1)
            t = format_instant(last)
            for name, body in ((f"{t}.commit.requested", b""), (f"{t}.inflight", b"{}"),
                               (f"{t}.commit", json.dumps(md).encode())):
                with open(os.path.join(meta, name), "wb") as f:
                    f.write(body)
            records.append((t, t))
    with open(out, "w") as f:
        json.dump(records, f)


def run_instant_load(tmp_path, mode: str, procs: int = 6, n: int = 12) -> dict:
    path = str(tmp_path / f"t-{mode}")
    make_table(path, version=6)  # the lock-free mode writes layout-1 commit files by hand
    barrier = SPAWN.Barrier(procs)
    outs = [str(tmp_path / f"{mode}-{w}.json") for w in range(procs)]
    ps = [SPAWN.Process(target=_instant_worker, args=(path, mode, n, barrier, outs[w], w)) for w in range(procs)]
    for p in ps:
        p.start()
    for p in ps:
        p.join(300)
        assert p.exitcode == 0, f"{mode} worker failed with {p.exitcode}"
    per_writer = [json.load(open(o)) for o in outs]
    instants = [r[0] for w in per_writer for r in w]
    dup = Counter(instants)
    collisions = sum(c - 1 for c in dup.values() if c > 1)
    # a commit file is intact if it parses and holds what the writer that recorded the instant wrote
    meta = os.path.join(path, ".hoodie")
    intact, lost = 0, 0
    for w, recs in enumerate(per_writer):
        for i, (t, _c) in enumerate(recs):
            try:
                with open(os.path.join(meta, f"{t}.commit"), "rb") as f:
                    md = parse_commit_metadata(f.read())
                ok = md["extraMetadata"]["writer"] == str(w) and md["extraMetadata"]["seq"] == str(i)
            except Exception:  # noqa: BLE001 - torn or missing: not intact
                ok = False
            intact += ok
            lost += not ok
    return {"path": path, "per_writer": per_writer, "total": len(instants), "collisions": collisions,
            "intact": intact, "lost": lost}


def test_collision_free_instants_under_load_and_the_collisions_without_lock(tmp_path):
    procs, n = 6, 20
    locked = run_instant_load(tmp_path, "lock", procs, n)
    nolock = run_instant_load(tmp_path, "nolock", procs, n)
    print(f"\n{procs} processes x {n} commits: with the lock {locked['collisions']} duplicate instants, "
          f"{locked['lost']} lost/overwritten commits; local clock without the lock {nolock['collisions']} "
          f"duplicate instants, {nolock['lost']} lost/overwritten commits")
    # with the lock: zero duplicates, every commit intact, per-writer instants strictly increasing in
    # completion order, completion times unique and increasing with the instants of each writer
    assert locked["total"] == procs * n and locked["collisions"] == 0
    assert locked["intact"] == procs * n and locked["lost"] == 0
    completions = [c for w in locked["per_writer"] for _t, c in w]
    assert len(set(completions)) == len(completions)
    for recs in locked["per_writer"]:
        ts = [t for t, _c in recs]
        assert all(a < b for a, b in zip(ts, ts[1:]))
        assert all(a[1] < b[1] for a, b in zip(recs, recs[1:]))
        assert all(t < c for t, c in recs)
    tl = HoodieTable.open(locked["path"]).reload()
    assert len(tl.completed()) == procs * n and not tl.pending()
    # without the lock, the same load collides
    assert nolock["collisions"] > 0


# ------------------------------------------------------------------------------------------------
# a writer killed mid-commit while another keeps committing
def _commit_loop(path: str, part: str, options: dict, log: str, stop_flag: str, extra_after_stop: int,
                 kill_in_lock_at: int, in_lock_flag: str) -> None:
    if kill_in_lock_at >= 0:
        orig = Transaction._write_completed
        count = {"n": 0}

        def hooked(self, tl, inst, metadata):
            if count["n"] == kill_in_lock_at:
                with open(in_lock_flag, "w") as f:
                    f.write(inst.timestamp)
                time.sleep(600)  # holding the lock, data files written, commit file not: killed here
            count["n"] += 1
            return orig(self, tl, inst, metadata)

        Transaction._write_completed = hooked
    i, after, stopped_at = 0, 0, None
    while True:
        t = core_upsert(path, part, batch_rows(part, i), options, {"writer": part, "seq": str(i)})
        with open(log, "a") as f:
            f.write(json.dumps({"seq": i, "instant": t, "time": time.time()}) + "\n")
        i += 1
        if os.path.exists(stop_flag):
            stopped_at = stopped_at or time.time()
            after += 1
            # enough commits after the stop, and long enough for a dead writer's heartbeat to expire
            if after >= extra_after_stop and time.time() - stopped_at > 1.0:
                return
        if i > 400:
            raise RuntimeError("ran away")


def _committed_by_writer(path) -> dict:
    tl = HoodieTable.open(path).reload()
    out: dict = {}
    for inst in tl.completed():
        extra = tl.read_metadata(inst)["extraMetadata"]
        out.setdefault(extra["writer"], []).append((int(extra["seq"]), inst.timestamp))
    return out


@pytest.mark.parametrize("point", ["in_lock", "random"])
def test_kill_a_writer_mid_commit_while_another_commits(spark, tmp_path, point):
    path = str(tmp_path / "t")
    make_table(path)
    lease = 60_000  # a killed holder's lock is taken as soon as its process is gone, not after the lease
    opts = {**OCC, "hoodie.write.lock.filesystem.expire.ms": str(lease),
            "hoodie.client.heartbeat.interval_in_ms": "200", "hoodie.write.instant.max.clock.skew.ms": "1"}
    flags = {k: str(tmp_path / k) for k in ("stop", "in_lock", "a.log", "b.log")}
    survivor = SPAWN.Process(target=_commit_loop, args=(path, "a", opts, flags["a.log"], flags["stop"], 4, -1, ""))
    victim = SPAWN.Process(target=_commit_loop, args=(path, "b", opts, flags["b.log"], flags["stop"] + ".never",
                                                      1, 3 if point == "in_lock" else -1, flags["in_lock"]))
    survivor.start()
    victim.start()
    try:
        deadline = time.time() + 180
        if point == "in_lock":
            while not os.path.exists(flags["in_lock"]):
                assert time.time() < deadline and victim.is_alive(), "the victim never reached its kill point"
                time.sleep(0.02)
        else:
            import random

            while not (os.path.exists(flags["b.log"]) and len(open(flags["b.log"]).readlines()) >= 2):
                assert time.time() < deadline and victim.is_alive()
                time.sleep(0.02)
            time.sleep(random.Random(11).uniform(0.0, 0.4))
        victim.kill()  # SIGKILL
        victim.join(10)
        killed_at = time.time()
        open(flags["stop"], "w").close()
        survivor.join(240)
        assert survivor.exitcode == 0, f"the survivor failed ({survivor.exitcode})"
    finally:
        for p in (survivor, victim):
            if p.is_alive():
                p.kill()
    a_log = [json.loads(x) for x in open(flags["a.log"])]
    b_log = [json.loads(x) for x in open(flags["b.log"])] if os.path.exists(flags["b.log"]) else []
    after_kill = [r for r in a_log if r["time"] > killed_at]
    assert len(after_kill) >= 4, "the survivor did not keep committing after the kill"
    if point == "in_lock":  # the victim died holding the lock: the survivor took it without waiting for the lease
        assert after_kill[0]["time"] - killed_at < lease / 1000 / 2

    table = HoodieTable.open(path)
    tl = table.reload()
    assert not tl.pending(), f"pending instants left: {tl.pending()}"  # the survivor rolled the victim back
    committed = _committed_by_writer(path)
    # every commit the survivor logged is there, in order; the victim's commits form a prefix 0..k
    assert [t for _s, t in sorted(committed["a"])] == [r["instant"] for r in a_log]
    b_seqs = sorted(s for s, _t in committed.get("b", []))
    assert b_seqs == list(range(len(b_seqs))) and len(b_seqs) >= len(b_log)
    if point == "in_lock":
        assert len(b_seqs) == 3
    # no file of a non-completed instant remains; no markers, heartbeats or lock of the dead writer
    completed = {i.timestamp for i in tl.completed()}
    for f in glob.glob(os.path.join(path, "part=*", "*.parquet")):
        assert os.path.basename(f).rsplit("_", 1)[1][:17] in completed, f"leftover data file {f}"
    assert not os.listdir(os.path.join(path, ".hoodie", ".temp"))
    assert not glob.glob(os.path.join(path, ".hoodie", ".locks", "*"))
    # and the data is exactly the committed batches of both writers
    expected: dict = {}
    for w in ("a", "b"):
        for s, _t in sorted(committed.get(w, [])):
            replay(expected, batch_rows(w, s))
    got = sorted(tuple(r) for r in hudilite.read(spark, path).select(*COLS).collect())
    assert got == sorted(expected.values())


# ------------------------------------------------------------------------------------------------
# Spark writers as threads of one session
SCHEMA_DDL = "id long, part string, val long, ver long"
WRITE = {"record_key": "id", "precombine_field": "ver", "partition_by": ["part"]}


def _rows_for(part, ver, keys):
    return [(k, part, k * 10 + ver, ver) for k in keys]


@pytest.fixture
def synced_complete(monkeypatch):
    """Make concurrent writers meet before completing (all have taken their instants and written their files),
    then complete in a given order: `order` lists thread names; each waits for the previous one."""
    state = {"barrier": None, "order": [], "done": {}}
    orig = Transaction.complete

    def complete(self, inst, metadata, validate=None, **kw):
        me = threading.current_thread().name
        if state["barrier"] is not None and me in state["order"]:
            state["barrier"].wait(timeout=300)
            idx = state["order"].index(me)
            if idx:
                state["done"][state["order"][idx - 1]].wait(timeout=300)
            try:
                return orig(self, inst, metadata, validate, **kw)
            finally:
                state["done"][me].set()
        return orig(self, inst, metadata, validate, **kw)

    def arm(order):
        state["order"] = list(order)
        state["barrier"] = threading.Barrier(len(order))
        state["done"] = {n: threading.Event() for n in order}

    monkeypatch.setattr(Transaction, "complete", complete)
    return arm


def _run_threads(fns: dict) -> dict:
    results: dict = {}

    def wrap(name, fn):
        try:
            results[name] = fn()
        except BaseException as e:  # noqa: BLE001 - reported per thread
            results[name] = e

    ths = [threading.Thread(target=wrap, args=(n, f), name=n) for n, f in fns.items()]
    for t in ths:
        t.start()
    for t in ths:
        t.join(600)
    return results


def _snapshot(spark, path):
    return sorted(tuple(r) for r in hudilite.read(spark, path).select(*COLS).collect())


def test_spark_writers_disjoint_partitions_all_commit(spark, tmp_path, synced_complete):
    path = str(tmp_path / "t")
    base = [r for p in ("a", "b", "c") for r in _rows_for(p, 1, range({"a": 0, "b": 100, "c": 200}[p],
                                                                        {"a": 0, "b": 100, "c": 200}[p] + 20))]
    hudilite.write(spark.createDataFrame(base, SCHEMA_DDL), path, operation="bulk_insert", options=OCC, **WRITE)
    state = replay({}, base)
    batches = {p: _rows_for(p, 2, range(o, o + 20, 2)) + _rows_for(p, 2, range(o + 50, o + 55))
               for p, o in (("a", 0), ("b", 100), ("c", 200))}
    synced_complete(["w-a", "w-b", "w-c"])
    res = _run_threads({f"w-{p}": (lambda rows=rows: hudilite.write(spark.createDataFrame(rows, SCHEMA_DDL), path,
                                                                  options=OCC, **WRITE))
                        for p, rows in batches.items()})
    errors = {k: v for k, v in res.items() if isinstance(v, BaseException)}
    assert not errors, errors
    assert len(set(res.values())) == 3
    for rows in batches.values():
        replay(state, rows)
    assert _snapshot(spark, path) == sorted(state.values())
    assert not HoodieTable.open(path).reload().pending()


def test_spark_writers_overlapping_one_conflicts_rolls_back_and_retries(spark, tmp_path, synced_complete):
    path = str(tmp_path / "t")
    base = _rows_for("a", 1, range(30)) + _rows_for("b", 1, range(100, 110))
    hudilite.write(spark.createDataFrame(base, SCHEMA_DDL), path, operation="bulk_insert", options=OCC, **WRITE)
    state = replay({}, base)
    win_rows = _rows_for("a", 2, range(0, 30, 3))
    lose_rows = _rows_for("a", 3, range(1, 30, 3)) + _rows_for("b", 3, range(100, 103))
    synced_complete(["winner", "loser"])
    res = _run_threads({
        "winner": lambda: hudilite.write(spark.createDataFrame(win_rows, SCHEMA_DDL), path, options=OCC, **WRITE),
        "loser": lambda: hudilite.write(spark.createDataFrame(lose_rows, SCHEMA_DDL), path, options=OCC, **WRITE),
    })
    assert not isinstance(res["winner"], BaseException), res["winner"]
    err = res["loser"]
    assert isinstance(err, CommitConflictError), err
    assert err.retryable and err.conflicting_instants == [str(res["winner"])]
    assert all(p == "part=a" for p, _f in err.file_groups)
    # the loser's files are rolled back: no pending instant, no data file, no markers of it
    tl = HoodieTable.open(path).reload()
    assert not tl.pending() and err.instant not in {i.timestamp for i in tl.instants}
    assert not glob.glob(os.path.join(path, "part=*", f"*_{err.instant}.parquet"))
    assert not os.path.exists(os.path.join(path, ".hoodie", ".temp", err.instant))
    replay(state, win_rows)
    assert _snapshot(spark, path) == sorted(state.values())
    # retryable: the same write again commits on top of the winner
    hudilite.write(spark.createDataFrame(lose_rows, SCHEMA_DDL), path, options=OCC, **WRITE)
    replay(state, lose_rows)
    assert _snapshot(spark, path) == sorted(state.values())
