"""Timeline-server-based (batched) markers: a marker service in the driver, and its executor-side client.

Executors (Spark Python workers, other processes) send one HTTP request per marker instead of creating one
file each. The service queues the requests; every `batch_interval_ms` a dispatcher hands everything pending
to an idle worker thread (`num_threads` of them). Worker `i` appends the batch's new markers to its own file
`.hoodie/.temp/<instant>/MARKERS<i>` - one `<partition>/<file>.marker.<TYPE>` line each - with ONE write and
ONE fsync per batch, and only then answers every request of the batch: a `created` answer means the marker
is durable. A marker already in the instant's in-memory set is rejected (`created: false`). The set of an
instant is loaded lazily, on the first request naming it, from its `MARKERS*` files and any direct marker
files (so a restarted service knows what its predecessor acknowledged). `MARKERS.type` holds
`TIMELINE_SERVER_BASED`.

On object storage (any non-local table) objects cannot be appended to: each batch rewrites the worker's whole
`MARKERS<i>` object with one PUT (as Apache Hudi's timeline server does on S3), from the content the service keeps
in memory; the PUT replaces the object atomically, so a killed service leaves the last acknowledged content and
there is no torn tail to repair. This is the default marker type for such tables (`marker_type`): one PUT per
batch instead of one per data file.

This is the on-disk layout `hudilite.markers.direct.list_markers` (and rollback) already reads.

HTTP API (JSON bodies and answers, HTTP/1.1 keep-alive):

    GET  /v1/ping                                    -> {"ok": true, "basePath": ...}
    POST /v1/markers/create  {instant, partition, file, type, token?, basePath?}
                                                     -> {"created": bool, "marker": "<partition>/<file>.marker.<TYPE>"}
    POST /v1/markers/init    {instant}               -> {"ok": true}
    GET  /v1/markers/list?instant=<instant>          -> {"markers": [[partition, file, type], ...]}
    POST /v1/markers/delete  {instant}               -> {"deleted": true}
    GET  /v1/stats                                   -> counters (requests, batches, fsyncs, files created...)

`token` makes a create idempotent: a client retrying after a lost answer sends the same token and gets
`created: true` for the marker its first attempt made.
"""

from __future__ import annotations

import http.client
import json
import os
import queue
import re
import socket
import threading
import time
import uuid
from collections import defaultdict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, quote, urlsplit

from hudilite.errors import HudiliteError
from hudilite.markers.direct import MARKER_TYPE_FILE, SUFFIX, delete_markers, list_markers, marker_dir
from hudilite.options import MARKERS_BATCH_INTERVAL_MS, MARKERS_NUM_THREADS, MARKERS_SERVICE_URL, MARKERS_TYPE
from hudilite.storage.local import fsync_path, local_storage, normalize_path, storage_for
from hudilite.storage.paths import is_local

TIMELINE_SERVER_BASED = "TIMELINE_SERVER_BASED"
DIRECT = "DIRECT"
OPT_MARKERS_TYPE, OPT_SERVICE_URL = MARKERS_TYPE.key, MARKERS_SERVICE_URL.key
OPT_BATCH_INTERVAL_MS, OPT_NUM_THREADS = MARKERS_BATCH_INTERVAL_MS.key, MARKERS_NUM_THREADS.key
DEFAULT_BATCH_INTERVAL_MS = MARKERS_BATCH_INTERVAL_MS.default
DEFAULT_NUM_THREADS = MARKERS_NUM_THREADS.default

_MARKERS_FILE = re.compile(r"^MARKERS\d+$")
_VALID_KINDS = {"CREATE", "MERGE", "APPEND"}


def marker_type(base_path: str, options: dict | None = None) -> str:
    """The marker type of a write: `hoodie.write.markers.type` when given, else DIRECT for local tables and
    TIMELINE_SERVER_BASED on object storage, where a file per marker costs a request each."""
    if options and options.get(MARKERS_TYPE.key) is not None:
        return str(MARKERS_TYPE.get(options)).strip().upper()
    return DIRECT if is_local(base_path) else TIMELINE_SERVER_BASED


class MarkerServiceError(HudiliteError):
    """The marker service could not be reached, or refused or failed a request."""


class MarkerExistsError(MarkerServiceError):
    """The marker already exists for this instant (another attempt writes the same data file)."""


def marker_line(partition: str, file_name: str, kind: str) -> str:
    return f"{partition}/{file_name}{SUFFIX}{kind}" if partition else f"{file_name}{SUFFIX}{kind}"



