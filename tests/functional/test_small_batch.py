"""Small Spark inputs written without Spark jobs (`hudilite.write.small.batch.*`, hudilite/spark/small_batch.py):
the same batches through the driver-local writer and through Spark jobs give the same tables (snapshot, commit
metadata statistics, change reads), and inputs above a limit still take the Spark write."""

import datetime as dt
import decimal
import glob
import os
import random

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import hudilite
from hudilite.columns import ARRIVAL_COL
from hudilite.spark.changes import changes
from hudilite.spark.small_batch import collect_small, plan_size
from hudilite.sql_merge import latest_per_key
from hudilite.table import HoodieTable
from hudilite.writer.handle import newest_per_key

COLS = ["id", "version", "dt", "name"]
ON = {"hudilite.write.small.batch.enabled": "true"}
STAT_KEYS = ("partitionPath", "numInserts", "numUpdateWrites", "numDeletes", "numWrites", "prevCommit")


def _batch(spark, rng, n, version_base):
    ids = [rng.randrange(40) for _ in range(n)]
    t = pa.table({
        "id": pa.array(ids, pa.int64()),
        "version": pa.array([version_base + rng.randrange(20) for _ in ids], pa.int64()),
        # a key's partition now and then the other one: under the default partition-scoped index that is
        # another record, in the same batch too
        "dt": pa.array([f"2024-01-0{1 + (i + (rng.random() < 0.2)) % 2}" for i in ids], pa.string()),
        "name": pa.array([f"n{rng.randrange(1000)}" for _ in ids], pa.string()),
        "_hoodie_is_deleted": pa.array([rng.random() < 0.15 for _ in ids], pa.bool_()),
    })
    return spark.createDataFrame(t.to_pandas())


def _rows(spark, path, **kw):
    return sorted(tuple(r) for r in hudilite.read(spark, path, **kw).select(*COLS).collect())


def _stats(path):
    """Per commit: operation and the write stats that do not name files (file ids are random per write)."""
    tl = HoodieTable.open(path).timeline
    out = []
    for inst in tl.completed():
        md = tl.read_metadata(inst)
        stats = sorted(tuple(s.get(k) is not None if k == "prevCommit" else s.get(k) for k in STAT_KEYS)
                       for ss in md["partitionToWriteStats"].values() for s in ss)
        out.append((inst.action, md.get("operationType"), stats))
    return out


def _changes(spark, path):
    ts = [i.timestamp for i in HoodieTable.open(path).timeline.completed()]
    return sorted(tuple(r) for r in changes(spark, path, begin=ts[0], end=ts[-1])
                  .select(*COLS, "_change_op").collect())


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_small_batches_write_what_spark_writes(spark, tmp_path, table_type):
    rng = random.Random(23)
    fast, slow = str(tmp_path / "fast"), str(tmp_path / "slow")
    steps = [("upsert", 30), ("upsert", 30), ("insert", 10), ("delete", 6), ("insert_overwrite", 12)]
    for i, (op, n) in enumerate(steps):
        df = _batch(spark, rng, n, i * 10)
        if op == "delete":
            df = df.select("id", "dt")
        kw = dict(record_key="id", precombine_field="version", partition_by="dt", table_type=table_type,
                  operation=op)
        a = hudilite.write(df, fast, options=ON, **kw)
        b = hudilite.write(df, slow, **kw)
        assert (a.stats.pop("engine"), b.stats.pop("engine")) == ("driver", "spark")
        # parquet sizes differ by the instant times and file ids in the rows: everything else is equal
        assert {**a.stats, "bytes_written": 0} == {**b.stats, "bytes_written": 0}, (op, a.stats, b.stats)
        assert _rows(spark, fast) == _rows(spark, slow)
    assert _stats(fast) == _stats(slow)
    assert _changes(spark, fast) == _changes(spark, slow)


