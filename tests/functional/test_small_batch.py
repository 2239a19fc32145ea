"""Small Spark inputs written without Spark jobs (`hudilite.write.small.batch.*`, hudilite/spark/small_batch.py):
the same batches through the driver-local writer and through Spark jobs give the same tables (snapshot, commit
metadata statistics, change reads), and inputs above a limit still take the Spark write."""

import random

import pyarrow as pa
import pytest

import hudilite
from hudilite.spark.changes import changes
from hudilite.spark.small_batch import collect_small, plan_size
from hudilite.table import HoodieTable

COLS = ["id", "version", "dt", "name"]
ON = {"hudilite.write.small.batch.enabled": "true"}
STAT_KEYS = ("partitionPath", "numInserts", "numUpdateWrites", "numDeletes", "numWrites", "prevCommit")


def _batch(spark, rng, n, version_base):
    ids = [rng.randrange(40) for _ in range(n)]
    t = pa.table({
        "id": pa.array(ids, pa.int64()),
        "version": pa.array([version_base + rng.randrange(20) for _ in ids], pa.int64()),
        "dt": pa.array([f"2024-01-0{1 + i % 2}" for i in ids], pa.string()),
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
    steps = [("upsert", 30), ("upsert", 30), ("insert", 10), ("delete", 6)]
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
