"""Table services: compaction, clean, clustering, archival, their run modes and the production regressions.

Every check compares three readers where it matters: hudilite's Python merge reader (the same code the Spark
read runs per slice, called directly to keep the suite fast), hudi-rs, and the snapshot recorded before the
service ran (a service must never change what a read at a retained instant returns).
"""

from __future__ import annotations

import glob
import io
import json
import os
import threading
import time

import fastavro
import pyarrow as pa
import pytest

import hudilite
from hudilite.errors import CommitConflictError, InvalidWriteError
from hudilite.log import AvroDataBlock, ParquetDataBlock, append_blocks, format_log_file_name, scan_log_file
from hudilite.reader.merge import SliceDesc, merge_slice
from hudilite.reader.planner import plan_read
from hudilite.errors import TableServiceError
from hudilite.services.archival import archive
from hudilite.services.clean import run_clean, schedule_clean
from hudilite.services.clustering import ClusteringError, cluster, run_clustering, schedule_clustering
from hudilite.services.compaction import run_compaction, schedule_compaction
from hudilite.table import HoodieTable
from tests.functional.helpers import fail_deltacommit

hudi = pytest.importorskip("hudi")
from tests.hudi_rs import read_hudi_rs  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")

SCHEMA = "id long, ts long, name string, region string"
COLS = ("id", "ts", "name")
EVERY = {"hoodie.compact.inline.max.delta.commits": "1"}


# Version 6: most tests read plans and instants as layout-1 files in .hoodie, the layout-1 archive and log
# files named by their base instant. The same services on 8/9: test_v9_tables, tests/compat/test_v9_compat,
# tests/unit/test_lsm_archival.
V6 = {"hoodie.write.table.version": "6"}


# ---- helpers ------------------------------------------------------------------------------------------------
def write(spark, path, rows, *, op="upsert", mor=True, options=None):
    df = spark.createDataFrame([(i, ts, name, "eu" if i % 2 else "us") for i, ts, name in rows], SCHEMA)
    return hudilite.write(df, path, record_key="id", precombine_field="ts", partition_by="region", operation=op,
                          table_type="MERGE_ON_READ" if mor else "COPY_ON_WRITE", options={**V6, **(options or {})})


def pyread(path, **kw) -> list[tuple]:
    """hudilite's read without Spark: plan + the per-slice merge the Spark read runs."""
    plan = plan_read(path, **kw)
    spec = plan.merge_spec()
    parts = [merge_slice(SliceDesc.of(s), spec) for s in plan.slices]
    if not parts:
        return []
    t = pa.concat_tables(parts)
    return sorted(tuple(r[c] for c in COLS) for r in t.select(list(COLS)).to_pylist())


def rs(path, **kw) -> list[tuple]:
    t = read_hudi_rs(path, **kw)
    if t is None:
        return []
    return sorted(tuple(r[c] for c in COLS) for r in t.select(list(COLS)).to_pylist())


def avro_file(path) -> dict:
    with open(path, "rb") as f:
        return next(iter(fastavro.reader(f)))


def meta(path, name) -> str:
    return os.path.join(path, ".hoodie", name)


def files(path, pattern="*"):
    return sorted(glob.glob(os.path.join(path, "*", pattern)) + glob.glob(os.path.join(path, "*", "." + pattern)))


def logs(path):
    return sorted(glob.glob(os.path.join(path, "*", ".*.log.*")))


def timeline(path):
    return HoodieTable.open(path).reload()


def base_rows(n=8, ts=1):
    return [(i, ts, f"n{i}") for i in range(n)]


