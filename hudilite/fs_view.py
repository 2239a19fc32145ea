"""The file system view: partitions, file groups and the committed file slices a reader or writer sees."""

from __future__ import annotations

import bisect
import os
from dataclasses import dataclass, field, replace

from hudilite.errors import UnsupportedTableError
from hudilite.file_group import BaseFile, FileGroup, FileSlice, LogFile, parse_base_file_name
from hudilite.log.format import is_log_file_name, parse_log_file_name
from hudilite.storage import storage_for
from hudilite.timeline import Timeline
from hudilite.timeline.plans import pending_compaction_instants

PARTITION_METAFILE = ".hoodie_partition_metadata"


def _hidden(parts) -> bool:
    return any(p.startswith(".") for p in parts)


def _has_metafile(names) -> bool:
    # `.hoodie_partition_metadata`, or with hoodie.partition.metafile.use.base.format `….parquet`
    return any(n.startswith(PARTITION_METAFILE) for n in names)


def list_partitions(base_path: str, partitioned: bool) -> list[str]:
    """Relative partition paths ('' for a non-partitioned table): leaf directories below the base path, skipping
    `.hoodie`. A directory whose path has a hidden name (a partition value '.y') is a partition only when it holds
    a partition metafile, as Apache Hudi writes in every partition: other hidden directories are not the
    table's, and Apache Hudi and hudi-rs read such partitions."""
    if not partitioned:
        return [""]
    out: list[str] = []
    fs = storage_for(base_path)

    def walk(rel: str) -> None:
        full = os.path.join(base_path, rel) if rel else base_path
        try:
            dirs, files = fs.list_entries(full)
        except (FileNotFoundError, NotADirectoryError):
            return
        visible = [d for d in dirs if not d.startswith(".") and (rel or d != "_delta_log")]
        if rel and (_has_metafile(files) if _hidden(rel.split("/")) else
                    not visible or any(not f.startswith(".") for f in files)):
            out.append(rel)
        for d in sorted(dirs):
            if d in visible or (d.startswith(".") and (rel or d != ".hoodie")):
                walk(f"{rel}/{d}" if rel else d)

    walk("")
    return out


def partitions_in_listing(listing: dict[str, list], partitioned: bool) -> list[str]:
    """`list_partitions` from a whole table's `Storage.list_tree` (object stores keep no empty directories: a
    directory is there when a file is under it)."""
    if not partitioned:
        return [""]
    dirs: set[str] = set()
    for d, entries in listing.items():
        parts = d.split("/") if d else []
        if not parts or parts[0] in (".hoodie", "_delta_log") or not entries:
            continue
        if _hidden(parts) and not _has_metafile(e.name for e in entries):
            continue
        for i in range(1, len(parts) + 1):
            dirs.add("/".join(parts[:i]))
    has_sub = {d.rpartition("/")[0] for d in dirs if "/" in d}
    with_files = {d for d in dirs if any(not e.name.startswith(".") for e in listing.get(d, ()))}
    return sorted(d for d in dirs if (d not in has_sub or d in with_files)
                  and (not _hidden(d.split("/")) or _has_metafile(e.name for e in listing.get(d, ()))))


