"""`hudilite server` without a server: stale records, absent servers and the errors that name the command."""

import json
import os
import shutil
import socket
import ssl
import subprocess
import threading
import time

import pytest

from hudilite import cli, server
from hudilite.spark.session import DRIVER_JAVA_OPTIONS, session_conf


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_status_of_a_warehouse_without_server(tmp_path, capsys):
    assert server.status(str(tmp_path)) is None
    assert cli.main(["server", "status", "--warehouse", str(tmp_path)]) == 1
    assert f"hudilite server start --warehouse {tmp_path}" in capsys.readouterr().out
    assert cli.main(["server", "stop", "--warehouse", str(tmp_path)]) == 0


def test_a_stale_record_is_reported_with_the_command_and_removed(tmp_path, capsys):
    gone = subprocess.Popen(["true"])
    gone.wait()
    os.makedirs(tmp_path / ".metastore")
    state = tmp_path / ".metastore" / server.STATE_FILE
    state.write_text(json.dumps({"pid": gone.pid, "host": "127.0.0.1", "port": _free_port(),
                                 "warehouse": str(tmp_path), "log": "x.log", "python": "python"}))
    with pytest.raises(server.ServerError, match="is gone .* Start one with: hudilite server start --warehouse"):
        server.status(str(tmp_path))
    assert not state.exists()
    assert cli.main(["server", "status", "--warehouse", str(tmp_path)]) == 1


def test_start_beside_a_running_server_on_another_port_says_so(tmp_path, capsys):
    """A running server is returned as it is; asked for another port, `start` names the one it listens on."""
    with socket.create_server(("127.0.0.1", 0)) as listening:  # a live process answering on its port
        port = listening.getsockname()[1]
        os.makedirs(tmp_path / ".metastore")
        (tmp_path / ".metastore" / server.STATE_FILE).write_text(json.dumps(
            {"pid": os.getpid(), "host": "127.0.0.1", "port": port, "warehouse": str(tmp_path), "log": "x.log",
             "python": "python"}))
        assert server.start(str(tmp_path)).port == port == server.start(str(tmp_path), port=port).port
        other = _free_port()
        with pytest.raises(server.ServerError, match=f"already runs at sc://127.0.0.1:{port} .pid {os.getpid()}., "
                                                     f"not on port {other}: connect to it there, or stop it first"):
            server.start(str(tmp_path), port=other)
        assert cli.main(["server", "start", "--warehouse", str(tmp_path), "--port", str(other)]) != 0
        assert f"not on port {other}" in capsys.readouterr().err


def test_connect_to_an_absent_server_names_the_command():
    port = _free_port()
    with pytest.raises(server.ServerError, match=f"no Spark Connect server answers at sc://127.0.0.1:{port}.*"
                                                 "hudilite server start --warehouse DIR --port"):
        server.connect(f"sc://127.0.0.1:{port}", token="t", use_ssl=True)


@pytest.mark.parametrize("url,kw,env,expect", [
    ("sc://127.0.0.1:15002", {}, None, "sc://127.0.0.1:15002"),
    ("127.0.0.1:15002", {"token": "t"}, None, "sc://localhost:15002/;token=t"),
    ("sc://[::1]:15002/;session_id=x", {"token": "t"}, None, "sc://localhost:15002/;session_id=x;token=t"),
    ("sc://127.0.0.1:15002/;token=t", {}, None, "sc://localhost:15002/;token=t"),
    ("sc://127.0.0.1:15002", {}, "t", "sc://localhost:15002"),  # PySpark's client sends the variable's token
    ("sc://127.0.0.1:15002", {"token": "t", "use_ssl": True}, None, "sc://127.0.0.1:15002/;token=t;use_ssl=true"),
    ("sc://spark.example.com:443", {"token": "t"}, None, "sc://spark.example.com:443/;token=t"),
])
def test_a_token_to_a_loopback_server_goes_to_localhost(monkeypatch, url, kw, env, expect):
    """PySpark sends a token over TLS to every host but `localhost`; a local server speaks no TLS."""
    if env:
        monkeypatch.setenv(server.TOKEN_ENV, env)
    else:
        monkeypatch.delenv(server.TOKEN_ENV, raising=False)
    assert server.connect_url(url, **kw) == expect


