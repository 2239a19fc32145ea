"""Partition values a file system stores as they are but Spark's file reads do not take as plain paths: Hadoop glob
characters (`[`, `{`, `?`, `*`, `\\`) and a ':' (Hadoop's globber fails on it). Every read kind returns the stored
rows, the same as hudi-rs, and a glob-like value never matches another partition's files ("x*" and "x1")."""

import datetime as dt
import os
from decimal import Decimal

import pyarrow as pa
import pytest

import hudilite
from tests.hudi_rs import read_hudi_rs

VALUES = ["a[b", "a{b,c}", "a\\b", "q?r", "x*", "x1", "2024-01-01 10:00:00", "%41", "é 中", "plain"]


def _batch(ids, version, dt, h=None):
    cols = {"id": pa.array(ids, pa.int64()), "v": pa.array([version] * len(ids), pa.int64()),
            "s": [f"{version}-{i}" for i in ids], "dt": dt}
    if h is not None:
        cols["h"] = h
    return pa.table(cols)


def _rows(df):
    return sorted((r["id"], r["s"], r["dt"]) for r in df.select("id", "s", "dt").collect())


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_glob_characters_and_colons_in_partition_values(spark, table_path, table_type):
    ids = list(range(len(VALUES)))
    c1 = hudilite.write(_batch(ids, 1, VALUES), table_path, record_key="id", precombine_field="v",
                        partition_by="dt", table_type=table_type)
    changed = [i for i in ids if i % 2 == 0]
    c2 = hudilite.write(_batch(changed, 2, [VALUES[i] for i in changed]), table_path, record_key="id",
                        precombine_field="v", partition_by="dt")
    latest = sorted((i, f"{2 if i in changed else 1}-{i}", VALUES[i]) for i in ids)

    assert _rows(hudilite.read(spark, table_path)) == latest
    rs = read_hudi_rs(table_path).to_pydict()
    assert sorted(zip(rs["id"], rs["s"], rs["dt"])) == latest
    assert _rows(hudilite.read(spark, table_path, as_of=c1)) == sorted((i, f"1-{i}", VALUES[i]) for i in ids)
    star = VALUES.index("x*")
    assert _rows(hudilite.read(spark, table_path, filters=[("dt", "=", "x*")])) == [latest[star]]
    assert _rows(hudilite.read(spark, table_path, filters=[("dt", "in", ["a[b", "q?r"])])) == \
        [latest[VALUES.index("a[b")], latest[VALUES.index("q?r")]]
    got = {(r["id"], r["_change_op"]) for r in hudilite.changes(spark, table_path, begin=c1, end=c2).collect()}
    assert got == {(i, "U") for i in changed}
    hudilite.register(spark)
    source = spark.read.format("hudilite").load(table_path)
    assert _rows(source) == latest
    assert _rows(source.where("dt = 'x*'")) == [latest[star]]


def test_a_colon_and_a_glob_character_in_one_path(spark, table_path):
    """Two partition levels: `dt` with a ':' and `h` with glob characters; such a file is read on its own."""
    dts = ["2024-01-01 10:00:00", "2024-01-01 10:00:00", "2024-01-01 10:00:00", "d"]
    hs = ["q?r", "[1]", "plain", "q?r"]
    c1 = hudilite.write(_batch([0, 1, 2, 3], 1, dts, hs), table_path, record_key="id", precombine_field="v",
                        partition_by=["dt", "h"], table_type="MERGE_ON_READ")
    c2 = hudilite.write(_batch([0, 3], 2, [dts[0], dts[3]], [hs[0], hs[3]]), table_path, record_key="id",
                        precombine_field="v", partition_by=["dt", "h"])
    latest = [(0, "2-0", dts[0]), (1, "1-1", dts[1]), (2, "1-2", dts[2]), (3, "2-3", dts[3])]
    assert _rows(hudilite.read(spark, table_path)) == latest
    assert sorted((r["id"], r["h"]) for r in hudilite.read(spark, table_path).collect()) == list(enumerate(hs))
    assert _rows(hudilite.read(spark, table_path, as_of=c1)) == [(i, f"1-{i}", dts[i]) for i in range(4)]
    assert sorted(r["id"] for r in hudilite.read(spark, table_path, filters=[("h", "=", "q?r")]).collect()) == [0, 3]
    got = {(r["id"], r["_change_op"]) for r in hudilite.changes(spark, table_path, begin=c1, end=c2).collect()}
    assert got == {(0, "U"), (3, "U")}


HIDDEN_LOOKING = [".y", "_x", "..a", " ", "a=b", "plain"]


