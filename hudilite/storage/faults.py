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

Only this process's operations are numbered: the driver-local Arrow writer and the table services run in it.
Operations on a timer (lock lease renewals, heartbeat beats) are not numbered (`LocalStorage.touch_mtime`,
`renew_in_place`): their count depends on timing, not on the operation.
"""

from __future__ import annotations

import json
import os
import threading
from typing import cast

from hudilite.storage.local import LocalStorage

CRASH_AT_ENV = "HUDILITE_CRASH_AT"
LOG_ENV = "HUDILITE_CRASH_LOG"
EXIT_CODE = 86


class CrashInjector:
    def __init__(self, crash_at: int | None = None, *, torn: bool = False, log_path: str | None = None):
        self.crash_at = crash_at
        self.torn = torn
        self.log_path = log_path
        self.n = 0
        self.ops: list[tuple[str, str, bool]] = []  # (op, path, can be torn)
        self._lock = threading.Lock()

    def __call__(self, op: str, path: str, torn) -> None:
        with self._lock:
            self.n += 1
            self.ops.append((op, path, torn is not None))
            if self.n != self.crash_at:
                return
        if self.torn and torn is not None:
            try:
                torn()
            except BaseException:  # noqa: BLE001 - the crash is what matters
                pass
        os._exit(EXIT_CODE)

    def report(self) -> None:
        """Write the numbered operations to `log_path` (the counting run of the harness)."""
        if self.log_path:
            with open(self.log_path, "w") as f:
                json.dump([{"op": o, "path": p, "tearable": t} for o, p, t in self.ops], f)


def install(injector: CrashInjector | None) -> CrashInjector | None:
    """Route every LocalStorage mutating operation through `injector` (None: uninstall). Returns it."""
    LocalStorage.fault = injector
    return injector


def installed() -> CrashInjector | None:
    return cast("CrashInjector | None", LocalStorage.fault)


def install_from_env(environ=None) -> CrashInjector | None:
    """Install an injector as `HUDILITE_CRASH_AT` / `HUDILITE_CRASH_LOG` say; None when neither is set."""
    env = os.environ if environ is None else environ
    spec, log_path = env.get(CRASH_AT_ENV), env.get(LOG_ENV)
    if not spec and not log_path:
        return None
    crash_at, torn = None, False
    if spec:
        k, _, mode = spec.partition(":")
        crash_at, torn = int(k), mode == "torn"
    return install(CrashInjector(crash_at, torn=torn, log_path=log_path))
