"""The driver-local aggregate fold (hudilite.aggregate.local) on queries with a WHERE clause and on
merge-on-read aggregate tables with log files: after every refresh the aggregate table equals a full
recomputation by Spark SQL over the detail snapshot, and the fold ran in Arrow exactly when it should (a WHERE
outside the translated subset, or Spark coercing a literal, falls back to the Spark fold with equal results)."""

import datetime
import decimal
import math
import random

import pyarrow as pa
import pytest

import hudilite
from hudilite.aggregate import local, parse, refresh
from hudilite.reader.planner import plan_read

SCHEMA = pa.schema([("id", pa.int64()), ("g", pa.string()), ("x", pa.int64()), ("s", pa.string()),
                    ("d", pa.decimal128(10, 2)), ("f", pa.float64()), ("dt", pa.date32()), ("b", pa.bool_()),
                    ("ts", pa.timestamp("us", "UTC")), ("_hoodie_is_deleted", pa.bool_())])
SELECT = ("select g, count(*) as n, count(x) as cx, sum(x) as sx, avg(x) as ax, min(x) as mn, max(s) as ms, "
          "count(distinct x) as dx from `db`.`detail` t")
OUT = ["g", "n", "cx", "sx", "ax", "mn", "ms", "dx"]
# decimal sums (exact, in the stored decimal type) and decimal min / max / count(distinct); dates as keys
DECIMALS = ("select dt, g, count(*) as n, sum(d) as sd, count(d) as cd, min(d) as mnd, max(d) as mxd, "
            "count(distinct d) as dd from `db`.`detail` t")
DECIMAL_OUT = ["dt", "g", "n", "sd", "cd", "mnd", "mxd", "dd"]
# a timestamp group key (written into the group key in the session time zone) and avg of a decimal
HOURLY = ("select ts, g, count(*) as n, avg(d) as ad, sum(d) as sd, avg(x) as ax, max(d) as mxd, "
          "count(distinct s) as ds from `db`.`detail` t")
HOURLY_OUT = ["ts", "g", "n", "ad", "sd", "ax", "mxd", "ds"]
UTC = datetime.timezone.utc
TIMES = [None, datetime.datetime(2024, 3, 1, 9, tzinfo=UTC), datetime.datetime(2024, 3, 31, 1, 30, tzinfo=UTC),
         datetime.datetime(2024, 10, 27, 0, 59, 59, 999999, tzinfo=UTC),
         datetime.datetime(1969, 12, 31, 23, 59, 59, 123456, tzinfo=UTC),
         datetime.datetime(812, 5, 6, 7, 8, 9, 1000, tzinfo=UTC)]
_SHAPES = {}  # select -> (group by, output columns), filled below

LOCAL_WHERES = [
    "s <> 'p'", "x = 3", "x != 3", "x == 3", "x < 3", "x <= 3", "3 < x", "x >= 3 or s is null",
    "s is not null and x in (1, 2, 5)", "x not in (1, 2)", "x between 2 and 6", "not (x between 2 and 6)",
    "x not between -1 and 2", "d >= 1.50", "d < 2", "d <> 0", "f > 0.5", "f <= 0.5", "f = 1", "f >= -1",
    "dt = date '2024-03-02'", "dt >= date '2024-03-02' and b", "not b", "b = true", "b",
    "t.x = 1 or `S` = 'q'", "((x > 1) and (s = 'p' or s = 'q')) or g is null",
]
# outside the subset (an expression, strings Spark casts to dates, a decimal literal against an integer column,
# a function call, a double literal): the Spark fold, with the same results
SPARK_WHERES = ["x + 0 > 3", "dt > '2024-03-01'", "dt = '2024-03-02'", "x > 1.5", "upper(s) = 'P'", "x = 1 and f = 1e0"]


def _row(rng: random.Random, k: int) -> dict:
    return {"id": k, "g": rng.choice(["a", "b", "c", None]),
            "x": None if rng.random() < 0.15 else rng.randrange(-1, 8),
            "s": rng.choice(["p", "q", "P", None]),
            "d": None if rng.random() < 0.15 else decimal.Decimal(rng.randrange(-300, 400)) / 100,
            "f": rng.choice([None, math.nan, -1.0, 0.5, 1.0, 2.5]),
            "dt": rng.choice([None, datetime.date(2024, 3, 1), datetime.date(2024, 3, 2), datetime.date(2024, 3, 3)]),
            "b": rng.choice([None, True, False]), "ts": rng.choice(TIMES), "_hoodie_is_deleted": False}