# ---- compaction ---------------------------------------------------------------------------------------------
def test_compaction_plan_execute_and_every_read(spark, tmp_path):
    path = str(tmp_path / "t")
    c1 = write(spark, path, base_rows())
    c2 = write(spark, path, [(1, 2, "u1"), (2, 2, "u2"), (9, 1, "new9")])
    c3 = write(spark, path, [(3, None, None), (4, None, None)], op="delete")
    commits = [c1, c2, c3]
    want = {c: pyread(path, as_of=c) for c in commits}
    assert want[c3] == rs(path) and (3, 1, "n3") not in want[c3] and (1, 2, "u1") in want[c3]

    # trigger not met: no instant at all
    assert schedule_compaction(path, {"hoodie.compact.inline.max.delta.commits": "5"}) is None
    assert not timeline(path).pending()

    c = schedule_compaction(path, {"hoodie.compact.inline.max.delta.commits": "3"})
    assert c is not None
    plan = avro_file(meta(path, f"{c}.compaction.requested"))
    ops = {op["fileId"]: op for op in plan["operations"]}
    with_logs = {os.path.basename(p).split("_")[0][1:] for p in logs(path)}
    assert set(ops) == with_logs and plan["version"] == 2
    for op in ops.values():
        part_dir = os.path.join(path, op["partitionPath"])
        assert os.path.exists(os.path.join(part_dir, op["dataFilePath"]))
        assert op["baseInstantTime"] == c1 and all(os.path.exists(os.path.join(part_dir, n))
                                                   for n in op["deltaFilePaths"])

    # a write after scheduling: its logs start the compaction's slice, read with the previous slice meanwhile
    c4 = write(spark, path, [(1, 5, "after1"), (6, 5, "after6")])
    new_logs = [p for p in logs(path) if f"_{c}.log." in p]
    assert new_logs, "logs of groups in the pending plan are named with the compaction instant"
    want[c4] = pyread(path)
    assert (1, 5, "after1") in want[c4] and (6, 5, "after6") in want[c4]
    assert sorted(tuple(r) for r in hudilite.read(spark, path).select(*COLS).collect()) == want[c4]

    assert run_compaction(path) == [c]
    tl = timeline(path)
    inst = tl.get(c)
    assert inst.is_completed and inst.action == "commit"
    md = json.loads(open(meta(path, f"{c}.commit")).read())
    assert md["operationType"] == "COMPACT" and md["compacted"] is True
    assert {s["fileId"] for st in md["partitionToWriteStats"].values() for s in st} == set(ops)
    assert not os.path.exists(os.path.join(path, ".hoodie", ".temp", c))  # markers removed
    # every read as before, by both readers
    for t in commits + [c4]:
        assert pyread(path, as_of=t) == want[t], f"as_of {t}"
        assert rs(path, as_of=t) == want[t], f"hudi-rs as_of {t}"
    assert pyread(path) == rs(path) == want[c4]
    # read-optimized now holds the compacted rows (the logs written after the plan are not in base files)
    ro = pyread(path, read_optimized=True)
    assert ro == rs(path, read_optimized=True)
    assert (1, 2, "u1") in ro and (3, 1, "n3") not in ro and (1, 5, "after1") not in ro
    # incremental windows across the compaction
    for a, b in ((c1, c2), (c2, c4), (c1, c4)):
        assert pyread(path, begin=a, end=b) == rs(path, begin=a, end=b)
    # a second compaction picks up the logs of the compaction's slice
    assert schedule_compaction(path, EVERY) and run_compaction(path)
    assert pyread(path, read_optimized=True) == pyread(path) == rs(path) == want[c4]


def test_idle_table_gets_its_final_compaction_by_the_time_trigger(spark, tmp_path):
    """Regression: a table idle after its last write must still be compacted (the time trigger is evaluated
    against the clock at scheduling, not only when a write arrives)."""
    from hudilite.timeline.instant_time import now_ms, parse_instant

    path = str(tmp_path / "t")
    first = write(spark, path, base_rows(4))
    last = write(spark, path, [(1, 2, "u1")])
    wait = (now_ms() - parse_instant(first)) // 1000 + 3  # due 3 s from now (the machine may be slow)
    opts = {"hoodie.compact.inline.trigger.strategy": "NUM_OR_TIME",
            "hoodie.compact.inline.max.delta.commits": "50", "hoodie.compact.inline.max.delta.seconds": str(wait)}
    assert schedule_compaction(path, opts) is None  # neither 50 commits nor the time yet
    time.sleep(3.5)  # idle: no new data
    c = schedule_compaction(path, opts)
    assert c is not None and c > last
    assert run_compaction(path) == [c]
    assert pyread(path, read_optimized=True) == pyread(path) == rs(path)
    assert (1, 2, "u1") in rs(path, read_optimized=True)
    # TIME_ELAPSED counts from the last compaction: nothing is due right after it
    assert schedule_compaction(path, {**opts, "hoodie.compact.inline.trigger.strategy": "TIME_ELAPSED"}) is None


def test_backlog_of_pending_plans_all_run_oldest_first(spark, tmp_path):
    """Regression: with several pending plans, every one runs, oldest first (not only the newest)."""
    path = str(tmp_path / "t")
    write(spark, path, base_rows(6))
    write(spark, path, [(1, 2, "u1")])  # eu group gets logs
    p1 = schedule_compaction(path, EVERY)
    write(spark, path, [(2, 2, "u2")])  # us group gets logs
    p2 = schedule_compaction(path, EVERY)
    write(spark, path, [(3, 3, "u3"), (4, 3, "u4")])  # both groups are in pending plans: logs -> new slices
    p3 = schedule_compaction(path, EVERY)
    assert p1 and p2 and p3 is None and p1 < p2
    groups = [{op["fileId"] for op in avro_file(meta(path, f"{p}.compaction.requested"))["operations"]}
              for p in (p1, p2)]
    assert groups[0] and groups[1] and not groups[0] & groups[1]
    want = pyread(path)
    assert run_compaction(path) == [p1, p2]
    tl = timeline(path)
    assert not tl.pending()
    assert tl.completion_time(tl.get(p1)) < tl.completion_time(tl.get(p2))
    assert pyread(path) == rs(path) == want
    ro = pyread(path, read_optimized=True)
    assert (1, 2, "u1") in ro and (2, 2, "u2") in ro and (3, 3, "u3") not in ro


