"""Change reads in completion order (`hudilite.changes`, `hudilite.read(begin=, end=)`), cleaned/archived ranges,
pending writes (`commit=False`: write-audit-publish) and partition readiness."""

import glob
import os

import pytest

import hudilite
from hudilite.errors import RangeUnavailableError
from hudilite.reader.changes import latest_position
from hudilite.table import HoodieTable

SCHEMA = "id long, version long, dt string, name string"
SCHEMA_DEL = SCHEMA + ", _hoodie_is_deleted boolean"
OCC = {"hoodie.write.concurrency.mode": "optimistic_concurrency_control"}


@pytest.fixture(autouse=True, params=["images", "diff"])
def change_source(request, monkeypatch):
    """Every test twice: commits write change images (single-commit ranges read them), and commits without
    them (every range diffs the file slices)."""
    import dataclasses

    from hudilite import options

    monkeypatch.setattr(options, "CHANGE_IMAGES",
                        dataclasses.replace(options.CHANGE_IMAGES, default=request.param == "images"))
    return request.param


def w(spark, path, rows, schema=SCHEMA, **kw):
    kw.setdefault("options", OCC)
    return hudilite.write(spark.createDataFrame(rows, schema), path, record_key="id", precombine_field="version",
                          partition_by="dt", **kw)


def ops(df) -> dict:
    return {(r["id"], r["_change_op"]): (r["version"], r["name"]) for r in df.collect()}


def test_changes_insert_update_delete_and_before_images(spark, table_path):
    c1 = w(spark, table_path, [(i, 1, "a" if i % 2 else "b", f"n{i}") for i in range(1, 7)], operation="bulk_insert")
    c2 = w(spark, table_path, [(1, 2, "a", "u1", False), (2, 2, "b", "u2", False), (3, 2, "a", "x", True),
                               (7, 1, "b", "n7", False),
                               (4, 0, "b", "late", False)], SCHEMA_DEL)
    got = ops(hudilite.changes(spark, table_path, begin=c1))
    # 4's late event lost (precombine): unchanged, not reported; 3 deleted carries its last image
    assert got == {(1, "U"): (2, "u1"), (2, "U"): (2, "u2"), (7, "I"): (1, "n7"), (3, "D"): (1, "n3")}
    with_before = ops(hudilite.changes(spark, table_path, begin=c1, before_image=True))
    assert with_before == {**got, (1, "B"): (1, "n1"), (2, "B"): (1, "n2")}
    assert ops(hudilite.changes(spark, table_path, begin=c1, include_deletes=False)) == {
        k: v for k, v in got.items() if k[1] != "D"}
    # no begin: the whole snapshot (as of end), every row an insert
    assert ops(hudilite.changes(spark, table_path, end=c1)) == {(i, "I"): (1, f"n{i}") for i in range(1, 7)}
    assert ops(hudilite.changes(spark, table_path)) == {
        (r["id"], "I"): (r["version"], r["name"]) for r in hudilite.read(spark, table_path).collect()}
    assert hudilite.changes(spark, table_path, begin=c2).count() == 0
    assert hudilite.changes(spark, table_path, begin=c1, end=c1).count() == 0
    # the same as the incremental read for what is live
    inc = {(r["id"], r["version"]) for r in hudilite.read(spark, table_path, begin=c1, end=c2).collect()}
    assert inc == {(1, 2), (2, 2), (7, 1)}
    # partition filter
    assert ops(hudilite.changes(spark, table_path, begin=c1, filters=[("dt", "=", "a")])) == {
        (1, "U"): (2, "u1"), (3, "D"): (1, "n3")}


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_deletes_come_first_so_a_rekeying_consumer_ends_with_the_table(spark, tmp_path, table_type):
    """Change rows list every 'D' before the others (hudilite.reader.changes, "Deletes first"). A consumer that
    keys them anew (here rows keyed by a row id, consumed by name, as a dbt model reads a seed) and lets a key's
    later row win ends with the names the table holds - a rewritten row (old id gone, new id in) is kept."""
    src, dst = str(tmp_path / "src"), str(tmp_path / "dst")
    kw = dict(record_key="rid", partition_by="dt", table_type=table_type, options=OCC)
    row = "rid long, name string, dt string, v long"
    c1 = hudilite.write(spark.createDataFrame([(i, f"n{i}", "ab"[i % 2], 1) for i in range(1, 7)], row), src, **kw)
    # every row rewritten under a new id (one value changed), n6 gone: a seed's rebuild
    c2 = hudilite.write(spark.createDataFrame([(10 + i, f"n{i}", "ab"[i % 2], 2 if i == 3 else 1)
                                               for i in range(1, 6)], row), src, operation="insert_overwrite_table",
                        **kw)
    # then an upsert beside a delete in one commit: 'U' and 'D' rows of the images or of the diff
    c3 = hudilite.write(spark.createDataFrame([(11, "n1", "b", 5, False), (12, "n2", "a", 1, True)],
                                              row + ", _hoodie_is_deleted boolean"), src, **kw)
    consumer = dict(record_key="name", precombine_field=None, options=OCC)
    for begin, end in ((c1, c2), (c2, c3), (c1, c3)):
        for local in (None, 0):  # change images read here, or scanned (local_max_bytes=0)
            got = [(r["name"], r["_change_op"]) for r in spark_changes(spark, src, begin, end, local).collect()]
            kinds = [op for _, op in got]
            assert "D" in kinds and kinds == sorted(kinds, key=lambda op: op != "D"), (begin, end, got)
    for begin, end in ((None, c1), (c1, c2), (c2, c3)):
        feed = hudilite.changes(spark, src, begin=begin, end=end).selectExpr(
            "name", "v", "_change_op = 'D' as _hoodie_is_deleted")
        hudilite.write(feed, dst, **consumer)
        want = sorted((r["name"], r["v"]) for r in hudilite.read(spark, src, as_of=end).collect())
        assert sorted((r["name"], r["v"]) for r in hudilite.read(spark, dst).collect()) == want, end


