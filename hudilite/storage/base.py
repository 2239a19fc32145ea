"""The storage interface of the core: every file operation of the table format goes through a `Storage`.

`LocalStorage` (hudilite/storage/local.py) implements it for local and shared POSIX file systems. An object store
backend implements the abstract methods below and is returned by `storage_for` for its URIs. What it must
guarantee is what the format relies on: `write_bytes` replaces a file atomically (readers see the old or the new
content, never a part), `put_if_absent` creates a file only if it does not exist, atomically (the commit of an
instant; object stores: a conditional put), and a file once listed can be read.

Backends are found by URI scheme: `register_storage(scheme, factory)` adds one, `storage_for(path)` returns the
backend of a path (plain paths and `file:` URIs: the LocalStorage). Table paths are normalized and related with
`normalize_path` / `relative_to` / `canonical` (hudilite/storage/paths.py), never with os.path.abspath, realpath,
normpath or relpath, which mangle `s3://bucket/prefix/t`. tests/unit/test_storage_seam.py fails on a file
operation of the core that bypasses this interface.

LocalStorage also offers POSIX primitives that only local-by-nature protocols use, through `local_storage()`: the
file lock provider, the batched marker service's local files and table swaps (descriptors kept open for appends
and lease renewals, hard links, exclusive directory creation). A backend without them needs its own lock provider
(hoodie.write.lock.provider); markers need only `create_empty_if_absent` (direct) or `write_bytes` (the batched
service rewrites whole objects there).
"""

from __future__ import annotations

import abc
import contextlib
import errno
import mmap
import os
import re
import threading
import uuid
from typing import Callable, Iterator

import pyarrow as pa
import pyarrow.parquet as pq


