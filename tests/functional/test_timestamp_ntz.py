"""Wall-clock timestamps (Spark TIMESTAMP_NTZ, tz-naive Arrow timestamps) keep their type and their value in every
session time zone: the table schema marks such a column (`adjust-to-utc: false` on Avro timestamp-micros), its
data files store the wall clock as a UTC timestamp (what hudi-rs reads), and every read gives TIMESTAMP_NTZ back.
Before, they were stored and read as TIMESTAMP: a value written as 11:00 read back as 06:00 in New York."""

import datetime as dt
from contextlib import contextmanager

import pyarrow as pa
import pytest
from pyspark.sql.types import TimestampNTZType, TimestampType

import hudilite
from hudilite.errors import InvalidWriteError
from hudilite.schema import arrow_to_avro, avro_to_arrow
from tests.hudi_rs import read_hudi_rs

T1, T2, T3 = dt.datetime(2024, 1, 1, 11, 0), dt.datetime(2024, 3, 10, 2, 30, 0, 5), dt.datetime(2024, 11, 3, 1, 30)
P1, P2 = dt.datetime(2024, 1, 1), dt.datetime(2024, 6, 1, 12, 0)


@contextmanager
def _zone(spark, tz):
    old = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", tz)
    try:
        yield
    finally:
        spark.conf.set("spark.sql.session.timeZone", old)


def _ntz(v: dt.datetime) -> str:
    return f"TIMESTAMP_NTZ'{v.isoformat(sep=' ')}'"


def _frame(spark, rows):
    return spark.sql(" union all ".join(f"select {i} as id, {_ntz(t)} as t, {_ntz(p)} as p, {v} as v"
                                        for i, t, p, v in rows))


def _rows(df):
    return sorted((r["id"], r["t"], r["p"], r["v"]) for r in df.select("id", "t", "p", "v").collect())


@pytest.mark.parametrize("small", ["false", "true"])  # Spark jobs, or the driver-local small-batch writer
@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_wall_clock_timestamps_keep_type_and_value_in_any_session_zone(spark, table_path, table_type, small):
    opts = {"hudilite.write.small.batch.enabled": small}
    with _zone(spark, "America/New_York"):
        c1 = hudilite.write(_frame(spark, [(1, T1, P1, 1), (2, T2, P2, 1)]), table_path, record_key="id",
                            precombine_field="v", partition_by="p", table_type=table_type, options=opts)
        c2 = hudilite.write(_frame(spark, [(1, T3, P1, 2), (3, T1, P2, 1)]), table_path, record_key="id",
                            precombine_field="v", partition_by="p", options=opts)
        latest = [(1, T3, P1, 2), (2, T2, P2, 1), (3, T1, P2, 1)]
        df = hudilite.read(spark, table_path)
        assert isinstance(df.schema["t"].dataType, TimestampNTZType)
        assert isinstance(df.schema["p"].dataType, TimestampNTZType)
        assert _rows(df) == latest
        assert _rows(hudilite.read(spark, table_path, as_of=c1)) == [(1, T1, P1, 1), (2, T2, P2, 1)]
        assert _rows(hudilite.read(spark, table_path, filters=[("p", "=", P2)])) == latest[1:]
        changes = hudilite.changes(spark, table_path, begin=c1, end=c2)
        assert isinstance(changes.schema["t"].dataType, TimestampNTZType)
        assert _rows(changes) == [(1, T3, P1, 2), (3, T1, P2, 1)]
        hudilite.register(spark)
        source = spark.read.format("hudilite").load(table_path)
        assert _rows(source) == latest
        assert _rows(source.where(f"p = {_ntz(P1)}")) == latest[:1]
    with _zone(spark, "Asia/Tokyo"):
        assert _rows(hudilite.read(spark, table_path)) == latest
    arrow = hudilite.Table.open(table_path).schema()
    assert arrow.field("t").type == pa.timestamp("us") and arrow.field("p").type == pa.timestamp("us")
    # hudi-rs reads the timestamp-micros column as a UTC timestamp: the same wall clock
    rs = read_hudi_rs(table_path).to_pydict()
    assert sorted((i, t.replace(tzinfo=None)) for i, t in zip(rs["id"], rs["t"])) == [(r[0], r[1]) for r in latest]


def test_timestamp_input_into_a_wall_clock_column_is_refused(spark, table_path):
    hudilite.write(_frame(spark, [(1, T1, P1, 1)]), table_path, record_key="id", precombine_field="v")
    before = _rows(hudilite.read(spark, table_path))
    instants = hudilite.Table.open(table_path).timeline.completed()
    aware = spark.sql(f"select 2 as id, TIMESTAMP'2024-01-01 00:00:00' as t, {_ntz(P1)} as p, 1 as v")
    with pytest.raises(InvalidWriteError, match=r"column 't'.*TIMESTAMP_NTZ"):
        hudilite.write(aware, table_path, record_key="id", precombine_field="v")
    assert _rows(hudilite.read(spark, table_path)) == before
    assert hudilite.Table.open(table_path).timeline.completed() == instants


def test_a_table_storing_timestamps_takes_wall_clocks_as_utc_as_before(spark, table_path):
    """A column created as TIMESTAMP stays one: wall-clock input is stored as that wall clock in UTC (what
    tables written before wall-clock columns hold), whatever the session's zone."""
    first = spark.sql("select 1 as id, TIMESTAMP'2024-01-01 00:00:00 UTC' as t, 1 as v")
    hudilite.write(first, table_path, record_key="id", precombine_field="v")
    with _zone(spark, "America/New_York"):
        hudilite.write(spark.sql(f"select 2 as id, {_ntz(T1)} as t, 1 as v"), table_path, record_key="id",
                       precombine_field="v")
    df = hudilite.read(spark, table_path)
    assert isinstance(df.schema["t"].dataType, TimestampType)
    got = hudilite.Table.open(table_path).to_arrow(["id", "t"]).sort_by("id").to_pydict()
    assert got["t"] == [dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc), T1.replace(tzinfo=dt.timezone.utc)]


def test_arrow_wall_clock_timestamps_map_to_marked_avro_timestamps():
    schema = pa.schema([pa.field("a", pa.timestamp("us")), pa.field("b", pa.timestamp("ms")),
                        pa.field("c", pa.timestamp("us", tz="UTC")),
                        pa.field("s", pa.struct([pa.field("x", pa.timestamp("us"))]))])
    avro = arrow_to_avro(schema, "t")
    types = {f["name"]: f["type"] for f in avro["fields"]}
    leaf = [t for t in types["a"] if t != "null"][0]
    assert leaf == {"type": "long", "logicalType": "timestamp-micros", "adjust-to-utc": False}
    assert [t for t in types["c"] if t != "null"][0] == {"type": "long", "logicalType": "timestamp-micros"}
    back = avro_to_arrow(avro)
    assert back.field("a").type == pa.timestamp("us") and back.field("b").type == pa.timestamp("ms")
    assert back.field("c").type == pa.timestamp("us", tz="UTC")
    assert back.field("s").type.field("x").type == pa.timestamp("us")
    # Apache Hudi 1.x writes TIMESTAMP_NTZ as local-timestamp-micros: a wall clock too
    hudi = {"type": "record", "name": "r", "fields": [
        {"name": "a", "type": ["null", {"type": "long", "logicalType": "local-timestamp-micros"}]}]}
    assert avro_to_arrow(hudi).field("a").type == pa.timestamp("us")
