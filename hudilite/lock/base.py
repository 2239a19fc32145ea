"""Lock provider interface and registry.

`hoodie.write.lock.provider` names the provider: a registered name (`file`, `in_process`), one of Apache
Hudi's class names that maps onto them (`org.apache.hudi.client.transaction.lock.FileSystemBasedLockProvider`,
`...InProcessLockProvider`), or `package.module.Class` of your own `LockProvider` subclass, constructed as
`Class(base_path, options)`.
"""

from __future__ import annotations

import abc
import importlib
import os
import socket
import threading
import time
import uuid
from typing import Callable

from hudilite.errors import HudiliteError, LockTimeoutError
from hudilite.options import LOCK_PROVIDER, LOCK_WAIT_MS
from hudilite.storage.base import scheme_of

PROVIDER_KEY = LOCK_PROVIDER.key
DEFAULT_PROVIDER = "file"


def _read_text(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def _stat_fields(pid: int) -> list[str] | None:
    """/proc/<pid>/stat after the command name (which may hold spaces and parentheses): the state first, the
    start time (clock ticks after boot) at index 19; None when there is no such process."""
    text = _read_text(f"/proc/{pid}/stat")
    if not text or ")" not in text:
        return None
    return text.rsplit(")", 1)[1].split()


_identity: dict[int, str] = {}  # pid -> process_identity(): constant for a process, asked at every lock attempt


def process_identity() -> str:
    """This process as a lock holder: `<boot id>/<pid namespace>/<pid>/<start time>`, or '' where /proc does
    not say (then takers rely on the lease). Keyed by pid: a forked child names itself."""
    pid = os.getpid()
    if pid not in _identity:
        boot, fields = _read_text("/proc/sys/kernel/random/boot_id"), _stat_fields(pid)
        try:
            ns = os.readlink("/proc/self/ns/pid")
        except OSError:
            ns = ""
        _identity[pid] = f"{boot}/{ns}/{pid}/{fields[19]}" if boot and ns and fields and len(fields) >= 20 else ""
    return _identity[pid]


def process_gone(identity: str | None) -> bool:
    """Whether the holder process `identity` (`process_identity()` of its process) has certainly ended: it ran on
    this kernel, in this pid namespace, and its pid now names no process, a zombie, or a later process (another
    start time). False whenever that cannot be known here (another machine or namespace, no /proc)."""
    parts = (identity or "").rsplit("/", 2)
    mine = process_identity().rsplit("/", 2)
    if len(parts) != 3 or len(mine) != 3 or not parts[1].isdigit() or parts[0] != mine[0]:
        return False
    fields = _stat_fields(int(parts[1]))
    return fields is None or len(fields) < 20 or fields[0] in ("Z", "X") or fields[19] != parts[2]


class LockLostError(HudiliteError):
    """The table lock was lost while held (its lease expired and another process took it)."""


class LockProvider(abc.ABC):
    """A mutual-exclusion lock on one table, usable as a context manager. One object serves one thread at
    a time; make one object per concurrent writer."""

    @abc.abstractmethod
    def acquire(self) -> None: ...

    @abc.abstractmethod
    def release(self) -> None: ...

    def verify(self) -> int | None:
        """Raise LockLostError if the lock is no longer held. Providers with leases override this: renew the
        lease and return the time (ms since the epoch) until which nobody else can take the lock."""

    def fence_dir(self) -> str | None:
        """A directory, on the table's file system, that exists only while this holder's lease has not been
        taken over: acts that must not happen after the lock was lost (a completed instant, prepared commit
        metadata) stage their file in it and publish it by link/rename from there, which fails once a later
        holder revoked it. None: the provider offers no fence (it cannot lose a lock it holds, or cannot
        fence), and the act relies on `verify()` alone."""
        return None

    def __enter__(self) -> "LockProvider":
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()


class LeasedLock(LockProvider):
    """What the lease-based providers (the file lock, the storage lock) share: a holder takes the lock, a
    background thread renews its lease, `verify()` renews it synchronously, and `release()` stops the renewer
    before giving the lock back. Subclasses say how to take (`_try_take`), renew (`_renew_once`), describe the
    holder (`_holder`) and give back (`_give_back`)."""

    def __init__(self, path: str, *, timeout_ms: int, retry_ms: int, renew_s: float, thread_name: str):
        self.path = path
        self.timeout_ms, self.retry_ms = int(timeout_ms), retry_ms
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex}"
        self._held = False
        self._lost = False
        self._renew_s = renew_s
        self._thread_name = thread_name
        self._renew_guard = threading.Lock()  # the renewer thread and verify() both renew
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None
        self._local = threading.Lock()  # serialise threads of this object

    @abc.abstractmethod
    def _try_take(self) -> bool:
        """One attempt to take the lock; True when taken."""

    def _after_take(self) -> None:
        """Work right after taking the lock, before it counts as held (undo the take on failure)."""

    @abc.abstractmethod
    def _holder(self) -> str:
        """' (held by ..., lease until ...)' for a timeout error, or ''."""

    @abc.abstractmethod
    def _renew_once(self) -> int:
        """Renew the lease; its new end (ms since the epoch). LockLostError when taken over."""

    @abc.abstractmethod
    def _give_back(self) -> None:
        """Release what the holder holds (called once the renewer stopped)."""

    def acquire(self) -> None:
        self._local.acquire()
        try:
            deadline = time.monotonic() + self.timeout_ms / 1000
            while not self._try_take():
                if time.monotonic() > deadline:
                    raise LockTimeoutError(f"could not acquire table lock {self.path} within {self.timeout_ms} ms"
                                           f"{self._holder()}")
                # jitter: takers that collided do not retry in lockstep
                time.sleep(self.retry_ms / 1000 * (0.5 + (uuid.uuid4().int % 100) / 100))
            self._after_take()
        except BaseException:
            self._local.release()
            raise
        self._held, self._lost = True, False
        self._stop.clear()
        self._renewer = threading.Thread(target=self._renew, name=self._thread_name, daemon=True)
        self._renewer.start()

    def _renew(self) -> None:
        while not self._stop.wait(self._renew_s):
            try:
                self._renew_once()
            except LockLostError:
                return
            except Exception:  # a failed request or I/O error: try again next interval; verify() reports
                continue

    def verify(self) -> int:
        """Renew the lease now; the time (ms since the epoch) until which nobody else can take the lock (less
        the clock margin). LockLostError if it was lost or taken over."""
        if not self._held:
            raise LockLostError(f"table lock {self.path} is not held")
        return self._renew_once()

    def release(self) -> None:
        if not self._held:
            return
        self._stop.set()
        if self._renewer is not None:
            self._renewer.join()
        try:
            self._give_back()
        finally:
            self._held = False
            self._local.release()


