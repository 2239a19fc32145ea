"""Many tiny merge-on-read slices (issue 27 item 11): a read merges slices whose files are small
(`spark_read.SMALL_SLICE_CONF`) whole, many per Python task, in one vectorized merge (`merge.merge_slices`).
Updates, ordered and natural deletes, late records, in-batch duplicates and re-inserts spread over many
partitions read the same through that path, through the native scan + superseded-rows join, as
`merge_slice` of each slice, in the upsert model of test_mor, and with hudi-rs."""

from __future__ import annotations

import pyarrow as pa
import pytest

import hudilite
from hudilite.spark import read as spark_read
from hudilite.reader.merge import SliceDesc, merge_slice, merge_slices
from hudilite.reader.planner import plan_read

pytest.importorskip("hudi")
from tests.functional.test_mor import Model, hudi_rs, hudi_rs_bound  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")

SCHEMA = "id long, ts long, name string, region string, _hoodie_is_deleted boolean"
COLS = ("id", "ts", "name")
REGIONS = 9

SEQUENCE = [
    ([(i, 10, f"n{i}", False) for i in range(36)], "upsert"),
    # updates in every region, late records (ts below the stored 10), in-batch duplicates, new keys
    ([(i, 20, f"u{i}", False) for i in range(0, 36, 2)] + [(i, 5, f"late{i}", False) for i in range(1, 36, 6)]
     + [(3, 30, "dup3-high", False), (3, 25, "dup3-low", False), (40, 1, "new40", False)], "upsert"),
    # ordered deletes (one late: ts 1 < stored 20, it loses) and updates on the same slices
    ([(i, 21, None, True) for i in range(0, 36, 4)] + [(2, 1, None, True)]
     + [(i, 22, f"v{i}", False) for i in range(5, 36, 4)], "upsert"),
    # the delete operation always wins, whatever the ordering value
    ([(7, 1, None, True), (11, None, None, True), (40, None, None, True)], "delete"),
    # re-insert of deleted keys, more late records and updates of keys updated in earlier logs
    ([(0, 3, "back0", False), (7, 2, "back7", False), (5, 9, "late5", False), (6, 40, "u6b", False),
      (18, 19, "late18", False), (19, 50, "u19", False)], "upsert"),
]


def _write(spark, path, rows, *, event_time, operation, block_format):
    df = spark.createDataFrame([(i, ts, name, f"r{i % REGIONS}", d) for i, ts, name, d in rows], SCHEMA)
    return hudilite.write(df, path, record_key="id", precombine_field="ts" if event_time else None,
                          partition_by="region", operation=operation, table_type="MERGE_ON_READ",
                          options={"hoodie.logfile.data.block.format": block_format})


def _ours(spark, path, **kw) -> list[tuple]:
    return sorted(tuple(r) for r in hudilite.read(spark, path, **kw).select(*COLS).collect())


@pytest.mark.parametrize("event_time, block_format", [(True, "avro"), (True, "parquet"), (False, "parquet")],
                         ids=["event_time-avro", "event_time-parquet", "commit_time-parquet"])
def test_many_tiny_slices_merged_in_groups(spark, tmp_path, event_time, block_format):
    path = str(tmp_path / "mor")
    model = Model(event_time)
    commits = []
    for k, (rows, op) in enumerate(SEQUENCE):
        commits.append(_write(spark, path, rows, event_time=event_time, operation=op, block_format=block_format))
        model.write(k, rows, delete_op=op == "delete")
    plan = plan_read(path)
    big, small = spark_read._split_small(spark, plan, plan.merged_slices)
    assert not big and len(small) >= REGIONS, "every merged slice takes the grouped path"
    # the grouped merge of all slices at once equals merge_slice of each
    spec = plan.merge_spec()
    descs = [SliceDesc.of(s) for s in plan.slices]
    whole = merge_slices(descs, spec).select(list(COLS)).to_pylist()
    each = pa.concat_tables([merge_slice(d, spec) for d in descs]).select(list(COLS)).to_pylist()
    assert sorted(tuple(r.values()) for r in whole) == sorted(tuple(r.values()) for r in each)

    last = len(SEQUENCE) - 1
    want = model.read(last)
    assert hudi_rs(path) == want, "hudi-rs"
    assert _ours(spark, path) == want, "grouped path"
    spark.conf.set(spark_read.SMALL_SLICE_CONF, "0")
    try:
        assert _ours(spark, path) == want, "native scan + superseded-rows join"
    finally:
        spark.conf.unset(spark_read.SMALL_SLICE_CONF)
    # time travel and an incremental window take the grouped path too
    assert _ours(spark, path, as_of=commits[2]) == model.read(2) == hudi_rs(path, as_of=commits[2])
    window = _ours(spark, path, begin=commits[1], end=commits[last])
    # hudi-rs takes completion-time bounds on version 8+ (hudi_rs_bound)
    rs_window = hudi_rs(path, begin=hudi_rs_bound(path, commits[1]), end=hudi_rs_bound(path, commits[last]))
    assert window == model.read(last, (1, last)) == rs_window
    hudilite.register(spark)
    got = sorted(tuple(r) for r in spark.read.format("hudilite").load(path).select(*COLS).collect())
    assert got == want, "data source"


def test_groups_cover_every_slice_in_order():
    sized = [(i, z) for i, z in enumerate([10, 10, 500, 10, 10, 10, 10])]
    groups = spark_read._groups(sized, 4)
    assert [i for g in groups for i in g] == list(range(7))
    assert groups == [[0, 1, 2], [3, 4, 5, 6]]  # each closed at total / tasks bytes
    assert len(spark_read._groups([(i, 10) for i in range(450)], 4)) == 4  # equal slices: one group per task
    assert spark_read._groups([], 4) == []
    assert spark_read._groups([("a", 0)], 4) == [["a"]]
