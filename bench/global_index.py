"""Global vs partition-scoped index: one upsert of `--b` keys (a share of them moving to another partition) into a
table of `--n` rows, with `hoodie.index.type=BLOOM` (partition-scoped, hudilite's default) and `GLOBAL_BLOOM`,
in one process and one run.

    python -m bench.global_index --n 2000000 --b 100000 --move 0.1 --repeat 3

The table is loaded once (bulk_insert of Arrow batches: ids 0..n-1, 10 day partitions of consecutive ids, so
each partition's files have disjoint key ranges, as auto-increment keys give); every repetition upserts into a
fresh copy of it, the two indexes alternating first. The upsert batch is random stored ids (so the ranges of
nearly every file cover some incoming key: the global lookup reads the stored keys of almost all files - its
worst case) with a higher version; `--move` of them name another day. Both writes are the driver-local Arrow
write (hudilite/writer/local.py), which runs the same lookup, planning and merges as the Spark write without
its job overheads. Reports the median seconds per index and the ratio global / partition-scoped, plus a check
(untimed): the global table holds each key once, the partition-scoped one holds the moved keys twice.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

DAYS = 10


def _rows(ids: np.ndarray, version: int, days: np.ndarray) -> pa.Table:
    return pa.table({
        "id": pa.array(ids, pa.int64()),
        "version": pa.array(np.full(len(ids), version, dtype=np.int64)),
        "dt": pa.array([f"2024-01-{d + 1:02d}" for d in days.tolist()], pa.string()),
        "amount": pa.array((ids % 997).astype(np.float64)),
        "payload": pa.array([f"p{i:012d}" for i in ids.tolist()], pa.string()),
    })


def _write(data, path, operation, index):
    import hudilite

    return hudilite.write(data, str(path), record_key="id", precombine_field="version", partition_by=("dt",),
                          operation=operation, options={"hoodie.index.type": index})


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=2_000_000, help="rows in the table")
    ap.add_argument("--b", type=int, default=100_000, help="keys in the upsert")
    ap.add_argument("--move", type=float, default=0.1, help="share of the upserted keys that change partition")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--work-dir", default=None)
    args = ap.parse_args(argv)
    work = Path(args.work_dir or tempfile.mkdtemp(prefix="hl_bench_gi_"))
    base = work / "base"
    shutil.rmtree(base, ignore_errors=True)
    rng = np.random.default_rng(7)
    n, b = args.n, args.b
    day_of = lambda ids: (ids * DAYS // n).astype(np.int64)  # noqa: E731 - consecutive ids share a day
    t0 = time.perf_counter()
    step = 500_000
    for lo in range(0, n, step):
        ids = np.arange(lo, min(lo + step, n), dtype=np.int64)
        _write(_rows(ids, 1, day_of(ids)), base, "bulk_insert", "BLOOM")
    load_s = time.perf_counter() - t0
    ids = np.sort(rng.choice(n, size=b, replace=False)).astype(np.int64)
    days = day_of(ids)
    moving = rng.random(b) < args.move
    days[moving] = (days[moving] + 1 + rng.integers(0, DAYS - 1, int(moving.sum()))) % DAYS
    upsert = _rows(ids, 2, days)
    times = {"BLOOM": [], "GLOBAL_BLOOM": []}
    checks = {}
    for rep in range(args.repeat):
        order = ["BLOOM", "GLOBAL_BLOOM"] if rep % 2 == 0 else ["GLOBAL_BLOOM", "BLOOM"]
        for index in order:
            path = work / f"t_{index}"
            shutil.rmtree(path, ignore_errors=True)
            shutil.copytree(base, path, symlinks=True)
            t = time.perf_counter()
            res = _write(upsert, path, "upsert", index)
            times[index].append(time.perf_counter() - t)
            if rep == 0:
                checks[index] = {k: res.stats[k] for k in ("inserted", "updated", "deleted")}
                checks[index]["rows"] = _count_rows(path)
            shutil.rmtree(path, ignore_errors=True)
    med = {k: statistics.median(v) for k, v in times.items()}
    out = {
        "n": n, "b": b, "moved": int(moving.sum()), "repeat": args.repeat, "load_s": round(load_s, 2),
        "upsert_s": {k: [round(x, 3) for x in v] for k, v in times.items()},
        "median_s": {k: round(v, 3) for k, v in med.items()},
        "ratio_global_over_partition": round(med["GLOBAL_BLOOM"] / med["BLOOM"], 2),
        "checks": checks,
        "check_ok": checks["GLOBAL_BLOOM"]["rows"] == n and checks["BLOOM"]["rows"] == n + int(moving.sum()),
    }
    print(json.dumps(out, indent=1))
    if not args.work_dir:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if out["check_ok"] else 1


def _count_rows(path: Path) -> int:
    """Rows of the latest snapshot (copy-on-write: the latest base files), read without Spark."""
    import hudilite

    return hudilite.Table.open(str(path)).to_arrow(["id"]).num_rows


if __name__ == "__main__":
    raise SystemExit(main())
