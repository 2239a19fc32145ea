"""The catalogue of bad input (issue 24): every case is one bad write, read or table state, the error it must
raise (type and the fragments its message must contain) and the proof that the table's files are unchanged.

The cases run without Spark (pyarrow writes, `read_arrow` reads: the same planner and merge as `hudilite.read`).
`tests/functional/test_bad_input_catalogue.py` runs each one, and checks that `docs/bad-input.md` is what
`python -m tests.functional.bad_input_catalogue` generates from them (run it after changing a case).

A case: `setup(path)` prepares the table (damage, a pending write ...) before the snapshot of its files; `act(path)`
is the bad input. Both get the path of a fresh copy of a template table (`table=`: "cow", "mor"; "none": a path
in an empty directory, nothing there). The snapshot maps every file's relative path to (sha256, size,
mtime_ns) and lists every directory; after the failure it must be identical (only the empty working directories
below may appear).
"""

from __future__ import annotations

import atexit
import datetime as dt
import contextlib
import hashlib
import json
import os
import re
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from typing import Callable

import pyarrow as pa
import pyarrow.parquet as pq

import hudilite
from hudilite.errors import (CommitConflictError, CorruptTableError, HudiliteError, InvalidWriteError,
                             TableNotFoundError)
from hudilite.storage import storage_for

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DOC = os.path.join(ROOT, "docs", "bad-input.md")
WORK_DIRS = {".hoodie/.locks", ".hoodie/.heartbeat", ".hoodie/.temp"}
WRITE = {"record_key": "id", "precombine_field": "v", "partition_by": "part"}
V6 = {"hoodie.write.table.version": "6"}


# ---- the table snapshot ---------------------------------------------------------------------------------
def file_tree(path: str) -> dict[str, tuple] | None:
    """Every file under `path`: relative path -> (sha256, size, mtime_ns); every directory: relative path + "/"
    -> (). None: nothing at `path`."""
    if not os.path.lexists(path):
        return None
    if not os.path.isdir(path):
        st = os.stat(path)
        with open(path, "rb") as f:
            return {".": (hashlib.sha256(f.read()).hexdigest(), st.st_size, st.st_mtime_ns)}
    out: dict[str, tuple] = {}
    for root, dirs, files in os.walk(path):
        for d in dirs:
            out[os.path.relpath(os.path.join(root, d), path) + "/"] = ()
        for name in files:
            full = os.path.join(root, name)
            st = os.stat(full)
            with open(full, "rb") as f:
                out[os.path.relpath(full, path)] = (hashlib.sha256(f.read()).hexdigest(), st.st_size, st.st_mtime_ns)
    return out


def assert_files_unchanged(path: str, before: dict | None) -> None:
    """`path` holds exactly the files of `before`, byte for byte and untouched (size, mtime); only the empty
    working directories WORK_DIRS may have appeared."""
    after = file_tree(path)
    if before is None or after is None:
        assert after == before, f"{path}: {'created' if before is None else 'removed'}"
        return
    extra = {k for k in set(after) - set(before) if not (k.endswith("/") and k[:-1] in WORK_DIRS)}
    missing = set(before) - set(after)
    changed = {k for k in set(before) & set(after) if before[k] != after[k]}
    assert not (extra or missing or changed), (
        f"table files changed: added={sorted(extra)} removed={sorted(missing)} changed={sorted(changed)}")


# ---- reading without Spark ------------------------------------------------------------------------------
def read_arrow(path: str, **kw) -> pa.Table:
    """The table's rows as `hudilite.read` plans and merges them, in this process."""
    from hudilite.reader.merge import SliceDesc, merge_slice, read_base
    from hudilite.reader.planner import plan_read

    plan = plan_read(path, **kw)
    spec = plan.merge_spec()
    parts = [read_base(f, spec) for f in plan.plain_files]
    parts += [merge_slice(SliceDesc.of(sl), spec) for sl in plan.merged_slices]
    return pa.concat_tables(parts) if parts else pa.table({})


# ---- data -----------------------------------------------------------------------------------------------
def rows(ids, v=1, **cols) -> pa.Table:
    data = {"id": pa.array(ids, pa.int64()), "part": pa.array([f"p{i % 2}" for i in ids]),
            "v": v if isinstance(v, pa.Array) else pa.array([v] * len(ids), pa.int64()),
            "s": pa.array([f"s{i}" for i in ids])}
    for k, val in cols.items():
        data[k] = val if isinstance(val, pa.Array) else pa.array(val)
    return pa.table(data)


