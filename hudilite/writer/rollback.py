"""Rolling back failed (pending) writes from their markers: the mechanics the transaction and the services use.

A rollback is an instant of its own, as in Apache Hudi: `<t>.rollback.requested` (the HoodieRollbackPlan:
`rollback_plan`), `<t>.rollback.inflight`, then the completed rollback with HoodieRollbackMetadata; the
transaction takes its time and writes those files (`Transaction.rollback`), this module plans and executes.
Order matters for crash safety: data files first, then markers, then the failed instant's files, then the
completed rollback, so a rollback that is itself killed leaves a pending rollback that the next rollback
re-executes for the same instant.
"""

from __future__ import annotations

import logging
import os
import re
import time

from hudilite import auxfiles
from hudilite.file_group import parse_base_file_name
from hudilite.fs_view import PARTITION_METAFILE
from hudilite.log import (
    CommandBlock,
    LogBlock,
    append_blocks,
    create_log_file,
    list_log_files,
    new_log_version_path,
    parse_log_file_name,
    scan_log_file,
    try_parse_log_file_name,
)
from hudilite.markers import APPEND, delete_markers, list_markers, marker_dir
from hudilite.table import HoodieTable
from hudilite.timeline import Instant
from hudilite.timeline.heartbeat import heartbeat_path

log = logging.getLogger(__name__)


def files_of_instant(table: HoodieTable, instant: str) -> list[str]:
    """Data files a write of `instant` may have created: every marker's file, plus any base file named with
    the instant in the partitions its markers name (belt and braces)."""
    out: set[str] = set()
    partitions: set[str] = set()
    for part, name, kind in list_markers(table.base_path, instant):
        partitions.add(part)
        if kind != APPEND:  # log files: see _log_actions
            out.add(os.path.join(table.partition_dir(part), name))
    for part in partitions:
        for entry in table.fs.scandir_files(table.partition_dir(part)):
            parsed = parse_base_file_name(entry.name)
            if parsed and parsed[2] == instant:
                out.add(entry.path)
    return sorted(out)


def _remove_empty_partition_dirs(table: HoodieTable, dirs: set[str], instant: str) -> None:
    """Remove directories the rolled-back write left empty. A partition directory holding nothing but the
    partition metadata that this very instant wrote (commitTime=<instant>) was created by it: removed too."""
    for d in sorted(dirs, key=len, reverse=True):
        cur = d
        while cur.startswith(table.base_path + "/") and cur != table.base_path:
            entries = table.fs.listdir(cur)
            if not entries and not table.fs.isdir(cur):
                cur = os.path.dirname(cur)
                continue
            # the temp file of a partition metadata write killed half-way (`put_if_absent`): a directory left with
            # nothing else is removed with it (a concurrent writer creating the same partition has its data files
            # there, written before the metadata, so the directory is not empty then)
            temps = [e for e in entries if e.startswith(f".{PARTITION_METAFILE}.") and e.endswith(".tmp")]
            entries = [e for e in entries if e not in temps]
            if entries == [PARTITION_METAFILE] and _partition_created_by(table, os.path.join(cur, PARTITION_METAFILE),
                                                                         instant):
                table.fs.delete(os.path.join(cur, PARTITION_METAFILE))
                entries = []
            if entries:
                break  # other files, or an existing (committed) partition
            for t in temps:
                table.fs.delete(os.path.join(cur, t))
            table.fs.rmdir(cur)
            cur = os.path.dirname(cur)


def _partition_created_by(table: HoodieTable, metafile: str, instant: str) -> bool:
    try:
        text = table.fs.read_bytes(metafile).decode("utf-8", errors="replace")
    except FileNotFoundError:
        return False
    return any(line.strip() == f"commitTime={instant}" for line in text.splitlines())


def _delete_instant_temp_files(table: HoodieTable, instant: str) -> None:
    """Temp files of the atomic writes of `instant`'s timeline files (`.<instant file>.<uuid>.tmp`), left by
    a writer killed between writing the temp file and linking/renaming it into place."""
    pattern = re.compile(rf"^\.{instant}[._].*\.tmp$")
    for entry in list(table.fs.scandir_files(table.timeline.meta_dir)):
        if pattern.match(entry.name):
            table.fs.delete(entry.path)