def _batch(rng: random.Random, live: dict, size: int) -> pa.Table:
    """Inserts, updates (rows move in and out of the filter and between groups) and deletes, one per key."""
    rows: dict = {}
    for _ in range(size):
        if live and rng.random() < 0.25:
            k = rng.choice(sorted(live))
            if k not in rows:
                rows[k] = {**live.pop(k), "_hoodie_is_deleted": True}
            continue
        k = rng.choice(sorted(live)) if live and rng.random() < 0.5 else rng.randrange(10_000)
        if k in rows:
            continue
        live[k] = rows[k] = _row(rng, k)
    return pa.Table.from_pylist(list(rows.values()), schema=SCHEMA)


_SHAPES.update({SELECT: ("g", OUT), DECIMALS: ("dt, g", DECIMAL_OUT), HOURLY: ("ts, g", HOURLY_OUT)})


def _recomputed(spark, detail: str, where: str, select: str = SELECT) -> set:
    hudilite.read(spark, detail).createOrReplaceTempView("hl_test_detail")
    keys, cols = _SHAPES[select]
    return _rows(spark.sql(select.replace("`db`.`detail`", "hl_test_detail") + f" where {where} group by {keys}"),
                 cols)


def _rows(df, out_columns=OUT) -> set:
    out = set()
    for r in df.select(*out_columns).collect():
        out.add(tuple(round(v, 9) if isinstance(v, float) else v for v in r))
    return out


def _spy(monkeypatch) -> list:
    runs: list = []
    real = local.incremental_arrow
    monkeypatch.setattr(local, "incremental_arrow", lambda *a: runs.append(real(*a)) or runs[-1])
    return runs


def _sequence(spark, tmp_path, monkeypatch, where: str, seed: int, steps: int = 3, options=None, between=None,
              select: str = SELECT):
    runs = _spy(monkeypatch)
    keys, cols = _SHAPES[select]
    q = parse(f"{select} where {where} group by {keys}")
    rng = random.Random(seed)
    detail, agg = str(tmp_path / "detail"), str(tmp_path / "agg")
    live: dict = {}
    hudilite.write(_batch(rng, live, 20), detail, record_key="id")
    refresh(spark, q, detail, agg, options)
    assert _rows(hudilite.read(spark, agg), cols) == _recomputed(spark, detail, where, select), "full build"
    for step in range(steps):
        hudilite.write(_batch(rng, live, rng.randrange(1, 9)), detail, record_key="id")
        refresh(spark, q, detail, agg, options)
        assert _rows(hudilite.read(spark, agg), cols) == _recomputed(spark, detail, where, select), f"step {step}"
        if between:
            between(step, agg)
    return runs


@pytest.mark.parametrize("where", LOCAL_WHERES)
def test_where_folds_locally_and_equals_spark(spark, tmp_path, monkeypatch, where):
    runs = _sequence(spark, tmp_path, monkeypatch, where, seed=LOCAL_WHERES.index(where))
    assert len(runs) == 3 and all(r is not None for r in runs), "every refresh folds in Arrow"


@pytest.mark.parametrize("where", SPARK_WHERES)
def test_untranslated_where_falls_back_to_spark(spark, tmp_path, monkeypatch, where):
    runs = _sequence(spark, tmp_path, monkeypatch, where, seed=100 + SPARK_WHERES.index(where), steps=2)
    assert runs == [None, None]


@pytest.mark.parametrize("where", ["s <> 'p'", "d > -1.5 or x is null"])
def test_decimal_sums_and_extremes_fold_locally(spark, tmp_path, monkeypatch, where):
    runs = _sequence(spark, tmp_path, monkeypatch, where, seed=200 + len(where), steps=4, select=DECIMALS)
    assert len(runs) == 4 and all(r is not None for r in runs)


@pytest.mark.parametrize("tz", ["UTC", "Asia/Kolkata", "America/New_York"])
def test_timestamp_keys_and_decimal_avg_fold_locally(spark, tmp_path, monkeypatch, tz):
    """Timestamp group keys go into `_hudilite_group_key` as Spark's to_json writes them in the session time
    zone (a refresh that wrote another key would add a second row for the group); avg of a decimal rounds as
    the Spark fold's decimal division does."""
    old = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", tz)
    try:
        runs = _sequence(spark, tmp_path, monkeypatch, "x is null or x <> 4", seed=300 + len(tz), steps=4,
                         select=HOURLY)
    finally:
        spark.conf.set("spark.sql.session.timeZone", old)
    assert len(runs) == 4 and all(r is not None for r in runs)


