"""Archival: move old instants out of the active timeline into `.hoodie/archived/` (table version 6), or into
the LSM timeline history `.hoodie/timeline/history/` (versions 8/9, `_archive_to_history`; same selection).

Trigger: more than `hoodie.keep.max.commits` (default 30) completed write instants on the active timeline;
archival then moves the oldest instants until `hoodie.keep.min.commits` (default 20) completed write instants
remain (`force` archives down to the minimum whenever there is more). Never archived:
- the oldest pending instant (any action: writes, compaction / clustering plans, cleans) and everything after;
- anything at or after the earliest instant the last clean retained (`earliestCommitToRetain`), so every
  instant a retained read (time travel, incremental range) may start from stays on the active timeline.
  Files of archived instants stay visible (format rule) and the archive records them as completed, so
  log blocks and slices of archived instants keep counting;
- a replacecommit while a file of a group it replaced still exists (after archival it would no longer hide
  them: readers only look at the active timeline for replaced groups, hudi-rs too);
- completed instants whose successors are not archivable (the archived range is a prefix of the timeline);
- a write that completed after a write kept active: the archived writes are a prefix in completion order as
  well, so a change range (completion order) that starts on the active timeline needs no archived instant
  (compaction and clustering commits change no rows and are exempt).

Layout: every instant file (requested, inflight, completed) becomes one `HoodieArchivedMetaEntry` record
(commitTime, actionType, actionState, the metadata in its kind's field); one AVRO_DATA block per archival run
is appended to `.hoodie/archived/.commits_.archive.<N>_1-0-1` (a new version past 128 MB). Then the instant
files are deleted, oldest instant first, and per instant requested -> inflight -> completed (the completed
file last): an archival killed midway leaves instants that are either still active (and also archived: read
once) or completed-only, never a completed instant that looks pending. It runs under the table lock.

After archival, readers judge file and log-block validity against the archive too (`Timeline.committed_times`):
a block of a failed instant older than the active timeline is still not read.
"""

from __future__ import annotations

import logging
import os

from hudilite import auxfiles
from hudilite.errors import InvalidWriteError
from hudilite.file_group import parse_base_file_name
from hudilite.log.format import try_parse_log_file_name
from hudilite.options import ARCHIVE_AUTOMATIC, KEEP_MAX_COMMITS, KEEP_MIN_COMMITS, TIMELINE_COMPACTION_BATCH
from hudilite.services.clean import last_clean
from hudilite.services.common import open_table
from hudilite.storage.local import storage_for
from hudilite.table import HoodieTable
from hudilite.timeline import (
    CLEAN,
    CLUSTERING,
    COMMIT,
    COMPACTION,
    COMPLETED,
    DELTA_COMMIT,
    INFLIGHT,
    REPLACE_COMMIT,
    REQUESTED,
    ROLLBACK,
    WRITE_ACTIONS,
    Instant,
    Timeline,
    lsm,
)
from hudilite.timeline.archive import append_archive_records, archive_dir, is_service_commit
from hudilite.timeline.avro_models import ARCHIVED_META_ENTRY, commit_metadata_record, from_container, parsed
from hudilite.timeline.instant import LOG_COMPACTION, parse_instant_file
from hudilite.timeline.lsm import HistoryRecord, history_dir
from hudilite.writer.transaction import Transaction

log = logging.getLogger(__name__)

def check_options(options: dict | None) -> None:
    mn, mx = KEEP_MIN_COMMITS.get(options), KEEP_MAX_COMMITS.get(options)
    if mx < mn:
        raise InvalidWriteError(f"{KEEP_MAX_COMMITS.key}={mx} must be >= {KEEP_MIN_COMMITS.key}={mn}")
    ARCHIVE_AUTOMATIC.get(options)


def _replaced_files_exist(table: HoodieTable, tl: Timeline, inst: Instant) -> bool:
    for part, fids in (tl.read_metadata(inst).get("partitionToReplaceFileIds") or {}).items():
        fids = set(fids or [])
        if not fids:
            continue
        d = table.partition_dir(part or "")
        try:
            names = table.fs.list_entries(d)[1]
        except FileNotFoundError:
            continue
        for n in names:
            b = parse_base_file_name(n)
            if b and b[0] in fids:
                return True
            lf = try_parse_log_file_name(n) if n.startswith(".") else None
            if lf and lf.file_id in fids:
                return True
    return False