def _log_actions(table: HoodieTable, instant: str) -> tuple[list[str], list[str]]:
    """Merge-on-read: the log files of a failed `instant` (its APPEND markers) to delete - they hold blocks of
    `instant` only (created by it) - and those that also hold other instants' blocks, which get a rollback
    COMMAND block instead. Files already gone are in neither."""
    delete, command = [], []
    for part, name, kind in list_markers(table.base_path, instant):
        if kind != APPEND:
            continue
        path = os.path.join(table.partition_dir(part), name)
        if not table.fs.exists(path):
            continue
        blocks = [b for b in scan_log_file(path) if isinstance(b, LogBlock)]
        (command if any(b.instant_time != instant for b in blocks) else delete).append(path)
    return delete, command


def _file_group(table: HoodieTable, path: str) -> tuple[str, str | None, str | None]:
    """(partition, file id, base instant) of a data file of the table (file id None for other files)."""
    part = os.path.relpath(os.path.dirname(path), table.base_path)
    part = "" if part == "." else part
    base = parse_base_file_name(os.path.basename(path))
    if base:
        return part, base[0], None
    name = try_parse_log_file_name(path)
    return (part, name.file_id, name.instant) if name else (part, None, None)


def rollback_plan(table: HoodieTable, instant: Instant) -> dict:
    """The HoodieRollbackPlan of pending write `instant`, as Apache Hudi plans a marker-based rollback: per
    file group the files to delete and the log files that get a rollback command block (with their size)."""
    delete, command = _log_actions(table, instant.timestamp)
    requests: dict[tuple[str, str | None], dict] = {}

    def request(path: str) -> dict:
        part, fid, base = _file_group(table, path)
        return requests.setdefault((part, fid), {"partitionPath": part, "fileId": fid, "latestBaseInstant": base,
                                                 "filesToBeDeleted": [], "logBlocksToBeDeleted": None})

    for path in [*files_of_instant(table, instant.timestamp), *delete]:
        request(path)["filesToBeDeleted"].append(path)
    for path in command:
        r = request(path)
        r["logBlocksToBeDeleted"] = {**(r["logBlocksToBeDeleted"] or {}), path: table.fs.size(path)}
    return {"instantToRollback": {"commitTime": instant.timestamp, "action": instant.action},
            "RollbackRequests": [requests[k] for k in sorted(requests, key=lambda k: (k[0], k[1] or ""))],
            "version": 1}


def execute_rollback(table: HoodieTable, plan: dict, rollback_time: str) -> tuple[list[str], dict]:
    """Undo the pending write `plan` names (its files, its markers, then its instant files), writing rollback
    command blocks as instant `rollback_time`. Returns the deleted data files and the HoodieRollbackMetadata.
    Idempotent: a rerun after a crash finds deleted files gone (they count as deleted) and command blocks
    already there; files the markers name beyond the plan (a write that went on after planning) go too."""
    t0 = time.monotonic()
    target = plan["instantToRollback"]
    instant = Instant(target["commitTime"], target["action"], "REQUESTED")
    planned = [p for r in plan.get("RollbackRequests") or [] for p in r.get("filesToBeDeleted") or []]
    logs = {p: n for r in plan.get("RollbackRequests") or [] for p, n in (r.get("logBlocksToBeDeleted") or {}).items()}
    delete, command = _log_actions(table, instant.timestamp)
    for path in command:
        logs.setdefault(path, table.fs.size(path))
        _write_rollback_block(table, path, instant.timestamp, rollback_time)
    candidates = list(dict.fromkeys([*planned, *delete, *files_of_instant(table, instant.timestamp)]))
    deleted = [p for p in candidates if table.fs.delete(p)]
    _remove_empty_partition_dirs(table, {os.path.dirname(p) for p in candidates}, instant.timestamp)
    delete_markers(table.base_path, instant.timestamp)
    table.fs.delete(heartbeat_path(table.base_path, instant.timestamp))
    _delete_instant_temp_files(table, instant.timestamp)
    auxfiles.remove_instant(table.base_path, instant.timestamp, "rollback")
    tl = table.timeline
    for state in ("INFLIGHT", "REQUESTED"):
        table.fs.delete(os.path.join(tl.meta_dir, instant.with_state(state).file_name(tl.layout)))
    log.info("rolled back %s (%d files)", instant.timestamp, len(deleted))
    table.reload()
    parts: dict[str, dict] = {}

    def part_md(path: str) -> dict:
        part = _file_group(table, path)[0]
        return parts.setdefault(part, {"partitionPath": part, "successDeleteFiles": [], "failedDeleteFiles": [],
                                       "rollbackLogFiles": {}, "writtenLogFiles": {}})

    for p in candidates:
        part_md(p)["failedDeleteFiles" if table.fs.exists(p) else "successDeleteFiles"].append(p)
    for p, size in logs.items():
        part_md(p)["rollbackLogFiles"][p] = size
    metadata = {
        "startRollbackTime": rollback_time, "timeTakenInMillis": int((time.monotonic() - t0) * 1000),
        "totalFilesDeleted": sum(len(m["successDeleteFiles"]) for m in parts.values()),
        "commitsRollback": [instant.timestamp], "partitionMetadata": parts, "version": 1,
        "instantsRollback": [{"commitTime": instant.timestamp, "action": instant.action}],
    }
    return deleted, metadata


