"""Spark DataFrames for read plans, using Spark's native parquet scan over the planned base files."""

from __future__ import annotations

from hudilite.reader.planner import ReadPlan, plan_read
from hudilite.schema import arrow_to_spark


def plan_to_dataframe(spark, plan: ReadPlan):
    from pyspark.sql import functions as F

    schema = arrow_to_spark(plan.schema)
    files = plan.base_files
    if not files:
        return spark.createDataFrame([], schema)
    df = spark.read.schema(schema).parquet(*files)
    if plan.query == "incremental":
        times = plan.commit_times or []
        df = df.filter(F.col("_hoodie_commit_time").isin(times)) if times else df.limit(0)
        if times:  # a range too, so parquet row-group statistics prune old row groups
            ct = F.col("_hoodie_commit_time")
            df = df.filter((ct >= min(times)) & (ct <= max(times)))
    for c, op, v in plan.filters:
        col = F.col(f"`{c}`")
        op = op.lower()
        if op in ("=", "=="):
            df = df.filter(col == v)
        elif op == "!=":
            df = df.filter(col != v)
        elif op == "<":
            df = df.filter(col < v)
        elif op == "<=":
            df = df.filter(col <= v)
        elif op == ">":
            df = df.filter(col > v)
        elif op == ">=":
            df = df.filter(col >= v)
        elif op == "in":
            df = df.filter(col.isin(list(v)))
        elif op == "not in":
            df = df.filter(~col.isin(list(v)))
    return df


def read(spark, path, *, as_of=None, begin=None, end=None, filters=None):
    """Snapshot (latest or `as_of`) or incremental `(begin, end]` read as a Spark DataFrame."""
    return plan_to_dataframe(spark, plan_read(path, as_of=as_of, begin=begin, end=end, filters=filters))