class _Req:
    __slots__ = ("instant", "line", "token", "event", "created", "error", "followers", "t0")

    def __init__(self, instant: str, line: str, token: str | None):
        self.instant = instant
        self.line = line
        self.token = token
        self.event = threading.Event()
        self.created: bool | None = None
        self.error: str | None = None
        self.followers: list[_Req] = []  # retries (same token) of this request while it is in flight
        self.t0 = time.monotonic()

    def finish(self, created: bool | None, error: str | None = None) -> None:
        if self.event.is_set():
            return
        self.created, self.error = created, error
        self.event.set()
        for f in self.followers:
            f.finish(created, error)


class _InstantState:
    """In-memory marker set of one instant, plus the worker-owned append file descriptors."""

    def __init__(self, instant: str, num_files: int):
        self.instant = instant
        self.lock = threading.Lock()
        self.loaded = False
        self.deleted = False
        self.markers: set[str] = set()
        self.tokens: dict[str, str] = {}  # marker -> token of the request that created it (this service life)
        self.inflight: dict[str, _Req] = {}  # marker -> accepted request not yet durable
        self.fds: dict[int, int] = {}
        # object stores: each worker file's content, rewritten whole per batch; names of MARKERS files that
        # existed when the instant was loaded (a previous service life's, to be continued, not overwritten)
        self.contents: dict[int, bytes] = {}
        self.existing: set[str] = set()
        self.file_locks = [threading.Lock() for _ in range(num_files)]


