"""Partition pruning through the `hudilite` data source vs `hudilite.read(filters=...)` (issue 27 item 6).

    python -m bench.datasource_pruning --partitions 500 --rows 10 --repeat 3

One table of `--partitions` partitions x `--rows` rows (COW, or MOR with one update per partition written
as log files: `--mor`). Timed warm, medians of `--repeat`, all in one process and one run:
    api_pruned     hudilite.read(spark, p, filters=[("dt", "=", "p007")]).count()
    ds_pruned      spark.read.format("hudilite").load(p).where("dt = 'p007'").count()
    sql_pruned     SELECT count(*) FROM <catalog table USING hudilite> WHERE dt = 'p007'
    api_full       hudilite.read(spark, p).count()
    ds_full        spark.read.format("hudilite").load(p).count()
Ratios: each data source / SQL time over the hudilite.read time of the same selection (target <= 1.5).

With `--wide N` the table has N more double columns c0..c{N-1}, and a narrow select of two of them is timed too
(PySpark 4.3 prunes no columns of a Python data source: its reader gets the whole schema of `.load()`):
    api_narrow        hudilite.read(spark, p).selectExpr("sum(c0 + c1)")  (native parquet scan: reads c0, c1 only)
    ds_narrow         spark.read.format("hudilite").load(p).selectExpr("sum(c0 + c1)")  (reads every column)
    ds_narrow_schema  the same with .schema("id long, dt string, c0 double, c1 double"): the reader reads
                      those columns only
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--partitions", type=int, default=500)
    ap.add_argument("--rows", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--mor", action="store_true")
    ap.add_argument("--wide", type=int, default=0, help="extra double columns (adds the narrow-select cases)")
    a = ap.parse_args(argv)

    import pyarrow as pa

    import hudilite
    from hudilite.spark.session import local_session

    spark = local_session("local[2]", app_name="bench-datasource")
    hudilite.register(spark)
    work = tempfile.mkdtemp(prefix="hudilite-ds-bench-")
    p = f"{work}/t"
    n = a.partitions * a.rows
    tt = "MERGE_ON_READ" if a.mor else "COPY_ON_WRITE"
    t = pa.table({"id": list(range(n)), "v": [float(i) for i in range(n)],
                  "dt": [f"p{i % a.partitions:03d}" for i in range(n)]})
    for c in range(a.wide):
        t = t.append_column(f"c{c}", pa.array([float(i * (c + 1)) for i in range(n)]))
    hudilite.write(t, p, record_key="id", partition_by=("dt",), operation="bulk_insert", table_type=tt)
    if a.mor:
        hudilite.write(t.slice(0, a.partitions), p, record_key="id", partition_by=("dt",), table_type=tt)
    spark.sql(f"CREATE TABLE bench_ds USING hudilite LOCATION '{p}'")
    cases = {
        "api_pruned": lambda: hudilite.read(spark, p, filters=[("dt", "=", "p007")]).count(),
        "ds_pruned": lambda: spark.read.format("hudilite").load(p).where("dt = 'p007'").count(),
        "sql_pruned": lambda: spark.sql("SELECT count(*) FROM bench_ds WHERE dt = 'p007'").collect()[0][0],
        "api_full": lambda: hudilite.read(spark, p).count(),
        "ds_full": lambda: spark.read.format("hudilite").load(p).count(),
    }
    want = {"api_pruned": a.rows, "ds_pruned": a.rows, "sql_pruned": a.rows, "api_full": n, "ds_full": n}
    if a.wide:
        narrow = "id long, dt string, c0 double, c1 double"
        cases["api_narrow"] = lambda: hudilite.read(spark, p).selectExpr("sum(c0 + c1)").collect()[0][0]
        cases["ds_narrow"] = lambda: spark.read.format("hudilite").load(p).selectExpr("sum(c0 + c1)").collect()[0][0]
        cases["ds_narrow_schema"] = lambda: (spark.read.format("hudilite").schema(narrow).load(p)
                                             .selectExpr("sum(c0 + c1)").collect()[0][0])
        want.update(dict.fromkeys(("api_narrow", "ds_narrow", "ds_narrow_schema"), float(3 * sum(range(n)))))
    times = {k: [] for k in cases}
    try:
        for k, f in cases.items():  # warm-up, and the checks
            assert f() == want[k], k
        for _ in range(a.repeat):
            for k, f in cases.items():  # interleaved: each repetition measures every case under the same load
                t0 = time.perf_counter()
                f()
                times[k].append(time.perf_counter() - t0)
    finally:
        spark.sql("DROP TABLE IF EXISTS bench_ds")
        shutil.rmtree(work, ignore_errors=True)
    med = {k: statistics.median(v) for k, v in times.items()}
    ratios = {}
    if a.wide:
        ratios = {"ds_narrow/api_narrow": round(med["ds_narrow"] / med["api_narrow"], 2),
                  "ds_narrow_schema/api_narrow": round(med["ds_narrow_schema"] / med["api_narrow"], 2)}
    out = {"table": tt, "partitions": a.partitions, "rows": a.rows, "repeat": a.repeat, "wide": a.wide,
           "median_s": {k: round(v, 3) for k, v in med.items()},
           "ratios": {"ds_pruned/api_pruned": round(med["ds_pruned"] / med["api_pruned"], 2),
                      "sql_pruned/api_pruned": round(med["sql_pruned"] / med["api_pruned"], 2),
                      "ds_full/api_full": round(med["ds_full"] / med["api_full"], 2), **ratios}}
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
