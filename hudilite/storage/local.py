"""Local / shared POSIX file system storage.

Everything the table format needs from storage is here, so another backend (object stores) only has to
implement this class. Paths handed in are absolute; `file://` URIs are accepted.
"""

from __future__ import annotations

import os
import uuid
from typing import Iterator


def normalize_path(path: str) -> str:
    """Absolute local path for a table location: a plain path, `file:/x` (Spark's and Hadoop's form of a
    catalog LOCATION), `file:///x` or `file://localhost/x`. The one place a user or Spark path is turned into
    a local path. Hadoop's `Path.toString()` does not percent-encode, so `%` in a path is taken literally."""
    path = os.fspath(path)
    if path[:5].lower() == "file:":
        rest = path[5:]
        if rest.startswith("//"):
            host, sep, tail = rest[2:].partition("/")
            if host not in ("", "localhost"):
                raise ValueError(f"unsupported location {path!r}: a file URI naming host {host!r} "
                                 "(only local/shared file systems are supported)")
            rest = sep + tail
        if not rest.startswith("/"):
            raise ValueError(f"unsupported location {path!r}: a file URI needs an absolute path")
        path = rest
    elif "://" in path:
        raise ValueError(f"unsupported storage scheme in {path!r}: only local/shared file systems are supported")
    return os.path.abspath(path)


def read_nonblank(path: str) -> bytes | None:
    """The bytes of a small metadata file (plan, instant), or None when it is absent or blank (requested
    instant files are often empty)."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return None
    return data if data.strip() else None


FSYNC_KEY = "hoodie.write.fsync"


def fsync_option(options: dict | None) -> bool:
    """`hoodie.write.fsync` (default true): data files and their directories are made durable before the commit
    that names them. false gives that guarantee up (scratch tables on tmpfs, measuring its cost in bench/)."""
    v = (options or {}).get(FSYNC_KEY, True)
    if isinstance(v, bool):
        return v
    s = str(v).strip().lower()
    if s in ("true", "1", "yes", ""):
        return True
    if s in ("false", "0", "no"):
        return False
    raise ValueError(f"option {FSYNC_KEY}={v!r} is not a boolean (true/false)")


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


class LocalStorage:
    """POSIX file operations. `put_if_absent` is atomic: content is written to a temp file and hard-linked
    into place, which fails if the target exists (no reader ever sees a half-written file)."""

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def isdir(self, path: str) -> bool:
        return os.path.isdir(path)

    def makedirs(self, path: str) -> None:
        os.makedirs(path, exist_ok=True)

    def read_bytes(self, path: str) -> bytes:
        with open(path, "rb") as f:
            return f.read()

    def size(self, path: str) -> int:
        return os.path.getsize(path)

    def mtime(self, path: str) -> float:
        return os.path.getmtime(path)

    def listdir(self, path: str) -> list[str]:
        try:
            return os.listdir(path)
        except FileNotFoundError:
            return []

    def scandir_files(self, path: str) -> Iterator[os.DirEntry]:
        try:
            with os.scandir(path) as it:
                for entry in it:
                    if entry.is_file():
                        yield entry
        except FileNotFoundError:
            return

    def tmp_name(self, path: str) -> str:
        d, name = os.path.split(path)
        return os.path.join(d, f".{name}.{uuid.uuid4().hex}.tmp")

    def _staged_tmp(self, path: str, stage_dir: str | None) -> str:
        if stage_dir is None:
            return self.tmp_name(path)
        return os.path.join(stage_dir, f".{os.path.basename(path)}.{uuid.uuid4().hex}.tmp")

    def write_bytes(self, path: str, data: bytes, *, fsync: bool = True, stage_dir: str | None = None) -> None:
        """Atomically replace `path` with `data` (temp file + rename). `stage_dir`: as for `put_if_absent`."""
        tmp = self._staged_tmp(path, stage_dir)
        with open(tmp, "wb") as f:
            f.write(data)
            if fsync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)

    def put_if_absent(self, path: str, data: bytes, *, stage_dir: str | None = None) -> bool:
        """Create `path` with `data` only if it does not exist. Returns False if it already existed.

        `stage_dir` (a directory on the same file system): write the temp file there instead of next to `path`.
        Used as a fence: once somebody renamed `stage_dir` away and unlinked what it held, the link by path
        fails with FileNotFoundError (the name no longer resolves, or the kernel refuses to link an inode
        whose last name was unlinked) and `path` is not created."""
        tmp = self._staged_tmp(path, stage_dir)
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
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
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        os.close(fd)
        return True

    def delete(self, path: str) -> bool:
        try:
            os.unlink(path)
            return True
        except FileNotFoundError:
            return False

    def delete_tree(self, path: str) -> None:
        if not os.path.exists(path):
            return
        for root, dirs, files in os.walk(path, topdown=False):
            for f in files:
                os.unlink(os.path.join(root, f))
            for d in dirs:
                os.rmdir(os.path.join(root, d))
        os.rmdir(path)

    def rename(self, src: str, dst: str) -> None:
        os.replace(src, dst)

    def walk_files(self, path: str) -> Iterator[str]:
        for root, _dirs, files in os.walk(path):
            for f in files:
                yield os.path.join(root, f)


_LOCAL = LocalStorage()


def storage_for(path: str) -> LocalStorage:
    normalize_path(path)  # validates the scheme
    return _LOCAL
