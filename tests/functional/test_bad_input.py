"""Bad input: every invalid write or read fails with an error that names the problem, and leaves the table's
files byte-identical (only the empty working directories .hoodie/.locks, .heartbeat and .temp may appear).

Also a write that fails inside the executors (bulk_insert meeting a null key in a task) rolls itself back
to a byte-identical table.
"""

from __future__ import annotations

import logging
import os
import shutil

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import hudilite
from hudilite.errors import CorruptTableError, InvalidWriteError, TableNotFoundError

SCHEMA = "id long, part string, val long, note string, ver long"
COLS = ["id", "part", "val", "note", "ver"]
WRITE = {"record_key": "id", "precombine_field": "ver", "partition_by": "part"}
WORK_DIRS = {".hoodie/.locks", ".hoodie/.heartbeat", ".hoodie/.temp"}


def rows(n=30, ver=1, note="base"):
    return [(i, f"p{i % 3}", i, note, ver) for i in range(n)]


@pytest.fixture(scope="module")
def template(spark, tmp_path_factory):
    """A partitioned table with two commits."""
    path = str(tmp_path_factory.mktemp("bad-input-template") / "tbl")
    hudilite.write(spark.createDataFrame(rows(), SCHEMA), path, operation="bulk_insert", **WRITE)
    hudilite.write(spark.createDataFrame(rows(10, 2, "c2"), SCHEMA), path, **WRITE)
    return path


@pytest.fixture
def table(template, tmp_path):
    path = str(tmp_path / "tbl")
    shutil.copytree(template, path)
    return path


def tree(path) -> tuple[dict[str, bytes], set[str]]:
    """Every file under `path` with its bytes, and every directory."""
    files, dirs = {}, set()
    for dirpath, dnames, fnames in os.walk(path):
        for d in dnames:
            dirs.add(os.path.relpath(os.path.join(dirpath, d), path))
        for f in fnames:
            full = os.path.join(dirpath, f)
            with open(full, "rb") as fh:
                files[os.path.relpath(full, path)] = fh.read()
    return files, dirs


def assert_unchanged(path, before):
    files0, dirs0 = before
    files1, dirs1 = tree(path)
    added = sorted(set(files1) - set(files0))
    removed = sorted(set(files0) - set(files1))
    changed = sorted(f for f in set(files0) & set(files1) if files0[f] != files1[f])
    assert not (added or removed or changed), f"table files changed: added={added} removed={removed} changed={changed}"
    assert dirs1 - dirs0 <= WORK_DIRS, f"new directories: {sorted(dirs1 - dirs0)}"
    assert dirs0 - dirs1 <= WORK_DIRS, f"directories removed: {sorted(dirs0 - dirs1)}"


def snapshot(spark, path):
    return sorted(tuple(r) for r in hudilite.read(spark, path).select(*COLS).collect())


def expect_failure(spark, path, exc, df, fragments, **kw):
    """Write `df` expecting `exc` whose message contains every fragment; the table must be untouched and
    still read as before."""
    before = tree(path)
    seen = snapshot(spark, path)
    args = {**WRITE, **kw}
    with pytest.raises(exc) as ei:
        hudilite.write(df, path, **args)
    msg = str(ei.value)
    for frag in fragments:
        assert frag in msg, f"{frag!r} not in error message {msg!r}"
    assert_unchanged(path, before)
    assert snapshot(spark, path) == seen
    return msg


# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("operation", ["upsert", "insert", "delete"])
def test_null_record_key(spark, table, operation):
    df = spark.createDataFrame([(1, "p1", 5, "x", 3), (None, "p0", 6, "null key", 3), (40, "p1", 7, "y", 3)],
                               SCHEMA)
    expect_failure(spark, table, InvalidWriteError, df, ["1 row(s) have a null or empty record key", "id"],
                   operation=operation)


def test_null_composite_record_key(spark, tmp_path):
    """A complex key is null when every part is (one null part is written as __null__, as Hudi does)."""
    path = str(tmp_path / "ck")
    hudilite.write(spark.createDataFrame(rows(), SCHEMA), path, record_key=["id", "note"],
                   precombine_field="ver", partition_by="part")
    df = spark.createDataFrame([(None, "p1", 5, None, 3), (None, "p2", 5, None, 3), (1, "p1", 5, None, 3)],
                               SCHEMA)
    expect_failure(spark, path, InvalidWriteError, df, ["2 row(s) have a null or empty record key", "id, note"],
                   record_key=["id", "note"])


def test_missing_record_key_column(spark, table):
    df = spark.createDataFrame([("p1", 5, "x", 3)], "part string, val long, note string, ver long")
    expect_failure(spark, table, InvalidWriteError, df, ["record key field 'id'", "is not a column of the data"])


