"""Global index (hoodie.index.type=GLOBAL_BLOOM / GLOBAL_SIMPLE, hudilite/index/global_index.py): a record whose
partition value changes is stored once - deleted from its old partition and written to the new one in the
same commit - in copy-on-write and merge-on-read tables, by the Arrow and the Spark writer; hudi-rs reads the
same rows after every commit; a change read sees a move as one update whose before image is the old row, so a
per-partition aggregate folded from the changes retracts the old row."""

from __future__ import annotations

import os

import pyarrow as pa
import pytest

import hudilite
from hudilite.errors import InvalidWriteError
from hudilite.spark.changes import changes
from hudilite.table import HoodieTable
from tests.hudi_rs import read_hudi_rs

GLOBAL = {"hoodie.index.type": "GLOBAL_BLOOM"}
COLS = ["id", "v", "dt", "name"]


def _batch(rows):
    """rows: (id, v, dt, name[, deleted])"""
    return pa.table({
        "id": pa.array([r[0] for r in rows], pa.int64()),
        "v": pa.array([r[1] for r in rows], pa.int64()),
        "dt": pa.array([r[2] for r in rows], pa.string()),
        "name": pa.array([r[3] for r in rows], pa.string()),
        "_hoodie_is_deleted": pa.array([bool(r[4]) if len(r) > 4 else False for r in rows], pa.bool_()),
    })


def _write(spark, path, rows, *, table_type="COPY_ON_WRITE", options=GLOBAL, **kw):
    data = _batch(rows)
    if spark is not None:  # the Spark writer
        data = spark.createDataFrame(data.to_pandas())
    return hudilite.write(data, path, record_key="id", precombine_field="v", partition_by=("dt",),
                          table_type=table_type, options=options, **kw)


def _ours(spark, path, **kw):
    return sorted(tuple(r) for r in hudilite.read(spark, path, **kw)
                  .select(*COLS, "_hoodie_partition_path").collect())


def _rs(path, **kw):
    t = read_hudi_rs(path, **kw)
    if t is None:
        return []
    return sorted(zip(*(t.column(c).to_pylist() for c in COLS + ["_hoodie_partition_path"])))


def _want(model):
    return sorted((k, v, dt, name, f"dt={dt}") for k, (v, dt, name) in model.items())


def _apply(model, rows):
    """The global upsert rules: per key the batch's highest v (ties: the later row), which replaces the stored
    record (wherever it is) when its v is >= the stored one; a winning delete removes the key."""
    latest = {}
    for r in rows:
        if r[0] not in latest or r[1] >= latest[r[0]][1]:
            latest[r[0]] = r
    for k, r in latest.items():
        if k in model and r[1] < model[k][0]:
            continue
        if len(r) > 4 and r[4]:
            model.pop(k, None)
        else:
            model[k] = (r[1], r[2], r[3])


def _fold(agg, ch):
    """A per-partition row count maintained from change rows: 'I'/'U' add, 'D'/'B' retract."""
    for r in ch:
        sign = 1 if r["_change_op"] in ("I", "U") else -1
        agg[r["dt"]] = agg.get(r["dt"], 0) + sign
    return {k: v for k, v in agg.items() if v}


SCENARIO = [
    [(1, 1, "a", "x1"), (2, 1, "a", "x2"), (3, 1, "b", "x3"), (4, 1, "c", "x4"), (5, 1, "c", "x5")],
    [(1, 2, "b", "moved")],  # a move
    [(2, 3, "b", "m3"), (2, 5, "c", "m5"), (2, 4, "a", "m4"),  # several moves of one key: v=5 (c) wins
     (3, 2, "c", "t1"), (3, 2, "a", "t2")],  # a tie: the later row (a)
    [(4, 2, "a", "m"), (4, 3, "b", "gone", True),  # move + delete of one key in one batch: deleted
     (1, 3, "zz", "", True),  # a delete naming another partition than the stored one: deletes the record
     (5, 2, "a", "m")],
    [(2, 6, "a", "back"), (3, 3, "b", "back"), (1, 4, "a", "again")],  # move back; re-insert of a deleted key
    [(2, 1, "c", "late"), (5, 3, "a", "same")],  # a late move loses (no move); an update in place
]