def test_group_keys_are_the_ones_spark_writes(spark):
    """`arrow_group_keys` equals Spark's to_json(named_struct(...)) for timestamps (fractions, before 1970,
    DST changes, a year below 1000 in local mean time) in several session time zones."""
    from pyspark.sql import functions as F

    old = spark.conf.get("spark.sql.session.timeZone")
    values = TIMES + [datetime.datetime(2024, 3, 10, 7, 0, 0, 999, tzinfo=UTC)]
    t = pa.table({"ts": pa.array(values, pa.timestamp("us", "UTC")), "g": ["a", None, "b", "c", "d", "e", "f"]})
    try:
        for tz in ["UTC", "Europe/Berlin", "Asia/Kolkata", "America/New_York", "Australia/Lord_Howe"]:
            spark.conf.set("spark.sql.session.timeZone", tz)
            df = spark.createDataFrame([(i, v, g) for i, (v, g) in enumerate(zip(values, t.column("g").to_pylist()))],
                                       "i long, ts timestamp, g string")
            got = {r["i"]: r["k"] for r in df.select("i", F.to_json(F.struct(F.col("ts").alias("k0"),
                                                                        F.col("g").alias("k1"))).alias("k")).collect()}
            mine = local.arrow_group_keys([t.column("ts"), t.column("g")], [f"timestamp:{tz}", "string"])
            assert mine.to_pylist() == [got[i] for i in range(len(values))], tz
    finally:
        spark.conf.set("spark.sql.session.timeZone", old)


def test_where_drops_every_change_of_a_batch(spark, tmp_path, monkeypatch):
    """A batch whose images all fail the filter changes no group: an empty upsert, the checkpoint advances."""
    runs = _spy(monkeypatch)
    q = parse(f"{SELECT} where s = 'p' group by g")
    detail, agg = str(tmp_path / "detail"), str(tmp_path / "agg")
    rng = random.Random(7)
    rows = [{**_row(rng, k), "s": "p"} for k in range(5)]
    hudilite.write(pa.Table.from_pylist(rows, schema=SCHEMA), detail, record_key="id")
    refresh(spark, q, detail, agg)
    before = _rows(hudilite.read(spark, agg))
    hudilite.write(pa.Table.from_pylist([{**_row(rng, 50), "s": "q"}], schema=SCHEMA), detail, record_key="id")
    refresh(spark, q, detail, agg)
    assert runs[-1] is not None and runs[-1][0].num_rows == 0
    assert _rows(hudilite.read(spark, agg)) == before == _recomputed(spark, detail, "s = 'p'")
    assert refresh(spark, q, detail, agg) is None  # the range was consumed


def test_aggregate_of_a_small_detail_is_written_on_the_driver(spark, tmp_path, monkeypatch):
    """`refresh` writes the aggregate's rows of a Spark fold (full builds, Spark refreshes) with the driver-local
    writer when the detail has at most `hudilite.write.small.batch.max.rows` rows (commit metadata), and with a
    Spark write when the caller turns small batches off or the detail has more rows: the same aggregate."""
    runs = _spy(monkeypatch)
    where = "x + 0 > 1"  # outside the Arrow fold's subset: every refresh folds in Spark
    q = parse(f"{SELECT} where {where} group by g")
    rng = random.Random(5)
    live: dict = {}
    detail = str(tmp_path / "detail")
    hudilite.write(_batch(rng, live, 30), detail, record_key="id")
    off = {"hudilite.write.small.batch.enabled": "false"}
    few = {"hudilite.write.small.batch.max.rows": str(len(live) - 1)}  # the detail has more rows than this
    aggs = {name: str(tmp_path / name) for name in ("default", "off", "few")}
    opts = {"default": None, "off": off, "few": few}
    engines: dict = {name: [] for name in aggs}
    for step in range(2):
        for name, agg in aggs.items():
            engines[name].append(refresh(spark, q, detail, agg, opts[name]).stats["engine"])
            assert _rows(hudilite.read(spark, agg)) == _recomputed(spark, detail, where), (name, step)
        hudilite.write(_batch(rng, live, 6), detail, record_key="id")
    assert runs == [None, None, None], "the incremental refreshes fold in Spark"
    assert engines == {"default": ["driver", "driver"], "off": ["spark", "spark"], "few": ["spark", "spark"]}


MOR = {"hoodie.datasource.write.table.type": "MERGE_ON_READ"}