@dataclass
class FileSystemView:
    base_path: str
    timeline: Timeline
    # the whole table's files by directory, listed at once (`Storage.list_tree`, object stores), or None: each
    # partition is listed when it is needed
    listing: dict[str, list] | None = None
    _completed: dict | None = field(default=None, init=False, repr=False)

    def file_groups(self, partition: str) -> dict[str, FileGroup]:
        """Committed file groups of one partition (files of pending/failed instants are invisible)."""
        fs = storage_for(self.base_path)
        full = os.path.join(self.base_path, partition) if partition else self.base_path
        groups: dict[str, FileGroup] = {}
        logs = []
        entries = fs.scandir_files(full) if self.listing is None else self.listing.get(partition, ())
        for entry in entries:
            name = entry.name
            if name.endswith(".crc") or name == PARTITION_METAFILE:
                continue
            parsed = parse_base_file_name(name)
            if parsed:
                fid, token, inst, ext = parsed
                if not self.timeline.is_visible_file_instant(inst):
                    continue
                if ext != ".parquet":
                    raise UnsupportedTableError(
                        f"{self.base_path}: base file {name} has format {ext[1:]}; only parquet base files "
                        "are supported"
                    )
                size = _size(entry)
                if size is None:
                    continue
                fg = groups.setdefault(fid, FileGroup(partition, fid))
                if inst in fg.slices and fg.slices[inst].base_file is not None:
                    raise UnsupportedTableError(
                        f"{self.base_path}: two committed base files for file group {fid} at instant {inst}"
                    )
                bf = BaseFile(partition, fid, token, inst, name, entry.path, size)
                sl = fg.slices.setdefault(inst, FileSlice(partition, fid, inst))
                sl.base_file = bf
                continue
            if name.startswith(".") and is_log_file_name(name):
                size = _size(entry)
                if size is not None:
                    logs.append(LogFile(partition, parse_log_file_name(name), entry.path, size))
        self._attach_logs(partition, groups, logs)
        return groups

    def _attach_logs(self, partition: str, groups: dict[str, FileGroup], logs: list[LogFile]) -> None:
        """Attach log files to file slices (hudi-format.md §7).

        - v6 (layout 1): the name's instant is the base instant of the slice; the log attaches to the latest
          slice with a base file whose instant is <= it.
        - v8/v9 (layout 2): the name's instant is the deltacommit that wrote the log; logs of instants that did
          not complete are dropped, the others attach to the latest slice whose base (requested) instant is <=
          the log's completion time.
        Logs before any base file form a log-only slice keyed by their smallest instant. Within a slice, logs
        are ordered by (instant or completion time, version, write token)."""
        by_fid: dict[str, list[tuple[str, LogFile]]] = {}
        for lf in logs:
            if self.timeline.layout >= 2:
                when = self._log_completion(lf.name.instant)
                if when is None:
                    continue  # written by an instant that did not complete: invisible
            else:
                when = lf.name.instant
            by_fid.setdefault(lf.file_id, []).append((when, lf))
        for fid, items in by_fid.items():
            items.sort(key=lambda x: (x[0], x[1].name.version, x[1].name.write_token))
            fg = groups.setdefault(fid, FileGroup(partition, fid))
            base_keys = sorted(k for k, sl in fg.slices.items() if sl.base_file is not None)
            orphans = [lf for when, lf in items if bisect.bisect_right(base_keys, when) == 0]
            orphan_key = min((lf.name.instant for lf in orphans), default=None)
            for when, lf in items:
                i = bisect.bisect_right(base_keys, when)
                key = base_keys[i - 1] if i else orphan_key
                fg.slices.setdefault(key, FileSlice(partition, fid, key)).log_files.append(lf)

    def _log_completion(self, instant: str) -> str | None:
        """Completion time of the deltacommit that wrote a v8/v9 log file; its own time if archived; None if
        it did not complete."""
        tl = self.timeline
        if self._completed is None:
            self._completed = {i.timestamp: i for i in tl.completed()}
        inst = self._completed.get(instant)
        if inst is not None:
            return tl.completion_time(inst)
        return instant if tl.is_visible_file_instant(instant) else None

    def log_base_instants(self) -> dict[tuple[str, str], str]:
        """(partition, fileId) -> the base instant new log files of the group are named with, for groups in a
        pending compaction plan: the compaction instant (their logs start the slice the compaction creates;
        until it completes they are read with the previous slice, whose base file they follow). Other groups
        append to their latest slice."""
        return pending_compaction_instants(self.timeline)

    def travel_slices(self, slices: list[FileSlice], as_of: str) -> list[FileSlice]:
        """`slices` (latest as of `as_of`) for time travel. Layout 2: a log that completed after a pending
        compaction was planned belongs to the slice that compaction starts (read with the previous slice until
        it completes); as of an instant before the plan that slice does not exist, so the log is left out, as
        once the compaction has completed (the answer as of `as_of` does not change then) and as Apache Hudi
        1.x answers."""
        pending = self.log_base_instants() if self.timeline.layout >= 2 else {}
        out = []
        for sl in slices:
            start = pending.get((sl.partition, sl.file_id))
            if start is None or start <= as_of:
                out.append(sl)
                continue
            logs = [lf for lf in sl.log_files if (self._log_completion(lf.name.instant) or start) < start]
            if sl.base_file is not None or logs:
                out.append(replace(sl, log_files=logs))
        return out

    def latest_slices(self, partitions: list[str], as_of: str | None = None) -> list[FileSlice]:
        """Latest committed slice per file group as of `as_of`, replaced file groups hidden."""
        replaced = self.timeline.replaced_file_ids(as_of)
        out: list[FileSlice] = []
        for p in partitions:
            for fid, fg in sorted(self.file_groups(p).items()):
                if (p, fid) in replaced:
                    continue
                sl = fg.latest_slice(as_of)
                if sl is not None and (sl.base_file is not None or sl.log_files):
                    out.append(sl)
        return out


def _size(entry) -> int | None:
    """A listed file's size; None when it vanished since the listing: a failed write's file its rollback (by a
    concurrent writer that lost a conflict) deleted, or one a clean removed - neither is part of a snapshot."""
    try:
        return entry.stat().st_size
    except FileNotFoundError:
        return None
