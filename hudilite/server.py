"""`hudilite server`: a local Spark Connect server on a warehouse, and Connect sessions to it.

The server is the installed pyspark's own (its `spark-connect` jar ships in pyspark/jars), started with
`spark-submit` as a process of its own, its Python workers this interpreter (so they import hudilite) and its
catalog the warehouse's persistent one (the embedded Derby metastore under `<warehouse>/.metastore`, as the
dbt adapter's embedded session keeps it). The server holds the warehouse lock for its life, so an embedded
session on the same warehouse fails at once instead of in the metastore boot. Its pid, address and log are in
`<warehouse>/.metastore/connect-server.json`. Its JVM's temporary files (Spark's scratch directories, Connect's
per-session ML cache directories, which Spark leaves behind empty) go to `<warehouse>/.metastore/tmp`, removed
when the server stops and, after a killed server, when the next one starts.

Under Spark Connect a write's driver-side work (planning, the timeline, markers, the commit) runs in the
client process; the server's Python workers write the data files. Both need the table storage.
"""

from __future__ import annotations

import atexit
import fcntl
import ipaddress
import json
import os
import re
import shlex
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
from dataclasses import asdict, dataclass

from hudilite.errors import HudiliteError
from hudilite.spark.class_cache import DUMP_WAIT_S, class_cache_options, install_class_archive, process_alive
from hudilite.spark.jvm import java_property
from hudilite.spark.session import DRIVER_JAVA_OPTIONS, merge_conf, session_conf
from hudilite.warehouse import SPARK_LOG, WAREHOUSE_LOCK, WarehouseLockedError, locked_message, spark_log_config

DEFAULT_PORT = 15002  # Spark Connect's own default
STATE_FILE = "connect-server.json"  # in <warehouse>/.metastore
SERVER_LOG = "connect-server.log"
SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
SERVER_TMP = "tmp"  # in <warehouse>/.metastore: the server JVM's java.io.tmpdir
# Spark's own names for a server's pre-shared token: the server reads the setting or the variable, PySpark's
# client sends the variable's value when the URL names no token
TOKEN_CONF = "spark.connect.authenticate.token"
TOKEN_ENV = "SPARK_CONNECT_AUTHENTICATE_TOKEN"
TLS_CONNECT_RETRIES = 4  # a TLS session's first request: ~4 s of retries (PySpark's default: ten minutes)
WILDCARDS = ("0.0.0.0", "::", "[::]")  # --host values that listen on every address, loopback included


class ServerError(HudiliteError):
    """The Spark Connect server could not be started, or no server answers where one is expected."""


@dataclass(frozen=True)
class ServerInfo:
    pid: int
    host: str
    port: int
    warehouse: str
    log: str
    python: str
    class_dump: str | None = None  # where its JVM writes the class archive at exit (the first server only)
    class_archive: str | None = None  # where stop() moves that dump once the JVM is gone
    token_required: bool = False  # started with a token: clients must send it

    @property
    def url(self) -> str:
        """The URL clients use: a token server on loopback as `localhost`, where PySpark's client sends a
        token without TLS (`connect_url`)."""
        local = self.token_required and (self.host in WILDCARDS or is_loopback(self.host.strip("[]")))
        return f"sc://{'localhost' if local else self.host}:{self.port}"


def metastore_dir(warehouse: str) -> str:
    return os.path.join(os.path.abspath(warehouse), ".metastore")


def server_tmp(warehouse: str) -> str:
    return os.path.join(metastore_dir(warehouse), SERVER_TMP)


def _state_path(warehouse: str) -> str:
    return os.path.join(metastore_dir(warehouse), STATE_FILE)


def start_command(warehouse: str) -> str:
    return f"hudilite server start --warehouse {os.path.abspath(warehouse)}"


def read_state(warehouse: str) -> ServerInfo | None:
    """The server recorded for `warehouse` (running or not), or None."""
    try:
        with open(_state_path(warehouse)) as f:
            return ServerInfo(**json.load(f))
    except (FileNotFoundError, ValueError, TypeError):
        return None


