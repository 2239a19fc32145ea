"""Answers that do not depend on archival, table type or compaction timing: archival keeps completion order
(change ranges never lose an archived commit), incremental reads return latest images, time travel to
archived instants, one rule for deletes followed by lower-ordered re-inserts."""

import datetime as dt
import glob
import os
import re

import pyarrow as pa
import pytest

import hudilite
from hudilite.errors import RangeUnavailableError
from hudilite.reader import overlay_cache
from hudilite.reader.changes import latest_position
from hudilite.services import archival
from hudilite.spark import changes as spark_changes
from hudilite.spark import read as spark_read
from hudilite.spark.session import is_connect

OCC = {"hoodie.write.concurrency.mode": "optimistic_concurrency_control"}


def aw(path, rows, table_type="COPY_ON_WRITE", **kw):
    """A driver-local (Arrow) write of (id, v, s) rows; partition `dt` = the id's parity (writes of keys of
    different parity do not conflict)."""
    ids, vs, ss = zip(*rows)
    kw.setdefault("options", OCC)
    t = pa.table({"id": list(ids), "v": list(vs), "s": list(ss), "dt": [f"p{i % 2}" for i in ids]})
    return hudilite.write(t, path, record_key="id", precombine_field="v", partition_by="dt",
                          table_type=table_type, **kw)


@pytest.mark.parametrize("version", ["6", "9"])
def test_archival_keeps_a_late_completing_write_with_the_range_that_needs_it(spark, table_path, version):
    c1 = aw(table_path, [(1, 1, "one"), (2, 1, "two")], options={**OCC, "hoodie.write.table.version": version})
    slow = aw(table_path, [(1, 2, "slow")], commit=False)   # requested early ...
    aw(table_path, [(2, 2, "fast")])                        # ... another write completes first
    checkpoint = latest_position(table_path)                # a consumer reads up to here
    slow.complete()                                         # completes after the checkpoint
    for i in range(3):
        aw(table_path, [(10 + i, 1, "more")])
    # 6 completed writes, keep 4: the instant-time prefix is c1 and the slow write, but the slow write completed
    # after writes kept active, so archiving it would drop it from the range that starts at the checkpoint
    assert archival.archive(table_path, {"hoodie.keep.min.commits": "4", "hoodie.keep.max.commits": "4"},
                            force=True) == [c1]
    names = {r["s"] for r in hudilite.changes(spark, table_path, begin=checkpoint, completion_bounds=True).collect()}
    assert names == {"slow", "more"}
    pos = latest_position(table_path)
    # keep 2: the slow write leaves with the writes that completed before it; the range needs archived detail
    archived = archival.archive(table_path, {"hoodie.keep.min.commits": "2", "hoodie.keep.max.commits": "2"},
                                force=True)
    assert slow.instant_time in archived and len(archived) == 3
    if version == "6":  # the version-6 archive keeps no write detail a range can read
        with pytest.raises(RangeUnavailableError):
            hudilite.changes(spark, table_path, begin=checkpoint, completion_bounds=True)
    else:  # version 9 reads the archived instants' detail from the LSM history
        got = {r["s"] for r in hudilite.changes(spark, table_path, begin=checkpoint, completion_bounds=True).collect()}
        assert got == {"slow", "more"}
    assert latest_position(table_path) == pos


@pytest.mark.parametrize("version", ["6", "9"])
def test_a_range_needing_an_archived_completion_fails_loudly(spark, table_path, monkeypatch, version):
    """An archive that holds a write completed after a kept one (older hudilite, other archivers): ranges
    starting before that completion raise instead of silently skipping it (version 6; version 9 reads it from the
    LSM history); the position never goes back."""
    aw(table_path, [(1, 1, "one"), (2, 1, "two")], options={**OCC, "hoodie.write.table.version": version})
    slow = aw(table_path, [(1, 2, "slow")], commit=False)
    aw(table_path, [(2, 2, "fast")])
    checkpoint = latest_position(table_path)
    slow.complete()
    pos = latest_position(table_path)
    real = archival.instants_to_archive

    def instant_time_prefix(table, tl, options, force=False):  # the archiver before completion order
        return [i for i in tl.instants if i.timestamp <= slow.instant_time], "test"

    monkeypatch.setattr(archival, "instants_to_archive", instant_time_prefix)
    assert slow.instant_time in archival.archive(table_path, {}, force=True)
    monkeypatch.setattr(archival, "instants_to_archive", real)
    if version == "6":
        with pytest.raises(RangeUnavailableError, match=slow.instant_time):
            hudilite.changes(spark, table_path, begin=checkpoint, completion_bounds=True)
    else:
        got = {r["s"] for r in hudilite.changes(spark, table_path, begin=checkpoint, completion_bounds=True).collect()}
        assert got == {"slow"}
    assert latest_position(table_path) == pos