def spark_changes(spark, path, begin, end, local_max_bytes):
    from hudilite.spark.changes import changes

    kw = {} if local_max_bytes is None else {"local_max_bytes": local_max_bytes}
    return changes(spark, path, begin=begin, end=end, **kw)


def test_delete_then_reinsert_is_an_update_across_the_range(spark, table_path):
    c1 = w(spark, table_path, [(1, 1, "a", "one"), (2, 1, "a", "two")])
    c2 = w(spark, table_path, [(1, 2, "a", "gone", True)], SCHEMA_DEL)
    c3 = w(spark, table_path, [(1, 3, "a", "back")])
    assert ops(hudilite.changes(spark, table_path, begin=c1, end=c2)) == {(1, "D"): (1, "one")}
    assert ops(hudilite.changes(spark, table_path, begin=c2, end=c3)) == {(1, "I"): (3, "back")}
    assert ops(hudilite.changes(spark, table_path, begin=c1, end=c3, before_image=True)) == {
        (1, "U"): (3, "back"), (1, "B"): (1, "one")}
    # insert and delete inside the range: nothing to report
    c4 = w(spark, table_path, [(5, 1, "b", "five")])
    c5 = w(spark, table_path, [(5, 2, "b", "five", True)], SCHEMA_DEL)
    assert hudilite.changes(spark, table_path, begin=c3, end=c5).count() == 0
    assert c4 < c5


def test_ranges_follow_completion_order(spark, table_path):
    c1 = w(spark, table_path, [(1, 1, "a", "one"), (2, 1, "b", "two")])
    first = latest_position(table_path)    # c1's completion
    slow = w(spark, table_path, [(1, 2, "a", "slow")], commit=False)   # requested first ...
    fast = w(spark, table_path, [(2, 2, "b", "fast")])                 # ... requested and completed later
    assert slow.instant_time < fast
    checkpoint = latest_position(table_path)    # what a consumer running now reads up to
    seen = ops(hudilite.changes(spark, table_path, begin=first, end=checkpoint, completion_bounds=True))
    assert seen == {(2, "U"): (2, "fast")}
    slow.complete()
    # the next range starts at the checkpoint: the slow commit completed after it, so it is read now
    nxt = ops(hudilite.changes(spark, table_path, begin=checkpoint, completion_bounds=True))
    assert nxt == {(1, "U"): (2, "slow")}
    # same with instant bounds: "after `fast` completed" includes the slow instant requested before it
    assert {r["name"] for r in hudilite.read(spark, table_path, begin=fast).collect()} == {"slow"}
    assert {r["name"] for r in hudilite.read(spark, table_path, begin=c1, end=fast).collect()} == {"fast"}
    assert {r["name"] for r in hudilite.read(spark, table_path, begin=c1).collect()} == {"fast", "slow"}


def _base_files(path, instant):
    return glob.glob(os.path.join(path, "**", f"*_{instant}.parquet"), recursive=True)


