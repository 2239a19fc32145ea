"""Small pieces the s3:// process tests share: the table layout, a Spark-free snapshot, hudi-rs with our
storage options, the data objects of a table."""

from __future__ import annotations

import pyarrow as pa

from hudilite.reader.merge import SliceDesc, merge_slice, read_base
from hudilite.reader.planner import plan_read

KEY = {"record_key": "id", "precombine_field": "v", "partition_by": ("p",)}
# a dead writer's lock lease and heartbeat run out within seconds, not the defaults' minutes
LEASE = {"hoodie.write.lock.storage.validity.timeout.secs": "3", "hoodie.write.lock.storage.renew.interval.secs": "1"}
FAST = {**LEASE, "hoodie.client.heartbeat.interval_in_ms": "500", "hoodie.client.heartbeat.tolerable.misses": "2"}


def rows(ids, v, part=None) -> pa.Table:
    ids = list(ids)
    return pa.table({"id": pa.array(ids, pa.int64()), "v": pa.array([v] * len(ids), pa.int64()),
                     "p": [part or ("a" if i % 2 else "b") for i in ids]})


def snapshot(path) -> list[tuple]:
    """(id, v) of the latest snapshot, planned and merged in this process (the planner and merge of every read)."""
    plan = plan_read(path)
    spec = plan.merge_spec()
    parts = [read_base(f, spec) for f in plan.plain_files]
    parts += [merge_slice(SliceDesc.of(s), spec) for s in plan.merged_slices]
    return sorted((r["id"], r["v"]) for t in parts for r in t.select(["id", "v"]).to_pylist())


def hudi_rs_snapshot(path, opts) -> list[tuple]:
    from tests.hudi_rs import hudi_rs_table

    batches = hudi_rs_table(path, opts).read()
    return sorted((r["id"], r["v"]) for b in batches for r in b.select(["id", "v"]).to_pylist())


def data_objects(store, path) -> list[str]:
    """The table's data objects (base and log files), timeline and partition metadata aside."""
    return [f for f in store.walk_files(path) if "/.hoodie/" not in f and not f.endswith(".hoodie_partition_metadata")]
