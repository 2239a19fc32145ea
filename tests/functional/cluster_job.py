"""Run by test_cluster.py in its own process: a write/upsert/read job against a Spark standalone master."""

import datetime as dt
import json
import os
import sys

import hudilite
from hudilite.spark.session import local_session

master, path = sys.argv[1], sys.argv[2]
spark = local_session(master, app_name="hudilite-cluster-test",
                      conf={"spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1",
                            "spark.executor.memory": "512m", "spark.cores.max": "2"})
schema = "id long, version long, dt date, name string"
d = [dt.date(2024, 1, 1), dt.date(2024, 1, 2)]
df = spark.createDataFrame([(i, 1, d[i % 2], f"n{i}") for i in range(200)], schema).repartition(4)
c1 = hudilite.write(df, path, record_key="id", precombine_field="version", partition_by="dt", operation="bulk_insert")
upd = spark.createDataFrame([(i, 2, d[i % 2], f"u{i}") for i in range(0, 200, 10)] + [(500, 1, d[0], "new")], schema)
c2 = hudilite.write(upd, path, record_key="id", precombine_field="version", partition_by="dt")
# the batched marker service in this driver, called by executors in other processes
upd2 = spark.createDataFrame([(i, 3, d[i % 2], f"m{i}") for i in range(1, 200, 20)], schema).repartition(3)
c3 = hudilite.write(upd2, path, record_key="id", precombine_field="version", partition_by="dt",
                    options={"hoodie.write.markers.type": "TIMELINE_SERVER_BASED"})
snap = hudilite.read(spark, path)
# a bulk insert from a plain parquet scan: the executors read the source files themselves
from hudilite.spark.schema import spark_to_arrow  # noqa: E402
from hudilite.writer.source_files import plain_parquet_units  # noqa: E402

src = path + "_src"
df.write.parquet(src)
src_df = spark.read.parquet(src)
file_units = len(plain_parquet_units(src_df, spark_to_arrow(src_df.schema), 2) or [])
hudilite.write(src_df, path + "_files", record_key="id", precombine_field="version", partition_by="dt",
               operation="bulk_insert")
from_files = sorted(tuple(r) for r in hudilite.read(spark, path + "_files").select("id", "name").collect())


def where(batches):
    import pyarrow as pa
    from pyspark import TaskContext

    for _ in batches:
        pass
    yield pa.RecordBatch.from_pydict({"pid": [os.getpid()], "host": [str(TaskContext.get().getLocalProperty("x"))]})


pids = {r["pid"] for r in df.mapInArrow(where, "pid long, host string").collect()}
executors = spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1
out = {
    "c1": c1, "c2": c2, "c3_updated": c3.stats["updated"], "count": snap.count(), "updated": c2.stats["updated"], "inserted": c2.stats["inserted"],
    "names": {r["id"]: r["name"] for r in snap.filter("id in (0, 10, 1, 500, 21)").collect()},
    "incremental": hudilite.read(spark, path, begin=c1, end=c2).count(),
    "file_units": file_units, "from_files_ok": from_files == sorted((i, f"n{i}") for i in range(200)),
    "driver_pid": os.getpid(), "worker_pids": sorted(pids), "executors": executors,
}
print("RESULT " + json.dumps(out))
spark.stop()
