"""Apache Hudi 1.2 (the `hudi_judge` fixture) as the judge of version-9 tables, both ways.

* It reads v9 tables WE write (copy-on-write and merge-on-read: inserts, upserts, deletes, a compaction, a
  clustering, a clean) with the same snapshot, time travel at every instant and incremental ranges (bounds are
  completion times on version 9) as hudilite's reader.
* It WRITES v9 tables (no metadata table: hudilite does not maintain one), which we read identically and keep
  writing on; then it reads our commits on top of its own. Merge-on-read: upserts, deletes and a compaction.
  Copy-on-write: upserts, a delete, a completed clustering, a clustering left pending and a write that failed
  before its commit (files, markers and inflight instant left behind); we execute its pending plan and our
  first write rolls back its failed one (writing a rollback instant, as Apache Hudi does; our own failed write
  rolled back on our tables too), after which Apache Hudi reads the table and writes on it.
* It EXECUTES plans we scheduled: a clustering plan and a compaction plan left pending, run by its procedures.
"""

from __future__ import annotations

import pathlib

import pyarrow as pa
import pytest

import hudilite
from hudilite import Table
from hudilite.errors import CommitConflictError
from hudilite.reader.merge import SliceDesc, merge_slice
from hudilite.reader.planner import plan_read
from hudilite.services.clustering import schedule_clustering
from hudilite.services.compaction import run_compaction, schedule_compaction
from hudilite.timeline.plans import clustering_plan
from tests.judge.conftest import JudgeError
from tests.judge.test_apache_hudi_reads import LAYOUT, _arrow, _dicts, _proj, hudi_opts, ours

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")

DDL = "id long, ts long, name string, region string"
V9 = {"hoodie.write.table.version": "9"}
V6 = {"hoodie.write.table.version": "6"}  # the upgrade tests' tables start at version 6


def agree_v9(judge, path, hudi_incremental: dict | None = None, by_completion: bool = False) -> None:
    """Snapshot, time travel at every completed write and incremental ranges between the completion times of
    writes consecutive in requested order (`by_completion`: consecutive completion times, which differ when
    writes completed out of order) and over the whole timeline: Apache Hudi's answer equals ours, except the
    ranges whose (different) Apache Hudi answer `hudi_incremental` pins."""
    assert _proj(judge.read(path)) == ours(path), "snapshot"
    tl = Table(path).timeline
    writes = tl.completed()
    for i in writes:
        assert _proj(judge.as_of(path, i.timestamp)) == ours(path, as_of=i.timestamp), f"as of {i.timestamp}"
    done = [tl.completion_time(i) for i in writes]
    done = sorted(done) if by_completion else done
    for b, e in list(zip(done, done[1:])) + [(done[0], done[-1])]:
        want = (hudi_incremental or {}).get((b, e), ours(path, begin=b, end=e))
        got = _proj(judge.incremental(path, b, e))
        assert got == want, f"incremental ({b}, {e}]: Apache Hudi {got}"


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_hudi_reads_our_v9_tables(hudi_judge, tmp_path, table_type):
    path = str(tmp_path / table_type.lower())

    def write(rows, op="upsert"):
        return hudilite.write(_arrow(rows), path, **LAYOUT, operation=op, table_type=table_type, options=V9)

    write([(i, 1, f"n{i}") for i in range(12)], "insert")
    t = Table(path)
    assert t.info().properties["hoodie.table.version"] == "9"
    write([(1, 2, "u1"), (2, 2, "u2"), (20, 1, "n20")])
    write([(3, 3, None), (4, 3, None)], "delete")
    if table_type == "MERGE_ON_READ":
        # a deltacommit in flight while the compaction is planned: it completes after the plan's instant, so
        # its log starts the compaction's slice
        slow = hudilite.write(_arrow([(1, 4, "u1b"), (5, 4, "u5")]), path, **LAYOUT, table_type=table_type,
                              options=V9, commit=False)
        c = schedule_compaction(path, V9, force=True)
        slow.complete()
        assert run_compaction(path, V9) == [c]
        write([(6, 5, "u6")])  # logs on the compacted slices
    assert t.services.cluster(sort_columns=["name"])
    write([(2, 5, "u2b"), (21, 5, "n21")])
    # a write of ours that failed before its commit (its writer dead), rolled back: a rollback instant, as
    # Apache Hudi writes one, that its timeline and file system view take in
    failed = hudilite.write(_arrow([(2, 6, "failed2"), (22, 6, "failed22")]), path, **LAYOUT, table_type=table_type,
                            options=V9, commit=False)
    failed.heartbeat.stop()
    assert t.services.rollback(force=True) == [failed.instant_time]
    rb = Table(path).timeline.instants[-1]
    assert (rb.action, rb.is_completed, rb.completion is not None) == ("rollback", True, True)
    agree_v9(hudi_judge, path)
    # Apache Hudi's own write on top of the rolled-back one, then ours again
    hudi_judge.write(path, DDL, _dicts([(2, 9, "h2"), (30, 9, "h30")]),
                     **{**hudi_opts(table_type, "upsert"), **V9, "hoodie.table.name": table_type.lower()})
    write([(30, 10, "ours30")])
    assert {(r[0], r[2]) for r in ours(path)} >= {(2, "h2"), (30, "ours30")}
    assert not {r[2] for r in ours(path)} & {"failed2", "failed22"}
    agree_v9(hudi_judge, path)
    assert t.services.clean({"hoodie.cleaner.commits.retained": "2"})
    assert _proj(hudi_judge.read(path)) == ours(path), "snapshot after clean"


