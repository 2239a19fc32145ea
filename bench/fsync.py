"""The cost of durable commits (`hoodie.write.fsync`, default true): the same writes with fsync on and off.

    python -m bench.fsync                       # N=200k rows, 30 partitions, 5 repetitions
    python -m bench.fsync --n 1000000 --reps 3 --dir /data/scratch

Per repetition, in a fresh table for each mode (the modes alternate, so both see the same machine load):
copy-on-write: bulk insert of N rows, then 3 upserts of N/10 rows (merges rewrite every touched file);
merge-on-read: bulk insert, 3 upserts (log files), then a forced compaction. Driver-local Arrow writes (no
Spark job), so every file is written, fsynced and committed in this process. Reported: the median seconds per
step and mode and the on/off ratio. The directory should live on the file system
whose cost you want to know (tmpfs makes fsync free).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time

import numpy as np
import pyarrow as pa

import hudilite


def _batch(rng, ids: np.ndarray, version: int) -> pa.Table:
    n = len(ids)
    return pa.table({
        "id": pa.array(ids, pa.int64()),
        "version": pa.array(np.full(n, version), pa.int64()),
        "dt": pa.array([f"2024-01-{1 + i % 30:02d}" for i in ids.tolist()], pa.string()),
        "amount": pa.array(rng.random(n)),
        "payload": pa.array([f"p{x}" for x in rng.integers(0, 10 ** 9, n).tolist()], pa.string()),
    })


def _run(base: str, n: int, mor: bool, fsync: bool, seed: int) -> dict[str, float]:
    rng = np.random.default_rng(seed)
    opts = {"hoodie.write.fsync": str(fsync).lower(), "hoodie.parquet.max.file.size": str(4 * 2 ** 20)}
    kw = dict(record_key="id", precombine_field="version", partition_by=("dt",), options=opts,
              table_type="MERGE_ON_READ" if mor else "COPY_ON_WRITE")
    out = {}
    t0 = time.perf_counter()
    hudilite.write(_batch(rng, np.arange(n), 1), base, operation="bulk_insert", **kw)
    out["bulk_insert"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    for v in range(2, 5):
        hudilite.write(_batch(rng, rng.choice(n, n // 10, replace=False), v), base, **kw)
    out["3 upserts"] = time.perf_counter() - t0
    if mor:
        t0 = time.perf_counter()
        services = hudilite.Table.open(base).services
        services.schedule_compaction(opts, force=True)
        services.run_compaction(opts)
        out["compaction"] = time.perf_counter() - t0
    out["total"] = sum(out.values())
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=200_000)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--dir", default=None, help="parent directory of the tables (default: the temp directory)")
    a = ap.parse_args(argv)
    results: dict[tuple[str, bool], list[dict]] = {}
    for rep in range(a.reps):
        for kind in ("COW", "MOR"):
            for fsync in ((True, False) if rep % 2 == 0 else (False, True)):
                d = tempfile.mkdtemp(prefix="hudilite-fsync-", dir=a.dir)
                try:
                    results.setdefault((kind, fsync), []).append(
                        _run(f"{d}/t", a.n, kind == "MOR", fsync, seed=rep))
                finally:
                    shutil.rmtree(d, ignore_errors=True)
    print(f"N={a.n}, 30 partitions, {a.reps} repetitions; median seconds (fsync on / off = ratio)")
    for kind in ("COW", "MOR"):
        for step in results[(kind, True)][0]:
            on = statistics.median(r[step] for r in results[(kind, True)])
            off = statistics.median(r[step] for r in results[(kind, False)])
            print(f"  {kind} {step:12s} on {on:7.3f}  off {off:7.3f}  ratio {on / off:5.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
