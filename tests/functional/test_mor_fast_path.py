"""The merge-on-read fast path (hudilite/spark/merge.py: native base scan minus superseded rows, plus the
winning log rows from `merge.slice_overlay`) against the whole-slice Python merge (`merge.merge_slice`).

Two levels: per slice, base rows minus `SliceOverlay.superseded` plus `SliceOverlay.rows` must equal
`merge_slice`; per read, `hudilite.read` must equal the same plan read through the old path (all slices merged
whole in Python workers). Cases: a log record with a lower ordering value losing against its base row, a
higher one winning, a tie (goes to the log), natural and event-time deletes, a re-insert after a delete,
commit-time ordering, time travel to before the log commits, incremental windows, a log-only slice,
un-keyed (append-only) merging, and the fallback when base file names are ambiguous.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import hudilite
from hudilite.reader import overlay_cache
from hudilite.spark import merge as spark_merge, read as spark_read
from hudilite.reader.merge import COMMIT_TIME_COL, SliceDesc, conform, merge_slice, slice_overlay
from hudilite.reader.planner import plan_read
from hudilite.spark.schema import arrow_to_spark

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")

SCHEMA = "id long, ts long, name string, region string, _hoodie_is_deleted boolean"


@pytest.fixture(autouse=True, params=["int_keys", "string_keys"])
def key_comparison(request, monkeypatch):
    """Every test twice: log records matched to base rows on the integer key column (`MergeSpec.int_key`), and
    on the record-key strings (as for any other key type)."""
    if request.param == "string_keys":
        from hudilite.reader import planner

        monkeypatch.setattr(planner, "_int_key", lambda cfg, schema: None)
    return request.param


@pytest.fixture(autouse=True, params=["overlay_files", "no_overlay_files"])
def overlay_files(request, spark):
    """Every test with the overlays kept as files beside the table (snapshot reads: `overlay_cache`) and without
    (the overlay handed from the Python workers to the JVM); with files, for every slice however small its logs.
    Small slices are not merged whole in Python here (`spark_read.SMALL_SLICE_CONF` 0): these tables are tiny."""
    spark.conf.set(overlay_cache.CONF, "true" if request.param == "overlay_files" else "false")
    spark.conf.set(overlay_cache.MIN_LOG_BYTES_CONF, "0")
    spark.conf.set(spark_read.SMALL_SLICE_CONF, "0")
    yield request.param
    spark.conf.unset(overlay_cache.CONF)
    spark.conf.unset(overlay_cache.MIN_LOG_BYTES_CONF)
    spark.conf.unset(spark_read.SMALL_SLICE_CONF)


def _write(spark, path, rows, *, event_time=True, operation="upsert", options=None):
    df = spark.createDataFrame([(i, ts, name, "eu" if i % 2 else "us", d) for i, ts, name, d in rows], SCHEMA)
    return hudilite.write(df, path, record_key="id", precombine_field="ts" if event_time else None,
                          partition_by="region", operation=operation, table_type="MERGE_ON_READ",
                          options=options)


def _sorted_rows(t: pa.Table) -> list:
    return sorted((tuple(r.values()) for r in t.to_pylist()), key=repr)


def _overlay_applied(desc: SliceDesc, spec) -> pa.Table:
    """merge_slice's rows rebuilt from the overlay: base rows not superseded, plus the overlay's log rows."""
    ov = slice_overlay(desc, spec)
    if desc.base_path:  # the base file's columns passed in (as a writer does) give the same overlay
        given = slice_overlay(desc, spec, base_columns=pq.read_table(desc.base_path))
        assert given.rows.equals(ov.rows) and np.array_equal(given.superseded, ov.superseded)
    parts = []
    if desc.base_path:
        base = conform(pq.read_table(desc.base_path), spec.schema)
        keep = np.ones(base.num_rows, dtype=bool)
        keep[ov.superseded] = False
        if spec.row_range is not None:
            keep &= pc.fill_null(pc.is_in(base.column(COMMIT_TIME_COL),
                                          value_set=pa.array(sorted(spec.row_range))), False
                                 ).to_numpy(zero_copy_only=False)
        parts.append(base.filter(pa.array(keep)))
    parts.append(ov.rows)
    return pa.concat_tables(parts)


def _check_slices(plan, spec=None):
    spec = spec or plan.merge_spec()
    assert plan.merged_slices, "the read has slices with log files"
    for sl in plan.merged_slices:
        desc = SliceDesc.of(sl)
        assert _sorted_rows(_overlay_applied(desc, spec)) == _sorted_rows(merge_slice(desc, spec)), desc


def _python_path(spark, plan, monkeypatch):
    with monkeypatch.context() as m:  # no file ids: every slice with log files is merged whole in Python
        m.setattr(spark_read, "file_ids", lambda spark, slices: None)
        return spark_read.plan_to_dataframe(spark, plan)


def _same_read(spark, plan, monkeypatch):
    cols = [f.name for f in plan.schema]
    fast = spark_read.plan_to_dataframe(spark, plan)
    slow = _python_path(spark, plan, monkeypatch)
    got = sorted((tuple(r) for r in fast.select(*cols).collect()), key=repr)
    assert got == sorted((tuple(r) for r in slow.select(*cols).collect()), key=repr)
    return got


@pytest.fixture(scope="module")
def event_time_table(spark, tmp_path_factory):
    path = str(tmp_path_factory.mktemp("fast") / "t")
    c0 = _write(spark, path, [(i, 10, f"n{i}", False) for i in range(40)])
    c1 = _write(spark, path, [
        (1, 5, "lower1", False),  # lower ordering value: the base row stays
        (2, 20, "higher2", False),  # higher: the log row wins
        (3, 10, "tie3", False),  # tie: the newer (log) write wins
        (4, 3, None, True),  # event-time delete with a lower ordering value: loses, base row stays
        (5, 30, None, True),  # event-time delete with a higher one: the row is gone
        (100, 1, "new100", False),  # an insert: a new base file
    ])
    c2 = _write(spark, path, [(6, None, None, True), (7, 1, None, True)], operation="delete")  # natural deletes
    c3 = _write(spark, path, [(6, 2, "back6", False), (2, 15, "lower2", False), (8, 50, "u8", False),
                              (7, 40, "back7, a longer name", False)])  # re-inserts: files of distinct sizes
    return path, [c0, c1, c2, c3]


def test_overlay_equals_merge_slice_event_time(spark, event_time_table, monkeypatch):
    path, commits = event_time_table
    plan = plan_read(path)
    _check_slices(plan)
    got = {r[5]: r for r in _same_read(spark, plan, monkeypatch)}
    assert got[1][7] == "n1" and got[2][7] == "higher2" and got[3][7] == "tie3"
    assert got[4][7] == "n4" and 5 not in got and got[7][7] == "back7, a longer name"
    # 6: re-inserted after a natural delete with a lower ordering value than its base row: a deleted key is
    # absent, so the re-insert is a new insert (docs/incremental.md, "Deletes and re-inserts")
    assert got[6][7] == "back6" and got[8][7] == "u8" and got[100][7] == "new100"
    assert len(got) == 40 - 1 + 1


def test_time_travel_and_incremental(spark, event_time_table, monkeypatch):
    path, commits = event_time_table
    before = plan_read(path, as_of=commits[0])  # no log block counts yet: base rows only
    assert not before.merged_slices or all(not slice_overlay(SliceDesc.of(s), before.merge_spec()).rows.num_rows
                                           for s in before.merged_slices)
    rows = _same_read(spark, before, monkeypatch)
    assert sorted(r[5] for r in rows) == list(range(40))
    for k in (1, 2):
        plan = plan_read(path, as_of=commits[k])
        _check_slices(plan)
        _same_read(spark, plan, monkeypatch)
    for a, b in ((0, 1), (1, 3), (2, 3)):
        plan = plan_read(path, begin=commits[a], end=commits[b])
        if plan.merged_slices:
            _check_slices(plan)
        _same_read(spark, plan, monkeypatch)


def test_filters_on_the_fast_path(spark, event_time_table, monkeypatch):
    path, _ = event_time_table
    plan = plan_read(path, filters=[("ts", ">=", 10)])
    rows = _same_read(spark, plan, monkeypatch)
    assert rows and all(r[6] >= 10 for r in rows)


def test_log_only_slice(spark, event_time_table, monkeypatch):
    path, _ = event_time_table
    plan = plan_read(path)
    sl = plan.merged_slices[0]
    log_only = dataclasses.replace(sl, base_file=None)
    plan.slices = [log_only if s is sl else s for s in plan.slices]
    _check_slices(plan)
    rows = _same_read(spark, plan, monkeypatch)
    log_keys = {r["_hoodie_record_key"] for r in slice_overlay(SliceDesc.of(log_only), plan.merge_spec()).rows.to_pylist()}
    assert log_keys and log_keys <= {r[2] for r in rows}


def test_unkeyed_slices_append(event_time_table):
    path, _ = event_time_table
    plan = plan_read(path)
    spec = dataclasses.replace(plan.merge_spec(), keyed=False)
    _check_slices(plan, spec)
    for sl in plan.merged_slices:
        assert len(slice_overlay(SliceDesc.of(sl), spec).superseded) == 0


def test_commit_time_ordering(spark, tmp_path, monkeypatch):
    path = str(tmp_path / "ct")
    _write(spark, path, [(i, 10, f"n{i}", False) for i in range(20)], event_time=False,
           options={"hoodie.logfile.data.block.format": "parquet"})
    _write(spark, path, [(1, 1, "older-ts-wins-anyway", False), (2, 50, "u2", False)], event_time=False,
           options={"hoodie.logfile.data.block.format": "parquet"})
    _write(spark, path, [(3, None, None, True)], event_time=False, operation="delete")
    plan = plan_read(path)
    _check_slices(plan)
    got = {r[5]: r for r in _same_read(spark, plan, monkeypatch)}
    assert got[1][7] == "older-ts-wins-anyway" and got[2][7] == "u2" and 3 not in got


def test_ambiguous_base_file_names_fall_back(spark, event_time_table):
    path, _ = event_time_table
    plan = plan_read(path)
    slices = plan.merged_slices
    assert spark_merge.file_ids(spark, slices) is not None
    twin = dataclasses.replace(slices[0], base_file=dataclasses.replace(
        slices[0].base_file, path=slices[0].base_file.path.replace("/region=", "/copy/region=")))
    assert spark_merge.file_ids(spark, slices + [twin]) is None


def _jvm_ids(spark, plan, slices, shift):
    from pyspark.sql import functions as F

    schema = arrow_to_spark(plan.schema)
    df = spark_read._scan(spark, schema, [s.base_file.path for s in slices], row_ids=True)
    fid = F.col(spark_merge.SIZE) if shift is None else \
        F.shiftrightunsigned(F.xxhash64(F.col(spark_merge.FILE)), shift).bitwiseAND(F.lit(0xFFFFFFFF))
    return {r[0]: r[1] for r in df.select(spark_merge.FILE, fid).distinct().collect()}


def test_file_ids_match_the_jvm(spark, event_time_table):
    """The ids the driver assigns are the ids the scan computes (`_metadata.file_size`, or a window of
    xxhash64 of `_metadata.file_name` when sizes collide)."""
    import os

    path, _ = event_time_table
    plan = plan_read(path)
    slices = [s for s in plan.merged_slices if s.base_file is not None]
    shift, ids = spark_merge.file_ids(spark, slices)
    assert _jvm_ids(spark, plan, slices, shift) == {os.path.basename(s.base_file.path): i for s, i in zip(slices, ids)}
    # equal sizes: the name hash
    same = [dataclasses.replace(s, base_file=dataclasses.replace(s.base_file, size=1000)) for s in slices]
    shift2, ids2 = spark_merge.file_ids(spark, same)
    assert shift2 is not None
    assert _jvm_ids(spark, plan, slices, shift2) == {os.path.basename(s.base_file.path): i for s, i in zip(slices, ids2)}
    # distinct known sizes: the sizes themselves
    sized = [dataclasses.replace(s, base_file=dataclasses.replace(s.base_file, size=os.path.getsize(s.base_file.path)))
             for s in slices]
    if len({s.base_file.size for s in sized}) == len(sized):
        assert spark_merge.file_ids(spark, sized) == (None, [s.base_file.size for s in sized])


@pytest.mark.parametrize("ids", ["size", "hash"])
def test_both_kinds_of_file_id_read_the_same(spark, event_time_table, monkeypatch, ids):
    path, _ = event_time_table
    plan = plan_read(path)
    real = spark_merge.file_ids

    def forced(spark_, slices):
        if ids == "size":
            return None, [s.base_file.size if s.base_file is not None else None for s in slices]
        return real(spark_, [dataclasses.replace(s, base_file=dataclasses.replace(s.base_file, size=7))
                             if s.base_file is not None else s for s in slices])

    with monkeypatch.context() as m:
        if ids == "size" and len({s.base_file.size for s in plan.merged_slices if s.base_file}) < \
                len([s for s in plan.merged_slices if s.base_file]):
            pytest.skip("base files of equal size in this table")
        m.setattr(spark_read, "file_ids", forced)
        cols = [f.name for f in plan.schema]
        fast = sorted((tuple(r) for r in spark_read.plan_to_dataframe(spark, plan).select(*cols).collect()), key=repr)
    slow = _python_path(spark, plan, monkeypatch)
    assert fast == sorted((tuple(r) for r in slow.select(*cols).collect()), key=repr)


def test_integer_keys_match_only_canonical_strings():
    from hudilite.reader.merge import _as_int_keys

    assert _as_int_keys(pa.array(["1", "-20", "9223372036854775807"])).to_pylist() == [1, -20, 9223372036854775807]
    for odd in (["007"], ["+5"], [" 5"], ["1.0"], ["x"], ["99999999999999999999"]):
        assert _as_int_keys(pa.array(odd)) is None, odd


def test_integer_key_that_is_also_the_ordering_field(spark, tmp_path, monkeypatch):
    path = str(tmp_path / "k")
    df = spark.createDataFrame([(i, f"n{i}") for i in range(10)], "id long, name string")
    hudilite.write(df, path, record_key="id", precombine_field="id", table_type="MERGE_ON_READ")
    up = spark.createDataFrame([(3, "u3"), (4, "u4")], "id long, name string")
    hudilite.write(up, path, record_key="id", precombine_field="id", table_type="MERGE_ON_READ")
    plan = plan_read(path)
    _check_slices(plan)
    got = {r[5]: r[6] for r in _same_read(spark, plan, monkeypatch)}
    assert got[3] == "u3" and got[4] == "u4" and got[5] == "n5" and len(got) == 10


def test_superseded_rows_at_block_boundaries(spark, tmp_path, monkeypatch):
    """Superseded base rows travel as 64-row blocks with a bit mask: rows at both ends of a block, whole
    blocks, the file's last row and several chunks of blocks per slice (BLOCKS_PER_ROW shrunk to 2) all
    drop exactly the superseded rows, for both kinds of file id."""
    path = str(tmp_path / "b")
    n = 300
    df = spark.createDataFrame([(i, 1, f"b{i}", "eu", False) for i in range(n)], SCHEMA).coalesce(1)
    hudilite.write(df, path, record_key="id", precombine_field="ts", operation="bulk_insert",
                   table_type="MERGE_ON_READ")
    (only,) = plan_read(path).slices
    base = pq.read_table(only.base_file.path)
    order = [int(k) for k in base.column("_hoodie_record_key").to_pylist()]
    picks = {0, 1, 62, 63, 64, 65, 127, 128, 191, 192, 255, 256, n - 1} | set(range(130, 190))
    updated = {order[p] for p in picks if p % 3}
    deleted = {order[p] for p in picks if p % 3 == 0}
    rows = [(i, 2, f"u{i}", "eu", False) for i in sorted(updated)] + \
           [(i, 2, None, "eu", True) for i in sorted(deleted)] + [(1000, 2, "new", "eu", False)]
    hudilite.write(spark.createDataFrame(rows, SCHEMA), path, record_key="id", precombine_field="ts",
                   table_type="MERGE_ON_READ")
    expected = {i: ("u" if i in updated else "b") + str(i) for i in range(n) if i not in deleted}
    expected[1000] = "new"
    monkeypatch.setattr(spark_merge, "BLOCKS_PER_ROW", 2)
    for kind in ("size", "hash"):
        if kind == "hash":  # equal sizes (a second, made-up base file) force ids from the name hash
            def hashed(s, sl):
                twin = dataclasses.replace(sl[0].base_file, path=sl[0].base_file.path + ".twin", size=7)
                shift, ids = spark_merge.file_ids(s, [dataclasses.replace(sl[0], base_file=dataclasses.replace(
                    sl[0].base_file, size=7)), dataclasses.replace(sl[0], base_file=twin)])
                assert shift is not None
                return shift, ids[:1]
            monkeypatch.setattr(spark_read, "file_ids", hashed)
        got = {r["id"]: r["name"] for r in hudilite.read(spark, path).collect()}
        assert got == expected, kind


@pytest.mark.parametrize("fraction", [100.0, 0.0])
def test_plain_files_riding_along_with_the_merged_scan(spark, event_time_table, monkeypatch, fraction):
    """Base files of slices without logs join the merged slices' native scan when they are small next to them
    (`RIDE_ALONG_FRACTION`): the same rows as the Python path, each plain row once, and only while every file id
    stays distinct."""
    path, commits = event_time_table
    monkeypatch.setattr(spark_read, "RIDE_ALONG_FRACTION", fraction)
    seen = []
    real = spark_merge.merged_dataframe

    def spy(*a, **kw):
        seen.append(kw.get("riders", ()))
        return real(*a, **kw)

    monkeypatch.setattr(spark_read, "merged_dataframe", spy)
    for plan in (plan_read(path), plan_read(path, begin=commits[0], end=commits[3])):
        if not (plan.merged_slices and plan.plain_files):
            continue
        _same_read(spark, plan, monkeypatch)
        riders = seen[-1]
        if fraction:
            assert [s.base_file.path for s in riders] == plan.plain_files
        else:
            assert not riders
    assert seen
    plan = plan_read(path)
    merged, plain = plan.merged_slices, [s for s in plan.slices if s.base_file is not None and not s.log_files]
    ids = (None, [s.base_file.size for s in merged])
    if fraction:
        assert spark_read._riders(plan, merged, ids) == (plain, (None, ids[1] + [s.base_file.size for s in plain]))
        clash = [dataclasses.replace(s, base_file=dataclasses.replace(s.base_file, size=merged[0].base_file.size))
                 for s in plain]  # a plain file's size equal to a merged one's: no riders
        plan.slices = merged + clash
        assert spark_read._riders(plan, merged, ids) == ([], ids)
        assert spark_read._riders(plan_read(path), merged, (3, ids[1])) == ([], (3, ids[1]))  # hash ids


def test_log_side_is_checkpointed_serialized(spark, event_time_table):
    """The overlay's checkpoint (read twice by the plan) keeps serialized blocks, not row objects, for as long as the
    DataFrame lives."""
    path, _ = event_time_table
    spark.conf.set(overlay_cache.CONF, "false")  # the path that checkpoints (overlay files are read natively)
    sc = spark.sparkContext._jsc.sc()

    def stored():
        return {i.id(): i for i in sc.getRDDStorageInfo() if i.memSize() + i.diskSize() > 0}

    before = set(stored())
    df = hudilite.read(spark, path)
    assert df.count() == 40
    new = [i for rid, i in stored().items() if rid not in before]
    assert new, "the merged read stored no checkpoint"
    assert all(not i.storageLevel().deserialized() for i in new), [i.storageLevel().description() for i in new]
