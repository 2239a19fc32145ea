"""A test-only Storage over a dict, for `mem://` URIs: the proof that the core needs nothing beyond the Storage
interface (tests/unit/test_storage_seam.py).

Object-store semantics, deliberately: no directories (a "directory" is a key prefix, `makedirs` does nothing),
every write is a whole-object put, `put_if_absent` is a conditional put (atomic under one lock), a rename is a
copy and a delete. Every mutating call first calls `self.fail(op, path)` when it is set (fault injection).
"""

from __future__ import annotations

import io
import threading
import time
from dataclasses import dataclass
from typing import Callable, Iterator

import pyarrow as pa
import pyarrow.parquet as pq

from hudilite.storage import Storage


@dataclass
class _Stat:
    st_size: int
    st_mtime: float


@dataclass
class _Entry:
    name: str
    path: str
    _stat: _Stat

    def stat(self) -> _Stat:
        return self._stat

    def is_file(self) -> bool:
        return True


class _Sink(io.BytesIO):
    """A data file being written: put as a whole when closed (an object store's upload)."""

    def __init__(self, store: MemStorage, path: str):
        super().__init__()
        self.store, self.path = store, path

    def close(self) -> None:
        if not self.closed:
            self.store._put(self.path, self.getvalue())
        super().close()


class MemStorage(Storage):
    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}
        self.mtimes: dict[str, float] = {}
        self.lock = threading.Lock()
        self.fail: Callable[[str, str], None] | None = None
        self.ops: list[tuple[str, str]] = []

    def _key(self, path: str) -> str:
        return path.rstrip("/")

    def _mutate(self, op: str, path: str) -> None:
        self.ops.append((op, path))
        if self.fail is not None:
            self.fail(op, path)

    def _put(self, path: str, data: bytes) -> None:
        with self.lock:
            self.objects[self._key(path)] = bytes(data)
            self.mtimes[self._key(path)] = time.time()

    def _get(self, path: str) -> bytes:
        try:
            return self.objects[self._key(path)]
        except KeyError:
            raise FileNotFoundError(path) from None

    # ---- reads
    def exists(self, path: str) -> bool:
        return self._key(path) in self.objects or self.isdir(path)

    def isdir(self, path: str) -> bool:
        prefix = self._key(path) + "/"
        return any(k.startswith(prefix) for k in list(self.objects))

    def size(self, path: str) -> int:
        return len(self._get(path))

    def mtime(self, path: str) -> float:
        self._get(path)
        return self.mtimes[self._key(path)]

    def read_bytes(self, path: str) -> bytes:
        return self._get(path)

    def read_range(self, path: str, offset: int, length: int) -> bytes:
        return self._get(path)[offset:offset + length]

    def open_input(self, path: str) -> pa.NativeFile:
        return pa.BufferReader(self._get(path))

    def _children(self, path: str) -> dict[str, bool]:
        """Names directly under `path` -> whether a directory."""
        prefix = self._key(path) + "/"
        out: dict[str, bool] = {}
        for k in list(self.objects):
            if k.startswith(prefix):
                name, sep, _ = k[len(prefix):].partition("/")
                out[name] = out.get(name, False) or bool(sep)
        return out

    def listdir(self, path: str) -> list[str]:
        return sorted(self._children(path))

    def scandir_files(self, path: str) -> Iterator:
        base = self._key(path)
        for name, is_dir in sorted(self._children(path).items()):
            if not is_dir:
                p = f"{base}/{name}"
                yield _Entry(name, p, _Stat(len(self.objects[p]), self.mtimes[p]))

    def walk_files(self, path: str) -> Iterator[str]:
        prefix = self._key(path) + "/"
        yield from sorted(k for k in list(self.objects) if k.startswith(prefix))

    # ---- writes
    def makedirs(self, path: str) -> None:
        pass

    def write_bytes(self, path: str, data: bytes, *, fsync: bool = True, stage_dir: str | None = None) -> None:
        self._mutate("write", path)
        self._put(path, data)

    def put_if_absent(self, path: str, data: bytes, *, stage_dir: str | None = None) -> bool:
        self._mutate("put_if_absent", path)
        with self.lock:
            if self._key(path) in self.objects:
                return False
            self.objects[self._key(path)] = bytes(data)
            self.mtimes[self._key(path)] = time.time()
            return True

    def create_empty_if_absent(self, path: str) -> bool:
        return self.put_if_absent(path, b"")

    def append_bytes(self, path: str, chunks: list[bytes], *, fsync: bool = True) -> int:
        self._mutate("append", path)
        with self.lock:
            old = self.objects.get(self._key(path), b"")
            self.objects[self._key(path)] = old + b"".join(chunks)
            self.mtimes[self._key(path)] = time.time()
            return len(old)

    def write_parquet(self, path: str, parts: list[pa.Table], *, row_group_size: int | None = None,
                      fsync: bool = True, **options) -> int:
        self._mutate("write_data", path)
        sink = pa.BufferOutputStream()
        with pq.ParquetWriter(sink, parts[0].schema, **options) as w:
            for t in parts:
                w.write_table(t, row_group_size=row_group_size)
        data = sink.getvalue().to_pybytes()
        self._put(path, data)
        return len(data)

    def create_data_file(self, path: str) -> pa.NativeFile:
        self._mutate("write_data", path)
        return pa.PythonFile(_Sink(self, path), mode="w")

    def rename(self, src: str, dst: str) -> None:
        self._mutate("rename", dst)
        with self.lock:
            data = self.objects.pop(self._key(src))
            self.mtimes.pop(self._key(src))
            self.objects[self._key(dst)] = data
            self.mtimes[self._key(dst)] = time.time()

    def delete(self, path: str) -> bool:
        self._mutate("delete", path)
        with self.lock:
            self.mtimes.pop(self._key(path), None)
            return self.objects.pop(self._key(path), None) is not None

    def delete_tree(self, path: str) -> None:
        self._mutate("delete_tree", path)
        prefix = self._key(path) + "/"
        with self.lock:
            for k in [k for k in self.objects if k.startswith(prefix) or k == self._key(path)]:
                del self.objects[k]
                self.mtimes.pop(k, None)

    def fsync_dirs(self, dirs) -> None:
        pass