def test_a_token_server_is_reached_as_localhost_and_says_so(tmp_path, capsys):
    info = server.ServerInfo(pid=1, host="127.0.0.1", port=15002, warehouse=str(tmp_path), log="x.log",
                             python="python", token_required=True)
    assert info.url == "sc://localhost:15002"
    assert server.ServerInfo(**{**info.__dict__, "host": "10.0.0.5"}).url == "sc://10.0.0.5:15002"
    assert server.ServerInfo(**{**info.__dict__, "host": "0.0.0.0"}).url == "sc://localhost:15002"
    assert server.ServerInfo(**{**info.__dict__, "token_required": False}).url == "sc://127.0.0.1:15002"
    assert "clients must send its token" in cli._token_note(info) and cli._token_note(
        server.ServerInfo(**{**info.__dict__, "token_required": False})) == ""


def test_the_token_goes_to_the_server_in_its_environment(tmp_path, monkeypatch):
    """`--conf spark.connect.authenticate.token=...` or the variable: the server JVM gets it from its
    environment, never on the command line (which every local user can list)."""
    seen = {}

    class Proc:
        pid, returncode = 4242, 1

        def poll(self):
            return 1

    def fake_popen(cmd, env, **_):
        seen.update(cmd=cmd, env=env)
        return Proc()

    monkeypatch.setattr(server.subprocess, "Popen", fake_popen)
    monkeypatch.setattr(server, "_terminate", lambda pid, timeout: True)  # no process to signal
    monkeypatch.setenv(server.TOKEN_ENV, "from-env")
    with pytest.raises(server.ServerError, match="exited"):
        server.start(str(tmp_path), port=_free_port(), spark_conf={server.TOKEN_CONF: "s3cret"}, timeout=5)
    assert seen["env"][server.TOKEN_ENV] == "s3cret" and not any("s3cret" in c for c in seen["cmd"])
    monkeypatch.delenv(server.TOKEN_ENV)
    with pytest.raises(server.ServerError, match="exited"):
        server.start(str(tmp_path), port=_free_port(), timeout=5)
    assert server.TOKEN_ENV not in seen["env"]


@pytest.mark.parametrize("host,loopback", [("127.0.0.1", True), ("127.1.2.3", True), ("localhost", True),
                                           ("LocalHost", True), ("::1", True), ("10.0.0.5", False),
                                           ("spark.example.com", False), ("0.0.0.0", False)])
def test_loopback_hosts_are_recognised(host, loopback):
    assert server.is_loopback(host) is loopback


def test_start_replaces_a_stale_record_and_reports_a_failed_start(tmp_path):
    gone = subprocess.Popen(["true"])
    gone.wait()
    os.makedirs(tmp_path / ".metastore")
    state = tmp_path / ".metastore" / server.STATE_FILE
    state.write_text(json.dumps({"pid": gone.pid, "host": "127.0.0.1", "port": 1, "warehouse": str(tmp_path),
                                 "log": "x.log", "python": "python"}))
    # a Spark setting the server refuses: it exits while starting, and start says so with its log
    with pytest.raises(server.ServerError, match="exited .* while starting"):
        server.start(str(tmp_path), port=_free_port(), spark_conf={"spark.driver.memory": "not-a-size"},
                     timeout=120)
    assert not state.exists()


def test_a_callers_java_options_are_appended_to_hudilites(tmp_path):
    """A heap or GC flag in a server's (or session's) settings must not drop hudilite's own JVM flags (time
    zone, the metastore's log, the class archive): the caller's come last, so a repeated flag is theirs."""
    os.makedirs(tmp_path / ".metastore")
    conf = server._server_conf(str(tmp_path), "127.0.0.1", 15002, {
        DRIVER_JAVA_OPTIONS: "-Xmx3g -XX:TieredStopAtLevel=1", "spark.sql.shuffle.partitions": "8"},
        cds="-XX:SharedArchiveFile=/x.jsa")
    java = conf[DRIVER_JAVA_OPTIONS].split()
    assert java[0] == "-Duser.timezone=UTC" and java[-2:] == ["-Xmx3g", "-XX:TieredStopAtLevel=1"], java
    assert "-XX:SharedArchiveFile=/x.jsa" in java and any(j.startswith("-Dderby.stream.error.file=") for j in java)
    assert conf["spark.sql.shuffle.partitions"] == "8" and conf["spark.sql.catalogImplementation"] == "hive"
    assert server._server_conf(str(tmp_path), "127.0.0.1", 15002, None)[DRIVER_JAVA_OPTIONS].count("-Duser.") == 1
    local = session_conf({"spark.executor.extraJavaOptions": "-Xss4m", "spark.ui.enabled": "true"})
    assert local["spark.executor.extraJavaOptions"] == "-Duser.timezone=UTC -Xss4m"
    assert local[DRIVER_JAVA_OPTIONS] == "-Duser.timezone=UTC" and local["spark.ui.enabled"] == "true"


