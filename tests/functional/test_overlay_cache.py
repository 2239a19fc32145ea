"""Merged-read overlays kept beside the table (hudilite/reader/overlay_cache.py): written by the first snapshot
read of a slice state, reused by later reads of that state, new entries only for slices a commit changed,
never written for read-only tables or incremental reads, rewritten when incomplete, removed by clean with
their slices; every read equal to the read without overlay files."""

from __future__ import annotations

import os
import stat

import pyarrow as pa
import pytest

import hudilite
from hudilite.reader import overlay_cache
from hudilite.spark import read as spark_read
from hudilite.services.clean import run_clean
from hudilite.services.compaction import run_compaction, schedule_compaction
from hudilite.table import HoodieTable

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")

SCHEMA = "id long, ts long, name string, region string"


@pytest.fixture(autouse=True)
def entries_for_small_logs(spark):
    """These tables' logs are tiny: entries for every slice all the same (except where a test says otherwise), and
    no slice merged whole in Python for being small (`spark_read.SMALL_SLICE_CONF`)."""
    spark.conf.set(overlay_cache.MIN_LOG_BYTES_CONF, "0")
    spark.conf.set(spark_read.SMALL_SLICE_CONF, "0")
    yield
    spark.conf.unset(overlay_cache.MIN_LOG_BYTES_CONF)
    spark.conf.unset(spark_read.SMALL_SLICE_CONF)


# deltacommits write overlay entries on table version 6 only (docs/compatibility.md): the tests of those entries
# create their tables at version 6
V6 = {"hoodie.write.table.version": "6"}


def _write(spark, path, rows, operation="upsert", prepare=False, options=None):
    """A MOR write; `prepare`: the deltacommit writes the overlays of the slices it touched."""
    df = spark.createDataFrame([(i, ts, name, "eu" if i % 2 else "us") for i, ts, name in rows], SCHEMA)
    return hudilite.write(df, path, record_key="id", precombine_field="ts", partition_by="region",
                          operation=operation, table_type="MERGE_ON_READ",
                          options={overlay_cache.WRITE_OPTION: str(prepare).lower(), **(options or {})})


