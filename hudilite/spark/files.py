"""Spark reads of a known list of parquet files (the lowest Spark module: the scan and the merge both use it)."""

from __future__ import annotations

_DISCOVERY_THRESHOLD = "spark.sql.sources.parallelPartitionDiscovery.threshold"

def read_parquet_files(spark, schema, files):
    """`spark.read.parquet(*files)`, the files' status taken on the driver: the planned files are known to exist,
    and above 32 paths Spark would otherwise run a listing job per read (~0.2 s even for local files)."""
    old = spark.conf.get(_DISCOVERY_THRESHOLD, None)
    if old is not None and int(old) > len(files):
        return spark.read.schema(schema).parquet(*files)
    spark.conf.set(_DISCOVERY_THRESHOLD, str(len(files) + 1))
    try:
        return spark.read.schema(schema).parquet(*files)
    finally:
        if old is None:
            spark.conf.unset(_DISCOVERY_THRESHOLD)
        else:
            spark.conf.set(_DISCOVERY_THRESHOLD, old)