def test_compaction_without_valid_log_blocks_keeps_the_base_rows(spark, tmp_path):
    """Regression: a slice whose logs hold no block that counts (a failed instant's block, and a rolled-back
    one) is still compacted into a base file holding every base row."""
    path = str(tmp_path / "t")
    c1 = write(spark, path, base_rows(6))
    c2 = write(spark, path, [(1, 2, "u1")])
    shared = logs(path)[0]
    block = next(b for b in scan_log_file(shared) if isinstance(b, (AvroDataBlock, ParquetDataBlock)))
    rec = block.records()
    us = [p for p in glob.glob(os.path.join(path, "region=us", "*.parquet"))]
    fid = os.path.basename(us[0]).split("_")[0]
    part = os.path.join(path, "region=us")
    bad = rec.set_column(rec.schema.get_field_index("_hoodie_record_key"), "_hoodie_record_key", pa.array(["2"]))
    bad = bad.set_column(bad.schema.get_field_index("name"), "name", pa.array(["ghost"]))
    from hudilite.timeline.instant_time import format_instant, parse_instant

    ghost_instant = format_instant(parse_instant(c1) + 1)  # in the active range (c1 < ghost < c2), never on it
    assert c1 < ghost_instant < c2 and ghost_instant not in timeline(path).all_times
    append_blocks(os.path.join(part, format_log_file_name(fid, c1, 1, "9-9-9")),
                  [AvroDataBlock.from_table(bad, block.schema, ghost_instant)])
    before = pyread(path)
    assert before == rs(path) and (2, 1, "n2") in before and all(r[2] != "ghost" for r in before)
    c = schedule_compaction(path, EVERY)
    ops = avro_file(meta(path, f"{c}.compaction.requested"))["operations"]
    assert fid in {op["fileId"] for op in ops}
    run_compaction(path)
    ro = pyread(path, read_optimized=True)
    assert ro == before == rs(path, read_optimized=True) == rs(path)
    assert sorted(r[0] for r in ro if r[0] % 2 == 0) == [0, 2, 4]  # every base row of the us group


def test_plan_skips_slices_with_blocks_of_inflight_instants(spark, tmp_path, monkeypatch):
    from hudilite.services.rollback import rollback_failed_writes

    path = str(tmp_path / "t")
    write(spark, path, base_rows(6))
    write(spark, path, [(1, 2, "u1"), (2, 2, "u2")])  # both groups have committed logs
    # eu group: in-flight block
    failed = fail_deltacommit(monkeypatch, path, lambda: write(spark, path, [(3, 9, "inflight3")]))
    c = schedule_compaction(path, EVERY)
    ops = avro_file(meta(path, f"{c}.compaction.requested"))["operations"]
    parts = {op["partitionPath"] for op in ops}
    assert parts == {"region=us"}, "the eu slice holds a block of an in-flight instant"
    run_compaction(path)
    rollback_failed_writes(HoodieTable.open(path))
    assert failed not in timeline(path).all_times
    assert schedule_compaction(path, EVERY) is None  # no delta commit since the last compaction
    c2 = schedule_compaction(path, EVERY, force=True)
    assert {op["partitionPath"] for op in avro_file(meta(path, f"{c2}.compaction.requested"))["operations"]} \
        == {"region=eu"}
    run_compaction(path)
    assert pyread(path, read_optimized=True) == pyread(path) == rs(path)
    assert (3, 1, "n3") in pyread(path)


def test_failed_compaction_is_retried_from_scratch(spark, tmp_path, monkeypatch):
    from hudilite.services import compaction as comp

    path = str(tmp_path / "t")
    write(spark, path, base_rows(6))
    write(spark, path, [(1, 2, "u1"), (2, 2, "u2")])
    want = pyread(path)
    c = schedule_compaction(path, EVERY)
    real = comp._compact_slice
    calls = []

    def flaky(table, ctx, spec, op, token, **kw):
        calls.append(op["fileId"])
        if len(calls) == 2:
            raise OSError("disk full")
        return real(table, ctx, spec, op, token, **kw)

    monkeypatch.setattr(comp, "_compact_slice", flaky)
    with pytest.raises(OSError):
        run_compaction(path, {"hoodie.compaction.parallelism": "1"})
    monkeypatch.undo()
    assert timeline(path).get(c).state == "INFLIGHT"
    assert any(f.endswith(f"_{c}.parquet") for f in files(path, "*.parquet"))  # a partial, invisible base file
    assert pyread(path) == rs(path) == want
    assert run_compaction(path) == [c]
    assert len([f for f in files(path, "*.parquet") if f.endswith(f"_{c}.parquet")]) == 2
    assert pyread(path, read_optimized=True) == pyread(path) == rs(path) == want