def test_cleaned_range_fails_loudly(spark, table_path, change_source):
    c1 = w(spark, table_path, [(1, 1, "a", "one"), (2, 1, "a", "two")])
    c2 = w(spark, table_path, [(1, 2, "a", "one-v2")])
    c3 = w(spark, table_path, [(2, 2, "a", "two-v2")])
    assert hudilite.changes(spark, table_path, begin=c1).count() == 2
    for f in _base_files(table_path, c1):   # the cleaner removes the slice the range starts from
        os.remove(f)
    with pytest.raises(RangeUnavailableError, match="--full-refresh"):
        hudilite.changes(spark, table_path, begin=c1)
    # the slice c2 wrote is gone too: an incremental read of (c1, c2] cannot be answered from c3's slice
    for f in _base_files(table_path, c2):
        os.remove(f)
    with pytest.raises(RangeUnavailableError, match="cleaned"):
        hudilite.read(spark, table_path, begin=c1, end=c2).collect()
    if change_source == "images":  # (c2, c3] is one commit: its change images hold the before images
        assert ops(hudilite.changes(spark, table_path, begin=c2, end=c3, before_image=True)) == {
            (2, "U"): (2, "two-v2"), (2, "B"): (1, "two")}
    else:
        with pytest.raises(RangeUnavailableError):   # (c2, c3] starts from c2's slice: gone as well
            hudilite.changes(spark, table_path, begin=c2, end=c3)
    # what is still there reads fine
    assert sorted(r["name"] for r in hudilite.read(spark, table_path).collect()) == ["one-v2", "two-v2"]
    assert hudilite.changes(spark, table_path, begin=c3).count() == 0


def test_begin_before_the_archived_timeline_fails(spark, table_path):
    # version 6: fakes a layout-1 archive (.hoodie/archived); the LSM history of 8/9: tests/unit/test_lsm_archival
    c1 = w(spark, table_path, [(1, 1, "a", "one")], options={**OCC, "hoodie.write.table.version": "6"})
    c2 = w(spark, table_path, [(1, 2, "a", "two")])
    w(spark, table_path, [(1, 3, "a", "three")])
    table = HoodieTable.open(table_path)
    # archive c1 (and c2): their instant files leave the active timeline, an archive file holds them
    os.makedirs(os.path.join(table.meta_path, "archived"), exist_ok=True)
    with open(os.path.join(table.meta_path, "archived", ".commits_.archive.1_1-0-1"), "wb") as f:
        f.write(b"#HUDI#")
    for inst in (c1, c2):
        for p in glob.glob(os.path.join(table.meta_path, f"{inst}.*")):
            os.remove(p)
    with pytest.raises(RangeUnavailableError, match="archived"):
        hudilite.changes(spark, table_path, begin=c1)
    assert hudilite.read(spark, table_path).collect()[0]["name"] == "three"


def test_pending_write_audit_then_complete_or_abort(spark, table_path):
    c1 = w(spark, table_path, [(1, 1, "a", "one"), (2, 1, "b", "two")], options={})
    p = w(spark, table_path, [(1, 2, "a", "bad"), (3, 1, "c", "three")], options={}, commit=False)
    # readers do not see it; the audit does (the table as it will be)
    assert sorted(r["name"] for r in hudilite.read(spark, table_path).collect()) == ["one", "two"]
    assert sorted(r["name"] for r in p.read(spark).collect()) == ["bad", "three", "two"]
    files_before = sorted(glob.glob(os.path.join(table_path, "**", "*.parquet"), recursive=True))
    p.abort()
    assert sorted(r["name"] for r in hudilite.read(spark, table_path).collect()) == ["one", "two"]
    assert all(p.instant_time not in f for f in glob.glob(os.path.join(table_path, "**", "*.parquet"),
                                                           recursive=True))
    assert len(files_before) > len(glob.glob(os.path.join(table_path, "**", "*.parquet"), recursive=True))
    with pytest.raises(hudilite.HudiliteError, match="aborted"):
        p.complete()
    # publish: visible after complete, with its metadata, partitions marked ready
    p2 = w(spark, table_path, [(3, 1, "c", "three")], options={}, commit=False)
    assert p2.partitions == ["dt=c"]
    r = p2.complete({"audit": "passed"}, ready_partitions=True)
    assert sorted(x["name"] for x in hudilite.read(spark, table_path).collect()) == ["one", "three", "two"]
    md = HoodieTable.open(table_path).timeline.read_metadata(HoodieTable.open(table_path).timeline.get(str(r)))
    assert md["extraMetadata"]["audit"] == "passed"
    assert hudilite.changes(spark, table_path, begin=c1).select("name").collect()[0][0] == "three"
    # readiness: only dt=c was marked ready
    assert [x["name"] for x in hudilite.read(spark, table_path, ready_only=True).collect()] == ["three"]
    assert hudilite.read(spark, table_path, as_of=c1, ready_only=True).count() == 0