@pytest.mark.parametrize("table_type,writer", [("COPY_ON_WRITE", "arrow"), ("COPY_ON_WRITE", "spark"),
                                               ("MERGE_ON_READ", "arrow"), ("MERGE_ON_READ", "spark")])
def test_moves_store_each_key_once(spark, tmp_path, table_type, writer):
    path = str(tmp_path / "t")
    model, agg, prev = {}, {}, None
    for i, rows in enumerate(SCENARIO):
        c = _write(spark if writer == "spark" else None, path, rows, table_type=table_type)
        _apply(model, rows)
        want = _want(model)
        assert _ours(spark, path) == want, f"batch {i}"
        assert _rs(path) == want, f"batch {i}: hudi-rs"
        if prev is not None:
            ch = [r.asDict() for r in changes(spark, path, prev, c, before_image=True).collect()]
            agg = _fold(agg, ch)
            if i == 1:  # the move: one update of key 1, its before image the row in the old partition
                assert sorted((r["id"], r["_change_op"], r["dt"]) for r in ch) == [(1, "B", "a"), (1, "U", "b")]
        else:
            agg = _fold(agg, [r.asDict() for r in changes(spark, path, None, c).collect()])
        counts = {}
        for k, (v, dt, name) in model.items():
            counts[dt] = counts.get(dt, 0) + 1
        assert agg == counts, f"batch {i}: the aggregate over the changes retracts the moved rows"
        prev = c
    # a change read over the whole sequence after the first commit: every key once, moves as updates
    first = HoodieTable.open(path).timeline.completed()[0].timestamp
    ch = [r.asDict() for r in changes(spark, path, first, None, before_image=True).collect()]
    ops = sorted((r["id"], r["_change_op"]) for r in ch)
    assert ops == [(1, "B"), (1, "U"), (2, "B"), (2, "U"), (3, "B"), (3, "U"), (4, "D"), (5, "B"), (5, "U")]
    assert {r["dt"] for r in ch if r["id"] == 2 and r["_change_op"] == "B"} == {"a"}


def test_move_counts_and_change_images_arrow(tmp_path):
    """One commit moves a key: the write stats count a delete in the old partition and an insert in the new one;
    the commit's change images (read without Spark) are one 'U' and its 'B'."""
    from hudilite.reader.changes import local_changes

    path = str(tmp_path / "t")
    c1 = _write(None, path, [(1, 1, "a", "x"), (2, 1, "a", "y")])
    c2 = _write(None, path, [(1, 2, "b", "moved")])
    assert (c2.stats["inserted"], c2.stats["deleted"], c2.stats["updated"]) == (1, 1, 0)
    ch = local_changes(path, c1, c2, before_image=True)
    assert sorted((r["id"], r["_change_op"], r["dt"], r["name"]) for r in ch.to_pylist()) == \
        [(1, "B", "a", "x"), (1, "U", "b", "moved")]
    assert sorted(local_changes(path, c1, c2).column("_change_op").to_pylist()) == ["U"]
    assert _rs(path) == [(1, 2, "b", "moved", "dt=b"), (2, 1, "a", "y", "dt=a")]


def test_partition_scoped_index_is_the_default(tmp_path):
    """Without the option (and with BLOOM / SIMPLE) a key is unique within its partition, as in Apache Hudi's
    non-global indexes: the same key in another partition is another record."""
    path = str(tmp_path / "t")
    _write(None, path, [(1, 1, "a", "x")], options=None)
    _write(None, path, [(1, 2, "b", "y")], options={"hoodie.index.type": "SIMPLE"})
    _write(None, path, [(1, 3, "c", "z")], options={"hoodie.index.type": "bloom"})
    assert _rs(path) == [(1, 1, "a", "x", "dt=a"), (1, 2, "b", "y", "dt=b"), (1, 3, "c", "z", "dt=c")]


