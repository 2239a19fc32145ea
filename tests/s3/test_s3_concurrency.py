"""Multi-process concurrency on s3:// tables against the real S3 server (the storage lock, the default there, and
driver-local Arrow writes): writers of disjoint partitions all commit; writers of the same file group that all
wrote before any completed: exactly one wins, the others fail with the conflict error and roll their own files
back; instant and completion times stay unique and ordered. Follows tests/functional/test_concurrency.py.
"""

from __future__ import annotations

import json
import multiprocessing as mp

import hudilite
from hudilite.errors import CommitConflictError
from hudilite.storage.s3 import S3Storage
from tests.s3.tables import KEY, LEASE, data_objects, hudi_rs_snapshot, rows, snapshot

SPAWN = mp.get_context("spawn")


# ------------------------------------------------------------------------------------------------
# several writer processes at once
def _writer(path: str, opts: dict, batch, barrier, out: str) -> None:
    """Write `batch` without completing, wait for the others to have written too, then complete: all writers
    plan against the same table state, so overlapping ones must conflict."""
    # the default heartbeat: a pending write of a process starved of CPU here must not look dead to the others
    t = hudilite.Table.open(path, options=LEASE, storage_options=opts)
    pending = t.write(batch, "upsert", commit=False)
    barrier.wait(120)
    try:
        pending.complete()
        res = {"instant": pending.instant_time, "ok": True}
    except CommitConflictError as e:
        res = {"instant": pending.instant_time, "ok": False, "error": str(e), "retryable": e.retryable}
    with open(out, "w") as f:
        json.dump(res, f)


def _run_writers(tmp_path, path, opts, batches) -> list[dict]:
    barrier = SPAWN.Barrier(len(batches))
    outs = [str(tmp_path / f"w{i}.json") for i in range(len(batches))]
    ps = [SPAWN.Process(target=_writer, args=(path, opts, b, barrier, o)) for b, o in zip(batches, outs)]
    for p in ps:
        p.start()
    for p in ps:
        p.join(300)
        assert p.exitcode == 0, f"writer failed with {p.exitcode}"
    res = []
    for o in outs:
        with open(o) as f:
            res.append(json.load(f))
    return res


def _check_timeline(path, opts):
    """No pending instant; instant and completion times unique across the processes, each completion after
    its instant, completion times increasing along the timeline's completion order (the lock and the
    clock-skew wait)."""
    tl = hudilite.Table.open(path, storage_options=opts).timeline
    assert not tl.pending()
    done = tl.completed()
    times = [i.timestamp for i in done]
    completions = [tl.completion_time(i) for i in done]
    assert len(set(times)) == len(times) and len(set(completions)) == len(completions)
    assert all(t < c for t, c in zip(times, completions))
    return times


def test_processes_on_disjoint_partitions_all_commit(s3_server, s3_bucket, tmp_path):
    opts = s3_server.storage_options
    path = f"s3://{s3_bucket}/t"
    t = hudilite.Table.create(path, **KEY, options=LEASE, storage_options=opts)
    t.write(rows(range(4), 0, "seed"), "insert")
    batches = [rows(range(100 * w, 100 * w + 5), 1, f"w{w}") for w in range(4)]
    res = _run_writers(tmp_path, path, opts, batches)
    assert all(r["ok"] for r in res), res
    mine = {r["instant"] for r in res}
    assert len(mine) == 4
    done = _check_timeline(path, opts)
    assert mine <= set(done)
    assert snapshot(path) == sorted([(i, 0) for i in range(4)] + [(100 * w + k, 1) for w in range(4) for k in range(5)])


def test_processes_on_one_file_group_exactly_one_wins(s3_server, s3_bucket, tmp_path):
    opts = s3_server.storage_options
    path = f"s3://{s3_bucket}/t"
    t = hudilite.Table.create(path, **KEY, options=LEASE, storage_options=opts)
    t.write(rows(range(10), 0, "x"), "insert")  # one file group in partition x
    batches = [rows([w, 20 + w], 10 + w, "x") for w in range(3)]  # each updates a key of that group
    res = _run_writers(tmp_path, path, opts, batches)
    winners = [r for r in res if r["ok"]]
    losers = [r for r in res if not r["ok"]]
    assert len(winners) == 1, res
    for r in losers:
        assert "conflict" in r["error"] and winners[0]["instant"] in r["error"] and r["retryable"], r["error"]
    done = _check_timeline(path, opts)
    assert not ({r["instant"] for r in losers} & set(done))
    w = res.index(winners[0])
    assert snapshot(path) == sorted(({i: 0 for i in range(10)} | {w: 10 + w, 20 + w: 10 + w}).items())
    # the losers rolled their files back
    for f in data_objects(S3Storage(opts), path):
        assert not any(r["instant"] in f for r in losers), f
    assert hudi_rs_snapshot(path, opts) == snapshot(path)
    assert winners[0]["instant"] in done
