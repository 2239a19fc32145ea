"""The LSM timeline history of table versions 8/9 (timeline layout 2): `.hoodie/timeline/history/`.

Layout (Apache Hudi 1.x `LSMTimeline`): parquet files `<min>_<max>_<level>.parquet` of HoodieLSMTimelineInstant
rows (instantTime, completionTime, action, metadata bytes, plan bytes, version), one row per archived completed
instant; `manifest_<n>` is JSON `{"files": [{"fileName": .., "fileLen": ..}]}` naming the live files of snapshot
n; `_version_` holds the number of the latest manifest. A reader takes `_version_` (else the highest manifest),
reads that manifest and only the files it names: parquet files no manifest names (a writer killed before its
manifest) are invisible, so each snapshot is consistent. `metadata` is the completed instant file's bytes (Avro
container on layout 2), `plan` the requested file's bytes (compaction, clustering, clean plans).
"""

from __future__ import annotations

import io
import json
import logging
import os
import re
from collections.abc import Callable
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq

from hudilite.storage.local import storage_for
from hudilite.timeline.archive import ArchivedEntry, ArchivedTimeline
from hudilite.timeline.instant import COMPLETED

log = logging.getLogger(__name__)

HISTORY_FOLDER = "history"
VERSION_FILE = "_version_"
MANIFEST_PREFIX = "manifest_"
_DATA_RE = re.compile(r"^(\d+)_(\d+)_(\d+)\.parquet$")
_MANIFEST_RE = re.compile(r"^manifest_(\d+)$")
_TEMP_RE = re.compile(r"^\.(.+)\.[0-9a-f]+\.tmp$")
INSTANT_VERSION = 1  # LSMTimeline.LSM_TIMELINE_INSTANT_VERSION_1

SCHEMA = pa.schema([
    pa.field("instantTime", pa.string()),
    pa.field("completionTime", pa.string()),
    pa.field("action", pa.string()),
    pa.field("metadata", pa.binary()),
    pa.field("plan", pa.binary()),
    pa.field("version", pa.int32()),
])


@dataclass(frozen=True)
class HistoryRecord:
    instant_time: str
    completion_time: str
    action: str
    metadata: bytes | None = None
    plan: bytes | None = None


def history_dir(timeline_dir: str) -> str:
    return os.path.join(timeline_dir, HISTORY_FOLDER)


def data_file_name(min_time: str, max_time: str, level: int) -> str:
    return f"{min_time}_{max_time}_{level}.parquet"


def manifest_versions(directory: str) -> list[int]:
    try:
        names = storage_for(directory).list_entries(directory)[1]
    except (FileNotFoundError, NotADirectoryError):
        return []
    return sorted(int(m.group(1)) for m in map(_MANIFEST_RE.match, names) if m)


def latest_version(directory: str) -> int:
    """The snapshot `_version_` names; the highest manifest when the version file is absent or unreadable (a
    writer killed between manifest and version file: the manifest is complete, being put whole); -1 for none."""
    path = os.path.join(directory, VERSION_FILE)
    fs = storage_for(path)
    try:
        v = int(fs.read_bytes(path).decode("utf-8").strip())
        if fs.exists(os.path.join(directory, f"{MANIFEST_PREFIX}{v}")):
            versions = manifest_versions(directory)
            # a newer manifest than the version file names is a finished snapshot whose version write was lost
            return max([v, *versions])
    except (FileNotFoundError, ValueError, UnicodeDecodeError):
        pass
    return max(manifest_versions(directory), default=-1)


def read_manifest(directory: str, version: int) -> list[tuple[str, int]]:
    """(file name, length) of the live data files of snapshot `version` ([] for -1)."""
    if version < 0:
        return []
    path = os.path.join(directory, f"{MANIFEST_PREFIX}{version}")
    doc = json.loads(storage_for(path).read_bytes(path).decode("utf-8"))
    return [(f["fileName"], int(f.get("fileLen") or 0)) for f in doc.get("files") or []]