def write(path, data=None, **kw):
    return hudilite.write(rows([1, 2]) if data is None else data, path, **{**WRITE, **kw})


def _templates() -> dict[str, str]:
    d = os.path.join(tempfile.gettempdir(), f"hudilite-bad-input-templates-{os.getpid()}")
    # cow6/mor6: version 6 whatever the default, for cases that damage layout-1 JSON commit files
    kinds = {"cow": ("COPY_ON_WRITE", {}), "mor": ("MERGE_ON_READ", {}),
             "cow6": ("COPY_ON_WRITE", V6), "mor6": ("MERGE_ON_READ", V6)}
    out = {name: os.path.join(d, name) for name in kinds}
    if not os.path.isdir(d):
        tmp = d + ".tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        for name, (tt, opts) in kinds.items():
            p = os.path.join(tmp, name)
            write(p, rows(list(range(20))), table_type=tt, options=opts)
            write(p, rows([1, 2, 3, 30], v=2))
        os.rename(tmp, d)
        atexit.register(shutil.rmtree, d, True)
    return out


# ---- the cases ------------------------------------------------------------------------------------------
@dataclass
class Case:
    category: str
    input: str  # what was tried, in words
    error: type
    fragments: tuple[str, ...]  # the message names the problem with these
    act: Callable[[str], object]
    setup: Callable[[str], object] | None = None
    table: str = "cow"
    name: str = ""
    regression: str = ""  # a bug this case found (fixed)
    # a failing PendingWrite.complete() rolls its own write back: its files (named by its instant) go, nothing
    # else changes
    rolls_back: bool = False
    message: str = field(default="", init=False)


CASES: list[Case] = []


def case(category, input, error, *fragments, table="cow", setup=None, regression="", rolls_back=False):
    def deco(fn):
        CASES.append(Case(category, input, error, fragments, fn, setup, table, fn.__name__, regression, rolls_back))
        return fn
    return deco


# keys ----------------------------------------------------------------------------------------------------
@case("keys", "null record key (upsert)", InvalidWriteError, "1 row(s) have a null or empty record key", "id")
def null_key(p):
    write(p, pa.table({**rows([1, 2]).to_pydict(), "id": pa.array([1, None], pa.int64())}))


@case("keys", "empty string record key", InvalidWriteError, "1 row(s) have a null or empty record key",
      table="none")
def empty_key(p):
    write(p, pa.table({"id": ["a", ""], "part": ["p0", "p1"], "v": [1, 1]}), record_key="id")


@case("keys", "null record key in a delete", InvalidWriteError, "null or empty record key")
def null_key_delete(p):
    write(p, pa.table({**rows([1, 2]).to_pydict(), "id": pa.array([None, 2], pa.int64())}), operation="delete")


@case("keys", "composite key with every part null", InvalidWriteError, "1 row(s) have a null or empty record key",
      "id, s", table="none")
def null_composite_key(p):
    write(p, pa.table({"id": pa.array([1, None], pa.int64()), "part": ["p0", "p1"], "v": [1, 1],
                       "s": pa.array(["a", None])}), record_key=["id", "s"])


@case("keys", "record key column missing from the data", InvalidWriteError, "record key field 'id'",
      "is not a column of the data")
def missing_key_column(p):
    write(p, rows([1]).drop_columns(["id"]))


@case("keys", "record key field that is not the table's", InvalidWriteError,
      "record key ['s'] does not match the table's record key ['id']")
def other_key(p):
    write(p, record_key="s")


@case("keys", "nested record key field that does not exist (`info.id`)", InvalidWriteError, "info.id")
def nested_key_missing(p):
    write(p, record_key="info.id")


@case("keys", "record key of a nested field (a struct's member)", InvalidWriteError,
      "record key field 'info.id' is a nested field: record key fields are top-level columns", table="none",
      regression="its message said the field was not a column of the data")
def nested_record_key(p):
    write(p, rows([1, 2], info=pa.array([{"id": 1}, {"id": 2}])), record_key="info.id")


@case("keys", "record key of a struct column", InvalidWriteError, "info", table="none")
def struct_key(p):
    write(p, rows([1, 2], info=pa.array([{"a": 1}, {"a": 2}])), record_key="info")


# ordering values -----------------------------------------------------------------------------------------
@case("ordering values", "null precombine value", InvalidWriteError, "1 row(s) have a null precombine field 'v'")
def null_precombine(p):
    write(p, rows([1, 2], v=pa.array([1, None], pa.int64())))


