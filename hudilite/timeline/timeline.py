"""Loading the active timeline and reading instant metadata (layout 1 JSON, layout 2 Avro)."""

from __future__ import annotations

import io
import json
import logging
import os
from functools import cached_property

from hudilite.errors import CorruptTableError
from hudilite.storage import storage_for
from hudilite.timeline.archive import ArchivedTimeline, list_archive_files, load_archive
from hudilite.timeline.instant import (
    CLUSTERING,
    COMMIT,
    COMPACTION,
    COMPLETED,
    COMPLETION_KEY,
    REPLACE_COMMIT,
    WRITE_ACTIONS,
    Instant,
    parse_instant_file,
)
from hudilite.timeline.lsm import cache_key, history_dir, load_history

log = logging.getLogger(__name__)


class Timeline:
    """A snapshot of the active timeline of one table, loaded once. Build a new one to see new instants."""

    def __init__(self, meta_dir: str, layout: int, instants: list[Instant]):
        self.meta_dir = meta_dir
        self.layout = layout
        self.instants = sorted(instants, key=Instant.sort_key)
        self._meta_cache: dict[tuple[str, str], dict] = {}

    # ---- loading -------------------------------------------------------------------------
    @classmethod
    def load(cls, base_path: str, layout: int, timeline_path: str = "") -> "Timeline":
        meta = os.path.join(base_path, ".hoodie")
        tdir = os.path.join(meta, timeline_path) if layout >= 2 else meta
        fs = storage_for(base_path)
        by_ts: dict[str, Instant] = {}
        for entry in fs.scandir_files(tdir):
            inst = parse_instant_file(entry.name, layout)
            if inst is None:
                continue
            cur = by_ts.get(inst.timestamp)
            by_ts[inst.timestamp] = _merge_states(cur, inst)
        return cls(tdir, layout, list(by_ts.values()))

    # ---- views ---------------------------------------------------------------------------
    def completed(self, actions=WRITE_ACTIONS) -> list[Instant]:
        return [i for i in self.instants if i.is_completed and (actions is None or i.action in actions)]

    def pending(self, actions=None) -> list[Instant]:
        return [i for i in self.instants if not i.is_completed and (actions is None or i.action in actions)]

    @cached_property
    def completed_write_times(self) -> set[str]:
        return {i.timestamp for i in self.completed()}

    @cached_property
    def all_times(self) -> set[str]:
        return {i.timestamp for i in self.instants}

    def latest_completed(self) -> Instant | None:
        c = self.completed()
        return c[-1] if c else None

    def last_instant_time(self) -> str | None:
        """The newest time on the timeline: instant times, and on layout 2 the completion times in file names
        (a new instant or completion time must be greater than every one of them)."""
        return max((t for i in self.instants for t in (i.timestamp, i.completion) if t), default=None)

    @cached_property
    def first_write_time(self) -> str | None:
        c = self.completed()
        return c[0].timestamp if c else None

    def is_visible_file_instant(self, t: str) -> bool:
        """The format's visibility rule for data files: the file's instant is a completed write instant,
        or is older than the first instant of the active timeline (archived, therefore committed). Where the
        table has an archive (`.hoodie/archived`, v6), it decides for archived instants: a file of an instant
        the archive does not hold as a completed write is not committed (a failed write older than the
        active timeline); only instants older than the whole timeline (archive included) count as committed."""
        if t in self.completed_write_times:
            return True
        if self.first_write_time is None or t >= self.first_write_time:
            return False  # inside the active range: only completed writes count
        arch = self.archived
        if arch:
            if t in arch.completed_write_times:
                return True
            start = self.timeline_start  # not None: the active timeline has a first write (above)
            return start is not None and t < start and t not in self.known_times
        return t not in self.all_times

    # ---- the archived timeline (v6 `.hoodie/archived`) -----------------------------------------------
    @cached_property
    def archived(self):
        """The archived timeline: the v6 archive, or the v8/9 LSM history (layout 2); empty for tables never
        archived. Loaded on first use."""
        if self.layout >= 2:
            return _load_history_cached(history_dir(self.meta_dir))
        return _load_archive_cached(os.path.join(self.meta_dir, self.archive_folder))

    archive_folder = "archived"

    @cached_property
    def committed_times(self) -> frozenset:
        """Completed write instants of the whole timeline: active and archived."""
        return frozenset(self.completed_write_times) | self.archived.completed_write_times

    @cached_property
    def known_times(self) -> frozenset:
        """Every instant time of the whole timeline (any action or state), active and archived."""
        return frozenset(self.all_times) | self.archived.all_times

    @cached_property
    def timeline_start(self) -> str | None:
        """The oldest instant of the whole timeline (archive included); instants before it are older than
        anything recorded and count as committed (the format's rule for files of archived instants)."""
        firsts = [t for t in (self.archived.first_time, self.first_write_time) if t]
        return min(firsts, default=None)

    def get(self, ts: str) -> Instant | None:
        for i in self.instants:
            if i.timestamp == ts:
                return i
        return None

    # ---- metadata ------------------------------------------------------------------------
    def instant_path(self, instant: Instant) -> str:
        if self.layout >= 2 and instant.is_completed and not instant.completion:
            raise ValueError(f"instant {instant.timestamp}: a completed instant file of timeline layout 2 is named "
                             "with its completion time")
        return os.path.join(self.meta_dir, instant.file_name(self.layout))

    def read_metadata(self, instant: Instant) -> dict:
        """Commit metadata of a completed write instant as a dict (HoodieCommitMetadata shape)."""
        key = (instant.timestamp, instant.state)
        if key in self._meta_cache:
            return self._meta_cache[key]
        path = self.instant_path(instant)
        data = storage_for(path).read_bytes(path)
        md = parse_commit_metadata(data, path)
        self._meta_cache[key] = md
        return md

    def completion_time(self, instant: Instant) -> str:
        """Completion time: from the file name (layout 2), else from hudilite's commit metadata, else the
        instant time itself (foreign v6 tables record no completion order)."""
        if instant.completion:
            return instant.completion
        if instant.is_completed and instant.action in WRITE_ACTIONS:
            extra = self.read_metadata(instant).get("extraMetadata") or {}
            c = extra.get(COMPLETION_KEY)
            if c:
                return c
        return instant.timestamp

    def replaced_file_ids(self, as_of: str | None = None) -> set[tuple[str, str]]:
        """(partition, fileId) pairs replaced by completed replacecommits at or before `as_of`."""
        out: set[tuple[str, str]] = set()
        for inst in self.completed((REPLACE_COMMIT,)):
            if as_of is not None and inst.timestamp > as_of:
                continue
            md = self.read_metadata(inst)
            for part, fids in (md.get("partitionToReplaceFileIds") or {}).items():
                for fid in fids or []:
                    out.add((part or "", fid))
        return out

    def schema_json(self) -> str | None:
        """Avro schema (without meta fields) of the latest completed write that records one."""
        for inst in reversed(self.completed()):
            md = self.read_metadata(inst)
            s = (md.get("extraMetadata") or {}).get("schema")
            if s:
                return s
        return None