def test_we_read_and_extend_hudi_written_v9_mor(hudi_judge, tmp_path):
    path = str(tmp_path / "mor")

    def hudi_write(rows, op="upsert", **extra):
        hudi_judge.write(path, DDL, _dicts(rows), **{**hudi_opts("MERGE_ON_READ", op, **extra), **V9})

    hudi_write([(i, 1, f"n{i}") for i in range(10)], "insert")
    hudi_write([(1, 2, "u1"), (2, 2, "u2"), (20, 1, "n20")])
    hudi_write([(3, 3, None)], "delete")
    hudi_write([(5, 4, "u5")], **{"hoodie.compact.inline": "true", "hoodie.compact.inline.max.delta.commits": "1"})
    hudi_write([(6, 5, "u6"), (1, 5, "u1b")])
    props = Table(path).info().properties
    assert props["hoodie.table.version"] == "9" and Table(path).timeline.completed(("commit",))
    agree_v9(hudi_judge, path)

    ours_at = hudilite.write(_arrow([(2, 7, "ours2"), (8, 7, "ours8"), (30, 7, "ours30")]), path, **LAYOUT)
    hudilite.write(_arrow([(9, 8, None)]), path, **LAYOUT, operation="delete")
    assert Table(path).services.compact(force=True)
    hudilite.write(_arrow([(6, 9, "ours6")]), path, **LAYOUT)
    assert ours(path, as_of=str(ours_at)) != ours(path)
    agree_v9(hudi_judge, path)
    hudi_write([(8, 10, "theirs8"), (31, 10, "n31")])  # Apache Hudi writes on top of our commits
    agree_v9(hudi_judge, path)


# Apache Hudi's pre-commit validator with a query that cannot hold: the write creates its files and markers, then
# throws before its commit, leaving an inflight instant behind, as a writer killed before its commit does
FAIL_BEFORE_COMMIT = {
    "hoodie.precommit.validators": "org.apache.hudi.client.validator.SqlQuerySingleResultPreCommitValidator",
    "hoodie.precommit.validators.single.value.sql.queries": "select count(*) from <TABLE_NAME> where id < 0#1"}