def answers(host: str, port: int, timeout: float = 1.0) -> bool:
    """Whether something accepts connections at host:port."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def status(warehouse: str) -> ServerInfo | None:
    """The running server of `warehouse`, or None. A recorded server that is gone raises ServerError naming
    the command that starts a new one (its state file is removed)."""
    info = read_state(warehouse)
    if info is None:
        return None
    if process_alive(info.pid) and answers(info.host, info.port):
        return info
    if not process_alive(info.pid):
        _remove_state(warehouse)
        raise ServerError(f"the Spark Connect server of warehouse {os.path.abspath(warehouse)} (pid {info.pid}, "
                          f"{info.url}) is gone (stale state removed; its log: {info.log}). Start one with: "
                          f"{start_command(warehouse)}")
    raise ServerError(f"the Spark Connect server of warehouse {os.path.abspath(warehouse)} (pid {info.pid}) does "
                      f"not answer at {info.url} (still starting, or hung; its log: {info.log}). Stop it with: "
                      f"hudilite server stop --warehouse {os.path.abspath(warehouse)}")


def _remove_state(warehouse: str) -> None:
    try:
        os.remove(_state_path(warehouse))
    except FileNotFoundError:
        pass


def _server_conf(warehouse: str, host: str, port: int, spark_conf: dict | None, cds: str = "") -> dict:
    ms = metastore_dir(warehouse)
    # java.io.tmpdir: a Connect session's ML cache directory (created when a plain PySpark client sends its
    # clean-up at exit) is emptied but never removed by Spark, one per client session in /tmp otherwise
    java_opts = " ".join([java_property("java.io.tmpdir", server_tmp(warehouse)),
                          java_property("derby.stream.error.file", os.path.join(ms, "derby.log")),
                          java_property("log4j2.configurationFile", spark_log_config(ms)), cds]).rstrip()
    own = {"spark.ui.showConsoleProgress": "false", "spark.sql.ansi.enabled": "false",
           DRIVER_JAVA_OPTIONS: java_opts,
           "spark.sql.execution.pyspark.python": sys.executable,
           "spark.connect.grpc.binding.address": host,
           "spark.connect.grpc.binding.port": str(port)}
    # the caller's settings last, over the catalog's too (as before), Java options appended
    return merge_conf(session_conf(own, hive_dir=ms), spark_conf)


def start(warehouse: str, *, port: int | None = None, host: str = "127.0.0.1", master: str = "local[*]",
          spark_conf: dict | None = None, timeout: float = 180.0, token: str | None = None) -> ServerInfo:
    """Start the warehouse's Spark Connect server on `port` (None: DEFAULT_PORT) and wait until it answers a
    query on the catalog (which boots the metastore, so the first client finds it warm). A running one is
    returned as it is; asked for another port than the one it listens on, ServerError says so.
    `token`: clients must send it (Connect's pre-shared token); left out, `spark_conf`'s
    spark.connect.authenticate.token or $SPARK_CONNECT_AUTHENTICATE_TOKEN, else none."""
    asked, port = port, DEFAULT_PORT if port is None else port
    if not 1024 <= port <= 65535:  # Spark's own range (0, a random port, would leave clients guessing)
        raise ServerError(f"port {port}: a Spark Connect server listens on a port from 1024 to 65535")
    warehouse = os.path.abspath(warehouse)
    spark_conf = dict(spark_conf or {})
    # the token goes to the server in its environment, not on a command line every local user can list
    token = token or spark_conf.pop(TOKEN_CONF, None) or os.environ.get(TOKEN_ENV) or None
    recorded = read_state(warehouse)
    if recorded is not None and process_alive(recorded.pid):
        running = status(warehouse)  # running (or hung: said so)
        if asked is not None and running is not None and running.port != asked:
            raise ServerError(f"the Spark Connect server of warehouse {warehouse} already runs at {running.url} "
                              f"(pid {running.pid}), not on port {asked}: connect to it there, or stop it first "
                              f"(hudilite server stop --warehouse {shlex.quote(warehouse)})")
        return running
    _remove_state(warehouse)  # a stale record: its server is gone, start a new one
    if answers(host, port):
        raise ServerError(f"port {port} on {host} is in use by another process: pass --port")
    ms = metastore_dir(warehouse)
    os.makedirs(ms, exist_ok=True)
    # the server JVM's own class archive (its classes are not the embedded driver's): mapped when a former
    # server wrote it, else this server's JVM writes it when it exits and stop() moves it into place
    cds, dump, archive = class_cache_options(main_class=SERVER_CLASS, owner=f"server-{port}")
    if dump and os.path.exists(dump):  # a killed server's on this port (the port is free: none runs there)
        os.remove(dump)
    # the server inherits the warehouse lock (flock belongs to the open file, which the child shares) and holds
    # it for its life: an embedded session on this warehouse then fails at once with the usual message
    lock_fd = os.open(os.path.join(ms, WAREHOUSE_LOCK), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise WarehouseLockedError(locked_message(os.path.join(ms, "metastore_db"), warehouse)) from None
        # the lock is held: no server of this warehouse runs, so what is there is a killed one's
        shutil.rmtree(server_tmp(warehouse), ignore_errors=True)
        os.makedirs(server_tmp(warehouse), exist_ok=True)
        spawned = time.time()
        proc = _spawn(warehouse, host, port, master, spark_conf, lock_fd, cds, token)
    finally:
        os.close(lock_fd)
    info = ServerInfo(pid=proc.pid, host=host, port=port, warehouse=warehouse,
                      log=os.path.join(ms, SERVER_LOG), python=sys.executable, class_dump=dump,
                      class_archive=archive, token_required=bool(token))
    with open(_state_path(warehouse), "w") as f:
        json.dump(asdict(info), f)
    try:
        _wait_ready(proc, info, timeout, token, spawned)
    except BaseException:
        _terminate(proc.pid, 10)
        if dump and archive:
            install_class_archive(dump, archive, clean=False)  # a server that never served: no archive
        _remove_state(warehouse)
        raise
    return info


def _spawn(warehouse: str, host: str, port: int, master: str, spark_conf: dict | None, lock_fd: int, cds: str,
           token: str | None):
    import pyspark  # the server is the installed pyspark's (its jars); only `start` needs it

    home = os.path.dirname(pyspark.__file__)
    cmd = [os.path.join(home, "bin", "spark-submit"), "--class", SERVER_CLASS, "--name", "hudilite Connect server",
           "--master", master]
    for k, v in _server_conf(warehouse, host, port, spark_conf, cds).items():
        cmd += ["--conf", f"{k}={v}"]
    env = dict(os.environ, SPARK_HOME=home, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable,
               SPARK_LOCAL_IP=os.environ.get("SPARK_LOCAL_IP", "127.0.0.1"))
    env.pop("SPARK_CONNECT_MODE_ENABLED", None)  # a client setting: the server must start classic
    env.pop("SPARK_REMOTE", None)
    env.pop(TOKEN_ENV, None)
    if token:
        env[TOKEN_ENV] = token
    log = open(os.path.join(metastore_dir(warehouse), SERVER_LOG), "wb")
    try:
        # a session of its own: a Ctrl-C in the starting terminal does not stop the server
        return subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env,
                                cwd=metastore_dir(warehouse), start_new_session=True, pass_fds=(lock_fd,))
    finally:
        log.close()


def _wait_ready(proc, info: ServerInfo, timeout: float, token: str | None, spawned: float) -> None:
    deadline = time.monotonic() + timeout
    while not answers(info.host, info.port, 0.5):
        if proc.poll() is not None:
            raise ServerError(f"the Spark Connect server exited (code {proc.returncode}) while starting: "
                              f"{_startup_error(info, spawned) or _tail(info.log)} (log: {info.log})")
        if time.monotonic() > deadline:
            raise ServerError(f"the Spark Connect server did not answer at {info.url} within {timeout:.0f} s "
                              f"(log: {info.log})")
        time.sleep(0.3)
    # Connect's own session class: pyspark's builder would switch this whole process to Connect mode
    # (SPARK_CONNECT_MODE_ENABLED), which a process that starts the server (a test session) may not want
    from pyspark.sql.connect.session import SparkSession as RemoteSession

    if token and _parts(info.url)[0] != "localhost":
        # PySpark would send the token over TLS to this address, which the server does not speak: it answers,
        # and its first client boots the catalog
        return
    spark = RemoteSession.builder.remote(connect_url(info.url, token=token)).create()
    try:
        spark.sql("show databases").collect()  # boots the metastore: a broken catalog fails here, not in dbt
    finally:
        spark.stop()  # this client's session only: the server keeps running


def _startup_error(info: ServerInfo, spawned: float) -> str:
    """The server's own error from Spark's log (where its driver logs, not its output), if this server wrote
    it: the last ERROR line and the exception under it."""
    path = os.path.join(metastore_dir(info.warehouse), SPARK_LOG)
    try:
        if os.path.getmtime(path) < spawned:  # an earlier session's log: this JVM died before logging
            return ""
        with open(path, errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return ""
    at = max((i for i, ln in enumerate(lines) if " ERROR " in ln), default=None)
    return "" if at is None else " | ".join(ln.strip() for ln in lines[at:at + 2])


def _tail(path: str, lines: int = 5) -> str:
    try:
        with open(path, errors="replace") as f:
            return " | ".join(ln.strip() for ln in f.readlines()[-lines:])
    except OSError:
        return ""


def stop(warehouse: str, timeout: float = 30.0, dump_timeout: float = DUMP_WAIT_S) -> ServerInfo | None:
    """Stop the warehouse's server (its process group: spark-submit's JVM and its Python workers); the server
    stopped, or None when none was recorded. The first server's JVM writes its class archive as it exits (on
    SIGTERM too): that is waited for, up to `dump_timeout`, and the archive moved into place only after a
    clean exit."""
    info = read_state(warehouse)
    if info is None:
        return None
    clean = False
    if process_alive(info.pid):
        clean = _terminate(info.pid, dump_timeout if info.class_dump else timeout)
    if info.class_dump and info.class_archive:
        install_class_archive(info.class_dump, info.class_archive, clean)
    if not process_alive(info.pid):
        shutil.rmtree(server_tmp(warehouse), ignore_errors=True)
    _remove_state(warehouse)
    return info


def _terminate(pid: int, timeout: float) -> bool:
    """SIGTERM to the server's process group, SIGKILL after `timeout`; whether it exited on the SIGTERM."""
    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(pid, sig)  # started with a session of its own: the group is the server's
        except ProcessLookupError:
            return False  # gone before this signal: how it ended is unknown
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            try:
                if os.waitpid(pid, os.WNOHANG)[0] == pid:  # our child (started in this process): reap it
                    return sig == signal.SIGTERM
            except ChildProcessError:
                if not process_alive(pid):
                    return sig == signal.SIGTERM
            time.sleep(0.2)
    return False


