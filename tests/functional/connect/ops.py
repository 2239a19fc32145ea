"""The core's key operations on a fresh base directory, as plain values: run over a classic session in the test
process and over Spark Connect in a subprocess (`python -m tests.functional.connect.ops sc://... BASE`, which
prints them as JSON), then compared. Instant times and file names differ between runs and are left out."""

import json
import os
import sys

import hudilite
import hudilite.streaming as hs

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
    out["stream"] = run_stream(spark, f"{base}/stream")
    return out


def run_stream(spark, base: str) -> dict:
    """The streaming sink: `write_stream` over two runs of a file stream, a replayed batch (its checkpoint
    commit removed) skipped, and a `foreachBatch(sink(...))` with a query id. Over Connect the server's Python
    worker runs the (pickled) sink."""
    src, chk, table = f"{base}/src", f"{base}/chk", f"{base}/table"
    os.makedirs(src)

    def run(sink_table=table, **kw):
        df = spark.readStream.schema("id long, v long, ts long").json(src)
        if kw:
            q = (df.writeStream.foreachBatch(hs.sink(sink_table, record_key="id", precombine_field="ts", **kw))
                 .option("checkpointLocation", f"{base}/chk_direct").trigger(availableNow=True).start())
        else:
            q = hs.write_stream(df, sink_table, checkpointLocation=chk, trigger={"availableNow": True},
                                record_key="id", precombine_field="ts")
            q.awaitTermination()
            q.hudilite_sink.close()  # classic: the last prepared commit completed
            return
        q.awaitTermination()

    def add(name, rows):
        with open(f"{src}/{name}.json", "w") as f:
            f.writelines(json.dumps(dict(zip(("id", "v", "ts"), r))) + "\n" for r in rows)

    add("a", [(1, 10, 1), (2, 20, 1)])
    run()
    add("b", [(1, 11, 2), (3, 30, 1), (2, 19, 0)])  # 2: a late record, it loses
    run()
    for name in ("1", ".1.crc"):  # Spark replays batch 1; the sink finds it committed
        os.remove(f"{chk}/commits/{name}")
    run()
    run(f"{base}/direct", query_id="direct-query")
    t = hudilite.Table.open(table, spark=spark)
    with open(f"{chk}/metadata") as f:
        qid = json.load(f)["id"]
    return {"rows": _rows(hudilite.read(spark, table)), "direct": _rows(hudilite.read(spark, f"{base}/direct")),
            "commits": len(t.timeline.completed()), "last_batch": t.checkpoint(qid),
            "direct_batch": hudilite.Table.open(f"{base}/direct").checkpoint("direct-query")}


if __name__ == "__main__":
    from pyspark.sql import SparkSession

    session = SparkSession.builder.remote(sys.argv[1]).getOrCreate()
    result = run_ops(session, sys.argv[2])
    print("RESULT " + json.dumps(result, default=str))