def rows_of(df) -> list:
    return sorted((r["id"], r["v"], r["s"]) for r in df.collect())


def test_time_travel_to_an_archived_instant(spark, table_path):
    """MOR: 6 deltacommits, compaction, clustering, archival of every deltacommit: time travel to the 4th
    returns the rows as of then (the old slices are on disk); before the first commit: empty, as documented;
    once the files the instant needs are cleaned: RangeUnavailableError, never an empty or partial table."""
    from hudilite.services.clustering import cluster
    from hudilite.services.compaction import compact

    mor = "MERGE_ON_READ"
    times = [aw(table_path, [(i, 1, f"n{i}") for i in range(1, 5)], mor)]
    for k in range(2, 7):
        times.append(aw(table_path, [(k % 4 + 1, k, f"u{k}")], mor))
    expected = {i: (i, 1, f"n{i}") for i in range(1, 5)}
    for k in range(2, 5):
        expected[k % 4 + 1] = (k % 4 + 1, k, f"u{k}")
    compact(table_path, {"hoodie.compact.inline.max.delta.commits": "1"})
    cluster(table_path, {"hoodie.clustering.plan.strategy.small.file.limit": str(1 << 30)})
    archived = archival.archive(table_path, {"hoodie.keep.min.commits": "1", "hoodie.keep.max.commits": "1"},
                                force=True)
    assert set(times) <= set(archived)
    assert rows_of(hudilite.read(spark, table_path, as_of=times[3])) == sorted(expected.values())
    assert rows_of(spark.read.format("hudilite").option("as_of", times[3]).load(table_path)) == \
        sorted(expected.values())
    assert hudilite.read(spark, table_path, as_of="19990101000000").count() == 0
    assert spark.read.format("hudilite").option("as_of", "19990101000000").load(table_path).count() == 0
    for f in glob.glob(os.path.join(table_path, "*", f"*_{times[0]}.parquet")):  # a clean removes the old slice
        os.remove(f)
    with pytest.raises(RangeUnavailableError, match="cleaned"):
        hudilite.read(spark, table_path, as_of=times[3])
    with pytest.raises(Exception, match="cleaned"):
        spark.read.format("hudilite").option("as_of", times[3]).load(table_path).collect()