def test_compaction_refuses_cow_tables_and_bad_options(spark, tmp_path):
    path = str(tmp_path / "t")
    write(spark, path, base_rows(2), mor=False)
    with pytest.raises(InvalidWriteError, match="MERGE_ON_READ"):
        schedule_compaction(path)
    with pytest.raises(InvalidWriteError, match="trigger.strategy"):
        schedule_compaction(path, {"hoodie.compact.inline.trigger.strategy": "SOMETIMES"})
    with pytest.raises(InvalidWriteError, match="max.delta.commits"):
        run_compaction(path, {"hoodie.compact.inline.max.delta.commits": "x"})
    assert not timeline(path).pending()


def test_writer_conflicts_only_with_compaction_of_the_slice_it_planned_on(spark, tmp_path):
    """A write planned against the slice a compaction compacts (logs named with the old base instant) would
    lose its blocks: it conflicts. Logs named with the compaction instant (planned after the plan) do not."""
    from hudilite.writer.conflict import Footprint, find_conflicts

    path = str(tmp_path / "t")
    c1 = write(spark, path, base_rows(4))
    write(spark, path, [(1, 2, "u1")])
    c = schedule_compaction(path, EVERY)
    op = avro_file(meta(path, f"{c}.compaction.requested"))["operations"][0]
    fid, part = op["fileId"], op["partitionPath"]

    def md(base):
        return {"partitionToWriteStats": {part: [{"fileId": fid, "partitionPath": part,
                                                  "logFiles": [format_log_file_name(fid, base, 1, "0-1-2")]}]}}

    tl = timeline(path)
    basis = frozenset(i.timestamp for i in tl.completed())
    assert [x.instant for x in find_conflicts(tl, "99999999999999999", Footprint.from_metadata(md(c1)), basis)] == [c]
    assert find_conflicts(tl, "99999999999999999", Footprint.from_metadata(md(c)), basis) == []
    run_compaction(path)
    tl = timeline(path)  # the completed compaction: same rule
    assert [x.instant for x in find_conflicts(tl, "99999999999999999", Footprint.from_metadata(md(c1)), basis)] == [c]
    assert find_conflicts(tl, "99999999999999999", Footprint.from_metadata(md(c)), basis) == []


def test_compaction_runs_while_a_writer_writes(spark, tmp_path):
    """Standalone service + writer at the same time: both commit, coordinated by the lock and the timeline."""
    path = str(tmp_path / "t")
    write(spark, path, base_rows(8))
    write(spark, path, [(i, 2, f"u{i}") for i in range(8)])
    c = schedule_compaction(path, EVERY)
    errors = []

    def service():
        try:
            run_compaction(path)
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    th = threading.Thread(target=service)
    th.start()
    write(spark, path, [(i, 3, f"w{i}") for i in range(0, 8, 2)])
    th.join()
    assert not errors
    assert timeline(path).get(c).is_completed
    want = sorted([(i, 3, f"w{i}") if i % 2 == 0 else (i, 2, f"u{i}") for i in range(8)])
    assert pyread(path) == rs(path) == want


# ---- clean --------------------------------------------------------------------------------------------------
def test_clean_keep_latest_commits_keeps_every_retained_read(spark, tmp_path):
    path = str(tmp_path / "t")
    commits = [write(spark, path, base_rows(6), mor=False)]
    for k in range(2, 6):
        commits.append(write(spark, path, [(1, k, f"u1v{k}"), (2, k, f"u2v{k}")], mor=False))
    want = {c: pyread(path, as_of=c) for c in commits}
    n_files = len(files(path, "*.parquet"))
    assert schedule_clean(path, {"hoodie.cleaner.commits.retained": "10"}) is None  # nothing outside
    done = run_clean(path, {"hoodie.cleaner.commits.retained": "2"})
    assert len(done) == 1
    t = done[0]
    plan = avro_file(meta(path, f"{t}.clean.requested"))
    assert plan["policy"] == "KEEP_LATEST_COMMITS" and plan["earliestInstantToRetain"]["timestamp"] == commits[-2]
    cm = avro_file(meta(path, f"{t}.clean"))
    deleted = [f for p in cm["partitionMetadata"].values() for f in p["successDeleteFiles"]]
    assert cm["totalFilesDeleted"] == len(deleted) > 0 and cm["earliestCommitToRetain"] == commits[-2]
    assert len(files(path, "*.parquet")) == n_files - len(deleted)
    # reads pinned at a retained instant: the newest 2 commits (and the slice a read at the oldest one uses)
    for c in commits[-2:]:
        assert pyread(path, as_of=c) == want[c] == rs(path, as_of=c)
    assert pyread(path, begin=commits[-2], end=commits[-1]) == rs(path, begin=commits[-2], end=commits[-1])
    spark_rows = sorted(tuple(r) for r in hudilite.read(spark, path, as_of=commits[-2]).select(*COLS).collect())
    assert spark_rows == want[commits[-2]]
    assert pyread(path) == rs(path) == want[commits[-1]]
    assert run_clean(path, {"hoodie.cleaner.commits.retained": "2"}) == []  # idempotent: nothing left


