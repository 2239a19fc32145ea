"""Spark Connect clients: a dbt process whose server has gone away by the time it exits (stopped, restarted,
the network lost) exits at once - PySpark's client otherwise sends a clean-up RPC at interpreter exit and
retries it against the absent server for ten minutes; a session of a loopback server runs its queries
without reattachable executions; a model's query is sent once, for its analysis; a server started with a
token serves only the clients that send it."""

import json
import shutil
import socket
import ssl
import subprocess
import sys
import threading
import time

import pytest

from hudilite import server
from tests.functional.connect.conftest import ROOT, _env, _free_port, run_client, start_server

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

    def __init__(self, port: int, tls: ssl.SSLContext | None = None):
        self.target = port
        self.tls = tls  # terminate TLS with this context, as a TLS proxy in front of a server does
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
            if self.tls is not None:
                try:
                    client.settimeout(10)
                    client = self.tls.wrap_socket(client, server_side=True)
                    client.settimeout(None)
                except (OSError, ssl.SSLError):  # a client that refused the certificate
                    client.close()
                    continue
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


def _project(path, host: str, warehouse: str, token: str | None = None) -> None:
    """An empty dbt project in `path` whose profile connects to `host` (with `token`)."""
    (path / "dbt_project.yml").write_text("name: p\nversion: '1.0'\nprofile: p\n")
    outputs = {"type": "hudilite", "method": "connect", "host": host, "schema": "p", "warehouse": warehouse}
    if token:
        outputs["token"] = token
    (path / "profiles.yml").write_text(json.dumps({"p": {"target": "dev", "outputs": {"dev": outputs}}}))


def test_dbt_exits_at_once_when_the_server_is_gone(connect_server, tmp_path):
    proxy = Proxy(int(connect_server.url.rsplit(":", 1)[1]))
    _project(tmp_path, f"sc://127.0.0.1:{proxy.port}", connect_server.warehouse)
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


GONE = """
import sys, time
from hudilite import server
spark = server.connect(sys.argv[1], warehouse=sys.argv[2])
assert spark.sql("select 1 as x").collect()[0].x == 1
print("ready", flush=True)
sys.stdin.readline()  # the test cuts the connection
t0 = time.monotonic()
try:
    spark.sql("select 2 as x").collect()
except server.ServerError as e:
    print("gone after", round(time.monotonic() - t0), "s:", e, flush=True)
"""


def test_a_server_gone_mid_session_fails_the_next_call_at_once(connect_server, tmp_path):
    """A loopback server stopped while a client uses it: the next call fails within seconds naming the command
    that starts it again (PySpark's client would retry it for ten minutes; a dbt run hung that long)."""
    proxy = Proxy(int(connect_server.url.rsplit(":", 1)[1]))
    wh = str(tmp_path / "my warehouse")
    proc = subprocess.Popen([sys.executable, "-c", GONE, f"sc://127.0.0.1:{proxy.port}", wh], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(), cwd=ROOT)
    try:
        line = proc.stdout.readline()
        assert line.strip() == "ready", line + proc.stderr.read()[-3000:]
        proxy.cut()
        out, err = proc.communicate("\n", timeout=120)
    finally:
        proc.kill()
        proc.wait()
    assert out.startswith("gone after"), err[-3000:]
    took = int(out.split()[2])
    assert took < 30, out
    assert (f"the Spark Connect server at sc://127.0.0.1:{proxy.port} stopped answering (it was stopped or it "
            f"exited): start it again with: hudilite server start --warehouse '{wh}' --port {proxy.port}") in out


def test_a_session_profile_on_a_served_warehouse_names_the_connect_profile(connect_server, tmp_path):
    """Session mode on a warehouse whose `hudilite server` holds its catalog: the lock error says whose it is
    and the profile that runs there (`method: connect`, the server's URL)."""
    _project(tmp_path, "unused", connect_server.warehouse)
    profile = json.loads((tmp_path / "profiles.yml").read_text())
    dev = profile["p"]["outputs"]["dev"]
    dev.pop("host"), dev.update(method="session")
    (tmp_path / "profiles.yml").write_text(json.dumps(profile))
    out = run_client(["-m", "dbt.cli.main", "debug", "--project-dir", str(tmp_path), "--profiles-dir",
                      str(tmp_path)], timeout=300)
    text = out.stdout + out.stderr
    assert out.returncode != 0 and "is locked by another process" in text, text[-3000:]
    assert (f"held by this warehouse's Spark Connect server (pid {connect_server.pid}, {connect_server.url}): set "
            f"`method: connect` and `host: {connect_server.url}` in the profile") in " ".join(text.split()), \
        text[-3000:]


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


TOKEN_CLIENT = """
import sys
from pyspark.sql import SparkSession
from hudilite import server
for token in sys.argv[2:]:
    try:
        spark = server.connect(sys.argv[1], token=token or None)
        print(spark.sql("select sum(id) as s from range(10)").collect()[0].s)
    except server.ServerError as e:
        print("refused:", e)
if len(sys.argv) == 2:  # a plain PySpark client at the server's URL: the token is the variable's
    print(SparkSession.builder.remote(sys.argv[1]).getOrCreate().sql(
        "select sum(id) as s from range(10)").collect()[0].s)
"""
DBT = "import sys; from dbt.cli.main import dbtRunner; sys.exit(0 if dbtRunner().invoke(sys.argv[1:]).success else 1)"


