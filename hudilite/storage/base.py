"""The storage interface of the core: every file operation of the table format goes through a `Storage`.

`LocalStorage` (hudilite/storage/local.py) implements it for local and shared POSIX file systems. An object store
backend implements the abstract methods below and is returned by `storage_for` for its URIs. What it must
guarantee is what the format relies on: `write_bytes` replaces a file atomically (readers see the old or the new
content, never a part), `put_if_absent` creates a file only if it does not exist, atomically (the commit of an
instant; object stores: a conditional put), and a file once listed can be read.

LocalStorage also offers POSIX primitives that only the local lock provider, heartbeats and direct markers use
(descriptors kept open for appends and lease renewals, hard links, exclusive directory creation, mtimes); a
backend without them needs its own lock provider (hoodie.write.lock.provider) and timeline-server markers.
"""

from __future__ import annotations

import abc
import os
import re
import threading
from typing import Callable, Iterator

import pyarrow as pa


class Storage(abc.ABC):
    """File operations on absolute paths (or URIs of the backend's scheme)."""

    # ---- reads ------------------------------------------------------------------------------------------
    @abc.abstractmethod
    def exists(self, path: str) -> bool:
        """Whether a file or directory (a key prefix on object stores) is at `path`."""

    @abc.abstractmethod
    def isdir(self, path: str) -> bool:
        ...

    @abc.abstractmethod
    def size(self, path: str) -> int:
        """The file's size in bytes (FileNotFoundError when absent)."""

    @abc.abstractmethod
    def mtime(self, path: str) -> float:
        """The file's modification time, seconds since the epoch."""

    @abc.abstractmethod
    def read_bytes(self, path: str) -> bytes:
        """The whole file (FileNotFoundError when absent)."""

    @abc.abstractmethod
    def read_range(self, path: str, offset: int, length: int) -> bytes:
        """`length` bytes from `offset` (fewer at the end of the file): log blocks are read this way."""

    @abc.abstractmethod
    def open_input(self, path: str) -> pa.NativeFile:
        """A random-access input file (parquet footers and columns are read through it)."""

    @abc.abstractmethod
    def listdir(self, path: str) -> list[str]:
        """Names directly under `path` (files and directories); [] when `path` does not exist."""

    @abc.abstractmethod
    def scandir_files(self, path: str) -> Iterator[os.DirEntry]:
        """The files directly under `path` as entries with `.name` and `.path`; none when it does not exist."""

    @abc.abstractmethod
    def walk_files(self, path: str) -> Iterator[str]:
        """Paths of every file under `path`, recursively."""

    # ---- writes -----------------------------------------------------------------------------------------
    @abc.abstractmethod
    def makedirs(self, path: str) -> None:
        """Create a directory and its parents (object stores: nothing to do)."""

    @abc.abstractmethod
    def write_bytes(self, path: str, data: bytes, *, fsync: bool = True, stage_dir: str | None = None) -> None:
        """Atomically replace `path` with `data`."""

    @abc.abstractmethod
    def put_if_absent(self, path: str, data: bytes, *, stage_dir: str | None = None) -> bool:
        """Create `path` with `data` only if it does not exist, atomically. False when it existed."""

    @abc.abstractmethod
    def create_empty_if_absent(self, path: str) -> bool:
        ...

    @abc.abstractmethod
    def append_bytes(self, path: str, chunks: list[bytes], *, fsync: bool = True) -> int:
        """Append to `path` (created if missing); the offset the first chunk landed at."""

    @abc.abstractmethod
    def write_parquet(self, path: str, parts: list[pa.Table], *, row_group_size: int | None = None,
                      fsync: bool = True, **options) -> int:
        """Write a parquet file from Arrow tables; its size."""

    @abc.abstractmethod
    def create_data_file(self, path: str) -> pa.NativeFile:
        """A new file open for writing (a streaming parquet writer's sink)."""

    @abc.abstractmethod
    def rename(self, src: str, dst: str) -> None:
        """Move `src` to `dst`, replacing a file there."""

    @abc.abstractmethod
    def delete(self, path: str) -> bool:
        """Delete a file; False when it was not there."""

    @abc.abstractmethod
    def delete_tree(self, path: str) -> None:
        """Delete a directory (key prefix) and everything under it."""

    @abc.abstractmethod
    def fsync_dirs(self, dirs) -> None:
        """Make the listed directories' entries durable (object stores: nothing to do)."""


# ---- backends by URI scheme ---------------------------------------------------------------------------------
_REGISTRY: dict[str, Callable[[str], Storage]] = {}
_INSTANCES: dict[str, Storage] = {}
_REGISTRY_LOCK = threading.Lock()
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]+):")  # two characters at least: "C:" is a drive, not a scheme


def scheme_of(path: str) -> str:
    """The URI scheme of `path`, lower case: "" for a plain local path, "file" for a `file:` URI."""
    m = _SCHEME.match(os.fspath(path))
    return m.group(1).lower() if m else ""


def register_storage(scheme: str, factory: Callable[[str], Storage]) -> None:
    """Serve paths of `scheme` (e.g. "s3") with the backend `factory(scheme)` builds; built once, on first use.
    Registering a scheme again replaces its backend (tests register throwaway ones)."""
    with _REGISTRY_LOCK:
        _REGISTRY[scheme.lower()] = factory
        _INSTANCES.pop(scheme.lower(), None)


def unregister_storage(scheme: str) -> None:
    with _REGISTRY_LOCK:
        _REGISTRY.pop(scheme.lower(), None)
        _INSTANCES.pop(scheme.lower(), None)


def registered_storage(scheme: str) -> Storage | None:
    """The backend of `scheme` ("" and "file": the local one), or None when no backend serves it."""
    key = scheme.lower() or "file"
    with _REGISTRY_LOCK:
        inst = _INSTANCES.get(key)
        if inst is None and key in _REGISTRY:
            inst = _INSTANCES[key] = _REGISTRY[key](key)
        return inst
