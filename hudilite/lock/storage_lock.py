"""A table lock kept on the object store itself, by conditional writes (Apache Hudi 1.x's storage-based lock).

The lock is one object, `<table>/.hoodie/.locks/table_lock.json`, holding `{"expired", "validUntil", "owner"}`
(the fields of Apache Hudi's StorageLockData). Every change of it is a compare-and-swap on its ETag
(hudilite/storage/conditional.py), so writers on different machines need no other service:

- acquire: create the object if absent (`If-None-Match: *`), or replace it (`If-Match` on the ETag just read)
  when its holder released it (`expired`) or its lease ran out (`validUntil` plus a clock margin of a tenth of
  the lease has passed). Of several takers, exactly one replace succeeds.
- hold: a background thread renews the lease every `renew` interval with `If-Match` on the ETag of our last
  write. A renewal that succeeds proves nobody took the lock since (a taker's write would have changed the ETag),
  so `verify()` - a synchronous renewal - guarantees the lock for a full lease from then on; one that fails
  with a precondition error means the lock was taken over after our lease ran out: `LockLostError`.
- release: mark the object expired, again with `If-Match`, so a lock taken over meanwhile is not touched.
- a holder that dies stops renewing; the lock is free once its lease ran out, or at once for a taker that sees
  the holder's process is gone: the owner names it (` process=` and `process_identity()`: boot id, pid
  namespace, pid, start time; in the owner text, which Apache Hudi reads as an opaque id), and a taker on the
  same kernel and in the same pid namespace checks it (`process_gone`).

There is no fence directory (`fence_dir()` is None): acts that need the lock rely on the `verify()` right before
them, as in Apache Hudi. A holder that stalls for longer than the lease between that `verify()` and its put is
not stopped; keep the lease well above the longest pause (GC, swapping) a writer can have.
"""

from __future__ import annotations

import json
import time

from hudilite.lock.base import LeasedLock, LockLostError, process_gone, process_identity, register_lock_provider
from hudilite.options import LOCK_RETRY_MS, LOCK_STORAGE_RENEW_SECS, LOCK_STORAGE_VALIDITY_SECS, LOCK_WAIT_MS
from hudilite.storage.base import bound_storage, registered_storage, scheme_of
from hudilite.storage.conditional import ConditionalStorage

