"""Inline table services: the services a write's options switch on, run after its commit (the run modes are
described in hudilite/services/__init__.py)."""

from __future__ import annotations

import logging

from hudilite.errors import HudiliteError, TableServiceError

# module attributes rather than names: the services stay replaceable (tests inject failures)
from hudilite.services import archival, clean, clustering, compaction
from hudilite.services.common import opt_bool, opt_int
from hudilite.timeline import REPLACE_COMMIT, WRITE_ACTIONS

log = logging.getLogger(__name__)

INLINE_COMPACT = "hoodie.compact.inline"
SCHEDULE_COMPACT = "hoodie.compact.schedule.inline"
INLINE_CLUSTER = "hoodie.clustering.inline"
SCHEDULE_CLUSTER = "hoodie.clustering.schedule.inline"
CLUSTER_MAX_COMMITS = "hoodie.clustering.inline.max.commits"
AUTO_CLEAN = "hoodie.clean.automatic"
AUTO_ARCHIVE = "hoodie.archive.automatic"


def check_service_options(options: dict | None) -> None:
    """Validate every service option of a write before anything is written (InvalidWriteError)."""
    for k in (INLINE_COMPACT, SCHEDULE_COMPACT, INLINE_CLUSTER, SCHEDULE_CLUSTER, AUTO_CLEAN, AUTO_ARCHIVE):
        opt_bool(options, k, False)
    opt_int(options, CLUSTER_MAX_COMMITS, 4, minimum=1)
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
    wanted = {k: opt_bool(o, k, False) for k in (INLINE_COMPACT, SCHEDULE_COMPACT, INLINE_CLUSTER,
                                                 SCHEDULE_CLUSTER, AUTO_CLEAN, AUTO_ARCHIVE)}
    out: dict = {}
    if not any(wanted.values()):
        return out
    step = "-"
    try:
        if table.config.table_type == "MERGE_ON_READ" and (wanted[INLINE_COMPACT] or wanted[SCHEDULE_COMPACT]):
            step = "compaction"
            t = compaction.schedule_compaction(table, o)
            out["compaction_scheduled"] = [t] if t else []
            if wanted[INLINE_COMPACT]:
                out["compaction"] = compaction.run_compaction(table, o)
        if wanted[INLINE_CLUSTER] or wanted[SCHEDULE_CLUSTER]:
            step = "clustering"
            if _commits_since_last_clustering(table.reload()) >= opt_int(o, CLUSTER_MAX_COMMITS, 4, minimum=1):
                t = clustering.schedule_clustering(table, o)
                out["clustering_scheduled"] = [t] if t else []
            if wanted[INLINE_CLUSTER]:
                out["clustering"] = clustering.run_clustering(table, o)
        if wanted[AUTO_CLEAN]:
            step = "clean"
            out["clean"] = clean.run_clean(table, o)
        if wanted[AUTO_ARCHIVE]:
            step = "archival"
            out["archive"] = archival.archive(table, o)
    except HudiliteError as e:
        if isinstance(e, TableServiceError):
            raise
        raise TableServiceError(f"write {instant} committed, but the inline {step} failed: {e}") from e
    return out
