"""Time travel and change reads on s3:// tables against the real S3 server equal the same operations on a local
table: `hudilite.read(as_of=)` at every instant, `hudilite.changes` over every consecutive pair of instants and
a long range (with before images), ranges between consumer positions (`position()`, `completion_bounds`,
`table_id`), the consumer checkpoints recorded by writes, the Arrow reads without Spark (`changes_arrow`,
`to_arrow(position=)`), and after archival the archived range refused alike (table version 6; 9 reads it from its
LSM history alike) while hudi-rs still reads the table.

Writes are driver-local Arrow writes (Table.write); the reads go through one Spark job per table.
"""

from __future__ import annotations

import pyarrow as pa
import pytest

import hudilite
from hudilite.errors import RangeUnavailableError
from hudilite.services.archival import archive
from hudilite.storage.base import unbind_storage
from tests.s3.tables import hudi_rs_snapshot

KEY = {"record_key": "id", "precombine_field": "v", "partition_by": ("p",)}
COLS = ["id", "v", "s", "p"]

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")


def _rows(ids, v) -> pa.Table:
    ids = list(ids)
    return pa.table({"id": pa.array(ids, pa.int64()), "v": pa.array([v] * len(ids), pa.int64()),
                     "s": [f"s{i}.{v}" for i in ids], "p": ["a" if i % 3 else "b" for i in ids]})


def _sorted(t) -> list[tuple]:
    return sorted((tuple(r[c] for c in t.column_names) for r in t.to_pylist()), key=repr)


def life(spark, path, table_type, so, version) -> dict:
    """The same writes and reads on the table at `path`; what each read saw, keyed by what it was (instant
    times differ between tables: reads are named by the index of their instant)."""
    from pyspark.sql import functions as F

    t = hudilite.Table.create(path, **KEY, table_type=table_type, storage_options=so,
                              options={"hoodie.write.table.version": version})
    batches = [(_rows(range(12), 1), "insert", None), (_rows(range(6, 18), 2), "upsert", ("app", 1)),
               (_rows([0, 7, 13], 0), "delete", None), (_rows(range(15, 20), 3), "upsert", ("app", 2)),
               (_rows([1, 2], 4), "upsert", None)]
    c, pos = [], []
    for data, op, ckpt in batches:
        c.append(t.write(data, op, checkpoint=ckpt))
        pos.append(t.position())
    tid = pos[0][1]
    assert all(p[1] == tid for p in pos) and [p[0] for p in pos] == sorted({p[0] for p in pos})
    seen: dict = {"checkpoint": t.checkpoint("app"), "other_app": t.checkpoint("nobody")}

    frames = {f"as_of[{i}]": hudilite.read(spark, path, as_of=ci, storage_options=so) for i, ci in enumerate(c)}
    for i in range(len(c) - 1):
        frames[f"changes({i},{i + 1}]"] = hudilite.changes(spark, path, c[i], c[i + 1], storage_options=so)
    frames["changes(0,4] before"] = hudilite.changes(spark, path, c[0], c[-1], before_image=True,
                                                      storage_options=so)
    frames["changes(,2]"] = hudilite.changes(spark, path, None, c[2], storage_options=so)
    frames["changes(pos1,] consumer"] = hudilite.changes(spark, path, pos[1][0], completion_bounds=True,
                                                         table_id=tid, storage_options=so)
    union = None
    for label, df in frames.items():
        cols = COLS + (["_change_op"] if label.startswith("changes") else [])
        df = df.select(*cols, *([] if "_change_op" in cols else [F.lit(None).cast("string").alias("_change_op")]))
        df = df.withColumn("_q", F.lit(label))
        union = df if union is None else union.unionByName(df)
    got = union.coalesce(1).toArrow()
    for label in frames:
        seen[label] = _sorted(got.filter(pa.compute.equal(got["_q"], label)).drop_columns(["_q"]))
    # without Spark: one copy-on-write commit's images, and snapshots at consumer positions
    if table_type == "COPY_ON_WRITE":
        for i in range(len(c) - 1):
            seen[f"arrow changes({i},{i + 1}]"] = _sorted(t.changes_arrow(c[i], c[i + 1], columns=COLS))
        for i, (p, _) in enumerate(pos):
            seen[f"arrow at pos[{i}]"] = _sorted(t.to_arrow(COLS, position=p))

    done = archive(path, {"hoodie.keep.min.commits": "2", "hoodie.keep.max.commits": "3",
                          "hoodie.cleaner.commits.retained": "1"}, force=True)
    seen["archived"] = [c.index(d) for d in done]
    if version == "6":  # the version-6 archive keeps no write detail a range can read
        with pytest.raises(RangeUnavailableError):
            hudilite.changes(spark, path, c[0], c[1], storage_options=so).collect()
    else:  # version 9 reads it from the LSM history: the same range as before archival
        seen["changes(0,1] after archival"] = _sorted(
            hudilite.changes(spark, path, c[0], c[1], storage_options=so).select(*COLS, "_change_op").toArrow())
    seen["latest after archival"] = _sorted(hudilite.read(spark, path, storage_options=so).select(*COLS).toArrow())
    seen["changes(3,4] after archival"] = _sorted(
        hudilite.changes(spark, path, c[3], c[4], storage_options=so).select(*COLS, "_change_op").toArrow())
    seen["checkpoint after archival"] = hudilite.Table.open(path, storage_options=so).checkpoint("app")
    return seen


@pytest.mark.parametrize("version", ["6", "9"])
@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_time_travel_and_changes_on_s3_equal_local(spark, s3_server, s3_bucket, tmp_path, table_type, version):
    so = s3_server.storage_options
    path = f"s3://{s3_bucket}/t{version}"
    try:
        on_s3 = life(spark, path, table_type, so, version)
    finally:
        unbind_storage(path)
    local = life(spark, str(tmp_path / "t"), table_type, None, version)
    assert on_s3 == local
    if version != "6":
        assert on_s3["changes(0,1] after archival"] == on_s3["changes(0,1]"]
    assert on_s3["checkpoint"] == on_s3["checkpoint after archival"] == 2 and on_s3["other_app"] is None
    assert on_s3["archived"], "archival archived nothing"
    latest = {r[0]: r[1] for r in on_s3["as_of[4]"]}
    assert latest == {i: 1 for i in range(1, 6) if i not in (1, 2)} | {1: 4, 2: 4} \
        | {i: 2 for i in range(6, 15) if i not in (7, 13)} | {i: 3 for i in range(15, 20)}
    assert {(r[0], r[-1]) for r in on_s3["changes(1,2]"]} == {(0, "D"), (7, "D"), (13, "D")}
    assert on_s3["latest after archival"] == sorted((r[:4] for r in on_s3["as_of[4]"]), key=repr)
    # hudi-rs reads the archived s3:// table through its own storage options
    assert sorted((i, v) for i, v in hudi_rs_snapshot(path, so)) == sorted(latest.items())