def connect_url(url: str, *, token: str | None = None, use_ssl: bool = False, params: dict | None = None) -> str:
    """The Connect URL for `url` (sc://host:port[/;param=...], the scheme optional) with `token`, `use_ssl`
    and `params` added as its parameters. A token without TLS to a loopback address names the host
    `localhost`: PySpark sends a token over TLS to any other host name, which a local server does not speak,
    and over gRPC's local credentials to `localhost`."""
    full = url if url.startswith("sc://") else f"sc://{url}"
    extra = dict(params or {})
    if token:
        extra["token"] = token
    if use_ssl:
        extra["use_ssl"] = "true"
    if extra:
        full = full.rstrip("/") + ("/" if "/;" not in full else "") + "".join(f";{k}={v}" for k, v in extra.items())
    host, port, rest = _parts(full)
    if _sends_token(rest) and not _asks_ssl(rest) and host and is_loopback(host.strip("[]")):
        full = f"sc://localhost:{port}" + (f"/{rest}" if rest else "")
    return full


def redact_url(text: str) -> str:
    """`text` with the token of any Connect URL in it masked (for logs and errors)."""
    return re.sub(r"(?i)(;token=)[^;\s]*", r"\1***", text)


def _parts(url: str) -> tuple[str, str, str]:
    """(host, port, parameters) of a Connect URL."""
    hostport, _, rest = url[len("sc://"):].partition("/")
    host, _, port = hostport.rpartition(":")
    return host, port, rest