def test_clean_file_versions_replaced_groups_and_pending_compaction(spark, tmp_path):
    path = str(tmp_path / "t")
    write(spark, path, base_rows(6))
    write(spark, path, [(1, 2, "u1"), (2, 2, "u2")])
    assert schedule_compaction(path, EVERY) and run_compaction(path)  # second slice per group
    write(spark, path, [(1, 3, "u1b")])
    pend = schedule_compaction(path, EVERY)  # pending plan on the eu slice
    want = pyread(path)
    run_clean(path, {"hoodie.cleaner.policy": "KEEP_LATEST_FILE_VERSIONS", "hoodie.cleaner.fileversions.retained": "1"})
    tl = timeline(path)
    assert tl.completed(("clean",))
    for op in avro_file(meta(path, f"{pend}.compaction.requested"))["operations"]:
        d = os.path.join(path, op["partitionPath"])
        assert all(os.path.exists(os.path.join(d, n)) for n in [op["dataFilePath"]] + op["deltaFilePaths"])
    assert pyread(path) == rs(path) == want
    assert run_compaction(path) == [pend]
    assert pyread(path) == rs(path) == want

    # replaced file groups: removed once their replacecommit is outside the retained window
    cow = str(tmp_path / "cow")
    write(spark, cow, base_rows(6), mor=False)
    r = write(spark, cow, [(1, 5, "over1")], op="insert_overwrite", mor=False)  # replaces the eu group
    last = write(spark, cow, [(2, 6, "u2")], mor=False)
    md = json.loads(open(meta(cow, f"{r}.replacecommit")).read())
    replaced = md["partitionToReplaceFileIds"]["region=eu"]
    assert replaced and any(os.path.basename(f).startswith(replaced[0]) for f in files(cow, "*.parquet"))
    want = pyread(cow)
    run_clean(cow, {"hoodie.cleaner.commits.retained": "1"})
    assert not any(os.path.basename(f).startswith(replaced[0]) for f in files(cow, "*.parquet"))
    assert pyread(cow) == rs(cow) == want == pyread(cow, as_of=last)


def test_clean_refuses_bad_options_and_foreign_paths(spark, tmp_path):
    from hudilite.services.clean import CleanError, execute_clean
    from hudilite.timeline import Instant
    from hudilite.timeline.avro_models import CLEANER_PLAN, to_container

    path = str(tmp_path / "t")
    write(spark, path, base_rows(2), mor=False)
    with pytest.raises(InvalidWriteError, match="hoodie.cleaner.policy"):
        run_clean(path, {"hoodie.cleaner.policy": "KEEP_NOTHING"})
    with pytest.raises(InvalidWriteError, match="commits.retained"):
        run_clean(path, {"hoodie.cleaner.commits.retained": "0"})
    outside = tmp_path / "precious.txt"
    outside.write_text("x")
    plan = {"earliestInstantToRetain": None, "policy": "KEEP_LATEST_COMMITS", "filesToBeDeletedPerPartition": {},
            "version": 2, "partitionsToBeDeleted": [],
            "filePathsToBeDeletedPerPartition": {"region=eu": [{"filePath": str(outside), "isBootstrapBaseFile": False}]}}
    t = "20990101000000000"
    open(meta(path, f"{t}.clean.requested"), "wb").write(to_container(CLEANER_PLAN, plan))
    with pytest.raises(CleanError, match="outside"):
        execute_clean(HoodieTable.open(path), Instant(t, "clean", "REQUESTED"))
    assert outside.exists()


