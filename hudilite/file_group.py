"""File groups and file slices: base file names, slices per base instant, grouping of a partition's files."""

from __future__ import annotations

import os
import re
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hudilite.log.format import LogFileName

BASE_EXTENSIONS = (".parquet", ".lance", ".hfile", ".orc")
_BASE_RE = re.compile(r"^([^_]+)_([^_]+)_(\d{14}|\d{17})(\.[A-Za-z0-9]+)$")


@dataclass(frozen=True)
class BaseFile:
    partition: str
    file_id: str
    write_token: str
    instant: str
    name: str
    path: str
    size: int = 0

    @property
    def extension(self) -> str:
        return os.path.splitext(self.name)[1]


def parse_base_file_name(name: str) -> tuple[str, str, str, str] | None:
    """(fileId, writeToken, instant, extension) of a base file name, or None."""
    m = _BASE_RE.match(name)
    if not m:
        return None
    return m.group(1), m.group(2), m.group(3), m.group(4)


def base_file_name(file_id: str, write_token: str, instant: str, ext: str = ".parquet") -> str:
    return f"{file_id}_{write_token}_{instant}{ext}"


def new_file_id(n: int = 0) -> str:
    """Java's shape: <uuid4>-<n>; contains no underscore."""
    return f"{uuid.uuid4()}-{n}"


def write_token(partition_id: int, stage_id: int, attempt_id: int) -> str:
    return f"{partition_id}-{stage_id}-{attempt_id}"


@dataclass(frozen=True)
class LogFile:
    partition: str
    name: LogFileName
    path: str
    size: int = 0

    @property
    def file_id(self) -> str:
        return self.name.file_id

    @property
    def base_instant(self) -> str:
        return self.name.instant


@dataclass
class FileSlice:
    partition: str
    file_id: str
    base_instant: str
    base_file: BaseFile | None = None
    # LogFile, in log order (fs_view: instant or completion, version, token)
    log_files: list = field(default_factory=list)

    @property
    def files(self) -> list[str]:
        out = [self.base_file.path] if self.base_file else []
        out.extend(lf.path for lf in self.log_files)
        return out


@dataclass
class FileGroup:
    partition: str
    file_id: str
    slices: dict[str, FileSlice] = field(default_factory=dict)  # base instant -> slice

    def latest_slice(self, as_of: str | None = None) -> FileSlice | None:
        keys = sorted(k for k in self.slices if as_of is None or k <= as_of)
        return self.slices[keys[-1]] if keys else None