def test_we_read_and_extend_hudi_written_v9_cow(hudi_judge, tmp_path):
    path = str(tmp_path / "cow")
    new_groups = {"hoodie.parquet.small.file.limit": "0"}  # inserts start new file groups: clustering has work

    def hudi_write(rows, op="upsert", **extra):
        hudi_judge.write(path, DDL, _dicts(rows), **{**hudi_opts("COPY_ON_WRITE", op, **extra), **V9})

    hudi_write([(i, 1, f"n{i}") for i in range(10)], "insert", **new_groups)
    hudi_write([(1, 2, "u1"), (2, 2, "u2"), (20, 1, "n20")], **new_groups)
    hudi_write([(3, 3, None)], "delete")
    hudi_write([(5, 4, "u5"), (21, 4, "n21")], **new_groups, **{
        "hoodie.clustering.inline": "true", "hoodie.clustering.inline.max.commits": "1"})
    hudi_write([(6, 5, "u6"), (22, 5, "n22")], **new_groups)
    # a plan left pending: its procedure (the inline schedule option plans nothing right after a clustering)
    hudi_judge.sql(f"call run_clustering(path => '{path}', op => 'schedule')")
    with pytest.raises(JudgeError, match="HoodieValidationException"):
        hudi_write([(23, 6, "failed23")], "insert", **new_groups, **FAIL_BEFORE_COMMIT)
    tl = Table(path).timeline
    assert Table(path).info().properties["hoodie.table.version"] == "9"
    assert tl.completed(("replacecommit",)), "Apache Hudi completed no clustering"
    pending_plan = [i.timestamp for i in tl.pending(("clustering",))]
    failed = [i.timestamp for i in tl.pending(("commit",))]
    assert len(pending_plan) == 1 and len(failed) == 1, (pending_plan, failed)
    failed_files = [f for f in _data_files(path) if failed[0] in f]
    assert failed_files, "the failed write left no data file"
    agree_v9(hudi_judge, path)  # its pending plan and failed write are invisible to both readers

    # the plan wins: our update of a file group it covers is refused, and the table stays as it was
    before = (ours(path), _data_files(path) - set(failed_files))
    with pytest.raises(CommitConflictError, match="pending clustering plan"):
        hudilite.write(_arrow([(6, 7, "ours6")]), path, **LAYOUT)
    assert (ours(path), _data_files(path) - set(failed_files)) == before
    assert not [i for i in Table(path).timeline.pending() if i.timestamp not in pending_plan + failed]
    # we execute Apache Hudi's plan, then write: the first write rolls back its failed write (no heartbeat: dead)
    assert Table(path).services.run_clustering() == pending_plan
    ours_at = hudilite.write(_arrow([(2, 7, "ours2"), (8, 7, "ours8"), (30, 7, "ours30")]), path, **LAYOUT)
    assert failed[0] not in Table(path).timeline.all_times
    assert not set(failed_files) & _data_files(path), "our rollback left the failed write's files"
    hudilite.write(_arrow([(9, 8, None), (21, 8, None)]), path, **LAYOUT, operation="delete")
    hudilite.write(_arrow([(6, 9, "ours6")]), path, **LAYOUT)
    assert ours(path, as_of=str(ours_at)) != ours(path)
    assert 23 not in {r[0] for r in ours(path)}
    agree_v9(hudi_judge, path)
    hudi_write([(8, 10, "theirs8"), (31, 10, "n31")])  # Apache Hudi writes on top of our commits
    agree_v9(hudi_judge, path)


def test_hudi_executes_our_clustering_and_compaction_plans(hudi_judge, tmp_path):
    """Plans we schedule and leave pending, executed by Apache Hudi's procedures: a clustering plan (its slices
    name their files by full path, as Apache Hudi's planner writes them) and a compaction plan. We read what
    Apache Hudi wrote as it does, and write on."""
    path = str(tmp_path / "plans")

    def write(rows, op="upsert"):
        return hudilite.write(_arrow(rows), path, **LAYOUT, operation=op, table_type="MERGE_ON_READ", options=V9)

    write([(i, 1, f"n{i}") for i in range(10)], "insert")
    write([(1, 2, "u1"), (8, 2, "u8"), (20, 2, "n20")])  # log files: the clustering merges them
    hudi_judge.sql("set hoodie.metadata.enable=false")  # hudilite maintains no metadata table
    c = schedule_clustering(path, {**V9, "hoodie.clustering.plan.strategy.sort.columns": "name"})
    assert c is not None
    tl = Table(path).timeline
    plan = clustering_plan(tl, tl.get(c))
    slices = [s for g in plan["inputGroups"] for s in g["slices"]]
    assert slices and all(s["dataFilePath"].startswith(f"file:{path}/") for s in slices)
    assert any(s["deltaFilePaths"] for s in slices) and all(
        p.startswith(f"file:{path}/") for s in slices for p in s["deltaFilePaths"])
    before = ours(path)
    hudi_judge.sql(f"call run_clustering(path => '{path}', op => 'execute')")
    tl = Table(path).timeline
    assert not tl.pending() and tl.get(c).is_completed and tl.get(c).action == "replacecommit"
    assert ours(path) == before == _proj(hudi_judge.read(path))
    agree_v9(hudi_judge, path)

    write([(2, 3, "u2"), (9, 3, "u9")])  # logs on the clustered file groups
    cp = schedule_compaction(path, V9, force=True)
    assert cp is not None
    before = ours(path)
    hudi_judge.sql(f"call run_compaction(op => 'run', path => '{path}', timestamp => {cp})")
    tl = Table(path).timeline
    assert not tl.pending() and tl.get(cp).is_completed and tl.get(cp).action == "commit"
    assert ours(path) == before == _proj(hudi_judge.read(path))
    write([(3, 4, "u3"), (31, 4, "n31")])
    agree_v9(hudi_judge, path)


