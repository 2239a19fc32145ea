"""The file system view: partitions, file groups and the committed file slices a reader or writer sees."""

from __future__ import annotations

import os
from dataclasses import dataclass

from hudilite.errors import UnsupportedTableError
from hudilite.file_group import BaseFile, FileGroup, FileSlice, LogFile, parse_base_file_name
from hudilite.log.format import is_log_file_name, parse_log_file_name
from hudilite.storage import storage_for
from hudilite.timeline import Timeline

PARTITION_METAFILE = ".hoodie_partition_metadata"


def list_partitions(base_path: str, partitioned: bool) -> list[str]:
    """Relative partition paths ('' for a non-partitioned table): leaf directories below the base path,
    skipping `.hoodie` and hidden directories."""
    if not partitioned:
        return [""]
    out: list[str] = []

    def walk(rel: str) -> None:
        full = os.path.join(base_path, rel) if rel else base_path
        try:
            entries = list(os.scandir(full))
        except FileNotFoundError:
            return
        subdirs = [e.name for e in entries if e.is_dir() and not e.name.startswith(".")]
        if rel and not subdirs:
            out.append(rel)
            return
        if rel and any(e.is_file() and not e.name.startswith(".") for e in entries) and subdirs:
            out.append(rel)
        for d in sorted(subdirs):
            if not rel and d in ("_delta_log",):
                continue
            walk(f"{rel}/{d}" if rel else d)

    walk("")
    return out


@dataclass
class FileSystemView:
    base_path: str
    timeline: Timeline

    def file_groups(self, partition: str) -> dict[str, FileGroup]:
        """Committed file groups of one partition (files of pending/failed instants are invisible)."""
        fs = storage_for(self.base_path)
        full = os.path.join(self.base_path, partition) if partition else self.base_path
        groups: dict[str, FileGroup] = {}
        logs = []
        for entry in fs.scandir_files(full):
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
                fg = groups.setdefault(fid, FileGroup(partition, fid))
                if inst in fg.slices and fg.slices[inst].base_file is not None:
                    raise UnsupportedTableError(
                        f"{self.base_path}: two committed base files for file group {fid} at instant {inst}"
                    )
                bf = BaseFile(partition, fid, token, inst, name, entry.path, entry.stat().st_size)
                sl = fg.slices.setdefault(inst, FileSlice(partition, fid, inst))
                sl.base_file = bf
                continue
            if name.startswith(".") and is_log_file_name(name):
                logs.append(LogFile(partition, parse_log_file_name(name), entry.path, entry.stat().st_size))
        for lf in logs:
            fg = groups.setdefault(lf.file_id, FileGroup(partition, lf.file_id))
            fg.slices.setdefault(lf.base_instant, FileSlice(partition, lf.file_id, lf.base_instant))
            fg.slices[lf.base_instant].log_files.append(lf)
        for fg in groups.values():
            for sl in fg.slices.values():
                sl.log_files.sort(key=lambda lf: lf.name.sort_key)
        return groups

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