def test_inputs_above_the_limits_take_the_spark_write(spark, tmp_path):
    df = _batch(spark, random.Random(5), 20, 0)
    path = str(tmp_path / "t")
    kw = dict(record_key="id", precombine_field="version", partition_by="dt")
    r = hudilite.write(df, path, options={**ON, "hudilite.write.small.batch.max.rows": "19"}, **kw)
    assert r.stats["engine"] == "spark"
    r = hudilite.write(df, path, options={**ON, "hudilite.write.small.batch.max.bytes": "100"}, **kw)
    assert r.stats["engine"] == "spark"
    r = hudilite.write(df, path, options={**ON, "hudilite.write.small.batch.max.rows": "20"}, **kw)
    assert r.stats["engine"] == "driver"
    # a batch within the limits comes back in Spark's types
    got = collect_small(df.withColumn("ts", df.version.cast("timestamp")), 20, 1 << 20)
    assert got.num_rows == 20 and got.schema.field("ts").type == pa.timestamp("us", tz="UTC")
    assert collect_small(df, 19, 1 << 20) is None


def test_frames_without_statistics_are_collected(spark, tmp_path):
    # Python rows have no statistics; a projection scales Spark's unknown size (Long.MaxValue) down to a
    # number that is no estimate either: the input is still collected and written by the driver
    raw = spark.createDataFrame([(str(i), f"n{i}") for i in range(5)], "i string, name string")
    df = raw.select(raw.i.cast("bigint").alias("id"), raw.i.cast("bigint").alias("version"), "name")
    size = plan_size(df)
    assert size is None or size < 1 << 20
    r = hudilite.write(df, str(tmp_path / "t"), record_key="id", precombine_field="version", options=ON)
    assert r.stats["engine"] == "driver" and r.stats["inserted"] == 5


def _source(spark, tmp_path, n=3000):
    """A parquet source far above the tests' byte limit on disk: a filter of it is a small batch whose plan
    estimate is still the source's size."""
    rng = random.Random(11)
    t = pa.table({"id": pa.array(range(n), pa.int64()),
                  "version": pa.array([rng.randrange(100) for _ in range(n)], pa.int64()),
                  "dt": pa.array([f"2024-01-0{1 + i % 2}" for i in range(n)], pa.string()),
                  "name": pa.array([f"name-{rng.getrandbits(64):x}" for _ in range(n)], pa.string())})
    path = str(tmp_path / "source")
    spark.createDataFrame(t.to_pandas()).coalesce(1).write.parquet(path)
    return spark.read.parquet(path)


def test_an_input_like_the_last_small_write_skips_the_estimate(spark, tmp_path):
    src = _source(spark, tmp_path)
    limits = {**ON, "hudilite.write.small.batch.max.bytes": "8192", "hudilite.write.small.batch.max.rows": "10"}
    kw = dict(record_key="id", precombine_field="version", partition_by="dt")
    path = str(tmp_path / "t")

    def batch(lo, hi):
        df = src.where(f"id >= {lo} and id < {hi}")
        assert plan_size(df) > 8192  # the estimate alone would rule every batch out
        return df

    # a new table: no write to go by, the estimate decides (the batch is not taken as small)
    assert hudilite.write(batch(0, 5), path, options=limits, **kw).stats["engine"] == "spark"
    assert HoodieTable.open(path).last_write_records() == 5
    # the table's last write took 5 records: the next batch is collected with the limit at once
    assert hudilite.write(batch(5, 10), path, options=limits, **kw).stats["engine"] == "driver"
    # told to estimate, it does
    r = hudilite.write(batch(10, 12), path, options={**limits, "hudilite.write.small.batch.estimate": "true"}, **kw)
    assert r.stats["engine"] == "spark"
    # a large batch takes the Spark write (the limited evaluation saw more rows than max.rows) ...
    r = hudilite.write(batch(100, 130), path, options=limits, **kw)
    assert r.stats["engine"] == "spark" and HoodieTable.open(path).last_write_records() == 30
    # ... and after it the estimate is back: a small batch read from the large source is ruled out again
    assert hudilite.write(batch(12, 15), path, options=limits, **kw).stats["engine"] == "spark"
    assert hudilite.write(batch(15, 20), path, options=limits, **kw).stats["engine"] == "driver"
    expected = sorted(tuple(r) for r in src.where("id < 20 or (id >= 100 and id < 130)").select(*COLS).collect())
    assert _rows(spark, path) == expected
    with pytest.raises(hudilite.InvalidWriteError, match="small.batch.estimate.*one of auto, true, false"):
        hudilite.write(batch(20, 21), path, options={**limits, "hudilite.write.small.batch.estimate": "maybe"}, **kw)
    assert _rows(spark, path) == expected