# ---- clustering ---------------------------------------------------------------------------------------------
def test_clustering_sorted_and_reads(spark, tmp_path):
    path = str(tmp_path / "t")
    commits = [write(spark, path, [(i, 1, f"z{10 - i}") for i in range(k * 4, k * 4 + 4)], op="insert")
               for k in range(3)]  # merge-on-read inserts: new small file groups per write
    commits.append(write(spark, path, [(1, 2, "u1"), (2, 2, "u2")]))  # logs in two of them
    groups_before = {os.path.basename(f).split("_")[0] for f in files(path, "*.parquet")}
    assert len(groups_before) == 6
    want = {c: pyread(path, as_of=c) for c in commits}
    done = cluster(path, {"hoodie.clustering.plan.strategy.sort.columns": "name"})
    assert len(done) == 1
    t = done[0]
    req = avro_file(meta(path, f"{t}.replacecommit.requested"))
    assert req["operationType"] == "CLUSTER"
    assert req["clusteringPlan"]["strategy"]["strategyParams"] == {
        "hoodie.clustering.plan.strategy.sort.columns": "name"}
    md = json.loads(open(meta(path, f"{t}.replacecommit")).read())
    assert md["operationType"] == "CLUSTER"
    assert {f for v in md["partitionToReplaceFileIds"].values() for f in v} == groups_before
    new = [s for st in md["partitionToWriteStats"].values() for s in st]
    assert len(new) == 2 and not {s["fileId"] for s in new} & groups_before
    for s in new:  # sorted by the sort column; meta columns of the rows kept
        import pyarrow.parquet as pq

        tbl = pq.read_table(os.path.join(path, s["path"]))
        names = tbl.column("name").to_pylist()
        assert names == sorted(names)
        assert set(tbl.column("_hoodie_commit_time").to_pylist()) <= set(commits)
        assert set(tbl.column("_hoodie_file_name").to_pylist()) == {os.path.basename(s["path"])}
    for c in commits:
        assert pyread(path, as_of=c) == want[c] == rs(path, as_of=c)
    assert pyread(path) == rs(path) == pyread(path, read_optimized=True) == want[commits[-1]]
    assert pyread(path, begin=commits[0], end=t) == rs(path, begin=commits[0], end=t)
    assert schedule_clustering(path) is None  # one group per partition left: nothing to combine


def test_writes_to_pending_clustering_groups_fail_retryably(spark, tmp_path):
    path = str(tmp_path / "t")
    for k in range(2):
        write(spark, path, [(i, 1, f"n{i}") for i in range(k * 4, k * 4 + 4)], op="insert")
    t = schedule_clustering(path)
    assert t is not None
    want = pyread(path)
    n_logs = len(logs(path))
    with pytest.raises(CommitConflictError, match=f"pending clustering plan {t}") as ei:
        write(spark, path, [(1, 7, "blocked")])
    assert ei.value.retryable
    assert pyread(path) == rs(path) == want and len(logs(path)) == n_logs  # rolled back
    ins = write(spark, path, [(100, 1, "insert-ok")])  # new file groups are never blocked
    assert ins.stats["inserted"] == 1
    assert run_clustering(path) == [t]
    write(spark, path, [(1, 7, "after")])  # the retry after the clustering goes to the new groups
    assert (1, 7, "after") in pyread(path) and pyread(path) == rs(path)


def test_clustering_rejects_unknown_sort_columns(spark, tmp_path):
    path = str(tmp_path / "t")
    write(spark, path, base_rows(2), op="insert")
    with pytest.raises(InvalidWriteError, match="nope"):
        schedule_clustering(path, {"hoodie.clustering.plan.strategy.sort.columns": "nope"})
    with pytest.raises(ClusteringError):
        run_clustering(path, instant="20990101000000000")
    assert not timeline(path).pending()


# ---- archival -----------------------------------------------------------------------------------------------
ARCH = {"hoodie.keep.min.commits": "2", "hoodie.keep.max.commits": "3"}


def test_archival_layout_reads_and_limits(spark, tmp_path):
    path = str(tmp_path / "t")
    commits = [write(spark, path, base_rows(6))]
    for k in range(2, 6):  # log blocks of every deltacommit stay in the (uncompacted) slices
        commits.append(write(spark, path, [(k, k, f"u{k}"), (1, k, f"u1v{k}")]))
    want = {c: pyread(path, as_of=c) for c in commits}
    archived = archive(path, ARCH)
    assert archived == commits[:3]
    tl = timeline(path)
    assert [i.timestamp for i in tl.completed()] == commits[3:]
    assert [i.timestamp for i in tl.archived.instants] == commits[:3]
    assert not any(os.path.exists(meta(path, f"{c}.deltacommit")) for c in commits[:3])
    arch_files = glob.glob(os.path.join(path, ".hoodie", "archived", ".commits_.archive.*_*"))
    assert len(arch_files) == 1
    # the archive is a Hudi log file of AVRO_DATA blocks of HoodieArchivedMetaEntry
    blocks = [b for b in scan_log_file(arch_files[0]) if isinstance(b, AvroDataBlock)]
    assert len(blocks) == 1 and json.loads(blocks[0].schema)["name"] == "HoodieArchivedMetaEntry"
    schema = fastavro.parse_schema(json.loads(blocks[0].schema))
    content = blocks[0].content
    n = int.from_bytes(content[4:8], "big")
    buf, recs = io.BytesIO(content[8:]), []
    for _ in range(n):
        size = int.from_bytes(buf.read(4), "big")
        recs.append(fastavro.schemaless_reader(io.BytesIO(buf.read(size)), schema, None))
    assert {(r["commitTime"], r["actionState"]) for r in recs} >= {(c, "COMPLETED") for c in commits[:3]}
    done = [r for r in recs if r["actionState"] == "COMPLETED"]
    assert all(r["actionType"] == "deltacommit" and r["hoodieCommitMetadata"]["operationType"] == "UPSERT"
               for r in done)
    # reads: the archived deltacommits' log blocks still count (validity through the archive)
    assert pyread(path) == rs(path) == want[commits[-1]]
    assert (1, 5, "u1v5") in want[commits[-1]] and (2, 2, "u2") in want[commits[-1]]
    for c in commits[3:]:
        assert pyread(path, as_of=c) == want[c] == rs(path, as_of=c)
    assert pyread(path, begin=commits[3], end=commits[4]) == rs(path, begin=commits[3], end=commits[4])
    assert archive(path, ARCH) == []  # 2 left: below the maximum
    # a compaction after archival merges the archived instants' blocks too
    assert schedule_compaction(path, EVERY) and run_compaction(path)
    assert pyread(path, read_optimized=True) == want[commits[-1]] == rs(path)


