"""Upgrade a version-6 table (timeline layout 1) to version 9 (layout 2), as Apache Hudi 1.x's upgrade does.

Steps: roll back failed writes (lazily: writers whose heartbeat expired); on merge-on-read compact every file
group with log files, so that no v6-named log file (named by its base instant, holding blocks of many
deltacommits) stays live where 1.x slices logs by the completion time of the instant in their name; then, under
the table lock:

1. write the complete layout-2 timeline into `.hoodie/timeline/` (new files only, put-if-absent): completed
   write instants as `<t>_<completion>.<action>` with Avro commit metadata (the completion time hudilite
   recorded in `extraMetadata`, else the instant time), a pending or completed clustering's requested/inflight
   files as `clustering`, plans and clean/rollback metadata copied (the same Avro models on both layouts);
2. the commit point: replace `hoodie.properties` with the version-9 set (initial version 6) in one atomic
   replace (compare-and-swap against the content read under the lock on conditional stores);
3. delete the layout-1 instant files from `.hoodie/`.

A kill before 2 leaves the v6 table as it was (layout-1 readers ignore `.hoodie/timeline/`; the next upgrade
deletes what was left there and writes it anew). A kill after 2 leaves a v9 table (layout-2 readers ignore
`.hoodie/` instant files); the next upgrade deletes the old files.

The v6 archive (`.hoodie/archived`) becomes the LSM history (`.hoodie/timeline/history/`, one level-0 file),
written before the commit point like the rest of the new timeline.
"""

from __future__ import annotations

import json
import logging
import os

from hudilite import options as o
from hudilite.config import (
    COMMIT_TIME_PAYLOAD,
    COMMIT_TIME_STRATEGY,
    EVENT_TIME_PAYLOAD,
    EVENT_TIME_STRATEGY,
    KEYGEN_TYPES,
    TableConfig,
    v8_properties,
)
from hudilite.errors import HudiliteError
from hudilite.lock import lock_for
from hudilite.services.common import open_table
from hudilite.services.compaction import compact, pending_compactions, run_compaction
from hudilite.services.rollback import rollback_failed_writes
from hudilite.storage import storage_for
from hudilite.storage.conditional import ConditionalStorage
from hudilite.table import PROPS_FILE, HoodieTable
from hudilite.timeline.avro_models import CLEAN_METADATA, commit_metadata_bytes, from_container, to_container
from hudilite.timeline.instant import (
    CLEAN,
    CLUSTERING,
    COMPLETED,
    COMPLETION_KEY,
    REPLACE_COMMIT,
    REQUESTED,
    WRITE_ACTIONS,
    Instant,
    parse_instant_file,
)
from hudilite.timeline.lsm import HistoryRecord, append_level0, history_dir

log = logging.getLogger(__name__)

TARGET_VERSION = 9
AUTO_UPGRADE_KEY = o.AUTO_UPGRADE.key  # Apache Hudi's key; off by default here


class UpgradeError(HudiliteError):
    """The table cannot be upgraded (as it is now); nothing was changed."""


