"""Spark Connect clients: a dbt process whose server has gone away by the time it exits (stopped, restarted,
the network lost) exits at once - PySpark's client otherwise sends a clean-up RPC at interpreter exit and
retries it against the absent server for ten minutes; a session of a loopback server runs its queries
without reattachable executions; a model's query is sent once, for its analysis."""

import socket
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from tests.functional.connect.conftest import ROOT, _env

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")

SCRIPT = """
import sys
from dbt.cli.main import dbtRunner
res = dbtRunner().invoke(["debug", "--project-dir", sys.argv[1], "--profiles-dir", sys.argv[1]])
print("debugged", res.success, flush=True)
sys.stdin.readline()  # the test cuts the connection, then lets the process exit
"""


class Proxy:
    """A TCP relay from a loopback port to the server; `cut()` closes every connection and the port, so the
    server looks gone to the client."""

    def __init__(self, port: int):
        self.target = port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.sockets: list[socket.socket] = []
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target))
            with self.lock:
                self.sockets += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.close()
            except OSError:
                pass

    def cut(self) -> None:
        self.listener.shutdown(socket.SHUT_RDWR)  # stops listening now (a close alone waits for accept())
        self.listener.close()
        with self.lock:
            for s in self.sockets:
                try:
                    s.shutdown(socket.SHUT_RDWR)
                    s.close()
                except OSError:
                    pass


def test_dbt_exits_at_once_when_the_server_is_gone(connect_server, tmp_path):
    proxy = Proxy(int(connect_server.url.rsplit(":", 1)[1]))
    (tmp_path / "dbt_project.yml").write_text("name: gone\nversion: '1.0'\nprofile: gone\n")
    (tmp_path / "profiles.yml").write_text(textwrap.dedent(f"""
        gone:
          target: dev
          outputs:
            dev:
              type: hudilite
              method: connect
              host: sc://127.0.0.1:{proxy.port}
              schema: gone
              warehouse: {connect_server.warehouse}
    """))
    log = tmp_path / "stderr.log"
    with open(log, "w") as err:
        proc = subprocess.Popen([sys.executable, "-c", SCRIPT, str(tmp_path)], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=err, text=True, env=_env(), cwd=ROOT)
    try:
        out = []
        while not (out and out[-1].startswith("debugged")) and (line := proc.stdout.readline()):
            out.append(line)
        assert out and out[-1].strip() == "debugged True", "".join(out)[-3000:] + log.read_text()[-3000:]
        proxy.cut()
        t0 = time.monotonic()
        proc.stdin.write("\n")
        proc.stdin.flush()
        proc.communicate(timeout=120)
        took = time.monotonic() - t0
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 0
    assert took < 30, f"the process took {took:.0f} s to exit"


QUERY = """
import sys
from hudilite import server
spark = server.connect(sys.argv[1])
assert spark.sql("select 41 + 1 as x").collect()[0].x == 42
print("reattachable", spark.client._use_reattachable_execute)
"""


def test_loopback_sessions_run_queries_without_reattaching(connect_server):
    """A reattachable execution costs a ReleaseExecute round trip per query; a loopback server does without."""
    out = subprocess.run([sys.executable, "-c", QUERY, connect_server.url], capture_output=True, text=True,
                         env=_env(), cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().splitlines()[-1] == "reattachable False"


FRAME = """
import sys
from pyspark.errors import AnalysisException
from pyspark.sql.connect.client.core import SparkConnectClient
from hudilite import server
from hudilite.spark.session import query_frame

spark = server.connect(sys.argv[1])
calls = []
for name in ("_execute_and_fetch_as_iterator", "_execute", "_analyze"):
    orig = getattr(SparkConnectClient, name)
    setattr(SparkConnectClient, name, lambda *a, _o=orig, _n=name, **k: calls.append(_n) or _o(*a, **k))
df = query_frame(spark, "select id, concat('v', id) as v from range(3) where id > 0")
built = len(calls)
cols = df.columns
analysed = list(calls)
rows = sorted(tuple(r) for r in df.collect())
bad = query_frame(spark, "select nope from range(1)")
try:
    bad.columns
    failed = None
except AnalysisException as e:
    failed = e.getCondition()
print(built, analysed, cols, rows, failed)
"""


def test_a_query_frame_is_sent_once_for_its_analysis(connect_server):
    out = subprocess.run([sys.executable, "-c", FRAME, connect_server.url], capture_output=True, text=True,
                         env=_env(), cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().splitlines()[-1] == (
        "0 ['_analyze'] ['id', 'v'] [(1, 'v1'), (2, 'v2')] UNRESOLVED_COLUMN.WITH_SUGGESTION")
