"""The cost of the per-session worker check (hudilite.spark.session.check_workers), beside a small write.

    python -m bench.worker_check [--repeat 7]

The check is one tiny Spark job (a Python UDF over one row) the first time a SparkContext + worker interpreter
is used, cached after that. Measured with warm Python workers (as every write after the first one has them):
the probe job alone (cache cleared before each repetition), the cached check, and a 100-row `hudilite.write`
through Spark in the same session, medians over `--repeat`.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args(argv)

    import hudilite
    from hudilite.spark import session as hs
    from hudilite.spark.session import local_session

    spark = local_session("local[2]", app_name="bench-worker-check")
    df = spark.createDataFrame([(i, f"p{i % 2}", i) for i in range(100)], "id long, part string, v long")
    tmp = tempfile.mkdtemp(prefix="bench-worker-check-")
    hudilite.write(df, f"{tmp}/warm", record_key="id", partition_by=("part",))  # workers started, check cached
    probe, cached, write = [], [], []
    for i in range(args.repeat):
        hs._CHECKED.clear()
        t0 = time.perf_counter()
        hs.check_workers(spark)
        t1 = time.perf_counter()
        hs.check_workers(spark)
        t2 = time.perf_counter()
        hudilite.write(df, f"{tmp}/t{i}", record_key="id", partition_by=("part",))
        t3 = time.perf_counter()
        probe.append(t1 - t0)
        cached.append(t2 - t1)
        write.append(t3 - t2)
    m = statistics.median
    print(f"probe job {m(probe) * 1000:.0f} ms, cached check {m(cached) * 1e6:.0f} us, 100-row Spark write "
          f"{m(write) * 1000:.0f} ms (medians of {args.repeat}); the probe is {m(probe) / m(write):.0%} of one "
          "small write, paid once per SparkContext and worker interpreter")
    spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