def instants_to_archive(table: HoodieTable, tl: Timeline, options: dict | None, *, force: bool = False
                        ) -> tuple[list[Instant], str]:
    """The instants archival would move now (a prefix of the active timeline), and the reason it stops."""
    mn, mx = KEEP_MIN_COMMITS.get(options), KEEP_MAX_COMMITS.get(options)
    writes = tl.completed(WRITE_ACTIONS)
    if len(writes) <= (mn if force else mx):
        return [], f"{len(writes)} completed write instant(s) on the active timeline (archival above {mx})"
    keep_from = writes[-mn].timestamp  # the newest `mn` write instants stay
    reason = f"keeping the newest {mn} completed write instants (from {keep_from})"
    pending = tl.pending()
    if pending and pending[0].timestamp < keep_from:
        keep_from, reason = pending[0].timestamp, f"pending {pending[0].action} {pending[0].timestamp}"
    lc = last_clean(tl)
    if lc and lc.get("earliestCommitToRetain") and lc["earliestCommitToRetain"] < keep_from:
        keep_from, reason = lc["earliestCommitToRetain"], f"the last clean retains from {lc['earliestCommitToRetain']}"
    out = []
    for inst in tl.instants:
        if inst.timestamp >= keep_from:
            break
        if not inst.is_completed:
            reason = f"pending {inst.action} {inst.timestamp}"
            break
        if inst.action == REPLACE_COMMIT and _replaced_files_exist(table, tl, inst):
            reason = f"replacecommit {inst.timestamp} still has files of replaced groups (clean them first)"
            break
        out.append(inst)
    # Change ranges are in completion order: an archived instant that completed after one kept active would sit
    # inside ranges starting on the active timeline, unread. Shorten the prefix until every archived write
    # completed before every kept one.
    # Compaction and clustering commits change no rows: ranges need nothing of them, they may leave late.
    def changes_rows(i: Instant) -> bool:
        return i.action in WRITE_ACTIONS and not is_service_commit(tl.read_metadata(i))

    archived = {i.timestamp for i in out}
    kept = [tl.completion_time(i) for i in writes if i.timestamp not in archived and changes_rows(i)]
    floor = min(kept, default=None)
    while out and floor is not None and any(changes_rows(i) and tl.completion_time(i) > floor for i in out):
        late = out.pop()
        if changes_rows(late):
            floor = min(floor, tl.completion_time(late))
        reason = (f"{late.action} {late.timestamp} or an instant before it completed after an instant kept "
                  "active (archival keeps completion order)")
    return out, reason


def _state_files(tl: Timeline, inst: Instant) -> list[tuple[str, str, str]]:
    """(path, action, state) of the instant files of a completed instant, requested -> inflight -> completed."""
    out = []
    actions = [inst.action]
    if inst.action == COMMIT:
        actions.append(COMPACTION)
    for state in (REQUESTED, INFLIGHT, COMPLETED):
        for a in actions:
            i = Instant(inst.timestamp, a, state)
            p = os.path.join(tl.meta_dir, i.file_name(tl.layout))
            if storage_for(p).exists(p) and not any(x[0] == p for x in out):
                out.append((p, a, state))
    return out


def _entry(tl: Timeline, inst: Instant, path: str, action: str, state: str) -> dict:
    rec = {"commitTime": inst.timestamp, "actionType": action, "actionState": state, "version": 1}
    data = storage_for(path).read_bytes(path)
    if not data.strip():
        return rec
    try:
        if state == COMPLETED and action in (COMMIT, DELTA_COMMIT):
            rec["hoodieCommitMetadata"] = commit_metadata_record(tl.read_metadata(inst), replace=False)
        elif state == COMPLETED and action == REPLACE_COMMIT:
            rec["hoodieReplaceCommitMetadata"] = commit_metadata_record(tl.read_metadata(inst), replace=True)
        elif state == COMPLETED and action == CLEAN:
            rec["hoodieCleanMetadata"] = from_container(data)
        elif state == COMPLETED and action == ROLLBACK:
            rec["hoodieRollbackMetadata"] = from_container(data)
        elif state == REQUESTED and action == COMPACTION:
            rec["hoodieCompactionPlan"] = from_container(data)
        elif state == REQUESTED and action == CLEAN:
            rec["hoodieCleanerPlan"] = from_container(data)
        elif state == REQUESTED and action == REPLACE_COMMIT:
            rec["hoodieRequestedReplaceMetadata"] = from_container(data)
    except Exception as e:  # noqa: BLE001 - keep the instant (time, action, state); its details are optional
        log.warning("archiving %s without its metadata (%s): %s", path, action, e)
    return rec