def _data_files(path) -> set[str]:
    return {str(f.relative_to(path)) for f in pathlib.Path(path).rglob("*.parquet") if ".hoodie" not in f.parts}


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_hudi_reads_and_extends_our_upgraded_tables(hudi_judge, tmp_path, table_type):
    """A version-6 table we wrote (a clustering; MOR: a pending compaction), upgraded to 9 by `hudilite
    upgrade`: Apache Hudi reads it as we do (instants converted with their completion times), writes on it,
    and we read its commit."""
    path = str(tmp_path / table_type.lower())

    def write(rows, op="upsert"):
        return hudilite.write(_arrow(rows), path, **LAYOUT, operation=op, table_type=table_type, options=V6)

    write([(i, 1, f"n{i}") for i in range(12)], "insert")
    write([(1, 2, "u1"), (2, 2, "u2"), (20, 1, "n20")])
    t = Table(path)
    assert t.services.cluster(sort_columns=["name"])
    write([(3, 3, None), (4, 3, None)], "delete")
    if table_type == "MERGE_ON_READ":
        assert schedule_compaction(path, None, force=True)
    assert t.info().properties["hoodie.table.version"] == "6"
    assert t.upgrade() is True
    assert t.info().properties["hoodie.table.version"] == "9"
    agree_v9(hudi_judge, path)
    hudi_judge.write(path, DDL, _dicts([(5, 9, "h5"), (30, 9, "h30")]),
                     **{**hudi_opts(table_type, "upsert"), **V9, "hoodie.table.name": table_type.lower()})
    assert _proj(hudi_judge.read(path)) == ours(path)
    assert {r[0] for r in ours(path)} >= {5, 30}


def test_hudi_reads_our_upgraded_table_with_an_archive(hudi_judge, tmp_path):
    """A version-6 table with archived instants: its archive becomes the LSM history; Apache Hudi reads the
    upgraded table (snapshot, time travel and incremental over the active instants) and writes on it."""
    path = str(tmp_path / "archived")
    hudilite.write(_arrow([(i, 1, f"n{i}") for i in range(12)]), path, **LAYOUT, operation="insert",
                   table_type="COPY_ON_WRITE", options=V6)
    for v in range(2, 7):
        hudilite.write(_arrow([(v, v, f"u{v}")]), path, **LAYOUT)
    t = Table(path)
    opts = {"hoodie.keep.min.commits": "2", "hoodie.keep.max.commits": "3", "hoodie.cleaner.commits.retained": "1"}
    t.services.clean(opts)
    assert t.services.archive(opts)
    assert t.upgrade() is True and Table(path).timeline.archived.completed_write_times
    assert _proj(hudi_judge.read(path)) == ours(path)
    last = Table(path).timeline.completed()[-1]
    assert _proj(hudi_judge.as_of(path, last.timestamp)) == ours(path, as_of=last.timestamp)
    hudi_judge.write(path, DDL, _dicts([(5, 9, "h5"), (30, 9, "h30")]),
                     **{**hudi_opts("COPY_ON_WRITE", "upsert"), **V9, "hoodie.table.name": "archived"})
    assert _proj(hudi_judge.read(path)) == ours(path)
    assert {r[0] for r in ours(path)} >= {5, 30}


