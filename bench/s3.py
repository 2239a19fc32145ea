"""Tables on S3 vs the local file system: the workload of bench/run.py (load, upsert, snapshot scan + aggregate,
incremental read) through Spark, on a local table and on an `s3://` table of a SeaweedFS server on loopback, in one
process and one run, with the S3 requests of every step.

    python -m bench.s3 --n 1000000 --b 100000 --repeat 3

Systems (fresh tables per repetition; same staged data, same checks as bench/run.py):
    hudilite       the local table (bench/run.py's system)
    hudilite_s3    the same on s3://<bucket>/rep<k>, reached through per-table `storage_options`
Request counts are the server's (SeaweedFS's Prometheus counter, per verb; HEAD counts as GET there), so they
include the requests of Spark's Python workers as well as the driver's. The session's JVM has no hadoop-aws, so the
s3 table's base files are scanned with the Arrow scan in Spark tasks (docs/storage.md); bench/s3_scan.py compares
that with Spark's native s3a scan.
"""

from __future__ import annotations

import argparse
import gc
import json
import shutil
import statistics
import sys
import time
from pathlib import Path

from bench import data as bdata
from bench import run as brun
from hudilite.storage import bind_storage_options
from tests.s3.server import SeaweedServer

STEPS = ("load", "upsert", "scan", "incremental")
BUCKET = "hudilite-bench"


class HudiliteS3(brun.Hudilite):
    """bench/run.py's hudilite system on an s3:// location (`self.uri`) instead of a local directory."""

    name = "hudilite_s3"
    uri = ""

    def load(self):
        df = self.ctx.spark.read.parquet(self.exp["paths"]["base"])
        self.load_instant = self.write(df, self.uri, operation="bulk_insert", **self.KW)
        return {"instant": self.load_instant}

    def upsert(self):
        from pyspark.sql import functions as F

        df = self.ctx.spark.read.parquet(self.exp["paths"]["batch"])
        df = df.withColumn("_hoodie_is_deleted", F.col("op") == "D").drop("op")
        self.upsert_instant = self.write(df, self.uri, operation="upsert", **self.KW)
        return {"instant": self.upsert_instant}

    def read(self):
        return self.read_fn(self.ctx.spark, self.uri)

    def incremental(self):
        n = self.read_fn(self.ctx.spark, self.uri, begin=self.load_instant, end=self.upsert_instant).count()
        return {"rows": n}


def _run(ctx, sysobj, steps, rep, log, raw, requests=None) -> bool:
    exp = ctx.exp
    try:
        for step in steps:
            gc.collect()
            before = requests() if requests else {}
            t0 = time.perf_counter()
            extra = getattr(sysobj, step)() or {}
            secs = time.perf_counter() - t0
            rec = {"system": sysobj.name, "rep": rep, "step": step, "seconds": secs}
            if requests:
                after = requests()
                rec["requests"] = {k: after.get(k, 0) - before.get(k, 0) for k in sorted(after)
                                   if after.get(k, 0) != before.get(k, 0)}
            agg_rows = extra.pop("agg_rows", None)
            raw.append(rec | extra)
            print(f"  {sysobj.name:12s} rep {rep} {step:12s} {secs:8.3f} s  {rec.get('requests', '')}", flush=True)
            if step == "load":
                log.check(sysobj.name, rep, "load checksums", exp["base"], sysobj.checksums())
            elif step == "upsert":
                log.check(sysobj.name, rep, "upsert checksums", exp["final"], sysobj.checksums())
            elif step == "scan":
                log.check(sysobj.name, rep, "scan aggregate", exp["final_by_status"], brun.status_summary(agg_rows))
            elif step == "incremental":
                log.check(sysobj.name, rep, "incremental rows", exp["incremental_rows"], extra.get("rows"))
        return True
    except Exception as e:  # noqa: BLE001 - report and go on with the other system
        print(f"!!!!!!!! {sysobj.name} rep {rep} failed: {type(e).__name__}: {e}", flush=True)
        raw.append({"system": sysobj.name, "rep": rep, "step": "error", "error": f"{type(e).__name__}: {e}"})
        return False


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    bdata.add_workload_args(p, repeat=3)
    a = p.parse_args(argv)

    w, exp, wd = bdata.stage_args(a)
    log = brun.CheckLog()
    raw: list[dict] = []
    ok = True
    with SeaweedServer() as srv:
        srv.create_bucket(BUCKET)
        ctx = brun.Ctx(exp, dict(brun.SPARK_CONF), "light")
        ctx.start_spark(wd)
        try:
            for rep in range(a.repeat):
                local = brun.Hudilite(ctx)
                local.begin(wd / "tables_s3" / "local" / f"rep{rep}")
                print(f"[hudilite] rep {rep}", flush=True)
                ok &= _run(ctx, local, STEPS, rep, log, raw)
                s3 = HudiliteS3(ctx)
                s3.uri = f"s3://{BUCKET}/rep{rep}"
                bind_storage_options(s3.uri, srv.storage_options)
                print(f"[hudilite_s3] rep {rep}", flush=True)
                ok &= _run(ctx, s3, STEPS, rep, log, raw, lambda: srv.request_totals(BUCKET))
                shutil.rmtree(wd / "tables_s3", ignore_errors=True)
        finally:
            ctx.spark.stop()

    summary: dict = {}
    for r in raw:
        if r["step"] != "error":
            summary.setdefault(r["system"], {}).setdefault(r["step"], []).append(r)
    print("\n==== medians (s), S3 requests of the median repetition")
    table = {}
    for step in STEPS:
        loc = [r["seconds"] for r in summary.get("hudilite", {}).get(step, [])]
        s3r = sorted(summary.get("hudilite_s3", {}).get(step, []), key=lambda r: r["seconds"])
        if not loc or not s3r:
            continue
        med_l, med = statistics.median(loc), s3r[len(s3r) // 2]
        table[step] = {"local_s": med_l, "s3_s": statistics.median(r["seconds"] for r in s3r),
                       "requests": med.get("requests", {})}
        t = table[step]
        print(f"  {step:12s} local {t['local_s']:7.2f}  s3 {t['s3_s']:7.2f}  ratio {t['s3_s'] / t['local_s']:5.2f}x"
              f"  {t['requests']}")
    bad = [c for c in log.rows if not c["ok"]]
    print(f"\n==== checks: {len(log.rows) - len(bad)}/{len(log.rows)} ok" + (f"; FAILED {bad}" if bad else ""))
    out = Path(a.out) if a.out else wd / "results_s3.json"
    out.write_text(json.dumps({"workload": w.__dict__, "raw": raw, "table": table, "checks": log.rows,
                               "time": time.time()}, indent=1, default=str))
    print(f"raw timings: {out}")
    return 0 if ok and not bad else 1


if __name__ == "__main__":
    sys.exit(main())
