"""Table services: rollback, compaction, clean, clustering, archival (see docs/services.md).

Run modes:
- inline: after a successful write, `WriteClient.run` calls `run_inline_services` with the write's options;
- async: `hoodie.compact.schedule.inline=true` / `hoodie.clustering.schedule.inline=true` only schedule the plan
  after a write; `hudilite compaction run PATH` / `hudilite cluster PATH` (or the Python functions) execute it;
- standalone: the `hudilite` command line or the functions of the service modules.
Every service takes its instants through `Transaction.start` (plan decided under the table lock) and completes
them under the lock, so services and writers on one table coordinate through the lock and the timeline. A
compaction or clustering plan is executed by the holder of its claim only (services/claim.py): inline services
skip a plan another executor holds, the command line waits for it.
"""

from __future__ import annotations

import logging

from hudilite.errors import HudiliteError
from hudilite.options import (ARCHIVE_AUTOMATIC, CLEAN_AUTOMATIC, CLUSTER_INLINE, CLUSTER_MAX_COMMITS as _MAX_COMMITS,
                              CLUSTER_SCHEDULE_INLINE, COMPACT_INLINE, COMPACT_SCHEDULE_INLINE)

log = logging.getLogger(__name__)

_SWITCHES = (COMPACT_INLINE, COMPACT_SCHEDULE_INLINE, CLUSTER_INLINE, CLUSTER_SCHEDULE_INLINE, CLEAN_AUTOMATIC,
             ARCHIVE_AUTOMATIC)


class TableServiceError(HudiliteError):
    """An inline table service failed after the write itself committed (the write stays committed; pending
    service plans are retried by the next run)."""


def check_service_options(options: dict | None) -> None:
    """Validate every service option of a write before anything is written (InvalidWriteError)."""
    from hudilite.services import archival, clean, clustering, compaction

    for opt in (*_SWITCHES, _MAX_COMMITS):
        opt.get(options)
    compaction.check_options(options)
    clean.check_options(options)
    clustering.check_options(options)
    archival.check_options(options)


def _commits_since_last_clustering(tl) -> int:
    from hudilite.timeline import REPLACE_COMMIT, WRITE_ACTIONS

    n = 0
    for inst in reversed(tl.completed(WRITE_ACTIONS)):
        if inst.action == REPLACE_COMMIT and str(tl.read_metadata(inst).get("operationType") or "") == "CLUSTER":
            break
        n += 1
    return n


def run_inline_services(table, options: dict | None, instant: str) -> dict:
    """The services a write's options switch on, after the write `instant` committed: compaction (MOR) and
    clustering (inline: schedule + execute; schedule.inline: schedule only), then clean, then archival.
    Returns what ran: {"compaction": [...], "clustering": [...], "clean": [...], "archive": [...]}."""
    o = options or {}
    wanted = {opt: opt.get(o) for opt in _SWITCHES}
    out: dict = {}
    if not any(wanted.values()):
        return out
    step = "-"
    try:
        mor = table.config.table_type == "MERGE_ON_READ"
        if mor and (wanted[COMPACT_INLINE] or wanted[COMPACT_SCHEDULE_INLINE]):
            from hudilite.services.compaction import run_compaction, schedule_compaction

            step = "compaction"
            t = schedule_compaction(table, o)
            out["compaction_scheduled"] = [t] if t else []
            if wanted[COMPACT_INLINE]:
                out["compaction"] = run_compaction(table, o)
        if wanted[CLUSTER_INLINE] or wanted[CLUSTER_SCHEDULE_INLINE]:
            from hudilite.services.clustering import run_clustering, schedule_clustering

            step = "clustering"
            if _commits_since_last_clustering(table.reload()) >= _MAX_COMMITS.get(o):
                t = schedule_clustering(table, o)
                out["clustering_scheduled"] = [t] if t else []
            if wanted[CLUSTER_INLINE]:
                out["clustering"] = run_clustering(table, o)
        if wanted[CLEAN_AUTOMATIC]:
            from hudilite.services.clean import run_clean

            step = "clean"
            out["clean"] = run_clean(table, o)
        if wanted[ARCHIVE_AUTOMATIC]:
            from hudilite.services.archival import archive

            step = "archival"
            out["archive"] = archive(table, o)
    except HudiliteError as e:
        if isinstance(e, TableServiceError):
            raise
        raise TableServiceError(f"write {instant} committed, but the inline {step} failed: {e}") from e
    return out
