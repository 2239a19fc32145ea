"""Crash injection at the storage layer (bench/crashpoints.py drives it).

A `CrashInjector` installed on `LocalStorage` numbers every mutating storage operation of this process (writes,
put-if-absent, creates, renames, links, deletes, directory creates/removals, appends and the data files that
tasks write), 1, 2, 3, ... At operation `crash_at` the process stops at once with `os._exit(EXIT_CODE)`: no
`finally` block, no atexit handler, no buffered I/O runs - what a kill -9 or a power loss leaves. With `torn`,
an operation that can be half done (a data file, an append, the temp file of an atomic write) is half done
first. Without a `crash_at` the injector only counts (and records the operations for `report`).

A child process installs it from its environment: `install_from_env()` reads `HUDILITE_CRASH_AT` (`k` or
`k:torn`) and `HUDILITE_CRASH_LOG` (a file to write the numbered operations to on `report()`). Not installed,
each storage operation pays one attribute check (`LocalStorage.fault is None`).

With `HUDILITE_CRASH_COUNTER` (a file path) the numbering is shared by every process of an application: the
driver and the Python workers of its Spark tasks (which inherit the environment through the JVM; bench's
crash_daemon installs the injector in each forked worker) number their operations in one sequence, in the
counter file, under an exclusive `fcntl` lock. The process reaching `crash_at` then stops the WHOLE application
- every process of its session (driver, JVM, Python daemon and workers, which Spark's daemon moves into a
process group of its own) with SIGKILL, its own group last, holding the counter lock so that no other process
starts a numbered operation meanwhile. The application runs as a session leader (`start_new_session`) and
names its session in `HUDILITE_CRASH_SESSION`; elsewhere only the crashing process stops.

Operations on a timer (lock lease renewals, heartbeat beats) are not numbered (`LocalStorage.touch_mtime`,
`renew_in_place`): their count depends on timing, not on the operation.
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import threading
from typing import cast

from hudilite.storage.local import LocalStorage

CRASH_AT_ENV = "HUDILITE_CRASH_AT"
LOG_ENV = "HUDILITE_CRASH_LOG"
COUNTER_ENV = "HUDILITE_CRASH_COUNTER"
SESSION_ENV = "HUDILITE_CRASH_SESSION"  # the session id of the application under test (its leader's pid)
EXIT_CODE = 86


class CrashInjector:
    def __init__(self, crash_at: int | None = None, *, torn: bool = False, log_path: str | None = None,
                 counter_path: str | None = None):
        self.crash_at = crash_at
        self.torn = torn
        self.log_path = log_path
        self.counter_path = counter_path
        self.n = 0
        self.ops: list[tuple[str, str, bool]] = []  # (op, path, can be torn); this process's, without a counter
        self._lock = threading.Lock()

    def __call__(self, op: str, path: str, torn) -> None:
        if self.counter_path:
            return self._shared(self.counter_path, op, path, torn)
        with self._lock:
            self.n += 1
            self.ops.append((op, path, torn is not None))
            if self.n != self.crash_at:
                return
        _tear(torn if self.torn else None)
        os._exit(EXIT_CODE)

    def _shared(self, counter_path: str, op: str, path: str, torn) -> None:
        line = json.dumps({"op": op, "path": path, "tearable": torn is not None, "pid": os.getpid()}) + "\n"
        with self._lock:  # the file lock is per process (fcntl): threads of one process take turns here first
            fd = os.open(counter_path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                n = _count_lines(fd) + 1
                if self.crash_at is not None and n > self.crash_at:
                    # the application crashed at `crash_at` already: a process that escaped its kill (a worker
                    # forked after the session was enumerated) waited on this lock; it must not act after the crash
                    os._exit(EXIT_CODE)
                os.write(fd, line.encode())
                if n != self.crash_at:
                    return
                _tear(torn if self.torn else None)
                kill_session()  # with the lock held: no other process starts a numbered operation
            finally:
                os.close(fd)

    def report(self) -> None:
        """Write the numbered operations to `log_path` (the counting run of the harness)."""
        if not self.log_path:
            return
        ops = read_counter(self.counter_path) if self.counter_path else \
            [{"op": o, "path": p, "tearable": t} for o, p, t in self.ops]
        with open(self.log_path, "w") as f:
            json.dump(ops, f)


def _tear(torn) -> None:
    if torn is not None:
        try:
            torn()
        except BaseException:  # noqa: BLE001 - the crash is what matters
            pass


def _count_lines(fd: int) -> int:
    n = 0
    os.lseek(fd, 0, os.SEEK_SET)
    while chunk := os.read(fd, 1 << 16):
        n += chunk.count(b"\n")
    return n


def read_counter(path: str) -> list[dict]:
    """The operations numbered in a counter file so far, in order (1, 2, ...)."""
    try:
        with open(path) as f:
            return [json.loads(ln) for ln in f if ln.strip()]
    except FileNotFoundError:
        return []


def kill_session() -> None:
    """SIGKILL every process of this process's session, this process's group last (it dies with it). Only in the
    session `HUDILITE_CRASH_SESSION` names (a crash child that made itself a session leader): elsewhere (a
    shell's or a test runner's session) this process alone stops."""
    sid, own = os.getsid(0), os.getpgid(0)
    if os.environ.get(SESSION_ENV) != str(sid):
        os._exit(EXIT_CODE)
    groups = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:  # gone meanwhile
            continue
        if int(fields[3]) == sid:  # after ")": state, ppid, pgrp, session
            groups.add(int(fields[2]))
    for g in sorted(groups - {own}):
        try:
            os.killpg(g, signal.SIGKILL)
        except ProcessLookupError:
            pass
    os.killpg(own, signal.SIGKILL)
    os._exit(EXIT_CODE)  # not reached


def install(injector: CrashInjector | None) -> CrashInjector | None:
    """Route every LocalStorage mutating operation through `injector` (None: uninstall). Returns it."""
    LocalStorage.fault = injector
    return injector


def installed() -> CrashInjector | None:
    return cast("CrashInjector | None", LocalStorage.fault)


def install_from_env(environ=None) -> CrashInjector | None:
    """Install an injector as `HUDILITE_CRASH_AT` / `HUDILITE_CRASH_LOG` / `HUDILITE_CRASH_COUNTER` say; None when
    none is set. Installing twice in a process keeps the first injector."""
    env = os.environ if environ is None else environ
    spec, log_path, counter = env.get(CRASH_AT_ENV), env.get(LOG_ENV), env.get(COUNTER_ENV)
    if not spec and not log_path and not counter:
        return None
    if installed() is not None:
        return installed()
    crash_at, torn = None, False
    if spec:
        k, _, mode = spec.partition(":")
        crash_at, torn = int(k), mode == "torn"
    return install(CrashInjector(crash_at, torn=torn, log_path=log_path, counter_path=counter or None))
