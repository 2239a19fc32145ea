"""Write tokens unique per attempt (hudilite/writer/handle.py `task_info`): two driver-local writers appending to
one merge-on-read slice at once never share a log file, so the rollback of one cannot delete the other's log."""

from __future__ import annotations

import glob
import os
import threading

import pyarrow as pa
import pytest

import hudilite
from hudilite.writer import client, log_handle, rollback
from tests.hudi_rs import read_hudi_rs

pytest.importorskip("hudi")

OCC = {"hoodie.write.concurrency.mode": "optimistic_concurrency_control"}


def put(path, ids, v, op="upsert"):
    t = pa.table({"id": pa.array(ids, pa.int64()), "v": pa.array([v] * len(ids), pa.int64())})
    return hudilite.write(t, path, record_key="id", precombine_field="v", operation=op,
                          table_type="MERGE_ON_READ", options=OCC)


def test_concurrent_local_appends_to_one_slice_and_a_rollback_keep_the_survivors_log(tmp_path, monkeypatch):
    path = str(tmp_path / "t")
    put(path, list(range(20)), 1, op="bulk_insert")  # one file group, one slice
    put(path, [0], 2)  # the slice has a log file already
    b_waiting, b_go, b_appended = threading.Event(), threading.Event(), threading.Event()
    roles = threading.local()
    real_append, real_complete = log_handle.create_log_file, client.Transaction.complete

    def append(p, blocks, **kw):
        if getattr(roles, "name", None) == "B":  # B has named its log file; it appends once A rolled back
            b_waiting.set()
            assert b_go.wait(30)
            out = real_append(p, blocks, **kw)
            b_appended.set()
            return out
        return real_append(p, blocks, **kw)

    def complete(self, *a, **kw):
        if getattr(roles, "name", None) == "A":
            raise RuntimeError("writer A fails before its commit")
        return real_complete(self, *a, **kw)

    real_scan = rollback.scan_log_file

    def scan(p):  # A's rollback looks at its log, then B appends (both used the same name before the fix)
        blocks = list(real_scan(p))
        if getattr(roles, "name", None) == "A" and not b_go.is_set():
            b_go.set()
            assert b_appended.wait(30)
        return blocks

    monkeypatch.setattr(log_handle, "create_log_file", append)
    monkeypatch.setattr(client.Transaction, "complete", complete)
    monkeypatch.setattr(rollback, "scan_log_file", scan)  # the rollback's look at the log
    out = {}

    def run(name, ids, v):
        roles.name = name
        try:
            out[name] = put(path, ids, v)
        except BaseException as e:  # noqa: BLE001 - reported to the test
            out[name] = e

    b = threading.Thread(target=run, args=("B", [1, 2, 3], 5))
    b.start()
    assert b_waiting.wait(30)
    a = threading.Thread(target=run, args=("A", [4, 5, 6], 5))
    a.start()
    a.join(60)
    b.join(60)
    monkeypatch.undo()
    assert isinstance(out["A"], RuntimeError)
    assert not isinstance(out["B"], BaseException), out["B"]
    logs = glob.glob(os.path.join(path, ".*.log.*"))
    assert len(logs) == 2, logs  # the first upsert's and B's: A's is rolled back, B's survives
    want = sorted([(i, 1) for i in range(20) if i not in (0, 1, 2, 3)] + [(0, 2), (1, 5), (2, 5), (3, 5)])
    got = sorted((r["id"], r["v"]) for r in read_hudi_rs(path).select(["id", "v"]).to_pylist())
    assert got == want
    from hudilite.reader.merge import SliceDesc, merge_slice
    from hudilite.reader.planner import plan_read

    plan = plan_read(path)
    t = pa.concat_tables([merge_slice(SliceDesc.of(s), plan.merge_spec()) for s in plan.slices])
    assert sorted((r["id"], r["v"]) for r in t.select(["id", "v"]).to_pylist()) == want


# ------------------------------------------------------------------------------------------------
# Spark's stage and task attempt ids restart at 0 in every application: two applications running the same job
# against one table hand their tasks the same (partition, stage, attempt) ids
class _FirstTaskOfTheJob:
    """The TaskContext that the same task of the same job reports in two freshly started applications."""

    def partitionId(self):  # noqa: N802 - pyspark's names
        return 0

    def stageId(self):  # noqa: N802
        return 3

    def taskAttemptId(self):  # noqa: N802
        return 7


def _app_appending_to_the_slice(path: str, barrier, out: str) -> None:
    """One "application": its task appends to the slice once both have named their log file."""
    import pyspark

    pyspark.TaskContext.get = lambda: _FirstTaskOfTheJob()
    real_append = log_handle.create_log_file
    named = []

    def append(p, blocks, **kw):
        named.append(os.path.basename(p))
        barrier.wait(60)  # both listed the slice and chose a name before either file exists
        return real_append(p, blocks, **kw)

    log_handle.create_log_file = append
    try:
        put(path, [1, 2], 5)
        result = "ok"
    except hudilite.CommitConflictError:
        result = "conflict"
    with open(out, "w") as f:
        f.write(f"{result} {named[0]}")


def test_two_spark_applications_never_share_a_log_file_name(tmp_path):
    import multiprocessing as mp

    path = str(tmp_path / "t")
    put(path, list(range(10)), 1, op="bulk_insert")
    put(path, [0], 2)  # the slice has a log file: both appends list it and take the next version
    spawn = mp.get_context("spawn")
    barrier = spawn.Barrier(2)
    outs = [str(tmp_path / f"app{i}.txt") for i in range(2)]
    apps = [spawn.Process(target=_app_appending_to_the_slice, args=(path, barrier, o)) for o in outs]
    for p in apps:
        p.start()
    for p in apps:
        p.join(300)
        assert p.exitcode == 0
    results = sorted(open(o).read().split() for o in outs)
    names = [n for _r, n in results]
    assert names[0] != names[1], f"both applications appended to {names[0]}"
    for n in names:  # Hudi's token grammar, every field a Java int
        token = n.rsplit("_", 1)[1]
        fields = token.split("-")
        assert len(fields) == 3 and all(f.isdigit() and int(f) < 2 ** 31 for f in fields), token
        assert fields[0] == "0" and fields[2] == "7"  # partition and task attempt id kept
    # optimistic concurrency: both touched the group, exactly one committed, the other's log is rolled back
    assert [r for r, _n in results] == ["conflict", "ok"]
    logs = sorted(os.path.basename(p) for p in glob.glob(os.path.join(path, ".*.log.*")))
    assert len(logs) == 2 and logs[1] in names, logs
    got = sorted((r["id"], r["v"]) for r in read_hudi_rs(path).select(["id", "v"]).to_pylist())
    assert got == sorted([(0, 2), (1, 5), (2, 5)] + [(i, 1) for i in range(3, 10)])