def upgrade(path_or_table, to: int = TARGET_VERSION, options: dict | None = None) -> bool:
    """Upgrade the table to version `to` (9). Returns True if it upgraded it, False if it was at `to` already
    (then only leftovers of an upgrade killed after its commit point are removed)."""
    if to != TARGET_VERSION:
        raise UpgradeError(f"hudilite upgrades to table version {TARGET_VERSION} only (asked: {to})")
    options = dict(options or {})
    table = open_table(path_or_table)
    version = table.config.version
    if version == to:
        _delete_layout1_instants(table)
        return False
    if version != 6:
        raise UpgradeError(f"{table.base_path}: table version {version}: hudilite upgrades version 6 to {to}")
    rollback_failed_writes(table, lazy=True, options=options)
    if table.config.table_type == "MERGE_ON_READ":
        run_compaction(table, options, wait=True)  # pending plans first: their groups are not planned again
        compact(table, options, force=True)
    with lock_for(table.base_path, options):
        props_path = os.path.join(table.meta_path, PROPS_FILE)
        fs = table.fs
        if isinstance(fs, ConditionalStorage):
            old_bytes, tag = fs.read_versioned(props_path)
        else:
            old_bytes, tag = fs.read_bytes(props_path), None
        config = TableConfig.parse(old_bytes.decode("utf-8"), table.base_path)
        if config.version == to:  # upgraded by another process meanwhile
            _delete_layout1_instants(table)
            return False
        table = HoodieTable(table.base_path, config)
        tl = table.reload()
        _check_upgradable(table, tl)
        _write_layout2_timeline(table, tl)
        _write_history(table, tl)
        new = TableConfig(_v9_properties(config.props))
        # the commit point
        if tag is not None:
            assert isinstance(fs, ConditionalStorage)
            if fs.replace_if_match(props_path, new.serialize().encode("utf-8"), tag) is None:
                raise UpgradeError(f"{table.base_path}: hoodie.properties changed during the upgrade; run it again")
        else:
            fs.delete_stale_temps(props_path)  # of an upgrade killed inside this replace (under the lock)
            fs.write_bytes(props_path, new.serialize().encode("utf-8"))
        log.info("upgraded %s to table version %d", table.base_path, to)
        _delete_layout1_instants(HoodieTable(table.base_path, new))
    return True


def _v9_properties(v6: dict[str, str]) -> dict[str, str]:
    """The version-9 keys of a v6 table. Tables Apache Hudi 0.x wrote may lack the merge strategy id or the
    payload class: the merge mode is inferred from what is there, as our v6 reader (and Java) infer it."""
    mode = TableConfig(v6).merge_mode
    keygen = v6.get(o.T_KEYGEN_CLASS.key)
    if keygen not in KEYGEN_TYPES:
        raise UpgradeError(f"key generator {keygen!r}: hudilite upgrades tables whose key generator is one of "
                           f"{', '.join(sorted(KEYGEN_TYPES))}")
    commit_time = mode == "COMMIT_TIME_ORDERING"
    filled = {o.T_MERGER_STRATEGY.key: COMMIT_TIME_STRATEGY if commit_time else EVENT_TIME_STRATEGY,
              o.T_PAYLOAD.key: COMMIT_TIME_PAYLOAD if commit_time else EVENT_TIME_PAYLOAD, **v6}
    props = v8_properties(filled, TARGET_VERSION)
    props[o.T_MERGE_MODE.key] = mode
    props[o.T_INITIAL_VERSION.key] = "6"
    return props


def _check_upgradable(table: HoodieTable, tl) -> None:
    pending_writes = [i for i in tl.pending(WRITE_ACTIONS)
                      if not (i.action == REPLACE_COMMIT and _is_clustering(tl.meta_dir, i.timestamp))]
    if pending_writes:
        raise UpgradeError(
            f"{table.base_path}: write instants are in flight ({', '.join(i.timestamp for i in pending_writes)}); "
            "upgrade when no writer is running (`hudilite rollback` removes failed writes)")
    if table.config.table_type == "MERGE_ON_READ":
        if pending_compactions(table):
            raise UpgradeError(f"{table.base_path}: a compaction is pending; run it first (`hudilite compact`)")
        partitions, view = table.listed_view()
        with_logs = [(s.partition, s.file_id) for s in view.latest_slices(partitions) if s.log_files]
        if with_logs:
            raise UpgradeError(f"{table.base_path}: file groups still have log files after the compaction "
                               f"(e.g. {with_logs[0]}); compact them (`hudilite compact`) and upgrade again")


def _is_clustering(meta_dir: str, t: str) -> bool:
    """Whether replacecommit `t` of layout 1 is a clustering (its requested file holds a clustering plan)."""
    p = os.path.join(meta_dir, Instant(t, REPLACE_COMMIT, REQUESTED).file_name(1))
    try:
        data = storage_for(p).read_bytes(p)
    except FileNotFoundError:
        return False
    if not data.strip():
        return False
    rec = from_container(data)
    return rec.get("clusteringPlan") is not None or str(rec.get("operationType") or "").upper() == "CLUSTER"


