"""Change images written by copy-on-write commits (hudilite/change_images.py): what they hold, that a change
read of one commit from them equals the diff of its file slices, and their lifecycle (rollback, archival,
retried tasks, the option)."""

from __future__ import annotations

import json
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import hudilite
from hudilite import change_images
from hudilite.spark import changes as changes_mod
from hudilite.table import HoodieTable

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")

SCHEMA = "id long, version long, dt string, name string, amount double, _hoodie_is_deleted boolean"


def _write(spark, path, rows, **kw):
    return hudilite.write(spark.createDataFrame(rows, SCHEMA), path, record_key="id", precombine_field="version",
                          partition_by="dt", **kw)


def _rows(df) -> list:
    return sorted((tuple(r) for r in df.collect()), key=repr)


def _entry(path, instant) -> dict | None:
    table = HoodieTable.open(path)
    raw = (table.timeline.read_metadata(table.timeline.get(instant)).get("extraMetadata") or {}).get(
        change_images.META_KEY)
    return json.loads(raw) if raw else None


@pytest.fixture
def upserted(spark, tmp_path):
    """Two partitions; the second commit updates, deletes, loses a late record, inserts into existing groups
    and creates a new partition (a new file group)."""
    path = str(tmp_path / "t")
    c1 = _write(spark, path, [(i, 1, "a" if i % 2 else "b", f"n{i}", float(i), False) for i in range(20)],
                operation="bulk_insert")
    c2 = _write(spark, path, [(1, 2, "a", "u1", 10.0, False), (2, 2, "b", "u2", 20.0, False),
                              (3, 2, "a", None, None, True), (4, 0, "b", "late", 0.0, False),
                              (5, 3, "a", "u5", 50.0, False), (100, 1, "a", "new-a", 1.0, False),
                              (200, 1, "c", "new-c", 2.0, False), (300, 1, "c", None, None, True)])
    return path, c1, c2


def test_images_hold_exactly_the_commits_changes(spark, upserted):
    path, c1, c2 = upserted
    entry = _entry(path, c2)
    assert entry and entry["images"] and len(entry["inserted"]) == 1 and entry["inserted"][0].startswith("dt=c/")
    assert _entry(path, c1) is None  # bulk_insert writes none
    imgs = pa.concat_tables([pq.read_table(os.path.join(change_images.instant_dir(path, c2), n))
                             for n in entry["images"]])
    got = sorted(zip(imgs.column("_change_op").to_pylist(), imgs.column("id").to_pylist(),
                     imgs.column("name").to_pylist()))
    assert got == sorted([("U", 1, "u1"), ("B", 1, "n1"), ("U", 2, "u2"), ("B", 2, "n2"), ("D", 3, "n3"),
                          ("U", 5, "u5"), ("B", 5, "n5"), ("I", 100, "new-a")])
    assert set(imgs.column("_hoodie_commit_time").to_pylist()) == {c1, c2}  # before images as stored


@pytest.mark.parametrize("kw", [{}, {"before_image": True}, {"include_deletes": False},
                                {"before_image": True, "columns": ["id", "name"]},
                                {"before_image": True, "filters": [("dt", "=", "a")]}])
def test_change_read_from_images_equals_the_diff(spark, upserted, monkeypatch, kw):
    path, c1, c2 = upserted
    calls = []
    real = changes_mod._image_changes
    monkeypatch.setattr(changes_mod, "_image_changes", lambda *a, **k: calls.append(1) or real(*a, **k))
    from_images = _rows(changes_mod.changes(spark, path, begin=c1, end=c2, **kw))
    assert calls, "the single-commit range was read from the change images"
    monkeypatch.setattr(changes_mod, "image_files", lambda table, rng: None)
    assert from_images == _rows(changes_mod.changes(spark, path, begin=c1, end=c2, **kw))


TYPED = ("id long, version long, dt string, ts timestamp, d date, amount decimal(12,2), tags array<string>, "
         "addr struct<city:string,zip:int>, attrs map<string,int>, _hoodie_is_deleted boolean")


def _typed(i, version, dt_, deleted=False):
    import datetime as dt
    from decimal import Decimal
    return (i, version, dt_, dt.datetime(2024, 3, 1, 9, i % 60, tzinfo=dt.timezone.utc), dt.date(2024, 3, 1 + i % 3),
            Decimal(f"{i}.{version:02d}"), [f"t{i}", None], (f"c{i}", None if i % 2 else i), {"k": version},
            deleted)


@pytest.mark.parametrize("kw", [{}, {"before_image": True}, {"include_deletes": False},
                                {"before_image": True, "columns": ["id", "ts", "addr"]},
                                {"before_image": True, "filters": [("dt", "=", "a")]}])
