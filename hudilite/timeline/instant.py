"""Instants and their file names in timeline layout 1 (table v6) and layout 2 (v8/v9)."""

from __future__ import annotations

import re
from dataclasses import dataclass

COMMIT = "commit"
DELTA_COMMIT = "deltacommit"
REPLACE_COMMIT = "replacecommit"
CLEAN = "clean"
ROLLBACK = "rollback"
COMPACTION = "compaction"
CLUSTERING = "clustering"
SAVEPOINT = "savepoint"
RESTORE = "restore"
INDEXING = "indexing"
LOG_COMPACTION = "logcompaction"

REQUESTED = "REQUESTED"
INFLIGHT = "INFLIGHT"
COMPLETED = "COMPLETED"

WRITE_ACTIONS = (COMMIT, DELTA_COMMIT, REPLACE_COMMIT)
# extraMetadata key of a write commit: its completion time (version-6 tables have no completion time in file names)
COMPLETION_KEY = "hudilite.completion.time"
KNOWN_ACTIONS = {
    COMMIT, DELTA_COMMIT, REPLACE_COMMIT, CLEAN, ROLLBACK, COMPACTION, CLUSTERING, SAVEPOINT, RESTORE,
    INDEXING, LOG_COMPACTION,
}
_STATE_ORDER = {REQUESTED: 0, INFLIGHT: 1, COMPLETED: 2}

_TS = r"(\d{14}|\d{17})"
_NAME_RE = re.compile(rf"^{_TS}(?:_{_TS})?\.([a-z_]+)(?:\.(requested|inflight))?$")


@dataclass(frozen=True, order=False)
class Instant:
    """One instant. `timestamp` is the requested (instant) time; `completion` the completion time where the
    layout records it (v8/v9 file names) or hudilite stored it in commit metadata."""

    timestamp: str
    action: str
    state: str
    completion: str | None = None

    @property
    def is_completed(self) -> bool:
        return self.state == COMPLETED

    def sort_key(self):
        return (self.timestamp, _STATE_ORDER[self.state])

    # ---- file names ------------------------------------------------------------------------
    def file_name(self, layout: int = 1) -> str:
        t, a = self.timestamp, self.action
        if layout >= 2:
            if self.state == COMPLETED:
                if a == COMPACTION:
                    a = COMMIT
                elif a == CLUSTERING:
                    a = REPLACE_COMMIT
                return f"{t}_{self.completion}.{a}"
            if self.state == INFLIGHT and a == COMMIT:
                return f"{t}.inflight"
            return f"{t}.{a}.{self.state.lower()}"
        # layout 1
        if self.state == COMPLETED:
            return f"{t}.{COMMIT if a == COMPACTION else a}"
        if self.state == INFLIGHT and a == COMMIT:
            return f"{t}.inflight"
        return f"{t}.{a}.{self.state.lower()}"

    def with_state(self, state: str) -> "Instant":
        return Instant(self.timestamp, self.action, state, self.completion)

    def __str__(self) -> str:  # pragma: no cover - debugging aid
        c = f"->{self.completion}" if self.completion else ""
        return f"[{self.timestamp}{c}__{self.action}__{self.state}]"


def parse_instant_file(name: str, layout: int = 1) -> Instant | None:
    """Parse an instant file name; None for files that are not instants (properties, dirs, temp files)."""
    m = _NAME_RE.match(name)
    if not m:
        return None
    ts, completion, action, state = m.group(1), m.group(2), m.group(3), m.group(4)
    if action not in KNOWN_ACTIONS and action != "inflight":
        return None
    if action == "inflight":  # "<t>.inflight" is the inflight commit
        if state is not None:
            return None
        return Instant(ts, COMMIT, INFLIGHT)
    if state is None:
        if layout >= 2 and completion is None:
            return None  # layout 2 completed files carry a completion time
        if layout < 2 and completion is not None:
            return None
        return Instant(ts, action, COMPLETED, completion)
    if completion is not None:
        return None
    return Instant(ts, action, state.upper())
