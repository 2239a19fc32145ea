"""Integer columns widened to float or double (Avro's promotions, which the writer accepts): every reader of both
table types reads the files written before the widening, at the top and inside structs, with Java's conversion
to the nearest value (2**53 + 1 -> 2**53), as Apache Hudi's record rewrite and hudi-rs do. Spark's parquet
scan itself reads neither long -> double nor an integer -> float, and Arrow's safe cast refuses integers a
double cannot hold exactly; both paths of the write (on the driver, Spark tasks) leave such files."""

from __future__ import annotations

import numpy as np
import pytest

import hudilite

pytest.importorskip("hudi")
from tests.hudi_rs import read_hudi_rs  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")

BIG = 2**53 + 1  # no double holds it: Java's (double) gives 2**53


def _as(value: int, kind: str) -> float:
    return float(np.float32(value)) if kind == "float" else float(value)


def _write(spark, path, sql, table_type, on_driver):
    opts = {} if on_driver else {"hudilite.write.small.batch.max.rows": "0"}
    return hudilite.write(spark.sql(sql), path, record_key="id", precombine_field="v", partition_by=("pt",),
                          table_type=table_type, options=opts)


def _rows(rows) -> list:
    out = []
    for r in rows:
        r = r if isinstance(r, dict) else r.asDict(recursive=True)
        out.append((r["id"], r["a"], r["s"]["x"] if r["s"] is not None else None))
    return sorted(out)


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
@pytest.mark.parametrize("stored,widened,on_driver", [
    ("bigint", "double", True), ("bigint", "double", False), ("bigint", "float", True), ("int", "float", False)])
def test_integers_widened_to_floating_point_read_everywhere(spark, tmp_path, table_type, stored, widened,
                                                            on_driver):
    path = str(tmp_path / "t")
    big = BIG if stored == "bigint" else 2**24 + 1  # beyond a float's exact integers too
    # partition p: id 3 stays in a base file of the integer type, which a copy-on-write upsert of id 1 rewrites
    # (its stored integer promoted); partition q is never written again
    c1 = _write(spark, path, f"""
        select 1 as id, 1 as v, cast({big} as {stored}) as a, named_struct('x', cast({big} as {stored})) as s,
               'p' as pt
        union all select 2, 1, cast(20 as {stored}), named_struct('x', cast(6 as {stored})), 'q'
        union all select 3, 1, cast({big} as {stored}), named_struct('x', cast({big} as {stored})), 'p'""",
                table_type, on_driver)
    c2 = _write(spark, path, f"""select 1 as id, 2 as v, cast(11.5 as {widened}) as a,
                                 named_struct('x', cast(7.5 as {widened}), 'y', 'new') as s, 'p' as pt""",
                table_type, on_driver)
    assert dict(hudilite.read(spark, path).dtypes)["a"] == widened

    def x(v):
        return _as(v, widened)

    latest = [(1, 11.5, 7.5), (2, 20.0, 6.0), (3, x(big), x(big))]
    first = [(1, x(big), x(big)), (2, 20.0, 6.0), (3, x(big), x(big))]
    assert _rows(hudilite.read(spark, path).collect()) == latest, "snapshot"
    assert _rows(read_hudi_rs(path).to_pylist()) == latest, "hudi-rs"
    assert _rows(hudilite.read(spark, path, as_of=c1).collect()) == first, "time travel to the integer commit"
    assert _rows(hudilite.read(spark, path, begin="0").collect()) == latest, "incremental read"
    assert _rows(hudilite.read(spark, path, begin=c1, end=c2).collect()) == [(1, 11.5, 7.5)]
    assert _rows(hudilite.Table(path, spark=spark).changes("0").collect()) == latest, "change read"
    hudilite.register(spark)
    assert _rows(spark.read.format("hudilite").load(path).collect()) == latest, "SQL data source"
    local = hudilite.Table(path).to_arrow()
    if table_type == "COPY_ON_WRITE":
        assert _rows(local.to_pylist()) == latest, "Table.to_arrow"
    else:
        assert local is None  # log files to merge: read with Spark
        assert _rows(hudilite.read(spark, path, read_optimized=True).collect()) == first, "read optimized"
        assert hudilite.Table(path, spark=spark).services.compact(force=True)
        assert _rows(hudilite.read(spark, path).collect()) == latest, "after compaction"
        assert _rows(read_hudi_rs(path).to_pylist()) == latest, "hudi-rs after compaction"
