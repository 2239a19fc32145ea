"""Spark's native parquet scan over s3a:// (hadoop-aws in the session's JVM) vs the Arrow scan in Spark tasks (the
fallback without hadoop-aws), on the same s3:// table of a SeaweedFS server on loopback, in one session and run.

    python -m bench.s3_scan --n 1000000 --b 100000 --repeat 3

The table: bench/run.py's workload loaded (bulk_insert) and upserted once through Spark. Steps, alternating the
two scans per repetition: the snapshot scan + aggregate of bench/run.py, and the incremental read of the upsert.
The session's JVM gets hadoop-aws and the AWS SDK jars of tests/s3/s3a_jars.py (fetched once by Maven into a
cache, as the tests do) and the `spark.hadoop.fs.s3a.*` settings of the test server (docs/storage.md, "The
native s3a scan"); the Arrow scan is the same session with the scheme lookup answered "none".
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from bench import data as bdata
from bench import run as brun
from bench.s3 import HudiliteS3
from hudilite.spark import files as spark_files
from hudilite.storage import bind_storage_options
from tests.s3.fixtures import s3a_conf
from tests.s3.server import SeaweedServer

BUCKET = "hudilite-bench-scan"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    bdata.add_workload_args(p, repeat=3)
    a = p.parse_args(argv)

    w, exp, wd = bdata.stage_args(a)
    log = brun.CheckLog()
    times: dict[str, dict[str, list[float]]] = {"native": {}, "arrow": {}}
    with SeaweedServer() as srv:
        srv.create_bucket(BUCKET)
        ctx = brun.Ctx(exp, dict(brun.SPARK_CONF) | s3a_conf(srv), "light")
        ctx.start_spark(wd)
        spark = ctx.spark
        try:
            assert spark_files.jvm_scheme(spark, "s3") == "s3a", "the session's JVM has no s3a file system"
            key = (spark.sparkContext.applicationId, "s3")
            h = HudiliteS3(ctx)
            h.uri = f"s3://{BUCKET}/t"
            bind_storage_options(h.uri, srv.storage_options)
            h.load()
            h.upsert()
            for rep in range(a.repeat):
                for scan in (("native", "arrow") if rep % 2 == 0 else ("arrow", "native")):
                    spark_files._JVM_SCHEMES[key] = "s3a" if scan == "native" else None
                    for step in ("scan", "incremental"):
                        t0 = time.perf_counter()
                        extra = getattr(h, step)()
                        secs = time.perf_counter() - t0
                        times[scan].setdefault(step, []).append(secs)
                        print(f"  {scan:6s} rep {rep} {step:12s} {secs:8.3f} s", flush=True)
                        if step == "scan":
                            log.check(scan, rep, "scan aggregate", exp["final_by_status"],
                                      brun.status_summary(extra["agg_rows"]))
                        else:
                            log.check(scan, rep, "incremental rows", exp["incremental_rows"], extra["rows"])
        finally:
            spark.stop()
    print("\n==== medians (s)")
    table = {}
    for step in ("scan", "incremental"):
        nat, arr = statistics.median(times["native"][step]), statistics.median(times["arrow"][step])
        table[step] = {"native_s": nat, "arrow_s": arr, "arrow_over_native": arr / nat}
        print(f"  {step:12s} native s3a {nat:7.2f}  Arrow scan {arr:7.2f}  Arrow / native {arr / nat:5.2f}x")
    bad = [c for c in log.rows if not c["ok"]]
    print(f"\n==== checks: {len(log.rows) - len(bad)}/{len(log.rows)} ok" + (f"; FAILED {bad}" if bad else ""))
    out = Path(a.out) if a.out else wd / "results_s3_scan.json"
    out.write_text(json.dumps({"workload": w.__dict__, "times": times, "table": table, "checks": log.rows,
                               "time": time.time()}, indent=1, default=str))
    print(f"raw timings: {out}")
    return 0 if not bad else 1


if __name__ == "__main__":
    sys.exit(main())
