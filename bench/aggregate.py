#!/usr/bin/env python
"""Aggregate table over a detail table after a 1% change batch: incremental refresh vs full recomputation,
in the same run (same SparkSession, warm).

    .venv/bin/python bench/aggregate.py --rows 1000000

1. detail: N rows (id, g = one of 1000 groups, x, y), bulk_insert; aggregate built in full (warm-up).
2. change batch: 1% of N (half updates of random ids, some moving group; a quarter deletes; a quarter inserts).
3. incremental: `refresh()` (the engine behind materialized='aggregate'): changes since the checkpoint with
   before images, folded into the affected groups, one upsert commit.
4. full: the same aggregate recomputed from the detail snapshot and written as insert_overwrite_table.
Both results are compared (must be equal). Three queries: count/sum/avg (folded); count/sum/min/max (min/max
folded too, a group recomputed only when its stored extreme was retracted); and with count(distinct) (every
affected group recomputed from the detail snapshot: here all of them, a read of the detail's columns).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..")))

FOLDABLE = """select g, count(*) as n, sum(x) as s, avg(x) as a from `db`.`detail` group by g"""
MINMAX = """select g, count(*) as n, sum(x) as s, min(x) as mn, max(x) as mx from `db`.`detail` group by g"""
WITH_MINMAX = """select g, count(*) as n, sum(x) as s, min(x) as mn, max(x) as mx, count(distinct y) as dy
                 from `db`.`detail` group by g"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--groups", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=2, help="change batches (medians reported)")
    args = ap.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

    import statistics

    from pyspark.sql import functions as F

    import hudilite
    from dbt.adapters.hudilite.aggregate import GROUP_KEY, full_frame, parse, refresh
    from hudilite.reader.changes import latest_position
    from hudilite.spark.session import local_session

    spark = local_session("local[2]", app_name="bench-aggregate")
    spark.sparkContext.setLogLevel("ERROR")
    root = tempfile.mkdtemp(prefix="hudilite-bench-agg-")
    detail = os.path.join(root, "detail")
    n, groups = args.rows, args.groups
    base = (spark.range(n).select(
        F.col("id"), (F.col("id") % groups).cast("string").alias("g"), (F.col("id") % 997).alias("x"),
        (F.col("id") % 113).alias("y")))
    t0 = time.perf_counter()
    hudilite.write(base, detail, record_key="id", operation="bulk_insert")
    print(f"detail: {n} rows written in {time.perf_counter() - t0:.1f}s")
    results = {}
    for name, sql in (("count/sum/avg", FOLDABLE), ("count/sum/min/max", MINMAX),
                      ("count/sum/min/max/count distinct", WITH_MINMAX)):
        q = parse(sql)
        agg_inc = os.path.join(root, f"agg_inc_{len(results)}")
        agg_full = os.path.join(root, f"agg_full_{len(results)}")
        refresh(spark, q, detail, agg_inc)  # initial full build (warm-up)
        inc_t, full_t = [], []
        for rep in range(args.repeat):
            k = max(n // 100, 4)
            ch = spark.range(k).select((F.col("id") * 7919 + rep * 104729) % (n * 2)).toDF("id")
            ch = ch.select(F.col("id"), (F.col("id") % (groups + 3)).cast("string").alias("g"),
                           ((F.col("id") + rep) % 991).alias("x"), (F.col("id") % 101).alias("y"),
                           ((F.col("id") % 4) == 0).alias("_hoodie_is_deleted"))
            hudilite.write(ch, detail, record_key="id")
            t0 = time.perf_counter()
            refresh(spark, q, detail, agg_inc)
            inc_t.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            df, _ = full_frame(spark, q, detail, latest_position(detail))
            op = "insert_overwrite_table" if os.path.isdir(agg_full) else "insert"
            hudilite.write(df, agg_full, record_key=GROUP_KEY, operation=op,
                           options={"hoodie.write.input.persist": "true"})
            full_t.append(time.perf_counter() - t0)
        cols = [i.name for i in q.items]
        a = sorted(tuple(r) for r in hudilite.read(spark, agg_inc).select(*cols).collect())
        b = sorted(tuple(r) for r in hudilite.read(spark, agg_full).select(*cols).collect())
        assert a == b, f"{name}: incremental result differs from the full recomputation"
        inc, full = statistics.median(inc_t), statistics.median(full_t)
        results[name] = (inc, full)
        print(f"{name:<36} incremental {inc:6.2f}s   full {full:6.2f}s   ratio {inc / full:.2f}x   "
              f"(results equal, {len(a)} groups, change batch {k} rows = 1%)")
    shutil.rmtree(root, ignore_errors=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