class Storage(abc.ABC):
    """File operations on absolute paths (or URIs of the backend's scheme)."""

    #: Whether `append_bytes` extends a file in place. Object stores cannot: their `append_bytes` rewrites the
    #: whole object, so writers that would append (rollback command blocks, archive records) put the new blocks
    #: in a new file (the next log version) instead, as Apache Hudi does where the file system cannot append.
    supports_append: bool = True

    # ---- reads ------------------------------------------------------------------------------------------
    @abc.abstractmethod
    def exists(self, path: str) -> bool:
        """Whether a file or directory (a key prefix on object stores) is at `path`."""

    @abc.abstractmethod
    def isdir(self, path: str) -> bool:
        ...

    def check_access(self, path: str, *, write: bool) -> None:
        """Raise OSError (or the store's own error: missing credentials, access denied) unless this process can
        read the directory `path`, or with `write` also create files in it; a `path` not there yet must be
        creatable. Object stores: one existence probe, which fails without credentials or access."""
        self.exists(path)

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

    def read_parquet(self, path: str, columns: list[str] | None = None, **options) -> pa.Table:
        """A whole parquet file (or the named columns) as an Arrow table."""
        with _naming(path), self.open_input(path) as f:
            return pq.read_table(f, columns=columns, **options)

    def open_input_sized(self, path: str, size: int) -> pa.NativeFile:
        """`open_input` of a file whose size the caller knows (from a listing): object stores skip the HEAD."""
        return self.open_input(path)

    def parquet_file(self, path: str, *, size: int | None = None, **options) -> pq.ParquetFile:
        """A parquet file opened for reading row groups and its footer; close it (or use `with`) when done.
        `size`: the file's size when known (a listing's), saving object stores a request."""
        with _naming(path):
            src = self.open_input(path) if size is None else self.open_input_sized(path, size)
            return pq.ParquetFile(src, **options)

    def parquet_metadata(self, path: str, *, size: int | None = None) -> pq.FileMetaData:
        """The parquet footer of a file (row counts, column statistics); `size` as for `parquet_file`."""
        src = self.open_input(path) if size is None else self.open_input_sized(path, size)
        with _naming(path), src as f:
            return pq.read_metadata(f)

    def parquet_schema(self, path: str) -> pa.Schema:
        """The Arrow schema of a parquet file."""
        with _naming(path), self.open_input(path) as f:
            return pq.read_schema(f)

    @abc.abstractmethod
    def listdir(self, path: str) -> list[str]:
        """Names directly under `path` (files and directories); [] when `path` does not exist."""

    @abc.abstractmethod
    def scandir_files(self, path: str) -> Iterator[os.DirEntry]:
        """The files directly under `path` as entries with `.name` and `.path`; none when it does not exist."""

    @abc.abstractmethod
    def walk_files(self, path: str) -> Iterator[str]:
        """Paths of every file under `path`, recursively."""

    def list_entries(self, path: str) -> tuple[list[str], list[str]]:
        """(names of the directories, names of the files) directly under `path`; FileNotFoundError when it does
        not exist (or is no directory)."""
        names = self.listdir(path)
        if not names and not self.isdir(path):
            raise FileNotFoundError(errno.ENOENT, "no such directory", path)
        dirs = [n for n in names if self.isdir(f"{path.rstrip('/')}/{n}")]
        return dirs, [n for n in names if n not in set(dirs)]

    def list_tree(self, path: str) -> dict[str, list[os.DirEntry]] | None:
        """Every file under `path` as entries (`name`, `path`, `stat()` size), by the directory they are in
        (relative to `path`, "" for `path` itself), where one recursive listing is cheaper than a listing per
        directory: object stores list a whole prefix flat, 1000 keys a request. None elsewhere (local file
        systems list directories)."""
        return None

    @contextlib.contextmanager
    def mapped(self, path: str) -> Iterator[bytes | mmap.mmap]:
        """The whole file as a read-only buffer (`len`, `find`, slices) while the block runs (FileNotFoundError when
        absent): log files are scanned for their block headers this way. LocalStorage maps it without a copy."""
        yield self.read_bytes(path)

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
        """Append to `path` (created if missing); the offset the first chunk landed at. Without
        `supports_append` this reads and rewrites the whole file: correct, but for occasional use only."""

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

    # ---- with a default for stores without directories or temp files (object stores) ---------------------
    def fsync_file(self, path: str) -> None:
        """Make a closed file durable (a `create_data_file` sink). Object stores: a finished put already is."""

    def rmdir(self, path: str) -> None:
        """Remove an empty directory (OSError when it holds entries). Object stores: only prefixes, nothing to do."""
        if self.listdir(path):
            raise OSError(errno.ENOTEMPTY, "directory not empty", path)

    def tmp_name(self, path: str) -> str:
        """A name beside `path` for content renamed onto it later (a hidden `.tmp` file listings skip)."""
        d, name = os.path.split(path)
        return os.path.join(d, f".{name}.{uuid.uuid4().hex}.tmp")

    def delete_stale_temps(self, path: str) -> int:
        """Delete temp files an atomic `write_bytes(path, ...)` left when its process died; how many. Only for a
        path whose writers hold a lock the caller holds. Stores whose writes are atomic puts leave none."""
        return 0

    def touch(self, path: str, *, fsync: bool = True) -> None:
        """Create `path` empty if absent (an existing file is left as it is)."""
        self.create_empty_if_absent(path)

    def write_plain(self, path: str, data: bytes) -> None:
        """Write `path` for readers that tolerate a torn or stale content (heartbeats, marker type files)."""
        self.write_bytes(path, data, fsync=False)

    def touch_mtime(self, path: str) -> None:
        """Set `path`'s modification time to now (a heartbeat beat); FileNotFoundError when it is absent."""
        self.write_bytes(path, self.read_bytes(path), fsync=False)


@contextlib.contextmanager
def _naming(path: str) -> Iterator[None]:
    """pyarrow names a stream `<Buffer>` in its errors: name the file instead (damaged-file reports show it)."""
    try:
        yield
    except pa.ArrowInvalid as e:
        raise pa.ArrowInvalid(str(e).replace("'<Buffer>'", repr(path))) from e


# ---- backends by URI scheme ---------------------------------------------------------------------------------
_REGISTRY: dict[str, Callable[[str], Storage]] = {}
_INSTANCES: dict[str, Storage] = {}
_CONFIGURED: dict[str, Callable[[dict], Storage]] = {}  # scheme -> backend made from storage options
_BOUND: dict[str, Storage] = {}  # location (no trailing /) -> the backend of paths at and under it
_BOUND_OPTIONS: dict[str, dict] = {}  # location -> the storage options its backend was made from (for workers)
_INSTALLED: dict[str, str] = {}  # location -> key of the options `install_bindings` bound it with
_REGISTRY_LOCK = threading.Lock()
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]+):")  # two characters at least: "C:" is a drive, not a scheme


def scheme_of(path: str) -> str:
    """The URI scheme of `path`, lower case: "" for a plain local path (also `a:b/c`, a relative path with a
    colon), "file" for a `file:` URI (Hadoop's `file:/x` too), else the scheme of a `scheme://` URI."""
    path = os.fspath(path)
    m = _SCHEME.match(path)
    if m is None:
        return ""
    scheme = m.group(1).lower()
    return scheme if scheme == "file" or path.startswith("//", m.end()) else ""