@case("ordering values", "precombine column missing from the data", InvalidWriteError, "precombine field 'v'",
      "is not a column of the data")
def missing_precombine(p):
    write(p, rows([1]).drop_columns(["v"]))


@case("ordering values", "precombine field that is not the table's", InvalidWriteError,
      "precombine field 's' does not match the table's 'v'")
def other_precombine(p):
    write(p, precombine_field="s")


@case("ordering values", "precombine_field=None on a table that orders records", InvalidWriteError,
      "precombine_field=None, but the table orders records by 'v'")
def none_precombine(p):
    write(p, precombine_field=None)


@case("ordering values", "precombine values of another type (string for long)", InvalidWriteError, "column 'v'",
      "cannot change type from int64 to string")
def precombine_type(p):
    write(p, rows([1, 2], v=pa.array(["1", "2"])))


@case("ordering values", "precombine field of a struct type (cannot be ordered)", InvalidWriteError, "info",
      table="none", regression='accepted: a struct ordering field was written')
def precombine_struct(p):
    write(p, rows([1, 2], info=pa.array([{"a": 1}, {"a": 2}])), precombine_field="info")


# types ---------------------------------------------------------------------------------------------------
@case("types", "column type change long -> string (the record key column)", InvalidWriteError, "column 'id'",
      "cannot change type from int64 to string")
def type_change_key(p):
    write(p, rows([1, 2]).set_column(0, "id", pa.array(["1", "2"])))


@case("types", "record key column widened long -> double (its stored keys '1' would become '1.0')",
      InvalidWriteError, "column 'id': a record key column cannot change type from int64 to double",
      "an upsert of a stored record would add a second one", regression="a Spark write took it: the same key stored twice")
def key_widened_to_double(p):
    write(p, rows([1, 2]).set_column(0, "id", pa.array([1.0, 2.0])))


@case("types", "partition column widened int -> double (its paths part=1 would become part=1.0)",
      InvalidWriteError, "column 'part': a partition column cannot change type from int32 to double",
      "one value would get a second partition", table="none",
      setup=lambda p: write(p, rows([1, 2], part=pa.array([1, 2], pa.int32()))),
      regression="a Spark write took it: p=10 and p=10.0 for one value")
def partition_widened_to_double(p):
    write(p, rows([1, 2], part=pa.array([1.0, 2.0])))


@case("types", "column type change string -> long", InvalidWriteError, "column 's'", "cannot change type")
def type_change_string_long(p):
    write(p, rows([1, 2]).set_column(3, "s", pa.array([1, 2], pa.int64())))


@case("types", "column type change long -> boolean", InvalidWriteError, "column 'v'",
      "cannot change type from int64 to bool")
def type_change_bool(p):
    write(p, rows([1, 2], v=pa.array([True, False])))


@case("types", "timestamps with a time zone into a wall-clock (TIMESTAMP_NTZ) column", InvalidWriteError, "column 't'",
      "TIMESTAMP_NTZ", table="none",
      setup=lambda p: write(p, rows([1, 2], t=pa.array([dt.datetime(2024, 1, 1, 11)] * 2, pa.timestamp("us")))))
def aware_into_wall_clock(p):
    write(p, rows([3], t=pa.array([dt.datetime(2024, 1, 1, 11, tzinfo=dt.timezone.utc)], pa.timestamp("us", "UTC"))))


@case("types", "unsupported type: duration", InvalidWriteError, "d", table="none")
def duration_type(p):
    write(p, rows([1, 2], d=pa.array([1, 2], pa.duration("s"))))


@case("types", "unsupported type: month/day/nano interval", InvalidWriteError, "iv", table="none")
def interval_type(p):
    write(p, rows([1, 2], iv=pa.array([(1, 2, 3), (4, 5, 6)], pa.month_day_nano_interval())))


@case("types", "column of the null type (no values, no type)", InvalidWriteError, "n", table="none")
def null_type(p):
    write(p, rows([1, 2], n=pa.nulls(2)))


@case("types", "a decimal of 40 digits (Spark's, Flink's and Arrow's decimals hold 38)", InvalidWriteError,
      "column 'amount': decimal precision 40 > 38", "Apache Hudi's readers cannot read it")
def decimal_beyond_38_digits(p):
    write(p, rows([3], amount=pa.array([12], pa.int64()).cast(pa.decimal256(40, 2))))


