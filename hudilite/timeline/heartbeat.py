"""Writer heartbeats: `.hoodie/.heartbeat/<instant>`, touched periodically while a write is in progress.

A pending instant whose heartbeat is older than its writer's tolerance (`hoodie.client.heartbeat.interval_in_ms`
x `hoodie.client.heartbeat.tolerable.misses`, default 60 s x 2) belongs to a dead writer and is rolled back by
the next writer (lazy rollback of failed writes, the default). The file is created once, under the table lock,
holding the writer's own interval and tolerance as JSON, so a checker judges every writer by the settings that
writer beats with, not by its own. Beats only bump the mtime (the age is now - mtime): the content is never
rewritten, so a checker never reads a torn file, and a beat after the instant was rolled back (file gone) does
not bring the heartbeat back.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time

from hudilite.options import HEARTBEAT_INTERVAL_MS, HEARTBEAT_MISSES
from hudilite.storage.local import storage_for

DEFAULT_INTERVAL_MS = HEARTBEAT_INTERVAL_MS.default
DEFAULT_MISSES = HEARTBEAT_MISSES.default


def heartbeat_path(base_path: str, instant: str) -> str:
    return os.path.join(base_path, ".hoodie", ".heartbeat", instant)


def heartbeat_settings(options: dict | None) -> tuple[int, int]:
    """(interval_ms, tolerable_misses) from the options; InvalidWriteError for values that are not positive
    integers."""
    return HEARTBEAT_INTERVAL_MS.get(options), HEARTBEAT_MISSES.get(options)


def write_heartbeat(base_path: str, instant: str, interval_ms: int, tolerable_misses: int,
                    tag: str | None = None) -> None:
    """Create the heartbeat of `instant` (its first beat) recording the writer's settings. `tag` names the
    writer for its own recovery (the streaming sink's query id)."""
    p = heartbeat_path(base_path, instant)
    fs = storage_for(p)
    fs.makedirs(os.path.dirname(p))
    rec = {"interval_ms": int(interval_ms), "tolerable_misses": int(tolerable_misses),
           "owner": f"{socket.gethostname()}:{os.getpid()}", "started_ms": int(time.time() * 1000)}
    if tag:
        rec["tag"] = tag
    fs.write_plain(p, json.dumps(rec).encode())


def read_heartbeat(base_path: str, instant: str) -> dict | None:
    """{"age_ms", "tolerance_ms" (None for a heartbeat that records no settings: older writers), "tag"}; None
    if there is no heartbeat."""
    p = heartbeat_path(base_path, instant)
    fs = storage_for(p)
    try:
        raw = fs.read_bytes(p).decode("utf-8", errors="replace")
        mtime = fs.mtime(p)
    except FileNotFoundError:
        return None
    tolerance, tag = None, None
    try:
        rec = json.loads(raw)
        if isinstance(rec, dict):
            tolerance = int(rec["interval_ms"]) * int(rec["tolerable_misses"])
            tag = rec.get("tag")
    except (ValueError, KeyError, TypeError):
        pass  # an older writer's heartbeat (a bare timestamp): the checker's tolerance applies
    return {"age_ms": (time.time() - mtime) * 1000, "tolerance_ms": tolerance, "tag": tag}


def heartbeat_expired(base_path: str, instant: str, default_tolerance_ms: int) -> bool:
    """True when the writer of `instant` is presumed dead: no heartbeat, or its last beat is older than the
    writer's own recorded tolerance (`default_tolerance_ms` only for heartbeats that record none)."""
    hb = read_heartbeat(base_path, instant)
    if hb is None:
        return True
    tolerance = hb["tolerance_ms"] if hb["tolerance_ms"] is not None else default_tolerance_ms
    return hb["age_ms"] > tolerance


class Heartbeat:
    """Beats for one instant from a daemon thread. The instant's first beat is normally written by
    `Transaction.start` (under the lock); `start()` creates it only if it is missing."""

    def __init__(self, base_path: str, instant: str, interval_ms: int = DEFAULT_INTERVAL_MS,
                 tolerable_misses: int = DEFAULT_MISSES):
        self.base_path, self.instant = base_path, instant
        self.path = heartbeat_path(base_path, instant)
        self.interval_ms, self.tolerable_misses = interval_ms, tolerable_misses
        self.interval = interval_ms / 1000
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if not storage_for(self.path).exists(self.path):
            write_heartbeat(self.base_path, self.instant, self.interval_ms, self.tolerable_misses)
        else:
            self._beat()
        self._thread = threading.Thread(target=self._run, name="hudilite-heartbeat", daemon=True)
        self._thread.start()

    def _beat(self) -> None:
        storage_for(self.path).touch_mtime(self.path)  # FileNotFoundError: the instant was completed or rolled back

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self._beat()
            except OSError:
                return

    def stop(self, delete: bool = True) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if delete:
            storage_for(self.path).delete(self.path)