def test_missing_precombine_column(spark, table):
    df = spark.createDataFrame([(1, "p1", 5, "x")], "id long, part string, val long, note string")
    # named in the write ...
    expect_failure(spark, table, InvalidWriteError, df, ["precombine field 'ver'", "is not a column of the data"])
    # ... or only in the table's config (precombine_field left out; an explicit None is refused)
    expect_failure(spark, table, InvalidWriteError, df, ["precombine field 'ver'", "is not a column of the data"],
                   precombine_field=hudilite.UNSET)
    expect_failure(spark, table, InvalidWriteError, df, ["precombine_field=None, but the table orders records"],
                   precombine_field=None)


def test_precombine_field_not_matching_table(spark, table):
    df = spark.createDataFrame([(1, "p1", 5, "x", 3)], SCHEMA)
    expect_failure(spark, table, InvalidWriteError, df,
                   ["precombine field 'val' does not match the table's 'ver'"], precombine_field="val")


def test_null_precombine_value(spark, table):
    df = spark.createDataFrame([(1, "p1", 5, "x", None)], SCHEMA)
    expect_failure(spark, table, InvalidWriteError, df, ["1 row(s) have a null precombine field 'ver'"])


@pytest.mark.parametrize("new_type,stored,incoming", [("string", "int64", "string"), ("boolean", "int64", "bool")])
def test_type_change_that_cannot_be_read_back(spark, table, new_type, stored, incoming):
    df = spark.createDataFrame([(1, "p1", "5" if new_type == "string" else True, "x", 3)],
                               f"id long, part string, val {new_type}, note string, ver long")
    expect_failure(spark, table, InvalidWriteError, df,
                   ["column 'val'", f"cannot change type from {stored} to {incoming}"])


def test_unknown_operation(spark, table):
    df = spark.createDataFrame([(1, "p1", 5, "x", 3)], SCHEMA)
    expect_failure(spark, table, InvalidWriteError, df, ["unknown operation 'merge'", "upsert"], operation="merge")


def test_record_key_not_matching_table(spark, table):
    df = spark.createDataFrame([(1, "p1", 5, "x", 3)], SCHEMA)
    expect_failure(spark, table, InvalidWriteError, df,
                   ["record key ['val'] does not match the table's record key ['id']"], record_key="val")


def test_partition_fields_not_matching_table(spark, table):
    df = spark.createDataFrame([(1, "p1", 5, "x", 3)], SCHEMA)
    expect_failure(spark, table, InvalidWriteError, df,
                   ["partition fields ['note'] do not match the table's ['part']"], partition_by="note")
    expect_failure(spark, table, InvalidWriteError, df,
                   ["partition fields ['part', 'note'] do not match the table's ['part']"],
                   partition_by=["part", "note"])


def test_partition_column_missing_from_data(spark, table):
    df = spark.createDataFrame([(1, 5, "x", 3)], "id long, val long, note string, ver long")
    # the table's partition field, not named in the write
    expect_failure(spark, table, InvalidWriteError, df,
                   ["partition field 'part' of the table is not a column of the data"], partition_by=())


# ------------------------------------------------------------------------------------------------
def test_read_directory_that_is_not_a_table(spark, tmp_path):
    d = tmp_path / "plain"
    d.mkdir()
    pq.write_table(pa.table({"id": list(range(5)), "val": list(range(5))}), str(d / "part-0.parquet"))
    before = tree(str(d))
    with pytest.raises(TableNotFoundError) as ei:
        hudilite.read(spark, str(d))
    assert str(d) in str(ei.value) and ".hoodie/hoodie.properties is missing" in str(ei.value)
    assert_unchanged(str(d), before)


def test_read_path_that_does_not_exist(spark, tmp_path):
    missing = tmp_path / "no" / "such" / "table"
    with pytest.raises(TableNotFoundError) as ei:
        hudilite.read(spark, str(missing))
    assert str(missing) in str(ei.value) and "does not exist" in str(ei.value)
    assert not (tmp_path / "no").exists()


def _props(path):
    return os.path.join(path, ".hoodie", "hoodie.properties")


def _damage_garbage(text: bytes) -> bytes:
    return b"\x89PNG\r\n\x1a\n\xff\xfe\x00garbage" + bytes(range(128, 256))


def _damage_truncated(text: bytes) -> bytes:
    return text[: text.index(b"hoodie.table.name=")]


def _damage_truncated_mid_line(text: bytes) -> bytes:
    cut = text.index(b"hoodie.table.name=")
    return text[: cut + len(b"hoodie.table.na")]


def _drop(key: str):
    def damage(text: bytes) -> bytes:
        return b"\n".join(ln for ln in text.split(b"\n") if not ln.startswith(key.encode() + b"="))
    damage.__name__ = f"missing {key}"
    return damage


