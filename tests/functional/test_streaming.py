"""The streaming sink: one commit per micro-batch, replays recognised, async instants completed in order, and
restarts after injected failures and after the streaming process is killed - checked against a reference.

The source is a directory of JSON files read one file per micro-batch. Batch b upserts 10 existing keys
(ordering value b) and inserts 5 new ones, so the reference state is the same whatever the commit order;
double application is caught through the commits themselves (exactly one commit per batch id).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

import hudilite
import hudilite.streaming as hs
from hudilite.table import HoodieTable
from hudilite.writer.conflict import prepared_metadata
from hudilite.writer.transaction import Transaction

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
COLS = ["id", "part", "val", "ver"]
SCHEMA_DDL = "id long, part string, val long, ver long"
WRITE = {"record_key": "id", "precombine_field": "ver", "partition_by": ["part"]}
QID = "orders-stream"


def batch_rows(b: int) -> list[tuple]:
    upd = [((b * 7 + k) % 40, f"p{((b * 7 + k) % 40) % 2}", b * 100 + k, b) for k in range(10)]
    ins = [(1000 + b * 5 + j, f"p{(1000 + b * 5 + j) % 2}", b * 100 + 50 + j, b) for j in range(5)]
    return upd + ins


def reference(batches) -> list[tuple]:
    state: dict = {}
    for b in batches:
        for r in batch_rows(b):
            if r[0] not in state or r[3] >= state[r[0]][3]:
                state[r[0]] = r
    return sorted(state.values())


def add_files(src: str, batches) -> None:
    os.makedirs(src, exist_ok=True)
    for b in batches:
        tmp = os.path.join(src, f".{b:04d}.json.tmp")
        with open(tmp, "w") as f:
            for r in batch_rows(b):
                f.write(json.dumps(dict(zip(COLS, r))) + "\n")
        os.rename(tmp, os.path.join(src, f"{b:04d}.json"))
        time.sleep(0.01)  # distinct modification times: the file source takes files in that order


def stream_df(spark, src):
    return spark.readStream.schema(SCHEMA_DDL).option("maxFilesPerTrigger", 1).json(src)


def run_stream(spark, src, chk, fn) -> Exception | None:
    q = stream_df(spark, src).writeStream.foreachBatch(fn).option("checkpointLocation", chk) \
        .trigger(availableNow=True).start()
    try:
        q.awaitTermination(600)
    except Exception as e:  # noqa: BLE001 - StreamingQueryException of an injected failure
        return e
    finally:
        q.stop()
    return None


def stream_commits(path) -> list[tuple[int, str, str]]:
    """(batch id, instant, completion time) of every completed commit of the stream, in instant order."""
    tl = HoodieTable.open(path).reload()
    out = []
    for inst in tl.completed():
        extra = tl.read_metadata(inst)["extraMetadata"]
        if extra.get(hs.QUERY_ID_KEY) == QID:
            out.append((int(extra[hs.BATCH_ID_KEY]), inst.timestamp, tl.completion_time(inst)))
    return out


def snapshot(spark, path):
    return sorted(tuple(r) for r in hudilite.read(spark, path).select(*COLS).collect())


def check_table(spark, path, batches):
    expected = reference(batches)
    got = snapshot(spark, path)
    assert len(got) == len(expected) and sum(r[2] for r in got) == sum(r[2] for r in expected)
    assert got == expected
    commits = stream_commits(path)
    ids = [b for b, _t, _c in commits]
    assert sorted(ids) == sorted(set(ids)) == sorted(batches), f"batch ids committed: {ids}"
    # commits complete in instant order, and batch ids follow instant order
    assert [c for _b, _t, c in commits] == sorted(c for _b, _t, c in commits)
    assert ids == sorted(ids)
    tl = HoodieTable.open(path).reload()
    assert not tl.pending(), f"pending instants: {tl.pending()}"
    return commits


# ------------------------------------------------------------------------------------------------
def test_stream_with_injected_failures_and_restarts(spark, tmp_path, monkeypatch):
    src, chk, path = str(tmp_path / "src"), str(tmp_path / "chk"), str(tmp_path / "tbl")
    add_files(src, range(5))

    # run 1: batch 2 prepares its commit, then the process "dies" before the commit completes and before
    # Spark marks the batch done (the committer never sees it; the query fails)
    s1 = hs.sink(path, query_id=QID, **WRITE)
    orig_enqueue = s1._enqueue

    def enqueue(inst, md):
        if md["extraMetadata"][hs.BATCH_ID_KEY] != "2":  # batch 2: the committer never sees it
            orig_enqueue(inst, md)

    def fn(df, batch_id):
        s1(df, batch_id)
        if batch_id == 2:
            raise RuntimeError("injected crash after batch 2 prepared its commit")

    s1._enqueue = enqueue
    assert "injected crash after batch 2" in str(run_stream(spark, src, chk, fn))
    s1.flush()  # batches 0 and 1 completed; batch 2 stays prepared
    assert [b for b, _t, _c in stream_commits(path)] == [0, 1]
    tl = HoodieTable.open(path).reload()
    (pending,) = tl.pending()
    assert prepared_metadata(tl, pending)["extraMetadata"][hs.BATCH_ID_KEY] == "2"
    # other writers' failed-write rollback leaves a prepared commit alone
    assert Transaction(HoodieTable.open(path), {}).rollback_failed_writes(lazy=False) == []
    # readers do not see it yet
    assert snapshot(spark, path) == reference([0, 1])

    # run 2 (restart): the prepared batch 2 is completed, Spark's replay of batch 2 is skipped; batch 3 then
    # fails inside its write, before it prepares (rolled back by the client, replayed by Spark next run)
    s2 = hs.sink(path, query_id=QID, **WRITE)
    orig_prepare = Transaction.prepare
    fired = []

    def prepare(self, inst, md, **kw):
        if md["extraMetadata"].get(hs.BATCH_ID_KEY) == "3" and not fired:
            fired.append(inst.timestamp)
            raise OSError("injected failure while batch 3 prepares")
        return orig_prepare(self, inst, md, **kw)

    monkeypatch.setattr(Transaction, "prepare", prepare)
    assert "injected failure while batch 3" in str(run_stream(spark, src, chk, s2))
    s2.flush()
    assert s2.skipped == [2]
    assert [b for b, _t, _c in stream_commits(path)] == [0, 1, 2]
    tl = HoodieTable.open(path).reload()
    assert fired and fired[0] not in {i.timestamp for i in tl.instants}  # rolled back

    # run 3: batch 3 replayed and written, batch 4 too
    s3 = hs.sink(path, query_id=QID, **WRITE)
    assert run_stream(spark, src, chk, s3) is None
    s3.close()
    assert s3.skipped == [] and [b for b, _i in s3.committed] == [3, 4]
    check_table(spark, path, range(5))

    # run 4: more data, blocking instants this time, same query
    add_files(src, [5])
    s4 = hs.sink(path, query_id=QID, async_instants=False, **WRITE)
    assert run_stream(spark, src, chk, s4) is None
    assert [b for b, _i in s4.committed] == [5]
    check_table(spark, path, range(6))

    # a replay of an old batch by the same query (e.g. from an older checkpoint) changes nothing
    before = sorted(os.listdir(os.path.join(path, ".hoodie")))
    s5 = hs.sink(path, query_id=QID, **WRITE)
    s5(spark.createDataFrame(batch_rows(3), SCHEMA_DDL), 3)
    s5.close()
    assert s5.skipped == [3] and sorted(os.listdir(os.path.join(path, ".hoodie"))) == before


def test_async_batches_overlap_and_plan_on_prepared_commits(spark, tmp_path):
    """Called directly: batch n+1 is written while batch n's commit is still completing (held back here), sees
    batch n's rows (upserts of its keys update them - no duplicates), and commits after it."""
    path = str(tmp_path / "tbl")
    s = hs.sink(path, query_id=QID, **WRITE)
    gate = __import__("threading").Event()
    orig = s._complete

    def slow_complete(txn, inst):
        gate.wait(120)
        orig(txn, inst)

    s._complete = slow_complete
    s(spark.createDataFrame(batch_rows(0), SCHEMA_DDL), 0)
    assert [b for b, _t, _c in stream_commits(path)] == []  # batch 0 prepared, not completed
    # batch 1 upserts keys batch 0 inserted; batch 0 is still completing while batch 1 writes
    rows1 = [(r[0], r[1], -r[2], 1) for r in batch_rows(0)]
    t = __import__("threading").Timer(0.5, gate.set)
    t.start()
    s(spark.createDataFrame(rows1, SCHEMA_DDL), 1)
    s.close()
    commits = stream_commits(path)
    assert [b for b, _t, _c in commits] == [0, 1]
    assert snapshot(spark, path) == sorted(rows1)  # every key once, with batch 1's values
    # bad input to the sink: a clear error and the table unchanged
    before = snapshot(spark, path)
    with pytest.raises(hudilite.InvalidWriteError):
        s(spark.createDataFrame([(None, "p0", 1, 5)], SCHEMA_DDL), 2)
    assert snapshot(spark, path) == before and not HoodieTable.open(path).reload().pending()
    with pytest.raises(hudilite.InvalidWriteError):
        hs.sink(path, operation="insert_overwrite", query_id=QID, **WRITE)


