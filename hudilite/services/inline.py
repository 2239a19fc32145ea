"""Inline table services: the services a write's options switch on, run after its commit (the run modes are
described in hudilite/services/__init__.py)."""

from __future__ import annotations

import logging

from hudilite.errors import HudiliteError, TableServiceError
from hudilite.options import (
    ARCHIVE_AUTOMATIC,
    CLEAN_AUTOMATIC,
    CLUSTER_INLINE,
    CLUSTER_MAX_COMMITS,
    CLUSTER_SCHEDULE_INLINE,
    COMPACT_INLINE,
    COMPACT_SCHEDULE_INLINE,
)

# module attributes rather than names: the services stay replaceable (tests inject failures)
from hudilite.services import archival, clean, clustering, compaction
from hudilite.timeline import REPLACE_COMMIT, WRITE_ACTIONS

log = logging.getLogger(__name__)

_SWITCHES = (COMPACT_INLINE, COMPACT_SCHEDULE_INLINE, CLUSTER_INLINE, CLUSTER_SCHEDULE_INLINE, CLEAN_AUTOMATIC,
             ARCHIVE_AUTOMATIC)


def check_service_options(options: dict | None) -> None:
    """Validate every service option of a write before anything is written (InvalidWriteError)."""
    for opt in (*_SWITCHES, CLUSTER_MAX_COMMITS):
        opt.get(options)
    compaction.check_options(options)
    clean.check_options(options)
    clustering.check_options(options)
    archival.check_options(options)


def _commits_since_last_clustering(tl) -> int:
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
        if table.config.table_type == "MERGE_ON_READ" and (wanted[COMPACT_INLINE] or wanted[COMPACT_SCHEDULE_INLINE]):
            step = "compaction"
            t = compaction.schedule_compaction(table, o)
            out["compaction_scheduled"] = [t] if t else []
            if wanted[COMPACT_INLINE]:
                out["compaction"] = compaction.run_compaction(table, o)
        if wanted[CLUSTER_INLINE] or wanted[CLUSTER_SCHEDULE_INLINE]:
            step = "clustering"
            if _commits_since_last_clustering(table.reload()) >= CLUSTER_MAX_COMMITS.get(o):
                t = clustering.schedule_clustering(table, o)
                out["clustering_scheduled"] = [t] if t else []
            if wanted[CLUSTER_INLINE]:
                out["clustering"] = clustering.run_clustering(table, o)
        if wanted[CLEAN_AUTOMATIC]:
            step = "clean"
            out["clean"] = clean.run_clean(table, o)
        if wanted[ARCHIVE_AUTOMATIC]:
            step = "archival"
            out["archive"] = archival.archive(table, o)
    except HudiliteError as e:
        if isinstance(e, TableServiceError):
            raise
        raise TableServiceError(f"write {instant} committed, but the inline {step} failed: {e}") from e
    return out