_ARCHIVE_CACHE: dict[str, tuple] = {}


def _stat(path: str) -> tuple[int, float] | None:
    """(size, mtime) of a file, None when it is absent."""
    fs = storage_for(path)
    try:
        return fs.size(path), fs.mtime(path)
    except FileNotFoundError:
        return None


def _load_archive_cached(directory: str):
    """The archive of `directory`, cached while its files are unchanged (name, size, mtime)."""
    files = list_archive_files(directory)
    key = tuple((p, *st) for p, st in ((p, _stat(p)) for _v, p in files) if st is not None)
    hit = _ARCHIVE_CACHE.get(directory)
    if hit is not None and hit[0] == key:
        return hit[1]
    arch = load_archive(directory)
    _ARCHIVE_CACHE[directory] = (key, arch)
    return arch


def _load_history_cached(directory: str):
    """The LSM history of `directory`, cached while its latest snapshot (version and manifest) is unchanged."""
    try:
        key = cache_key(directory)
    except (OSError, ValueError) as e:  # a damaged manifest: read as unarchived rather than fail every read
        log.warning("cannot read the timeline history in %s: %s", directory, e)
        return ArchivedTimeline()
    if key[0] < 0:
        return ArchivedTimeline()
    hit = _ARCHIVE_CACHE.get(directory)
    if hit is not None and hit[0] == key:
        return hit[1]
    arch = load_history(directory, parse_commit_metadata)
    _ARCHIVE_CACHE[directory] = (key, arch)
    return arch


def _merge_states(cur: Instant | None, new: Instant) -> Instant:
    if cur is None:
        return new
    hi, lo = (new, cur) if new.sort_key() >= cur.sort_key() else (cur, new)
    if hi.state == COMPLETED:
        action = hi.action
        if lo.action in (COMPACTION,) and action == COMMIT:
            action = COMMIT
        elif lo.action == CLUSTERING and action == REPLACE_COMMIT:
            action = REPLACE_COMMIT
        return Instant(hi.timestamp, action, COMPLETED, hi.completion or lo.completion)
    return hi


def parse_commit_metadata(data: bytes, path: str = "") -> dict:
    """JSON (layout 1) or an Avro object container with one record (layout 2)."""
    if not data:
        return {}
    if data[:4] == b"Obj\x01":
        import fastavro

        try:
            records = list(fastavro.reader(io.BytesIO(data)))
        except Exception as e:  # noqa: BLE001 - name the file in the error
            raise CorruptTableError(f"cannot parse Avro commit metadata {path}: {e}") from e
        rec = records[0] if records else {}
        return _normalize_avro_metadata(rec)
    try:
        md = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CorruptTableError(f"cannot parse commit metadata {path}: {e}") from e
    _check_shape(md, path)
    return md


def _check_shape(md, path: str) -> None:
    """The parts of commit metadata readers walk have the shape Hudi writes (valid JSON of another shape is as
    damaged as invalid JSON: readers would fail on it far from the file)."""
    def bad(what: str):
        return CorruptTableError(f"commit metadata {path} is damaged: {what}")

    if not isinstance(md, dict):
        raise bad(f"a JSON {type(md).__name__}, not an object")
    for key, item in (("partitionToWriteStats", dict), ("partitionToReplaceFileIds", str)):
        parts = md.get(key)
        if parts is None:
            continue
        if not isinstance(parts, dict):
            raise bad(f"{key} is a JSON {type(parts).__name__}, not an object of partitions")
        for part, items in parts.items():
            if items is not None and (not isinstance(items, list) or not all(isinstance(i, item) for i in items)):
                raise bad(f"{key}[{part!r}] is not a list of {'write stats' if item is dict else 'file ids'}")
    if md.get("extraMetadata") is not None and not isinstance(md["extraMetadata"], dict):
        raise bad("extraMetadata is not an object")


def _normalize_avro_metadata(rec: dict) -> dict:
    out = dict(rec)
    pts = out.get("partitionToWriteStats") or {}
    out["partitionToWriteStats"] = {k: list(v or []) for k, v in pts.items()}
    ptr = out.get("partitionToReplaceFileIds") or {}
    out["partitionToReplaceFileIds"] = {k: list(v or []) for k, v in ptr.items()}
    out["extraMetadata"] = dict(out.get("extraMetadata") or {})
    return out