def read_records(directory: str, files: list[tuple[str, int]] | None = None) -> list[HistoryRecord]:
    """Every instant of the latest snapshot (or of `files`), by instant time; an instant held by two files (a
    compaction whose inputs are still listed) counts once."""
    if files is None:
        files = read_manifest(directory, latest_version(directory))
    fs = storage_for(directory)
    out: dict[str, HistoryRecord] = {}
    for name, _len in files:
        tbl = fs.read_parquet(os.path.join(directory, name))
        cols = {c: tbl.column(c).to_pylist() if c in tbl.column_names else [None] * tbl.num_rows
                for c in SCHEMA.names}
        for i in range(tbl.num_rows):
            t = cols["instantTime"][i]
            if not t:
                continue
            out[t] = HistoryRecord(t, cols["completionTime"][i] or "", cols["action"][i] or "",
                                   cols["metadata"][i], cols["plan"][i])
    return [out[t] for t in sorted(out)]


def load_history(directory: str, parse_metadata: Callable[[bytes, str], dict]) -> ArchivedTimeline:
    """The history as an ArchivedTimeline; `parse_metadata(bytes, where)` decodes a completed instant's
    metadata (the timeline's own parser: JSON or Avro container). Undecodable metadata counts as none."""
    entries = []
    for r in read_records(directory):
        md: dict | None = None
        if r.metadata:
            try:
                md = parse_metadata(r.metadata, f"{directory}:{r.instant_time}")
            except Exception as e:  # noqa: BLE001 - one damaged record must not hide the others
                log.warning("undecodable archived metadata of %s in %s: %s", r.instant_time, directory, e)
        entries.append(ArchivedEntry(r.instant_time, r.action, COMPLETED, md, r.completion_time))
    return ArchivedTimeline(entries)


def cache_key(directory: str) -> tuple:
    """Changes whenever the snapshot readers would see changes."""
    v = latest_version(directory)
    return (v, tuple(read_manifest(directory, v)))


def _parquet_bytes(records: list[HistoryRecord]) -> bytes:
    rows = sorted(records, key=lambda r: r.instant_time)
    tbl = pa.table({
        "instantTime": [r.instant_time for r in rows],
        "completionTime": [r.completion_time for r in rows],
        "action": [r.action for r in rows],
        "metadata": [r.metadata for r in rows],
        "plan": [r.plan for r in rows],
        "version": [INSTANT_VERSION] * len(rows),
    }, schema=SCHEMA)
    buf = io.BytesIO()
    pq.write_table(tbl, buf)
    return buf.getvalue()


def _commit_snapshot(directory: str, version: int, files: list[tuple[str, int]]) -> int:
    """Publish snapshot version+1 naming `files`: manifest (put-if-absent: a concurrent writer that took the
    number makes this one fail), then `_version_`."""
    fs = storage_for(directory)
    new_version = version + 1
    manifest = {"files": [{"fileName": n, "fileLen": ln} for n, ln in files]}
    mpath = os.path.join(directory, f"{MANIFEST_PREFIX}{new_version}")
    if not fs.put_if_absent(mpath, json.dumps(manifest, indent=2).encode("utf-8")):
        raise FileExistsError(f"history manifest {mpath} was created concurrently")
    fs.write_bytes(os.path.join(directory, VERSION_FILE), str(new_version).encode("utf-8"))
    return new_version


def _put_data_file(directory: str, name: str, data: bytes, live: list[tuple[str, int]]) -> None:
    fs = storage_for(directory)
    path = os.path.join(directory, name)
    if not fs.put_if_absent(path, data):
        # an orphan of a killed archival or compaction (no manifest names it): replace it
        if name in {n for n, _ in live}:
            raise FileExistsError(f"history file {path} is already live")
        fs.delete(path)
        if not fs.put_if_absent(path, data):
            raise FileExistsError(f"history file {path} was created concurrently")


