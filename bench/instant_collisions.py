"""Instant-time collisions between concurrent writers: the birthday effect of local-clock timestamps, and none
with hudilite's instant generation.

    python -m bench.instant_collisions                    # 16 processes x 200 commits each
    python -m bench.instant_collisions --procs 8 --commits 50

(a) naive: each process takes its instant times from its local clock in Apache Hudi's format
    (yyyyMMddHHmmssSSS, milliseconds), strictly increasing within the process (as Hudi's instant generator:
    the next millisecond after its own last one), no lock, and writes requested / inflight / completed files
    into one shared `.hoodie` with plain file writes. A collision: two processes took the same instant time
    (the later commit file overwrites the earlier: a lost commit).
(b) hudilite: the same processes commit to one table through `Transaction.start / mark_inflight / complete`
    (the table lock, the clock-skew wait and put-if-absent instant files: the path every hudilite write takes).
    The commits carry no data files (metadata naming the writer and sequence number only): the instant-time
    allocation and the commit protocol are what is measured, not file writing.

Every run checks its result and exits non-zero when (b) shows a duplicate instant, a lost or damaged commit,
an instant that does not increase with its writer's completion order, or a completion time not after its
instant.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import sys
import tempfile
import time
from collections import Counter

SPAWN = mp.get_context("spawn")
OPTIONS = {"hoodie.write.concurrency.mode": "optimistic_concurrency_control", "hoodie.write.fsync": "false"}


def _make_table(path: str) -> None:
    import pyarrow as pa

    from hudilite.config import TableConfig
    from hudilite.schema import arrow_to_avro, avro_to_json
    from hudilite.table import HoodieTable

    schema = pa.schema([("id", pa.int64()), ("v", pa.int64())])
    cfg = TableConfig.new(name="t", table_type="COPY_ON_WRITE", record_key_fields=["id"], precombine_field="v",
                          partition_fields=[], hive_style=True, create_schema=avro_to_json(arrow_to_avro(schema, "t")))
    HoodieTable.create(path, cfg)


def _metadata(wid: int, seq: int) -> dict:
    return {"partitionToWriteStats": {}, "compacted": False, "operationType": "UPSERT",
            "extraMetadata": {"writer": str(wid), "seq": str(seq)}}


def _worker(path: str, mode: str, n: int, barrier, out: str, wid: int) -> None:
    from hudilite.timeline.instant_time import format_instant, now_ms

    records = []
    barrier.wait()
    if mode == "hudilite":
        from hudilite.table import HoodieTable
        from hudilite.writer.transaction import Transaction

        txn = Transaction(HoodieTable.open(path), OPTIONS)
        for i in range(n):
            inst = txn.start()
            txn.mark_inflight(inst, {})
            completion = txn.complete(inst, _metadata(wid, i))
            records.append((inst.timestamp, completion))
    else:
        meta = os.path.join(path, ".hoodie")
        last = 0
        for i in range(n):
            last = max(now_ms(), last + 1)  # the local clock, the next ms after this process's last instant
            t = format_instant(last)
            for name, body in ((f"{t}.commit.requested", b""), (f"{t}.inflight", b"{}"),
                               (f"{t}.commit", json.dumps(_metadata(wid, i)).encode())):
                with open(os.path.join(meta, name), "wb") as f:
                    f.write(body)
            records.append((t, t))
    with open(out, "w") as f:
        json.dump(records, f)


def run(workdir: str, mode: str, procs: int, commits: int) -> dict:
    """`procs` processes x `commits` commits each into one table in `workdir`; what they recorded and what
    the timeline holds afterwards."""
    from hudilite.table import HoodieTable
    from hudilite.timeline.timeline import parse_commit_metadata

    path = os.path.join(workdir, f"t-{mode}")
    _make_table(path)
    barrier = SPAWN.Barrier(procs)
    outs = [os.path.join(workdir, f"{mode}-{w}.json") for w in range(procs)]
    ps = [SPAWN.Process(target=_worker, args=(path, mode, commits, barrier, outs[w], w)) for w in range(procs)]
    t0 = time.time()
    for p in ps:
        p.start()
    for p in ps:
        p.join(1800)
        if p.exitcode != 0:
            raise RuntimeError(f"{mode} worker failed with exit code {p.exitcode}")
    seconds = time.time() - t0
    per_writer = []
    for o in outs:
        with open(o) as f:
            per_writer.append([tuple(r) for r in json.load(f)])
    owners: dict = {}
    for w, recs in enumerate(per_writer):
        for t, _c in recs:
            owners.setdefault(t, set()).add(w)
    counts = Counter(t for recs in per_writer for t, _c in recs)
    shared = sum(1 for ws in owners.values() if len(ws) > 1)
    lost = sum(c - 1 for c in counts.values() if c > 1)  # commits whose instant another commit also took
    if mode == "hudilite":  # what the timeline holds for each instant
        tl = HoodieTable.open(path).reload()
        stored = {i.timestamp: tl.read_metadata(i).get("extraMetadata") for i in tl.completed()}
    else:  # the commit files as the last writer of each name left them
        stored = {}
        for t in counts:
            try:
                with open(os.path.join(path, ".hoodie", f"{t}.commit"), "rb") as f:
                    stored[t] = parse_commit_metadata(f.read()).get("extraMetadata")
            except Exception:  # noqa: BLE001 - torn or unreadable: not intact
                pass
    intact = sum({k: (stored.get(t) or {}).get(k) for k in ("writer", "seq")} == {"writer": str(w), "seq": str(i)}
                 for w, recs in enumerate(per_writer) for i, (t, _c) in enumerate(recs))
    completed = len(stored) if mode == "hudilite" else None
    return {"mode": mode, "procs": procs, "commits": commits, "total": procs * commits, "seconds": seconds,
            "collisions": shared, "duplicate_commits": lost, "intact": intact, "timeline_completed": completed,
            "per_writer": per_writer}


def check_hudilite(r: dict) -> list[str]:
    """What is wrong with a hudilite run (empty: nothing)."""
    bad = []
    if r["collisions"] or r["duplicate_commits"]:
        bad.append(f"{r['collisions']} instant times taken by more than one writer")
    if r["intact"] != r["total"] or r["timeline_completed"] != r["total"]:
        bad.append(f"{r['intact']} intact commit files, {r['timeline_completed']} completed instants, "
                   f"of {r['total']}")
    completions = [c for recs in r["per_writer"] for _t, c in recs]
    if len(set(completions)) != len(completions):
        bad.append("duplicate completion times")
    for w, recs in enumerate(r["per_writer"]):
        if any(not t < c for t, c in recs):
            bad.append(f"writer {w}: a completion time not after its instant")
        if any(not (a[0] < b[0] and a[1] < b[1]) for a, b in zip(recs, recs[1:])):
            bad.append(f"writer {w}: instants not strictly increasing with completion order")
    return bad


def overtaken(r: dict) -> int:
    """Across writers, adjacent commits in completion order whose instants decrease: a writer that took its
    instant later completed first (allowed: readers order by completion time, Hudi 1.x's rule)."""
    order = sorted((c, t) for recs in r["per_writer"] for t, c in recs)
    return sum(1 for (_c1, t1), (_c2, t2) in zip(order, order[1:]) if t2 < t1)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--procs", type=int, default=16)
    ap.add_argument("--commits", type=int, default=200)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="hudilite-instants-") as work:
        naive = run(work, "naive", args.procs, args.commits)
        ours = run(work, "hudilite", args.procs, args.commits)
    for r in (naive, ours):
        print(f"{r['mode']:>9}: {r['procs']} processes x {r['commits']} commits = {r['total']}: "
              f"{r['collisions']} instant times taken by 2+ processes ({r['duplicate_commits']} commits sharing "
              f"another's instant), {r['intact']} commit files intact, {r['seconds']:.1f}s "
              f"({r['total'] / r['seconds']:.0f} commits/s)")
    print(f"hudilite: {overtaken(ours)} adjacent commits in completion order whose instant is smaller than the "
          "previous one's (a writer that took its instant later completed first)")
    bad = check_hudilite(ours)
    for b in bad:
        print("FAIL hudilite:", b)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
