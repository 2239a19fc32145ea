"""A float column widened to double (issue 27 item 4): every reader of both table types returns the float's
decimal value (2.6f -> 2.6), as Apache Hudi promotes floats (`hudilite.schema.float_to_double`) and hudi-rs
reads: log records, base files still holding the float column, and base files rewritten after the widening."""

from __future__ import annotations

import pyarrow as pa
import pytest

import hudilite
from hudilite.schema import float_to_double

pytest.importorskip("hudi")
from tests.hudi_rs import read_hudi_rs  # noqa: E402
pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")

F32 = pa.schema([("id", pa.int64()), ("v", pa.int64()), ("region", pa.string()), ("score", pa.float32())])
F64 = pa.schema([("id", pa.int64()), ("v", pa.int64()), ("region", pa.string()), ("score", pa.float64())])
# region a keeps its float base file (and, on MOR, the float log block); region b is written after the widening
WANT = [(1, 2.6), (2, 1.2), (3, 3.3), (4, 0.1)]


def _table(tmp_path, table_type: str) -> str:
    path = str(tmp_path / table_type)
    kw = dict(record_key="id", precombine_field="v", partition_by="region", table_type=table_type)
    hudilite.write(pa.table({"id": [1, 2, 4], "v": [1, 1, 1], "region": ["a", "a", "b"],
                             "score": [1.1, 1.2, 0.5]}, schema=F32), path, operation="insert", **kw)
    hudilite.write(pa.table({"id": [1], "v": [2], "region": ["a"], "score": [2.6]}, schema=F32), path,
                   operation="upsert", **kw)
    # the widening write touches region b only; on COW it rewrites b's float base file with the double column
    hudilite.write(pa.table({"id": [3, 4], "v": [1, 2], "region": ["b", "b"], "score": [3.3, None]}, schema=F64),
                   path, operation="upsert", **kw)
    hudilite.write(pa.table({"id": [4], "v": [3], "region": ["b"], "score": [0.1]}, schema=F32), path,
                   operation="upsert", **kw)
    return path


def _pairs(rows) -> list:
    return sorted((r["id"], r["score"]) for r in rows)


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_widened_float_reads_its_decimal_value(spark, tmp_path, table_type):
    path = _table(tmp_path, table_type)
    rs = read_hudi_rs(path)
    assert _pairs(rs.to_pylist()) == WANT, "hudi-rs"
    assert _pairs(hudilite.read(spark, path).collect()) == WANT, "Spark read"
    hudilite.register(spark)
    assert _pairs(spark.read.format("hudilite").load(path).collect()) == WANT, "Arrow data source read"
    assert dict(hudilite.read(spark, path).dtypes)["score"] == "double"


def test_compaction_keeps_the_decimal_value(spark, tmp_path):
    from hudilite.services.compaction import run_compaction, schedule_compaction

    path = _table(tmp_path, "MERGE_ON_READ")
    schedule_compaction(path, {"hoodie.compact.inline.max.delta.commits": "1"})
    run_compaction(path)
    assert _pairs(read_hudi_rs(path).to_pylist()) == WANT
    assert _pairs(hudilite.read(spark, path).collect()) == WANT


def test_float_to_double_special_values():
    got = float_to_double(pa.array([2.6, None, float("inf"), -0.0, 3.4028235e38, 1e-45], pa.float32()))
    assert got.type == pa.float64()
    assert got.to_pylist()[:5] == [2.6, None, float("inf"), -0.0, 3.4028235e38]
    assert got.to_pylist()[5] == pytest.approx(1e-45, rel=0.5)


# ---- floats nested in structs, list elements and map values ------------------------------------------------
def _nested(ft):
    return pa.schema([("id", pa.int64()), ("v", pa.int64()), ("region", pa.string()),
                      ("s", pa.struct([("score", ft), ("tag", pa.string())])),
                      ("l", pa.list_(ft)), ("m", pa.map_(pa.string(), ft))])


def _nested_rows(ids, v, region, x):
    n = len(ids)
    return {"id": ids, "v": [v] * n, "region": [region] * n, "s": [{"score": x, "tag": "t"}] * n,
            "l": [[x, None]] * n, "m": [[("k", x)]] * n}


# region a keeps its float base file (MOR: and the float log block of id 1); region b is written after the widening
NESTED_WANT = [(1, 2.6), (2, 1.1), (3, 3.3)]