# schemas -------------------------------------------------------------------------------------------------
@case("schemas", "duplicate column names", InvalidWriteError, "duplicate", "s", table="none")
def duplicate_columns(p):
    t = rows([1, 2])
    write(p, t.append_column("s", pa.array(["x", "y"])))


@case("schemas", "empty column name", InvalidWriteError, "is not a valid Avro field name", table="none")
def empty_column_name(p):
    write(p, rows([1, 2]).append_column("", pa.array(["x", "y"])))


@case("schemas", "column `_hoodie_is_deleted` (Hudi's delete marker) not boolean", InvalidWriteError,
      "_hoodie_is_deleted", "boolean", regression='raised a raw ArrowInvalid (Spark writes: the marker was silently ignored)')
def is_deleted_not_bool(p):
    write(p, rows([1, 2], _hoodie_is_deleted=["yes", "no"]))


@case("schemas", "record key column dropped from a later write (key column missing)", InvalidWriteError,
      "record key field 'id'")
def dropped_key_column(p):
    write(p, rows([5]).drop_columns(["id"]), record_key="id")


@case("schemas", "partition column missing from the data", InvalidWriteError,
      "partition field 'part' of the table is not a column of the data")
def missing_partition_column(p):
    write(p, rows([1]).drop_columns(["part"]), partition_by=())


@case("schemas", "partition fields that are not the table's", InvalidWriteError,
      "partition fields ['s'] do not match the table's ['part']")
def other_partition(p):
    write(p, partition_by="s")


@case("schemas", "partition column of a struct type", InvalidWriteError, "info", table="none")
def struct_partition(p):
    write(p, rows([1, 2], info=pa.array([{"a": 1}, {"a": 2}])), partition_by="info")


# options -------------------------------------------------------------------------------------------------
@case("options", "misspelled option key", InvalidWriteError, "hoodie.cleaner.commits.retaind",
      "did you mean hoodie.cleaner.commits.retained")
def misspelled_option(p):
    write(p, options={"hoodie.cleaner.commits.retaind": "3"})


@case("options", "unknown option key", InvalidWriteError, "foo.bar", "docs/options.md")
def unknown_option(p):
    write(p, options={"foo.bar": "1"})


@case("options", "integer option with a non-integer value", InvalidWriteError,
      "hoodie.parquet.max.file.size='big': expected an integer")
def bad_int_option(p):
    write(p, options={"hoodie.parquet.max.file.size": "big"})


@case("options", "boolean option with a non-boolean value", InvalidWriteError,
      "hoodie.clean.automatic='sometimes': expected true or false")
def bad_bool_option(p):
    write(p, options={"hoodie.clean.automatic": "sometimes"})


@case("options", "table_type that is not the table's", InvalidWriteError,
      "table_type MERGE_ON_READ does not match the table's COPY_ON_WRITE")
def other_table_type(p):
    write(p, table_type="MERGE_ON_READ")


@case("options", "unknown table_type", InvalidWriteError, "MERGE_ON_WRITE", table="none")
def unknown_table_type(p):
    write(p, table_type="MERGE_ON_WRITE")


@case("options", "unknown operation", InvalidWriteError, "unknown operation 'merge'", "upsert")
def unknown_operation(p):
    write(p, operation="merge")


@case("options", "table type option contradicting the table_type argument", InvalidWriteError,
      "COPY_ON_WRITE", "MERGE_ON_READ", table="none", regression='accepted: the argument silently won over the option')
def contradicting_table_type(p):
    write(p, table_type="MERGE_ON_READ", options={"hoodie.datasource.write.table.type": "COPY_ON_WRITE"})


@case("options", "record key option contradicting the record_key argument", InvalidWriteError,
      "record_key=['id'] contradicts option hoodie.datasource.write.recordkey.field=['s']",
      regression="accepted: the argument silently won over the option")
def contradicting_record_key(p):
    write(p, options={"hoodie.datasource.write.recordkey.field": "s"})


@case("options", "operation option (delete) with the operation argument left at its default (upsert)",
      InvalidWriteError, "operation='upsert' contradicts option hoodie.datasource.write.operation='delete'",
      regression="accepted: the option was ignored, the rows upserted")
def contradicting_operation(p):
    hudilite.write(rows([1, 2]), p, **WRITE, options={"hoodie.datasource.write.operation": "delete"})


