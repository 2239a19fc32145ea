"""One local Spark Connect server (`hudilite server start`) for the Connect tests, on loopback, stopped at the
end. Its clients run in subprocesses: PySpark switches a process that opens a Connect session to Connect mode,
and this test process keeps the suite's classic session."""

import os
import re
import socket
import subprocess
import sys
import textwrap

import pytest

from hudilite import server
from hudilite.spark import class_cache
from hudilite.spark.session import DRIVER_JAVA_OPTIONS
from tests.conftest import C1_ONLY

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(warehouse: str, **kwargs) -> server.ServerInfo:
    """`server.start` for the tests: it maps the install's server class archive when there is one, but does not
    write one when there is none. A first server's JVM dumps its classes as it stops (~200 MB, ~30 s of CPU),
    for the servers of later commands; the suite's servers stop at its end, so that dump served nobody
    (tests/functional/connect/test_connect_class_archive.py tests it, with a cache of its own)."""
    _cache, archive = class_cache._archive_path(None, server.SERVER_CLASS)
    if archive is not None and os.path.isfile(archive):
        return server.start(warehouse, **kwargs)
    with pytest.MonkeyPatch.context() as mp:  # read by start() only: the server it returns keeps no dump
        mp.setenv(class_cache.CLASS_CACHE_ENV, "off")
        return server.start(warehouse, **kwargs)


@pytest.fixture(scope="session")
def connect_server(tmp_path_factory):
    warehouse = str(tmp_path_factory.mktemp("connect-warehouse"))
    # two cores shared with the suite's own session: the server's tasks on two threads
    info = start_server(warehouse, port=_free_port(), master="local[2]", spark_conf={DRIVER_JAVA_OPTIONS: C1_ONLY})
    try:
        yield info
    finally:
        server.stop(warehouse)


def _env(extra=None):
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "DBT_SEND_ANONYMOUS_USAGE_STATS": "false"}
    env.pop("SPARK_CONNECT_MODE_ENABLED", None)
    env.pop("HUDILITE_TEST_CONNECT", None)
    return {**env, **(extra or {})}


def run_client(args, timeout=600, cwd=None, prefix=(), env=None):
    """A Python subprocess of this interpreter (a Connect client), run through the command `prefix` if given,
    with the variables `env` added to the environment; its completed process."""
    return subprocess.run([*prefix, sys.executable, *args], capture_output=True, text=True, env=_env(env),
                          timeout=timeout, cwd=cwd or ROOT)


def run_tests_over_connect(server, args, summary: str) -> None:
    """pytest `args` in a client subprocess whose `spark` fixture is a Connect session to `server`
    (HUDILITE_TEST_CONNECT, tests/conftest.py); it must pass with a last line matching the regex `summary`."""
    out = run_client(["-m", "pytest", "-q", "-p", "no:cacheprovider", "-W", "ignore::FutureWarning", *args],
                     env={"HUDILITE_TEST_CONNECT": server.url}, timeout=900)
    tail = out.stdout[-4000:] + out.stderr[-2000:]
    assert out.returncode == 0, tail
    assert re.match(summary, out.stdout.strip().splitlines()[-1]), tail


def start_client(args):
    """run_client, not waited for (its output read with communicate())."""
    return subprocess.Popen([sys.executable, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=_env(), cwd=ROOT)


def write_project(root: str, files: dict) -> None:
    """The files of a dbt project (relative path -> text, dedented) under `root`."""
    for name, text in files.items():
        path = os.path.join(root, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(textwrap.dedent(text).strip() + "\n")
