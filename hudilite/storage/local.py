"""Local / shared POSIX file system storage.

`LocalStorage` implements the `Storage` interface (hudilite/storage/base.py) plus the POSIX primitives of the local
lock provider, heartbeats and direct markers. Paths handed in are absolute; `file://` URIs are accepted.
"""

from __future__ import annotations

import contextlib
import errno
import mmap
import os
import uuid
from typing import Callable, Iterator

import pyarrow as pa
import pyarrow.parquet as pq

from hudilite.options import FSYNC
from hudilite.storage.base import Storage, bound_storage, register_storage, registered_storage, scheme_of
from hudilite.storage.paths import normalize_path


def read_nonblank(path: str) -> bytes | None:
    """The bytes of a small metadata file (plan, instant), or None when it is absent or blank (requested
    instant files are often empty)."""
    try:
        data = storage_for(path).read_bytes(path)
    except FileNotFoundError:
        return None
    return data if data.strip() else None


def fsync_option(options: dict | None) -> bool:
    """`hoodie.write.fsync` (default true): data files and their directories are made durable before the commit
    that names them. false gives that guarantee up (scratch tables on tmpfs, measuring its cost in bench/)."""
    return FSYNC.get(options)


def fsync_path(path: str) -> None:
    """fsync a closed file or a directory by path (a read-only descriptor suffices on POSIX systems)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def directories_of(base_path: str, rel_paths) -> list[str]:
    """Every directory from `base_path` down to the parent of each relative path, once each, deepest first (a new
    partition directory's own entry lives in its parent)."""
    dirs: set[str] = set()
    for rel in rel_paths:
        d = os.path.dirname(rel)
        while True:
            dirs.add(os.path.join(base_path, d) if d else base_path)
            if not d:
                break
            d = os.path.dirname(d)
    return sorted(dirs, key=lambda x: (-x.count(os.sep), x))


class LocalStorage(Storage):
    """POSIX file operations. `put_if_absent` is atomic: content is written to a temp file and hard-linked
    into place, which fails if the target exists (no reader ever sees a half-written file).

    Every mutating operation first calls `self.fault` when it is set (hudilite/storage/faults.py: crash
    injection); unset (the class default) that is one attribute check. `fault(op, path, torn)`: `torn`, when
    given, performs a partial version of the operation (a process killed in the middle of it)."""

    fault: Callable[..., None] | None = None

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def isdir(self, path: str) -> bool:
        return os.path.isdir(path)

    def check_access(self, path: str, *, write: bool) -> None:
        # os.path.exists answers False for a path behind a directory this process may not search, which would
        # read as "no table" (a write would then try to create one); os.stat raises PermissionError instead
        probe = normalize_path(path)
        while True:
            try:
                os.stat(probe)
                break
            except FileNotFoundError:
                parent = os.path.dirname(probe)
                if parent == probe:
                    return
                probe = parent  # not there yet: the nearest existing directory must let it be created
        need = os.R_OK | os.X_OK | (os.W_OK if write or probe != normalize_path(path) else 0)
        if os.path.isdir(probe) and not os.access(probe, need):
            raise PermissionError(errno.EACCES, "Permission denied", probe)

    def makedirs(self, path: str) -> None:
        os.makedirs(path, exist_ok=True)

    def read_bytes(self, path: str) -> bytes:
        with open(path, "rb") as f:
            return f.read()

    def read_range(self, path: str, offset: int, length: int) -> bytes:
        with open(path, "rb") as f:
            f.seek(offset)
            return f.read(length)

    def open_input(self, path: str) -> pa.NativeFile:
        return pa.OSFile(path, "rb")

    # parquet by path: pyarrow then names the file in its errors (users see them in damaged-file reports)
    def read_parquet(self, path: str, columns: list[str] | None = None, **options) -> pa.Table:
        return pq.read_table(path, columns=columns, **options)

    def parquet_file(self, path: str, *, size: int | None = None, **options) -> pq.ParquetFile:
        return pq.ParquetFile(path, **options)

    def parquet_metadata(self, path: str, *, size: int | None = None) -> pq.FileMetaData:
        return pq.read_metadata(path)

    def parquet_schema(self, path: str) -> pa.Schema:
        return pq.read_schema(path)

    def size(self, path: str) -> int:
        return os.path.getsize(path)

    def mtime(self, path: str) -> float:
        return os.path.getmtime(path)

    def listdir(self, path: str) -> list[str]:
        try:
            return os.listdir(path)
        except FileNotFoundError:
            return []

    def list_entries(self, path: str) -> tuple[list[str], list[str]]:
        dirs: list[str] = []
        files: list[str] = []
        with os.scandir(path) as it:
            for e in it:
                (dirs if e.is_dir() else files).append(e.name)
        return dirs, files

    @contextlib.contextmanager
    def mapped(self, path: str) -> Iterator[bytes | mmap.mmap]:
        with open(path, "rb") as f:
            if os.fstat(f.fileno()).st_size == 0:
                yield b""  # an empty file cannot be mapped
                return
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
                yield buf

    def scandir_files(self, path: str) -> Iterator[os.DirEntry]:
        try:
            with os.scandir(path) as it:
                for entry in it:
                    if entry.is_file():
                        yield entry
        except FileNotFoundError:
            return

    def delete_stale_temps(self, path: str) -> int:
        """Delete the temp files `write_bytes(path, ...)` leaves when its process dies before the rename
        (`tmp_name`). Only for a path whose writers hold a lock the caller holds: then no temp file of it is live.
        Returns how many were deleted."""
        d, name = os.path.split(path)
        n = 0
        for entry in list(self.scandir_files(d)):
            if entry.name.startswith(f".{name}.") and entry.name.endswith(".tmp"):
                n += self.delete(entry.path)
        return n

    def _staged_tmp(self, path: str, stage_dir: str | None) -> str:
        if stage_dir is None:
            return self.tmp_name(path)
        return os.path.join(stage_dir, f".{os.path.basename(path)}.{uuid.uuid4().hex}.tmp")

    def write_bytes(self, path: str, data: bytes, *, fsync: bool = True, stage_dir: str | None = None) -> None:
        """Atomically replace `path` with `data` (temp file + rename). `stage_dir`: as for `put_if_absent`."""
        tmp = self._staged_tmp(path, stage_dir)
        if self.fault is not None:
            self.fault("write", path, lambda: _write_file(tmp, data, False))
        _write_file(tmp, data, fsync)
        os.replace(tmp, path)

    def put_if_absent(self, path: str, data: bytes, *, stage_dir: str | None = None) -> bool:
        """Create `path` with `data` only if it does not exist. Returns False if it already existed.

        `stage_dir` (a directory on the same file system): write the temp file there instead of next to `path`.
        Used as a fence: once somebody renamed `stage_dir` away and unlinked what it held, the link by path
        fails with FileNotFoundError (the name no longer resolves, or the kernel refuses to link an inode
        whose last name was unlinked) and `path` is not created."""
        tmp = self._staged_tmp(path, stage_dir)
        if self.fault is not None:
            self.fault("put_if_absent", path, lambda: _write_file(tmp, data, False))
        _write_file(tmp, data, True)
        try:
            os.link(tmp, path)
        except FileExistsError:
            return False
        finally:
            try:
                os.unlink(tmp)
            except FileNotFoundError:  # a revoked stage_dir: the link's own error is the one to raise
                pass
        fsync_path(os.path.dirname(path))  # the new entry (a completed instant) survives a power loss
        return True

    def fsync_dirs(self, dirs) -> None:
        for d in dirs:
            fsync_path(d)

    def create_empty_if_absent(self, path: str) -> bool:
        if self.fault is not None:
            self.fault("create", path, None)
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        os.close(fd)
        return True

    def delete(self, path: str) -> bool:
        if self.fault is not None:
            self.fault("delete", path, None)
        try:
            os.unlink(path)
            return True
        except FileNotFoundError:
            return False

    def delete_tree(self, path: str) -> None:
        if not os.path.exists(path):
            return
        if self.fault is not None:
            self.fault("delete_tree", path, lambda: self._delete_some(path))
        for root, dirs, files in os.walk(path, topdown=False):
            for f in files:
                os.unlink(os.path.join(root, f))
            for d in dirs:
                os.rmdir(os.path.join(root, d))
        os.rmdir(path)

    def _delete_some(self, path: str) -> None:
        """The first file of the tree deleted (a recursive delete killed part way)."""
        for f in self.walk_files(path):
            os.unlink(f)
            return

    def rename(self, src: str, dst: str) -> None:
        """`os.replace`: atomically moves `src` to `dst`, replacing a file there."""
        if self.fault is not None:
            self.fault("rename", dst, None)
        os.replace(src, dst)

    def rename_noreplace_dir(self, src: str, dst: str) -> None:
        """`os.rename` (a directory onto an absent or empty directory; raises like it)."""
        if self.fault is not None:
            self.fault("rename", dst, None)
        os.rename(src, dst)

    def link(self, src: str, dst: str) -> None:
        """Hard link `dst` to `src`; FileExistsError when `dst` exists."""
        if self.fault is not None:
            self.fault("link", dst, None)
        os.link(src, dst)

    def mkdir(self, path: str) -> None:
        """Create one directory; FileExistsError when it exists (an exclusive claim)."""
        if self.fault is not None:
            self.fault("mkdir", path, None)
        os.mkdir(path)

    def rmdir(self, path: str) -> None:
        """Remove an empty directory (raises like `os.rmdir`)."""
        if self.fault is not None:
            self.fault("rmdir", path, None)
        os.rmdir(path)

    def create_exclusive(self, path: str, data: bytes = b"", *, fsync: bool = False) -> int:
        """Create `path` holding `data`, failing with FileExistsError when it exists (O_EXCL). Returns the
        open descriptor (the caller closes it: a lock file may keep it for its lease). A failure after the
        creation removes the file again."""
        if self.fault is not None:
            self.fault("create", path, None)
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o644)
        try:
            if data:
                _write_all(fd, data)
            if fsync:
                os.fsync(fd)
        except BaseException:
            os.close(fd)
            self.delete(path)
            raise
        return fd

    def touch(self, path: str, *, fsync: bool = True) -> None:
        """Create `path` empty if absent (an existing file is left as it is), durably."""
        if self.fault is not None:
            self.fault("create", path, None)
        fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o644)
        try:
            if fsync:
                os.fsync(fd)
        finally:
            os.close(fd)

    def write_plain(self, path: str, data: bytes) -> None:
        """Write `path` in place (created or truncated), not atomically and not synced: files whose readers
        tolerate a torn or empty content (heartbeats, marker type files of direct markers)."""
        if self.fault is not None:
            self.fault("write", path, lambda: _write_file(path, data[:len(data) // 2], False))
        _write_file(path, data, False)

    def append_bytes(self, path: str, chunks: list[bytes], *, fsync: bool = True) -> int:
        """Append `chunks` to `path` (created if missing) and flush (fsync with `fsync`; a new file's directory
        entry too). Returns the offset the first chunk landed at."""
        created = not os.path.exists(path)
        if self.fault is not None:
            half = [b"".join(chunks)[:max(1, sum(map(len, chunks)) // 2)]]  # a torn append
            self.fault("append", path, lambda: _append_file(path, half, False))
        offset = _append_file(path, chunks, fsync)
        if created and fsync:
            fsync_path(os.path.dirname(os.path.abspath(path)))
        return offset

    def open_append_fd(self, path: str) -> int:
        """An O_APPEND descriptor on `path` (created if missing) for `append_fd` (a log kept open)."""
        if self.fault is not None:
            self.fault("create", path, None)
        return os.open(path, os.O_CREAT | os.O_WRONLY | os.O_APPEND, 0o644)

    def append_fd(self, fd: int, data: bytes, *, fsync: bool = True, path: str = "") -> None:
        """Append all of `data` to the descriptor from `open_append_fd`, then fsync it."""
        if self.fault is not None:
            self.fault("append", path, lambda: _write_all(fd, bytes(data[:max(1, len(data) // 2)])))
        _write_all(fd, data)
        if fsync:
            os.fsync(fd)

    def touch_mtime(self, path: str) -> None:
        """Set `path`'s mtime to now (a heartbeat). Not numbered by `fault`: beats run on a timer."""
        os.utime(path)

    def renew_in_place(self, fd: int, data: bytes) -> None:
        """Overwrite the start of an open file (a lock lease renewal: same length, so never torn). Not numbered
        by `fault`: renewals run on a timer, so their count is not a property of the operation."""
        os.pwrite(fd, data, 0)

    def truncate(self, path: str, size: int) -> None:
        if self.fault is not None:
            self.fault("truncate", path, None)
        os.truncate(path, size)

    def write_parquet(self, path: str, parts: list[pa.Table], *, row_group_size: int | None = None,
                      fsync: bool = True, **options) -> int:
        """Write a parquet data file from Arrow tables (one row group series per part, all of the first part's
        schema), fsynced with `fsync`. Returns its size."""
        if self.fault is not None:
            self.fault("write_data", path, lambda: self._torn_parquet(path, parts, options))
        if len(parts) == 1:
            pq.write_table(parts[0], path, row_group_size=row_group_size, **options)
        else:
            with pq.ParquetWriter(path, parts[0].schema, **options) as w:
                for t in parts:
                    w.write_table(t, row_group_size=row_group_size)
        if fsync:
            fsync_path(path)
        return os.path.getsize(path)

    def _torn_parquet(self, path: str, parts: list[pa.Table], options: dict) -> None:
        sink = pa.BufferOutputStream()
        pq.write_table(parts[0], sink, **options)
        data = sink.getvalue().to_pybytes()
        _write_file(path, data[:len(data) // 2], False)

    def create_data_file(self, path: str) -> pa.NativeFile:
        """A new data file opened for writing (a streaming parquet writer's sink); the caller closes it and
        syncs it with `fsync_file`."""
        if self.fault is not None:
            self.fault("write_data", path, lambda: _write_file(path, b"PAR1", False))
        return pa.OSFile(path, "wb")

    def fsync_file(self, path: str) -> None:
        fsync_path(path)

    def walk_files(self, path: str) -> Iterator[str]:
        for root, _dirs, files in os.walk(path):
            for f in files:
                yield os.path.join(root, f)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def _write_file(path: str, data: bytes, fsync: bool) -> None:
    with open(path, "wb") as f:
        f.write(data)
        if fsync:
            f.flush()
            os.fsync(f.fileno())


def _append_file(path: str, chunks: list[bytes], fsync: bool) -> int:
    with open(path, "ab") as f:
        offset = os.fstat(f.fileno()).st_size
        for data in chunks:
            f.write(data)
        f.flush()
        if fsync:
            os.fsync(f.fileno())
    return offset


_LOCAL = LocalStorage()
register_storage("file", lambda _scheme: _LOCAL)


def local_storage() -> LocalStorage:
    """The LocalStorage with its POSIX primitives (kept-open descriptors, links, exclusive directories): for the
    parts that are local by nature (the file lock provider, the batched marker service's files, a table swap)."""
    return _LOCAL


def storage_for(path: str) -> Storage:
    """The storage of `path`: the backend registered for its URI scheme (`register_storage`); plain local paths
    and `file:` URIs: the one LocalStorage. ValueError for a scheme no backend serves."""
    scheme = scheme_of(path)
    if scheme in ("", "file"):
        normalize_path(path)  # validates a file URI's form
        return _LOCAL
    fs = bound_storage(path) or registered_storage(scheme)
    if fs is None:
        raise ValueError(f"unsupported storage scheme in {path!r}: no storage backend is registered for "
                         f"{scheme}:// (local/shared file systems and registered backends are supported)")
    return fs
