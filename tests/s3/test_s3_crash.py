"""The SIGKILL crash test on s3:// tables against the real S3 server (the storage lock, the default there, and
driver-local Arrow writes): a writer process committing upsert after upsert is SIGKILLed at a random point; the
snapshot is then the one before or after its last write (also for hudi-rs), the next write rolls the dead one
back and commits, and after a clean no object of the dead write is left (every data object is named in a
completed commit's metadata). Follows tests/functional/test_crash.py, without Spark; a few kills, lean.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time

import pytest

import hudilite
from hudilite.storage.s3 import S3Storage
from tests.s3.tables import FAST, KEY, data_objects, hudi_rs_snapshot, rows, snapshot

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


# ------------------------------------------------------------------------------------------------
# SIGKILL at a random point of a stream of upserts
def crash_batch(k: int):
    """Upsert k (k >= 1): updates 10 existing keys and inserts 5 new ones."""
    return rows(list(range(k * 5, k * 5 + 10)) + list(range(1000 + 5 * k, 1005 + 5 * k)), k)


def crash_state(k: int) -> list[tuple]:
    """The table after the initial insert (keys 0..29, v=0) and upserts 1..k."""
    state = {i: 0 for i in range(30)}
    for j in range(1, k + 1):
        state.update({i: j for i in crash_batch(j).column("id").to_pylist()})
    return sorted(state.items())


_CRASH_WRITER = """
import json, sys
from tests.s3.tables import FAST
from tests.s3.test_s3_crash import crash_batch
import hudilite
path, opts, log = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
t = hudilite.Table.open(path, options=FAST, storage_options=opts)
print("ready", flush=True)
for k in range(1, 1000):
    t.write(crash_batch(k), "upsert")
    with open(log, "a") as f:
        f.write(f"{k}\\n")
"""


@pytest.mark.parametrize("seed,table_type", [(1, "COPY_ON_WRITE"), (2, "MERGE_ON_READ"), (3, "COPY_ON_WRITE")])
def test_sigkill_at_a_random_point(s3_server, s3_bucket, tmp_path, seed, table_type):
    opts = s3_server.storage_options
    path = f"s3://{s3_bucket}/t"
    t = hudilite.Table.create(path, **KEY, table_type=table_type, options=FAST, storage_options=opts)
    t.write(rows(range(30), 0), "insert")
    log = tmp_path / "done"
    log.touch()
    proc = subprocess.Popen([sys.executable, "-c", _CRASH_WRITER, path, json.dumps(opts), str(log)], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready", proc.stdout.read()
        time.sleep(random.Random(seed).uniform(0.2, 4.0))  # several commits take about a second each here
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    assert proc.returncode == -signal.SIGKILL
    done = len(log.read_text().split())
    # the kill may fall between a commit and its log line: the write after the last logged one may be in
    seen = snapshot(path)
    assert seen in (crash_state(done), crash_state(done + 1)), f"after {done} logged commits: a torn snapshot"
    assert hudi_rs_snapshot(path, opts) == seen
    committed = done + (seen == crash_state(done + 1) and seen != crash_state(done))
    dead = [i.timestamp for i in hudilite.Table.open(path, storage_options=opts).timeline.pending()]

    time.sleep(1.5)  # the dead writer's heartbeat expires (500 ms x 2 misses): the next write rolls it back
    t = hudilite.Table.open(path, options=FAST, storage_options=opts)
    nxt = t.write(rows(range(25, 35), 500), "upsert")
    want = dict(crash_state(committed)) | {i: 500 for i in range(25, 35)}
    assert snapshot(path) == sorted(want.items())
    tl = t.timeline
    assert not tl.pending(), f"left pending: {tl.pending()}"
    assert all(i.timestamp != d for i in tl.completed() for d in dead)
    times = [i.timestamp for i in tl.completed()]
    assert times == sorted(times) and times[-1] == nxt

    if table_type == "MERGE_ON_READ":
        assert t.services.compact(force=True)
    t.services.clean({"hoodie.cleaner.policy": "KEEP_LATEST_FILE_VERSIONS",
                      "hoodie.cleaner.fileversions.retained": "1"})
    # no orphan: every data object is one a completed commit wrote, none is the dead write's
    tl = hudilite.Table.open(path, storage_options=opts).timeline
    written = {f"{path}/{s['path']}" for i in tl.completed() for stats in tl.read_metadata(i)
               .get("partitionToWriteStats", {}).values() for s in stats}
    store = S3Storage(opts)
    objs = data_objects(store, path)
    assert objs and set(objs) <= written, f"orphans: {sorted(set(objs) - written)}"
    assert not [f for f in store.walk_files(path) if any(d in f for d in dead) and "/.hoodie/" not in f]
    assert snapshot(path) == sorted(want.items())


