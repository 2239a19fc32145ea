"""Write options: the API arguments plus `hoodie.*` keys with Apache Hudi's meanings."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from hudilite import options as o
from hudilite.config import COPY_ON_WRITE, MERGE_ON_READ
from hudilite.errors import InvalidWriteError
from hudilite.options import check_options
from hudilite.storage import is_local, normalize_path, storage_for
from hudilite.writer.transaction import check_concurrency_options


class _Unset:
    """Default of `precombine_field=` / `table_type=`: take the existing table's (a new table: none / COW).
    An explicit value, None included, must match an existing table's."""

    def __repr__(self):
        return "<the table's>"

    def __reduce__(self):
        return "UNSET"  # unpickled as the module's one instance, which `is UNSET` tests look for


UNSET = _Unset()

OPERATIONS = o.OPERATION.choices


def _as_list(v) -> list[str]:
    if v is None:
        return []
    if isinstance(v, str):
        return [s.strip() for s in v.split(",") if s.strip()]
    return [str(s) for s in v]


@dataclass
class WriteOptions:
    path: str
    record_key: list[str]
    precombine_field: str | None
    partition_by: list[str]
    operation: str
    table_type: str
    table_name: str
    hive_style: bool
    options: dict[str, str] = field(default_factory=dict)
    precombine_given: bool = False  # precombine_field= passed (None too): must match an existing table's
    table_type_given: bool = False  # table_type= (or its option) passed: must match an existing table's

    def get(self, option: o.Option):
        """The typed value of a declared option (hudilite.options) in this write's options."""
        return option.get(self.options)

    @property
    def target_file_bytes(self) -> int:
        return self.get(o.MAX_FILE_SIZE)

    @property
    def small_file_bytes(self) -> int:
        return self.get(o.SMALL_FILE_LIMIT)

    @property
    def record_size_estimate(self) -> int:
        return self.get(o.RECORD_SIZE_ESTIMATE)

    @property
    def row_group_rows(self) -> int:
        return self.get(o.BLOCK_ROWS)

    @property
    def compression(self) -> str:
        return self.get(o.COMPRESSION).lower()

    @property
    def multi_writer(self) -> bool:
        return self.get(o.CONCURRENCY_MODE).lower() in (
            "optimistic_concurrency_control", "occ", "non_blocking_concurrency_control", "nbcc")


_TT_ALIASES = {"COW": COPY_ON_WRITE, "MOR": MERGE_ON_READ}


def _check_path(path) -> str:
    """The table location, refused when it cannot be one: empty (it would be the working directory), a URI
    of a file system other than the local one, or an existing file that is not a directory."""
    if path is None or not str(os.fspath(path)).strip():
        raise InvalidWriteError(f"table path {path!r} is empty: pass the table's directory")
    try:
        local = normalize_path(path)
    except ValueError as e:
        raise InvalidWriteError(str(e)) from None
    fs = storage_for(local)
    if fs.exists(local) and not fs.isdir(local):
        raise InvalidWriteError(f"table path {path} is a file, not a directory")
    return path


def _same(arg: str, value, key: str, option, norm) -> None:
    """An argument and the option that means the same thing must not contradict each other."""
    if value and option and norm(value) != norm(option):
        raise InvalidWriteError(f"{arg}={value!r} contradicts option {key}={option!r}: pass one of them")


def resolve(path, record_key, precombine_field, partition_by, operation, table_type, options) -> WriteOptions:
    path = _check_path(path)
    opts = {str(k): str(v) for k, v in (options or {}).items()}
    check_options(opts)  # unknown keys (typos) and ill-typed values fail before anything is written
    check_concurrency_options(opts)  # concurrency mode, lock provider: bad values fail before anything is written
    rk = _as_list(record_key) or o.RECORD_KEY.get(opts, [])
    pcf_opt = o.PRECOMBINE.get(opts) or o.TABLE_PRECOMBINE.get(opts)
    pcf_given = precombine_field is not UNSET or bool(pcf_opt)
    pcf = (None if precombine_field is UNSET else precombine_field) or pcf_opt or None
    parts = _as_list(partition_by) or o.PARTITION_BY.get(opts, [])
    op = (operation or o.OPERATION.get(opts)).lower()
    if op not in OPERATIONS:
        raise InvalidWriteError(f"unknown operation {operation!r}; expected one of {', '.join(OPERATIONS)}")
    table_type = None if table_type is UNSET else table_type
    # the option's raw text in the messages below: the user's spelling
    _same("table_type", table_type, o.TABLE_TYPE.key, opts.get(o.TABLE_TYPE.key),
          lambda t: _TT_ALIASES.get(str(t).upper(), str(t).upper()))
    _same("precombine_field", None if precombine_field is UNSET else precombine_field, o.PRECOMBINE.key,
          opts.get(o.PRECOMBINE.key), str)
    _same("record_key", _as_list(record_key), o.RECORD_KEY.key, o.RECORD_KEY.get(opts, []), tuple)
    _same("partition_by", _as_list(partition_by), o.PARTITION_BY.key, o.PARTITION_BY.get(opts, []), tuple)
    _same("operation", operation, o.OPERATION.key, opts.get(o.OPERATION.key), lambda v: str(v).lower())
    tt_given = bool(table_type or opts.get(o.TABLE_TYPE.key))
    tt = (table_type or o.TABLE_TYPE.get(opts)).upper()
    tt = _TT_ALIASES.get(tt, tt)
    if tt not in (COPY_ON_WRITE, MERGE_ON_READ):
        raise InvalidWriteError(f"unknown table_type {table_type!r}; expected COPY_ON_WRITE or MERGE_ON_READ")
    if not rk:
        raise InvalidWriteError("record_key is required (one column name or a list of them)")
    tail = os.path.normpath(path) if is_local(path) else str(path).rstrip("/")  # normpath would fold a URI's //
    name = o.TABLE_NAME.get(opts) or os.path.basename(tail) or "table"
    hive = o.HIVE_STYLE.get(opts)
    return WriteOptions(path, rk, pcf, parts, op, tt, name, hive, opts, precombine_given=pcf_given,
                        table_type_given=tt_given)
