"""Partition readiness (write-audit-publish): partitions a commit marked ready, readable with
`hudilite.read(..., ready_only=True)`. Kept in the commits' extraMetadata and, to survive their archival, in a
file under `.hoodie/.aux`."""

from __future__ import annotations

import json
import logging

from hudilite import auxfiles
from hudilite.timeline.instant import WRITE_ACTIONS

log = logging.getLogger(__name__)

# extraMetadata key of a commit: the partitions it marks ready (a JSON list)
READY_KEY = "hudilite.ready.partitions"

# ---- partition readiness ----------------------------------------------------------------------------------
def ready_file(table) -> str:
    return auxfiles.path(table.base_path, auxfiles.READY_PARTITIONS)

def remember_ready(table, partitions) -> None:
    """Keep the ready set outside the timeline too, so it survives archival of the marking commits."""
    cur = set(_read_ready_file(table))
    new = cur | set(partitions)
    if new != cur:
        table.fs.write_bytes(ready_file(table), json.dumps(sorted(new)).encode())

def _read_ready_file(table) -> list[str]:
    try:
        return list(json.loads(table.fs.read_bytes(ready_file(table))))
    except (FileNotFoundError, ValueError):
        return []

def ready_partitions(table, as_of: str | None = None) -> set[str]:
    """Partitions marked ready by a completed commit (at or before `as_of`)."""
    tl = table.timeline
    out: set[str] = set()
    for inst in tl.completed(WRITE_ACTIONS):
        if as_of is not None and inst.timestamp > as_of:
            continue
        v = (tl.read_metadata(inst).get("extraMetadata") or {}).get(READY_KEY)
        if v:
            try:
                out.update(json.loads(v))
            except ValueError:
                log.warning("%s: unreadable %s in commit %s", table.base_path, READY_KEY, inst.timestamp)
    if as_of is None:
        out.update(_read_ready_file(table))
    return out
