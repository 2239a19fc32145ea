"""Which base files still hold a float column of a table whose column is now double (issue 27 item 4): decided
from the schema history (commit metadata) instead of each base file's footer.

    python -m bench.type_overrides --partitions 500 --repeat 5

A COW table of `--partitions` partitions (one base file each) with a float column `score`, then an upsert that
widens it to double in one partition. Timed on the driver, medians of `--repeat`, in one process:
    footer     `spark_read._file_type_overrides` of every base file (the per-file footer read: the old way)
    history    `spark_read._type_overrides_fn(plan, schema)` built and applied to every base file
    build      `hudilite.read(spark, path)` (DataFrame construction, no job) with the history rule
    count      `hudilite.read(spark, path).count()`
Checks: both ways give the same overrides for every file (the float files and only those).
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
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args(argv)

    import pyarrow as pa

    import hudilite
    from hudilite.spark import read as spark_read
    from hudilite.reader.planner import plan_read
    from hudilite.spark.session import local_session

    spark = local_session("local[2]", app_name="bench-type-overrides")
    work = tempfile.mkdtemp(prefix="hudilite-overrides-")
    p = f"{work}/t"
    n = a.partitions
    kw = dict(record_key="id", precombine_field="v", partition_by="dt", table_type="COPY_ON_WRITE")
    f32 = pa.schema([("id", pa.int64()), ("v", pa.int64()), ("dt", pa.string()), ("score", pa.float32())])
    hudilite.write(pa.table({"id": list(range(n)), "v": [1] * n, "dt": [f"p{i:04d}" for i in range(n)],
                             "score": [i / 10 for i in range(n)]}, schema=f32), p, operation="insert", **kw)
    hudilite.write(pa.table({"id": [0], "v": [2], "dt": ["p0000"], "score": [2.6]},
                            schema=f32.set(3, pa.field("score", pa.float64()))), p, operation="upsert", **kw)
    plan = plan_read(p)
    schema = spark_read.arrow_to_spark(plan.schema)
    files = [s.base_file.path for s in plan.slices]
    times = {"footer": [], "history": [], "build": [], "count": []}
    try:
        footer = [spark_read._file_type_overrides(schema, f) for f in files]
        history = [spark_read._type_overrides_fn(plan_read(p), schema)(f) for f in files]
        assert footer == history, "history and footers disagree"
        assert sum(1 for o in history if o) == n - 1, "float files"
        assert hudilite.read(spark, p).count() == n
        for _ in range(a.repeat):
            t0 = time.perf_counter()
            [spark_read._file_type_overrides(schema, f) for f in files]
            times["footer"].append(time.perf_counter() - t0)
            pl = plan_read(p)  # a fresh plan: commit metadata read again (the timeline caches it per plan)
            t0 = time.perf_counter()
            fn = spark_read._type_overrides_fn(pl, schema)
            [fn(f) for f in files]
            times["history"].append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            df = hudilite.read(spark, p)
            times["build"].append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            df.count()
            times["count"].append(time.perf_counter() - t0)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        spark.stop()
    med = {k: statistics.median(v) for k, v in times.items()}
    print(json.dumps({"partitions": n, "files": len(files), "repeat": a.repeat,
                      "median_s": {k: round(v, 4) for k, v in med.items()},
                      "ms_per_file": {k: round(1000 * med[k] / len(files), 4) for k in ("footer", "history")}},
                     indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
