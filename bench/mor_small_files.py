"""Merge-on-read small files (issue 27 item 11): a small upsert spread over many partitions.

    python -m bench.mor_small_files --partitions 500 --rows-per-partition 4 --upsert 715 --repeat 3

Per repetition, fresh COW and MOR tables with the same rows: an insert of `--partitions` x
`--rows-per-partition` rows (one file group per partition), then an upsert of `--upsert` rows (updates of stored
keys spread over every partition, 10% of them new keys) — the shape of a small incremental dbt run over a
table partitioned by day. Reported:

- files the MOR upsert created, per kind (data/base files, log files, overlay entries under
  `.hoodie/.aux/hudilite_overlays`, change images, timeline files, markers, heartbeats, other `.hoodie` files),
  and the same for the COW upsert;
- `count()` of the snapshot after the upsert, timed `--counts` times per table in the same process, COW and
  MOR interleaved; medians and the MOR/COW ratio. The first MOR count is reported separately (it may have to
  compute overlay entries the write did not make).

Checks: both tables' counts equal the expected row count, and MOR's rows equal COW's.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from bench.run import files_of

KINDS = ("base", "log", "overlay", "change_images", "timeline", "markers", "heartbeat", "other_meta", "other")


def kind_of(rel: str) -> str:
    """The kind of a file of a table dir, by its path relative to the table."""
    parts = rel.split(os.sep)
    if parts[0] != ".hoodie":
        name = parts[-1]
        if name.endswith(".parquet"):
            return "base"
        if name.startswith(".") and ".log." in name:
            return "log"
        return "other"  # e.g. .hoodie_partition_metadata
    if rel.startswith(os.path.join(".hoodie", ".aux", "hudilite_overlays")):
        return "overlay"
    if rel.startswith(os.path.join(".hoodie", ".aux", "hudilite_changes")):
        return "change_images"
    if rel.startswith(os.path.join(".hoodie", ".temp")):
        return "markers"
    if rel.startswith(os.path.join(".hoodie", ".heartbeat")):
        return "heartbeat"
    if len(parts) == 2 or parts[1] == "timeline":
        return "timeline"
    return "other_meta"


def listing(path: str) -> dict[str, tuple]:
    return {os.path.relpath(p, path): st for p, st in files_of(Path(path)).items()}


def created(before: dict, after: dict) -> dict[str, int]:
    """Files created or rewritten between two listings, per kind (files created and removed in between, e.g.
    markers and heartbeats deleted at commit, are not seen)."""
    counts = dict.fromkeys(KINDS, 0)
    for rel, sig in after.items():
        if before.get(rel) != sig:
            counts[kind_of(rel)] += 1
    counts["total"] = sum(counts[k] for k in KINDS)
    return counts


def rows(partitions: int, per: int, upsert: int, seed: int = 7):
    """(load rows, upsert rows): (id, ts, dt, qty); the upsert covers every partition, 90% updates."""
    rnd = random.Random(seed)
    load = [(p * per + i, 1, f"2024-{1 + p // 28 % 12:02d}-{1 + p % 28:02d}-{p // 336}", i)
            for p in range(partitions) for i in range(per)]
    upd = []
    for j in range(upsert):
        p = j % partitions
        if j % 10 == 9:  # a new key of the partition
            upd.append((partitions * per + j, 2, load[p * per][2], j))
        else:
            upd.append((p * per + rnd.randrange(per), 2, load[p * per][2], j))
    return load, upd


def run(args) -> dict:
    import hudilite
    from hudilite.spark.session import local_session

    spark = local_session("local[2]", app_name="bench-mor-small-files")
    schema = "id long, ts long, dt string, qty long"
    load, upd = rows(args.partitions, args.rows_per_partition, args.upsert)
    expected = len({r[0] for r in load} | {r[0] for r in upd})
    work = tempfile.mkdtemp(prefix="hl-mor-small-")
    reps = []
    try:
        for rep in range(args.repeat):
            rec = {}
            paths = {}
            for tt in ("COPY_ON_WRITE", "MERGE_ON_READ"):
                path = os.path.join(work, f"{rep}_{tt}")
                kw = dict(record_key="id", precombine_field="ts", partition_by="dt", table_type=tt)
                hudilite.write(spark.createDataFrame(load, schema), path, operation="insert", **kw)
                before = listing(path)
                t0 = time.perf_counter()
                hudilite.write(spark.createDataFrame(upd, schema), path, operation="upsert", **kw)
                rec[f"{tt}_upsert_s"] = time.perf_counter() - t0
                rec[f"{tt}_files"] = created(before, listing(path))
                paths[tt] = path
            counts = {"COPY_ON_WRITE": [], "MERGE_ON_READ": []}
            for i in range(args.counts):
                for tt in ("MERGE_ON_READ", "COPY_ON_WRITE") if i % 2 == 0 else ("COPY_ON_WRITE", "MERGE_ON_READ"):
                    t0 = time.perf_counter()
                    n = hudilite.read(spark, paths[tt]).count()
                    counts[tt].append(time.perf_counter() - t0)
                    if n != expected:
                        raise SystemExit(f"!!!!!!!! CHECK FAILED: {tt} count {n} != {expected}")
            rec["count_s"] = counts
            cols = "id, ts, dt, qty"
            mor = sorted(hudilite.read(spark, paths["MERGE_ON_READ"]).selectExpr(cols.split(", ")).collect())
            cow = sorted(hudilite.read(spark, paths["COPY_ON_WRITE"]).selectExpr(cols.split(", ")).collect())
            if mor != cow:
                raise SystemExit("!!!!!!!! CHECK FAILED: MOR rows differ from COW rows")
            reps.append(rec)
            if not args.keep_tables:
                for p in paths.values():
                    shutil.rmtree(p, ignore_errors=True)
            print(json.dumps(rec))
    finally:
        if not args.keep_tables:
            shutil.rmtree(work, ignore_errors=True)
        spark.stop()
    med = statistics.median
    mor_counts = [s for r in reps for s in r["count_s"]["MERGE_ON_READ"][1:]]
    cow_counts = [s for r in reps for s in r["count_s"]["COPY_ON_WRITE"][1:]]
    summary = {
        "workload": {"partitions": args.partitions, "rows_per_partition": args.rows_per_partition,
                     "upsert": args.upsert, "repeat": args.repeat, "counts": args.counts},
        "mor_files": {k: med([r["MERGE_ON_READ_files"][k] for r in reps]) for k in (*KINDS, "total")},
        "cow_files": {k: med([r["COPY_ON_WRITE_files"][k] for r in reps]) for k in (*KINDS, "total")},
        "mor_upsert_s": med([r["MERGE_ON_READ_upsert_s"] for r in reps]),
        "cow_upsert_s": med([r["COPY_ON_WRITE_upsert_s"] for r in reps]),
        "mor_first_count_s": med([r["count_s"]["MERGE_ON_READ"][0] for r in reps]),
        "cow_first_count_s": med([r["count_s"]["COPY_ON_WRITE"][0] for r in reps]),
        "mor_count_s": med(mor_counts) if mor_counts else None,
        "cow_count_s": med(cow_counts) if cow_counts else None,
    }
    if mor_counts:
        summary["count_ratio_mor_cow"] = summary["mor_count_s"] / summary["cow_count_s"]
    summary["first_count_ratio_mor_cow"] = summary["mor_first_count_s"] / summary["cow_first_count_s"]
    return {"summary": summary, "repetitions": reps}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--partitions", type=int, default=500)
    ap.add_argument("--rows-per-partition", type=int, default=4)
    ap.add_argument("--upsert", type=int, default=715)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--counts", type=int, default=5, help="timed counts per table and repetition")
    ap.add_argument("--keep-tables", action="store_true")
    ap.add_argument("--out", help="JSON with every raw timing")
    args = ap.parse_args(argv)
    res = run(args)
    s = res["summary"]
    print("files created by the upsert, per kind (median):")
    for k in (*KINDS, "total"):
        print(f"  {k:14s} MOR {s['mor_files'][k]:>6}   COW {s['cow_files'][k]:>6}")
    print(f"upsert: MOR {s['mor_upsert_s']:.2f} s, COW {s['cow_upsert_s']:.2f} s")
    print(f"first count: MOR {s['mor_first_count_s']:.2f} s, COW {s['cow_first_count_s']:.2f} s "
          f"= {s['first_count_ratio_mor_cow']:.2f}x")
    if "count_ratio_mor_cow" in s:
        print(f"count (later, median): MOR {s['mor_count_s']:.2f} s, COW {s['cow_count_s']:.2f} s "
              f"= {s['count_ratio_mor_cow']:.2f}x")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