def _asks_ssl(params: str) -> bool:
    return "use_ssl=true" in params.lower()


def _sends_token(params: str) -> bool:
    """Whether PySpark's client sends a token with these URL parameters: theirs, else the variable's (set at
    all: PySpark takes an empty one too)."""
    return ";token=" in f";{params}" or os.environ.get(TOKEN_ENV) is not None


def _start_command(warehouse: str | None, port: str) -> str:
    return (f"hudilite server start --warehouse {shlex.quote(warehouse) if warehouse else 'DIR'}"
            + (f" --port {port}" if port != str(DEFAULT_PORT) else ""))


def _gone_policy(host: str, port: int, shown: str, warehouse: str | None):
    """PySpark's retry policy, except for a loopback server whose port no longer takes connections: it was
    stopped or it died, and PySpark would retry each call for ten minutes (a dbt run hung that long, then
    failed with gRPC's text). The call fails at once with a ServerError naming the command to start it again.
    PySpark asks a policy whether to retry (`can_retry`); what that raises is what the caller gets."""
    import grpc
    from pyspark.sql.connect.client.retries import DefaultPolicy

    class ServerGonePolicy(DefaultPolicy):
        def can_retry(self, e: BaseException) -> bool:
            if not super().can_retry(e):
                return False
            if isinstance(e, grpc.RpcError) and e.code() == grpc.StatusCode.UNAVAILABLE and \
                    not answers(host, port, 2.0):
                raise ServerError(f"the Spark Connect server at {shown} stopped answering (it was stopped or it "
                                  f"exited): start it again with: {_start_command(warehouse, str(port))}") from e
            return True

    return ServerGonePolicy()