@case("options", "negative value for a size option", InvalidWriteError, "hoodie.parquet.max.file.size", regression='accepted')
def negative_size_option(p):
    write(p, options={"hoodie.parquet.max.file.size": "-5"})


# paths ---------------------------------------------------------------------------------------------------
@case("paths", "a URI of an unsupported scheme (gs://)", InvalidWriteError, "unsupported storage scheme",
      "gs://bucket/tbl", table="none", regression="raised a plain ValueError")
def unregistered_scheme_uri(p):
    write("gs://bucket/tbl")


@case("paths", "a file URI naming another host", InvalidWriteError, "a file URI naming host 'otherhost'",
      table="none", regression="raised a plain ValueError")
def remote_file_uri(p):
    write("file://otherhost/tmp/tbl")


@case("paths", "a regular file instead of a directory", InvalidWriteError, "not a directory", table="none",
      setup=lambda p: open(p, "w").write("x"), regression='raised a raw NotADirectoryError')
def file_not_dir(p):
    write(p)


@case("paths", "a directory holding Delta Lake data", InvalidWriteError, "Delta Lake", table="none",
      setup=lambda p: (os.makedirs(os.path.join(p, "_delta_log")),
                       open(os.path.join(p, "_delta_log", "00000000000000000000.json"), "w").write("{}")))
def delta_dir(p):
    write(p)


@case("paths", "a directory of plain parquet files", InvalidWriteError, "data files", table="none",
      setup=lambda p: (os.makedirs(os.path.join(p, "dt=1")),
                       pq.write_table(rows([1]), os.path.join(p, "dt=1", "part-0.parquet"))))
def parquet_dir(p):
    write(p)


@case("paths", "read of a path that does not exist", TableNotFoundError, "does not exist", table="none")
def read_missing(p):
    read_arrow(os.path.join(p, "no", "such"))


@case("paths", "read of a directory that is not a table", TableNotFoundError, ".hoodie/hoodie.properties is missing",
      table="none", setup=lambda p: (os.makedirs(p), pq.write_table(rows([1]), os.path.join(p, "x.parquet"))))
def read_plain_dir(p):
    read_arrow(p)


def _dotdot(p, operation):
    write(p, rows([1, 2], part=["..", "p0"]), operation=operation,
          options={"hoodie.datasource.write.hive_style_partitioning": "false"})


@case("paths", "partition value '..' without hive-style partitioning (upsert)", InvalidWriteError,
      "partition value produces the path '..': a partition value may not be '.' or '..'", table="none",
      regression="accepted: the base file was written into the table's parent directory")
def dotdot_partition(p):
    _dotdot(p, "upsert")


@case("paths", "partition value '..' without hive-style partitioning (bulk_insert)", InvalidWriteError,
      "partition value produces the path '..'", table="none",
      regression="accepted: the base file was written into the table's parent directory")
def dotdot_partition_bulk(p):
    _dotdot(p, "bulk_insert")


@case("paths", "partition value with '/' (one partition field, two directory levels)", InvalidWriteError,
      "partition value produces the path 'part=a/b': partition values may not contain '/'")
def slash_partition(p):
    write(p, rows([1, 2], part=["a/b", "p0"]))


@case("paths", "partition value with '/' (bulk_insert)", InvalidWriteError,
      "partition value produces the path 'part=a/b': partition values may not contain '/'", table="none",
      regression="accepted: the rows landed in a nested directory that is no partition of the table")
def slash_partition_bulk(p):
    write(p, rows([1, 2], part=["a/b", "p0"]), operation="bulk_insert")


@case("paths", "partition value longer than a directory name may be (300 bytes)", InvalidWriteError,
      "partition value produces a directory name of 305 bytes ('part=xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx'...): a "
      "partition directory name may have at most 255 bytes (the file systems' limit)",
      regression="accepted: the write failed with OSError [Errno 36] File name too long")
def long_partition(p):
    write(p, rows([1, 2], part=["x" * 300, "p0"]))


@case("paths", "partition value longer than a directory name may be (bulk_insert)", InvalidWriteError,
      "partition value produces a directory name of 305 bytes ('part=xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx'...): a "
      "partition directory name may have at most 255 bytes (the file systems' limit)", table="none",
      regression="accepted: the write failed with OSError [Errno 36] File name too long")
def long_partition_bulk(p):
    write(p, rows([1, 2], part=["x" * 300, "p0"]), operation="bulk_insert")


@case("paths", "empty path", InvalidWriteError, "path", table="none", regression='accepted: the table was created in the working directory')
def empty_path(p):
    write("")