@pytest.mark.parametrize("host,token,warned", [("0.0.0.0", False, True), ("0.0.0.0", True, False),
                                               ("127.0.0.1", False, False)])
def test_start_warns_of_a_server_others_reach_without_a_token(tmp_path, monkeypatch, capsys, host, token, warned):
    info = server.ServerInfo(pid=1, host=host, port=15002, warehouse=str(tmp_path), log="x.log", python="python",
                             token_required=token)
    monkeypatch.setattr(server, "start", lambda *a, **k: info)
    assert cli.main(["server", "start", "--warehouse", str(tmp_path), "--host", host]) == 0
    out = capsys.readouterr()
    assert ("runs code as this user" in out.err) is warned, out.err
    assert ("clients must send its token" in out.out) is token, out.out


def _serve(handle):
    """A loopback listener whose every connection `handle(sock)` serves, on a thread; its port."""
    listener = socket.create_server(("127.0.0.1", 0))

    def loop():
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                try:
                    handle(conn)
                except OSError:
                    pass

    threading.Thread(target=loop, daemon=True).start()
    return listener


def _plain_grpc(conn):
    conn.recv(4096)  # the TLS greeting; a plain HTTP/2 server replies with a GOAWAY frame and closes
    conn.sendall(bytes.fromhex("000008070000000000000000000000000001"))


@pytest.mark.parametrize("how", [{"use_ssl": True}, {"token": "t"}])
def test_tls_to_a_server_without_it_fails_at_once_naming_it(monkeypatch, how):
    """PySpark's client would retry the failed handshake for ten minutes."""
    monkeypatch.delenv(server.TOKEN_ENV, raising=False)
    listener = _serve(_plain_grpc)
    with listener:
        port = listener.getsockname()[1]
        host = "spark.example.com" if "token" in how else "127.0.0.1"  # a token goes over TLS to other hosts
        monkeypatch.setattr(server.socket, "create_connection", _to_loopback(socket.create_connection))
        t0 = time.monotonic()
        with pytest.raises(server.ServerError, match=f"at sc://{host}:{port} does not speak TLS"):
            server.connect(f"sc://{host}:{port}", **how)
        assert time.monotonic() - t0 < 10


def _to_loopback(create_connection):
    return lambda address, *a, **k: create_connection(("127.0.0.1", address[1]), *a, **k)


@pytest.mark.skipif(shutil.which("openssl") is None, reason="makes a certificate with openssl")
def test_a_tls_server_is_recognised_whatever_its_certificate(tmp_path):
    cert, key = tmp_path / "c.pem", tmp_path / "k.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out",
                    str(cert), "-days", "1", "-subj", "/CN=self-signed"], check=True, capture_output=True)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)

    def tls(conn):
        with ctx.wrap_socket(conn, server_side=True) as s:
            s.recv(1)

    with _serve(tls) as listener:
        assert server._speaks_tls("127.0.0.1", listener.getsockname()[1]) is True
    with _serve(_plain_grpc) as listener:
        assert server._speaks_tls("127.0.0.1", listener.getsockname()[1]) is False


@pytest.mark.parametrize("port", [0, 80, 1023, 65536, 70000])
def test_a_port_spark_cannot_listen_on_is_refused_before_starting(tmp_path, port):
    with pytest.raises(server.ServerError, match=f"port {port}: a Spark Connect server listens on a port from 1024"):
        server.start(str(tmp_path), port=port)
    assert not (tmp_path / ".metastore").exists()


def test_a_failed_start_reports_the_servers_error_from_sparks_log(tmp_path):
    """The server's driver logs to <warehouse>/.metastore/spark.log, not to its output: its error is there."""
    info = server.ServerInfo(pid=1, host="127.0.0.1", port=15002, warehouse=str(tmp_path), log="x.log",
                             python="python")
    ms = tmp_path / ".metastore"
    ms.mkdir()
    (ms / "spark.log").write_text("26/12/07 04:51:50 WARN Utils: a warning\n"
                                  "26/12/07 04:51:52 ERROR SparkConnectServer: Error starting Spark Connect server\n"
                                  "java.lang.IllegalArgumentException: requirement failed: bad setting\n"
                                  "\tat org.apache.spark.Something\n")
    assert server._startup_error(info, time.time() - 60) == (
        "26/12/07 04:51:52 ERROR SparkConnectServer: Error starting Spark Connect server | "
        "java.lang.IllegalArgumentException: requirement failed: bad setting")
    assert server._startup_error(info, time.time() + 60) == ""  # an earlier session's log