def test_time_travel_to_an_instant_a_later_clean_broke(spark, table_path):
    """A clean after an instant may delete files the table as of then consists of (found by Apache Hudi's
    judge, which refuses such time travel outright): the read is refused with RangeUnavailableError, never a
    table missing those rows; instants whose files all survived still read exactly."""
    c1 = aw(table_path, [(1, 1, "a"), (2, 1, "b"), (3, 1, "c"), (4, 1, "d")])
    c2 = aw(table_path, [(1, 2, "a2")])           # a new version of the p1 file group
    c3 = aw(table_path, [(2, 3, "b3")])           # a new version of the p0 file group
    before = {t: rows_of(hudilite.read(spark, table_path, as_of=t)) for t in (c1, c2, c3)}
    t = hudilite.Table.open(table_path)
    assert t.services.clean({"hoodie.cleaner.policy": "KEEP_LATEST_FILE_VERSIONS",
                             "hoodie.cleaner.fileversions.retained": "1"})
    assert rows_of(hudilite.read(spark, table_path, as_of=c3)) == before[c3]  # its files are the latest
    for gone in (c1, c2):  # c1: both groups' files cleaned; c2: the p0 group's c1 file cleaned
        with pytest.raises(RangeUnavailableError, match="cleaned"):
            hudilite.read(spark, table_path, as_of=gone)
        with pytest.raises(Exception, match="cleaned"):
            spark.read.format("hudilite").option("as_of", gone).load(table_path).collect()
    assert rows_of(hudilite.read(spark, table_path)) == before[c3]  # the latest snapshot is not checked


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_incremental_read_returns_latest_images_only(spark, table_path, table_type):
    """A late record (v5 against a stored v10) written inside the range changes nothing: the incremental read
    returns the latest image as of `end` of each key changed in the range, on both table types (MOR used to
    filter base rows by commit time before merging, so the late log record had nothing to lose against)."""
    c1 = aw(table_path, [(1, 10, "ten"), (3, 10, "ten")], table_type)
    aw(table_path, [(3, 11, "eleven")], table_type)        # a log file in front of the next append (MOR)
    c3 = aw(table_path, [(1, 5, "late"), (3, 12, "twelve")], table_type)
    c4 = aw(table_path, [(3, 13, "thirteen")], table_type)
    snap = rows_of(hudilite.read(spark, table_path))
    assert snap == [(1, 10, "ten"), (3, 13, "thirteen")]
    got = rows_of(hudilite.read(spark, table_path, begin=c1, end=c3))
    assert got == [(3, 12, "twelve")]
    assert rows_of(spark.read.format("hudilite").option("begin", c1).option("end", c3).load(table_path)) == got
    assert rows_of(hudilite.read(spark, table_path, begin=c3, end=c4)) == [(3, 13, "thirteen")]


def _ids(t) -> list:
    return sorted(zip(t.column("id").to_pylist(), t.column("v").to_pylist())) if t is not None else []


@pytest.mark.parametrize("writer,table_type", [("arrow", "COPY_ON_WRITE"), ("arrow", "MERGE_ON_READ"),
                                               ("spark", "MERGE_ON_READ")])
@pytest.mark.parametrize("delete", ["ordered", "natural"])
def test_delete_then_lower_reinsert_one_rule(spark, table_path, writer, table_type, delete):
    """The rule (docs/incremental.md, "Deletes and re-inserts"): a delete removes the key; a later write of it
    is a new insert whatever its ordering value. Same answer on both table types, before and after a
    compaction that was pending in between, for hudilite and hudi-rs; a later update updates that row."""
    from hudilite.services.compaction import run_compaction, schedule_compaction
    from tests.hudi_rs import read_hudi_rs

    def w(ids, vs, deleted=None, **kw):
        cols = {"id": ids, "v": vs, "s": [f"s{v}" for v in vs]}
        if deleted is not None:
            cols["_hoodie_is_deleted"] = deleted
        t = pa.table(cols)
        data = spark.createDataFrame(t.to_pandas()) if writer == "spark" else t
        return hudilite.write(data, table_path, record_key="id", precombine_field="v", table_type=table_type,
                              **kw)

    def ours(**kw):
        return sorted((r["id"], r["v"]) for r in hudilite.read(spark, table_path, **kw).collect())

    w([1, 2], [10, 10])
    if delete == "ordered":
        w([1], [12], deleted=[True])
    else:
        w([1], [12], operation="delete")
    mor = table_type == "MERGE_ON_READ"
    pending = schedule_compaction(table_path, force=True) if mor else None
    c = w([1], [3])                                   # re-insert with a lower ordering value
    want = [(1, 3), (2, 10)]
    assert ours() == ours(as_of=c) == _ids(read_hudi_rs(table_path)) == want
    if mor:
        assert pending and run_compaction(table_path) == [pending]
        assert ours() == ours(as_of=c) == _ids(read_hudi_rs(table_path)) == want
    c2 = w([1], [20])                                 # an update of the re-inserted row: still one row
    assert ours() == _ids(read_hudi_rs(table_path)) == [(1, 20), (2, 10)]
    assert ours(as_of=c) == want