# damaged table state: reads and writes fail, nothing is written -----------------------------------------
def _props(p):
    return os.path.join(p, ".hoodie", "hoodie.properties")


# damage goes through the storage seam, so that the same cases run on an object store (tests/s3)
def _rewrite(path, fn):
    store = storage_for(path)
    store.write_bytes(path, fn(store.read_bytes(path)))


def _last(p, suffix):
    meta = os.path.join(p, ".hoodie")
    names = sorted(n for n in storage_for(p).listdir(meta) if n.endswith(suffix))
    return os.path.join(meta, names[-1])


def _base_file(p):
    return sorted(f for f in storage_for(p).walk_files(p) if "/.hoodie/" not in f and f.endswith(".parquet"))[-1]


def read_and_write(p):
    """A damaged table: the read fails, and so does a write (with the same error)."""
    try:
        read_arrow(p)
    except HudiliteError as e:
        first = e
    else:
        raise AssertionError("the read of a damaged table succeeded")
    try:
        write(p, rows([7]))
    except HudiliteError as e:
        assert type(e) is type(first), f"read raised {first!r}, write {e!r}"
    else:
        raise AssertionError("the write into a damaged table succeeded")
    raise first


def _drop_prop(key):
    return lambda p: _rewrite(_props(p), lambda t: b"\n".join(
        ln for ln in t.split(b"\n") if not ln.startswith(key.encode() + b"=")))


@case("damaged properties", "hoodie.properties: garbage bytes", CorruptTableError, "hoodie.properties is damaged",
      "not UTF-8", setup=lambda p: _rewrite(_props(p), lambda t: b"\x89PNG\r\n\x1a\n\xff\xfe\x00garbage"))
def props_garbage(p):
    read_and_write(p)


@case("damaged properties", "hoodie.properties: truncated before hoodie.table.name", CorruptTableError,
      "required key hoodie.table.name is missing",
      setup=lambda p: _rewrite(_props(p), lambda t: t[: t.index(b"hoodie.table.name=")]))
def props_truncated(p):
    read_and_write(p)


@case("damaged properties", "hoodie.properties: truncated mid-line", CorruptTableError, "malformed line",
      setup=lambda p: _rewrite(_props(p), lambda t: t[: t.index(b"hoodie.table.name=") + 15]))
def props_truncated_mid_line(p):
    read_and_write(p)


@case("damaged properties", "hoodie.properties: empty", CorruptTableError, "hoodie.properties is damaged",
      setup=lambda p: _rewrite(_props(p), lambda t: b""))
def props_empty(p):
    read_and_write(p)


@case("damaged properties", "hoodie.properties: hoodie.table.type missing", CorruptTableError,
      "required key hoodie.table.type is missing", setup=_drop_prop("hoodie.table.type"))
def props_no_type(p):
    read_and_write(p)


@case("damaged properties", "hoodie.properties: unknown hoodie.table.type", CorruptTableError,
      "hoodie.table.type", setup=lambda p: _rewrite(_props(p), lambda t: t.replace(
          b"hoodie.table.type=COPY_ON_WRITE", b"hoodie.table.type=COPY_ON_READ")))
def props_bad_type(p):
    read_and_write(p)


@case("damaged properties", "hoodie.properties: non-numeric hoodie.table.version", CorruptTableError,
      "hoodie.table.version", setup=lambda p: _rewrite(_props(p), lambda t: re.sub(
          rb"hoodie.table.version=\d+", b"hoodie.table.version=eight", t)))
def props_bad_version(p):
    read_and_write(p)


@case("damaged properties", "hoodie.properties: wrong hoodie.table.checksum", CorruptTableError,
      "hoodie.table.checksum", setup=lambda p: _rewrite(_props(p), lambda t: re.sub(
          rb"hoodie.table.checksum=\d+", b"hoodie.table.checksum=12345", t)), regression='accepted: the checksum was never checked')
def props_bad_checksum(p):
    read_and_write(p)


@case("damaged properties", "hoodie.properties missing, timeline present", CorruptTableError,
      "hoodie.properties is missing", setup=lambda p: storage_for(p).delete(_props(p)))
def props_missing(p):
    read_and_write(p)


@case("damaged timeline", "completed commit file garbled (not JSON)", CorruptTableError, ".commit", table="cow6",
      setup=lambda p: _rewrite(_last(p, ".commit"), lambda t: t[:30]))