def append_level0(directory: str, records: list[HistoryRecord]) -> int:
    """Add `records` to the history as a new level-0 file; returns the new snapshot version. Steps: data file
    (put-if-absent), manifest n+1 (put-if-absent), `_version_`. A kill before the manifest leaves an orphan
    file no reader sees (clean() removes it); a kill before `_version_` leaves a complete manifest that
    latest_version already takes."""
    if not records:
        raise ValueError("no instants to archive")
    storage_for(directory).makedirs(directory)
    version = latest_version(directory)
    live = read_manifest(directory, version)
    times = sorted(r.instant_time for r in records)
    name = data_file_name(times[0], times[-1], 0)
    data = _parquet_bytes(records)
    _put_data_file(directory, name, data, live)
    return _commit_snapshot(directory, version, [*live, (name, len(data))])


def _level_of(name: str) -> tuple[str, str, int] | None:
    m = _DATA_RE.match(name)
    return (m.group(1), m.group(2), int(m.group(3))) if m else None


def compact_levels(directory: str, batch_size: int = 10) -> list[str]:
    """Apache Hudi's LSM compaction: while a level holds >= `batch_size` live files, merge its oldest
    `batch_size` files into one file of the next level (`<min>_<max>_<level+1>.parquet`) and publish a
    snapshot naming it instead of them. The replaced files stay on storage until clean(): readers of an older
    snapshot still find them, and a kill at any step leaves the previous snapshot intact (the merged file is
    then an orphan). Returns the names of the files written."""
    if batch_size < 2:
        raise ValueError(f"timeline compaction batch size must be >= 2, got {batch_size}")
    written: list[str] = []
    while True:
        version = latest_version(directory)
        live = read_manifest(directory, version)
        by_level: dict[int, list[tuple[str, str, str, int]]] = {}
        for name, ln in live:
            parsed = _level_of(name)
            if parsed:
                by_level.setdefault(parsed[2], []).append((parsed[0], parsed[1], name, ln))
        level = min((lv for lv, fs_ in by_level.items() if len(fs_) >= batch_size), default=None)
        if level is None:
            return written
        chosen = sorted(by_level[level])[:batch_size]
        names = {c[2] for c in chosen}
        records = read_records(directory, [(c[2], c[3]) for c in chosen])
        times = [r.instant_time for r in records]
        name = data_file_name(times[0], times[-1], level + 1)
        data = _parquet_bytes(records)
        _put_data_file(directory, name, data, live)
        rest = [(n, ln) for n, ln in live if n not in names]
        _commit_snapshot(directory, version, sorted([*rest, (name, len(data))]))
        written.append(name)


def clean(directory: str, keep_versions: int = 3) -> list[str]:
    """Remove what no recent snapshot needs (as Apache Hudi's LSMTimelineWriter.clean): manifests older than
    the newest `keep_versions` (oldest first), then data files none of the kept manifests names (files
    replaced by compaction, orphans of killed writers). Manifests go first so a kill midway leaves only
    unnamed data files, which the next clean removes. Run under the table lock: a data file of a writer that
    has not published its manifest yet would look orphaned. Returns the deleted names."""
    fs = storage_for(directory)
    versions = manifest_versions(directory)
    latest = latest_version(directory)
    if latest < 0:
        return []
    kept = [v for v in versions if v <= latest][-keep_versions:]
    needed: set[str] = set()
    for v in kept:
        needed.update(n for n, _ in read_manifest(directory, v))
    deleted = []
    for v in versions:
        if v < kept[0]:
            fs.delete(os.path.join(directory, f"{MANIFEST_PREFIX}{v}"))
            deleted.append(f"{MANIFEST_PREFIX}{v}")
    names = sorted(fs.list_entries(directory)[1])
    for name in names:
        if _DATA_RE.match(name) and name not in needed:
            fs.delete(os.path.join(directory, name))
            deleted.append(name)
    # temp files of history writes killed before their rename (`.<target>.<hex>.tmp` on stores that stage)
    targets = {m.group(1) for m in map(_TEMP_RE.match, names) if m}
    for target in sorted(targets):
        if _DATA_RE.match(target) or _MANIFEST_RE.match(target) or target == VERSION_FILE:
            if fs.delete_stale_temps(os.path.join(directory, target)):
                deleted.append(f"temp files of {target}")
    return deleted