def _write_rollback_block(table: HoodieTable, path: str, instant: str, rollback_time: str) -> None:
    """A rollback COMMAND block (TARGET_INSTANT_TIME = `instant`) for a log file that also holds other instants'
    blocks: readers then drop the failed blocks in any log file of the slice. Appended to that file, or where
    the storage cannot append, in a new log version of the slice; not again where a rerun finds it there."""
    if _rolled_back_in_slice(path, instant):
        return
    block = CommandBlock.rollback(rollback_time, instant)
    if table.fs.supports_append:
        append_blocks(path, [block])
    else:  # object store: the block starts the slice's next log version, as Apache Hudi's writer does there
        path = new_log_version_path(path, ROLLBACK_WRITE_TOKEN)
        create_log_file(path, [block])
    log.info("wrote a rollback command block for %s to %s", instant, path)


# a rollback runs on the driver, outside any Spark task
ROLLBACK_WRITE_TOKEN = "0-0-0"


def _rolled_back_in_slice(path: str, instant: str) -> bool:
    """Whether a log file of `path`'s file slice (the file itself included) holds a rollback command block for
    `instant`: a rerun of a rollback killed after writing it."""
    name = parse_log_file_name(path)
    directory = os.path.dirname(path)
    for f in list_log_files(directory, name.file_id, name.instant):
        for b in scan_log_file(os.path.join(directory, f.name)):
            if isinstance(b, CommandBlock) and b.is_rollback and b.target_instant_time == instant:
                return True
    return False


def clean_completed_leftovers(table: HoodieTable) -> list[str]:
    """Delete marker directories, heartbeats and timeline temp files of completed instants (a writer killed
    between its commit and its cleanup), and timeline temp files of instants that are not on the timeline at all
    (a writer or scheduler killed while writing the instant's first file: its requested file or plan). Runs
    under the table lock, under which every first instant file is written, so none of those is live. Returns the
    instant times cleaned."""
    completed = {i.timestamp for i in table.timeline.instants if i.is_completed}
    known = {i.timestamp for i in table.timeline.instants}
    hb_dir = os.path.dirname(heartbeat_path(table.base_path, "x"))
    cleaned = set()
    for t in table.fs.listdir(table.temp_path):
        if t in completed and table.fs.isdir(marker_dir(table.base_path, t)):
            delete_markers(table.base_path, t)
            cleaned.add(t)
    for t in table.fs.listdir(hb_dir):
        if t in completed and table.fs.delete(heartbeat_path(table.base_path, t)):
            cleaned.add(t)
    for entry in list(table.fs.scandir_files(table.timeline.meta_dir)):
        m = re.match(r"^\.(\d{17}|\d{14})[._].*\.tmp$", entry.name)
        if m and (m.group(1) in completed or m.group(1) not in known) and table.fs.delete(entry.path):
            cleaned.add(m.group(1))
    if cleaned:
        log.info("removed leftovers of completed instants %s", sorted(cleaned))
    return sorted(cleaned)