_PROVIDERS: dict[str, Callable[[str, dict], LockProvider]] = {}
_SCHEME_DEFAULTS: dict[str, str] = {}  # URI scheme -> provider of tables there without hoodie.write.lock.provider


def register_lock_provider(name: str, factory: Callable[[str, dict], LockProvider], *,
                           aliases: tuple[str, ...] = (), default_for: tuple[str, ...] = ()) -> None:
    """Register `factory(base_path, options) -> LockProvider` under `name` (and aliases); the default for tables
    whose path has a URI scheme in `default_for`."""
    for n in (name, *aliases):
        _PROVIDERS[n] = factory
    for scheme in default_for:
        _SCHEME_DEFAULTS[scheme] = name


def _resolve(name: str) -> Callable[[str, dict], LockProvider]:
    if name in _PROVIDERS:
        return _PROVIDERS[name]
    if "." in name:  # "package.module.Class"
        mod, _, cls = name.rpartition(".")
        try:
            factory = getattr(importlib.import_module(mod), cls)
        except (ImportError, AttributeError) as e:
            raise ValueError(f"lock provider {name!r} ({PROVIDER_KEY}) cannot be imported: {e}") from None
        if isinstance(factory, type) and not issubclass(factory, LockProvider):
            raise ValueError(f"lock provider {name!r} ({PROVIDER_KEY}) is not a hudilite.lock.LockProvider")
        return factory
    raise ValueError(f"unknown lock provider {name!r} ({PROVIDER_KEY}); registered: {', '.join(sorted(_PROVIDERS))}"
                     ", or a 'package.module.Class' LockProvider")


def lock_for(base_path: str, options: dict | None = None) -> LockProvider:
    options = options or {}
    name = LOCK_PROVIDER.get(options) or _SCHEME_DEFAULTS.get(scheme_of(base_path), DEFAULT_PROVIDER)
    return _resolve(name)(base_path, options)


def check_lock_provider(options: dict | None) -> None:
    """Raise ValueError for a lock provider that cannot be resolved (called before anything is written)."""
    name = LOCK_PROVIDER.get(options)
    if name:
        _resolve(str(name))


# ---- in-process lock -------------------------------------------------------------------------
class InProcessLock(LockProvider):
    """A lock shared by all threads of one process, per table path (Apache Hudi's InProcessLockProvider).
    Only for writers that are threads of a single process; it does not exclude other processes."""

    _locks: dict[str, threading.Lock] = {}
    _guard = threading.Lock()

    def __init__(self, base_path: str, timeout_ms: int = 600_000):
        with self._guard:
            self._lock = self._locks.setdefault(base_path, threading.Lock())
        self.base_path = base_path
        self.timeout_ms = timeout_ms
        self._held = False

    def acquire(self) -> None:
        if not self._lock.acquire(timeout=self.timeout_ms / 1000):
            raise LockTimeoutError(f"could not acquire the in-process lock of {self.base_path} "
                                   f"within {self.timeout_ms} ms")
        self._held = True

    def release(self) -> None:
        if self._held:
            self._held = False
            self._lock.release()

    def verify(self) -> None:
        if not self._held:
            raise LockLostError(f"the in-process lock of {self.base_path} is not held")


def _in_process_factory(base_path: str, options: dict) -> InProcessLock:
    return InProcessLock(base_path, LOCK_WAIT_MS.get(options))


register_lock_provider("in_process", _in_process_factory,
                       aliases=("inprocess", "org.apache.hudi.client.transaction.lock.InProcessLockProvider"))
