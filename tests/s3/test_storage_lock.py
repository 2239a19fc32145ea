"""The storage-based lock on a real S3 server: exclusion across threads and processes, lease renewal, expiry after
its holder is SIGKILLed, release, takeover detection, and the default provider of s3:// tables."""

import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from hudilite.errors import LockTimeoutError
from hudilite.lock import LockLostError, StorageLock, lock_for
from hudilite.lock.storage_lock import LOCK_FILE

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def _lock(fs, table, **kw):
    kw.setdefault("validity_ms", 3000)
    kw.setdefault("renew_ms", 500)
    kw.setdefault("timeout_ms", 30_000)
    return StorageLock(fs, f"{table}/{LOCK_FILE}", **kw)


def _increment(fs, counter):
    """A read-modify-write with a pause in it: two holders at once lose an update."""
    n = int(fs.read_bytes(counter))
    time.sleep(0.01)
    fs.write_bytes(counter, str(n + 1).encode())


def test_threads_exclude_each_other(s3_storage, s3_root):
    fs, counter = s3_storage, f"{s3_root}/counter"
    fs.write_bytes(counter, b"0")
    errors = []

    def worker():
        lock = _lock(fs, s3_root)
        try:
            for _ in range(5):
                with lock:
                    _increment(fs, counter)
        except Exception as e:  # surfaced below
            errors.append(e)

    threads = [threading.Thread(target=worker) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and fs.read_bytes(counter) == b"30"
    assert StorageLock.parse(fs.read_bytes(f"{s3_root}/{LOCK_FILE}"))["expired"] is True  # released


_WORKER = """
import sys, time
from hudilite.lock.storage_lock import LOCK_FILE, StorageLock
from hudilite.storage.s3 import S3Storage
endpoint, key, secret, table, mode = sys.argv[1:6]
fs = S3Storage({"endpoint": endpoint, "access_key_id": key, "secret_access_key": secret, "region": "us-east-1",
                "allow_http": "true"})
lock = StorageLock(fs, table + "/" + LOCK_FILE, validity_ms=3000, renew_ms=500, timeout_ms=60000)
if mode == "hold":
    lock.acquire()
    print("held", flush=True)
    time.sleep(600)
else:
    for _ in range(int(mode)):
        with lock:
            n = int(fs.read_bytes(table + "/counter"))
            time.sleep(0.01)
            fs.write_bytes(table + "/counter", str(n + 1).encode())
"""


def _spawn(s3_server, table, mode):
    o = s3_server.storage_options
    return subprocess.Popen([sys.executable, "-c", _WORKER, o["endpoint"], o["access_key_id"],
                             o["secret_access_key"], table, mode], cwd=ROOT, stdout=subprocess.PIPE, text=True)


def test_processes_exclude_each_other(s3_server, s3_storage, s3_root):
    s3_storage.write_bytes(f"{s3_root}/counter", b"0")
    procs = [_spawn(s3_server, s3_root, "5") for _ in range(4)]
    try:
        assert [p.wait(timeout=120) for p in procs] == [0, 0, 0, 0]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert s3_storage.read_bytes(f"{s3_root}/counter") == b"20"


@pytest.mark.parametrize("holder_known", [True, False], ids=["same-host", "other-host"])
def test_lease_is_renewed_and_expires_after_the_holder_is_killed(s3_server, s3_storage, s3_root, holder_known):
    holder = _spawn(s3_server, s3_root, "hold")
    try:
        assert holder.stdout.readline().strip() == "held"
        # alive, it renews: not free even after more than a lease (3 s) of waiting
        with pytest.raises(LockTimeoutError, match="held by"):
            _lock(s3_storage, s3_root, timeout_ms=4500).acquire()
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait()
        killed = time.monotonic()
        key = f"{s3_root}/{LOCK_FILE}"
        state = json.loads(s3_storage.read_bytes(key))
        assert " process=" in state["owner"] and f"/{holder.pid}/" in state["owner"]
        if not holder_known:  # as another machine's holder (another boot id): only its lease tells
            owner, ident = state["owner"].rsplit(" process=", 1)
            state["owner"] = f"{owner} process={'0' * 8}{ident[8:]}"
            s3_storage.write_bytes(key, json.dumps(state).encode())
        lock = _lock(s3_storage, s3_root)
        lock.acquire()
        waited = time.monotonic() - killed
        lock.release()
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
    if holder_known:  # its process is gone: taken at once, not after the lease
        assert waited < 1.5, waited
    else:  # free once the last renewal's lease (up to 3 s) and the clock margin ran out, not much later
        assert 0.5 < waited < 10, waited


def test_a_lock_taken_over_is_reported_lost(s3_storage, s3_root):
    slow = _lock(s3_storage, s3_root, validity_ms=1000, renew_ms=900)
    slow.acquire()
    slow._stop.set()  # its renewer stops, as in a process that stalls
    slow._renewer.join()
    time.sleep(1.3)  # lease and margin ran out
    other = _lock(s3_storage, s3_root, timeout_ms=5000)
    other.acquire()
    with pytest.raises(LockLostError, match="another writer took it"):
        slow.verify()
    slow.release()  # does not touch the new holder's lock
    assert other.verify() > time.time() * 1000
    state = StorageLock.parse(s3_storage.read_bytes(f"{s3_root}/{LOCK_FILE}"))
    assert state["owner"] == other.owner and not state["expired"]
    other.release()


def test_verify_extends_the_lease(s3_storage, s3_root):
    lock = _lock(s3_storage, s3_root)
    with lock:
        first = StorageLock.parse(s3_storage.read_bytes(f"{s3_root}/{LOCK_FILE}"))["validUntil"]
        time.sleep(0.05)
        until = lock.verify()
        assert until > first
        assert StorageLock.parse(s3_storage.read_bytes(f"{s3_root}/{LOCK_FILE}"))["validUntil"] == until


def test_default_provider_of_s3_tables(s3_server, s3_root):
    from hudilite.storage.base import register_storage
    from hudilite.storage.s3 import S3Storage, register

    register_storage("s3", lambda _scheme: S3Storage(s3_server.storage_options))
    try:
        lock = lock_for(s3_root, {"hoodie.write.lock.storage.validity.timeout.secs": "7"})
        assert isinstance(lock, StorageLock) and (lock.validity_ms, lock.renew_ms) == (7000, 2333)
        assert lock.path == f"{s3_root}/.hoodie/.locks/table_lock.json"
        with lock:
            pass
        by_name = lock_for(s3_root, {"hoodie.write.lock.provider":
                                     "org.apache.hudi.client.transaction.lock.StorageBasedLockProvider"})
        assert isinstance(by_name, StorageLock)
    finally:
        register()  # back to the environment's configuration