def test_hudi_reads_our_nbcc_table(hudi_judge, tmp_path):
    """Non-blocking concurrency control: deltacommits that overlapped in time appended logs to the same file
    groups and completed out of their instants' order (one across a compaction plan); Apache Hudi's snapshot
    is ours: the greatest ordering value per key, whichever commit completed last."""
    path = str(tmp_path / "nbcc")
    nbcc = {**V9, "hoodie.write.concurrency.mode": "non_blocking_concurrency_control"}

    def write(rows, **kw):
        return hudilite.write(_arrow(rows), path, **LAYOUT, table_type="MERGE_ON_READ", options=nbcc, **kw)

    write([(i, 1, f"n{i}") for i in range(8)], operation="insert")
    a = write([(1, 9, "a1"), (2, 3, "a2"), (3, 5, "a3")], commit=False)
    b = write([(1, 4, "b1"), (2, 6, "b2"), (4, 7, "b4")], commit=False)
    c_at = write([(3, 8, "c3"), (2, 5, "c2")])
    b.complete()
    c = schedule_compaction(path, nbcc, force=True)
    a.complete()  # completes after the plan: its logs start the compaction's slice
    expect = [(0, 1, "n0"), (1, 9, "a1"), (2, 6, "b2"), (3, 8, "c3"), (4, 7, "b4"), (5, 1, "n5"), (6, 1, "n6"),
              (7, 1, "n7")]
    assert ours(path) == expect
    assert _proj(hudi_judge.read(path)) == expect, "snapshot with a pending compaction"
    # time travel at each completed instant and incremental ranges between consecutive completion times, with
    # deltacommits that completed out of their instants' order. Ranges with `a` (completed last, its logs in
    # the compaction's slice) are where Apache Hudi 1.2 answers otherwise (docs/concurrency.md, "Apache Hudi as
    # the judge"): while the compaction is pending it reads none of `a`'s logs; once it completed, it returns
    # records `a` wrote that lose on the ordering field to b2 and c3, committed before the range; ours: the
    # rows whose latest value the range wrote
    tl = Table(path).timeline
    done = {i.timestamp: tl.completion_time(i) for i in tl.completed()}
    a_range = (done[b.instant_time], done[a.instant_time])
    whole = (min(done.values()), max(done.values()))
    assert ours(path, begin=a_range[0], end=a_range[1]) == [(1, 9, "a1")]
    assert ours(path, begin=whole[0], end=whole[1]) == [(1, 9, "a1"), (2, 6, "b2"), (3, 8, "c3"), (4, 7, "b4")]
    agree_v9(hudi_judge, path, {a_range: [], whole: [(1, 4, "b1"), (2, 6, "b2"), (3, 8, "c3"), (4, 7, "b4")]},
             by_completion=True)
    assert run_compaction(path, nbcc) == [c]
    assert _proj(hudi_judge.read(path)) == ours(path) == expect, "snapshot after the compaction"
    assert ours(path, begin=a_range[0], end=a_range[1]) == [(1, 9, "a1")]
    agree_v9(hudi_judge, path, {a_range: [(1, 9, "a1"), (2, 3, "a2"), (3, 5, "a3")]}, by_completion=True)
    # (c's completion, the compaction's]: c3 (committed before) is key 3's value at the range's end, a3 lost
    # to it; Apache Hudi leaves the base record c3 out by its commit time and returns a3
    after = Table(path).timeline
    c_to_end = (done[str(c_at)], after.completion_time(after.completed(("commit",))[-1]))
    assert ours(path, begin=c_to_end[0], end=c_to_end[1]) == [(1, 9, "a1"), (2, 6, "b2"), (4, 7, "b4")]
    assert _proj(hudi_judge.incremental(path, *c_to_end)) == [(1, 9, "a1"), (2, 6, "b2"), (3, 5, "a3"), (4, 7, "b4")]


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_hudi_reads_a_long_widened_to_double_as_we_do(hudi_judge, tmp_path, table_type):
    """A long column widened to double while partition q keeps its long base file: Apache Hudi reads the old file's
    2**53 + 1 as 2**53, as hudilite's readers do (tests/compat/test_number_widening.py). (Apache Hudi 1.2 refuses
    the same widening inside a struct in its vectorized reader; hudilite and hudi-rs read it.)"""
    path = str(tmp_path / table_type)
    kw = dict(record_key="id", precombine_field="v", partition_by="pt", table_type=table_type)
    hudilite.write(pa.table({"id": [1, 2], "v": [1, 1], "a": pa.array([5, 2**53 + 1], pa.int64()), "pt": ["p", "q"]}),
                   path, **kw)
    hudilite.write(pa.table({"id": [1], "v": [2], "a": [1.5], "pt": ["p"]}), path, **kw)
    want = [{"id": 1, "v": 2, "a": 1.5, "pt": "p"}, {"id": 2, "v": 1, "a": float(2**53), "pt": "q"}]
    assert sorted(hudi_judge.read(path), key=lambda r: r["id"]) == want
    plan = plan_read(path)  # the per-slice merge hudilite's Spark read runs, here in-process
    ours = pa.concat_tables([merge_slice(SliceDesc.of(s), plan.merge_spec()) for s in plan.slices])
    assert sorted(ours.select(["id", "v", "a", "pt"]).to_pylist(), key=lambda r: r["id"]) == want
