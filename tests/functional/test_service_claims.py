"""Exclusive, crash-safe execution of compaction and clustering plans (hudilite/services/claim.py): two
executors of one plan (threads, processes), an executor killed mid-plan whose plan another one completes.
Tables are written with the driver-local Arrow writer (no Spark job); hudi-rs judges every result."""

from __future__ import annotations

import glob
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pyarrow as pa
import pytest

import hudilite
from hudilite.file_group import parse_base_file_name
from hudilite.reader.merge import SliceDesc, merge_slice
from hudilite.reader.planner import plan_read
from hudilite.services import clustering as clu
from hudilite.services import compaction as comp
from hudilite.table import HoodieTable

hudi = pytest.importorskip("hudi")
from tests.hudi_rs import read_hudi_rs  # noqa: E402

FAST_HB = {"hoodie.client.heartbeat.interval_in_ms": "200", "hoodie.client.heartbeat.tolerable.misses": "2"}
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def batch(ids, v):
    return pa.table({"id": pa.array(ids, pa.int64()), "v": pa.array([v] * len(ids), pa.int64()),
                     "dt": pa.array(["a" if i % 2 else "b" for i in ids], pa.string())})


def put(path, ids, v, *, op="upsert", mor=True):
    return hudilite.write(batch(ids, v), path, record_key="id", precombine_field="v", partition_by=("dt",),
                          operation=op, table_type="MERGE_ON_READ" if mor else "COPY_ON_WRITE")


def pyread(path) -> list[tuple]:
    plan = plan_read(path)
    spec = plan.merge_spec()
    parts = [merge_slice(SliceDesc.of(s), spec) for s in plan.slices]
    t = pa.concat_tables(parts) if parts else None
    return sorted((r["id"], r["v"]) for r in t.select(["id", "v"]).to_pylist()) if t is not None else []


def rs(path) -> list[tuple]:
    t = read_hudi_rs(path)
    return sorted((r["id"], r["v"]) for r in t.select(["id", "v"]).to_pylist()) if t is not None else []


def committed_files(path, instant) -> list[str]:
    tl = HoodieTable.open(path).timeline  # any table version
    (done,) = [i for i in tl.completed(("commit", "replacecommit")) if i.timestamp == instant]
    md = tl.read_metadata(done)
    return [os.path.join(path, s["path"]) for ss in md["partitionToWriteStats"].values() for s in ss]


def base_files_at(path, instant) -> list[str]:
    return sorted(p for p in glob.glob(os.path.join(path, "*", "*.parquet"))
                  if (parse_base_file_name(os.path.basename(p)) or (0, 0, None))[2] == instant)


def mor_with_logs(path) -> list[tuple]:
    put(path, list(range(200)), 1, op="bulk_insert")
    put(path, list(range(0, 200, 3)), 2)
    return sorted((i, 2 if i % 3 == 0 else 1) for i in range(200))


def cow_small_groups(path) -> list[tuple]:
    for k in range(4):  # four bulk inserts: four small file groups per partition
        put(path, list(range(k * 50, k * 50 + 50)), 1, op="bulk_insert", mor=False)
    return [(i, 1) for i in range(200)]


def pause_after_first_file(monkeypatch, module):
    """Make the first output file of `module`'s executor in this thread block until released."""
    real = module.write_base_file
    paused, go = threading.Event(), threading.Event()
    first = {"thread": None}

    def blocking(*a, **kw):
        out = real(*a, **kw)
        if first["thread"] is None:
            first["thread"] = threading.get_ident()
        if first["thread"] == threading.get_ident() and not go.is_set():
            paused.set()
            go.wait(30)
        return out

    monkeypatch.setattr(module, "write_base_file", blocking)
    return paused, go


def run_in_thread(fn):
    out = {}

    def target():
        try:
            out["result"] = fn()
        except BaseException as e:  # noqa: BLE001 - reported to the test
            out["error"] = e

    th = threading.Thread(target=target)
    th.start()
    return th, out


def test_two_threads_execute_one_clustering_plan_only_once(tmp_path, monkeypatch):
    path = str(tmp_path / "t")
    want = cow_small_groups(path)
    c = clu.schedule_clustering(path)
    assert c
    paused, go = pause_after_first_file(monkeypatch, clu)
    a, a_out = run_in_thread(lambda: clu.run_clustering(path, {"hoodie.clustering.parallelism": "1"}))
    assert paused.wait(30)
    # the second executor (an inline service of another writer) finds the live claim and skips the plan
    assert clu.run_clustering(path, {"hoodie.clustering.parallelism": "1"}) == []
    go.set()
    a.join(60)
    assert "error" not in a_out, a_out.get("error")
    assert a_out["result"] == [c]
    for f in committed_files(path, c):
        assert os.path.exists(f), f"committed file {f} is missing"
    assert pyread(path) == rs(path) == want  # 200 rows for 200 keys: no duplicates, nothing missing


