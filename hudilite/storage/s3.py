"""S3-compatible object storage (`s3://bucket/key`, `s3a://` alike) through obstore (Rust object_store).

Why obstore: docs/storage.md (measured against boto3 on a local S3 server). The commit protocol needs no rename:

- `put_if_absent` / `create_empty_if_absent`: a conditional put `If-None-Match: *` (412 or 409: False). Atomic
  and exclusive on AWS S3 and on SeaweedFS >= 4.18.
- `write_bytes`: a plain put, which S3 makes atomic (readers see the old or the new object, never a part).
- `replace_if_match` / `read_versioned` / `create_versioned` (ConditionalStorage): compare-and-swap by ETag, for
  the lock lease and `hoodie.properties`.
- `append_bytes`: objects cannot be appended to; the object is read and rewritten with `If-Match` (a concurrent
  appender makes the rewrite fail, and it is retried on the new content). Each append costs a GET and a PUT of the
  whole object, so `supports_append` is False: writers start a new log (or archive) file version instead.
- `rename`: copy + delete, NOT atomic; the commit protocol never needs it on object stores.
- directories are key prefixes: `makedirs` and `fsync_dirs` do nothing, `listdir` is a LIST with delimiter.

Throttling (429/503 SlowDown), other 5xx, timeouts and dropped connections are retried with exponential backoff
and jitter by object_store, for every request (GET, HEAD, LIST, PUT, conditional PUT, multipart parts, DELETE;
`max_retries`, `retry_timeout_s`, `backoff_init_ms`, `backoff_max_ms` in the storage options;
tests/s3/test_s3_retries.py proves it through a proxy that throttles). A put-if-absent whose first attempt
succeeded but whose answer was lost is retried and answered 412: when object_store says the 412 came from a retry
and the object holds exactly our content, `create_versioned` reports it as ours instead of a lost race (a 412 on
the first attempt, other content, or empty content stay a loss).

Every request is counted per verb (`request_counts()`, `counting()`): LIST, GET, HEAD, PUT, POST (multipart
create/complete, batch delete), DELETE.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import stat as stat_mod
import threading
from collections import Counter
from datetime import timedelta
from typing import Any, Iterator, cast

import obstore
import pyarrow as pa
import pyarrow.parquet as pq
from obstore.exceptions import AlreadyExistsError, GenericError, NotFoundError, PreconditionError
from obstore.store import S3Store

from hudilite.storage.base import register_storage
from hudilite.storage.conditional import ConditionalStorage

SCHEMES = ("s3", "s3a")
MULTIPART_CHUNK = 8 * 1024 * 1024  # a data file larger than this is uploaded in parts of this size
MIN_PART = 5 * 1024 * 1024  # S3 rejects smaller parts (but the last) when the upload completes
READ_BLOCK = 1024 * 1024  # the least a random-access read fetches (parquet footers: one GET with the metadata)
_DELETE_BATCH = 1000  # keys per DeleteObjects request (the S3 maximum)
_NOT_FOUND = (FileNotFoundError, NotFoundError)  # obstore raises the builtin for a 404
# object_store's error text when the answer came from a retry ("after 1 retries", debug "retries: 1"); should
# it change, a 412 after a retry reads as a lost race again (the safe direction; tests/s3/test_s3_retries.py)
_RETRIED = re.compile(r"after [1-9]\d* retries|\bretries: [1-9]")

# ---- request counters -----------------------------------------------------------------------------------------
_COUNTS: Counter = Counter()
_COUNTS_LOCK = threading.Lock()


def _count(verb: str, n: int = 1) -> None:
    with _COUNTS_LOCK:
        _COUNTS[verb] += n


def request_counts() -> dict[str, int]:
    """Requests sent to object stores by this process since it started, per verb."""
    with _COUNTS_LOCK:
        return dict(_COUNTS)


class RequestCount:
    """The requests made while a `counting()` block ran (all threads of the process): `.counts` per verb,
    `.total`."""

    def __init__(self) -> None:
        self._start = request_counts()
        self.counts: dict[str, int] = {}

    def _finish(self) -> None:
        now = request_counts()
        self.counts = {k: v - self._start.get(k, 0) for k, v in now.items() if v - self._start.get(k, 0)}

    @property
    def total(self) -> int:
        return sum(self.counts.values())


@contextlib.contextmanager
def counting() -> Iterator[RequestCount]:
    rc = RequestCount()
    try:
        yield rc
    finally:
        rc._finish()


# ---- configuration --------------------------------------------------------------------------------------------
# storage_options keys (ours, and object_store's `aws_*` spellings that hudi-rs takes too) -> object_store config
_KEYS = {
    "endpoint": "endpoint", "endpoint_url": "endpoint", "aws_endpoint": "endpoint", "aws_endpoint_url": "endpoint",
    "region": "region", "aws_region": "region",
    "access_key_id": "access_key_id", "aws_access_key_id": "access_key_id",
    "secret_access_key": "secret_access_key", "aws_secret_access_key": "secret_access_key",
    "session_token": "session_token", "aws_session_token": "session_token", "token": "session_token",
    "path_style": "path_style", "aws_virtual_hosted_style_request": "virtual_hosted",
    "allow_http": "allow_http", "aws_allow_http": "allow_http",
    "max_retries": "max_retries", "retry_timeout_s": "retry_timeout_s",
    "backoff_init_ms": "backoff_init_ms", "backoff_max_ms": "backoff_max_ms",
    "multipart_chunk_bytes": "multipart_chunk_bytes",
}
# the usual AWS environment variables, read when the option is not given
_ENV = {
    "endpoint": ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "AWS_ENDPOINT"),
    "region": ("AWS_REGION", "AWS_DEFAULT_REGION"),
    "access_key_id": ("AWS_ACCESS_KEY_ID",),
    "secret_access_key": ("AWS_SECRET_ACCESS_KEY",),
    "session_token": ("AWS_SESSION_TOKEN",),
    "allow_http": ("AWS_ALLOW_HTTP",),
}


def _truthy(v: Any) -> bool:
    return v if isinstance(v, bool) else str(v).strip().lower() in ("1", "true", "yes", "on")


def resolve_options(storage_options: dict | None) -> dict[str, Any]:
    """The effective settings: `storage_options` (either spelling), else the AWS environment variables. Unknown
    keys raise ValueError (a typo must not silently fall back to the environment)."""
    out: dict[str, Any] = {}
    for k, v in (storage_options or {}).items():
        key = _KEYS.get(str(k).lower())
        if key is None:
            raise ValueError(f"unknown S3 storage option {k!r}; known: {', '.join(sorted(_KEYS))}")
        if key == "virtual_hosted":
            key, v = "path_style", not _truthy(v)
        out[key] = v
    for key, names in _ENV.items():
        if key not in out:
            for name in names:
                if os.environ.get(name):
                    out[key] = os.environ[name]
                    break
    return out


def split_uri(path: str) -> tuple[str, str, str]:
    """`s3://bucket/a/b` -> ("s3", "bucket", "a/b") (no leading or trailing slash on the key)."""
    scheme, sep, rest = path.partition("://")
    if not sep or scheme.lower() not in SCHEMES:
        raise ValueError(f"not an S3 URI: {path!r} (expected s3://bucket/key)")
    bucket, _, key = rest.partition("/")
    if not bucket:
        raise ValueError(f"S3 URI without a bucket: {path!r}")
    return scheme.lower(), bucket, key.strip("/")


class ObjectEntry:
    """A listed object, shaped like the `os.DirEntry` of a file (`name`, `path`, `is_file()`, `stat()` with size and
    mtime): LIST answers carry both, so no HEAD is needed."""

    __slots__ = ("name", "path", "_size", "_mtime")

    def __init__(self, name: str, path: str, size: int, mtime: float):
        self.name, self.path, self._size, self._mtime = name, path, size, mtime

    def is_file(self) -> bool:
        return True

    def is_dir(self) -> bool:
        return False

    def stat(self) -> os.stat_result:
        return os.stat_result((stat_mod.S_IFREG | 0o644, 0, 0, 1, 0, 0, self._size,
                               int(self._mtime), int(self._mtime), int(self._mtime)))


# ---- random access and streaming writes --------------------------------------------------------------------------
class _RangedReader:
    """A read-only, seekable Python file over ranged GETs, for `pyarrow.PythonFile`. Reads fetch at least
    READ_BLOCK bytes and keep the last block, so a parquet footer (length, then metadata) costs one GET."""

    def __init__(self, store: S3Store, key: str, size: int):
        self._store, self._key, self._size = store, key, size
        self._pos = 0
        self._buf_start, self._buf = 0, b""
        self.closed = False

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def writable(self) -> bool:
        return False

    def size(self) -> int:
        return self._size

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = 0) -> int:
        base = {0: 0, 1: self._pos, 2: self._size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def read(self, n: int = -1) -> bytes:
        if n is None or n < 0:
            n = self._size - self._pos
        n = min(n, self._size - self._pos)
        if n <= 0:
            return b""
        start, end = self._pos, self._pos + n
        if not (self._buf_start <= start and end <= self._buf_start + len(self._buf)):
            # the end of the file fits in one block: fetch it whole (parquet reads the footer backwards)
            fetch_start = start if self._size - start > READ_BLOCK else max(0, self._size - READ_BLOCK)
            fetch_end = min(self._size, max(end, fetch_start + READ_BLOCK))
            _count("GET")
            self._buf = bytes(obstore.get_range(self._store, self._key, start=fetch_start, end=fetch_end))
            self._buf_start = fetch_start
        out = self._buf[start - self._buf_start:end - self._buf_start]
        self._pos = end
        return out

    def close(self) -> None:
        self.closed = True
        self._buf = b""


class _UploadWriter:
    """A write-only Python file that uploads on close: one PUT when the data fits in `chunk` bytes, else a
    multipart upload (create, one PUT per part of `chunk` bytes, complete). Nothing is visible under the key
    before close."""

    def __init__(self, store: S3Store, key: str, chunk: int = MULTIPART_CHUNK):
        self._writer = obstore.open_writer(store, key, buffer_size=chunk)
        self._chunk = chunk
        self._written = 0
        self.closed = False

    def writable(self) -> bool:
        return True

    def readable(self) -> bool:
        return False

    def seekable(self) -> bool:
        return False

    def tell(self) -> int:
        return self._written

    def write(self, data) -> int:
        view = memoryview(data)
        if view.format != "B" or not view.c_contiguous:  # pyarrow hands out views obstore will not take as bytes
            view = memoryview(view.tobytes())
        n = self._writer.write(view)
        self._written += n
        return n

    def flush(self) -> None:
        pass  # a flush of obstore's writer would end a part early: parts are sent as the buffer fills

    def close(self) -> None:
        if self.closed:
            return
        self._writer.close()
        self.closed = True
        if self._written <= self._chunk:
            _count("PUT")
        else:
            parts = -(-self._written // self._chunk)
            _count("POST", 2)  # CreateMultipartUpload, CompleteMultipartUpload
            _count("PUT", parts)


# ---- the backend ----------------------------------------------------------------------------------------------
class S3Storage(ConditionalStorage):
    """Storage on S3-compatible object stores. One object serves every bucket (a client per bucket, made on first
    use); thread-safe."""

    supports_append = False  # append_bytes rewrites the object (see the module docstring)

    def __init__(self, storage_options: dict | None = None):
        self.options = resolve_options(storage_options)
        if int(self.options.get("multipart_chunk_bytes", MULTIPART_CHUNK)) < MIN_PART:
            raise ValueError(f"multipart_chunk_bytes must be at least {MIN_PART} (S3's least part size)")
        self._stores: dict[str, S3Store] = {}
        self._guard = threading.Lock()

    # ---- clients ----
    def _client(self, bucket: str) -> S3Store:
        with self._guard:
            store = self._stores.get(bucket)
            if store is None:
                store = self._stores[bucket] = self._make_store(bucket)
            return store

    def _make_store(self, bucket: str) -> S3Store:
        o = self.options
        config: dict[str, Any] = {}
        for key in ("endpoint", "region", "access_key_id", "secret_access_key", "session_token"):
            if o.get(key):
                config[key] = str(o[key])
        if "path_style" in o:
            config["virtual_hosted_style_request"] = not _truthy(o["path_style"])
        elif config.get("endpoint"):  # a custom endpoint (MinIO, SeaweedFS, ...) rarely has bucket DNS names
            config["virtual_hosted_style_request"] = False
        client: dict[str, Any] = {}
        if "allow_http" in o:
            client["allow_http"] = _truthy(o["allow_http"])
        retry = {"max_retries": int(o.get("max_retries", 10)),
                 "retry_timeout": timedelta(seconds=float(o.get("retry_timeout_s", 180))),
                 "backoff": {"init_backoff": timedelta(milliseconds=float(o.get("backoff_init_ms", 100))),
                             "max_backoff": timedelta(milliseconds=float(o.get("backoff_max_ms", 15_000))),
                             "base": 2}}
        return S3Store(bucket, client_options=cast(Any, client), retry_config=cast(Any, retry), **config)

    def _loc(self, path: str) -> tuple[S3Store, str]:
        _scheme, bucket, key = split_uri(path)
        return self._client(bucket), key

    # ---- reads ----
    def _head(self, path: str) -> dict:
        store, key = self._loc(path)
        _count("HEAD")
        try:
            return cast(dict, obstore.head(store, key))
        except _NOT_FOUND:
            raise FileNotFoundError(path) from None

    def exists(self, path: str) -> bool:
        store, key = self._loc(path)
        if key:
            _count("HEAD")
            try:
                obstore.head(store, key)
                return True
            except _NOT_FOUND:
                pass
        return self._has_children(store, key)

    def isdir(self, path: str) -> bool:
        store, key = self._loc(path)
        return self._has_children(store, key)

    def _has_children(self, store: S3Store, key: str) -> bool:
        _count("LIST")
        for chunk in obstore.list(store, prefix=key + "/" if key else None, chunk_size=1):
            return bool(chunk)
        return False

    def size(self, path: str) -> int:
        return int(self._head(path)["size"])

    def mtime(self, path: str) -> float:
        return self._head(path)["last_modified"].timestamp()

    def read_bytes(self, path: str) -> bytes:
        return self.read_versioned(path)[0]

    def read_versioned(self, path: str) -> tuple[bytes, str]:
        store, key = self._loc(path)
        _count("GET")
        try:
            result = obstore.get(store, key)
            data = bytes(result.bytes())
        except _NOT_FOUND:
            raise FileNotFoundError(path) from None
        return data, str(result.meta["e_tag"])

    def read_range(self, path: str, offset: int, length: int) -> bytes:
        if length <= 0:
            return b""
        store, key = self._loc(path)
        _count("GET")
        try:
            return bytes(obstore.get_range(store, key, start=offset, length=length))  # S3 clips a range at the end
        except _NOT_FOUND:
            raise FileNotFoundError(path) from None
        except GenericError as e:
            if "416" in str(e):  # Range Not Satisfiable: the offset is at or past the end
                return b""
            raise

    def open_input(self, path: str) -> pa.NativeFile:
        store, key = self._loc(path)
        size = self.size(path)
        return pa.PythonFile(_RangedReader(store, key, size), mode="r")

    def open_input_sized(self, path: str, size: int) -> pa.NativeFile:
        store, key = self._loc(path)
        return pa.PythonFile(_RangedReader(store, key, size), mode="r")

    def _list_one_level(self, path: str) -> dict:
        store, key = self._loc(path)
        res = obstore.list_with_delimiter(store, key or None)
        # object_store follows continuation tokens itself: one request per page of 1000 entries
        _count("LIST", max(1, -(-(len(res["objects"]) + len(res["common_prefixes"])) // 1000)))
        return cast(dict, res)

    def listdir(self, path: str) -> list[str]:
        res = self._list_one_level(path)
        names = [p["path"].rsplit("/", 1)[-1] for p in res["objects"]]
        names += [p.rstrip("/").rsplit("/", 1)[-1] for p in res["common_prefixes"]]
        return names

    def scandir_files(self, path: str) -> Iterator[os.DirEntry]:
        res = self._list_one_level(path)
        base = path.rstrip("/")
        for meta in res["objects"]:
            name = meta["path"].rsplit("/", 1)[-1]
            # duck-typed: the format reads name, path, is_file() and stat().st_size/st_mtime of entries
            yield cast(os.DirEntry, ObjectEntry(name, f"{base}/{name}", int(meta["size"]),
                                                meta["last_modified"].timestamp()))

    def list_entries(self, path: str) -> tuple[list[str], list[str]]:
        # one LIST with a delimiter answers both: common prefixes are the directories (no LIST per name)
        res = self._list_one_level(path)
        dirs = [p.rstrip("/").rsplit("/", 1)[-1] for p in res["common_prefixes"]]
        files = [p["path"].rsplit("/", 1)[-1] for p in res["objects"]]
        if not dirs and not files:
            raise FileNotFoundError(errno.ENOENT, "no such directory", path)
        return dirs, files

    def list_tree(self, path: str) -> dict[str, list[os.DirEntry]]:
        scheme, bucket, key = split_uri(path)
        store = self._client(bucket)
        base = path.rstrip("/")
        prefix = key + "/" if key else ""
        out: dict[str, list[os.DirEntry]] = {}
        pages = 0
        for chunk in obstore.list(store, prefix=prefix or None, chunk_size=1000):
            pages += 1
            _count("LIST")
            for meta in chunk:
                rel = meta["path"][len(prefix):]
                d, _, name = rel.rpartition("/")
                out.setdefault(d, []).append(cast(os.DirEntry, ObjectEntry(
                    name, f"{base}/{rel}", int(meta["size"]), meta["last_modified"].timestamp())))
        if not pages:
            _count("LIST")
        return out

    def walk_files(self, path: str) -> Iterator[str]:
        scheme, bucket, key = split_uri(path)
        store = self._client(bucket)
        pages = 0
        for chunk in obstore.list(store, prefix=key + "/" if key else None, chunk_size=1000):
            pages += 1  # object_store fetches one page (1000 keys) per chunk
            _count("LIST")
            for meta in chunk:
                yield f"{scheme}://{bucket}/{meta['path']}"
        if not pages:
            _count("LIST")  # the request that found nothing

    # ---- writes ----
    def makedirs(self, path: str) -> None:
        pass  # prefixes exist as long as a key has them

    def fsync_dirs(self, dirs) -> None:
        pass  # a finished put is durable

    def fsync_file(self, path: str) -> None:
        pass  # (LocalStorage's extra, for callers that sync a `create_data_file` sink)

    def write_bytes(self, path: str, data: bytes, *, fsync: bool = True, stage_dir: str | None = None) -> None:
        store, key = self._loc(path)
        _count("PUT")
        obstore.put(store, key, data, use_multipart=False)

    def create_versioned(self, path: str, data: bytes) -> str | None:
        store, key = self._loc(path)
        _count("PUT")
        try:
            return str(obstore.put(store, key, data, mode="create", use_multipart=False)["e_tag"])
        except (AlreadyExistsError, PreconditionError) as e:
            return self._own_create(path, data) if _RETRIED.search(str(e)) else None

    def _own_create(self, path: str, data: bytes) -> str | None:
        """After a put-if-absent answered 412 on a retry: the object's version when it holds exactly `data` (our
        own first attempt succeeded, its answer was lost), else None (another writer's object). Empty content
        cannot tell whose it is: a loss, the safe direction."""
        if not data:
            return None
        try:
            held, version = self.read_versioned(path)
        except FileNotFoundError:
            return None  # created and deleted meanwhile: not ours to claim
        return version if held == data else None

    def put_if_absent(self, path: str, data: bytes, *, stage_dir: str | None = None) -> bool:
        """`stage_dir` (LocalStorage's lease fence) does not apply: the storage lock has no fence directory."""
        return self.create_versioned(path, data) is not None

    def create_empty_if_absent(self, path: str) -> bool:
        return self.create_versioned(path, b"") is not None

    def replace_if_match(self, path: str, data: bytes, version: str) -> str | None:
        store, key = self._loc(path)
        _count("PUT")
        try:
            return str(obstore.put(store, key, data, mode={"e_tag": version}, use_multipart=False)["e_tag"])
        except (PreconditionError, *_NOT_FOUND):
            return None

    def append_bytes(self, path: str, chunks: list[bytes], *, fsync: bool = True) -> int:
        add = b"".join(chunks)
        while True:
            try:
                old, version = self.read_versioned(path)
            except FileNotFoundError:
                if self.create_versioned(path, add) is not None:
                    return 0
                continue  # created meanwhile: append to that
            if self.replace_if_match(path, old + add, version) is not None:
                return len(old)

    def write_parquet(self, path: str, parts: list[pa.Table], *, row_group_size: int | None = None,
                      fsync: bool = True, **options) -> int:
        with self.create_data_file(path) as sink:
            with pq.ParquetWriter(sink, parts[0].schema, **options) as w:
                for t in parts:
                    w.write_table(t, row_group_size=row_group_size)
            size = sink.tell()
        return size

    def create_data_file(self, path: str) -> pa.NativeFile:
        store, key = self._loc(path)
        chunk = int(self.options.get("multipart_chunk_bytes", MULTIPART_CHUNK))
        return pa.PythonFile(_UploadWriter(store, key, chunk), mode="w")

    def rename(self, src: str, dst: str) -> None:
        """Copy, then delete: not atomic (the commit protocol does not rename on object stores)."""
        s_store, s_key = self._loc(src)
        d_store, d_key = self._loc(dst)
        if s_store is not d_store:
            self.write_bytes(dst, self.read_bytes(src))
        else:
            _count("PUT")  # CopyObject
            try:
                obstore.copy(s_store, s_key, d_key)
            except _NOT_FOUND:
                raise FileNotFoundError(src) from None
        store, key = self._loc(src)
        _count("DELETE")
        obstore.delete(store, key)

    def delete(self, path: str) -> bool:
        """HEAD, then DELETE: S3 answers a DELETE alike whether the key was there or not."""
        store, key = self._loc(path)
        _count("HEAD")
        try:
            obstore.head(store, key)
        except _NOT_FOUND:
            return False
        _count("DELETE")
        obstore.delete(store, key)
        return True

    def delete_tree(self, path: str) -> None:
        store, key = self._loc(path)
        keys = [split_uri(p)[2] for p in self.walk_files(path)]
        for i in range(0, len(keys), _DELETE_BATCH):
            batch = keys[i:i + _DELETE_BATCH]
            if len(batch) == 1:
                _count("DELETE")
            else:
                _count("POST")  # DeleteObjects
            obstore.delete(store, batch)


_BY_OPTIONS: dict[tuple, S3Storage] = {}
_BY_OPTIONS_LOCK = threading.Lock()


def configured(storage_options: dict) -> S3Storage:
    """The S3Storage of one set of storage options (per-table ones): tables with equal options share it and its
    clients. ValueError naming an unknown key."""
    resolved = resolve_options(storage_options)
    key = tuple(sorted((k, str(v)) for k, v in resolved.items()))
    with _BY_OPTIONS_LOCK:
        found = _BY_OPTIONS.get(key)
        if found is None:
            found = _BY_OPTIONS[key] = S3Storage(resolved)
        return found


def register(storage_options: dict | None = None) -> None:
    """Serve `s3://` and `s3a://` paths with an S3Storage (`storage_options`, else the AWS environment); tables
    given their own storage options get theirs (`configured`)."""
    for scheme in SCHEMES:
        register_storage(scheme, lambda _scheme: S3Storage(storage_options), configured)


__all__ = ["ObjectEntry", "S3Storage", "configured", "counting", "register", "request_counts", "resolve_options",
           "split_uri"]
