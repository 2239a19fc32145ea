"""A SparkSession configured for hudilite (used by tests, the CLI and the dbt adapter's embedded default)."""

from __future__ import annotations

import os
import sys


def local_session(master: str = "local[2]", *, app_name: str = "hudilite", conf: dict | None = None,
                  hive_dir: str | None = None):
    """Get or create a SparkSession whose Python workers run this interpreter (so they import hudilite)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    b = (SparkSession.builder.master(master).appName(app_name)
         .config("spark.ui.enabled", "false")
         .config("spark.sql.session.timeZone", "UTC")
         .config("spark.sql.shuffle.partitions", "4")
         .config("spark.sql.adaptive.enabled", "true")
         .config("spark.pyspark.python", sys.executable)
         # the hudilite data source prunes partitions in pushFilters, which PySpark refuses unless this is on
         .config("spark.sql.python.filterPushdown.enabled", "true")
         .config("spark.driver.extraJavaOptions", "-Duser.timezone=UTC")
         .config("spark.executor.extraJavaOptions", "-Duser.timezone=UTC"))
    for k, v in (conf or {}).items():
        b = b.config(k, v)
    if hive_dir:
        b = (b.config("spark.sql.warehouse.dir", os.path.join(hive_dir, "warehouse"))
             .config("spark.hadoop.javax.jdo.option.ConnectionURL",
                     f"jdbc:derby:;databaseName={os.path.join(hive_dir, 'metastore_db')};create=true")
             .enableHiveSupport())
    spark = b.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark
