"""The embedded default, end to end in separate processes (no SparkSession shared with the test process):
the sample project on a Hive catalog kept in a Derby metastore inside its warehouse; a later dbt invocation
and plain PySpark (no dbt, no hudilite) read the tables through the catalog with Spark's native parquet
scan; a second process on a warehouse whose catalog is in use gets a clear "locked" error."""

import os
import shutil
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
SAMPLE = os.path.join(ROOT, "sample_project")
DBT = [sys.executable, "-c", "from dbt.cli.main import cli; cli()"]

READER = textwrap.dedent("""
    import sys
    from pyspark.sql import SparkSession
    meta = sys.argv[1]
    spark = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
             .config("spark.sql.warehouse.dir", meta + "/warehouse")
             .config("spark.hadoop.javax.jdo.option.ConnectionURL",
                     "jdbc:derby:;databaseName=" + meta + "/metastore_db;create=false")
             .enableHiveSupport().getOrCreate())
    df = spark.sql("select order_id, status from shop.dwd_orders")
    print("PLAN", "FileScan parquet" in df._jdf.queryExecution().executedPlan().toString())
    print("ROWS", sorted((r.order_id, r.status) for r in df.collect()))
    print("READY", flush=True)
    sys.stdin.readline()   # hold the metastore until told to stop
""")


@pytest.mark.slow
def test_sample_project_on_the_embedded_catalog(tmp_path):
    proj = tmp_path / "sample_project"
    shutil.copytree(SAMPLE, proj, ignore=shutil.ignore_patterns("warehouse", "target", "logs"))
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "DBT_SEND_ANONYMOUS_USAGE_STATS": "false"}

    out = subprocess.run([sys.executable, str(proj / "run_sample.py")], capture_output=True, text=True, env=env,
                         timeout=900)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-4000:]
    assert "OK: every ODS commit consumed exactly once; dwd and ads match the reference" in out.stdout
    assert "UPSERT 3 inserted, 0 updated, 0 deleted" in out.stdout   # batch 2 on ods_orders
    meta = proj / "warehouse" / ".metastore"
    assert (meta / "metastore_db").is_dir()

    # a later dbt invocation (new process, new JVM) resolves ref() to the committed snapshot
    show = subprocess.run(DBT + ["show", "--inline", "select count(*) as n from {{ ref('dwd_orders') }}",
                                 "--project-dir", str(proj), "--profiles-dir", str(proj)],
                          capture_output=True, text=True, env=env, cwd=proj, timeout=600)
    assert show.returncode == 0, show.stdout[-3000:] + show.stderr[-3000:]
    assert "| 9 |" in show.stdout.replace("  ", " ") or "9" in show.stdout.split("| n")[-1]

    # plain PySpark on the same warehouse: the catalog table, read with the native parquet scan
    reader = subprocess.Popen([sys.executable, "-c", READER, str(meta)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    try:
        lines = []
        for line in reader.stdout:
            lines.append(line.strip())
            if line.startswith("READY"):
                break
        assert "PLAN True" in lines, lines
        assert ("ROWS [(1001, 'PAID'), (1002, 'PAID'), (1003, 'SHIPPED'), (1004, 'PAID'), (1007, 'SHIPPED'), "
                "(1008, 'PAID'), (1010, 'PAID'), (1011, 'PENDING'), (1012, 'PENDING')]") in lines, lines
        # while it holds the catalog, dbt in another process fails fast and says why
        dbg = subprocess.run(DBT + ["debug", "--project-dir", str(proj), "--profiles-dir", str(proj)],
                             capture_output=True, text=True, env=env, cwd=proj, timeout=600)
        assert dbg.returncode != 0
        assert "is locked by another process" in dbg.stdout + dbg.stderr
    finally:
        reader.stdin.write("\n")
        reader.stdin.flush()
        reader.wait(timeout=120)