def register_storage(scheme: str, factory: Callable[[str], Storage],
                     configured: Callable[[dict], Storage] | None = None) -> None:
    """Serve paths of `scheme` (e.g. "s3") with the backend `factory(scheme)` builds; built once, on first use.
    `configured(storage_options)`: a backend for one table's options (`bind_storage_options`); ValueError for a
    key it does not know. Registering a scheme again replaces its backend (tests register throwaway ones)."""
    with _REGISTRY_LOCK:
        _REGISTRY[scheme.lower()] = factory
        _INSTANCES.pop(scheme.lower(), None)
        if configured is None:
            _CONFIGURED.pop(scheme.lower(), None)
        else:
            _CONFIGURED[scheme.lower()] = configured


def unregister_storage(scheme: str) -> None:
    with _REGISTRY_LOCK:
        _REGISTRY.pop(scheme.lower(), None)
        _INSTANCES.pop(scheme.lower(), None)
        _CONFIGURED.pop(scheme.lower(), None)


def bind_storage_options(location: str, storage_options: dict | None) -> None:
    """Serve `location` (a table's normalized path) and every path under it with a backend made from
    `storage_options` (per-table endpoint, credentials, ...), ahead of its scheme's process-wide backend, so that
    tables on different endpoints work in one process. None or {}: nothing changes. Binding a location again
    replaces its backend. ValueError naming the key for an option the scheme's backend does not know; local
    paths take none."""
    if not storage_options:
        return
    scheme = scheme_of(location)
    with _REGISTRY_LOCK:
        configured = _CONFIGURED.get(scheme)
    if configured is None:
        key = next(iter(storage_options))
        where = "a local path" if scheme in ("", "file") else f"{scheme}:// paths"
        raise ValueError(f"unknown storage option {key!r}: {where} take no storage options ({location})")
    backend = configured(dict(storage_options))
    with _REGISTRY_LOCK:
        _BOUND[location.rstrip("/")] = backend
        _BOUND_OPTIONS[location.rstrip("/")] = dict(storage_options)


def unbind_storage(location: str) -> None:
    with _REGISTRY_LOCK:
        _BOUND.pop(location.rstrip("/"), None)
        _BOUND_OPTIONS.pop(location.rstrip("/"), None)
        _INSTALLED.pop(location.rstrip("/"), None)


def bound_storage(path: str) -> Storage | None:
    """The backend bound to `path` or to its nearest enclosing location (`bind_storage_options`), else None."""
    if not _BOUND:  # the common case, without a lock: no table was given storage options
        return None
    with _REGISTRY_LOCK:
        best, found = -1, None
        for loc, backend in _BOUND.items():
            if len(loc) > best and (path == loc or path.startswith(loc + "/")):
                best, found = len(loc), backend
        return found


def capture_bindings(path: str) -> tuple[tuple[str, dict], ...]:
    """The bindings (`bind_storage_options`) that serve `path`: ((location, storage options), ...), taken on the
    driver into a task closure so that `install_bindings` in an executor's Python worker (another process, where
    nothing was bound) reaches the table with the same options. () for a path without bindings. The options may
    hold credentials: they travel inside the task like any closure and must never be logged."""
    if not _BOUND_OPTIONS:
        return ()
    path = path.rstrip("/")
    with _REGISTRY_LOCK:
        return tuple((loc, dict(o)) for loc, o in sorted(_BOUND_OPTIONS.items())
                     if path == loc or path.startswith(loc + "/"))


def capture_all_bindings() -> tuple[tuple[str, dict], ...]:
    """Every binding of this process, as `capture_bindings` gives them: for code that runs in other processes
    before it knows its table (the Spark data source of catalog entries, registered once per session)."""
    with _REGISTRY_LOCK:
        return tuple((loc, dict(o)) for loc, o in sorted(_BOUND_OPTIONS.items()))


def install_bindings(bindings: tuple[tuple[str, dict], ...]) -> None:
    """Bind what `capture_bindings` captured, in this process. Idempotent and cheap when repeated: a worker
    process runs many tasks, and each call only compares keys; a location bound with other options (another
    write with new credentials) is bound again."""
    for loc, options in bindings:
        key = repr(sorted(options.items()))
        if _INSTALLED.get(loc) == key:
            continue
        bind_storage_options(loc, options)
        _INSTALLED[loc] = key


def registered_storage(scheme: str) -> Storage | None:
    """The backend of `scheme` ("" and "file": the local one), or None when no backend serves it."""
    key = scheme.lower() or "file"
    with _REGISTRY_LOCK:
        inst = _INSTANCES.get(key)
        if inst is None and key in _REGISTRY:
            inst = _INSTANCES[key] = _REGISTRY[key](key)
        return inst
