"""A tiny loopback HTTP proxy in front of the S3 server that misbehaves on purpose: it answers `503 SlowDown` (or
500, or resets the connection) to the next N requests of some methods, or forwards the next conditional PUT and
then drops the connection without an answer (a response lost on the way back). Requests pass byte-identical
otherwise (the Host header too, which the signature covers). It records every request it received, so tests see
the retries."""

from __future__ import annotations

import http.client
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

SLOW_DOWN = (b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code>'
             b"<Message>Please reduce your request rate.</Message></Error>")
INTERNAL = (b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>InternalError</Code>'
            b"<Message>We encountered an internal error. Please try again.</Message></Error>")


class FaultyProxy:
    def __init__(self, upstream: str):
        u = urlsplit(upstream)
        self._upstream = (u.hostname, u.port)
        self._guard = threading.Lock()
        self.requests: list[tuple[str, str, str]] = []  # (method, path, what the proxy did)
        self._failing = 0
        self._fail_kind = "slow_down"
        self._fail_methods: set[str] = set()
        self._drop_conditional_puts = 0
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *_a) -> None:
                pass

            def _any(self) -> None:
                proxy._handle(self)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _any

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> "FaultyProxy":
        self._thread.start()
        return self

    def __exit__(self, *_exc) -> None:
        self._server.shutdown()
        self._server.server_close()

    # ---- arming ----
    def fail(self, n: int, kind: str = "slow_down", methods=("GET", "PUT", "POST", "DELETE", "HEAD")) -> None:
        """Fail the next `n` requests of `methods` without forwarding them: `slow_down` (503 SlowDown),
        `error500` (500 InternalError) or `reset` (the connection closed without an answer)."""
        assert kind in ("slow_down", "error500", "reset")
        with self._guard:
            self._failing, self._fail_kind, self._fail_methods = n, kind, set(methods)

    def drop_after_conditional_put(self, n: int = 1) -> None:
        """Forward the next `n` PUTs with If-None-Match, then close the connection without the answer."""
        with self._guard:
            self._drop_conditional_puts = n

    def did(self, what: str, method: str | None = None) -> int:
        with self._guard:
            return sum(1 for m, _p, w in self.requests if w == what and method in (None, m))

    # ---- serving ----
    def _handle(self, h: BaseHTTPRequestHandler) -> None:
        n = int(h.headers.get("Content-Length") or 0)
        body = h.rfile.read(n) if n else b""
        conditional_put = h.command == "PUT" and "If-None-Match" in h.headers
        with self._guard:
            if self._failing and h.command in self._fail_methods:
                self._failing -= 1
                action = self._fail_kind
            elif conditional_put and self._drop_conditional_puts:
                self._drop_conditional_puts -= 1
                action = "drop"
            else:
                action = "forward"
            self.requests.append((h.command, h.path, action))
        if action == "reset":
            h.close_connection = True
            h.connection.shutdown(socket.SHUT_RDWR)
            return
        if action in ("slow_down", "error500"):
            status, reason, msg = (503, "Slow Down", SLOW_DOWN) if action == "slow_down" else \
                (500, "Internal Server Error", INTERNAL)
            h.send_response(status, reason)
            h.send_header("Content-Type", "application/xml")
            h.send_header("Content-Length", str(len(msg)))
            h.end_headers()
            h.wfile.write(msg if h.command != "HEAD" else b"")
            return
        conn = http.client.HTTPConnection(*self._upstream, timeout=60)
        try:
            conn.request(h.command, h.path, body=body, headers=dict(h.headers.items()))
            resp = conn.getresponse()
            data = resp.read()
        finally:
            conn.close()
        if action == "drop":  # the upstream did the put; its answer never reaches the client
            h.close_connection = True
            h.connection.shutdown(socket.SHUT_RDWR)
            return
        h.send_response_only(resp.status, resp.reason)
        for k, v in resp.getheaders():
            if k.lower() not in ("transfer-encoding", "connection", "content-length"):
                h.send_header(k, v)
        # (a HEAD answer carries the object's length, not its empty body's)
        h.send_header("Content-Length", resp.getheader("Content-Length", "0") if h.command == "HEAD"
                      else str(len(data)))
        h.end_headers()
        if h.command != "HEAD":
            h.wfile.write(data)