LOCK_FILE = ".hoodie/.locks/table_lock.json"
_PROCESS = " process="  # in the owner id: the holder's process_identity()


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class StorageLock(LeasedLock):
    def __init__(self, fs: ConditionalStorage, path: str, *, validity_ms: int = 300_000, renew_ms: int = 30_000,
                 timeout_ms: int = 600_000, retry_ms: int = 20):
        if validity_ms <= 0 or renew_ms <= 0:
            raise ValueError(f"lock lease and renewal interval must be positive, got {validity_ms}/{renew_ms} ms")
        if renew_ms >= validity_ms:
            raise ValueError(f"the lock renewal interval ({renew_ms} ms) must be shorter than its lease "
                             f"({validity_ms} ms)")
        super().__init__(path, timeout_ms=timeout_ms, retry_ms=retry_ms, renew_s=renew_ms / 1000,
                         thread_name="hudilite-storage-lock-lease")
        self.fs = fs
        self.validity_ms, self.renew_ms = int(validity_ms), int(renew_ms)
        self.margin_ms = self.validity_ms // 10  # tolerated clock difference between holder and takers
        self._version: str | None = None  # the ETag of our last write while held
        self._base_owner = self.owner

    def _content(self, expired: bool, valid_until: int) -> bytes:
        return json.dumps({"expired": expired, "validUntil": valid_until, "owner": self.owner}).encode()

    @staticmethod
    def parse(data: bytes) -> dict | None:
        """The lock object's state, or None for content that is not a lock (then it counts as free)."""
        try:
            d = json.loads(data)
            return {"expired": bool(d["expired"]), "validUntil": int(d["validUntil"]), "owner": d.get("owner")}
        except (ValueError, KeyError, TypeError):
            return None

    def read_state(self) -> dict | None:
        try:
            return self.parse(self.fs.read_versioned(self.path)[0])
        except FileNotFoundError:
            return None

    # ---- acquiring -------------------------------------------------------------------------------------------
    @staticmethod
    def holder_gone(owner: str | None) -> bool:
        """Whether the lock's owner names a process that has certainly ended (`process_gone`)."""
        return _PROCESS in (owner or "") and process_gone(str(owner).rsplit(_PROCESS, 1)[1])

    def _try_take(self) -> bool:
        # named at the take, not at construction: the object may cross a fork
        self.owner = f"{self._base_owner}{_PROCESS}{process_identity()}"
        try:
            data, version = self.fs.read_versioned(self.path)
        except FileNotFoundError:
            data, version = None, None
        valid_until = _now_ms() + self.validity_ms
        if version is None:
            new = self.fs.create_versioned(self.path, self._content(False, valid_until))
        else:
            state = self.parse(data or b"")
            if state is not None and state["owner"] == self.owner and not state["expired"]:
                self._version = version  # our own create or replace, whose answer was lost (then retried)
                return True
            if state is not None and not state["expired"] and _now_ms() <= state["validUntil"] + self.margin_ms \
                    and not self.holder_gone(state["owner"]):
                return False  # held
            new = self.fs.replace_if_match(self.path, self._content(False, valid_until), version)
        if new is None:
            return False  # another taker won
        self._version = new
        return True

    def _holder(self) -> str:
        st = self.read_state()
        return f" (held by {st['owner']}, lease until {st['validUntil']})" if st else ""

    # ---- holding ---------------------------------------------------------------------------------------------
    def _renew_once(self) -> int:
        with self._renew_guard:
            if self._lost:
                raise LockLostError(f"table lock {self.path} was lost")
            valid_until = _now_ms() + self.validity_ms
            assert self._version is not None
            new = self.fs.replace_if_match(self.path, self._content(False, valid_until), self._version)
            if new is None:
                new = self._adopt_own_write(valid_until)
            if new is None:
                self._lost = True
                raise LockLostError(f"table lock {self.path} was lost: its lease of {self.validity_ms} ms ran out "
                                    "and another writer took it (this process stalled, or could not renew)")
            self._version = new
            return valid_until

    def _adopt_own_write(self, valid_until: int) -> str | None:
        """After a failed If-Match: the object's version when it holds exactly our renewal (an earlier renewal
        went through but its answer was lost, so we kept a stale ETag), else None. Only this object writes
        its owner id."""
        try:
            data, version = self.fs.read_versioned(self.path)
        except FileNotFoundError:
            return None
        state = self.parse(data)
        if state is None or state["owner"] != self.owner or state["expired"]:
            return None
        return self.fs.replace_if_match(self.path, self._content(False, valid_until), version)

    def _give_back(self) -> None:
        try:
            with self._renew_guard:
                if not self._lost and self._version is not None:
                    # If-Match: a lock taken over after our lease ran out stays with its new holder
                    self.fs.replace_if_match(self.path, self._content(True, _now_ms()), self._version)
        finally:
            self._version = None


def storage_lock_for(base_path: str, options: dict) -> StorageLock:
    fs = bound_storage(base_path) or registered_storage(scheme_of(base_path))  # a table's own options first
    if not isinstance(fs, ConditionalStorage):
        raise ValueError(f"the storage lock needs a backend with conditional writes; {base_path!r} is served by "
                         f"{type(fs).__name__ if fs else 'no registered backend'} (use the file lock there)")
    validity_ms = LOCK_STORAGE_VALIDITY_SECS.get(options) * 1000
    renew_secs = LOCK_STORAGE_RENEW_SECS.get(options)
    # unset: Apache Hudi's 30 s, but at least three renewals per lease so one failed request does not lose it
    renew_ms = renew_secs * 1000 if renew_secs is not None else min(30_000, validity_ms // 3)
    return StorageLock(fs, f"{base_path.rstrip('/')}/{LOCK_FILE}", validity_ms=validity_ms, renew_ms=renew_ms,
                       timeout_ms=LOCK_WAIT_MS.get(options), retry_ms=LOCK_RETRY_MS.get(options))


register_lock_provider("storage", storage_lock_for,
                       aliases=("storage_based", "org.apache.hudi.client.transaction.lock.StorageBasedLockProvider"),
                       default_for=("s3", "s3a"))