def garbled_commit(p):
    read_and_write(p)


@case("damaged timeline", "commit metadata of the wrong shape (partitionToWriteStats a list)",
      CorruptTableError, "commit metadata", "is damaged: partitionToWriteStats is a JSON list",
      regression="incremental reads: AttributeError 'list' object has no attribute 'items'", table="cow6",
      setup=lambda p: _rewrite(_last(p, ".commit"), lambda t: json.dumps(
          {**json.loads(t), "partitionToWriteStats": [1, 2]}).encode()))
def wrong_shape_commit(p):
    try:
        read_arrow(p, begin="0")
    except CorruptTableError:
        read_and_write(p)  # the snapshot read and a write too
    raise AssertionError("the incremental read of a damaged commit succeeded")


@case("damaged timeline", "completed deltacommit garbled (merge-on-read)", CorruptTableError, ".deltacommit",
      table="mor6", setup=lambda p: _rewrite(_last(p, ".deltacommit"), lambda t: b"{\"partitionToWr"))
def garbled_deltacommit(p):
    read_and_write(p)


@case("damaged base file", "base file with a truncated parquet footer", CorruptTableError, ".parquet",
      setup=lambda p: _rewrite(_base_file(p), lambda t: t[:-20]), regression='raised a raw ArrowInvalid')
def truncated_footer(p):
    read_and_write(p)


@case("damaged base file", "base file replaced by garbage", CorruptTableError, ".parquet",
      setup=lambda p: _rewrite(_base_file(p), lambda t: b"PAR1" + b"\x00garbage" * 20 + b"PAR1"), regression='raised a raw ArrowInvalid')
def garbage_base_file(p):
    read_and_write(p)


# concurrent misuse ---------------------------------------------------------------------------------------
_PENDING: dict[str, object] = {}


def _pending(p, abort=False, complete=False):
    pw = write(p, rows([1, 2], v=5), commit=False)
    if abort:
        pw.abort()
    if complete:
        pw.complete()
    _PENDING[p] = pw


@case("concurrent misuse", "completing a PendingWrite that was aborted", HudiliteError, "is already aborted",
      setup=lambda p: _pending(p, abort=True))
def complete_aborted(p):
    _PENDING.pop(p).complete()


@case("concurrent misuse", "completing a PendingWrite twice", HudiliteError, "is already completed",
      setup=lambda p: _pending(p, complete=True))
def complete_twice(p):
    _PENDING.pop(p).complete()


def _conflict_setup(p):
    _pending(p)  # writer A: inflight, keys 1 and 2
    write(p, rows([1], v=9))  # writer B commits a change to the same file group first


@case("concurrent misuse", "two writers changing the same file group: the later one to complete",
      CommitConflictError, "conflict", setup=_conflict_setup, rolls_back=True)
def conflicting_writers(p):
    _PENDING.pop(p).complete()



def _rolled_back_under_it(p):
    _pending(p)
    from hudilite.services.rollback import rollback_instant
    from hudilite.table import HoodieTable

    t = HoodieTable.open(p)
    rollback_instant(t, t.timeline.get(_PENDING[p].instant_time))


@case("concurrent misuse", "completing a PendingWrite that another process rolled back", HudiliteError,
      "is no longer on the timeline: another writer rolled it back", setup=_rolled_back_under_it)
def complete_rolled_back(p):
    _PENDING.pop(p).complete()


class CliExit(Exception):
    """The `hudilite` command exited non-zero: "exit <status>: <its stderr>"."""


def cli(*argv):
    import io

    from hudilite import cli as _cli

    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            rc = _cli.main(list(argv))
        except SystemExit as e:  # argparse
            rc = e.code
    if rc:
        raise CliExit(f"exit {rc}: {err.getvalue().strip()}")


@case("concurrent misuse", "`hudilite rollback --force` of a completed commit (not a failed write)", CliExit,
      "exit 2", "is completed; only pending writes can be rolled back")
def rollback_completed(p):
    from hudilite.table import HoodieTable

    cli("rollback", p, HoodieTable.open(p).timeline.completed()[-1].timestamp, "--force")


@case("options", "`hudilite clean` with a misspelled option", CliExit, "exit 2", "hoodie.cleaner.commits.retaind",
      "hoodie.cleaner.commits.retained")
def cli_misspelled_option(p):
    cli("clean", p, "-o", "hoodie.cleaner.commits.retaind=1")


