"""What a user sees on the console when dbt runs in processes of its own (the embedded default, no session
shared with the test process): a second process on a busy warehouse fails at once with one clear message,
and a failing model reports dbt's error without Spark's logs or Java frames unless they are asked for."""

import os
import re
import subprocess
import sys
import time

import pytest

DBT = [sys.executable, "-c", "from dbt.cli.main import cli; cli()"]
PROFILE = """
console:
  target: dev
  outputs:
    dev:
      type: hudilite
      schema: console
      warehouse: {warehouse}
      master: "local[1]"
      threads: 1{extra}
"""
# a Java frame, Derby's or DataNucleus's classes and error codes, a line of Spark's (JSON or plain) log
JAVA_NOISE = re.compile(r"^\s+at [\w$.]+\(|org\.apache\.derby|datanucleus|XSDB6|^\{\"ts\":|"
                        r"^\d\d/\d\d/\d\d \d\d:\d\d:\d\d (WARN|INFO|ERROR) ", re.I | re.M)


def make_project(root, models, warehouse="warehouse", profile_extra=""):
    os.makedirs(root / "models", exist_ok=True)
    (root / "dbt_project.yml").write_text("name: console\nversion: '1.0'\nprofile: console\n"
                                          "models:\n  console:\n    +materialized: table\n")
    (root / "profiles.yml").write_text(PROFILE.format(warehouse=warehouse, extra=profile_extra))
    for name, sql in models.items():
        (root / "models" / f"{name}.sql").write_text(sql)
    return root


def dbt_env(**extra):
    env = {k: v for k, v in os.environ.items() if k != "HUDILITE_SPARK_LOGS"}
    return {**env, "PYSPARK_PYTHON": sys.executable, "DBT_SEND_ANONYMOUS_USAGE_STATS": "false", **extra}


def start_dbt(proj, args, env):
    return subprocess.Popen(DBT + args + ["--project-dir", str(proj), "--profiles-dir", str(proj)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=proj)


@pytest.mark.slow
def test_second_process_on_a_busy_warehouse_fails_at_once(tmp_path):
    # two projects on one warehouse, started together: the catalog can serve only one of them
    wh = str(tmp_path / "warehouse")
    a = make_project(tmp_path / "a", {"m": "select 1 as id"}, warehouse=wh)
    b = make_project(tmp_path / "b", {"m": "select 2 as id"}, warehouse=wh)
    env = dbt_env()
    t0 = time.monotonic()
    procs = [start_dbt(p, ["run"], env) for p in (a, b)]
    done = {}
    while len(done) < 2:
        if time.monotonic() - t0 > 900:
            for p in procs:
                p.kill()
            pytest.fail(f"not finished after 900 s (finished: {done})")
        for i, p in enumerate(procs):
            if i not in done and p.poll() is not None:
                done[i] = (time.monotonic() - t0, p.stdout.read())
        time.sleep(0.05)
    (ok,) = [i for i in done if procs[i].returncode == 0]
    (failed,) = [i for i in done if procs[i].returncode != 0]
    out = done[failed][1]
    assert "is locked by another process" in out, out[-4000:]
    assert not JAVA_NOISE.search(out), out[-4000:]   # the loser never started a JVM
    # it fails as soon as it needs the catalog, before the winner is done (JVM start, metastore boot, a commit).
    # Not a ratio: on a loaded 2-core machine dbt's own start-up alone can take half the winner's time.
    print(f"loser failed after {done[failed][0]:.1f}s, the winner finished after {done[ok][0]:.1f}s")
    assert done[failed][0] < done[ok][0], (done[failed][0], done[ok][0])



@pytest.mark.slow
def test_failing_model_reports_dbt_error_without_spark_logs(tmp_path):
    # fails in a Spark task: the executor logs the error with its Java stack
    failing = {"bad": "select id, cast(raise_error(concat('hudilite-test-boom-', id)) as string) as x "
                      "from range(3) as t(id)"}
    quiet = make_project(tmp_path / "quiet", failing)
    loud = make_project(tmp_path / "loud", failing)
    # both at once (separate warehouses): the default, and Spark's logs asked for with the environment variable
    procs = [start_dbt(quiet, ["run"], dbt_env()), start_dbt(loud, ["run"], dbt_env(HUDILITE_SPARK_LOGS="1"))]
    (out, _), (loud_out, _) = [p.communicate(timeout=900) for p in procs]
    assert procs[0].returncode == 1 and procs[1].returncode == 1, out[-3000:] + loud_out[-3000:]

    assert "hudilite-test-boom-" in out   # dbt's own report of the error
    assert not JAVA_NOISE.search(out), out[-6000:]
    # Spark's log is kept, in the warehouse's metastore directory
    with open(quiet / "warehouse" / ".metastore" / "spark.log") as f:
        assert "hudilite-test-boom-" in f.read()

    assert "hudilite-test-boom-" in loud_out
    assert JAVA_NOISE.search(loud_out), loud_out[-3000:]
