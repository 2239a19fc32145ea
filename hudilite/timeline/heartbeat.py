"""Writer heartbeats: `.hoodie/.heartbeat/<instant>`, touched periodically while a write is in progress.

A pending instant whose heartbeat is older than the tolerance belongs to a dead writer and may be rolled
back by others (lazy rollback of failed writes, needed when several writers share a table).
"""

from __future__ import annotations

import os
import threading
import time


def heartbeat_path(base_path: str, instant: str) -> str:
    return os.path.join(base_path, ".hoodie", ".heartbeat", instant)


class Heartbeat:
    def __init__(self, base_path: str, instant: str, interval_ms: int = 1000):
        self.path = heartbeat_path(base_path, instant)
        self.interval = interval_ms / 1000
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        self._beat()
        self._thread = threading.Thread(target=self._run, name="hudilite-heartbeat", daemon=True)
        self._thread.start()

    def _beat(self) -> None:
        with open(self.path, "w") as f:
            f.write(str(int(time.time() * 1000)))

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
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass


def heartbeat_expired(base_path: str, instant: str, tolerance_ms: int) -> bool:
    try:
        age = time.time() - os.path.getmtime(heartbeat_path(base_path, instant))
    except FileNotFoundError:
        return True
    return age * 1000 > tolerance_ms
