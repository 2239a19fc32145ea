"""Rolling back failed (pending) writes from their markers.

Order matters for crash safety: data files first, then markers, then the instant files last, so a rollback
that is itself killed leaves a pending instant that the next rollback finishes.
"""

from __future__ import annotations

import logging
import os

from hudilite.file_group import parse_base_file_name
from hudilite.fs_view import PARTITION_METAFILE
from hudilite.markers import delete_markers, list_markers
from hudilite.table import HoodieTable
from hudilite.timeline import COMPLETED, Instant
from hudilite.timeline.heartbeat import heartbeat_expired, heartbeat_path

log = logging.getLogger(__name__)


def files_of_instant(table: HoodieTable, instant: str) -> list[str]:
    """Data files a write of `instant` may have created: every marker's file, plus any base file named with
    the instant in the partitions its markers name (belt and braces)."""
    out: set[str] = set()
    partitions: set[str] = set()
    for part, name, _kind in list_markers(table.base_path, instant):
        partitions.add(part)
        out.add(os.path.join(table.partition_dir(part), name))
    for part in partitions:
        for entry in table.fs.scandir_files(table.partition_dir(part)):
            parsed = parse_base_file_name(entry.name)
            if parsed and parsed[2] == instant:
                out.add(entry.path)
    return sorted(out)


def _remove_empty_partition_dirs(table: HoodieTable, dirs: set[str]) -> None:
    for d in sorted(dirs, key=len, reverse=True):
        cur = d
        while cur.startswith(table.base_path + os.sep) and cur != table.base_path:
            try:
                entries = os.listdir(cur)
            except FileNotFoundError:
                cur = os.path.dirname(cur)
                continue
            if entries and entries != [PARTITION_METAFILE]:
                break
            if entries == [PARTITION_METAFILE]:
                break  # an existing (committed) partition
            os.rmdir(cur)
            cur = os.path.dirname(cur)


def rollback_instant(table: HoodieTable, instant: Instant) -> list[str]:
    """Undo a pending write instant. Returns the deleted data files."""
    if instant.state == COMPLETED:
        raise ValueError(f"instant {instant.timestamp} is completed; rollback of completed commits is a restore")
    deleted = []
    dirs = set()
    for path in files_of_instant(table, instant.timestamp):
        if table.fs.delete(path):
            deleted.append(path)
        dirs.add(os.path.dirname(path))
    _remove_empty_partition_dirs(table, dirs)
    delete_markers(table.base_path, instant.timestamp)
    try:
        os.unlink(heartbeat_path(table.base_path, instant.timestamp))
    except FileNotFoundError:
        pass
    tl = table.timeline
    for state in ("INFLIGHT", "REQUESTED"):
        table.fs.delete(os.path.join(tl.meta_dir, instant.with_state(state).file_name(tl.layout)))
    log.info("rolled back %s (%d files)", instant.timestamp, len(deleted))
    table.reload()
    return deleted


def rollback_failed_writes(table: HoodieTable, *, lazy: bool = False, heartbeat_tolerance_ms: int = 60_000,
                           actions=("commit", "deltacommit", "replacecommit")) -> list[str]:
    """Roll back every pending write instant (eager, single writer), or only those whose writer's heartbeat
    expired (lazy, multi-writer). Returns the rolled-back instant times."""
    done = []
    for inst in table.reload().pending(actions):
        if lazy and not heartbeat_expired(table.base_path, inst.timestamp, heartbeat_tolerance_ms):
            continue
        rollback_instant(table, inst)
        done.append(inst.timestamp)
    return done