def test_archival_stops_at_pending_instants_and_clean_retention(spark, tmp_path):
    path = str(tmp_path / "t")
    commits = [write(spark, path, base_rows(4)), write(spark, path, [(1, 2, "u2")])]
    pend = schedule_compaction(path, EVERY)  # a pending plan: never archived past
    commits += [write(spark, path, [(1, k, f"u{k}")]) for k in (3, 4)]
    opts = {"hoodie.keep.min.commits": "1", "hoodie.keep.max.commits": "1"}
    assert archive(path, opts) == commits[:2]
    assert timeline(path).get(pend) is not None and not timeline(path).get(pend).is_completed
    assert run_compaction(path) == [pend]
    commits.insert(2, pend)
    commits.append(write(spark, path, [(1, 5, "u5")]))
    want = {c: pyread(path, as_of=c) for c in commits[2:]}
    run_clean(path, {"hoodie.cleaner.commits.retained": "2"})  # retains reads from commits[4]
    assert archive(path, opts) == commits[2:4]  # the clean's earliest retained instant stays active
    tl = timeline(path)
    assert [i.timestamp for i in tl.completed()] == commits[4:]
    for c in commits[4:]:
        assert pyread(path, as_of=c) == rs(path, as_of=c) == want[c]
    assert pyread(path, begin=commits[4], end=commits[5]) == rs(path, begin=commits[4], end=commits[5])
    assert pyread(path) == rs(path) == want[commits[-1]]


def test_failed_block_older_than_the_archived_boundary_is_not_read(spark, tmp_path):
    """Regression: a log block of an instant that failed before its deltacommit completed, older than the
    active timeline after archival, is not read: validity is judged against the archive too (the format's
    'older than the active timeline means committed' rule alone would read it)."""
    path = str(tmp_path / "t")
    c1 = write(spark, path, base_rows(4))
    commits = [c1]
    for k in range(2, 6):
        commits.append(write(spark, path, [(1, k, f"u{k}")]))
    # a block of a write that failed between commits[1] and commits[2] and was never rolled back from the log
    failed = commits[1][:-3] + str(int(commits[1][-3:]) + 1).zfill(3)
    assert commits[1] < failed < commits[2]
    shared = logs(path)[0]
    block = next(b for b in scan_log_file(shared) if isinstance(b, (AvroDataBlock, ParquetDataBlock)))
    rec = block.records()
    rec = rec.set_column(rec.schema.get_field_index("ts"), "ts", pa.array([99] * rec.num_rows, pa.int64()))
    rec = rec.set_column(rec.schema.get_field_index("name"), "name", pa.array(["failed"] * rec.num_rows))
    fid, base = os.path.basename(shared)[1:].split("_")[0], c1
    append_blocks(os.path.join(os.path.dirname(shared), format_log_file_name(fid, base, 99, "7-7-7")),
                  [AvroDataBlock.from_table(rec, block.schema, failed)])
    want = pyread(path)
    assert all(r[2] != "failed" for r in want)
    assert archive(path, ARCH) == commits[:3]
    tl = timeline(path)
    assert failed < tl.first_write_time and failed not in tl.committed_times
    got = pyread(path)
    assert got == want, "the failed block must stay invisible after archival"
    assert all(r[2] != "failed" for r in got)
    # compaction judges validity the same way: the failed block does not reach the base file
    assert schedule_compaction(path, EVERY) and run_compaction(path)
    assert pyread(path, read_optimized=True) == want


