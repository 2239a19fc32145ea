"""A real S3 server for the session (SeaweedFS on loopback, tests/s3/server.py) and a fresh bucket per test."""

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
    """A SparkSession whose JVM has hadoop-aws (`s3a_conf`), for the module; the default session (the `spark`
    fixture) is stopped meanwhile and afterwards restarted into the same Python object, so fixtures holding it
    keep working."""
    from pyspark.sql import SparkSession

    from hudilite.spark.session import local_session

    default = SparkSession._instantiatedSession
    default_conf = dict(default.sparkContext.getConf().getAll()) if default is not None else None
    _stop_jvm()
    s = local_session("local[2]", app_name="hudilite-tests-s3a", conf=s3a_conf(s3_server))
    try:
        yield s
    finally:
        _stop_jvm()
        if default is not None:
            keep = ("spark.master", "spark.app.name")
            again = local_session(default_conf["spark.master"], app_name=default_conf["spark.app.name"],
                                  conf={k: v for k, v in default_conf.items()
                                        if k not in keep and not k.startswith(("spark.driver.host",
                                                                               "spark.driver.port",
                                                                               "spark.app.id",
                                                                               "spark.app.start",
                                                                               "spark.app.submitTime",
                                                                               "spark.executor.id"))})
            default.__dict__.update(again.__dict__)
            SparkSession._instantiatedSession = default
            SparkSession._activeSession = default