def connect(url: str, *, token: str | None = None, use_ssl: bool = False, params: dict | None = None,
            conf: dict | None = None, warehouse: str | None = None):
    """A Spark Connect session to `url` (sc://host:port[/;param=...]); `token` and `use_ssl` are added as the
    Connect URL parameters (`connect_url`); `conf`: runtime SQL settings of the new session, sent in one
    request (a `spark.conf.set` each would be a round trip each) that PySpark sends ignoring failures: pass
    settings known to be valid. A server that does not answer, or refuses the token, raises ServerError naming
    what to do. A server on the loopback interface is queried without reattachable executions. PySpark then
    runs this process in Connect mode (its functions build Connect columns): a process has classic sessions
    or Connect ones, not both. `warehouse`: the local warehouse directory the start command in errors names.
    A loopback server that goes away later fails the call at once (`_gone_policy`)."""
    from pyspark.sql import SparkSession

    full = connect_url(url, token=token, use_ssl=use_ssl, params=params)
    host, port, rest = _parts(full)
    hostport = f"{host}:{port}"
    if host and port.isdigit() and not answers(host, int(port), 2.0):
        raise ServerError(f"no Spark Connect server answers at sc://{hostport}. Start a local one with: "
                          + _start_command(warehouse, port))
    # PySpark's rule: TLS when asked for, or for a token to any host but `localhost`
    tls = _asks_ssl(rest) or (_sends_token(rest) and host != "localhost")
    if tls and port.isdigit() and _speaks_tls(host.strip("[]"), int(port)) is False:
        # PySpark's client would retry the failing handshake for ten minutes
        raise ServerError(f"the Spark Connect server at sc://{hostport} does not speak TLS, which this connection "
                          "asks for (use_ssl, or a token: PySpark sends a token over TLS to every host but "
                          "localhost): drop use_ssl, or put TLS in front of the server")
    builder = SparkSession.builder.remote(full)
    if conf and not tls:
        builder = builder.config(map={k: str(v) for k, v in conf.items()})
    shown = (url if url.startswith("sc://") else f"sc://{url}").split("/;")[0].rstrip("/")
    spark, before = None, SparkSession.getActiveSession()
    try:
        spark = builder.create()  # sends `conf`, the first request, where the server checks the token
        if tls:
            _first_tls_request(spark, conf, shown)
        elif not conf:
            spark.conf.get("spark.sql.session.timeZone")  # else the first query's would fail on it
    except Exception as e:
        # PySpark's own exit handler would retry its clean-up against this server for ten minutes
        active = SparkSession.getActiveSession()  # the new session, when `create` failed after making it
        client = getattr(spark, "client", None) or (getattr(active, "client", None) if active is not before
                                                    else None)
        if client is not None:
            _close_at_exit(client)
        if "UNAUTHENTICATED" not in str(e):
            raise
        given = _sends_token(rest)
        raise ServerError(f"the Spark Connect server at {shown} "
                          + ("refused the token sent (it is not the server's)" if given else "requires a token")
                          + f": pass the server's token (the dbt profile's `token`) or set {TOKEN_ENV}") from None
    atexit.register(_close_at_exit, spark.client)  # after the client's own handler: runs before it
    if is_loopback(host.strip("[]")):
        # a reattachable execution sends a ReleaseExecute after each reply: ~10 ms per query on 2 cores
        # (bench/README.md); reattaching only pays off over networks that cut long streams
        spark.client.disable_reattachable_execute()
        if port.isdigit():
            spark.client.set_retry_policies([_gone_policy(host.strip("[]"), int(port), shown, warehouse)])
    return spark