def test_the_last_write_is_the_newest_commit_that_is_not_a_table_service(spark, tmp_path):
    path = str(tmp_path / "mor")
    kw = dict(record_key="id", precombine_field="version", partition_by="dt", table_type="MERGE_ON_READ")
    hudilite.write(_batch(spark, random.Random(1), 30, 0).where("not _hoodie_is_deleted"), path, **kw)
    first = HoodieTable.open(path).last_write_records()
    assert first == len({(r.id, r.dt) for r in hudilite.read(spark, path).collect()})  # 30 events, fewer records
    key, dt = min((r.id, r.dt) for r in hudilite.read(spark, path).collect())  # an update: a log file
    second = hudilite.write(spark.createDataFrame([(key, 99, dt, "upd"), (999, 5, "2024-01-01", "new")],
                                                  "id bigint, version bigint, dt string, name string"), path, **kw)
    assert HoodieTable.open(path).last_write_records() == 2 == second.stats["inserted"] + second.stats["updated"]
    table = hudilite.Table(path)
    assert table.services.schedule_compaction(force=True) is not None
    assert table.services.run_compaction()
    tl = HoodieTable.open(path).timeline
    assert str(tl.read_metadata(tl.completed()[-1]).get("operationType")).upper() == "COMPACT"
    assert HoodieTable.open(path).last_write_records() == 2


def test_newest_per_key_in_arrow_is_sparks(spark):
    """`hudilite.write.newest.per.key` on a collected batch (writer.handle.newest_per_key over the arrival ids
    collect_small adds) keeps the rows Spark's latest_per_key keeps: composite and null keys, null and tied
    ordering values, rows of several partitions (in the same order at each evaluation of the frame)."""
    rng = random.Random(11)
    for n in (1, 7, 60, 300):
        rows = [(rng.choice([None, 1, 2, 3]), rng.choice(["a", "b", None]), rng.choice([None, 5, 6, 7]), i)
                for i in range(n)]
        df = spark.createDataFrame(rows, "k1 int, k2 string, v int, payload long")  # a partition per core
        for key, pcf in ((["k1", "k2"], "v"), (["k1"], None), (["k2"], "v")):
            t = collect_small(df, 10_000, 1 << 24, arrival=ARRIVAL_COL)
            assert t is not None and t.column_names[-1] == ARRIVAL_COL
            got = newest_per_key(t, key, pcf, ARRIVAL_COL).drop_columns([ARRIVAL_COL])
            want = latest_per_key(df, key, pcf).collect()
            assert sorted(got.column("payload").to_pylist()) == sorted(r.payload for r in want), (n, key, pcf)
    # without arrival ids the row order is the arrival: the last of equal rows wins
    t = pa.table({"k": [1, 1, 2, 1], "v": [3, 3, 1, 2], "p": [0, 1, 2, 3]})
    assert newest_per_key(t, ["k"], "v").column("p").to_pylist() == [1, 2]
    assert newest_per_key(t, ["k"], None).column("p").to_pylist() == [2, 3]


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_newest_per_key_writes_the_same_on_both_paths(spark, tmp_path, table_type):
    """Change events with deletes, de-duplicated before the write (the dbt adapter's CDC models): the driver
    path and the Spark path store the same rows, and a key inserted and deleted in one batch is not stored."""
    rng = random.Random(7)
    fast, slow = str(tmp_path / "fast"), str(tmp_path / "slow")
    newest = {"hudilite.write.newest.per.key": "true"}
    kw = dict(record_key="id", precombine_field="version", partition_by="dt", table_type=table_type)
    for i in range(4):
        df = _batch(spark, rng, 40, i * 5)  # ties in version: the arrival decides
        a = hudilite.write(df, fast, options={**ON, **newest}, **kw)
        b = hudilite.write(df, slow, options=newest, **kw)
        assert (a.stats["engine"], b.stats["engine"]) == ("driver", "spark")
        assert _rows(spark, fast) == _rows(spark, slow)
    assert _changes(spark, fast) == _changes(spark, slow)
    gone = spark.createDataFrame([(900, 1, "2024-01-01", "x", False), (900, 2, "2024-01-01", "x", True)],
                                 "id long, version long, dt string, name string, _hoodie_is_deleted boolean")
    for path, opts in ((fast, {**ON, **newest}), (slow, newest)):
        hudilite.write(gone, path, options=opts, **kw)
        assert 900 not in {r[0] for r in _rows(spark, path)}