@pytest.mark.parametrize("hive_style", ["false", "true"])
@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_partition_values_that_name_hidden_directories(spark, table_path, table_type, hive_style):
    """A partition value starting with '.' is a hidden directory name (without hive-style paths): its rows used to
    vanish from every read (the partition listing skipped hidden directories) while hudi-rs read them. A stray
    hidden directory that is not a partition (no partition metafile) stays out of the table."""
    values = HIDDEN_LOOKING
    ids = list(range(len(values)))
    opts = {"hoodie.datasource.write.hive_style_partitioning": hive_style}
    c1 = hudilite.write(_batch(ids, 1, values), table_path, record_key="id", precombine_field="v", partition_by="dt",
                        table_type=table_type, options=opts)
    changed = [0, 3]
    c2 = hudilite.write(_batch(changed, 2, [values[i] for i in changed]), table_path, record_key="id",
                        precombine_field="v", partition_by="dt")
    latest = sorted((i, f"{2 if i in changed else 1}-{i}", values[i]) for i in ids)
    rs = read_hudi_rs(table_path).to_pydict()
    assert sorted(zip(rs["id"], rs["s"], rs["dt"])) == latest
    stray = os.path.join(table_path, ".ipynb_checkpoints")  # hudi-rs would take it for a partition
    os.makedirs(stray)
    with open(os.path.join(stray, "notes.parquet"), "wb") as f:
        f.write(b"not the table's")

    assert _rows(hudilite.read(spark, table_path)) == latest
    assert _rows(hudilite.read(spark, table_path, as_of=c1)) == sorted((i, f"1-{i}", values[i]) for i in ids)
    assert _rows(hudilite.read(spark, table_path, filters=[("dt", "=", ".y")])) == [latest[0]]
    got = {(r["id"], r["_change_op"]) for r in hudilite.changes(spark, table_path, begin=c1, end=c2).collect()}
    assert got == {(i, "U") for i in changed}
    hudilite.register(spark)
    assert _rows(spark.read.format("hudilite").load(table_path).where("dt = '.y'")) == [latest[0]]
    if table_type == "MERGE_ON_READ":
        compacted = hudilite.Table.open(table_path, spark=spark).services.compact(force=True)
        assert len(compacted) == 1
        assert _rows(hudilite.read(spark, table_path)) == latest
    assert len(hudilite.Table.open(table_path).info().partitions) == len(values)


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_filters_on_timestamp_and_decimal_partitions(spark, table_path, table_type):
    """The planner prunes partitions of timestamp and decimal columns by their values, as the row filter compares
    them; an operand it cannot compare exactly (a string, a float against a decimal) keeps the partition."""
    utc = dt.timezone.utc
    stamps = [dt.datetime(2024, 1, 1, 10, 30, tzinfo=utc), dt.datetime(2024, 1, 1, 10, 30, 0, 250000, tzinfo=utc),
              dt.datetime(2024, 3, 31, 1, 0, tzinfo=utc)]
    amounts = [Decimal("1.50"), Decimal("1.10"), Decimal("-3.00")]
    df = spark.createDataFrame([(i, 1, stamps[i], amounts[i]) for i in range(3)],
                               "id long, v long, ts timestamp, amount decimal(5,2)")
    c1 = hudilite.write(df, table_path, record_key="id", precombine_field="v", partition_by=["ts", "amount"],
                        table_type=table_type)
    c2 = hudilite.write(df.withColumn("v", df.v + 1), table_path, record_key="id", precombine_field="v")
    cases = [
        (("ts", "=", stamps[0]), [0]),
        (("ts", "=", stamps[1]), [1]),
        (("ts", "=", stamps[0].astimezone(dt.timezone(dt.timedelta(hours=-5)))), [0]),
        (("ts", "=", stamps[0].astimezone().replace(tzinfo=None)), [0]),  # naive: this process's local time
        (("ts", "in", [stamps[1], stamps[2]]), [1, 2]),
        (("ts", "!=", stamps[0]), [1, 2]),
        (("ts", ">", stamps[0]), [1, 2]),
        (("ts", "=", "2024-01-01 10:30:00"), [0]),
        (("amount", "=", Decimal("1.5")), [0]),
        (("amount", "in", [Decimal("1.10"), Decimal("-3")]), [1, 2]),
        (("amount", "=", 1.1), [1]),
        (("amount", "<", 0), [2]),
    ]
    for f, expected in cases:
        assert sorted(r["id"] for r in hudilite.read(spark, table_path, filters=[f]).collect()) == expected, f
        got = sorted(r["id"] for r in hudilite.changes(spark, table_path, begin=c1, end=c2, filters=[f]).collect())
        assert got == expected, ("changes", f)


@pytest.mark.parametrize("operation", ["upsert", "bulk_insert"])
def test_a_partition_value_too_long_for_a_directory_name_is_refused(spark, table_path, operation):
    def listing():
        return sorted((os.path.relpath(os.path.join(d, f), table_path), os.path.getsize(os.path.join(d, f)))
                      for d, _dirs, files in os.walk(table_path) for f in files)

    hudilite.write(spark.createDataFrame([(1, 1, "p")], "id long, v long, dt string"), table_path,
                   record_key="id", precombine_field="v", partition_by="dt")
    before = listing()
    bad = spark.createDataFrame([(2, 1, "é" * 130), (3, 1, "p")], "id long, v long, dt string")  # 260 bytes
    with pytest.raises(hudilite.InvalidWriteError, match="directory name of 263 bytes"):
        hudilite.write(bad, table_path, record_key="id", precombine_field="v", partition_by="dt",
                       operation=operation)
    assert listing() == before
    ok = spark.createDataFrame([(2, 1, "é" * 126)], "id long, v long, dt string")  # 252 + 3 bytes: the limit
    hudilite.write(ok, table_path, record_key="id", precombine_field="v", partition_by="dt", operation=operation)
    assert sorted(r["id"] for r in hudilite.read(spark, table_path).collect()) == [1, 2]


