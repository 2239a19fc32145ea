"""Robust log file scanner.

A candidate block starts at each `#HUDI#` magic. It is accepted only if its
blockLength is plausible and within the file, the int64 at its claimed end equals
blockLength + 6, and version, type, header, contentLength, content and footer fill
the block exactly. Otherwise the bytes from that magic up to the next magic (or EOF)
are reported as one `CorruptBlock`, and the search for the next magic restarts
inside the damaged block's magic (at its second byte), never after its claimed
length, so a valid block that follows is always found, even one whose magic
overlaps the damaged magic's last `#` (`#HUDI#HUDI#`). Bytes before the first
magic or between blocks are reported the same way.

Legacy formatVersion 0 blocks (no type, header, footer or trailing size; not
written by any Hudi release that hudi-rs reads) are not decoded: they are
reported as corrupt with the reason "legacy log format version 0 block".
"""

from __future__ import annotations

import functools
import os
import struct
from dataclasses import dataclass
from typing import ClassVar, Iterable, Iterator

from hudilite.log.blocks import CommandBlock, LogBlock, make_block
from hudilite.log.format import (
    FORMAT_VERSION,
    LEGACY_FORMAT_VERSION,
    MAGIC,
    MIN_BLOCK_LENGTH,
    BlockType,
    list_log_files,
    log_file_sort_key,
)
from hudilite.storage.local import storage_for

_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_MAGIC_LEN = len(MAGIC)


@dataclass(frozen=True)
class CorruptBlock:
    """A damaged byte range [offset, offset + length) of a log file."""

    offset: int
    length: int
    reason: str
    path: str | None = None
    block_type: ClassVar[BlockType] = BlockType.CORRUPT


