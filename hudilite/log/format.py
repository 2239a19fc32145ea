"""Hudi log file constants, block/header enums and log file names (hudi-format.md §7)."""

from __future__ import annotations

import errno
import os
import re
from dataclasses import dataclass
from enum import IntEnum

from hudilite.errors import HudiliteError
from hudilite.options import LOG_MAX_SIZE
from hudilite.storage import storage_for

MAGIC = b"#HUDI#"
FORMAT_VERSION = 1
LEGACY_FORMAT_VERSION = 0
DATA_BLOCK_VERSION = 3
"""Version int written first in AVRO_DATA and DELETE block content."""

# formatVersion, blockType, header count, contentLength, footer count, totalBlockSize.
MIN_BLOCK_LENGTH = 4 + 4 + 4 + 8 + 4 + 8

LOG_FILE_MAX_SIZE_KEY = LOG_MAX_SIZE.key
DEFAULT_LOG_FILE_MAX_SIZE = LOG_MAX_SIZE.default


class LogFormatError(HudiliteError, ValueError):
    """Log content that cannot be encoded or decoded."""


class BlockType(IntEnum):
    COMMAND = 0
    DELETE = 1
    CORRUPT = 2
    AVRO_DATA = 3
    HFILE_DATA = 4
    PARQUET_DATA = 5
    CDC_DATA = 6


class HeaderKey(IntEnum):
    INSTANT_TIME = 0
    TARGET_INSTANT_TIME = 1
    SCHEMA = 2
    COMMAND_BLOCK_TYPE = 3
    COMPACTED_BLOCK_TIMES = 4
    RECORD_POSITIONS = 5
    BLOCK_IDENTIFIER = 6
    IS_PARTIAL = 7
    BASE_FILE_INSTANT_TIME_OF_RECORD_POSITIONS = 8


class CommandType(IntEnum):
    ROLLBACK = 0


def header_key(key: int) -> HeaderKey | int:
    """The HeaderKey for a raw key number; unknown numbers stay plain ints."""
    try:
        return HeaderKey(key)
    except ValueError:
        return key


_MIDDLE = re.compile(r"([0-9]+)\.log\.([0-9]+)")
_DIGITS = re.compile(r"[0-9]+")


@dataclass(frozen=True)
class LogFileName:
    """A parsed log file name `.<fileId>_<instant>.log.<version>_<writeToken>`.

    `instant` is the base instant of the slice in table version 6 and the writing
    deltacommit in versions 8/9.
    """

    file_id: str
    instant: str
    version: int
    write_token: str

    @property
    def name(self) -> str:
        return f".{self.file_id}_{self.instant}.log.{self.version}_{self.write_token}"

    @property
    def sort_key(self) -> tuple[str, int, str]:
        """(instant, version, write token): the order of log files within a slice."""
        return (self.instant, self.version, self.write_token)

    def __str__(self) -> str:
        return self.name


def parse_log_file_name(name: str | os.PathLike) -> LogFileName:
    """Parse a log file name (a path is reduced to its base name) as hudi-rs does.

    The name is split at the first and the last `_`; the middle must be
    `<instant>.log.<version>`. Raises ValueError on any other shape.
    """
    base = os.path.basename(os.fspath(name))
    if not base.startswith("."):
        raise ValueError(f"not a log file name (no leading dot): {base!r}")
    rest = base[1:]
    first, last = rest.find("_"), rest.rfind("_")
    if first <= 0 or last == first or last == len(rest) - 1:
        raise ValueError(f"not a log file name (expected .<fileId>_<instant>.log.<version>_<token>): {base!r}")
    middle = _MIDDLE.fullmatch(rest[first + 1 : last])
    if middle is None:
        raise ValueError(f"not a log file name (middle is not <instant>.log.<version>): {base!r}")
    return LogFileName(rest[:first], middle.group(1), int(middle.group(2)), rest[last + 1 :])


def try_parse_log_file_name(name: str | os.PathLike) -> LogFileName | None:
    """Like parse_log_file_name, but None for names of another shape."""
    try:
        return parse_log_file_name(name)
    except ValueError:
        return None


def is_log_file_name(name: str | os.PathLike) -> bool:
    return try_parse_log_file_name(name) is not None


def format_log_file_name(file_id: str, instant: str, version: int, write_token: str) -> str:
    """Build a log file name; rejects parts that would not parse back identically."""
    if not file_id or "_" in file_id or "/" in file_id:
        raise ValueError(f"invalid file id for a log file name: {file_id!r}")
    if not _DIGITS.fullmatch(instant):
        raise ValueError(f"instant must be digits: {instant!r}")
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise ValueError(f"log version must be an int >= 1: {version!r}")
    if not write_token or "_" in write_token or "/" in write_token:
        raise ValueError(f"invalid write token: {write_token!r}")
    return LogFileName(file_id, instant, version, write_token).name


def log_file_sort_key(name: str | os.PathLike | LogFileName) -> tuple[str, int, str]:
    """Sort key (instant, version, write token) of a log file name or path."""
    parsed = name if isinstance(name, LogFileName) else parse_log_file_name(name)
    return parsed.sort_key


def list_log_files(
    directory: str | os.PathLike, file_id: str | None = None, instant: str | None = None
) -> list[LogFileName]:
    """Log files in `directory` (optionally of one file id / instant), sorted."""
    found = []
    directory = os.fspath(directory)
    fs = storage_for(directory)
    names = fs.listdir(directory)
    if not names and not fs.isdir(directory):
        raise FileNotFoundError(errno.ENOENT, "no such directory", directory)
    for entry in names:
        parsed = try_parse_log_file_name(entry)
        if parsed is None:
            continue
        if file_id is not None and parsed.file_id != file_id:
            continue
        if instant is not None and parsed.instant != instant:
            continue
        found.append(parsed)
    found.sort(key=log_file_sort_key)
    return found
