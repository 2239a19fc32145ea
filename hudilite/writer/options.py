"""Write options: the API arguments plus `hoodie.*` keys with Apache Hudi's meanings."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from hudilite.config import COPY_ON_WRITE, MERGE_ON_READ
from hudilite.errors import InvalidWriteError
from hudilite.options import check_options


class _Unset:
    """Default of `precombine_field=` / `table_type=`: take the existing table's (a new table: none / COW).
    An explicit value, None included, must match an existing table's."""

    def __repr__(self):
        return "<the table's>"


UNSET = _Unset()

OPERATIONS = ("bulk_insert", "insert", "upsert", "delete", "insert_overwrite", "insert_overwrite_table")
_BOOL_TRUE = ("true", "1", "yes")


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

    def get(self, key: str, default=None):
        return self.options.get(key, default)

    def get_int(self, key: str, default: int) -> int:
        v = self.options.get(key)
        try:
            return int(v) if v is not None else default
        except ValueError:
            raise InvalidWriteError(f"option {key}={v!r} is not an integer") from None

    def get_bool(self, key: str, default: bool) -> bool:
        v = self.options.get(key)
        return default if v is None else str(v).lower() in _BOOL_TRUE

    @property
    def target_file_bytes(self) -> int:
        return self.get_int("hoodie.parquet.max.file.size", 120 * 1024 * 1024)

    @property
    def small_file_bytes(self) -> int:
        return self.get_int("hoodie.parquet.small.file.limit", 100 * 1024 * 1024)

    @property
    def record_size_estimate(self) -> int:
        return self.get_int("hoodie.copyonwrite.record.size.estimate", 1024)

    @property
    def row_group_rows(self) -> int:
        return self.get_int("hoodie.parquet.block.rows", 131072)

    @property
    def compression(self) -> str:
        return str(self.get("hoodie.parquet.compression.codec", "snappy")).lower()

    @property
    def multi_writer(self) -> bool:
        return str(self.get("hoodie.write.concurrency.mode", "optimistic_concurrency_control")).lower() in (
            "optimistic_concurrency_control", "occ")


_TT_ALIASES = {"COW": COPY_ON_WRITE, "MOR": MERGE_ON_READ}


def _check_path(path) -> str:
    """The table location, refused when it cannot be one: empty (it would be the working directory), a URI
    of a file system other than the local one, or an existing file that is not a directory."""
    from hudilite.storage.local import normalize_path

    if path is None or not str(os.fspath(path)).strip():
        raise InvalidWriteError(f"table path {path!r} is empty: pass the table's directory")
    try:
        local = normalize_path(path)
    except ValueError as e:
        raise InvalidWriteError(str(e)) from None
    if os.path.exists(local) and not os.path.isdir(local):
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
    from hudilite.writer.transaction import check_concurrency_options

    check_concurrency_options(opts)  # concurrency mode, lock provider: bad values fail before anything is written
    rk = _as_list(record_key) or _as_list(opts.get("hoodie.datasource.write.recordkey.field"))
    pcf_opt = opts.get("hoodie.datasource.write.precombine.field") or opts.get("hoodie.table.precombine.field")
    pcf_given = precombine_field is not UNSET or bool(pcf_opt)
    pcf = (None if precombine_field is UNSET else precombine_field) or pcf_opt or None
    parts = _as_list(partition_by) or _as_list(opts.get("hoodie.datasource.write.partitionpath.field"))
    op = (operation or opts.get("hoodie.datasource.write.operation") or "upsert").lower()
    if op not in OPERATIONS:
        raise InvalidWriteError(f"unknown operation {operation!r}; expected one of {', '.join(OPERATIONS)}")
    table_type = None if table_type is UNSET else table_type
    _same("table_type", table_type, "hoodie.datasource.write.table.type",
          opts.get("hoodie.datasource.write.table.type"), lambda t: _TT_ALIASES.get(str(t).upper(), str(t).upper()))
    _same("precombine_field", None if precombine_field is UNSET else precombine_field,
          "hoodie.datasource.write.precombine.field", opts.get("hoodie.datasource.write.precombine.field"), str)
    _same("record_key", _as_list(record_key), "hoodie.datasource.write.recordkey.field",
          _as_list(opts.get("hoodie.datasource.write.recordkey.field")), tuple)
    _same("partition_by", _as_list(partition_by), "hoodie.datasource.write.partitionpath.field",
          _as_list(opts.get("hoodie.datasource.write.partitionpath.field")), tuple)
    _same("operation", operation, "hoodie.datasource.write.operation", opts.get("hoodie.datasource.write.operation"),
          lambda o: str(o).lower())
    tt_given = bool(table_type or opts.get("hoodie.datasource.write.table.type"))
    tt = (table_type or opts.get("hoodie.datasource.write.table.type") or COPY_ON_WRITE).upper()
    tt = _TT_ALIASES.get(tt, tt)
    if tt not in (COPY_ON_WRITE, MERGE_ON_READ):
        raise InvalidWriteError(f"unknown table_type {table_type!r}; expected COPY_ON_WRITE or MERGE_ON_READ")
    if not rk:
        raise InvalidWriteError("record_key is required (one column name or a list of them)")
    name = opts.get("hoodie.table.name") or os.path.basename(os.path.normpath(path)) or "table"
    hive = str(opts.get("hoodie.datasource.write.hive_style_partitioning", "true")).lower() in _BOOL_TRUE
    return WriteOptions(path, rk, pcf, parts, op, tt, name, hive, opts, precombine_given=pcf_given,
                        table_type_given=tt_given)