class _Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.c = defaultdict(int)

    def add(self, **kw: int) -> None:
        with self.lock:
            for k, v in kw.items():
                self.c[k] += v

    def snapshot(self) -> dict:
        with self.lock:
            return dict(self.c)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 1024

    def __init__(self, addr, handler, service: "MarkerService"):
        self.service = service
        self.open_sockets: set[socket.socket] = set()
        self.sock_lock = threading.Lock()
        super().__init__(addr, handler)

    def process_request(self, request, client_address):
        with self.sock_lock:
            self.open_sockets.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request):
        with self.sock_lock:
            self.open_sockets.discard(request)
        super().shutdown_request(request)

    def close_connections(self) -> None:
        with self.sock_lock:
            socks = list(self.open_sockets)
        for s in socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # small answers: no Nagle/delayed-ACK stalls
    server: _Server

    def log_message(self, format, *args):  # noqa: A002 - quiet
        pass

    def _send(self, code: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _body(self) -> dict:
        n = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(n) if n else b""
        return json.loads(raw) if raw else {}

    def do_GET(self):  # noqa: N802
        self._dispatch("GET")

    def do_POST(self):  # noqa: N802
        self._dispatch("POST")

    def _dispatch(self, method: str) -> None:
        svc = self.server.service
        u = urlsplit(self.path)
        q = {k: v[-1] for k, v in parse_qs(u.query).items()}
        try:
            body = self._body() if method == "POST" else {}
            code, ans = svc._handle(method, u.path, {**q, **body})
        except (ValueError, KeyError) as e:
            code, ans = 400, {"error": f"bad request: {e!r}"}
        except Exception as e:  # noqa: BLE001 - answer, never kill the connection thread silently
            code, ans = 500, {"error": f"{type(e).__name__}: {e}"}
        self._send(code, ans)


class MarkerService:
    """Batched marker service for one table, running in the driver process.

    `start()` returns the base URL (`http://127.0.0.1:<port>`); pass it to executors through
    `hoodie.write.markers.service.url`. Usable as a context manager.
    """

    def __init__(self, base_path: str, *, batch_interval_ms: float = DEFAULT_BATCH_INTERVAL_MS,
                 num_threads: int = DEFAULT_NUM_THREADS, host: str = "127.0.0.1", port: int = 0,
                 request_timeout_s: float = 120.0):
        if num_threads < 1:
            raise ValueError("num_threads must be >= 1")
        if batch_interval_ms < 0:
            raise ValueError("batch_interval_ms must be >= 0")
        self.base_path = normalize_path(base_path)
        self._local = is_local(self.base_path)  # append descriptors and fsyncs; else whole-object rewrites
        self.batch_interval = batch_interval_ms / 1000.0
        self.num_threads = num_threads
        self.host, self.port = host, port
        self.request_timeout_s = request_timeout_s
        self.url: str | None = None
        self._server: _Server | None = None
        self._threads: list[threading.Thread] = []
        self._cond = threading.Condition()
        self._pending: list[_Req] = []
        self._running = False
        self._accepting = False
        self._idle: queue.Queue[int] = queue.Queue()
        self._work: list[queue.Queue] = []
        self._states: dict[str, _InstantState] = {}
        self._states_lock = threading.Lock()
        self.stats = _Stats()

    @classmethod
    def from_options(cls, base_path: str, options: dict | None = None, **kw) -> "MarkerService":
        return cls(base_path, batch_interval_ms=MARKERS_BATCH_INTERVAL_MS.get(options),
                   num_threads=MARKERS_NUM_THREADS.get(options), **kw)

    # ---------------------------------------------------------------- lifecycle
    def start(self) -> str:
        if self._running:
            return self.url  # type: ignore[return-value]
        self._server = _Server((self.host, self.port), _Handler, self)
        self.port = self._server.server_address[1]
        self.url = f"http://{self.host}:{self.port}"
        self._running = self._accepting = True
        self._work = [queue.Queue() for _ in range(self.num_threads)]
        self._idle = queue.Queue()
        for i in range(self.num_threads):
            self._idle.put(i)
        self._threads = [threading.Thread(target=self._worker, args=(i,), name=f"hl-marker-worker-{i}",
                                          daemon=True) for i in range(self.num_threads)]
        self._threads.append(threading.Thread(target=self._dispatcher, name="hl-marker-dispatcher", daemon=True))
        self._threads.append(threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                              name="hl-marker-http", daemon=True))
        for t in self._threads:
            t.start()
        return self.url

    def stop(self) -> None:
        """Answer everything already queued, then stop serving and close the marker files."""
        if not self._running:
            return
        with self._cond:
            self._accepting = False
            self._running = False
            self._cond.notify_all()
        for t in self._threads:
            if t.name == "hl-marker-dispatcher":
                t.join()
        for w in self._work:
            w.put(None)
        for t in self._threads:
            if t.name.startswith("hl-marker-worker"):
                t.join()
        assert self._server is not None
        self._server.shutdown()
        self._server.close_connections()
        self._server.server_close()
        for t in self._threads:
            t.join(timeout=5)
        self._threads = []
        with self._states_lock:
            states, self._states = list(self._states.values()), {}
        for st in states:
            with st.lock:
                for fd in st.fds.values():
                    os.close(fd)
                st.fds.clear()

    def __enter__(self) -> "MarkerService":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def markers(self, instant: str) -> "ServiceMarkers":
        """A client for `instant` (picklable; hand it to executors)."""
        if not self.url:
            raise MarkerServiceError("marker service not started")
        return ServiceMarkers(self.url, self.base_path, instant)

    # ---------------------------------------------------------------- request handling (HTTP threads)
    def _handle(self, method: str, path: str, a: dict) -> tuple[int, dict]:
        if path == "/v1/ping":
            return 200, {"ok": True, "basePath": self.base_path}
        if path == "/v1/stats":
            return 200, self.stats.snapshot()
        if a.get("basePath") and normalize_path(a["basePath"]) != self.base_path:
            return 400, {"error": f"this marker service serves {self.base_path}, not {a['basePath']}"}
        instant = str(a.get("instant") or "")
        if not instant or "/" in instant or instant.startswith("."):
            return 400, {"error": f"invalid instant {instant!r}"}
        if path == "/v1/markers/create" and method == "POST":
            part, name, kind = str(a.get("partition") or ""), str(a["file"]), str(a["type"])
            if kind not in _VALID_KINDS or not name or "/" in name or "\n" in part + name or SUFFIX in name:
                return 400, {"error": f"invalid marker {part!r}/{name!r} type {kind!r}"}
            part = part.strip("/")
            req = _Req(instant, marker_line(part, name, kind), a.get("token"))
            with self._cond:
                if not self._accepting:
                    return 503, {"error": "marker service is stopping"}
                self._pending.append(req)
                self._cond.notify()
            self.stats.add(requests=1)
            if not req.event.wait(self.request_timeout_s):
                return 504, {"error": "marker request timed out in the service"}
            if req.error:
                return 500, {"error": req.error, "marker": req.line}
            return 200, {"created": bool(req.created), "marker": req.line}
        if path == "/v1/markers/init" and method == "POST":
            st = self._state(instant)
            with st.lock:
                self._ensure_loaded(st)
            return 200, {"ok": True}
        if path == "/v1/markers/list":
            st = self._state(instant)
            with st.lock:
                self._ensure_loaded(st)
                lines = sorted(st.markers)
            out = []
            for line in lines:
                p, kind = line.rsplit(SUFFIX, 1)
                part, _, name = p.rpartition("/")
                out.append([part, name, kind])
            return 200, {"markers": out}
        if path == "/v1/markers/delete" and method == "POST":
            self._delete(instant)
            return 200, {"deleted": True}
        return 404, {"error": f"no endpoint {method} {path}"}

    # ---------------------------------------------------------------- per-instant state
    def _state(self, instant: str) -> _InstantState:
        with self._states_lock:
            st = self._states.get(instant)
            if st is None:
                st = self._states[instant] = _InstantState(instant, self.num_threads)
            return st

    def _ensure_loaded(self, st: _InstantState) -> None:
        """Caller holds st.lock. First request for the instant: directory, type file, and the marker set
        from whatever is on disk (a previous service life, direct markers)."""
        if st.loaded:
            return
        root = marker_dir(self.base_path, st.instant)
        fs = storage_for(root)
        if not self._local:
            self._write_type_file(root)
            st.existing = {f for f in fs.listdir(root) if _MARKERS_FILE.match(f)}
            self._load_markers(st)
            return
        if not fs.isdir(root):
            top = root
            while not fs.isdir(os.path.dirname(top)):
                top = os.path.dirname(top)
            fs.makedirs(root)
            d, n = root, 0
            while True:  # make every new directory entry durable, from the instant's directory up
                d = os.path.dirname(d)
                fsync_path(d)
                n += 1
                if d == os.path.dirname(top):
                    break
            self.stats.add(dirs_created=n, fsyncs=n)
        self._write_type_file(root)
        for f in fs.listdir(root):
            if _MARKERS_FILE.match(f):
                self._repair_torn_tail(os.path.join(root, f))
        self._load_markers(st)

    def _load_markers(self, st: _InstantState) -> None:
        """The instant's markers as stored (a previous service life's files, direct markers)."""
        n = 0
        for part, name, kind in list_markers(self.base_path, st.instant):
            st.markers.add(marker_line(part, name, kind))
            n += 1
        self.stats.add(instants_loaded=1, markers_loaded=n)
        st.loaded = True

    def _write_type_file(self, root: str) -> None:
        p = os.path.join(root, MARKER_TYPE_FILE)
        fs = storage_for(p)
        if not self._local and fs.put_if_absent(p, TIMELINE_SERVER_BASED.encode()):
            self.stats.add(files_created=1)  # the usual case in one request, instead of HEAD + LIST + PUT
            return
        if fs.exists(p):
            cur = fs.read_bytes(p).decode().strip()
            # `DirectMarkers.init()` may have written DIRECT before any marker existed: take the instant over
            # only then (a real Hudi reader trusts this file to know which markers to read).
            if cur == TIMELINE_SERVER_BASED or any(e != MARKER_TYPE_FILE for e in fs.listdir(root)):
                return
        fs.write_bytes(p, TIMELINE_SERVER_BASED.encode())
        if self._local:
            fsync_path(root)
            self.stats.add(fsyncs=2)
        self.stats.add(files_created=1)

    def _repair_torn_tail(self, path: str) -> None:
        """A service killed mid-write may leave a partial last line; it was never acknowledged, drop it so the
        next append starts on a line of its own."""
        fs = local_storage()  # the service's files are appended through kept-open descriptors: local files
        size = fs.size(path)
        if size == 0:
            return
        start = max(0, size - 65536)
        tail = fs.read_range(path, start, size - start)
        if tail.endswith(b"\n"):
            return
        cut = tail.rfind(b"\n")
        keep = (size - len(tail) + cut + 1) if cut >= 0 else (0 if size <= 65536 else None)
        if keep is None:  # an absurdly long torn line: fall back to scanning the whole file
            keep = fs.read_bytes(path).rfind(b"\n") + 1
        fs.truncate(path, keep)
        fs.fsync_file(path)
        self.stats.add(torn_tails_repaired=1, fsyncs=1)

    def _delete(self, instant: str) -> None:
        with self._states_lock:
            st = self._states.pop(instant, None)
        if st is not None:
            with st.lock:
                st.deleted = True
                for lk in st.file_locks:
                    lk.acquire()
                try:
                    for fd in st.fds.values():
                        os.close(fd)
                    st.fds.clear()
                    st.contents.clear()
                finally:
                    for lk in st.file_locks:
                        lk.release()
                for r in list(st.inflight.values()):
                    r.finish(None, "markers of the instant were deleted")
                st.inflight.clear()
        delete_markers(self.base_path, instant)

    # ---------------------------------------------------------------- batching
    def _dispatcher(self) -> None:
        while True:
            with self._cond:
                while not self._pending and self._running:
                    self._cond.wait()
                if not self._pending and not self._running:
                    return
                stopping = not self._running
            if not stopping and self.batch_interval > 0:
                time.sleep(self.batch_interval)  # let requests accumulate into one batch
            w = self._idle.get()  # wait for a free worker; meanwhile the next batch keeps growing
            with self._cond:
                batch, self._pending = self._pending, []
            if batch:
                self._work[w].put(batch)
            else:
                self._idle.put(w)

    def _worker(self, w: int) -> None:
        while True:
            batch = self._work[w].get()
            if batch is None:
                return
            try:
                self._process(w, batch)
            except BaseException as e:  # noqa: BLE001 - never leave a request unanswered
                for r in batch:
                    if not r.event.is_set():
                        r.finish(None, f"{type(e).__name__}: {e}")
            finally:
                self._idle.put(w)

    def _process(self, w: int, batch: list[_Req]) -> None:
        by_instant: dict[str, list[_Req]] = defaultdict(list)
        for r in batch:
            by_instant[r.instant].append(r)
        self.stats.add(batches=1)
        for instant, reqs in by_instant.items():
            while True:
                st = self._state(instant)
                with st.lock:
                    if st.deleted:
                        continue
                    self._ensure_loaded(st)
                    new: list[_Req] = []
                    for r in reqs:
                        if r.line in st.markers:
                            orig = st.inflight.get(r.line)
                            if r.token and orig is not None and orig.token == r.token:
                                orig.followers.append(r)  # a retry of a request not yet durable
                            elif r.token and st.tokens.get(r.line) == r.token:
                                r.finish(True)  # a retry whose first attempt already succeeded
                            else:
                                r.finish(False)
                                self.stats.add(duplicates=1)
                        else:
                            st.markers.add(r.line)
                            if r.token:
                                st.tokens[r.line] = r.token
                            st.inflight[r.line] = r
                            new.append(r)
                break
            if not new:
                continue
            try:
                self._append(st, w, "".join(r.line + "\n" for r in new).encode())
            except BaseException as e:
                with st.lock:
                    for r in new:
                        st.markers.discard(r.line)
                        st.tokens.pop(r.line, None)
                        st.inflight.pop(r.line, None)
                for r in new:
                    r.finish(None, f"{type(e).__name__}: {e}")
                continue
            with st.lock:
                for r in new:
                    st.inflight.pop(r.line, None)
            now = time.monotonic()
            for r in new:
                r.finish(True)
            with self.stats.lock:
                self.stats.c["created"] += len(new)
                self.stats.c["max_batch"] = max(self.stats.c["max_batch"], len(new))
                self.stats.c["service_latency_us_sum"] += int(sum(now - r.t0 for r in new) * 1e6)

    def _append(self, st: _InstantState, w: int, data: bytes) -> None:
        """One write + fsync of a whole batch to this worker's own file."""
        with st.file_locks[w]:
            if st.deleted:
                raise MarkerServiceError("markers of the instant were deleted")
            if not self._local:
                self._rewrite(st, w, data)
                return
            fd = st.fds.get(w)
            if fd is None:
                root = marker_dir(self.base_path, st.instant)
                path = os.path.join(root, f"MARKERS{w}")
                fs = local_storage()  # a descriptor kept open for appends: the service's files are local
                existed = fs.exists(path)
                fd = fs.open_append_fd(path)
                st.fds[w] = fd
                if not existed:
                    fsync_path(root)  # the new file's directory entry is durable too
                    self.stats.add(files_created=1, fsyncs=1)
            local_storage().append_fd(fd, data, path=f"{marker_dir(self.base_path, st.instant)}/MARKERS{w}")
            self.stats.add(writes=1, fsyncs=1, bytes_written=len(data))


    def _rewrite(self, st: _InstantState, w: int, data: bytes) -> None:
        """Object stores: one PUT of the worker's whole file with the batch added. Caller holds the file lock."""
        path = f"{marker_dir(self.base_path, st.instant)}/MARKERS{w}"
        fs = storage_for(path)
        cur = st.contents.get(w)
        if cur is None:
            cur = b""
            if f"MARKERS{w}" in st.existing:  # a previous service life's file: continue it
                try:
                    cur = fs.read_bytes(path)
                except FileNotFoundError:
                    pass
                cur = cur[:cur.rfind(b"\n") + 1]
            self.stats.add(files_created=0 if cur else 1)
        new = cur + data
        fs.write_bytes(path, new)
        st.contents[w] = new
        self.stats.add(writes=1, bytes_written=len(data))


