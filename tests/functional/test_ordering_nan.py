"""NaN ordering values rank above every number (and equal to NaN), as Apache Hudi (Java's `compareTo`) and Spark
rank them: within a batch, against stored records, in merge-on-read logs and after their compaction, for Arrow
and Spark input alike (tests/judge/test_apache_hudi_reads.py compares with Apache Hudi itself). Before, a stored
NaN beat every later value while an incoming one lost to everything."""

import pyarrow as pa
import pytest

import hudilite

NAN = float("nan")
BATCHES = [[(1, 1.0, "a1"), (2, NAN, "b1"), (3, 5.0, "c1")],
           [(1, NAN, "a2"), (2, 2.0, "b2"), (3, 4.0, "c2"), (4, NAN, "d1"), (4, 9.0, "d2")],
           [(2, NAN, "b3"), (5, 1.0, "e1"), (5, NAN, "e2"), (5, 3.0, "e3")]]
WANT = {1: "a2", 2: "b3", 3: "c1", 4: "d1", 5: "e2"}


@pytest.mark.parametrize("source", ["arrow", "spark"])
@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_nan_ordering_values_rank_highest(spark, table_path, table_type, source):
    for rows in BATCHES:
        data = pa.table({"id": pa.array([r[0] for r in rows], pa.int64()),
                         "v": pa.array([r[1] for r in rows], pa.float64()), "s": [r[2] for r in rows]})
        if source == "spark":
            data = spark.createDataFrame(rows, "id long, v double, s string")
        hudilite.write(data, table_path, record_key="id", precombine_field="v", table_type=table_type)
    got = {r["id"]: r["s"] for r in hudilite.read(spark, table_path).collect()}
    assert got == WANT
    if table_type == "MERGE_ON_READ":
        assert hudilite.Table.open(table_path).services.compact(force=True)
        assert {r["id"]: r["s"] for r in hudilite.read(spark, table_path).collect()} == WANT
