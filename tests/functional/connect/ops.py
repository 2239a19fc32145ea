"""The core's key operations on a fresh base directory, as plain values: run over a classic session in the test
process and over Spark Connect in a subprocess (`python -m tests.functional.connect.ops sc://... BASE`, which
prints them as JSON), then compared. Instant times and file names differ between runs and are left out."""

import json
import sys

import hudilite

SCHEMA = "id long, ts long, name string, region string"
KW = dict(record_key="id", precombine_field="ts", partition_by=("region",))


def _rows(df, drop_prefix=("_hoodie_",), drop=("_change_time", "_commit_time")):
    cols = [c for c in df.columns if not c.startswith(drop_prefix) and c not in drop]
    return sorted([list(r) for r in df.select(*cols).collect()], key=repr)


def run_ops(spark, base: str) -> dict:
    hudilite.register(spark)
    out = {}
    for tt in ("COPY_ON_WRITE", "MERGE_ON_READ"):
        p = f"{base}/{tt.lower()}"
        first = spark.createDataFrame([(i, 1, f"n{i}", "a" if i % 2 else "b") for i in range(10)], SCHEMA)
        c1 = hudilite.write(first, p, table_type=tt, operation="insert", **KW)
        upd = spark.createDataFrame([(i, 2, f"u{i}", "a" if i % 2 else "b") for i in range(5, 12)], SCHEMA)
        c2 = hudilite.write(upd, p, table_type=tt, **KW)
        gone = spark.createDataFrame([(0, 3, "x", "b"), (7, 3, "x", "a")], SCHEMA)
        c3 = hudilite.write(gone, p, table_type=tt, operation="delete", **KW)
        r = {"snapshot": _rows(hudilite.read(spark, p)),
             "as_of_first": _rows(hudilite.read(spark, p, as_of=c1)),
             "incremental": _rows(hudilite.read(spark, p, begin=c1, end=c2)),
             "changes": _rows(hudilite.changes(spark, p, c1, c3)),
             "changes_before": _rows(hudilite.changes(spark, p, c2, c3, before_image=True))}
        if tt == "MERGE_ON_READ":
            r["compacted"] = len(hudilite.Table.open(p, spark=spark).services.compact(force=True))
            r["after_compaction"] = _rows(hudilite.read(spark, p))
            r["read_optimized"] = _rows(hudilite.read(spark, p, read_optimized=True))
        out[tt] = r
    return out


if __name__ == "__main__":
    from pyspark.sql import SparkSession

    session = SparkSession.builder.remote(sys.argv[1]).getOrCreate()
    result = run_ops(session, sys.argv[2])
    print("RESULT " + json.dumps(result, default=str))
