"""File-based table lock with a lease, for a shared file system.

The lock is a file created with O_EXCL. Its holder renews the lease (the file's content and mtime) from a
background thread; a holder that dies stops renewing, and after `lease_ms` another process may break the
lock. Breaking is race-safe: the stale file is renamed to a unique name first and only the process whose
rename captured the same stale content deletes it.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
import uuid

from hudilite.errors import LockTimeoutError
from hudilite.lock.base import LockProvider, register_lock_provider


class FileLock(LockProvider):
    def __init__(self, path: str, *, lease_ms: int = 60_000, timeout_ms: int = 600_000, retry_ms: int = 20):
        self.path = path
        self.lease_ms = lease_ms
        self.timeout_ms = timeout_ms
        self.retry_ms = retry_ms
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex}"
        self._held = False
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None
        self._local = threading.Lock()  # serialise threads of this object

    def _content(self) -> bytes:
        return json.dumps({"owner": self.owner, "expires_ms": int(time.time() * 1000) + self.lease_ms}).encode()

    def _try_create(self) -> bool:
        try:
            fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        try:
            os.write(fd, self._content())
            os.fsync(fd)
        finally:
            os.close(fd)
        return True

    def _break_if_expired(self) -> None:
        try:
            with open(self.path, "rb") as f:
                raw = f.read()
            st = os.stat(self.path)
        except FileNotFoundError:
            return
        try:
            expires = int(json.loads(raw)["expires_ms"])
        except (ValueError, KeyError, TypeError):
            # half-written by a holder that died while creating it: judge by mtime
            expires = int(st.st_mtime * 1000) + self.lease_ms
        if time.time() * 1000 <= expires:
            return
        grave = f"{self.path}.broken.{uuid.uuid4().hex}"
        try:
            os.rename(self.path, grave)
        except FileNotFoundError:
            return
        with open(grave, "rb") as f:
            captured = f.read()
        if captured == raw:
            os.unlink(grave)
        else:  # we captured a fresh lock taken meanwhile: put it back
            try:
                os.link(grave, self.path)
            except FileExistsError:
                pass
            os.unlink(grave)

    def acquire(self) -> None:
        self._local.acquire()
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        deadline = time.monotonic() + self.timeout_ms / 1000
        while True:
            if self._try_create():
                break
            self._break_if_expired()
            if time.monotonic() > deadline:
                self._local.release()
                raise LockTimeoutError(f"could not acquire table lock {self.path} within {self.timeout_ms} ms")
            time.sleep(self.retry_ms / 1000 * (0.5 + (uuid.uuid4().int % 100) / 100))
        self._held = True
        self._stop.clear()
        self._renewer = threading.Thread(target=self._renew, name="hudilite-lock-lease", daemon=True)
        self._renewer.start()

    def _renew(self) -> None:
        interval = max(self.lease_ms / 3000, 0.05)
        while not self._stop.wait(interval):
            try:
                with open(self.path, "rb") as f:
                    if self.owner.encode() not in f.read():
                        return
                with open(self.path, "wb") as f:
                    f.write(self._content())
            except FileNotFoundError:
                return

    def release(self) -> None:
        if not self._held:
            return
        self._stop.set()
        if self._renewer is not None:
            self._renewer.join()
        try:
            with open(self.path, "rb") as f:
                mine = self.owner.encode() in f.read()
            if mine:
                os.unlink(self.path)
        except FileNotFoundError:
            pass
        self._held = False
        self._local.release()


def _file_lock_factory(base_path: str, options: dict) -> FileLock:
    return FileLock(
        options.get("hoodie.write.lock.filesystem.path")
        or os.path.join(base_path, ".hoodie", ".locks", "table.lock"),
        lease_ms=int(options.get("hoodie.write.lock.filesystem.expire.ms", 60_000)),
        timeout_ms=int(options.get("hoodie.write.lock.wait_time_ms", 600_000)),
    )


register_lock_provider("file", _file_lock_factory)
