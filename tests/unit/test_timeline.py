"""Timeline files, instant times, locks and hoodie.properties (no Spark)."""

import json
import multiprocessing as mp
import os
import re
import threading
import time
import zlib

import pytest

from hudilite.config import TableConfig, table_checksum
from hudilite.errors import CorruptTableError, LockTimeoutError, TableNotFoundError, UnsupportedTableError
from hudilite.lock.file_lock import FileLock
from hudilite.table import HoodieTable
from hudilite.timeline import COMMIT, COMPLETED, INFLIGHT, REPLACE_COMMIT, REQUESTED, Instant
from hudilite.timeline.instant import parse_instant_file
from hudilite.timeline.instant_time import (format_instant, next_instant_time, normalize_instant_arg,
                                            parse_instant)
from hudilite.writer.transaction import Transaction


def _config(name="t"):
    return TableConfig.new(name=name, table_type="COPY_ON_WRITE", record_key_fields=["id"],
                           precombine_field="ts", partition_fields=["p"], hive_style=True, create_schema=None)


def test_instant_file_names_layout1_and_2():
    assert parse_instant_file("20240101000000000.commit") == Instant("20240101000000000", COMMIT, COMPLETED)
    assert parse_instant_file("20240101000000000.inflight") == Instant("20240101000000000", COMMIT, INFLIGHT)
    assert parse_instant_file("20240101000000000.commit.requested").state == REQUESTED
    assert parse_instant_file("20240101000000000.replacecommit").action == REPLACE_COMMIT
    assert parse_instant_file("hoodie.properties") is None
    assert parse_instant_file("20240101000000000_20240101000000500.commit") is None  # layout 2 name in layout 1
    i2 = parse_instant_file("20240101000000000_20240101000000500.commit", layout=2)
    assert i2.completion == "20240101000000500" and i2.is_completed
    assert parse_instant_file("20240101000000000.commit", layout=2) is None
    for inst in (Instant("20240101000000000", COMMIT, INFLIGHT), Instant("20240101000000000", "deltacommit", REQUESTED),
                 Instant("20240101000000000", REPLACE_COMMIT, COMPLETED)):
        assert parse_instant_file(inst.file_name(1)) == inst


def test_instant_time_format_and_monotonic():
    t = format_instant(1_700_000_000_123)
    assert t == "20231114221320123" and parse_instant(t) == 1_700_000_000_123
    assert next_instant_time("29991231235959998") == "29991231235959999"  # never smaller than the newest
    assert next_instant_time(None, clock=lambda: 1_700_000_000_123) == t
    assert normalize_instant_arg(1_700_000_000) == "20231114221320000"
    assert normalize_instant_arg("2023-11-14T22:13:20.123Z") == t
    assert normalize_instant_arg("20231114221320") == "20231114221320000"
    with pytest.raises(ValueError):
        normalize_instant_arg("yesterday")


def test_properties_roundtrip_and_checksum(tmp_path):
    cfg = _config("orders")
    text = cfg.serialize()
    parsed = TableConfig.parse(text)
    assert parsed.props["hoodie.table.checksum"] == str(zlib.crc32(b"default.orders") & 0xFFFFFFFF)
    assert parsed.record_key_fields == ["id"] and parsed.precombine_field == "ts" and parsed.hive_style
    assert parsed.merge_mode == "EVENT_TIME_ORDERING"
    with pytest.raises(CorruptTableError, match="hoodie.table.type"):
        TableConfig.parse("hoodie.table.name=x\nhoodie.table.version=6\n")
    with pytest.raises(CorruptTableError, match="malformed"):
        TableConfig.parse("garbage line without equals\n")


