"""Merge-on-read upserts by 4 concurrent writers on overlapping file groups: non-blocking concurrency control
(NBCC) vs optimistic concurrency control (OCC), on a version-9 table.

    python -m bench.nbcc                                   # small: 4 writers x 6 commits of 200 of 2000 keys
    python -m bench.nbcc --writers 4 --commits 10 --keys 20000 --upsert 2000 --repeat 3

A table of `--keys` rows in 2 partitions (one file group each: every writer touches every group); then
`--writers` processes each commit `--commits` upserts of `--upsert` random keys (Arrow writes, no Spark),
retrying a CommitConflictError until it commits. Reported per mode, median over `--repeat` runs: committed
writes per minute (wall clock, all writers), conflicts (= retries) and the wall time. Each run checks that the
snapshot is the per-key max-ordering-value oracle and exits non-zero otherwise.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import queue
import random
import shutil
import statistics
import sys
import tempfile
import time

import pyarrow as pa

V9 = {"hoodie.write.table.version": "9"}
MODES = {"nbcc": "non_blocking_concurrency_control", "occ": "optimistic_concurrency_control"}
LAYOUT = dict(record_key="id", precombine_field="ts", partition_by="region")


def _arrow(rows) -> pa.Table:
    return pa.table({"id": pa.array([r[0] for r in rows], pa.int64()), "ts": pa.array([r[1] for r in rows], pa.int64()),
                     "payload": pa.array([r[2] for r in rows], pa.string()),
                     "region": pa.array(["eu" if r[0] % 2 else "us" for r in rows], pa.string())})


def _writer(path, mode, w, commits, keys, upsert, seed, out) -> None:
    import hudilite
    from hudilite.errors import CommitConflictError

    rng = random.Random(seed)
    opts = {**V9, "hoodie.write.concurrency.mode": mode}
    written, conflicts = [], 0
    for c in range(commits):
        # ordering values unique per (writer, commit): the oracle has no ties
        rows = [(k, rng.randrange(1, 10**6) * 1024 + c * 16 + w, f"w{w}c{c}-{k}")
                for k in rng.sample(range(keys), upsert)]
        while True:
            try:
                hudilite.write(_arrow(rows), path, **LAYOUT, options=opts)
                break
            except CommitConflictError:
                conflicts += 1
        written.append(rows)
    out.put((w, written, conflicts))


def run_once(work: str, mode: str, writers: int, commits: int, keys: int, upsert: int, seed: int) -> dict:
    import hudilite
    from hudilite.reader.merge import SliceDesc, merge_slice
    from hudilite.reader.planner import plan_read

    path = os.path.join(work, mode)
    shutil.rmtree(path, ignore_errors=True)
    initial = [(k, 0, "init") for k in range(keys)]
    hudilite.write(_arrow(initial), path, **LAYOUT, operation="insert", table_type="MERGE_ON_READ",
                   options={**V9, "hoodie.write.concurrency.mode": MODES[mode]})
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=_writer, args=(path, MODES[mode], w, commits, keys, upsert, seed * 100 + w, q))
             for w in range(writers)]
    t0 = time.monotonic()
    for p in procs:
        p.start()
    results = []
    while len(results) < len(procs):
        try:
            results.append(q.get(timeout=1))
        except queue.Empty:
            failed = [p.exitcode for p in procs if p.exitcode not in (None, 0)]
            if failed:
                raise RuntimeError(f"{mode}: a writer failed (exit codes {failed}; its error is above)") from None
    wall = time.monotonic() - t0
    for p in procs:
        p.join()
    best = {r[0]: r for r in initial}
    for _, written, _ in results:
        for rows in written:
            for r in rows:
                if r[1] > best[r[0]][1]:
                    best[r[0]] = r
    plan = plan_read(path)
    spec = plan.merge_spec()
    got = pa.concat_tables([merge_slice(SliceDesc.of(s), spec) for s in plan.slices])
    ok = sorted(zip(*(got.column(c).to_pylist() for c in ("id", "ts", "payload")))) == sorted(best.values())
    n = writers * commits
    return {"mode": mode, "commits": n, "wall_s": round(wall, 2), "commits_per_min": round(n * 60 / wall, 1),
            "conflicts": sum(c for _, _, c in results), "ok": ok}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--writers", type=int, default=4)
    ap.add_argument("--commits", type=int, default=6)
    ap.add_argument("--keys", type=int, default=2000)
    ap.add_argument("--upsert", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--work-dir", default=None)
    ap.add_argument("--modes", default="nbcc,occ", help="comma-separated: nbcc, occ")
    a = ap.parse_args(argv)
    work = a.work_dir or tempfile.mkdtemp(prefix="hudilite-nbcc-")
    runs = [run_once(work, mode, a.writers, a.commits, a.keys, a.upsert, a.seed + i)
            for i in range(a.repeat) for mode in a.modes.split(",")]
    summary = {}
    for mode in a.modes.split(","):
        rs = [r for r in runs if r["mode"] == mode]
        summary[mode] = {k: round(statistics.median(r[k] for r in rs), 1)
                         for k in ("commits_per_min", "conflicts", "wall_s")}
    print(json.dumps({"runs": runs, "median": summary}, indent=2))
    if a.work_dir is None:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if all(r["ok"] for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
