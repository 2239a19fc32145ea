"""Consumer checkpoints: how far a consumer has read its upstream tables, committed with its own output.

A consumer (a dbt incremental or aggregate model, `hudilite.aggregate.refresh`, a streaming query) records
what it consumed in the extraMetadata of the commit that writes its output, so output and checkpoint commit
together (in the spirit of delta-rs `app_transactions` / `transaction_version(app_id)`): a failed write
commits neither, and the newest commit carrying the entry is the consumer's state. On-disk keys (kept as
they are: existing tables carry them):

* `hudilite.checkpoints`: JSON {upstream path: completion position consumed};
* `hudilite.checkpoint.tables`: JSON {upstream path: table id the position was taken on}. A checkpoint
  continues only on the table it was taken on (an upstream rebuilt at the same path is another table).

Positions come from `position` (the upstream's newest completion time and table id, read together).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Callable, Dict, Iterable, Mapping, Optional, Tuple

from hudilite.errors import HudiliteError
from hudilite.reader.changes import checkpoint as position
from hudilite.reader.changes import same_table
from hudilite.table import HoodieTable
from hudilite.timeline import Instant, Timeline

__all__ = ["CHECKPOINT_KEY", "CHECKPOINT_TABLES_KEY", "Checkpoint", "CheckpointError", "entries", "newest",
           "newest_metadata", "position", "read", "resume_position"]

CHECKPOINT_KEY = "hudilite.checkpoints"
CHECKPOINT_TABLES_KEY = "hudilite.checkpoint.tables"  # upstream path -> table id the position was taken on


class CheckpointError(HudiliteError):
    """A commit's checkpoint entry cannot be parsed; the consumer must be rebuilt."""


def newest(timeline: Timeline, key: str, value: Optional[str] = None,
           actions: Optional[Iterable[str]] = None) -> Optional[Tuple[Instant, Dict[str, str]]]:
    """(instant, extraMetadata) of the newest completed commit whose extraMetadata has a non-empty `key`
    (equal to `value` when given); None when no commit has it. `actions`: only instants of these actions."""
    match: Callable[[Dict[str, str]], bool] = (
        (lambda e: bool(e.get(key))) if value is None else (lambda e: e.get(key) == value))
    completed = timeline.completed(actions) if actions is not None else timeline.completed()
    for inst in reversed(completed):
        extra = timeline.read_metadata(inst).get("extraMetadata") or {}
        if match(extra):
            return inst, extra
    return None


def newest_metadata(path: Optional[str], key: str) -> Optional[Dict[str, str]]:
    """The extraMetadata of the newest completed commit of the table at `path` that carries `key`; None when
    there is no table there or no such commit."""
    if not path or not HoodieTable.exists(path):
        return None
    hit = newest(HoodieTable.open(path).timeline, key)
    return hit[1] if hit is not None else None


@dataclass(frozen=True)
class Checkpoint:
    """A consumer's stored checkpoint: {upstream path: position} and {upstream path: table id}. Commits
    written before table ids existed record no ids."""

    positions: Dict[str, str] = field(default_factory=dict)
    table_ids: Dict[str, Optional[str]] = field(default_factory=dict)

    def resume(self, upstream: str, current_id: Optional[str]) -> Tuple[Optional[str], bool]:
        """(position to continue from, rebuilt) for `upstream`, whose table id is now `current_id`: the
        position if it was taken on that table; (None, True) when the upstream is another table than the
        checkpoint's (the consumer must be rebuilt from its snapshot); (None, False) without a position."""
        start = self.positions.get(upstream)
        if start is None:
            return None, False
        if not same_table(self.table_ids.get(upstream), start, current_id):
            return None, True
        return start, False


def read(path: Optional[str]) -> Checkpoint:
    """The checkpoint of the consumer table at `path`: that of its newest commit recording one (empty if
    none). Raises CheckpointError when that entry is unreadable."""
    if not path or not HoodieTable.exists(path):
        return Checkpoint()
    hit = newest(HoodieTable.open(path).timeline, CHECKPOINT_KEY)
    if hit is None:
        return Checkpoint()
    inst, extra = hit
    try:
        return Checkpoint(dict(json.loads(extra[CHECKPOINT_KEY])),
                          dict(json.loads(extra.get(CHECKPOINT_TABLES_KEY) or "{}")))
    except (ValueError, TypeError):
        raise CheckpointError(f"commit {inst.timestamp} of {path} has an unreadable {CHECKPOINT_KEY}") from None


def resume_position(consumer: Optional[str], upstream: str, current_id: Optional[str]) -> Tuple[Optional[str], bool]:
    """`Checkpoint.resume` on the checkpoint stored in the consumer table at `consumer`."""
    return read(consumer).resume(upstream, current_id)


def entries(ends: Mapping[str, Tuple[Optional[str], Optional[str]]], previous: Optional[str] = None) -> Dict[str, str]:
    """The extraMetadata entries of a commit consuming `ends` ({upstream path: (position, table id)}), merged
    over the checkpoint stored in the table at `previous` (None: a rebuild, no earlier entries)."""
    cp = read(previous) if previous else Checkpoint()
    positions, ids = dict(cp.positions), dict(cp.table_ids)
    for p, (end, tid) in ends.items():
        positions[p] = end
        ids[p] = tid
    ids = {p: t for p, t in ids.items() if t is not None and p in positions}
    return {CHECKPOINT_KEY: json.dumps(positions, sort_keys=True),
            CHECKPOINT_TABLES_KEY: json.dumps(ids, sort_keys=True)}
