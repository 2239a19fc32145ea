"""A real S3 server for the session (SeaweedFS on loopback, tests/s3/server.py) and a fresh bucket per test.

Imported by tests/conftest.py, so tests/s3 and the dbt functional tests share one server per session; it starts
only when a test asks for it."""

import uuid

import pytest
from pyarrow import fs as pafs

from tests.s3.server import ACCESS_KEY, REGION, SECRET_KEY, SeaweedServer


@pytest.fixture(scope="session")
def s3_server():
    srv = SeaweedServer()
    try:
        srv.start()
        yield srv
    finally:  # also when start() failed half-way: no process or directory is left behind
        srv.stop()


@pytest.fixture(scope="session")
def s3_admin(s3_server):
    """pyarrow's S3 file system as the bucket administrator (our own client cannot create buckets)."""
    return pafs.S3FileSystem(access_key=ACCESS_KEY, secret_key=SECRET_KEY, region=REGION,
                             endpoint_override=s3_server.endpoint, scheme="http", allow_bucket_creation=True,
                             allow_bucket_deletion=True)


@pytest.fixture
def s3_bucket(s3_server, s3_admin):
    """An empty bucket of its own for the test, deleted with its objects afterwards."""
    name = f"t-{uuid.uuid4().hex[:20]}"
    s3_admin.create_dir(name)
    yield name
    s3_admin.delete_dir(name)


@pytest.fixture
def s3_storage(s3_server):
    from hudilite.storage.s3 import S3Storage

    return S3Storage(s3_server.storage_options)


@pytest.fixture
def s3_root(s3_bucket):
    return f"s3://{s3_bucket}/root"


@pytest.fixture
def s3_tables(s3_server, s3_bucket, tmp_path, monkeypatch):
    """A bucket URI for tables, served by the process-wide s3:// backend; no local file may appear on the way."""
    from hudilite.storage.base import register_storage
    from hudilite.storage.s3 import S3Storage, register

    register_storage("s3", lambda _scheme: S3Storage(s3_server.storage_options))
    monkeypatch.chdir(tmp_path)
    yield f"s3://{s3_bucket}"
    register()
    assert not list(tmp_path.iterdir()), "local files were created for an s3:// table"


def s3a_conf(server) -> dict[str, str]:
    """The Spark settings that give the session's JVM hadoop-aws's S3AFileSystem on the test server."""
    from tests.s3.s3a_jars import jars

    return {"spark.jars": ",".join(jars()),
            "spark.hadoop.fs.s3a.endpoint": server.endpoint,
            "spark.hadoop.fs.s3a.endpoint.region": REGION,
            "spark.hadoop.fs.s3a.path.style.access": "true",
            "spark.hadoop.fs.s3a.connection.ssl.enabled": "false",
            "spark.hadoop.fs.s3a.access.key": ACCESS_KEY,
            "spark.hadoop.fs.s3a.secret.key": SECRET_KEY,
            "spark.hadoop.fs.s3a.aws.credentials.provider":
                "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider"}


def _stop_jvm():
    """Stop the active SparkContext and its JVM: jars named in spark.jars reach the driver's class path only
    when spark-submit starts the JVM, so a session with other jars needs a JVM of its own."""
    from pyspark import SparkContext

    if SparkContext._active_spark_context is not None:
        SparkContext._active_spark_context.stop()
    gw = SparkContext._gateway
    if gw is not None:
        gw.shutdown()
        proc = getattr(gw, "proc", None)
        if proc is not None:
            proc.stdin.close()  # the JVM exits when its parent's pipe closes
            proc.wait(timeout=60)
        SparkContext._gateway = None
        SparkContext._jvm = None


@pytest.fixture(scope="module")
def spark_s3a(s3_server):
    """A SparkSession whose JVM has hadoop-aws (`s3a_conf`). Jars named in spark.jars reach the driver's class
    path only when spark-submit starts the JVM, so this needs a process without another session: the checks
    using it (tests/s3/s3a_checks.py) run in a pytest process of their own (tests/s3/test_spark_s3a.py)."""
    from pyspark.sql import SparkSession

    from hudilite.spark.session import local_session

    if SparkSession._instantiatedSession is not None:
        pytest.fail("spark_s3a needs a process without another SparkSession: run tests/s3/s3a_checks.py alone")
    s = local_session("local[2]", app_name="hudilite-tests-s3a", conf=s3a_conf(s3_server))
    try:
        yield s
    finally:
        _stop_jvm()
