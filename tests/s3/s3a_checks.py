"""The JVM path on s3:// tables: a session whose JVM has hadoop-aws (the `spark_s3a` fixture: spark.jars plus
spark.hadoop.fs.s3a.* pointing at the test server) scans base files with Spark's native parquet reader, the
table's s3:// paths mapped to s3a://. Writes through that session work, and every read gives the same rows as
the Arrow scan in Spark tasks (the fallback without hadoop-aws) in the same session."""

import pytest

import hudilite
from hudilite.reader import overlay_cache
from hudilite.spark import files as spark_files
from hudilite.spark import read as spark_read
from tests.s3.test_spark_s3 import _df, _rows


def _plan(df) -> str:
    return df._jdf.queryExecution().executedPlan().toString()


def _reads(spark, path, opts, commits):
    """(rows of each read, plan of each table read)."""
    c1, c2, c3 = commits
    reads = {"snapshot": lambda: hudilite.read(spark, path, storage_options=opts),
             "as_of_c1": lambda: hudilite.read(spark, path, as_of=c1, storage_options=opts),
             "as_of_c2": lambda: hudilite.read(spark, path, as_of=c2, storage_options=opts)}
    seen, plans = {}, {}
    for name, read in reads.items():
        df = read()
        seen[name], plans[name] = _rows(df), _plan(df)
    seen["changes"] = _rows(hudilite.changes(spark, path, c1, c3, before_image=True, storage_options=opts),
                            ("_change_op", "id", "v", "name", "p"))
    return seen, plans


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_native_s3a_scan_equals_arrow_scan(spark_s3a, s3_server, s3_bucket, monkeypatch, table_type):
    spark, opts = spark_s3a, s3_server.storage_options
    assert spark_files.jvm_scheme(spark, "s3") == "s3a"
    path = f"s3://{s3_bucket}/{table_type.lower()}"
    kw = {"record_key": "id", "precombine_field": "v", "partition_by": ("p",), "table_type": table_type,
          "storage_options": opts}
    # writes through the s3a session (an upsert reads the base files it merges into through the native scan)
    commits = (hudilite.write(_df(spark, range(20)), path, operation="insert", **kw),
               hudilite.write(_df(spark, range(10, 30), v=2), path, operation="upsert", **kw),
               hudilite.write(_df(spark, range(25, 35), v=3), path, operation="upsert", **kw))
    assert hudilite.Table.open(path, spark=spark, storage_options=opts).info().scan == \
        "Spark native parquet (as s3a://)"

    # merge-on-read slices by the merged scan (natively scanned base files joined with the log rows), not
    # merged whole in Python tasks as such small slices are by default
    merged_scan = {overlay_cache.MIN_LOG_BYTES_CONF: "0", spark_read.SMALL_SLICE_CONF: "0"}
    for k, v in merged_scan.items():
        spark.conf.set(k, v)
    try:
        native, native_plans = _reads(spark, path, opts, commits)
        # the same session without the native scan: the Arrow scan in Spark tasks, as without hadoop-aws
        monkeypatch.setitem(spark_files._JVM_SCHEMES, (spark.sparkContext.applicationId, "s3"), None)
        arrow, arrow_plans = _reads(spark, path, opts, commits)
    finally:
        for k in merged_scan:
            spark.conf.unset(k)

    assert native == arrow
    latest = {i: 1 for i in range(10)} | {i: 2 for i in range(10, 25)} | {i: 3 for i in range(25, 35)}
    assert {r[0]: r[1] for r in native["snapshot"]} == latest
    assert {r[0] for r in native["as_of_c1"]} == set(range(20))
    assert {r[1] for r in native["changes"]} == set(range(10, 35))  # changed in c2 or c3
    for name, plan in native_plans.items():  # the JVM really read the base files, from s3a:// paths
        assert "FileScan parquet" in plan and f"s3a://{s3_bucket}/" in plan, (name, plan)
        assert "FileScan parquet" not in arrow_plans[name] and "s3a://" not in arrow_plans[name], name
