"""Null, "" and the literal `__HIVE_DEFAULT_PARTITION__` share Hudi's default partition (Apache Hudi's key
generators map null and empty partition values to it): every reader must return the same rows for `= ''`,
`IS NULL` and `IN (...)` — our planner's `filters=`, Spark SQL over the data source, hudi-rs."""

import pyarrow as pa
import pytest

import hudilite
from hudilite.keygen import DEFAULT_PARTITION
from hudilite.reader import plan_read

VALUES = [None, "", DEFAULT_PARTITION, "x", "y"]


@pytest.fixture
def table(table_path):
    t = pa.table({"id": pa.array(range(10), pa.int64()), "v": pa.array([1] * 10, pa.int64()),
                  "dt": pa.array([VALUES[i % 5] for i in range(10)], pa.string())})
    hudilite.write(t, table_path, record_key="id", precombine_field="v", partition_by="dt")
    return table_path


def _sql_ids(pred):
    """The ids a SQL predicate on dt keeps (None: unknown -> dropped)."""
    return sorted(i for i in range(10) if pred(VALUES[i % 5]))


CASES = [
    ([("dt", "=", "")], "dt = ''", lambda d: d is not None and d == ""),
    ([("dt", "in", ["", "x"])], "dt in ('', 'x')", lambda d: d is not None and d in ("", "x")),
    ([("dt", "=", DEFAULT_PARTITION)], f"dt = '{DEFAULT_PARTITION}'", lambda d: d == DEFAULT_PARTITION),
    ([("dt", "!=", "x")], "dt != 'x'", lambda d: d is not None and d != "x"),
    ([("dt", "not in", ["", "y"])], "dt not in ('', 'y')", lambda d: d is not None and d not in ("", "y")),
    ([("dt", ">=", "")], "dt >= ''", lambda d: d is not None),
]


def test_default_partition_filters_agree(spark, table):
    from tests.hudi_rs import read_hudi_rs

    rs = read_hudi_rs(table).to_pydict()
    rs_rows = dict(zip(rs["id"], rs["dt"]))
    assert rs_rows == {i: VALUES[i % 5] for i in range(10)}  # hudi-rs reads the stored values back
    hudilite.register(spark)
    source = spark.read.format("hudilite").load(table)
    for filters, sql, pred in CASES:
        expected = _sql_ids(pred)
        got = sorted(r["id"] for r in hudilite.read(spark, table, filters=filters).select("id").collect())
        assert got == expected, (filters, got)
        assert sorted(r["id"] for r in source.where(sql).select("id").collect()) == expected, sql
        assert sorted(i for i, d in rs_rows.items() if pred(d)) == expected, sql
    nulls = sorted(r["id"] for r in hudilite.read(spark, table).where("dt is null").select("id").collect())
    assert nulls == sorted(r["id"] for r in source.where("dt is null").select("id").collect()) == [0, 5]
    assert sorted(i for i, d in rs_rows.items() if d is None) == nulls


def test_default_partition_still_pruned(table):
    """Only the filters the default partition's rows may pass keep it: `= 'x'` reads one partition."""
    parts = {s.partition for s in plan_read(table, filters=[("dt", "=", "x")]).slices}
    assert parts == {"dt=x"}
    parts = {s.partition for s in plan_read(table, filters=[("dt", "=", "")]).slices}
    assert parts == {f"dt={DEFAULT_PARTITION}"}


def test_default_partition_of_typed_column_holds_only_nulls(table_path):
    t = pa.table({"id": pa.array([1, 2, 3], pa.int64()), "p": pa.array([None, 4, 5], pa.int32())})
    hudilite.write(t, table_path, record_key="id", partition_by="p")
    parts = {s.partition for s in plan_read(table_path, filters=[("p", "!=", 4)]).slices}
    assert parts == {"p=5"}