def _nested_table(tmp_path, table_type: str) -> str:
    path = str(tmp_path / f"nested_{table_type}")
    kw = dict(record_key="id", precombine_field="v", partition_by="region", table_type=table_type)
    f32, f64 = _nested(pa.float32()), _nested(pa.float64())
    hudilite.write(pa.table(_nested_rows([1, 2], 1, "a", 1.1), schema=f32), path, operation="insert", **kw)
    hudilite.write(pa.table(_nested_rows([1], 2, "a", 2.6), schema=f32), path, operation="upsert", **kw)
    hudilite.write(pa.table(_nested_rows([3], 1, "b", 3.3), schema=f64), path, operation="upsert", **kw)
    return path


def _nested_values(rows) -> list:
    """(id, x) per row after checking that the struct field, both list elements and the map value agree."""
    out = []
    for r in rows:
        r = r if isinstance(r, dict) else r.asDict(recursive=True)
        m = r["m"] if isinstance(r["m"], dict) else dict(r["m"])
        assert r["l"][1] is None and r["s"]["tag"] == "t", r
        assert r["s"]["score"] == r["l"][0] == m["k"], r
        out.append((r["id"], r["l"][0]))
    return sorted(out)


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_nested_widened_floats_read_their_decimal_values(spark, tmp_path, table_type):
    """Floats inside structs, list elements and map values widen like top-level ones (Apache Hudi's record
    rewrite promotes field by field), for the Spark read (native scan of float base files and the merged path),
    the footer-free decision from the schema history, and the Arrow data source. hudi-rs 0.5 agrees on
    copy-on-write; on merge-on-read it refuses the nested float of the log block / base file ("leaf type Float32
    cannot be re-tagged as Float64"), so there the rule alone decides (and hudi-rs agrees after compaction)."""
    path = _nested_table(tmp_path, table_type)
    if table_type == "COPY_ON_WRITE":
        assert _nested_values(read_hudi_rs(path).to_pylist()) == NESTED_WANT, "hudi-rs"
    else:
        with pytest.raises(Exception, match="Float32"):
            read_hudi_rs(path)
    assert _nested_values(hudilite.read(spark, path).collect()) == NESTED_WANT, "Spark read"
    from hudilite.spark import read as spark_read

    spark.conf.set(spark_read.SMALL_SLICE_CONF, "0")  # MOR: the native scan + superseded rows path as well
    try:
        assert _nested_values(hudilite.read(spark, path).collect()) == NESTED_WANT, "Spark read, native merge"
    finally:
        spark.conf.unset(spark_read.SMALL_SLICE_CONF)
    hudilite.register(spark)
    assert _nested_values(spark.read.format("hudilite").load(path).collect()) == NESTED_WANT, "data source"
    types = dict(hudilite.read(spark, path).dtypes)
    assert types["s"] == "struct<score:double,tag:string>" and types["l"] == "array<double>", types


def test_nested_compaction_keeps_the_decimal_values(spark, tmp_path):
    from hudilite.services.compaction import run_compaction, schedule_compaction

    path = _nested_table(tmp_path, "MERGE_ON_READ")
    schedule_compaction(path, {"hoodie.compact.inline.max.delta.commits": "1"})
    run_compaction(path)
    assert _nested_values(read_hudi_rs(path).to_pylist()) == NESTED_WANT, "hudi-rs after compaction"
    assert _nested_values(hudilite.read(spark, path).collect()) == NESTED_WANT


def test_float_columns_decided_from_the_schema_history(spark, tmp_path, monkeypatch):
    """The Spark read finds the base files still holding a float column from the commits' schemas, not their
    footers; a file whose commit is not on the active timeline falls back to its footer."""
    from pyspark.sql.types import FloatType

    from hudilite.spark import read as spark_read
    from hudilite.reader.planner import plan_read

    path = _table(tmp_path, "COPY_ON_WRITE")
    footers = []
    real = spark_read._file_type_overrides
    monkeypatch.setattr(spark_read, "_file_type_overrides", lambda s, p: footers.append(p) or real(s, p))
    assert _pairs(hudilite.read(spark, path).collect()) == WANT
    assert footers == []
    plan = plan_read(path)
    schema = spark_read.arrow_to_spark(plan.schema)
    overrides = spark_read.type_overrides(plan, schema)
    by_region = {s.partition[-1]: overrides(s.base_file.path) for s in plan.slices}
    assert by_region == {"a": (("score", FloatType()),), "b": ()}
    # an instant the active timeline does not have (archived): the footer decides
    plan.table.timeline.completed = lambda *a, **k: []
    footers.clear()
    overrides = spark_read.type_overrides(plan, schema)
    assert [overrides(s.base_file.path) for s in plan.slices] == [by_region[s.partition[-1]] for s in plan.slices]
    assert len(footers) == len(plan.slices)
