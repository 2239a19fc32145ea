"""Starting and completing instants under the table lock.

start: lock -> newest instant on the timeline -> new time (> newest, >= now) -> `<t>.<action>.requested`
created with put-if-absent -> wait out the max clock skew -> unlock.
complete: lock -> (conflict check hook) -> completion time -> `<t>.<action>` with put-if-absent -> unlock.
The completed file is the one atomic act that makes a write visible.
"""

from __future__ import annotations

import json
import os
from typing import Callable

from hudilite.errors import CommitConflictError
from hudilite.lock import lock_for
from hudilite.table import HoodieTable
from hudilite.timeline import COMMIT, COMPLETED, INFLIGHT, REQUESTED, Instant
from hudilite.timeline.instant_time import next_instant_time, wait_for_skew
from hudilite.timeline.timeline import COMPLETION_KEY

DEFAULT_MAX_SKEW_MS = 5
SKEW_KEY = "hoodie.write.instant.max.clock.skew.ms"


def _aux_last_completion(table: HoodieTable) -> str:
    return os.path.join(table.meta_path, ".aux", "last_completion_time")


class Transaction:
    def __init__(self, table: HoodieTable, options: dict | None = None):
        self.table = table
        self.options = options or {}
        self.lock = lock_for(table.base_path, self.options)
        self.max_skew_ms = int(self.options.get(SKEW_KEY, DEFAULT_MAX_SKEW_MS))

    def start(self, action: str = COMMIT) -> Instant:
        fs = self.table.fs
        with self.lock:
            tl = self.table.reload()
            last = max(filter(None, [tl.last_instant_time(), self._last_completion()]), default=None)
            while True:
                t = next_instant_time(last)
                inst = Instant(t, action, REQUESTED)
                if fs.create_empty_if_absent(tl.instant_path(inst)):
                    break
                last = t  # somebody holds this time (lock bypassed): take the next one
            wait_for_skew(t, self.max_skew_ms)
        return inst

    def mark_inflight(self, inst: Instant, metadata: dict) -> Instant:
        infl = inst.with_state(INFLIGHT)
        tl = self.table.timeline
        self.table.fs.write_bytes(tl.instant_path(infl), json.dumps(metadata).encode("utf-8"))
        return infl

    def _last_completion(self) -> str | None:
        p = _aux_last_completion(self.table)
        try:
            with open(p) as f:
                v = f.read().strip()
            return v if v.isdigit() and len(v) == 17 else None
        except FileNotFoundError:
            return None

    def complete(self, inst: Instant, metadata: dict,
                 validate: Callable[[HoodieTable], None] | None = None) -> str:
        """Write the completed instant file. `validate` runs under the lock on a fresh timeline and may raise
        CommitConflictError. Returns the completion time."""
        fs = self.table.fs
        with self.lock:
            tl = self.table.reload()
            if validate is not None:
                validate(self.table)
            last = max(filter(None, [tl.last_instant_time(), self._last_completion()]), default=None)
            completion = next_instant_time(last)
            metadata.setdefault("extraMetadata", {})[COMPLETION_KEY] = completion
            done = inst.with_state(COMPLETED)
            body = json.dumps(metadata, indent=2).encode("utf-8")
            if not fs.put_if_absent(tl.instant_path(done), body):
                raise CommitConflictError(
                    f"instant {inst.timestamp} was already completed by another writer (put-if-absent failed)"
                )
            fs.write_bytes(_aux_last_completion(self.table), completion.encode())
        self.table.reload()
        return completion