def _garbled_intent(p):
    parent, name = os.path.split(p)
    storage_for(p).write_bytes(os.path.join(parent, f".{name}.hudilite-swap"), b'{"staging": ".tbl.hudilite-rebu')


@case("concurrent misuse", "a rebuild's swap intent beside the table left garbled (a swap in flight)",
      CorruptTableError, "the rebuild intent", "is unreadable", setup=_garbled_intent)
def garbled_swap_intent(p):
    read_and_write(p)


# ---- running and the document ---------------------------------------------------------------------------
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}(-\d+)?")
_INSTANT = re.compile(r"(?<!\d)\d{17}(?!\d)")
_TOKEN = re.compile(r"_\d+-\d+-\d+(?=[_.])")


def normalize(message: str, path: str) -> str:
    """The message without what differs between runs: the table path, file ids, instants, write tokens."""
    root = os.path.dirname(path)
    message = message.replace(path, "<table>").replace(root, "<dir>")
    message = _UUID.sub("<file-id>", message)
    message = _TOKEN.sub("_<token>", message)
    return _INSTANT.sub("<instant>", message)


def run_case(c: Case, workdir: str) -> str:
    """Run one case in `workdir` (a fresh directory): the normalized error message. Asserts the error's type
    and fragments and that the table's files are unchanged."""
    path = os.path.join(workdir, "tbl")
    if c.table != "none":
        shutil.copytree(_templates()[c.table], path)
    if c.setup:
        c.setup(path)
    before = file_tree(path)
    beside = sorted(os.listdir(workdir))  # nothing may land next to the table either
    if c.rolls_back:
        own = _PENDING[path].instant_time
        before = {k: v for k, v in before.items() if own not in k}
    try:
        c.act(path)
    except BaseException as e:  # noqa: BLE001 - the type is checked below
        err = e
    else:
        raise AssertionError(f"{c.name}: {c.input}: accepted, expected {c.error.__name__}")
    finally:
        _PENDING.pop(path, None)
    assert isinstance(err, c.error), f"{c.name}: raised {type(err).__name__}: {err}, expected {c.error.__name__}"
    msg = str(err)
    for frag in c.fragments:
        assert frag in msg, f"{c.name}: {frag!r} not in the error message {msg!r}"
    assert_files_unchanged(path, before)
    assert sorted(os.listdir(workdir)) == beside, f"{c.name}: files written next to the table"
    c.message = normalize(msg, path)
    return c.message


def _cell(s: str) -> str:
    return s.replace("|", "\\|").replace("\n", " ")


def render(cases: list[Case]) -> str:
    out = ["# Bad input", "",
           "Generated by `python -m tests.functional.bad_input_catalogue` from the cases in "
           "`tests/functional/bad_input_catalogue.py` (checked by `tests/functional/test_bad_input_catalogue.py`: "
           "this file must match them). Every case is a write, read or table state that must fail: the error "
           "type and message below (table path shown as `<table>`, file ids, instants and write tokens "
           "normalized), and a snapshot of every file of the table (relative path, sha256, size, mtime) taken "
           "before is identical after (\"files unchanged\"). Damaged-state cases damage the table first, then "
           "both a read and a write must fail.", "",
           f"{len(cases)} cases.", "",
           "| # | category | input | error | message | files unchanged |",
           "|---|---|---|---|---|---|"]
    order = list(dict.fromkeys(c.category for c in cases))
    cases = sorted(cases, key=lambda c: order.index(c.category))  # stable: a category's cases in file order
    for i, c in enumerate(cases, 1):
        regression = f" (bug fixed: {c.regression})" if c.regression else ""
        unchanged = "✓ (the failed write's own files rolled back)" if c.rolls_back else "✓"
        out.append(f"| {i} | {c.category} | {_cell(c.input)}{regression} | `{type_name(c)}` | {_cell(c.message)} "
                   f"| {unchanged} |")
    return "\n".join(out) + "\n"


def type_name(c: Case) -> str:
    return c.error.__name__


def generate() -> str:
    with tempfile.TemporaryDirectory() as d:
        for i, c in enumerate(CASES):
            if not c.message:
                w = os.path.join(d, str(i))
                os.makedirs(w)
                run_case(c, w)
    return render(CASES)


def main() -> int:
    text = generate()
    with open(DOC, "w", encoding="utf-8") as f:
        f.write(text)
    print(f"wrote {DOC}: {len(CASES)} cases")
    return 0


if __name__ == "__main__":
    sys.exit(main())
