"""Which lock holders a taker may judge by their process (`hudilite.lock.base.process_gone`): only one on
this kernel and in this pid namespace, and then only when its pid names no process, a zombie, or another
(later) process."""

import json
import os
import subprocess
import time

from hudilite.lock import FileLock
from hudilite.lock.base import process_gone, process_identity


def _child_identity(p) -> str:
    mine = process_identity()
    where = mine.rsplit("/", 2)[0]
    with open(f"/proc/{p.pid}/stat") as f:
        start = f.read().rsplit(")", 1)[1].split()[19]
    return f"{where}/{p.pid}/{start}"


def test_a_running_process_is_not_gone_and_an_ended_one_is():
    me = process_identity()
    assert me and not process_gone(me)
    p = subprocess.Popen(["sleep", "30"])
    try:
        ident = _child_identity(p)
        assert not process_gone(ident)
        p.kill()
        deadline = time.time() + 10  # killed, not reaped yet: a zombie, gone all the same
        while not process_gone(ident):
            assert time.time() < deadline
            time.sleep(0.01)
    finally:
        p.kill()
        p.wait()
    assert process_gone(ident)  # reaped: no such pid


def test_a_reused_pid_and_unknowable_holders():
    me = process_identity()
    where, pid, start = me.rsplit("/", 2)
    assert process_gone(f"{where}/{pid}/{int(start) + 1}")  # this pid, but a process started at another time
    assert not process_gone(f"{'0' * 8}{where[8:]}/{pid}/{int(start) + 1}")  # another kernel (boot id)
    assert not process_gone(f"{where.rsplit('/', 1)[0]}/pid:[1]/{pid}/{int(start) + 1}")  # another namespace
    for bad in (None, "", "x", "a/b/c", f"{where}/notapid/1"):
        assert not process_gone(bad)


def test_the_lock_file_names_the_holding_process(tmp_path):
    lk = FileLock(str(tmp_path / "table.lock"), lease_ms=60_000)
    lk.acquire()
    try:
        state = FileLock.read_state(lk.path)
        assert state["process"] == process_identity() == json.loads(state["raw"])["process"]
        before = os.path.getsize(lk.path)
        lk.verify()  # a renewal rewrites the same number of bytes
        assert os.path.getsize(lk.path) == before and FileLock.read_state(lk.path)["process"] == state["process"]
    finally:
        lk.release()