def archive(table_or_path, options: dict | None = None, *, force: bool = False) -> list[str]:
    """Archive old instants (see the module doc). Returns the archived instant times."""
    import fastavro

    check_options(options)
    table = open_table(table_or_path)
    if table.config.layout_version >= 2:
        return _archive_to_history(table, options, force=force)
    folder = table.config.archive_folder
    txn = Transaction(table, options)
    with txn.lock:
        tl = table.reload()
        todo, reason = instants_to_archive(table, tl, options, force=force)
        if not todo:
            log.info("nothing to archive in %s (%s)", table.base_path, reason)
            return []
        files, records = [], []
        schema = parsed(ARCHIVED_META_ENTRY)
        for inst in todo:
            for path, action, state in _state_files(tl, inst):
                rec = _entry(tl, inst, path, action, state)
                if not fastavro.validate(rec, schema, raise_errors=False):
                    log.warning("archiving %s without its metadata (does not fit the Avro model)", path)
                    rec = {k: rec[k] for k in ("commitTime", "actionType", "actionState", "version")}
                records.append(rec)
                files.append(path)
        txn.lock.verify()
        append_archive_records(archive_dir(table.meta_path, folder), records)
        # change reads never start before the active timeline. The images go first: once an instant's files are
        # deleted nothing would remove them any more (a process killed in between left them forever), while
        # images missing for an instant still active only make a change read compute the diff instead
        for inst in todo:
            auxfiles.remove_instant(table.base_path, inst.timestamp, "archival")
        for path in files:  # oldest instant first; requested -> inflight -> completed within one
            table.fs.delete(path)
        table.reload()
    log.info("archived %d instant(s) of %s (%s .. %s); stopped at: %s", len(todo), table.base_path,
             todo[0].timestamp, todo[-1].timestamp, reason)
    return [i.timestamp for i in todo]


# plans kept in the history's `plan` column: the requested file of these actions (Hudi's LSM instant model)
_PLANNED = (CLEAN, COMPACTION, CLUSTERING, REPLACE_COMMIT, LOG_COMPACTION)


def _instant_files(tl: Timeline) -> dict[str, list[tuple[str, Instant]]]:
    """instant time -> (path, parsed instant) of every file of that instant on the active timeline."""
    out: dict[str, list[tuple[str, Instant]]] = {}
    for name in storage_for(tl.meta_dir).list_entries(tl.meta_dir)[1]:
        inst = parse_instant_file(name, tl.layout)
        if inst is not None:
            out.setdefault(inst.timestamp, []).append((os.path.join(tl.meta_dir, name), inst))
    return out


def _history_record(inst: Instant, files: list[tuple[str, Instant]]) -> HistoryRecord:
    """The HoodieLSMTimelineInstant of a completed instant: the completed file's bytes as metadata, the
    requested file's bytes as plan (compaction / clustering / replace / clean plans)."""
    metadata = plan = None
    for path, f in files:
        if f.state == COMPLETED:
            metadata = storage_for(path).read_bytes(path) or None
        elif f.state == REQUESTED and f.action in _PLANNED:
            plan = storage_for(path).read_bytes(path) or None
    return HistoryRecord(inst.timestamp, inst.completion, inst.action, metadata, plan)


def _archive_to_history(table: HoodieTable, options: dict | None, *, force: bool) -> list[str]:
    """Archival of timeline layout 2 (v8/9) into the LSM history: the same selection as v6, one level-0 file
    per run, then level compaction and cleanup of the history, then the archived instant files are deleted.

    Deletion order (as Hudi's TimelineArchiverV2): per instant, oldest first, requested and inflight files
    before the completed file. A kill midway leaves an instant either untouched, or completed-only on the
    active timeline and also in the history; readers count it once (the active timeline wins, the history is
    keyed by instant time), and the next archival deletes the leftover. Deleting the completed file first
    would leave a pending-looking instant whose files a rollback of failed writes could remove."""
    txn = Transaction(table, options)
    with txn.lock:
        tl = table.reload()
        history = history_dir(tl.meta_dir)  # where Timeline.archived reads it
        todo, reason = instants_to_archive(table, tl, options, force=force)
        # leftovers of a killed archival: instants already in the history whose active files survived
        archived = tl.archived.all_times
        leftovers = [i for i in tl.instants if i.timestamp in archived and i.is_completed]
        todo = [i for i in todo if i.timestamp not in archived]
        txn.lock.verify()
        files = _instant_files(tl)
        if todo:
            lsm.append_level0(history, [_history_record(i, files.get(i.timestamp, [])) for i in todo])
        if todo or archived:
            # also on a run with nothing new: it finishes a compaction or cleanup a killed run left
            lsm.compact_levels(history, TIMELINE_COMPACTION_BATCH.get(options))
            lsm.clean(history)
        if not todo and not leftovers:
            log.info("nothing to archive in %s (%s)", table.base_path, reason)
            return []
        for inst in sorted([*leftovers, *todo], key=Instant.sort_key):
            auxfiles.remove_instant(table.base_path, inst.timestamp, "archival")
            own = files.get(inst.timestamp, [])
            for path, f in sorted(own, key=lambda pf: pf[1].state == COMPLETED):
                table.fs.delete(path)
        table.reload()
    if todo:
        log.info("archived %d instant(s) of %s into the timeline history (%s .. %s); stopped at: %s", len(todo),
                 table.base_path, todo[0].timestamp, todo[-1].timestamp, reason)
    return [i.timestamp for i in todo]


def archived_instants(table_or_path) -> list[Instant]:
    table = open_table(table_or_path)
    return table.reload().archived.instants


__all__ = ["archive", "instants_to_archive", "archived_instants"]
