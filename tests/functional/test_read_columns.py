"""`hudilite.read(columns=...)`: the projection reaches Spark's native parquet scan of files without log records
(its ReadSchema holds only the selected and filtered columns), merge-on-read slices are merged on the full
schema and then projected, and the rows equal the full read's."""

import pyarrow as pa

import hudilite

KW = {"record_key": "id", "precombine_field": "v", "partition_by": ("p",)}


def _batch(ids, v):
    ids = list(ids)
    return pa.table({"id": ids, "v": [v] * len(ids), "name": [f"n{i}.{v}" for i in ids],
                     "big": ["x" * 50] * len(ids), "p": ["a" if i % 2 else "b" for i in ids]})


def _read_schema(df) -> str:
    plan = df._jdf.queryExecution().executedPlan().toString()
    return next(line for line in plan.splitlines() if "ReadSchema" in line)


def test_columns_are_pruned_in_the_scan_and_rows_equal_the_full_read(spark, tmp_path):
    for table_type in ("COPY_ON_WRITE", "MERGE_ON_READ"):
        path = str(tmp_path / table_type)
        hudilite.write(_batch(range(40), 1), path, operation="insert", table_type=table_type, **KW)
        hudilite.write(_batch(range(30, 50), 2), path, operation="upsert", table_type=table_type, **KW)
        full = hudilite.read(spark, path)
        want = sorted((r["name"], r["id"]) for r in full.collect() if r["v"] >= 1 and r["p"] == "a")
        df = hudilite.read(spark, path, columns=["name", "id"], filters=[("p", "=", "a")])
        assert df.columns == ["name", "id"]
        assert sorted(tuple(r) for r in df.collect()) == want
        if table_type == "COPY_ON_WRITE":
            rs = _read_schema(df)
            assert "name" in rs and "id" in rs and "big:" not in rs and "_hoodie_record_key" not in rs, rs
        # read-optimized merge-on-read base files are plain files: pruned too
        ro = hudilite.read(spark, path, columns=["id"], read_optimized=True)
        assert "big:" not in _read_schema(ro)
        assert ro.count() == hudilite.read(spark, path, read_optimized=True).count()