@pytest.mark.parametrize("call, message", [
    (lambda s, p: hudilite.read(s, p, filters="dt = 'p0'"), "expected a list of (column, op, value) tuples"),
    (lambda s, p: hudilite.read(s, p, filters=[("dt", "~", "p0")]), "bad filter ('dt', '~', 'p0'): expected"),
    (lambda s, p: hudilite.read(s, p, filters=[("nope", "=", 1)]), "'nope' is not a column of the table"),
    (lambda s, p: hudilite.read(s, p, filters=[("dt", "in", "p0")]), "'in' takes a list, tuple or set"),
    (lambda s, p: hudilite.changes(s, p, filters=[("nope", "=", 1)]), "'nope' is not a column of the table"),
    (lambda s, p: hudilite.read(s, p, as_of="yesterday"), "as_of: cannot interpret 'yesterday'"),
    (lambda s, p: hudilite.read(s, p, as_of="0", begin="0"), "as_of cannot be combined with begin/end"),
    (lambda s, p: hudilite.changes(s, p, begin="yesterday"), "cannot interpret 'yesterday'"),
    (lambda s, p: hudilite.read(s, p, columns=["nope"]), "columns ['nope'] are not in the table"),
])
def test_bad_read_arguments_are_refused_naming_them(spark, table_path, call, message):
    """A read's bad filter, instant, range or column raises InvalidReadError naming it (before: a filter given as
    a string was taken character by character, 'in' with a string matched its characters, an unknown filter
    column failed in Spark's analysis, and the errors were write errors)."""
    aw(table_path, [(1, 1, "a"), (2, 1, "b")])
    with pytest.raises(hudilite.InvalidReadError, match=re.escape(message)):
        call(spark, table_path).collect()
    assert sorted(r["id"] for r in hudilite.read(spark, table_path, filters=[("dt", "in", ["p0"])]).collect()) == [2]


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_time_micros_reads_with_the_setting_through_every_merge_and_change_read(spark, table_path, table_type):
    """With spark.sql.timeType.enabled a time-micros column reads through each way a merge-on-read slice with log
    files is merged (whole in Python, the native merged scan, overlay files) and each way a change read is made
    (change images read here or scanned, per file group, the snapshot): Spark takes TIME batches from Python
    only as nanoseconds. Without it a change read names the way out (it has no column list to leave it out of)."""
    mor = table_type == "MERGE_ON_READ"
    layout = dict(record_key="id", precombine_field="v", table_type=table_type,
                  options={"hoodie.write.table.version": "6"})  # overlay entries need version 6
    first = pa.table({"id": pa.array([1, 2, 3], pa.int64()), "v": pa.array([1, 1, 1], pa.int64()),
                      "at": pa.array([dt.time(9, 30), dt.time(1, 2, 3, 4000), None], pa.time64("us"))})
    c1 = hudilite.write(first, table_path, **layout)
    hudilite.write(pa.table({"id": pa.array([2], pa.int64()), "v": pa.array([2], pa.int64()),
                             "at": pa.array([dt.time(23, 59, 59, 999999)], pa.time64("us"))}), table_path, **layout)
    want = [(1, dt.time(9, 30)), (2, dt.time(23, 59, 59, 999999)), (3, None)]
    changed = [(2, "B", dt.time(1, 2, 3, 4000)), (2, "U", dt.time(23, 59, 59, 999999))]
    with pytest.raises(hudilite.InvalidReadError, match=re.escape(
            "column 'at' holds times of day (Avro time-micros), which Spark reads only with spark.sql.timeType."
            "enabled=true: set it on the session, or hudilite.Table(path).to_arrow() and changes_arrow() read it "
            "without Spark")):
        hudilite.changes(spark, table_path, begin=c1)

    def changes(**kw):
        rows = spark_changes.changes(spark, table_path, begin=c1, before_image=True, **kw).select(
            "id", "_change_op", "at").collect()
        return sorted(tuple(r) for r in rows)

    spark.conf.set("spark.sql.timeType.enabled", "true")
    try:
        assert sorted(tuple(r) for r in hudilite.changes(spark, table_path).select("id", "at").collect()) == want
        if not mor:  # change images read here, then scanned
            assert changes() == changes(local_max_bytes=0) == changed
            return
        assert changes() == changed  # per file group
        confs = {"whole": {}, "native": {spark_read.SMALL_SLICE_CONF: "0"},
                 "overlay": {spark_read.SMALL_SLICE_CONF: "0", overlay_cache.MIN_LOG_BYTES_CONF: "0"}}
        for how, conf in confs.items():
            for k, v in conf.items():
                spark.conf.set(k, v)
            try:
                got = sorted(tuple(r) for r in hudilite.read(spark, table_path).select("id", "at").collect())
            finally:
                for k in conf:
                    spark.conf.unset(k)
            assert got == want, how
        # the overlay run left overlay entries
        assert glob.glob(os.path.join(table_path, overlay_cache.DIR, "**", "*" + overlay_cache.ROWS), recursive=True)
    finally:
        spark.conf.set("spark.sql.timeType.enabled", "false")


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_time_of_day_columns_spark_cannot_read_are_named(spark, table_path, table_type):
    """Time-of-day columns (Arrow time32 / time64, Avro time-millis / time-micros, as Flink writes them): a Spark
    read names the column and the way out instead of Spark's UNSUPPORTED_TIME_TYPE or a failed task; without
    them the rest reads, with spark.sql.timeType.enabled time-micros reads as Spark's TIME, and the data source
    reads both."""
    t = pa.table({"id": pa.array([1, 2], pa.int64()), "v": pa.array([1, 1], pa.int64()),
                  "at": pa.array([dt.time(9, 30), None], pa.time64("us")),
                  "ms": pa.array([dt.time(10, 0, 1), dt.time(0, 0)], pa.time32("ms"))})
    layout = dict(record_key="id", precombine_field="v")
    hudilite.write(t, table_path, table_type=table_type, **layout)
    mor = table_type == "MERGE_ON_READ"
    if mor:  # a log block: its slice is merged, with every column
        hudilite.write(t.slice(0, 1), table_path, **layout)
    connect = is_connect(spark)
    source = "spark.read.format('hudilite').load(path) (after hudilite.register(spark)" + (
        "; over Spark Connect with spark.sql.timeType.enabled=true)" if connect else ")")
    way_out = (f"this read merges log files, which takes every column: read the table with {source}, or compact "
               "it first" if mor else f"leave it out (columns=[id, v]), or read the table with {source}")
    for columns in (None, ["id", "at"]):
        with pytest.raises(hudilite.InvalidReadError, match=re.escape(
                "column 'ms' holds times of day in milliseconds (Avro time-millis), which Spark cannot read: "
                + way_out) if mor or columns is None else "column 'at' holds times of day .Avro time-micros., "
                "which Spark reads only with spark.sql.timeType.enabled=true: set it on the session, or leave it"):
            hudilite.read(spark, table_path, columns=columns)
    # the way out the message names: the data source reads both units, merged slices too, without the setting (a
    # Connect client's collect needs it)
    hudilite.register(spark)
    if connect:
        spark.conf.set("spark.sql.timeType.enabled", "true")
    try:
        rows = spark.read.format("hudilite").load(table_path).select("id", "at", "ms").collect()
    finally:
        spark.conf.set("spark.sql.timeType.enabled", "false")
    assert sorted(tuple(r) for r in rows) == [(1, dt.time(9, 30), dt.time(10, 0, 1)), (2, None, dt.time(0, 0))]
    if mor:
        assert hudilite.Table(table_path).services.compact(force=True)
    assert sorted(tuple(r) for r in hudilite.read(spark, table_path, columns=["id", "v"]).collect()) == [
        (1, 1), (2, 1)]
    assert spark.conf.get("spark.sql.timeType.enabled") == "false"
    spark.conf.set("spark.sql.timeType.enabled", "true")
    try:
        got = sorted(tuple(r) for r in hudilite.read(spark, table_path, columns=["id", "at"]).collect())
    finally:
        spark.conf.set("spark.sql.timeType.enabled", "false")
    assert got == [(1, dt.time(9, 30)), (2, None)]
    arrow = hudilite.Table(table_path).to_arrow(["id", "ms"]).sort_by("id")
    assert arrow.column("ms").to_pylist() == [dt.time(10, 0, 1), dt.time(0, 0)]