def test_checksum_matches_java_written_table(shared_dir, tmp_path):
    import zipfile

    z = os.path.join(shared_dir, "hudi-tables", "sample_table", "cow", "v6_nonpartitioned.zip")
    if not os.path.exists(z):
        pytest.skip("shared tables not available")
    with zipfile.ZipFile(z) as zf:
        zf.extractall(tmp_path)
    cfg = HoodieTable.open(str(tmp_path / "v6_nonpartitioned")).config
    assert int(cfg.props["hoodie.table.checksum"]) == table_checksum(cfg.props["hoodie.database.name"], cfg.name)


def test_open_errors(tmp_path):
    with pytest.raises(TableNotFoundError, match="does not exist"):
        HoodieTable.open(str(tmp_path / "nope"))
    (tmp_path / "plain").mkdir()
    with pytest.raises(TableNotFoundError, match="hoodie.properties is missing"):
        HoodieTable.open(str(tmp_path / "plain"))
    t = HoodieTable.create(str(tmp_path / "t"), _config())
    props = os.path.join(t.meta_path, "hoodie.properties")
    text = re.sub(r"hoodie\.table\.version=\d+", "hoodie.table.version=5", open(props).read())
    open(props, "w").write(text)
    with pytest.raises(UnsupportedTableError, match="version 5"):
        HoodieTable.open(t.base_path)


def test_transaction_start_and_complete_put_if_absent(tmp_path):
    t = HoodieTable.create(str(tmp_path / "t"), _config())
    txn = Transaction(t)
    a = txn.start()
    b = txn.start()
    assert b.timestamp > a.timestamp
    assert {i.timestamp for i in t.reload().pending()} == {a.timestamp, b.timestamp}
    c = txn.complete(a, {"partitionToWriteStats": {}})
    assert c > b.timestamp  # completion time is later than every instant requested before
    from hudilite.errors import CommitConflictError

    with pytest.raises(CommitConflictError):
        txn.complete(a, {"partitionToWriteStats": {}})
    md = t.reload().read_metadata(t.timeline.completed()[0])
    assert md["extraMetadata"]["hudilite.completion.time"] == c


def test_file_lock_is_exclusive_and_breaks_expired_lease(tmp_path):
    path = str(tmp_path / "lock")
    held, order = threading.Event(), []
    a = FileLock(path, lease_ms=60_000)
    a.acquire()

    def contender():
        b = FileLock(path, lease_ms=60_000, timeout_ms=5_000)
        b.acquire()
        order.append("b")
        b.release()

    th = threading.Thread(target=contender)
    th.start()
    time.sleep(0.3)
    order.append("a-release")
    a.release()
    th.join()
    assert order == ["a-release", "b"]
    # a holder that died: its lease expires and the lock is taken over
    with open(path, "w") as f:
        json.dump({"owner": "dead", "expires_ms": int(time.time() * 1000) - 1}, f)
    c = FileLock(path, lease_ms=1_000, timeout_ms=5_000)
    c.acquire()
    assert "dead" not in open(path).read()
    c.release()
    # a live holder is never broken
    d = FileLock(path, lease_ms=60_000)
    d.acquire()
    with pytest.raises(LockTimeoutError):
        FileLock(path, lease_ms=60_000, timeout_ms=300).acquire()
    d.release()


def _take_instants(base_path: str, n: int, q) -> None:
    t = HoodieTable.open(base_path)
    txn = Transaction(t, {"hoodie.write.instant.max.clock.skew.ms": "1"})
    q.put([txn.start().timestamp for _ in range(n)])


def test_instants_are_unique_and_increasing_across_processes(tmp_path):
    t = HoodieTable.create(str(tmp_path / "t"), _config())
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=_take_instants, args=(t.base_path, 15, q)) for _ in range(4)]
    for p in procs:
        p.start()
    results = [q.get(timeout=120) for _ in procs]
    for p in procs:
        p.join()
    flat = [x for r in results for x in r]
    assert len(flat) == len(set(flat)) == 60
    for r in results:
        assert r == sorted(r) and len(set(r)) == len(r)
    on_disk = [i.timestamp for i in t.reload().instants]
    assert sorted(on_disk) == sorted(flat)