@pytest.mark.parametrize("tz", ["UTC", "America/New_York"])
def test_small_image_ranges_are_a_local_relation_equal_to_the_scan(spark, tmp_path, kw, tz):
    """A small image-served range becomes a local relation read in this process: same schema (types and
    nullability), same rows as the Spark scan of the images, in any session time zone."""
    path = str(tmp_path / "typed")

    def write(rows, **w):
        return hudilite.write(spark.createDataFrame(rows, TYPED), path, record_key="id", precombine_field="version",
                              partition_by="dt", **w)
    c1 = write([_typed(i, 1, "a" if i % 2 else "b") for i in range(12)], operation="bulk_insert")
    c2 = write([_typed(1, 2, "a"), _typed(2, 2, "b"), _typed(3, 2, "a", deleted=True), _typed(50, 1, "c")])
    old = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", tz)
    try:
        local = changes_mod.changes(spark, path, begin=c1, end=c2, **kw)
        scan = changes_mod.changes(spark, path, begin=c1, end=c2, local_max_bytes=0, **kw)
        assert local.schema == scan.schema
        got = _rows(local.selectExpr("*", "cast(ts as string) as ts_text") if "ts" in local.columns else local)
        assert got == _rows(scan.selectExpr("*", "cast(ts as string) as ts_text") if "ts" in scan.columns else scan)
        assert "U" in {r["_change_op"] for r in local.collect()}
    finally:
        spark.conf.set("spark.sql.session.timeZone", old)
    if not os.environ.get("HUDILITE_TEST_CONNECT"):  # the plans: a local relation, and a parquet scan
        assert "parquet" not in local._jdf.queryExecution().analyzed().toString().lower()
        assert "parquet" in scan._jdf.queryExecution().analyzed().toString().lower()


def test_empty_range_reads_nothing(spark, upserted, monkeypatch):
    path, c1, c2 = upserted
    monkeypatch.setattr(changes_mod, "touched", lambda rng: pytest.fail("an empty range touches no file group"))
    df = changes_mod.changes(spark, path, begin=c2, end=c2, before_image=True)
    assert df.collect() == [] and df.columns == changes_mod.changes(spark, path, begin=c1, end=c2).columns


def test_multi_commit_ranges_and_missing_images_use_the_diff(spark, upserted, monkeypatch):
    path, c1, c2 = upserted
    c3 = _write(spark, path, [(1, 5, "a", "u1-again", 1.0, False)])
    calls = []
    real = changes_mod._image_changes
    monkeypatch.setattr(changes_mod, "_image_changes", lambda *a, **k: calls.append(1) or real(*a, **k))
    got = {(r["id"], r["_change_op"]): r["name"] for r in
           hudilite.changes(spark, path, begin=c1, end=c3, before_image=True).collect()}
    assert not calls and got[(1, "U")] == "u1-again" and got[(1, "B")] == "n1"
    os.remove(os.path.join(change_images.instant_dir(path, c3), _entry(path, c3)["images"][0]))
    got = {(r["id"], r["_change_op"]): r["name"] for r in hudilite.changes(spark, path, begin=c2, end=c3).collect()}
    assert not calls and got == {(1, "U"): "u1-again"}


def test_partial_update_images_carry_the_stored_columns(spark, tmp_path):
    path = str(tmp_path / "p")
    c1 = _write(spark, path, [(1, 1, "a", "one", 1.5, False)])
    df = spark.createDataFrame([(1, 2, "a", "uno")], "id long, version long, dt string, name string")
    c2 = hudilite.write(df, path, record_key="id", precombine_field="version", partition_by="dt",
                        options={"hoodie.write.partial.update": "true"})
    got = {r["_change_op"]: (r["name"], r["amount"]) for r in
           hudilite.changes(spark, path, begin=c1, end=c2, before_image=True).collect()}
    assert got == {"U": ("uno", 1.5), "B": ("one", 1.5)}


def test_option_off_writes_none(spark, tmp_path):
    path = str(tmp_path / "o")
    _write(spark, path, [(1, 1, "a", "one", 1.0, False)])
    c2 = _write(spark, path, [(1, 2, "a", "two", 1.0, False)], options={change_images.OPTION: "false"})
    assert _entry(path, c2) is None and not os.path.exists(change_images.instant_dir(path, c2))


def test_aborted_write_leaves_no_images(spark, tmp_path):
    path = str(tmp_path / "r")
    _write(spark, path, [(1, 1, "a", "one", 1.0, False)])
    pending = hudilite.write(spark.createDataFrame([(1, 2, "a", "two", 1.0, False)], SCHEMA), path,
                             record_key="id", precombine_field="version", partition_by="dt", commit=False)
    d = change_images.instant_dir(path, pending.instant.timestamp)
    assert os.listdir(d)
    pending.abort()
    assert not os.path.exists(d)


def test_archival_removes_images_of_archived_instants(spark, tmp_path):
    from hudilite.services.archival import archive

    path = str(tmp_path / "a")
    insts = [_write(spark, path, [(1, v, "a", f"v{v}", 1.0, False)]) for v in range(1, 7)]
    assert all(os.path.isdir(change_images.instant_dir(path, i)) for i in insts[1:])
    done = archive(path, {"hoodie.keep.min.commits": "2", "hoodie.keep.max.commits": "3",
                          "hoodie.cleaner.commits.retained": "1"}, force=True)
    assert done
    for i in insts[1:]:
        assert os.path.isdir(change_images.instant_dir(path, i)) == (i not in done), i


def test_unclaimed_images_of_retried_tasks_are_removed(tmp_path):
    d = change_images.instant_dir(str(tmp_path), "20240101000000000")
    os.makedirs(d)
    for n in ("f1_0-1-1.parquet", "f1_0-1-2.parquet", "f2_1-1-1.parquet"):
        open(os.path.join(d, n), "wb").close()
    change_images.remove_unclaimed(str(tmp_path), "20240101000000000", {"f1_0-1-2.parquet", "f2_1-1-1.parquet"})
    assert sorted(os.listdir(d)) == ["f1_0-1-2.parquet", "f2_1-1-1.parquet"]
