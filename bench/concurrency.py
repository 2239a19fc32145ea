"""Concurrent writers and the streaming sink, in one run.

    python -m bench.concurrency                           # small: 3 writers x 20k rows, 8 micro-batches
    python -m bench.concurrency --writers 4 --rows 100000 --upsert 20000 --batches 12 --batch-rows 5000

1. N concurrent writers on disjoint partitions vs one writer, same total data. A table with N partitions of
   `--rows` rows each; then each round upserts `--upsert` rows into every partition (half updates, half
   inserts): by N threads of one SparkSession at once (optimistic concurrency control, one commit each), or
   by one writer doing the same N upserts one after the other. Rows per second, median over `--repeat`
   rounds, and the ratio concurrent / sequential. Also one writer doing all N partitions in one commit.
2. The streaming sink, async instants vs blocking instants: a file source with `--batches` files, one per
   micro-batch (`--batch-rows` rows, upserts of a key space twice the batch size), trigger availableNow.
   Steady state = micro-batches after the first two (the first builds the table); batches per second and
   the ratio async / blocking. Both runs read the same files, into separate tables.

Every run checks its result (row counts against a reference) and exits non-zero on a mismatch.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time

OCC = {"hoodie.write.concurrency.mode": "optimistic_concurrency_control"}
WRITE = {"record_key": "id", "precombine_field": "ver", "partition_by": ["part"]}
SCHEMA = "id long, part string, val long, ver long, payload string"


def _rows(spark, part: int, lo: int, n: int, ver: int):
    from pyspark.sql import functions as F

    return (spark.range(lo, lo + n).withColumnRenamed("id", "id")
            .select(F.col("id"), F.lit(f"p{part}").alias("part"), (F.col("id") * 7 + ver).alias("val"),
                    F.lit(ver).cast("long").alias("ver"),
                    F.concat(F.lit("payload-"), F.col("id").cast("string")).alias("payload")))


def bench_writers(spark, work: str, writers: int, rows: int, upsert: int, repeat: int) -> dict:
    import hudilite

    path = os.path.join(work, "writers")
    shutil.rmtree(path, ignore_errors=True)
    base = None
    for p in range(writers):
        df = _rows(spark, p, p * 10_000_000, rows, 0)
        base = df if base is None else base.unionByName(df)
    hudilite.write(base, path, operation="bulk_insert", options=OCC, **WRITE)
    seq_t, conc_t, one_t = [], [], []
    ver = 0
    expected = writers * rows

    def batch(p, ver):  # half updates of existing keys, half inserts of new keys
        lo = p * 10_000_000 + rows - upsert // 2 + (ver - 1) * (upsert - upsert // 2)
        return _rows(spark, p, lo, upsert, ver)

    for _ in range(repeat):
        # sequential: one writer, N commits
        ver += 1
        t0 = time.perf_counter()
        for p in range(writers):
            hudilite.write(batch(p, ver), path, options=OCC, **WRITE)
        seq_t.append(time.perf_counter() - t0)
        expected += writers * (upsert - upsert // 2)
        # concurrent: N writers at once, one commit each
        ver += 1
        errors = []

        def run(p, v=ver):
            try:
                hudilite.write(batch(p, v), path, options=OCC, **WRITE)
            except BaseException as e:  # noqa: BLE001
                errors.append(e)

        ths = [threading.Thread(target=run, args=(p,)) for p in range(writers)]
        t0 = time.perf_counter()
        for t in ths:
            t.start()
        for t in ths:
            t.join()
        conc_t.append(time.perf_counter() - t0)
        if errors:
            raise SystemExit(f"concurrent writers on disjoint partitions failed: {errors!r}")
        expected += writers * (upsert - upsert // 2)
        # one writer, all partitions in one commit
        ver += 1
        df = None
        for p in range(writers):
            df = batch(p, ver) if df is None else df.unionByName(batch(p, ver))
        t0 = time.perf_counter()
        hudilite.write(df, path, options=OCC, **WRITE)
        one_t.append(time.perf_counter() - t0)
        expected += writers * (upsert - upsert // 2)
    got = hudilite.read(spark, path).count()
    if got != expected:
        raise SystemExit(f"writers bench: table has {got} rows, expected {expected}")
    total = writers * upsert
    out = {
        "rows_per_round": total,
        "sequential_s": statistics.median(seq_t), "concurrent_s": statistics.median(conc_t),
        "one_commit_s": statistics.median(one_t),
    }
    out["sequential_rows_per_s"] = total / out["sequential_s"]
    out["concurrent_rows_per_s"] = total / out["concurrent_s"]
    out["one_commit_rows_per_s"] = total / out["one_commit_s"]
    out["ratio_concurrent_vs_sequential"] = out["concurrent_rows_per_s"] / out["sequential_rows_per_s"]
    out["ratio_concurrent_vs_one_commit"] = out["concurrent_rows_per_s"] / out["one_commit_rows_per_s"]
    out["raw"] = {"sequential": seq_t, "concurrent": conc_t, "one_commit": one_t}
    return out


def _stream_files(src: str, batches: int, batch_rows: int) -> None:
    os.makedirs(src, exist_ok=True)
    for b in range(batches):
        with open(os.path.join(src, f".{b:05d}.tmp"), "w") as f:
            for i in range(batch_rows):
                k = (b * batch_rows // 2 + i) % (2 * batch_rows)
                f.write(json.dumps({"id": k, "part": f"p{k % 4}", "val": b * 1000 + i, "ver": b,
                                    "payload": f"payload-{k}"}) + "\n")
        os.rename(os.path.join(src, f".{b:05d}.tmp"), os.path.join(src, f"{b:05d}.json"))
        time.sleep(0.01)


def bench_stream(spark, work: str, batches: int, batch_rows: int, async_instants: bool) -> dict:
    import hudilite

    name = "async" if async_instants else "blocking"
    src = os.path.join(work, "stream-src")
    path, chk = os.path.join(work, f"stream-{name}"), os.path.join(work, f"stream-{name}-chk")
    shutil.rmtree(path, ignore_errors=True)
    shutil.rmtree(chk, ignore_errors=True)
    sink = hudilite.Table.create(path, **WRITE).sink(query_id=f"bench-{name}", async_instants=async_instants)
    marks: list[float] = []

    def fn(df, batch_id):
        sink(df, batch_id)
        marks.append(time.perf_counter())

    t0 = time.perf_counter()
    q = (spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(src).writeStream.foreachBatch(fn)
         .option("checkpointLocation", chk).trigger(availableNow=True).start())
    q.awaitTermination()
    sink.close()
    end = time.perf_counter()
    steady = batches - 2
    steady_s = end - marks[1]  # from the end of batch 1 to the last commit completed
    keys = set()
    for b in range(batches):
        keys |= {(b * batch_rows // 2 + i) % (2 * batch_rows) for i in range(batch_rows)}
    got = hudilite.read(spark, path).count()
    if got != len(keys) or len(sink.committed) != batches:
        raise SystemExit(f"stream bench ({name}): {got} rows (expected {len(keys)}), "
                         f"{len(sink.committed)} commits (expected {batches})")
    return {"total_s": end - t0, "steady_batches": steady, "steady_s": steady_s,
            "steady_batches_per_s": steady / steady_s, "steady_rows_per_s": steady * batch_rows / steady_s}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--writers", type=int, default=3)
    ap.add_argument("--rows", type=int, default=20_000, help="rows per partition in the base table")
    ap.add_argument("--upsert", type=int, default=4_000, help="rows per writer per round")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--batches", type=int, default=8)
    ap.add_argument("--batch-rows", type=int, default=2_000)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--work-dir", default=None)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)

    import hudilite

    work = args.work_dir or tempfile.mkdtemp(prefix="hudilite-bench-concurrency-")
    spark = hudilite.local_session(args.master, app_name="bench-concurrency")
    # warm up (JVM, Python workers) outside the timings
    hudilite.write(_rows(spark, 0, 0, 100, 0), os.path.join(work, "warmup"), options=OCC, **WRITE)

    res = {"args": vars(args)}
    w = bench_writers(spark, work, args.writers, args.rows, args.upsert, args.repeat)
    res["writers"] = w
    print(f"\n{args.writers} writers x {args.upsert} rows/round on disjoint partitions (median of {args.repeat}):")
    print(f"  one writer, {args.writers} commits one after another: {w['sequential_s']:.2f} s "
          f"({w['sequential_rows_per_s']:.0f} rows/s)")
    print(f"  {args.writers} concurrent writers, one commit each:     {w['concurrent_s']:.2f} s "
          f"({w['concurrent_rows_per_s']:.0f} rows/s)")
    print(f"  one writer, one commit of all partitions:  {w['one_commit_s']:.2f} s "
          f"({w['one_commit_rows_per_s']:.0f} rows/s)")
    print(f"  ratio concurrent / sequential: {w['ratio_concurrent_vs_sequential']:.2f}x; "
          f"concurrent / one commit: {w['ratio_concurrent_vs_one_commit']:.2f}x")

    _stream_files(os.path.join(work, "stream-src"), args.batches, args.batch_rows)
    res["stream_blocking"] = bench_stream(spark, work, args.batches, args.batch_rows, False)
    res["stream_async"] = bench_stream(spark, work, args.batches, args.batch_rows, True)
    a, b = res["stream_async"], res["stream_blocking"]
    res["stream_ratio_async_vs_blocking"] = a["steady_batches_per_s"] / b["steady_batches_per_s"]
    print(f"\nstreaming sink, {args.batches} micro-batches x {args.batch_rows} rows "
          f"(steady state: the last {a['steady_batches']}):")
    print(f"  blocking instants: {b['steady_batches_per_s']:.2f} batches/s ({b['steady_rows_per_s']:.0f} rows/s)")
    print(f"  async instants:    {a['steady_batches_per_s']:.2f} batches/s ({a['steady_rows_per_s']:.0f} rows/s)")
    print(f"  ratio async / blocking: {res['stream_ratio_async_vs_blocking']:.2f}x")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(res, f, indent=2)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