DAMAGES = [
    (_damage_garbage, ["hoodie.properties is damaged", "not UTF-8"]),
    (_damage_truncated, ["hoodie.properties is damaged", "required key hoodie.table.name is missing"]),
    (_damage_truncated_mid_line, ["hoodie.properties", "malformed line", "hoodie.table.na"]),
    (lambda text: b"", ["hoodie.properties is damaged", "required key"]),
    (_drop("hoodie.table.name"), ["required key hoodie.table.name is missing"]),
    (_drop("hoodie.table.type"), ["required key hoodie.table.type is missing"]),
    (_drop("hoodie.table.version"), ["required key hoodie.table.version is missing"]),
    (_drop("hoodie.timeline.layout.version"), ["hoodie.properties lacks hoodie.timeline.layout.version"]),
]


@pytest.mark.parametrize("damage,fragments", DAMAGES,
                         ids=["garbage", "truncated", "truncated-mid-line", "empty", "no-name", "no-type",
                              "no-version", "no-layout-version"])
def test_damaged_properties(spark, table, damage, fragments):
    with open(_props(table), "rb") as f:
        good = f.read()
    with open(_props(table), "wb") as f:
        f.write(damage(good))
    before = tree(table)
    with pytest.raises(CorruptTableError) as ei:
        hudilite.read(spark, table)
    for frag in fragments:
        assert frag in str(ei.value), f"{frag!r} not in {str(ei.value)!r}"
    assert table in str(ei.value)
    df = spark.createDataFrame([(1, "p1", 5, "x", 3)], SCHEMA)
    with pytest.raises(CorruptTableError) as ei:
        hudilite.write(df, table, **WRITE)
    for frag in fragments:
        assert frag in str(ei.value), f"{frag!r} not in {str(ei.value)!r}"
    assert_unchanged(table, before)


def test_missing_properties_with_a_timeline(spark, table):
    """hoodie.properties gone but .hoodie holds commits: a damaged table, not a new one to create."""
    os.unlink(_props(table))
    before = tree(table)
    with pytest.raises(CorruptTableError) as ei:
        hudilite.read(spark, table)
    assert "hoodie.properties is missing" in str(ei.value)
    df = spark.createDataFrame([(1, "p1", 5, "x", 3)], SCHEMA)
    with pytest.raises(CorruptTableError) as ei:
        hudilite.write(df, table, **WRITE)
    assert "hoodie.properties is missing" in str(ei.value)
    assert_unchanged(table, before)


# ------------------------------------------------------------------------------------------------
def test_executor_failure_rolls_back(spark, table, caplog):
    """bulk_insert does not profile: the null key is found by the task, in its last Arrow batch, after it
    opened base files (one in a new partition) and wrote rows to them. The write rolls itself back."""
    good = [(1000 + i, "p9" if i % 2 else "p1", i, "bulk", 3) for i in range(100)]
    df = spark.createDataFrame(good + [(None, "p2", -1, "null key", 3)], SCHEMA).coalesce(1)
    key = "spark.sql.execution.arrow.maxRecordsPerBatch"
    saved = spark.conf.get(key)
    spark.conf.set(key, "10")
    caplog.set_level(logging.INFO, logger="hudilite")
    try:
        msg = expect_failure(spark, table, InvalidWriteError, df, ["1 row(s) have a null or empty record key", "id"],
                             operation="bulk_insert")
    finally:
        spark.conf.set(key, saved)
    assert "HUDILITE_INVALID_INPUT" not in msg
    rolled = [r.getMessage() for r in caplog.records if r.getMessage().startswith("rolled back")]
    assert len(rolled) == 1 and "(2 files)" in rolled[0], rolled  # the task had opened p1 and p9 files
    # and the table takes the good rows afterwards
    hudilite.write(spark.createDataFrame(good, SCHEMA), table, operation="bulk_insert", **WRITE)
    assert len(snapshot(spark, table)) == 130


@pytest.mark.parametrize("dir_existed", [False, True])
def test_failed_first_write_leaves_no_table(spark, tmp_path, dir_existed):
    """A first write that fails inside the executors (after the table was created) removes the new table:
    the path is as it was (absent, or the empty directory it was), and a later write starts from scratch."""
    path = str(tmp_path / "new")
    if dir_existed:
        os.makedirs(path)
    good = [(i, "p9" if i % 2 else "p1", i, "bulk", 3) for i in range(100)]
    df = spark.createDataFrame(good + [(None, "p2", -1, "null key", 3)], SCHEMA).coalesce(1)
    key = "spark.sql.execution.arrow.maxRecordsPerBatch"
    saved = spark.conf.get(key)
    spark.conf.set(key, "10")
    try:
        with pytest.raises(InvalidWriteError, match="null or empty record key"):
            hudilite.write(df, path, operation="bulk_insert", **WRITE)
    finally:
        spark.conf.set(key, saved)
    if dir_existed:
        assert os.listdir(path) == []
    else:
        assert not os.path.exists(path)
    with pytest.raises(TableNotFoundError):
        hudilite.read(spark, path)
    hudilite.write(spark.createDataFrame(good, SCHEMA), path, operation="bulk_insert", **WRITE)
    assert len(snapshot(spark, path)) == 100