# ------------------------------------------------------------------------------------------------
# the streaming process killed after Spark marked a batch done but before its commit completed (batch 2 may
# be writing or prepared meanwhile)
def _child(src: str, chk: str, path: str) -> None:
    from hudilite.spark.session import local_session
    from tests.functional.crash_writer import kill_tree

    spark = local_session("local[1]", app_name="stream-kill")
    s = hs.sink(path, query_id=QID, **WRITE)
    orig = s._complete

    def complete(txn, inst):
        batch = next(int(m["extraMetadata"][hs.BATCH_ID_KEY]) for i, m in s._outstanding if i == inst)
        if batch == 1:
            deadline = time.time() + 120
            while not os.path.exists(os.path.join(chk, "commits", "1")) and time.time() < deadline:
                time.sleep(0.01)
            with open(os.path.join(os.path.dirname(path), "killed"), "w") as f:
                f.write(inst.timestamp)
            kill_tree(os.getpid())
        orig(txn, inst)

    s._complete = complete
    q = stream_df(spark, src).writeStream.foreachBatch(s).option("checkpointLocation", chk) \
        .trigger(availableNow=True).start()
    q.awaitTermination()
    s.close()


def test_stream_process_killed_then_restarted(spark, tmp_path):
    src, chk, path = str(tmp_path / "src"), str(tmp_path / "chk"), str(tmp_path / "tbl")
    add_files(src, range(3))
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYTHONPATH=ROOT)
    log = tmp_path / "child.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-c", f"from tests.functional.test_streaming import _child; "
                                                       f"_child({src!r}, {chk!r}, {path!r})"],
                                cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        rc = proc.wait(600)
    killed = tmp_path / "killed"
    assert killed.exists(), f"the stream did not reach its kill point (rc={rc}): {log.read_text()[-3000:]}"
    assert rc == -9
    # the scenario: Spark marked batch 1 done, its commit is prepared but not completed
    assert os.path.exists(os.path.join(chk, "commits", "1"))
    t1 = killed.read_text()
    tl = HoodieTable.open(path).reload()
    assert t1 in {i.timestamp for i in tl.pending()}
    assert [b for b, _t, _c in stream_commits(path)] == [0]
    # restart in another process (this one), same checkpoint and query: nothing lost, nothing twice
    s = hs.sink(path, query_id=QID, **WRITE)
    assert run_stream(spark, src, chk, s) is None
    s.close()
    commits = check_table(spark, path, range(3))
    assert dict((b, t) for b, t, _c in commits)[1] == t1  # completed, not rewritten
    # without query_id the sink takes Spark's query id (stable for a checkpoint location)
    add_files(str(tmp_path / "src2"), [9])
    s2 = hs.sink(str(tmp_path / "tbl2"), **WRITE)
    assert run_stream(spark, str(tmp_path / "src2"), str(tmp_path / "chk2"), s2) is None
    s2.close()
    with open(tmp_path / "chk2" / "metadata") as f:
        assert s2.query_id == json.load(f)["id"] and len(s2.committed) == 1
