"""Change reads computed per file group (`hudilite.reader.group_changes`) against a straightforward reference
built from two snapshots: rows at `end` with an in-range commit time are 'U' (key present at `begin`) or 'I',
keys present at `begin` and gone at `end` are 'D' (their `begin` image), 'B' is the `begin` image of a 'U'.
Covers several file groups in one partition (a key deleted in one group and re-inserted into another),
replaced groups (clustering keeps commit times; insert_overwrite), merge-on-read slices and `columns=`."""

import glob
import os

import pytest

import hudilite
from hudilite.spark.changes import changes as reader_changes
from hudilite.table import HoodieTable

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")

SCHEMA = "id long, version long, dt string, name string, _hoodie_is_deleted boolean"
KEY = ("_hoodie_partition_path", "_hoodie_record_key")


@pytest.fixture(autouse=True, params=["int_keys", "string_keys"])
def key_comparison(request, monkeypatch):
    """Every test twice: keys compared on the integer key column (`MergeSpec.int_key`), and on the record-key
    strings (as for any other key type)."""
    if request.param == "string_keys":
        from hudilite.reader import planner

        monkeypatch.setattr(planner, "_int_key", lambda cfg, schema: None)
    return request.param


def w(spark, path, rows, **kw):
    rows = [r if len(r) == 5 else (*r, False) for r in rows]
    df = spark.createDataFrame(rows, SCHEMA)
    if kw.pop("split", False):
        df = df.repartition(2, "id")
    return hudilite.write(df, path, record_key="id", precombine_field="version", partition_by="dt", **kw)


def snapshot(spark, path, as_of) -> dict:
    return {tuple(r[k] for k in KEY): r.asDict() for r in hudilite.read(spark, path, as_of=as_of).collect()}


def reference(spark, path, begin, end, *, include_deletes=True, before_image=True) -> set:
    """(op, id, version, name) of the changes in (begin, end] (sequential writers: completion order = instant
    order, so `as_of` snapshots are the range's bounds)."""
    times = {i.timestamp for i in HoodieTable.open(path).timeline.completed() if begin < i.timestamp <= end}
    s0, s1 = snapshot(spark, path, begin), snapshot(spark, path, end)
    out = set()
    for k, r in s1.items():
        if r["_hoodie_commit_time"] in times:
            out.add(("U" if k in s0 else "I", r["id"], r["version"], r["name"]))
            if k in s0 and before_image:
                b = s0[k]
                out.add(("B", b["id"], b["version"], b["name"]))
    if include_deletes:
        out |= {("D", r["id"], r["version"], r["name"]) for k, r in s0.items() if k not in s1}
    return out


def got(df) -> set:
    return {(r["_change_op"], r["id"], r["version"], r["name"]) for r in df.collect()}


def groups_of(path, partition) -> set:
    return {os.path.basename(f).split("_")[0] for f in glob.glob(os.path.join(path, partition, "*.parquet"))}