def _first_tls_request(spark, conf: dict | None, shown: str) -> None:
    """The session's first request over TLS, with few retries: a handshake that fails on the certificate
    (untrusted, another name) looks like an unavailable server, which PySpark retries for ten minutes."""
    from pyspark.sql.connect.client.retries import DefaultPolicy

    client = spark.client
    policies = client.get_retry_policies()
    client.set_retry_policies([DefaultPolicy(max_retries=TLS_CONNECT_RETRIES)])
    try:
        set_all = getattr(spark.conf, "_set_all", None)  # PySpark's builder's one request (a private method)
        if conf and set_all is not None:
            set_all(configs={k: str(v) for k, v in conf.items()}, silent=True)
        elif conf:
            for k, v in conf.items():
                spark.conf.set(k, str(v))
        else:
            spark.conf.get("spark.sql.session.timeZone")
    except Exception as e:
        if "UNAVAILABLE" not in str(e):
            raise
        detail = next((ln.strip() for ln in str(e).splitlines() if "details" in ln or "handshake" in ln.lower()),
                      str(e).splitlines()[0] if str(e) else type(e).__name__)
        raise ServerError(f"the Spark Connect server at {shown} did not complete a TLS connection ({detail}): "
                          "check its certificate - a certificate gRPC does not trust (self-signed, a private CA) "
                          "needs GRPC_DEFAULT_SSL_ROOTS_FILE_PATH naming its CA file, and it must name the host "
                          "connected to") from None
    finally:
        client.set_retry_policies(policies)


def _speaks_tls(host: str, port: int, timeout: float = 5.0) -> bool | None:
    """Whether the server at host:port answers a TLS handshake (certificates unchecked: only the protocol is
    asked about); None when it does not answer in time."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.set_alpn_protocols(["h2"])
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock, \
                ctx.wrap_socket(sock, server_hostname=host):
            return True
    except (ssl.SSLError, ConnectionResetError, ConnectionAbortedError, BrokenPipeError):
        return False  # a plain gRPC server answers the greeting with an HTTP/2 error and closes
    except OSError:  # a timeout, or nothing there (connect() said so already)
        return None


def is_loopback(host: str) -> bool:
    """Whether `host` (a name or an address) is this machine's loopback interface."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _close_at_exit(client) -> None:
    """PySpark's client sends an ML-cache clean-up at interpreter exit and retries it for ten minutes when the
    server is gone (stopped, restarted, unreachable), so the process would not exit. A closed client skips
    it; the server drops a session's ML cache with the session. (The client, not the session: PySpark's own
    exit handler keeps the client alive anyway, this one keeps nothing more.)"""
    if not client.is_closed:
        client.close()