@pytest.mark.slow
def test_a_server_started_with_a_token_serves_only_clients_that_send_it(tmp_path, monkeypatch):
    """Spark Connect's pre-shared token: `hudilite server start` waits for the server with it, the JVM gets it
    in its environment (not on its command line), and a client sends it over loopback without TLS - PySpark
    sends a token over TLS to any host but `localhost`. A client without it, or with another, is refused by
    name; dbt connects with the profile's `token`."""
    monkeypatch.delenv(server.TOKEN_ENV, raising=False)
    wh = str(tmp_path / "wh")
    info = start_server(wh, port=_free_port(), master="local[1]", spark_conf={server.TOKEN_CONF: "s3cret-token"})
    try:
        assert info.token_required and info.url == f"sc://localhost:{info.port}"
        with open(f"/proc/{info.pid}/cmdline", "rb") as f:
            assert b"s3cret-token" not in f.read()
        loop = f"sc://127.0.0.1:{info.port}"
        out = run_client(["-c", TOKEN_CLIENT, loop, "s3cret-token", "", "other"], timeout=300)
        assert out.stdout.splitlines() == [
            "45", f"refused: the Spark Connect server at {loop} requires a token: pass the server's token (the dbt "
            f"profile's `token`) or set {server.TOKEN_ENV}",
            f"refused: the Spark Connect server at {loop} refused the token sent (it is not the server's): pass "
            f"the server's token (the dbt profile's `token`) or set {server.TOKEN_ENV}"], out.stderr[-3000:]
        out = run_client(["-c", TOKEN_CLIENT, loop, ""], env={server.TOKEN_ENV: "s3cret-token"}, timeout=300)
        assert out.stdout.splitlines() == ["45"], out.stderr[-3000:]
        out = run_client(["-c", TOKEN_CLIENT, info.url], env={server.TOKEN_ENV: "s3cret-token"}, timeout=300)
        assert out.stdout.splitlines() == ["45"], out.stderr[-3000:]

        for token, ok in (("s3cret-token", True), ("other", False)):
            proj = tmp_path / f"p_{ok}"
            proj.mkdir()
            _project(proj, loop, wh, token=token)
            out = run_client(["-c", DBT, "debug", "--project-dir", str(proj), "--profiles-dir", str(proj)],
                             timeout=300)
            assert (out.returncode == 0) is ok, out.stdout[-3000:]
            if not ok:
                assert "refused the token sent" in out.stdout, out.stdout[-3000:]
    finally:
        server.stop(wh)


TLS_CLIENT = """
import sys, time
from hudilite import server
t0 = time.monotonic()
try:
    spark = server.connect(sys.argv[1], use_ssl=True, conf={"spark.sql.ansi.enabled": "false"})
    print(spark.sql("select sum(id) as s from range(10)").collect()[0].s)
except server.ServerError as e:
    print("refused:", e)
print(f"took {time.monotonic() - t0:.1f}")
"""


@pytest.mark.skipif(shutil.which("openssl") is None, reason="makes a certificate with openssl")
def test_tls_in_front_of_the_server_with_a_trusted_or_an_untrusted_certificate(connect_server, tmp_path):
    """`use_ssl: true` through a TLS proxy: a certificate gRPC does not trust fails within seconds, naming what to
    do, and the process exits at once (PySpark's client retries the handshake for ten minutes, its exit handler
    too); with the certificate's CA given to gRPC the same connection serves queries."""
    cert, key = tmp_path / "c.pem", tmp_path / "k.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out",
                    str(cert), "-days", "1", "-subj", "/CN=localhost", "-addext",
                    "subjectAltName=DNS:localhost,IP:127.0.0.1"], check=True, capture_output=True)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    ctx.set_alpn_protocols(["h2"])
    proxy = Proxy(int(connect_server.url.rsplit(":", 1)[1]), tls=ctx)
    url = f"sc://127.0.0.1:{proxy.port}"
    try:
        t0 = time.monotonic()
        out = run_client(["-c", TLS_CLIENT, url], timeout=300)
        took = time.monotonic() - t0
        lines = out.stdout.splitlines()
        assert lines[0].startswith(f"refused: the Spark Connect server at {url} did not complete a TLS connection")
        assert "CERTIFICATE_VERIFY_FAILED" in lines[0] and "GRPC_DEFAULT_SSL_ROOTS_FILE_PATH" in lines[0], lines
        assert float(lines[1].split()[1]) < 30 and took < 60, (lines, took)
        out = run_client(["-c", TLS_CLIENT, url], env={"GRPC_DEFAULT_SSL_ROOTS_FILE_PATH": str(cert)}, timeout=300)
        assert out.stdout.splitlines()[0] == "45", out.stdout + out.stderr[-3000:]
    finally:
        proxy.cut()
