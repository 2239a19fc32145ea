"""The bulk-insert key generator in the Python worker (hudilite.keygen.arrow_keygen) produces exactly the
strings of the JVM expressions the other operations use (record_key_expr / partition_path_expr): a key written
by bulk_insert must be found by later upserts."""

import datetime as dt

import pyarrow as pa
import pytest

from hudilite.keygen import KeySpec, arrow_keygen
from hudilite.spark.keygen import partition_path_expr, record_key_expr
from hudilite.spark.schema import spark_to_arrow
from hudilite.columns import KEY_COL, PART_COL

ROWS = [
    (1, -7, "a", "eu", 3, dt.date(2024, 1, 1)),
    (2, 9223372036854775807, "", "", -1, dt.date(1, 1, 1)),
    (3, -9223372036854775808, "x y/z", None, None, dt.date(9999, 12, 31)),
    (4, 0, "ü,\"'", "us", 0, None),
    (5, 12, None, "a=b", 2147483647, dt.date(1970, 1, 1)),
]
DDL = "i int, l long, s string, region string, bucket int, d date"


@pytest.mark.parametrize("key,parts,hive", [
    ("i", ("region",), True), ("l", ("bucket", "d"), True), ("s", ("d",), False), ("l", (), True),
    ("i", ("region", "bucket", "d"), False), (("i", "s"), ("region",), True), (("s", "region", "l"), (), True),
])
def test_arrow_keygen_matches_the_jvm_expressions(spark, key, parts, hive):
    df = spark.createDataFrame(ROWS, DDL)
    spec = KeySpec(key if isinstance(key, tuple) else (key,), parts, hive)
    jvm = df.select(record_key_expr(spec).alias(KEY_COL), partition_path_expr(spec).alias(PART_COL)).collect()
    keygen = arrow_keygen(spec, spark_to_arrow(df.schema))
    assert keygen is not None
    table = keygen(pa.Table.from_batches(df._collect_as_arrow()))
    assert list(zip(table.column(KEY_COL).to_pylist(), table.column(PART_COL).to_pylist())) == \
        [(r[KEY_COL], r[PART_COL]) for r in jvm]


def test_arrow_keygen_declines_types_it_cannot_match(spark):
    df = spark.createDataFrame([(1, 1.5, dt.datetime(2024, 1, 1))], "i int, f double, t timestamp")
    schema = spark_to_arrow(df.schema)
    assert arrow_keygen(KeySpec(("f",), (), True), schema) is None      # float formatting differs
    assert arrow_keygen(KeySpec(("i",), ("t",), True), schema) is None  # timestamps too
    assert arrow_keygen(KeySpec(("i", "f"), (), True), schema) is None  # in complex keys as well