@pytest.mark.parametrize("compact", [False, True])
def test_mor_aggregate_with_logs_folds_locally(spark, tmp_path, monkeypatch, compact):
    """A merge-on-read aggregate table: each refresh's group updates land in log files; the next refresh reads
    the affected groups' stored state merged in this process (compaction in between folds the logs into base
    files, later refreshes add logs again)."""
    logs = []

    def between(step, agg):
        logs.append(bool(plan_read(agg).merged_slices))
        if compact and step == 1:
            hudilite.Table(agg).services.compact(force=True)
            assert not plan_read(agg).merged_slices

    runs = _sequence(spark, tmp_path, monkeypatch, "s <> 'p'", seed=31, steps=5, options=MOR, between=between)
    assert len(runs) == 5 and all(r is not None for r in runs)
    assert all(logs), "every refresh left log files for the next one to merge"
    assert hudilite.Table(str(tmp_path / "agg")).info().table_type == "MERGE_ON_READ"


def test_mor_aggregate_above_the_bound_uses_spark(spark, tmp_path, monkeypatch):
    """Log-file slices larger than the bound of an in-process merge: the stored state is read through Spark."""
    monkeypatch.setattr(local, "STORED_MERGE_MAX_BYTES", 1)
    runs = _sequence(spark, tmp_path, monkeypatch, "x >= 0", seed=5, steps=2, options=MOR)
    assert runs[0] is not None  # after the build: base files only, read as they are
    assert runs[1] is None


@pytest.mark.parametrize("ansi", ["false", "true"])
def test_decimal_sum_outgrowing_its_type_is_left_to_spark(spark, tmp_path, monkeypatch, ansi):
    """A decimal sum that no longer fits its type: Arrow refuses it and the fold is Spark's - null without ANSI
    mode, Spark's out-of-range error with it (the aggregate table unchanged) - never an Arrow error."""
    schema = pa.schema([("id", pa.int64()), ("g", pa.string()), ("d", pa.decimal128(38, 0))])
    big = decimal.Decimal(6) * decimal.Decimal(10) ** 37
    q = parse("select g, count(*) as n, sum(d) as sd from `db`.`detail` t group by g")
    detail, agg = str(tmp_path / "detail"), str(tmp_path / "agg")
    old = spark.conf.get("spark.sql.ansi.enabled")
    spark.conf.set("spark.sql.ansi.enabled", ansi)
    try:
        hudilite.write(pa.Table.from_pylist([{"id": 1, "g": "a", "d": big}], schema=schema), detail, record_key="id")
        refresh(spark, q, detail, agg)
        hudilite.write(pa.Table.from_pylist([{"id": 2, "g": "a", "d": big}], schema=schema), detail, record_key="id")
        runs = _spy(monkeypatch)
        if ansi == "true":
            with pytest.raises(Exception, match="NUMERIC_VALUE_OUT_OF_RANGE"):
                refresh(spark, q, detail, agg)
            assert [r["sd"] for r in hudilite.read(spark, agg).select("sd").collect()] == [big]
        else:
            refresh(spark, q, detail, agg)
            assert [tuple(r) for r in hudilite.read(spark, agg).select("n", "sd").collect()] == [(2, None)]
    finally:
        spark.conf.set("spark.sql.ansi.enabled", old)
    assert runs == [None]


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_fold_after_the_detail_column_widened_to_double(spark, tmp_path, table_type):
    """A summed bigint column widened to double: the folds after it keep the fractions (before: the Spark fold
    cast the new sums to the stored bigint state, so adding 2.25 to a group added 2), equal to Spark SQL over
    the detail each time."""
    detail, agg = str(tmp_path / "detail"), str(tmp_path / "agg")
    kw = dict(record_key="id", precombine_field="v", partition_by="pt", table_type=table_type)
    q = parse(f"select g, count(*) as n, sum(a) as sa, avg(a) as aa, count(a) as ca from `{detail}` t group by g")

    def check():
        refresh(spark, q, detail, agg)
        hudilite.read(spark, detail).createOrReplaceTempView("hl_widened_detail")
        want = _rows(spark.sql("select g, count(*) as n, sum(a) as sa, avg(a) as aa, count(a) as ca "
                               "from hl_widened_detail group by g"), ["g", "n", "sa", "aa", "ca"])
        assert _rows(hudilite.read(spark, agg), ["g", "n", "sa", "aa", "ca"]) == want

    hudilite.write(pa.table({"id": [1, 2, 3], "v": [1, 1, 1], "a": pa.array([4, 5, 7], pa.int64()),
                             "g": ["x", "x", "y"], "pt": ["p", "q", "q"]}), detail, **kw)
    check()
    hudilite.write(pa.table({"id": [2], "v": [2], "a": [1.5], "g": ["x"], "pt": ["q"]}), detail, **kw)  # widened
    check()
    hudilite.write(pa.table({"id": [4, 5], "v": [1, 1], "a": [2.25, None], "g": ["y", "y"], "pt": ["p", "p"]}),
                   detail, **kw)
    check()
    assert dict(hudilite.read(spark, agg).dtypes)["sa"] == "double"