def _first_rows(n):
    """`n` rows over both regions, plus n // 2 more in `us` (even ids from 10,000): the two base files then
    differ in size, so reads key their slices by base file size as the writer's entries are keyed (equal sizes
    make reads hash file names instead: the writer's entries would be missed, by design, and these tests that
    look for them would fail by chance)."""
    return [(i, 10, f"n{i}") for i in range(n)] + [(10_000 + 2 * k, 10, f"x{k}") for k in range(n // 2)]


def _entries(path) -> dict[str, float]:
    """Complete entries (rows files) of the table: path -> mtime."""
    root = os.path.join(path, overlay_cache.DIR)
    out = {}
    for d, _, files in os.walk(root):
        for f in files:
            if f.endswith(overlay_cache.ROWS):
                out[os.path.join(d, f)] = os.stat(os.path.join(d, f)).st_mtime_ns
    return out


def _rows(spark, path, cache: bool, **kw):
    spark.conf.set(overlay_cache.CONF, "true" if cache else "false")
    try:
        return sorted(tuple(r) for r in hudilite.read(spark, path, **kw).select("id", "ts", "name").collect())
    finally:
        spark.conf.unset(overlay_cache.CONF)


@pytest.fixture
def mor_table(spark, tmp_path):
    path = str(tmp_path / "t")
    c0 = _write(spark, path, [(i, 10, f"n{i}") for i in range(30)])
    c1 = _write(spark, path, [(1, 20, "u1"), (2, 5, "late2"), (4, 20, "u4")])
    return path, c0, c1


def test_first_read_writes_entries_later_reads_reuse_them(spark, mor_table):
    path, _, _ = mor_table
    expected = sorted([(i, 10, f"n{i}") for i in range(30) if i not in (1, 4)] + [(1, 20, "u1"), (4, 20, "u4")])
    assert _rows(spark, path, cache=False) == expected
    assert _entries(path) == {}, "a read without overlay files writes none"
    assert _rows(spark, path, cache=True) == expected
    first = _entries(path)
    assert len(first) == 2  # the two file groups (one per region) with log files
    assert _rows(spark, path, cache=True) == expected
    assert _entries(path) == first, "the second read reuses the entries"


def test_commit_on_one_group_writes_one_new_entry(spark, mor_table):
    path, _, _ = mor_table
    _rows(spark, path, cache=True)
    before = _entries(path)
    _write(spark, path, [(3, 30, "u3")])  # region eu only
    got = _rows(spark, path, cache=True)
    assert got == _rows(spark, path, cache=False)
    assert (3, 30, "u3") in got and (1, 20, "u1") in got
    after = _entries(path)
    assert set(before) < set(after) and len(after) == len(before) + 1, "only the changed slice gets a new entry"


def test_time_travel_has_its_own_entries(spark, mor_table):
    path, c0, c1 = mor_table
    _write(spark, path, [(1, 40, "u1b")])
    for as_of in (c1, None):
        kw = {"as_of": as_of} if as_of else {}
        assert _rows(spark, path, cache=True, **kw) == _rows(spark, path, cache=False, **kw)
    assert (1, 20, "u1") in _rows(spark, path, cache=True, as_of=c1)
    assert (1, 40, "u1b") in _rows(spark, path, cache=True)


def test_incomplete_entry_is_rewritten(spark, mor_table):
    path, _, _ = mor_table
    expected = _rows(spark, path, cache=True)
    victim = sorted(_entries(path))[0]
    os.remove(victim)  # a writer that died between the blocks file and the rows file
    with open(victim[: -len(overlay_cache.ROWS)] + overlay_cache.ROWS + ".x.tmp", "wb") as f:
        f.write(b"garbage of a dead writer")
    assert _rows(spark, path, cache=True) == expected
    assert os.path.exists(victim)


def test_no_entries_for_incremental_reads(spark, mor_table):
    path, c0, c1 = mor_table
    got = _rows(spark, path, cache=True, begin=c0, end=c1)
    assert {(1, 20, "u1"), (4, 20, "u4")} <= set(got) and len(got) <= 3
    assert _entries(path) == {}


def test_read_only_table_is_never_written(spark, mor_table):
    path, _, _ = mor_table
    expected = _rows(spark, path, cache=False)
    meta = os.path.join(path, ".hoodie")
    mode = os.stat(meta).st_mode
    os.chmod(meta, mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
    try:
        assert _rows(spark, path, cache=True) == expected
    finally:
        os.chmod(meta, mode)
    assert _entries(path) == {}


def test_unwritable_entries_fall_back(spark, mor_table):
    path, _, _ = mor_table
    expected = _rows(spark, path, cache=False)
    # a file where the entries' directory should be: the executors' makedirs fails with an OSError
    with open(os.path.join(path, overlay_cache.DIR), "wb"):
        pass
    assert _rows(spark, path, cache=True) == expected
    assert os.path.isfile(os.path.join(path, overlay_cache.DIR))


def test_clean_removes_entries_with_their_slices(spark, mor_table):
    path, _, _ = mor_table
    _rows(spark, path, cache=True)
    old = _entries(path)
    assert schedule_compaction(path, {"hoodie.compact.inline.max.delta.commits": "1"})
    run_compaction(path)
    _write(spark, path, [(5, 50, "u5"), (6, 50, "u6")])
    expected = _rows(spark, path, cache=False)
    assert _rows(spark, path, cache=True) == expected
    new = _entries(path)
    assert set(old) < set(new)
    run_clean(path, {"hoodie.cleaner.policy": "KEEP_LATEST_FILE_VERSIONS",
                      "hoodie.cleaner.fileversions.retained": "1"})
    assert set(_entries(path)) == set(new) - set(old), "the cleaned slices' entries are gone, the live ones stay"
    assert _rows(spark, path, cache=True) == expected


def test_sweep_removes_entries_of_vanished_slices_only(spark, mor_table):
    path, _, _ = mor_table
    _rows(spark, path, cache=True)
    live = _entries(path)
    root = os.path.join(path, overlay_cache.DIR)
    part = sorted(os.listdir(root))[0]
    ghost = os.path.join(root, part, "0000aaaa-0_20200101000000000")  # a slice gone (a reader raced its clean)
    gone_part = os.path.join(root, "region=xx", "0000bbbb-0_20200101000000000")  # a dropped partition's
    for d in (ghost, gone_part):
        os.makedirs(d)
        open(os.path.join(d, "k" + overlay_cache.ROWS), "wb").close()
    assert overlay_cache.sweep(path) == 2
    assert _entries(path) == live and not os.path.exists(ghost) and not os.path.exists(gone_part)
    assert overlay_cache.sweep(path) == 0


def _log_blocks(path):
    """{log file name: [valid-looking data/delete blocks]} of the table."""
    from hudilite.log.blocks import LogBlock
    from hudilite.log.format import try_parse_log_file_name
    from hudilite.log.reader import scan_log_file

    out = {}
    for d, _, files in os.walk(path):
        if ".hoodie" in d:
            continue
        for f in files:
            if try_parse_log_file_name(f) is not None:
                out[f] = [b for b in scan_log_file(os.path.join(d, f)) if isinstance(b, LogBlock)]
    return out


def test_deltacommit_writes_the_entries_the_first_read_uses(spark, tmp_path):
    from hudilite.log.blocks import ParquetDataBlock

    path = str(tmp_path / "t")
    _write(spark, path, _first_rows(30), prepare=True, options=V6)
    assert _entries(path) == {}, "a commit of base files only has no overlays"
    _write(spark, path, [(3, 20, "u3"), (4, 20, "u4"), (6, 5, "late6")], prepare=True)
    written = _entries(path)
    assert len(written) == 2, "one entry per file group the deltacommit appended to"
    got = _rows(spark, path, cache=True)
    assert _entries(path) == written, "the first read found them: nothing written"
    assert got == _rows(spark, path, cache=False) and (3, 20, "u3") in got and (6, 10, "n6") in got
    # the first deltacommit on a slice: its rows file is a copy of the log's Parquet block
    blocks = _log_blocks(path)
    contents = {b.content for bs in blocks.values() for b in bs if isinstance(b, ParquetDataBlock)}
    assert len(contents) == 2
    for p in written:
        with open(p, "rb") as f:
            assert f.read() in contents
    # explicitly off: the deltacommit writes none, the read computes them
    _write(spark, path, [(5, 20, "u5")], prepare=False)
    assert _entries(path) == written
    assert _rows(spark, path, cache=True) == _rows(spark, path, cache=False)
    assert len(_entries(path)) == 3


def test_entries_a_write_makes_are_the_ones_a_read_computes(spark, tmp_path):
    """Slices with logs already (the writer decodes them), late records, deletes, a new file group: the writer's
    entries have the keys and the contents of the entries a read computes."""
    import shutil

    import pyarrow.parquet as pq

    path = str(tmp_path / "t")
    _write(spark, path, _first_rows(40), options=V6)
    _write(spark, path, [(1, 20, "u1"), (2, 20, "u2"), (7, 3, "late7")])
    _write(spark, path, [(1, 15, "late1"), (2, 30, "u2b"), (8, 40, "u8"), (100, 1, "new")], prepare=True)
    _write(spark, path, [(9, 50, "x")], operation="delete", prepare=True)
    written = _entries(path)
    # (late1 loses against the merged slice: not written, so eu's upsert makes no state)
    assert len(written) == 2, "eu: one state (the delete), us: one (the upsert)"
    tables = {os.path.relpath(p, path): pq.read_table(p) for p in written}
    shutil.rmtree(os.path.join(path, overlay_cache.DIR))
    expected = _rows(spark, path, cache=False)
    assert _rows(spark, path, cache=True) == expected
    computed = {os.path.relpath(p, path) for p in _entries(path)}
    assert len(computed) == 2 and computed == set(tables), "the read computes the latest states' entries: same keys"
    for rel in computed:
        assert pq.read_table(os.path.join(path, rel)).equals(tables[rel]), rel
        blocks = rel[: -len(overlay_cache.ROWS)] + overlay_cache.BLOCKS
        assert os.path.exists(os.path.join(path, blocks))
    assert (1, 20, "u1") in expected and (2, 30, "u2b") in expected and 9 not in {r[0] for r in expected}


def test_late_records_are_not_logged_against_a_base_file_alone(spark, tmp_path):
    """An update whose ordering value is below the current record's changes nothing and is not written (reported
    as ignored): against a base file alone, and behind log files against the merge of base and logs."""
    from hudilite.log.blocks import ParquetDataBlock

    path = str(tmp_path / "t")
    _write(spark, path, [(i, 10, f"n{i}") for i in range(20)])
    r = _write(spark, path, [(1, 5, "late1"), (3, 10, "tie3"), (5, 11, "u5")])  # eu: ids 1, 3, 5
    logged = {k for bs in _log_blocks(path).values() for b in bs if isinstance(b, ParquetDataBlock)
              for k in b.records().column("id").to_pylist()}
    assert logged == {3, 5}, "the tie wins (the newer write), the late record is dropped"
    assert r.stats["ignored"] == 1 and r.stats["updated"] == 2
    _write(spark, path, [(7, 4, "late7")])  # eu again: the slice has a log file now
    logged = {k for bs in _log_blocks(path).values() for b in bs if isinstance(b, ParquetDataBlock)
              for k in b.records().column("id").to_pylist()}
    assert 7 not in logged
    got = _rows(spark, path, cache=False)
    assert (1, 10, "n1") in got and (3, 10, "tie3") in got and (5, 11, "u5") in got and (7, 10, "n7") in got
    assert got == _rows(spark, path, cache=True)


def test_a_write_that_cannot_write_its_entries_still_commits(spark, tmp_path):
    path = str(tmp_path / "t")
    _write(spark, path, [(i, 10, f"n{i}") for i in range(10)])
    with open(os.path.join(path, overlay_cache.DIR), "wb"):  # the entries' directory cannot be made
        pass
    _write(spark, path, [(1, 20, "u1")], prepare=True)
    assert (1, 20, "u1") in _rows(spark, path, cache=False)


def test_entries_of_a_write_that_never_commits_are_not_used(spark, tmp_path):
    path = str(tmp_path / "t")
    _write(spark, path, [(i, 10, f"n{i}") for i in range(10)], options=V6)
    expected = _rows(spark, path, cache=False)
    df = spark.createDataFrame([(1, 20, "u1", "eu")], SCHEMA)
    pending = hudilite.write(df, path, record_key="id", precombine_field="ts", partition_by="region",
                             table_type="MERGE_ON_READ", commit=False)
    assert len(_entries(path)) == 1
    assert _rows(spark, path, cache=True) == expected, "its blocks do not count: its entry is not looked up"
    pending.abort()
    assert _rows(spark, path, cache=True) == expected


def test_sweep_prunes_a_live_slices_old_entries_keeping_the_newest(spark, mor_table):
    path, _, _ = mor_table
    _rows(spark, path, cache=True)
    _write(spark, path, [(1, 30, "u1b")])  # region eu: a new state of that slice
    expected = _rows(spark, path, cache=True)
    entries = _entries(path)
    assert len(entries) == 3  # eu: two states, us: one
    slice_dirs = {os.path.dirname(p) for p in entries}
    old = os.path.dirname(sorted(entries, key=entries.get)[0])
    tmp = os.path.join(old, ".x" + overlay_cache.ROWS + ".dead.tmp")
    open(tmp, "wb").close()
    assert overlay_cache.sweep(path) == 0, "everything is younger than the retention"
    for p in list(entries) + [tmp]:  # all older than the retention, in the order they were written
        past = os.stat(p).st_mtime - 2 * overlay_cache.KEEP_SECONDS
        os.utime(p, (past, past))
    assert overlay_cache.sweep(path) == 1, "only the eu slice's superseded entry"
    left = _entries(path)
    assert len(left) == 2 and {os.path.dirname(p) for p in left} == slice_dirs and not os.path.exists(tmp)
    assert set(left) < set(entries)
    assert _rows(spark, path, cache=True) == expected and _entries(path) == left, "the newest entries still serve"


def test_entries_found_on_the_driver_or_by_the_job(spark, mor_table, monkeypatch):
    """Few slices: the driver finds the entries (a read whose entries exist runs no Spark job to plan); many: the
    overlay job finds them (forced here with a limit of 0). Both find the same entries."""
    from hudilite.spark import merge as spark_merge

    path, _, _ = mor_table
    expected = _rows(spark, path, cache=False)
    tracker = spark.sparkContext.statusTracker()
    # the tracker is fed by the listener bus, asynchronously: drain it before each count, or a job that ran
    # is not listed yet
    bus = spark.sparkContext._jsc.sc().listenerBus()

    def newest_job() -> int:
        bus.waitUntilEmpty()
        return max(tracker.getJobIdsForGroup() or [-1])  # the newest id (old ones may be evicted)

    spark.conf.set(overlay_cache.CONF, "true")
    try:
        for limit in (0, spark_merge.DRIVER_ENTRY_LOOKUPS):
            monkeypatch.setattr(spark_merge, "DRIVER_ENTRY_LOOKUPS", limit)
            for _ in range(2):  # the first read of each setting may write, the second finds
                hudilite.read(spark, path).count()
            before = newest_job()
            df = hudilite.read(spark, path)
            jobs = newest_job() - before
            assert jobs == (1 if limit == 0 else 0), (limit, jobs)
            assert sorted(tuple(r) for r in df.select("id", "ts", "name").collect()) == expected
            assert len(_entries(path)) == 2
    finally:
        spark.conf.unset(overlay_cache.CONF)


def test_entry_key_covers_each_blocks_instant(mor_table):
    """A log file name reappearing after a rollback with another instant's block of the same offset and size must
    not find the old entry."""
    from hudilite.log.blocks import BlockType, HeaderKey, LogBlock
    from hudilite.reader.merge import SliceDesc
    from hudilite.reader.planner import plan_read

    path, _, _ = mor_table
    plan = plan_read(path)
    sl = plan.merged_slices[0]
    desc, spec = SliceDesc.of(sl), plan.merge_spec()

    def key_with(instant):
        block = LogBlock(BlockType.PARQUET_DATA, {HeaderKey.INSTANT_TIME: instant}, b"", offset=0, size=100,
                         path=desc.log_paths[0])
        return overlay_cache.entry_path(path, sl.base_instant, desc, spec, 7, [block])

    assert key_with("20240101000000000") == key_with("20240101000000000")
    assert key_with("20240101000000000") != key_with("20240101000000001")


def test_clean_completes_when_overlay_files_cannot_be_removed(spark, mor_table, monkeypatch):
    path, _, _ = mor_table
    _rows(spark, path, cache=True)
    assert schedule_compaction(path, {"hoodie.compact.inline.max.delta.commits": "1"})
    run_compaction(path)

    def broken(base_path, keep_seconds=overlay_cache.KEEP_SECONDS):
        raise PermissionError("overlay directory not writable")

    monkeypatch.setattr(overlay_cache, "sweep", broken)
    done = run_clean(path, {"hoodie.cleaner.policy": "KEEP_LATEST_FILE_VERSIONS",
                            "hoodie.cleaner.fileversions.retained": "1"})
    assert len(done) == 1 and [i for i in HoodieTable.open(path).timeline.completed(("clean",))
                               if i.timestamp == done[0]], "the clean completed"
    assert _rows(spark, path, cache=True) == _rows(spark, path, cache=False)


def _log_bytes(path, region) -> int:
    d = os.path.join(path, f"region={region}")
    return sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d) if ".log." in f)


def test_only_slices_with_big_logs_get_entries(spark, tmp_path):
    """Slices whose logs are below MIN_LOG_BYTES_CONF are merged by the read's Python tasks, no entries (neither
    from the read nor from the write); bigger ones get theirs; the mixed read equals the read without files."""
    path = str(tmp_path / "t")
    _write(spark, path, _first_rows(400), options=V6)
    # eu (odd ids): 200 updates with long incompressible names; us: one
    _write(spark, path, [(i, 20, f"u{i}" + os.urandom(150).hex()) for i in range(1, 400, 2)] + [(2, 20, "u2")])
    small, big = _log_bytes(path, "us"), _log_bytes(path, "eu")
    assert 8 * small < big
    spark.conf.set(overlay_cache.MIN_LOG_BYTES_CONF, str(big // 2))
    expected = _rows(spark, path, cache=False)
    assert (2, 20, "u2") in expected
    assert _rows(spark, path, cache=True) == expected
    assert [os.path.basename(os.path.dirname(os.path.dirname(p))) for p in _entries(path)] == ["region=eu"]
    # a write preparing entries: the big slice's, not the small one's (its logs stay below the threshold)
    _write(spark, path, [(1, 30, "v1"), (2, 30, "v2")], prepare=True)
    assert _log_bytes(path, "us") < big // 2
    entries = _entries(path)
    assert len(entries) == 2 and {os.path.basename(os.path.dirname(os.path.dirname(p))) for p in entries} == \
        {"region=eu"}
    got = _rows(spark, path, cache=True)
    assert got == _rows(spark, path, cache=False) and (1, 30, "v1") in got and (2, 30, "v2") in got
    assert _entries(path) == entries, "the read found the write's entry and wrote none for the small slice"


def test_small_upsert_over_many_partitions_writes_files_in_proportion(spark, tmp_path):
    """A small upsert over many partitions (a record or two each) writes about one log file per partition
    touched and no overlay entries (issue 27 item 11: it used to write two overlay files per slice too)."""
    spark.conf.unset(overlay_cache.MIN_LOG_BYTES_CONF)  # the default
    path = str(tmp_path / "t")
    parts = 24
    kw = dict(record_key="id", precombine_field="ts", partition_by="p", table_type="MERGE_ON_READ")
    schema = pa.schema([("id", pa.int64()), ("ts", pa.int64()), ("p", pa.string())])
    hudilite.write(pa.table([list(range(parts * 3)), [1] * parts * 3, [f"p{i % parts}" for i in range(parts * 3)]],
                            schema=schema), path, operation="insert", **kw)
    before = {os.path.join(d, f) for d, _, fs in os.walk(path) for f in fs}
    ids = list(range(parts)) + list(range(parts, 2 * parts, 2))  # 1-2 updates per partition
    hudilite.write(pa.table([ids, [2] * len(ids), [f"p{i % parts}" for i in ids]], schema=schema), path,
                   operation="upsert", **kw)
    new = {os.path.join(d, f) for d, _, fs in os.walk(path) for f in fs} - before
    overlays = [f for f in new if f"{os.sep}{overlay_cache.DIR}{os.sep}" in f]
    logs = [f for f in new if ".log." in os.path.basename(f)]
    assert not overlays
    assert len(logs) == parts
    assert len(new) <= parts + 5, sorted(os.path.relpath(f, path) for f in new)
    got = sorted((r["id"], r["ts"]) for r in hudilite.read(spark, path).select("id", "ts").collect())
    assert got == sorted((i, 2 if i in set(ids) else 1) for i in range(parts * 3))
    assert not os.path.exists(os.path.join(path, overlay_cache.DIR)), "nor does the read write entries"