# ==================================================================== client (executors)
_local = threading.local()


def _conn(netloc: str, timeout: float) -> http.client.HTTPConnection:
    conns = getattr(_local, "conns", None)
    if conns is None or getattr(_local, "pid", None) != os.getpid():  # never reuse a socket across fork
        conns = _local.conns = {}
        _local.pid = os.getpid()
    c = conns.get(netloc)
    if c is None:
        host, _, port = netloc.partition(":")
        c = conns[netloc] = http.client.HTTPConnection(host, int(port or 80), timeout=timeout)
    return c


def _drop_conn(netloc: str) -> None:
    conns = getattr(_local, "conns", None) or {}
    c = conns.pop(netloc, None)
    if c is not None:
        c.close()


_RETRYABLE = (ConnectionError, http.client.RemoteDisconnected, http.client.BadStatusLine,
              http.client.CannotSendRequest, http.client.ResponseNotReady, http.client.IncompleteRead,
              socket.timeout, TimeoutError)


class ServiceMarkers:
    """Executor-side markers through the marker service; same `create(partition, file_name, kind)` as
    `DirectMarkers`. Picklable: holds only the URL, base path, instant and numbers; connections are per
    thread (keep-alive) and re-made in a new process."""

    def __init__(self, url: str, base_path: str, instant: str, *, timeout_s: float = 120.0, retries: int = 5):
        self.url = url.rstrip("/")
        self.base_path = base_path
        self.instant = instant
        self.timeout_s = timeout_s
        self.retries = retries

    def __repr__(self) -> str:
        return f"ServiceMarkers({self.url!r}, {self.base_path!r}, {self.instant!r})"

    def _call(self, method: str, path: str, body: dict | None = None) -> dict:
        netloc = urlsplit(self.url).netloc
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Content-Type": "application/json"} if data is not None else {}
        last: Exception | None = None
        for attempt in range(self.retries + 1):
            try:
                c = _conn(netloc, self.timeout_s)
                c.request(method, path, body=data, headers=headers)
                resp = c.getresponse()
                raw = resp.read()
                if resp.will_close:
                    _drop_conn(netloc)
            except _RETRYABLE as e:
                _drop_conn(netloc)
                last = e
                if attempt < self.retries:
                    time.sleep(min(2.0, 0.05 * 2 ** attempt))
                continue
            except Exception:
                _drop_conn(netloc)
                raise
            try:
                ans = json.loads(raw) if raw else {}
            except ValueError:
                ans = {"error": raw[:200].decode(errors="replace")}
            if resp.status != 200:
                raise MarkerServiceError(f"marker service {self.url} answered {resp.status} to {method} {path}: "
                                         f"{ans.get('error', ans)}")
            return ans
        raise MarkerServiceError(f"marker service {self.url} unreachable after {self.retries + 1} attempts "
                                 f"({method} {path}): {last!r}") from last

    def init(self) -> None:
        self._call("POST", "/v1/markers/init", {"instant": self.instant, "basePath": self.base_path})

    def try_create(self, partition: str, file_name: str, kind: str) -> bool:
        """True when this call created the (now durable) marker, False when it already existed."""
        ans = self._call("POST", "/v1/markers/create", {
            "instant": self.instant, "basePath": self.base_path, "partition": partition, "file": file_name,
            "type": kind, "token": uuid.uuid4().hex})
        return bool(ans["created"])

    def create(self, partition: str, file_name: str, kind: str) -> str:
        """Create the marker; returns its `<partition>/<file>.marker.<TYPE>` line. Raises MarkerExistsError if
        the service already has it (duplicate attempt), MarkerServiceError if unreachable or failing."""
        if not self.try_create(partition, file_name, kind):
            raise MarkerExistsError(f"marker {marker_line(partition, file_name, kind)} of instant {self.instant} "
                                    f"already exists (rejected by the marker service at {self.url})")
        return marker_line(partition, file_name, kind)

    def list(self) -> list[tuple[str, str, str]]:
        ans = self._call("GET", f"/v1/markers/list?instant={quote(self.instant, safe='')}")
        return [tuple(m) for m in ans["markers"]]  # type: ignore[misc]

    def delete(self) -> None:
        self._call("POST", "/v1/markers/delete", {"instant": self.instant, "basePath": self.base_path})

    def stats(self) -> dict:
        return self._call("GET", "/v1/stats")
