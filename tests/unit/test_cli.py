import json
import os

from hudilite.cli import main
from hudilite.config import TableConfig
from hudilite.lock.base import lock_for
from hudilite.table import HoodieTable
from hudilite.timeline.heartbeat import heartbeat_path
from hudilite.writer.transaction import Transaction


def test_timeline_and_rollback(tmp_path, capsys):
    cfg = TableConfig.new(name="t", table_type="COPY_ON_WRITE", record_key_fields=["id"], precombine_field=None,
                          partition_fields=[], hive_style=True, create_schema=None)
    t = HoodieTable.create(str(tmp_path / "t"), cfg)
    txn = Transaction(t)
    done = txn.start()
    txn.complete(done, {"partitionToWriteStats": {}, "operationType": "UPSERT"})
    pending = txn.start()
    assert main(["timeline", t.base_path, "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["instant"], r["state"], r["operation"]) for r in rows] == [
        (done.timestamp, "COMPLETED", "UPSERT"), (pending.timestamp, "REQUESTED", "")]
    assert main(["rollback", t.base_path, done.timestamp]) == 2
    capsys.readouterr()
    # the pending write's heartbeat is fresh: its writer counts as alive, so it is left alone ...
    assert main(["rollback", t.base_path]) == 0
    assert f"left alone: {pending.timestamp}" in capsys.readouterr().out
    assert main(["rollback", t.base_path, pending.timestamp]) == 2
    assert "alive" in capsys.readouterr().err and t.reload().get(pending.timestamp) is not None
    # ... until --force (the user knows no writer is running)
    assert main(["rollback", t.base_path, "--force"]) == 0
    # the rollback is an instant of its own, after the write it rolled back, as Apache Hudi writes it
    (w, rb) = t.reload().instants
    assert (w.timestamp, rb.action, rb.is_completed) == (done.timestamp, "rollback", True)
    assert rb.timestamp > pending.timestamp and t.timeline.get(pending.timestamp) is None
    assert main(["info", t.base_path]) == 0
    assert json.loads(capsys.readouterr().out.split("\n", 1)[1])["completed_instants"] == 1
    assert main(["timeline", t.base_path, "--json"]) == 0
    assert [(r["instant"], r["action"], r["state"]) for r in json.loads(capsys.readouterr().out)] == [
        (done.timestamp, "commit", "COMPLETED"), (rb.timestamp, "rollback", "COMPLETED")]
    assert main(["timeline", str(tmp_path / "missing")]) == 2


def test_rollback_leaves_prepared_commits_alone(tmp_path, capsys):
    """A prepared (validated, guaranteed) streaming commit is not a failed write: `hudilite rollback` skips it,
    with or without an explicit instant, and rolls back only the ordinary pending write."""
    cfg = TableConfig.new(name="t", table_type="COPY_ON_WRITE", record_key_fields=["id"], precombine_field=None,
                          partition_fields=[], hive_style=True, create_schema=None)
    t = HoodieTable.create(str(tmp_path / "t"), cfg)
    txn = Transaction(t)
    prepared = txn.start()
    txn.prepare(prepared, {"partitionToWriteStats": {}, "operationType": "UPSERT"})
    failed = txn.start()
    assert main(["rollback", t.base_path, prepared.timestamp, "--force"]) == 2
    assert "prepared commit" in capsys.readouterr().err
    os.unlink(heartbeat_path(t.base_path, failed.timestamp))  # its writer died long ago
    assert main(["rollback", t.base_path]) == 0
    assert failed.timestamp in capsys.readouterr().out
    writes = ("commit",)
    assert [(i.timestamp, i.is_completed) for i in t.reload().instants if i.action in writes] == [
        (prepared.timestamp, False)]
    txn.complete_prepared(prepared)
    assert [(i.timestamp, i.is_completed) for i in t.reload().instants if i.action in writes] == [
        (prepared.timestamp, True)]


def test_timeline_archived_shows_completion_and_operation(tmp_path, capsys):
    """Archived instants keep their commit metadata in the archive: `timeline --archived` shows their completion
    time and operation as it does for active ones."""
    cfg = TableConfig.new(name="t", table_type="COPY_ON_WRITE", record_key_fields=["id"], precombine_field=None,
                          partition_fields=[], hive_style=True, create_schema=None)
    t = HoodieTable.create(str(tmp_path / "t"), cfg)
    ops = ["INSERT", "UPSERT", "UPSERT", "DELETE", "UPSERT"]
    for op in ops:
        txn = Transaction(t)
        txn.complete(txn.start(), {"partitionToWriteStats": {}, "operationType": op})
    assert main(["timeline", t.base_path, "--json"]) == 0
    active = {r["instant"]: r for r in json.loads(capsys.readouterr().out)}
    assert main(["archive", t.base_path, "-o", "hoodie.keep.min.commits=1", "-o", "hoodie.keep.max.commits=2"]) == 0
    capsys.readouterr()
    assert main(["timeline", t.base_path, "--archived", "--json"]) == 0
    archived = [r for r in json.loads(capsys.readouterr().out) if r["state"].startswith("ARCHIVED")]
    assert archived
    for r in archived:
        # the same completion time and operation the active timeline showed before archival
        before = active[r["instant"]]
        assert (r["completed"], r["operation"]) == (before["completed"], before["operation"])
        assert r["completed"] >= r["instant"] and r["operation"] in ops


def test_rollback_takes_the_lock_options(tmp_path, capsys):
    """`hudilite rollback -o ...` configures the table lock like the other services: with the lock held
    elsewhere it gives up after the given wait (the default is ten minutes), and the pending write stays."""
    cfg = TableConfig.new(name="t", table_type="COPY_ON_WRITE", record_key_fields=["id"], precombine_field=None,
                          partition_fields=[], hive_style=True, create_schema=None)
    t = HoodieTable.create(str(tmp_path / "t"), cfg)
    pending = Transaction(t).start()
    os.unlink(heartbeat_path(t.base_path, pending.timestamp))  # its writer died
    held = lock_for(t.base_path)
    held.acquire()
    try:
        assert main(["rollback", t.base_path, "-o", "hoodie.write.lock.wait_time_ms=300"]) == 2
        assert "within 300 ms" in capsys.readouterr().err
        assert main(["rollback", t.base_path, "-o", "hoodie.write.lock.wait_tme_ms=300"]) == 2
        assert "hoodie.write.lock.wait_tme_ms" in capsys.readouterr().err
    finally:
        held.release()
    assert t.reload().get(pending.timestamp) is not None
    assert main(["rollback", t.base_path, "-o", "hoodie.write.lock.wait_time_ms=300"]) == 0
    assert t.reload().get(pending.timestamp) is None
