"""`hudilite server start` and the server JVM's class data sharing archive: the first server's JVM writes it as
it stops (`hudilite server stop` waits for that and moves it into place), the next server maps it - its JVM
has the archive file mapped (/proc/PID/maps) - and still serves a Connect client. And the server's temporary
files: under `<warehouse>/.metastore/tmp`, removed when it stops, a killed one's removed when the next starts."""

import os
import socket

import pytest

from hudilite import server
from hudilite.spark import class_cache
from tests.functional.connect.conftest import run_client

CLIENT = """
import sys
from hudilite.server import connect
spark = connect(sys.argv[1])
print(spark.sql("select sum(id) as s from range(10)").collect()[0].s)
"""
# a plain PySpark client, left to PySpark's exit handler: it sends the ML-cache clean-up, for which the server
# creates the session's cache directory (and leaves it, empty, after the session)
PLAIN_CLIENT = """
import sys
from pyspark.sql import SparkSession
spark = SparkSession.builder.remote(sys.argv[1]).getOrCreate()
print(spark.sql("select sum(id) as s from range(10)").collect()[0].s)
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _mapped(pid: int, path: str) -> bool:
    with open(f"/proc/{pid}/maps") as f:
        return any(line.rstrip().endswith(path) for line in f)


@pytest.mark.slow
@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="reads the server's memory map from /proc")
def test_second_server_start_maps_the_first_ones_class_archive(tmp_path, monkeypatch):
    cache = tmp_path / "jvm"
    monkeypatch.setenv(class_cache.CLASS_CACHE_ENV, str(cache))
    wh = str(tmp_path / "my warehouse")  # a space: the server's JVM options name paths in it
    first = server.start(wh, port=_free_port(), master="local[1]")
    try:
        assert first.class_dump and first.class_archive and not os.path.exists(first.class_archive)
        out = run_client(["-c", CLIENT, first.url], timeout=300)
        assert out.returncode == 0 and out.stdout.strip() == "45", out.stderr[-3000:]
        out = run_client(["-c", PLAIN_CLIENT, first.url], timeout=300)
        assert out.returncode == 0 and out.stdout.strip() == "45", out.stderr[-3000:]
        assert len(os.listdir(os.path.join(server.server_tmp(wh), "spark_connect_model_cache"))) == 1
    finally:
        server.stop(wh)
    assert os.listdir(cache) == [os.path.basename(first.class_archive)]  # dumped at exit, moved into place
    assert not os.path.exists(server.server_tmp(wh))
    leftover = os.path.join(server.server_tmp(wh), "spark-killed")  # as a killed server would leave it
    os.makedirs(leftover)

    second = server.start(wh, port=_free_port(), master="local[1]")
    try:
        assert second.class_dump is None and _mapped(second.pid, first.class_archive)
        assert not os.path.exists(leftover)
        out = run_client(["-c", CLIENT, second.url], timeout=300)
        assert out.returncode == 0 and out.stdout.strip() == "45", out.stderr[-3000:]
    finally:
        server.stop(wh)
    assert os.listdir(cache) == [os.path.basename(first.class_archive)]
