"""Appending blocks to log files, with version roll-over by size."""

from __future__ import annotations

import os
from typing import Iterable, NamedTuple

from hudilite.log.blocks import LogBlock, encode_block
from hudilite.log.format import (
    DEFAULT_LOG_FILE_MAX_SIZE,
    format_log_file_name,
    list_log_files,
    parse_log_file_name,
)
from hudilite.storage.local import storage_for


class BlockLocation(NamedTuple):
    """Where an appended block landed."""

    path: str
    offset: int
    size: int


def _append_encoded(path: str, encoded: list[bytes], fsync: bool) -> list[BlockLocation]:
    if not encoded:
        return []
    offset = storage_for(path).append_bytes(path, encoded, fsync=fsync)
    locations = []
    for data in encoded:
        locations.append(BlockLocation(path, offset, len(data)))
        offset += len(data)
    return locations



def append_blocks(path: str | os.PathLike, blocks: Iterable[LogBlock], *, fsync: bool = True) -> list[BlockLocation]:
    """Append blocks to a log file (created if missing); flush and fsync once at the end."""
    return _append_encoded(os.fspath(path), [encode_block(b) for b in blocks], fsync)


def create_log_file(path: str | os.PathLike, blocks: Iterable[LogBlock], *, fsync: bool = True
                    ) -> list[BlockLocation]:
    """Write `blocks` as a new log file at `path` (a version nobody else writes: the caller picked it). Where the
    storage cannot append, one put-if-absent (an append there would first GET the missing object); elsewhere an
    append that creates the file. FileExistsError if the object store already holds `path`."""
    return _create_encoded(os.fspath(path), [encode_block(b) for b in blocks], fsync)


def _create_encoded(path: str, encoded: list[bytes], fsync: bool) -> list[BlockLocation]:
    fs = storage_for(path)
    if fs.supports_append or not encoded:
        return _append_encoded(path, encoded, fsync)
    if not fs.put_if_absent(path, b"".join(encoded)):
        raise FileExistsError(path)
    locations, offset = [], 0
    for data in encoded:
        locations.append(BlockLocation(path, offset, len(data)))
        offset += len(data)
    return locations


def new_log_version_path(path: str | os.PathLike, write_token: str) -> str:
    """The path of the next free log version of `path`'s file slice, named with `write_token`: where blocks go
    that would be appended to `path` on a storage that cannot append."""
    path = os.fspath(path)
    directory = os.path.dirname(path)
    name = parse_log_file_name(path)
    fs = storage_for(path)
    version = next_log_version(directory, name.file_id, name.instant)
    while True:
        candidate = os.path.join(directory,
                                 format_log_file_name(name.file_id, name.instant, version, write_token))
        if not fs.exists(candidate):
            return candidate
        version += 1


def next_log_version(directory: str | os.PathLike, file_id: str, base_instant: str) -> int:
    """1 + the highest log version of (file_id, base_instant) in `directory`; 1 if none."""
    if not storage_for(os.fspath(directory)).isdir(os.fspath(directory)):
        return 1
    return version_after(list_log_files(directory, file_id, base_instant))


def version_after(log_files) -> int:
    """1 + the highest version of `log_files` (as `list_log_files` gives them); 1 if none."""
    return max((f.version for f in log_files), default=0) + 1


class LogWriter:
    """Writes blocks to `.<file_id>_<base_instant>.log.<version>_<write_token>` in `directory`.

    Without `version` the writer starts a new file at the next free version. Before each
    block, a file already larger than `max_file_size` (hoodie.logfile.max.size) rolls
    over to the next version.
    """

    def __init__(
        self,
        directory: str | os.PathLike,
        file_id: str,
        base_instant: str,
        write_token: str,
        *,
        version: int | None = None,
        max_file_size: int = DEFAULT_LOG_FILE_MAX_SIZE,
        fsync: bool = True,
    ) -> None:
        self.directory = os.fspath(directory)
        self.file_id = file_id
        self.base_instant = base_instant
        self.write_token = write_token
        self.max_file_size = max_file_size
        self.fsync = fsync
        self.version = next_log_version(self.directory, file_id, base_instant) if version is None else version
        format_log_file_name(file_id, base_instant, self.version, write_token)  # validate early

    @property
    def file_name(self) -> str:
        return format_log_file_name(self.file_id, self.base_instant, self.version, self.write_token)

    @property
    def path(self) -> str:
        return os.path.join(self.directory, self.file_name)

    def append(self, blocks: Iterable[LogBlock]) -> list[BlockLocation]:
        """Append blocks, rolling to a new version when the current file is over the limit (or exists at all
        on a storage that cannot append)."""
        storage_for(self.directory).makedirs(self.directory)
        locations: list[BlockLocation] = []
        pending: list[bytes] = []
        fs = storage_for(self.path)
        exists = fs.exists(self.path)
        size = fs.size(self.path) if exists else 0
        if exists and not fs.supports_append:  # an append would rewrite the object: start the next version
            self._roll_over()
            size = 0
        # (where the storage cannot append, every file written here is new)
        write = _append_encoded if fs.supports_append else _create_encoded
        for block in blocks:
            if size > self.max_file_size:
                locations += write(self.path, pending, self.fsync)
                pending = []
                self._roll_over()
                size = 0
            data = encode_block(block)
            pending.append(data)
            size += len(data)
        locations += write(self.path, pending, self.fsync)
        return locations

    def _roll_over(self) -> None:
        self.version = max(self.version + 1, next_log_version(self.directory, self.file_id, self.base_instant))
