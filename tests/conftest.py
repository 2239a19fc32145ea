import os
import sys

import pytest

from tests.s3.fixtures import (  # noqa: F401 - shared fixtures
    s3_admin, s3_bucket, s3_root, s3_server, s3_storage, s3_tables, spark_s3a)

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
# The test JVMs (this session, the Connect server, the judge, the crash writers) run many small, different jobs
# and live minutes: C2's compilations cost more CPU than they return. Measured on two cores (bench/README.md,
# "Test suite time"): the core's Spark tests -12 % wall, Apache Hudi's judge -20 %.
C1_ONLY = "-XX:TieredStopAtLevel=1"
SHARED = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "shared"))
if not os.path.isdir(SHARED):
    SHARED = os.environ.get("HUDILITE_SHARED", "/work/shared")


@pytest.fixture(scope="session")
def spark():
    """One SparkSession for the whole test session: a classic local one, or with HUDILITE_TEST_CONNECT=sc://...
    a Spark Connect session to that server (tests/functional/connect/test_connect_compat.py runs a subset of
    the suite so, in a pytest subprocess: a process is classic or Connect, not both)."""
    url = os.environ.get("HUDILITE_TEST_CONNECT")
    if url:
        from pyspark.sql import SparkSession

        s = SparkSession.builder.remote(url).getOrCreate()
    else:
        from hudilite.spark.session import DRIVER_JAVA_OPTIONS, local_session

        s = local_session("local[2]", app_name="hudilite-tests", conf={DRIVER_JAVA_OPTIONS: C1_ONLY})
    yield s
    s.stop()


@pytest.fixture
def table_path(tmp_path):
    return str(tmp_path / "tbl")


@pytest.fixture(scope="session")
def shared_dir():
    return SHARED
