"""Write the driver JVM's class archive of this install now (scripts/setup.sh), not at the end of the first dbt
command: a session on a scratch warehouse that boots the catalog, writes and reads a small table through Spark
and the hudilite data source, and at its exit dumps the classes it loaded (hudilite.warehouse.open_session).
Nothing to do when the archive is there or the cache is off (HUDILITE_JVM_CLASS_CACHE=off)."""

import atexit
import glob
import os
import shutil
import sys
import tempfile
import time

import hudilite
from hudilite import warehouse
from hudilite.spark import class_cache

SCRATCH_PREFIX = "hudilite-warm-"


def remove_orphan_scratch(tmp: str) -> list[str]:
    """Scratch warehouses of warm-ups that were killed (no exit handler ran) are named by their pid: remove
    those whose process is gone."""
    removed = []
    for d in glob.glob(os.path.join(tmp, SCRATCH_PREFIX + "*-*")):
        pid = os.path.basename(d)[len(SCRATCH_PREFIX):].split("-", 1)[0]
        if not pid.isdigit():
            continue
        if not class_cache.process_alive(int(pid)):
            shutil.rmtree(d, ignore_errors=True)
            removed.append(d)
    return removed


if __name__ == "__main__":
    opts, dump, _archive = class_cache.class_cache_options()
    if not dump:
        print("JVM class archive: " + ("in place" if opts else "off, or no writable cache directory"))
        sys.exit(0)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    t0 = time.monotonic()
    remove_orphan_scratch(tempfile.gettempdir())
    scratch = tempfile.mkdtemp(prefix=f"{SCRATCH_PREFIX}{os.getpid()}-")
    atexit.register(shutil.rmtree, scratch, True)  # registered first: runs after the JVM has dumped and exited
    spark = warehouse.open_session("local[2]", scratch, os.path.join(scratch, ".metastore"), {},
                                   show_spark_logs=False, app_name="hudilite-warm-class-archive")
    hudilite.register(spark)
    path = os.path.join(scratch, "t")
    df = spark.createDataFrame([(i, f"p{i % 2}", i) for i in range(20)], "id long, dt string, v long")
    for table_type in ("COPY_ON_WRITE", "MERGE_ON_READ"):
        hudilite.write(df, path + table_type, record_key="id", precombine_field="v", partition_by=("dt",),
                       table_type=table_type)
        spark.read.format("hudilite").load(path + table_type).where("dt = 'p1'").count()
    spark.sql("create table warm_parquet using parquet as select * from range(3)").collect()
    print(f"JVM class archive: session and work {time.monotonic() - t0:.0f} s; dumping it at exit")