class _Damaged(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class _Cursor:
    """Bounded big-endian reads inside one block."""

    def __init__(self, buf, pos: int, end: int) -> None:
        self.buf, self.pos, self.end = buf, pos, end

    def skip(self, n: int, what: str) -> int:
        if n < 0 or self.pos + n > self.end:
            raise _Damaged(f"{what} at offset {self.pos} runs past the block end {self.end}")
        start = self.pos
        self.pos += n
        return start

    def i32(self, what: str) -> int:
        return _I32.unpack_from(self.buf, self.skip(4, what))[0]

    def i64(self, what: str) -> int:
        return _I64.unpack_from(self.buf, self.skip(8, what))[0]

    def raw(self, n: int, what: str) -> bytes:
        start = self.skip(n, what)
        return bytes(self.buf[start : start + n])

    def metadata(self, what: str) -> dict[int, str]:
        count = self.i32(f"{what} count")
        if count < 0 or count * 8 > self.end - self.pos:
            raise _Damaged(f"implausible {what} entry count {count}")
        entries = {}
        for i in range(count):
            key = self.i32(f"{what} entry {i} key")
            size = self.i32(f"{what} entry {i} length")
            try:
                entries[key] = self.raw(size, f"{what} entry {i} value").decode("utf-8")
            except UnicodeDecodeError as exc:
                raise _Damaged(f"{what} entry {i} is not UTF-8: {exc}") from exc
        return entries


def _parse_block(buf, pos: int, size: int, loader, path: str | None) -> LogBlock:
    """The block whose magic is at `pos`, or _Damaged."""
    length_at = pos + _MAGIC_LEN
    body = length_at + 8
    if body > size:
        raise _Damaged("truncated: the block length field is cut off")
    (length,) = _I64.unpack_from(buf, length_at)
    if length < MIN_BLOCK_LENGTH:
        raise _Damaged(f"implausible block length {length} (minimum {MIN_BLOCK_LENGTH})")
    end = body + length
    if end > size:
        raise _Damaged(f"block length {length} runs past the end of the file ({size - body} bytes left)")
    if _I32.unpack_from(buf, body)[0] == LEGACY_FORMAT_VERSION:
        raise _Damaged("legacy log format version 0 block (not supported)")
    (total,) = _I64.unpack_from(buf, end - 8)
    if total != length + _MAGIC_LEN:
        raise _Damaged(f"trailing block size {total} does not match block length {length} + {_MAGIC_LEN}")
    cur = _Cursor(buf, body, end - 8)
    version = cur.i32("format version")
    if version != FORMAT_VERSION:
        raise _Damaged(f"unknown log format version {version}")
    type_code = cur.i32("block type")
    try:
        block_type = BlockType(type_code)
    except ValueError:
        raise _Damaged(f"unknown block type {type_code}") from None
    header = cur.metadata("header")
    content_length = cur.i64("content length")
    content_at = cur.skip(content_length, f"content of {content_length} bytes")
    footer = cur.metadata("footer")
    if cur.pos != cur.end:
        raise _Damaged(f"block fields end {cur.end - cur.pos} bytes before the trailing block size")
    return make_block(
        block_type,
        header,
        None,
        footer,
        content_loader=functools.partial(loader, content_at, content_length),
        offset=pos,
        size=end - pos,
        path=path,
    )


def _scan(buf, size: int, loader, path: str | None) -> list[LogBlock | CorruptBlock]:
    items: list[LogBlock | CorruptBlock] = []
    pos = 0
    while pos < size:
        if buf[pos : pos + _MAGIC_LEN] == MAGIC:
            try:
                block = _parse_block(buf, pos, size, loader, path)
            except _Damaged as damaged:
                nxt = _next_magic(buf, pos + 1, size)
                items.append(CorruptBlock(pos, nxt - pos, damaged.reason, path))
                pos = nxt
            else:
                items.append(block)
                assert block.size is not None  # _parse_block sets it
                pos += block.size
        else:
            nxt = _next_magic(buf, pos, size)
            items.append(CorruptBlock(pos, nxt - pos, "bytes outside any block (no magic)", path))
            pos = nxt
    return items


def _next_magic(buf, start: int, size: int) -> int:
    found = buf.find(MAGIC, start)
    return size if found < 0 else found


def _read_range(path: str, offset: int, length: int) -> bytes:
    data = storage_for(path).read_range(path, offset, length)
    if len(data) != length:
        raise OSError(f"{path}: block content at {offset} is {len(data)} of {length} bytes (file changed?)")
    return data


def scan_log_file(source: str | os.PathLike | bytes | bytearray | memoryview) -> list[LogBlock | CorruptBlock]:
    """All blocks and corrupt ranges of one log file (a path, or its bytes), in file order.

    Block content is read lazily: from the file on first access, or sliced from the bytes.
    """
    if isinstance(source, (bytes, bytearray, memoryview)):
        data = bytes(source)
        return _scan(data, len(data), lambda offset, length: data[offset : offset + length], None)
    path = os.fspath(source)
    with storage_for(path).mapped(path) as buf:
        size = len(buf)
        if size == 0:
            return []
        return _scan(buf, size, functools.partial(_read_range, path), path)


class LogReader:
    """Scans the log files of one file slice in log order (instant, version, write token)."""

    def __init__(self, log_files: Iterable[str | os.PathLike], *, sort: bool = True) -> None:
        paths = [os.fspath(p) for p in log_files]
        if sort:
            paths.sort(key=log_file_sort_key)
        self.paths = paths
        self._scans: dict[str, list[LogBlock | CorruptBlock]] = {}

    @classmethod
    def for_file_group(
        cls, directory: str | os.PathLike, file_id: str, base_instant: str | None = None
    ) -> LogReader:
        """All log files of `file_id` in `directory` (optionally of one base instant)."""
        names = list_log_files(directory, file_id, base_instant)
        return cls([os.path.join(directory, n.name) for n in names], sort=False)

    def scan(self, path: str) -> list[LogBlock | CorruptBlock]:
        if path not in self._scans:
            self._scans[path] = scan_log_file(path)
        return self._scans[path]

    def __iter__(self) -> Iterator[LogBlock | CorruptBlock]:
        for path in self.paths:
            yield from self.scan(path)

    def corrupt_blocks(self) -> list[CorruptBlock]:
        return [item for item in self if isinstance(item, CorruptBlock)]

    def rollback_targets(self) -> set[str]:
        """Instants named by rollback command blocks in any of the files."""
        return {
            item.target_instant_time
            for item in self
            if isinstance(item, CommandBlock) and item.is_rollback and item.target_instant_time
        }

    def blocks(self, *, skip_rolled_back: bool = False) -> list[LogBlock]:
        """Valid blocks in order; optionally without rolled-back instants and the rollback commands."""
        blocks = [item for item in self if isinstance(item, LogBlock)]
        if not skip_rolled_back:
            return blocks
        targets = self.rollback_targets()
        return [
            b
            for b in blocks
            if b.instant_time not in targets and not (isinstance(b, CommandBlock) and b.is_rollback)
        ]