def _layout1_files(table: HoodieTable) -> list[tuple[str, Instant]]:
    meta = table.meta_path
    return [(n, i) for n in sorted(table.fs.listdir(meta)) if (i := parse_instant_file(n, 1)) is not None
            and not table.fs.isdir(os.path.join(meta, n))]


def _write_layout2_timeline(table: HoodieTable, tl) -> None:
    fs = table.fs
    tdir = os.path.join(table.meta_path, "timeline")  # where v8_properties puts it
    # what an upgrade killed before its commit point left: written anew (nothing reads it on version 6)
    for d in (tdir, history_dir(tdir)):
        if fs.exists(d):
            for n in fs.listdir(d):
                if not fs.isdir(os.path.join(d, n)):
                    fs.delete(os.path.join(d, n))
    fs.makedirs(history_dir(tdir))
    clustering = {}
    for name, inst in _layout1_files(table):
        src = os.path.join(table.meta_path, name)
        data = fs.read_bytes(src)
        action = inst.action
        if action == REPLACE_COMMIT and inst.state != COMPLETED:
            if inst.timestamp not in clustering:
                clustering[inst.timestamp] = _is_clustering(table.meta_path, inst.timestamp)
            if clustering[inst.timestamp]:
                action = CLUSTERING
        completion = None
        # requested files of writes hold nothing or (replacecommit) the same Avro requested metadata
        if inst.action in WRITE_ACTIONS and inst.state != REQUESTED and data.strip():
            md = json.loads(data)
            if inst.state == COMPLETED:
                completion = (md.get("extraMetadata") or {}).get(COMPLETION_KEY) or inst.timestamp
            data = commit_metadata_bytes(md, inst.action == REPLACE_COMMIT and inst.state == COMPLETED, 2)
        elif inst.state == COMPLETED:
            completion = inst.timestamp
        new = Instant(inst.timestamp, action, inst.state, completion)
        fs.put_if_absent(os.path.join(tdir, new.file_name(2)), data)


def _write_history(table: HoodieTable, tl) -> None:
    """The v6 archive as one level-0 file of the LSM history: each completed archived instant with its
    completion time (as on the active timeline) and its metadata in the 1.x model (commit metadata as Avro,
    clean metadata as the same Avro model; plans are not carried over, as no reader of an archived instant
    needs them)."""
    archived = tl.archived
    records = []
    for inst in archived.instants:
        if not inst.is_completed:
            continue
        md = archived.metadata(inst)
        body = None
        if inst.action in WRITE_ACTIONS:
            body = commit_metadata_bytes(md, inst.action == REPLACE_COMMIT, 2)
        elif inst.action == CLEAN and md:
            body = to_container(CLEAN_METADATA, md)
        records.append(HistoryRecord(inst.timestamp, archived.completion_time(inst), inst.action, body))
    if records:
        append_level0(history_dir(os.path.join(table.meta_path, "timeline")), records)


def _delete_layout1_instants(table: HoodieTable) -> None:
    """Layout-1 instant files left in `.hoodie/` of a layout-2 table (after the commit point)."""
    if table.config.layout_version < 2:
        return
    fs = table.fs
    for name, _ in _layout1_files(table):
        fs.delete(os.path.join(table.meta_path, name))
    # temp files of layout-1 instant files (a v6 writer or service killed inside a put): on version 6 the next
    # put of that instant removes them; nothing writes layout-1 instants any more
    for name in fs.listdir(table.meta_path):
        if name.startswith(".") and name.endswith(".tmp") and \
                parse_instant_file(name[1:].rsplit(".", 2)[0], 1) is not None:
            fs.delete(os.path.join(table.meta_path, name))


__all__ = ["AUTO_UPGRADE_KEY", "UpgradeError", "upgrade"]