# ---- run modes ----------------------------------------------------------------------------------------------
def test_inline_and_async_services(spark, tmp_path):
    path = str(tmp_path / "t")
    inline = {"hoodie.compact.inline": "true", "hoodie.compact.inline.max.delta.commits": "2",
              "hoodie.clean.automatic": "true", "hoodie.cleaner.commits.retained": "3",
              "hoodie.archive.automatic": "true", "hoodie.keep.min.commits": "3", "hoodie.keep.max.commits": "4"}
    model = dict((i, (i, 1, f"n{i}")) for i in range(6))
    write(spark, path, base_rows(6), options=inline)
    for k in range(2, 8):
        rows = [(1, k, f"u1v{k}"), (k % 6, k, f"u{k}")]
        res = write(spark, path, rows, options=inline)
        for r in rows:
            model[r[0]] = r
    tl = timeline(path)
    done = [i for i in tl.completed() if i.action == "commit"]
    assert done, "inline compactions ran"
    assert tl.completed(("clean",)) and tl.archived.instants, "inline clean and archival ran"
    assert "services" in res.stats
    assert pyread(path) == rs(path) == sorted(model.values())

    # async: scheduled inline, executed separately (the CLI)
    from hudilite.cli import main

    asy = str(tmp_path / "a")
    write(spark, asy, base_rows(4))
    res = write(spark, asy, [(1, 2, "u1")], options={"hoodie.compact.schedule.inline": "true",
                                                      "hoodie.compact.inline.max.delta.commits": "1"})
    pend = timeline(asy).pending(("compaction",))
    assert len(pend) == 1 and res.stats["services"]["compaction_scheduled"] == [pend[0].timestamp]
    assert main(["compaction", "run", asy, "--no-progress"]) == 0
    assert timeline(asy).get(pend[0].timestamp).is_completed
    assert (1, 2, "u1") in rs(asy, read_optimized=True)


def test_bad_service_options_fail_before_the_write(spark, tmp_path):
    path = str(tmp_path / "t")
    write(spark, path, base_rows(2))
    before = sorted(os.listdir(os.path.join(path, ".hoodie")))
    for bad in ({"hoodie.compact.inline": "maybe"}, {"hoodie.cleaner.policy": "NOPE"},
                {"hoodie.keep.min.commits": "5", "hoodie.keep.max.commits": "2"}):
        with pytest.raises(InvalidWriteError):
            write(spark, path, [(1, 2, "x")], options=bad)
    assert sorted(os.listdir(os.path.join(path, ".hoodie"))) == before


def test_inline_service_failure_names_the_committed_write(spark, tmp_path, monkeypatch):
    from hudilite.services import compaction as comp

    path = str(tmp_path / "t")
    write(spark, path, base_rows(2))

    def boom(*a, **k):
        raise comp.CompactionError("simulated")

    monkeypatch.setattr(comp, "run_compaction", boom)
    with pytest.raises(TableServiceError, match="committed") as ei:
        write(spark, path, [(1, 2, "x")], options={"hoodie.compact.inline": "true",
                                                    "hoodie.compact.inline.max.delta.commits": "1"})
    assert "compaction" in str(ei.value)
    assert (1, 2, "x") in pyread(path)


def test_cli_services(spark, tmp_path, capsys):
    from hudilite.cli import main

    path = str(tmp_path / "t")
    for k in range(3):
        write(spark, path, [(i, 1, f"n{i}") for i in range(k * 2, k * 2 + 2)], op="insert")
    write(spark, path, [(1, 2, "u1")])
    want = pyread(path)
    assert main(["compaction", "schedule", path, "-o", "hoodie.compact.inline.max.delta.commits=1"]) == 0
    assert "scheduled compaction" in capsys.readouterr().out
    assert main(["compaction", "run", path]) == 0
    out = capsys.readouterr()
    assert "completed 1 compaction" in out.out and "compaction" in out.err  # the progress bar on stderr
    assert main(["cluster", path, "--sort-columns", "id"]) == 0
    assert "completed 1 clustering" in capsys.readouterr().out
    assert main(["clean", path, "-o", "hoodie.cleaner.commits.retained=1"]) == 0
    assert "completed 1 clean" in capsys.readouterr().out
    assert main(["archive", path, "-o", "hoodie.keep.min.commits=1", "-o", "hoodie.keep.max.commits=2"]) == 0
    assert "archived" in capsys.readouterr().out
    assert main(["timeline", path, "--archived", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert any(r["state"].startswith("ARCHIVED") for r in rows)
    assert pyread(path) == rs(path) == want
    assert main(["compaction", "schedule", path, "-o", "hoodie.compact.inline.trigger.strategy=BAD"]) == 2
    assert "trigger.strategy" in capsys.readouterr().err
    assert main(["clean", path, "-o", "novalue"]) == 2
