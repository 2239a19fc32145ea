"""Requests per table operation on object storage (docs/storage.md, "Request economy").

    python -m bench.s3_requests [--partitions 30] [--rows 3000] [--touched 3]

Against a local SeaweedFS: a driver-local (Arrow, no Spark) merge-on-read and copy-on-write table with
`--partitions` partitions; an insert, an upsert of rows in `--touched` partitions, a compaction (merge-on-read;
the local Arrow read merges no log files) and a snapshot read. Prints the requests of each per verb
(LIST/GET/HEAD/PUT/POST/DELETE), as counted by `hudilite.storage.s3.counting()`.
"""

from __future__ import annotations

import argparse
import uuid

import pyarrow as pa

import hudilite
from hudilite.storage.base import register_storage
from hudilite.storage.s3 import S3Storage, counting, register

VERBS = ("LIST", "GET", "HEAD", "PUT", "POST", "DELETE")


def rows(ids, partitions: int, v: int = 1) -> pa.Table:
    ids = list(ids)
    return pa.table({"id": ids, "v": [v] * len(ids), "p": [f"p{i % partitions:02d}" for i in ids]})


def measure(base: str, *, partitions: int, n_rows: int, touched: int, table_type: str) -> dict[str, dict[str, int]]:
    """{operation: {verb: requests}} of one table's insert, upsert (rows of `touched` partitions), (merge-on-read)
    compaction and snapshot read at `base` (an `s3://` path served by the process-wide backend)."""
    out: dict[str, dict[str, int]] = {}
    t = hudilite.Table.create(base, record_key="id", precombine_field="v", partition_by=("p",),
                              table_type=table_type)
    with counting() as c:
        t.write(rows(range(n_rows), partitions), "insert")
    out["insert"] = c.counts
    upd = [i for i in range(n_rows) if i % partitions < touched][: max(touched, n_rows // 10)]
    with counting() as c:
        t.write(rows(upd, partitions, v=2), "upsert")
    out["upsert"] = c.counts
    if table_type == "MERGE_ON_READ":  # log files are merged by Spark reads only: compact, then read locally
        t = hudilite.Table.open(base)
        with counting() as c:
            assert t.services.compact(force=True)
        out["compaction"] = c.counts
    with counting() as c:
        got = hudilite.Table.open(base).to_arrow(["id", "v"])
    assert got is not None and got.num_rows == n_rows, got
    out["snapshot read"] = c.counts
    return out


def table_md(results: dict[str, dict[str, dict[str, int]]]) -> str:
    lines = ["| table | operation | " + " | ".join(VERBS) + " | total |",
             "| --- | --- | " + " | ".join("---" for _ in VERBS) + " | --- |"]
    for label, ops in results.items():
        for op, counts in ops.items():
            lines.append(f"| {label} | {op} | " + " | ".join(str(counts.get(v, 0)) for v in VERBS)
                         + f" | {sum(counts.values())} |")
    return "\n".join(lines)


def main() -> None:
    from tests.s3.server import SeaweedServer

    ap = argparse.ArgumentParser()
    ap.add_argument("--partitions", type=int, default=30)
    ap.add_argument("--rows", type=int, default=3000)
    ap.add_argument("--touched", type=int, default=3)
    args = ap.parse_args()
    with SeaweedServer() as srv:
        bucket = f"bench-{uuid.uuid4().hex[:8]}"
        srv.create_bucket(bucket)
        register_storage("s3", lambda _scheme: S3Storage(srv.storage_options))
        try:
            results = {}
            for tt in ("MERGE_ON_READ", "COPY_ON_WRITE"):
                label = f"{'MOR' if tt == 'MERGE_ON_READ' else 'COW'}, {args.partitions} partitions"
                results[label] = measure(f"s3://{bucket}/{tt.lower()}", partitions=args.partitions,
                                         n_rows=args.rows, touched=args.touched, table_type=tt)
        finally:
            register()
    print(f"{args.rows} rows in {args.partitions} partitions; the upsert touches {args.touched} partitions\n")
    print(table_md(results))


if __name__ == "__main__":
    main()