def test_two_threads_execute_one_compaction_plan_skip_and_wait(tmp_path, monkeypatch):
    path = str(tmp_path / "t")
    want = mor_with_logs(path)
    c = comp.schedule_compaction(path, force=True)
    paused, go = pause_after_first_file(monkeypatch, comp)
    opts = {"hoodie.compaction.parallelism": "1", **FAST_HB}
    a, a_out = run_in_thread(lambda: comp.run_compaction(path, opts))
    assert paused.wait(30)
    first = base_files_at(path, c)
    assert len(first) == 1
    assert comp.run_compaction(path, opts) == []  # skipped: the plan is claimed by a live executor
    assert base_files_at(path, c) == first  # ... which did not touch the first executor's output
    b, b_out = run_in_thread(lambda: comp.run_compaction(path, opts, wait=True))  # the CLI's mode: waits
    time.sleep(1.0)  # > the heartbeat tolerance: a live claimant keeps its plan however long it takes
    assert b.is_alive() and base_files_at(path, c) == first
    go.set()
    a.join(60)
    b.join(60)
    assert "error" not in a_out and "error" not in b_out, (a_out, b_out)
    assert a_out["result"] == [c] and b_out["result"] == [c]
    assert sorted(base_files_at(path, c)) == sorted(committed_files(path, c))
    assert len(base_files_at(path, c)) == 2
    assert pyread(path) == rs(path) == want


_EXECUTOR = textwrap.dedent("""
    import os, sys, threading, time
    from hudilite.services import compaction
    path, flag, wait = sys.argv[1], sys.argv[2], sys.argv[3] == "wait"
    opts = {"hoodie.compaction.parallelism": "1", "hoodie.client.heartbeat.interval_in_ms": "200",
            "hoodie.client.heartbeat.tolerable.misses": "2"}
    if flag != "-":
        real = compaction.write_base_file
        def stall(*a, **kw):
            out = real(*a, **kw)
            open(flag, "w").close()
            time.sleep(3600)   # killed here
            return out
        compaction.write_base_file = stall
    print("DONE", compaction.run_compaction(path, opts, **({"wait": True} if wait else {})), flush=True)
""")


def _executor(path, flag, mode):
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.Popen([sys.executable, "-c", _EXECUTOR, path, flag, mode], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)


def test_two_processes_and_a_killed_executor_whose_plan_another_completes(tmp_path):
    path = str(tmp_path / "t")
    want = mor_with_logs(path)
    c = comp.schedule_compaction(path, force=True)
    flag = str(tmp_path / "paused")
    a = _executor(path, flag, "skip")
    try:
        deadline = time.time() + 60
        while not os.path.exists(flag):
            assert a.poll() is None, a.communicate()
            assert time.time() < deadline
            time.sleep(0.05)
        partial = base_files_at(path, c)
        assert len(partial) == 1
        b = _executor(path, "-", "skip")  # another process while the first one lives: skips the plan
        out, err = b.communicate(timeout=120)
        assert b.returncode == 0, err
        assert "DONE []" in out
        assert base_files_at(path, c) == partial
    finally:
        a.send_signal(signal.SIGKILL)
        a.wait()
    assert HoodieTable.open(path).timeline.get(c).state == "INFLIGHT"
    d = _executor(path, "-", "wait")  # takes over once the dead claimant's heartbeat expired
    out, err = d.communicate(timeout=120)
    assert d.returncode == 0, err
    assert f"DONE ['{c}']" in out
    done = base_files_at(path, c)
    assert partial[0] not in done  # the dead attempt's file was rolled back ...
    assert sorted(done) == sorted(committed_files(path, c)) and len(done) == 2  # ... the new ones committed
    assert {parse_base_file_name(os.path.basename(p))[1].rsplit("-", 1)[1] for p in done} == {"2"}  # attempt 2
    assert pyread(path) == rs(path) == want
    assert not os.path.exists(os.path.join(path, ".hoodie", ".aux", "service_claims", c))


def test_an_executor_that_lost_its_claim_never_touches_the_plan_another_completed(tmp_path, monkeypatch):
    from hudilite.services import claim as claim_mod

    path = str(tmp_path / "t")
    want = mor_with_logs(path)
    c = comp.schedule_compaction(path, force=True)
    beats = []
    real_hb = claim_mod.Heartbeat

    def recording_heartbeat(*a, **kw):
        beats.append(real_hb(*a, **kw))
        return beats[-1]

    monkeypatch.setattr(claim_mod, "Heartbeat", recording_heartbeat)
    paused, go = pause_after_first_file(monkeypatch, comp)
    opts = {"hoodie.compaction.parallelism": "1", **FAST_HB}
    a, a_out = run_in_thread(lambda: comp.run_compaction(path, opts))
    assert paused.wait(30)
    stale = base_files_at(path, c)
    if beats:  # (none before claims existed)
        beats[0].stop(delete=False)  # A stalls (a frozen process beats no more) past its tolerance of 2 x 200 ms
    time.sleep(0.8)
    assert comp.run_compaction(path, opts) == [c]  # B takes the dead claim over and completes the plan
    done = sorted(committed_files(path, c))
    assert stale[0] not in done and sorted(base_files_at(path, c)) == done
    go.set()  # A wakes up: its next file finds the claim lost; it deletes its own files only
    a.join(60)
    assert isinstance(a_out.get("error"), claim_mod.ClaimLostError), a_out
    assert sorted(base_files_at(path, c)) == done and HoodieTable.open(path).timeline.get(c).is_completed
    assert pyread(path) == rs(path) == want
