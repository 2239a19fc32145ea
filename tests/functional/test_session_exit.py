"""The exit of a process whose embedded session dumped its JVM class archive (its first session after an
install: README's first command on a fresh machine). Ending the JVM at exit closes its connection to PySpark's
accumulator server; that used to print an EOFError traceback on the console of every such run."""

import os
import subprocess
import sys

import pytest

from hudilite.spark import class_cache
from hudilite.spark.jvm import java_option

SCRIPT = """
import os, sys
from pyspark.sql import functions as F
from hudilite import warehouse
w = sys.argv[1]
tmp = sys.argv[2]  # the JVM's temporary directory, to see what the session leaves there
conf = {"spark.driver.extraJavaOptions": f"-Djava.io.tmpdir={tmp}"}
spark = warehouse.open_session("local[1]", w, os.path.join(w, ".metastore"), conf, show_spark_logs=False,
                               app_name="exit")
plus_one = F.udf(lambda x: x + 1, "long")  # a job with Python workers: the JVM reports to the accumulator server
print(sum(r[0] for r in spark.range(10).select(plus_one("id")).collect()))
"""


@pytest.mark.slow
def test_a_session_that_dumps_its_class_archive_exits_quietly(tmp_path):
    # a space in the warehouse's and the class cache's paths: their JVM options are quoted for Spark's launcher,
    # which splits the options string at whitespace (the JVM used to exit before the session started)
    cache = tmp_path / "jvm cache"
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {**os.environ, class_cache.CLASS_CACHE_ENV: str(cache), "PYSPARK_PYTHON": sys.executable,
           "TMPDIR": str(tmp)}
    out = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / "my warehouse"), str(tmp)], env=env,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0 and out.stdout.strip() == "55", out.stderr[-3000:]
    assert [n for n in os.listdir(cache) if n.endswith(".jsa")], "the session did not dump its class archive"
    assert "Traceback" not in out.stderr and "EOFError" not in out.stderr, out.stderr[-3000:]
    assert os.path.isfile(tmp_path / "my warehouse" / ".metastore" / "derby.log")  # the quoted property's path
    # a session with the persistent catalog (every dbt command) leaves nothing in the temporary directory:
    # Hive's per-session resources directory used to stay there (the JVM's own hsperfdata directory aside)
    assert [n for n in os.listdir(tmp) if not n.startswith("hsperfdata_")] == []


LOCAL = """
from hudilite.spark.session import local_session
spark = local_session("local[1]", app_name="maps")
print(spark.sparkContext.getConf().get("spark.driver.extraJavaOptions"))
print(spark.range(5).count())
"""


@pytest.mark.slow
def test_a_local_session_maps_the_archive_and_starts_without_a_usable_one(tmp_path):
    """`local_session` maps the install's archive when there is one; one the JVM cannot use (here not an
    archive at all: another JDK's, a torn copy) is ignored and the session starts as without it."""
    cache = tmp_path / "jvm cache"
    cache.mkdir()
    key = class_cache.class_cache_key()
    if key is None:
        pytest.skip("no pyspark jars or java here")
    (cache / f"{key}.jsa").write_bytes(b"not a class archive")
    env = {**os.environ, class_cache.CLASS_CACHE_ENV: str(cache), "PYSPARK_PYTHON": sys.executable}
    out = subprocess.run([sys.executable, "-c", LOCAL], env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    opts, count = out.stdout.strip().splitlines()[-2:]
    assert java_option(f"-XX:SharedArchiveFile={cache / (key + '.jsa')}") in opts and "ArchiveClassesAtExit" not in opts
    assert count == "5"
    assert sorted(os.listdir(cache)) == [f"{key}.jsa"]  # nothing dumped