@pytest.mark.parametrize("writer", ["arrow", "spark"])
def test_update_partition_path_false_updates_in_place(spark, tmp_path, writer):
    """`hoodie.bloom.index.update.partition.path=false`: the update goes to the partition holding the key; the
    row keeps its old partition path (its partition column holds the new value, as in Apache Hudi)."""
    path = str(tmp_path / "t")
    w = spark if writer == "spark" else None
    _write(w, path, [(1, 1, "a", "x"), (2, 1, "b", "y")])
    opts = {"hoodie.index.type": "GLOBAL_SIMPLE", "hoodie.simple.index.update.partition.path": "false"}
    c = _write(w, path, [(1, 2, "b", "upd"), (3, 1, "b", "new")], options=opts)
    assert c.stats["updated"] == 1 and c.stats["inserted"] == 1 and c.stats["deleted"] == 0
    want = [(1, 2, "b", "upd", "dt=a"), (2, 1, "b", "y", "dt=b"), (3, 1, "b", "new", "dt=b")]
    assert _ours(spark, path) == want and _rs(path) == want


def test_move_under_pending_compaction(spark, tmp_path):
    """Merge-on-read: a key moves out of a file group held by a pending compaction plan (its delete goes to the
    compaction instant's slice) and back again; before and after the compaction runs, one row per key."""
    from hudilite.services.compaction import run_compaction, schedule_compaction

    path = str(tmp_path / "t")
    mor = dict(table_type="MERGE_ON_READ")
    _write(None, path, [(1, 1, "a", "x"), (2, 1, "a", "y"), (3, 1, "b", "z")], **mor)
    _write(None, path, [(2, 2, "a", "y2")], **mor)
    assert schedule_compaction(path, {"hoodie.compact.inline.max.delta.commits": "1"})
    _write(None, path, [(1, 2, "b", "moved")], **mor)
    want = [(1, 2, "b", "moved", "dt=b"), (2, 2, "a", "y2", "dt=a"), (3, 1, "b", "z", "dt=b")]
    # (hudi-rs does not read log files behind a pending compaction - any write's, not only a move's - so it
    # is compared once the compaction has run, as in test_mor.py)
    assert _ours(spark, path) == want
    assert run_compaction(path)
    assert _ours(spark, path) == want and _rs(path) == want
    _write(None, path, [(1, 3, "a", "back")], **mor)
    want = [(1, 3, "a", "back", "dt=a"), (2, 2, "a", "y2", "dt=a"), (3, 1, "b", "z", "dt=b")]
    assert _ours(spark, path) == want and _rs(path) == want


def _files(path):
    return sorted(os.path.relpath(os.path.join(d, f), path) for d, _, fs in os.walk(path) for f in fs
                  if "/.hoodie" not in "/" + os.path.relpath(d, path) + "/" and not f.startswith(".hoodie_partition"))


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_failed_move_is_rolled_back_on_both_sides(spark, tmp_path, monkeypatch, table_type):
    """A move whose commit fails leaves no trace in either partition: the rollback removes the old partition's
    rewrite / delete log and the new partition's file."""
    from hudilite.writer import client

    path = str(tmp_path / "t")
    _write(None, path, [(1, 1, "a", "x"), (2, 1, "a", "y")], table_type=table_type)
    files = _files(path)

    def die(*a, **k):
        raise RuntimeError("commit failed")

    monkeypatch.setattr(client.Transaction, "complete", die)
    with pytest.raises(RuntimeError, match="commit failed"):
        _write(None, path, [(1, 2, "b", "moved")], table_type=table_type)
    monkeypatch.undo()
    assert _files(path) == files
    want = [(1, 1, "a", "x", "dt=a"), (2, 1, "a", "y", "dt=a")]
    assert _ours(spark, path) == want and _rs(path) == want


def test_bad_index_options_are_rejected_before_writing(tmp_path):
    path = str(tmp_path / "t")
    _write(None, path, [(1, 1, "a", "x")])
    before = _files(path), sorted(os.listdir(os.path.join(path, ".hoodie")))
    with pytest.raises(InvalidWriteError, match="hoodie.index.type='HBASE'"):
        _write(None, path, [(1, 2, "b", "y")], options={"hoodie.index.type": "HBASE"})
    with pytest.raises(InvalidWriteError, match="update.partition.path"):
        _write(None, path, [(1, 2, "b", "y")],
               options={**GLOBAL, "hoodie.bloom.index.update.partition.path": "maybe"})
    assert (_files(path), sorted(os.listdir(os.path.join(path, ".hoodie")))) == before
