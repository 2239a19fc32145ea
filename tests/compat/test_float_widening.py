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
