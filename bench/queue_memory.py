"""Peak memory of writing one parquet file from an input 10x the memory limit: bounded queue vs unbounded.

    python -m bench.queue_memory          # limit 64 MiB, input 640 MiB (and 1920 MiB bounded) in 4 MiB batches
    python -m bench.queue_memory --limit-mb 32 --factor 10 --batch-mb 2 --modes bounded,unbounded

A producer thread makes fresh Arrow record batches (as a reader would) and a consumer writes them to one
parquet file (pyarrow ParquetWriter, one row group per batch), the shape of a file-group write. Each mode
runs in its own child process; peak RSS is the kernel's high-water mark (VmHWM in /proc/self/status),
the baseline is VmRSS once the libraries are imported and warmed up.

modes:
  bounded      hudilite.writer.queue.BoundedExecutor with memory_limit_bytes = the limit
  unbounded    the same producer/consumer threads with no memory limit (a plain FIFO)
  materialize  read everything, then write (no queue at all)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

MiB = 1 << 20


def _status(key: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    raise KeyError(key)


def _child(mode: str, limit: int, total: int, batch: int, out_dir: str) -> dict:
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from hudilite.writer.queue import BoundedExecutor

    rows = batch // 32  # 4 x 8-byte columns
    n_batches = max(1, total // batch)
    schema = pa.schema([("id", pa.int64()), ("a", pa.float64()), ("b", pa.float64()), ("c", pa.int64())])

    def produce():
        rng = np.random.default_rng(7)
        for i in range(n_batches):
            yield pa.record_batch([pa.array(np.arange(i * rows, (i + 1) * rows, dtype=np.int64)),
                                   pa.array(rng.random(rows)), pa.array(rng.random(rows)),
                                   pa.array(rng.integers(0, 1 << 40, rows))], schema=schema)

    # warm up pyarrow / parquet code paths, then take the baseline
    warm = os.path.join(out_dir, f"warm_{mode}.parquet")
    with pq.ParquetWriter(warm, schema) as w:
        w.write_batch(next(iter(produce())))
    os.unlink(warm)
    pa.default_memory_pool().release_unused()
    base_rss = _status("VmRSS")

    path = os.path.join(out_dir, f"{mode}.parquet")
    t = time.perf_counter()
    stats: dict = {}
    with pq.ParquetWriter(path, schema, compression="snappy", use_dictionary=False) as w:
        if mode == "bounded":
            ex = BoundedExecutor([produce()], memory_limit_bytes=limit)
            ex.run(w.write_batch)
            stats = ex.stats
        elif mode == "unbounded":
            ex = BoundedExecutor([produce()], memory_limit_bytes=1 << 62)
            ex.run(w.write_batch)
            stats = ex.stats
        elif mode == "materialize":
            w.write_table(pa.Table.from_batches(list(produce())), row_group_size=rows)
        else:
            raise ValueError(mode)
    secs = time.perf_counter() - t
    size = os.path.getsize(path)
    os.unlink(path)
    return {"mode": mode, "peak_rss": _status("VmHWM"), "base_rss": base_rss, "secs": secs, "file_bytes": size,
            "input_bytes": n_batches * rows * 32, "max_queued_items": stats.get("max_queued_items"),
            "capacity": stats.get("capacity")}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--limit-mb", type=float, default=64)
    ap.add_argument("--factor", type=float, default=10, help="input size = factor x limit")
    ap.add_argument("--batch-mb", type=float, default=4)
    ap.add_argument("--modes", default="bounded,unbounded,materialize,bounded@30",
                    help="modes to run, `mode@factor` to override the input factor for one run")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    limit, batch = int(a.limit_mb * MiB), int(a.batch_mb * MiB)
    if a.child:
        with tempfile.TemporaryDirectory(prefix="hl-bench-queue-") as d:
            print(json.dumps(_child(a.child, limit, int(limit * a.factor), batch, d)))
        return
    rows = []
    for spec in a.modes.split(","):
        mode, _, fac = spec.partition("@")
        fac = fac or str(a.factor)
        cmd = [sys.executable, "-m", "bench.queue_memory", "--child", mode, "--limit-mb", str(a.limit_mb),
               "--factor", fac, "--batch-mb", str(a.batch_mb)]
        out = subprocess.run(cmd, check=True, capture_output=True, text=True,
                             cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
    print(f"\nparquet write through a producer/consumer pair; memory limit {a.limit_mb:g} MiB; "
          f"{a.batch_mb:g} MiB Arrow batches\n")
    print(f"{'mode':<12} {'input MiB':>9} {'x limit':>7} {'peak RSS MiB':>12} {'baseline MiB':>12} "
          f"{'peak-base MiB':>13} {'/ limit':>8} {'max queued':>10} {'capacity':>8} {'secs':>6}")
    for r in rows:
        d = (r["peak_rss"] - r["base_rss"]) / MiB
        print(f"{r['mode']:<12} {r['input_bytes'] / MiB:>9.0f} {r['input_bytes'] / limit:>7.1f} "
              f"{r['peak_rss'] / MiB:>12.0f} {r['base_rss'] / MiB:>12.0f} {d:>13.0f} "
              f"{d / a.limit_mb:>8.2f} {str(r['max_queued_items'] or '-'):>10} {str(r['capacity'] or '-'):>8} "
              f"{r['secs']:>6.2f}")
    print("\npeak-base = VmHWM - VmRSS after imports; bounded = queued items (<= limit) + the batch the producer "
          "holds + the batch being written + parquet page buffers and allocator slack, flat in the input size")


if __name__ == "__main__":
    main()