def test_updates_deletes_inserts_and_moves_between_groups(spark, table_path):
    c1 = w(spark, table_path, [(i, 1, "a", f"n{i}") for i in range(40)], operation="bulk_insert", split=True)
    assert len(groups_of(table_path, "dt=a")) >= 2  # several file groups in one partition
    w(spark, table_path, [(i, 2, "a", f"u{i}") for i in range(5)] + [(i, 2, "a", "x", True) for i in (6, 7, 8)]
      + [(i, 1, "a", f"new{i}") for i in (100, 101, 102)])
    # 6 deleted above, re-inserted by a bulk insert: a new file group (the key moved between groups)
    c3 = w(spark, table_path, [(6, 3, "a", "back")], operation="bulk_insert")
    assert len(groups_of(table_path, "dt=a")) >= 3
    w(spark, table_path, [(200, 1, "a", "tmp")])
    c5 = w(spark, table_path, [(200, 2, "a", "tmp", True), (1, 3, "a", "u1-again")])
    ref = reference(spark, table_path, c1, c5)
    assert ("U", 6, 3, "back") in ref and ("B", 6, 1, "n6") in ref and not any(r[1] == 200 for r in ref)
    assert got(hudilite.changes(spark, table_path, begin=c1, end=c5, before_image=True)) == ref
    assert got(hudilite.changes(spark, table_path, begin=c1, end=c5, include_deletes=False)) == reference(
        spark, table_path, c1, c5, include_deletes=False, before_image=False)
    for b, e in ((c1, c3), (c3, c5)):
        assert got(hudilite.changes(spark, table_path, begin=b, end=e, before_image=True)) == reference(
            spark, table_path, b, e)
    # a projection: the same rows, only the asked columns (+ _change_op)
    proj = reader_changes(spark, table_path, begin=c1, end=c5, before_image=True, columns=["name", "id", "version"])
    assert proj.columns == ["id", "version", "name", "_change_op"]
    assert got(proj) == ref
    with pytest.raises(hudilite.HudiliteError, match="no such column"):
        reader_changes(spark, table_path, begin=c1, columns=["nope"])


def test_replaced_groups_clustering_and_insert_overwrite(spark, table_path):
    from hudilite.services.clustering import cluster

    c1 = w(spark, table_path, [(i, 1, "a" if i % 2 else "b", f"n{i}") for i in range(20)], split=True)
    c2 = w(spark, table_path, [(1, 2, "a", "u1")])
    done = cluster(table_path, {"hoodie.clustering.plan.strategy.sort.columns": "name"})
    assert done
    c3 = max(done)
    # clustering alone changes nothing (rows keep their commit times in the new file groups)
    assert hudilite.changes(spark, table_path, begin=c2, end=c3).count() == 0
    c4 = w(spark, table_path, [(3, 2, "a", "u3"), (5, 2, "a", "x", True)])
    for b in (c1, c2):
        ref = reference(spark, table_path, b, c4)
        assert got(hudilite.changes(spark, table_path, begin=b, end=c4, before_image=True)) == ref
    assert ("B", 3, 1, "n3") in ref and ("D", 5, 1, "n5") in ref
    # insert_overwrite of dt=b: keys not written again are deleted, rewritten ones updated, new ones inserted
    c5 = w(spark, table_path, [(0, 9, "b", "again"), (50, 1, "b", "fresh")], operation="insert_overwrite")
    ref = reference(spark, table_path, c4, c5)
    assert ("U", 0, 9, "again") in ref and ("I", 50, 1, "fresh") in ref and ("D", 2, 1, "n2") in ref
    assert got(hudilite.changes(spark, table_path, begin=c4, end=c5, before_image=True)) == ref
    assert got(hudilite.changes(spark, table_path, begin=c1, end=c5, before_image=True,
                                filters=[("dt", "=", "b")])) == {
        r for r in reference(spark, table_path, c1, c5) if r[1] % 2 == 0 or r[1] == 50}


def test_merge_on_read_changes(spark, table_path):
    mor = {"table_type": "MERGE_ON_READ"}
    c1 = w(spark, table_path, [(i, 1, "a" if i % 2 else "b", f"n{i}") for i in range(12)], **mor)
    c2 = w(spark, table_path, [(1, 2, "a", "u1"), (2, 2, "b", "u2"), (3, 2, "a", "x", True), (20, 1, "a", "i20")],
           **mor)
    c3 = w(spark, table_path, [(1, 3, "a", "u1b"), (4, 2, "b", "x", True), (21, 1, "b", "i21"),
                               (2, 1, "b", "late")], **mor)   # 2's late event loses (precombine)
    assert glob.glob(os.path.join(table_path, "*", ".*.log.*"))  # log files: merged slices
    for b, e in ((c1, c2), (c2, c3), (c1, c3)):
        assert got(hudilite.changes(spark, table_path, begin=b, end=e, before_image=True)) == reference(
            spark, table_path, b, e)
    assert ("U", 1, 3, "u1b") in reference(spark, table_path, c1, c3)