@pytest.fixture
def session_zone(spark):
    key = "spark.sql.session.timeZone"
    saved = spark.conf.get(key)
    yield lambda zone: spark.conf.set(key, zone)
    spark.conf.set(key, saved)


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_timestamp_keys_and_partitions_do_not_depend_on_the_session_time_zone(spark, table_path, table_type,
                                                                               session_zone):
    """The same instant is the same record key and partition from sessions in different time zones (the hour a
    clock turns back included): its UTC wall clock."""
    stamps = ["2024-01-01 10:30:00", "2024-11-03 05:30:00.000001", "2024-11-03 06:30:00"]  # UTC; NY's fold
    sql = ", ".join(f"({i}L, {{v}}L, timestamp'{s} UTC', timestamp'{s} UTC')" for i, s in enumerate(stamps))

    def batch(v):
        return spark.sql(f"select * from values {sql.format(v=v)} as t(id, v, ts, at)")

    session_zone("UTC")
    hudilite.write(batch(1), table_path, record_key="ts", precombine_field="v", partition_by="at",
                   table_type=table_type)
    session_zone("America/New_York")
    c2 = hudilite.write(batch(2), table_path, record_key="ts", precombine_field="v", partition_by="at")
    assert (c2.stats["inserted"], c2.stats["updated"]) == (0, 3)
    assert sorted(d for d in os.listdir(table_path) if d.startswith("at=")) == sorted(f"at={s}" for s in stamps)
    rows = hudilite.read(spark, table_path).collect()
    assert sorted((r["_hoodie_record_key"], r["v"]) for r in rows) == sorted((s, 2) for s in stamps)


def test_a_table_without_the_utc_property_keeps_its_session_keys(spark, table_path, session_zone):
    """Tables written before `hudilite.keygen.timestamp.utc` keep the keys their sessions wrote: a table created
    by a New York session takes that session's upserts as updates, as it did."""
    session_zone("America/New_York")
    first = spark.sql("select 0L as id, 1L as v, timestamp'2023-06-01 00:00:00 UTC' as ts")
    hudilite.write(first, table_path, record_key="ts", precombine_field="v")
    props = os.path.join(table_path, ".hoodie", "hoodie.properties")
    with open(props) as f:
        lines = [ln for ln in f if not ln.startswith("hudilite.keygen.timestamp.utc=")]
    with open(props, "w") as f:  # as a table created before the property was
        f.writelines(lines)
    df = spark.sql("select 1L as id, 1L as v, timestamp'2024-01-01 10:30:00 UTC' as ts")
    hudilite.write(df, table_path, record_key="ts", precombine_field="v")
    c3 = hudilite.write(df.withColumn("v", df.v + 1), table_path, record_key="ts", precombine_field="v")
    assert (c3.stats["inserted"], c3.stats["updated"]) == (0, 1)
    keys = {r["id"]: r["_hoodie_record_key"] for r in hudilite.read(spark, table_path).collect()}
    assert keys == {0: "2023-06-01 00:00:00", 1: "2024-01-01 05:30:00"}


def test_timestamp_partitions_of_a_table_without_the_utc_property_are_not_pruned_by_value(spark, table_path,
                                                                                          session_zone):
    """Such a table's directories hold the writing sessions' wall clocks ("2024-01-01 05:30:00" for 10:30 UTC from
    New York): read as UTC they would prune the partition a filter on the instant needs."""
    session_zone("America/New_York")
    df = spark.sql("select 1L as id, 1L as v, timestamp'2024-01-01 10:30:00 UTC' as ts")
    hudilite.write(df.limit(0), table_path, record_key="id", precombine_field="v", partition_by="ts")
    props = os.path.join(table_path, ".hoodie", "hoodie.properties")
    with open(props) as f:
        lines = [ln for ln in f if not ln.startswith("hudilite.keygen.timestamp.utc=")]
    with open(props, "w") as f:  # as a table created before the property was
        f.writelines(lines)
    hudilite.write(df, table_path, record_key="id", precombine_field="v", partition_by="ts")
    assert [r["_hoodie_partition_path"] for r in hudilite.read(spark, table_path).collect()] == \
        ["ts=2024-01-01 05:30:00"]
    stamp = dt.datetime(2024, 1, 1, 10, 30, tzinfo=dt.timezone.utc)
    for f in (("ts", "=", stamp), ("ts", "in", [stamp]), ("ts", ">=", stamp)):
        assert [r["id"] for r in hudilite.read(spark, table_path, filters=[f]).collect()] == [1], f
