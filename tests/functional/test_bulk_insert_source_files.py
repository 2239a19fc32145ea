"""Bulk inserts whose input is a plain parquet scan read the source files in the write tasks
(hudilite/writer/source_files.py): same table content as the DataFrame path, and every plan or file that is
not exactly such a scan keeps the DataFrame path."""

import datetime as dt
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import hudilite
import hudilite.writer.client as client
from hudilite.errors import InvalidWriteError
from hudilite.spark.schema import spark_to_arrow
from hudilite.writer.source_files import OPTION, plain_parquet_units

KW = dict(record_key="id", precombine_field="v", partition_by=("d",), operation="bulk_insert")


def _source(tmp_path, name="src", files=3, rows=50, **extra):
    d = tmp_path / name
    d.mkdir()
    for f in range(files):
        ids = list(range(f * rows, (f + 1) * rows))
        cols = {
            "id": pa.array(ids, pa.int64()),
            "v": pa.array([i % 7 for i in ids], pa.int64()),
            "d": pa.array([dt.date(2024, 1, 1 + i % 3) for i in ids], pa.date32()),
            "s": pa.array([None if i % 11 == 0 else f"s{i}" for i in ids], pa.string()),
            "ts": pa.array([dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(seconds=i) for i in ids],
                           pa.timestamp("us", tz="UTC")),
        }
        cols.update({k: v(ids) for k, v in extra.items()})
        pq.write_table(pa.table(cols), str(d / f"part-{f}.parquet"), row_group_size=20)
    return str(d)


def _content(spark, path):
    df = hudilite.read(spark, path)
    cols = [c for c in df.columns if c not in ("_hoodie_commit_time", "_hoodie_commit_seqno", "_hoodie_file_name")]
    return sorted(tuple(r) for r in df.select(*cols).collect())


@pytest.fixture
def units_seen(monkeypatch):
    seen = []

    def spy(*a, **k):
        r = plain_parquet_units(*a, **k)
        seen.append(r)
        return r

    monkeypatch.setattr(client, "plain_parquet_units", spy)
    return seen


def test_plain_scan_reads_the_files_and_matches_the_dataframe_path(spark, tmp_path, units_seen):
    src = _source(tmp_path)
    fast, slow = str(tmp_path / "fast"), str(tmp_path / "slow")
    hudilite.write(spark.read.parquet(src), fast, **KW)
    assert units_seen[-1] and sum(len(u.row_groups) for u in units_seen[-1]) == 9  # 3 files x 3 row groups
    hudilite.write(spark.read.parquet(src), slow, **KW, options={OPTION: "false"})
    assert _content(spark, fast) == _content(spark, slow)
    assert len(_content(spark, fast)) == 150
    # the key index finds the keys it wrote: an upsert updates instead of inserting again
    up = spark.read.parquet(src).where("id < 10").selectExpr("id", "v + 100 as v", "d", "'new' as s", "ts")
    stats = hudilite.write(up, fast, record_key="id", precombine_field="v").stats
    assert (stats["inserted"], stats["updated"]) == (0, 10)
    assert hudilite.read(spark, fast).count() == 150


def test_projection_of_plain_columns_keeps_the_file_path(spark, tmp_path, units_seen):
    src = _source(tmp_path)
    out = str(tmp_path / "t")
    hudilite.write(spark.read.parquet(src).select("s", "d", "v", "id"), out, **KW)
    assert units_seen[-1]
    df = hudilite.read(spark, out)
    assert [c for c in df.columns if not c.startswith("_hoodie")] == ["s", "d", "v", "id"]
    assert df.where("id = 12").select("s", "v").collect()[0] == ("s12", 5)
    assert df.where("id = 11").select("s").collect()[0][0] is None


@pytest.mark.parametrize("shape", ["filter", "expression", "rename", "option", "partitioned", "union"])
def test_anything_but_a_plain_scan_keeps_the_dataframe_path(spark, tmp_path, shape):
    src = _source(tmp_path)
    df = spark.read.parquet(src)
    if shape == "filter":
        df = df.where("id > 3")
    elif shape == "expression":
        df = df.selectExpr("id", "v + 1 as v", "d")
    elif shape == "rename":
        df = df.withColumnRenamed("s", "t")
    elif shape == "option":
        df = spark.read.option("mergeSchema", "true").parquet(src)
    elif shape == "union":
        df = df.union(df)
    else:
        part = tmp_path / "hive" / "region=eu"
        part.mkdir(parents=True)
        pq.write_table(pa.table({"id": [1], "v": [1], "d": [dt.date(2024, 1, 1)]}), str(part / "f.parquet"))
        df = spark.read.parquet(str(tmp_path / "hive"))
    assert plain_parquet_units(df, spark_to_arrow(df.schema), 2) is None


def test_files_spark_reads_differently_keep_the_dataframe_path(spark, tmp_path):
    # one file lacks a column (Spark fills nulls) / one file has another type (Spark widens or fails)
    src = _source(tmp_path, files=2)
    pq.write_table(pa.table({"id": pa.array([1000], pa.int64()), "v": pa.array([1], pa.int64()),
                             "d": pa.array([dt.date(2024, 1, 1)]), "ts": pa.array([None], pa.timestamp("us", tz="UTC"))}),
                   os.path.join(src, "part-9.parquet"))
    df = spark.read.schema("id long, v long, d date, s string, ts timestamp").parquet(src)
    assert plain_parquet_units(df, spark_to_arrow(df.schema), 2) is None
    src2 = _source(tmp_path, name="src2", files=1, n=lambda ids: pa.array(ids, pa.int32()))
    df2 = spark.read.schema("id long, v long, d date, s string, ts timestamp, n long").parquet(src2)
    assert plain_parquet_units(df2, spark_to_arrow(df2.schema), 2) is None
    # and the write itself still succeeds through the DataFrame path
    out = str(tmp_path / "t")
    hudilite.write(df, out, **KW)
    assert hudilite.read(spark, out).count() == 101


def test_units_split_so_every_core_gets_work(spark, tmp_path):
    src = _source(tmp_path, files=1, rows=200)  # one file, 10 row groups
    df = spark.read.parquet(src)
    units = plain_parquet_units(df, spark_to_arrow(df.schema), 4)
    assert len(units) == 4
    assert sorted(g for u in units for g in u.row_groups) == list(range(10))


def test_null_key_in_a_source_file_fails_and_leaves_no_table(spark, tmp_path, units_seen):
    src = _source(tmp_path, files=1)
    pq.write_table(pa.table({"id": pa.array([None], pa.int64()), "v": pa.array([1], pa.int64()),
                             "d": pa.array([dt.date(2024, 1, 1)]), "s": pa.array(["x"]),
                             "ts": pa.array([None], pa.timestamp("us", tz="UTC"))}),
                   os.path.join(src, "part-z.parquet"))
    out = str(tmp_path / "t")
    with pytest.raises(InvalidWriteError, match="null or empty record key"):
        hudilite.write(spark.read.parquet(src), out, **KW)
    assert units_seen[-1]
    assert not os.path.exists(out)