TYPED = ("id long, version int, dt string, tiny tinyint, small smallint, d1 decimal(10,2), d2 decimal(38,10), "
         "day date, ts timestamp, wall timestamp_ntz, bin binary, flag boolean, f float, db double, "
         "arr array<int>, m map<string,smallint>, st struct<a:tinyint,b:string>, aos array<struct<x:long,y:string>>")


def _typed_rows(n, base):
    out = []
    for i in range(n):
        if i % 5 == 4:  # a row of nulls
            out.append((i, base + i, f"p{i % 2}") + (None,) * 15)
            continue
        out.append((i, base + i, f"p{i % 2}", i - 64, i * 300 - 30000, decimal.Decimal(f"{i}.{i % 100:02d}"),
                    decimal.Decimal("12345678901234567890.0123456789"), dt.date(2024, 1, 1 + i % 28),
                    dt.datetime(2024, 1, 1, 12, i % 60, tzinfo=dt.timezone.utc), dt.datetime(2024, 2, 1, 13, i % 60),
                    bytes([i % 256, 0, 255]), i % 2 == 0, i / 3, i / 7, [i, None, i + 1], {"k": i, "z": None},
                    (i - 1, f"s{i}"), [(i, "a"), (i + 1, None)]))
    return out


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_both_paths_store_the_same_file_types(spark, tmp_path, table_type):
    """Every Spark type a model can produce (TINYINT and SMALLINT are Avro ints, stored as INT32 as Spark's
    path stores them): the driver path's base files have the Spark path's parquet schema, and read the same."""
    paths = {"driver": str(tmp_path / "fast"), "spark": str(tmp_path / "slow")}
    kw = dict(record_key="id", precombine_field="version", partition_by="dt", table_type=table_type)
    for n, base in ((12, 0), (8, 100)):
        df = spark.createDataFrame(_typed_rows(n, base), TYPED)
        for engine, path in paths.items():
            assert hudilite.write(df, path, options=ON if engine == "driver" else {}, **kw).stats["engine"] == engine
    schemas, rows = {}, {}
    for engine, path in paths.items():
        base_files = sorted(glob.glob(os.path.join(path, "*", "*.parquet")))
        schemas[engine] = {pq.read_schema(f).remove_metadata() for f in base_files}
        df = hudilite.read(spark, path)
        rows[engine] = sorted(df.drop(*[c for c in df.columns if c.startswith("_hoodie")]).collect(),
                              key=lambda r: r.id)
    assert len(schemas["spark"]) == 1 and schemas["driver"] == schemas["spark"]
    assert next(iter(schemas["driver"])).field("tiny").type == pa.int32()
    assert rows["driver"] == rows["spark"] and len(rows["spark"]) == 12
