"""Archival of version-9 tables into the LSM timeline history (driver-local writes, no Spark): reads before and
after archival agree (ours and hudi-rs), the history's levels compact, and a crash at any storage step of an
archival leaves a table that reads the same and that the next archival finishes."""

from __future__ import annotations

import os
import shutil

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from hudilite import Table
from hudilite.api import RollbackRefusedError
from hudilite.change_images import CHANGE_OP
from hudilite.errors import RangeUnavailableError
from hudilite.reader.group_changes import CANDIDATES, ChangeContext, GroupTask, classify, images, resolve
from hudilite.reader.merge import SliceDesc, merge_slice, to_spark_arrow
from hudilite.reader.planner import ReadPlan, plan_read, table_schema
from hudilite.reader.ranges import check_after, check_before, replaced_upto, resolve_range, slices_at, touched
from hudilite.services import archival
from hudilite.storage.local import LocalStorage
from hudilite.table import HoodieTable
from hudilite.timeline import lsm
from hudilite.timeline.timeline import _ARCHIVE_CACHE
from hudilite.writer import client
from tests.hudi_rs import read_hudi_rs

LAYOUT = dict(record_key="id", precombine_field="v", partition_by=("p",))
OPTS = {"hoodie.keep.min.commits": "2", "hoodie.keep.max.commits": "3", "hoodie.timeline.compaction.batch.size": "2"}
V9 = {"hoodie.write.table.version": "9"}


def _write(path, n, table_type):
    ids = [n % 4, 10 + n]  # an update of an older key and a new key per commit
    rows = pa.table({"id": pa.array(ids, pa.int64()), "p": pa.array([f"p{i % 2}" for i in ids]),
                     "v": pa.array([n] * len(ids), pa.int64())})
    client.write(rows, path, operation="upsert", table_type=table_type, options=V9, **LAYOUT)


def _rs(path, **kw):
    t = read_hudi_rs(path, **kw)
    return [] if t is None else sorted((r["id"], r["v"], r["_hoodie_commit_time"]) for r in t.to_pylist())


def _completions(path):
    """instant -> completion time of every completed write, active and archived."""
    tl = HoodieTable.open(path).timeline
    out = dict(tl.archived.completion_times)
    out.update({i.timestamp: tl.completion_time(i) for i in tl.completed()})
    return out


def _ours(path, as_of):
    """Our time travel: the planned slices (files), and for slices without logs their rows."""
    plan = plan_read(path, as_of=as_of)
    rows = sorted((r["id"], r["v"]) for f in plan.plain_files for r in pq.read_table(f).to_pylist())
    return sorted(tuple(os.path.relpath(f, path) for f in s.files) for s in plan.slices), rows


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_archival_keeps_every_read(tmp_path, table_type):
    path = str(tmp_path / "t")
    _ARCHIVE_CACHE.clear()
    expect, done = {}, {}
    runs = 0
    for n in range(10):
        _write(path, n, table_type)
        tl = HoodieTable.open(path).timeline
        for i in tl.completed():  # reads of every instant while it is still active
            expect.setdefault(("as_of", i.timestamp), _rs(path, as_of=i.timestamp))
            if table_type == "COPY_ON_WRITE":
                expect.setdefault(("ours", i.timestamp), _ours(path, tl.completion_time(i)))
        done = _completions(path)
        c = sorted(done.values())
        # hudi-rs reads only the active timeline, so its change reads are compared on the active range (the
        # archived range is Apache Hudi's to judge: tests/judge/test_apache_hudi_lsm.py)
        snap, inc = _rs(path), _rs(path, begin=c[-2], end=c[-1]) if len(c) > 1 else None
        runs += bool(archival.archive(path, OPTS))
        assert _rs(path) == snap and _completions(path) == done
        assert inc is None or _rs(path, begin=c[-2], end=c[-1]) == inc
    assert runs >= 4
    tl = HoodieTable.open(path).timeline
    archived = sorted(tl.archived.completed_write_times)
    assert len(tl.completed()) == 2 and len(archived) == 8 and not set(archived) & tl.all_times
    assert _completions(path) == done
    for (kind, t), want in expect.items():
        got = _rs(path, as_of=t) if kind == "as_of" else _ours(path, t)
        assert got == want, f"{kind} {t}"
    # the history compacted its levels (batch 2) and cleaned what no kept snapshot names
    hd = lsm.history_dir(tl.meta_dir)
    live = [n for n, _ in lsm.read_manifest(hd, lsm.latest_version(hd))]
    assert any(n.endswith("_1.parquet") or n.endswith("_2.parquet") for n in live)
    assert [r.instant_time for r in lsm.read_records(hd)] == archived
    assert len(lsm.manifest_versions(hd)) <= 3
    assert [i.timestamp for i in resolve_range(HoodieTable.open(path), c[-2], completion_bounds=True).in_range] \
        == [tl.completed()[-1].timestamp]
    # file and rollback resolution of archived instants: their files count as committed; a time between two
    # of them that the history does not record (a failed write's leftovers) does not; no rollback of them
    assert all(tl.is_visible_file_instant(t) for t in archived)
    stray = str(int(archived[1]) + 1)
    assert archived[1] < stray < archived[2] and stray not in tl.known_times
    assert not tl.is_visible_file_instant(stray)
    with pytest.raises(RollbackRefusedError):
        Table(path).services.rollback_instant(archived[3])
    # change and incremental reads over the history (Apache Hudi 1.x reads them; tests/judge/ compares with it)
    # equal the oracle while the archived writes' files exist; a cleaned one is named in the refusal
    c = sorted(done.values())
    for i, j in ((0, 9), (2, 5), (5, 6), (6, 8), (7, 8), (8, 9)):
        assert _incremental(path, c[i], c[j]) == _oracle_incremental(i, j), f"incremental ({i}, {j}]"
        assert _local_changes(path, c[i], c[j]) == _oracle_changes(i, j), f"changes ({i}, {j}]"
    order = sorted(done, key=done.get)
    md = tl.archived.completed_metadata(order[3])
    gone = next(st["path"] for stats in md["partitionToWriteStats"].values() for st in stats)
    os.remove(os.path.join(path, gone))
    for read in (_incremental, _local_changes):
        with pytest.raises(RangeUnavailableError, match=os.path.basename(gone)):
            read(path, c[2], c[3])
    assert _incremental(path, c[7], c[9]) == _oracle_incremental(7, 9)


def _ids(n):
    return [n % 4, 10 + n]  # as _write


def _oracle_incremental(i, j):
    """Apache Hudi's incremental rows of (completion of write i, of write j]: the latest image (as of j) of
    every record whose latest write as of j is in the range (writes complete in order, write n sets v=n)."""
    last = {k: n for n in range(j + 1) for k in _ids(n)}
    return sorted((k, n) for k, n in last.items() if n > i)


def _oracle_changes(i, j):
    first = {}
    for n in range(j + 1):
        for k in _ids(n):
            first.setdefault(k, n)
    return sorted((k, n, "I" if first[k] > i else "U") for k, n in _oracle_incremental(i, j))


def _incremental(path, begin, end):
    plan = plan_read(path, begin=begin, end=end, completion_bounds=True)
    spec = plan.merge_spec()
    rows = [r for s in plan.slices for r in merge_slice(SliceDesc.of(s), spec).to_pylist()]
    return sorted((r["id"], r["v"]) for r in rows)


def _local_changes(path, begin, end):
    """hudilite.changes without Spark: the per-group tasks spark/changes.py runs, run here in order."""
    table = HoodieTable.open(path)
    rng = resolve_range(table, begin, end, completion_bounds=True)
    t = touched(rng)
    after = slices_at(table, t.groups, rng.visible(rng.end), replaced_upto(rng, rng.end))
    check_after(rng, t, after)
    before = slices_at(table, t.groups | t.replaced, rng.visible(rng.begin), replaced_upto(rng, rng.begin))
    check_before(rng, t, before)
    schema = table_schema(table)
    ctx = ChangeContext(tuple(rng.instant_times),
                        ReadPlan(table, schema, [], "snapshot", visible=rng.visible(rng.end)).merge_spec(),
                        ReadPlan(table, schema, [], "snapshot", visible=rng.visible(rng.begin)).merge_spec(), False)
    tasks = [GroupTask(n, g[0], g[1], SliceDesc.of(after[g]) if g in after else None,
                       SliceDesc.of(before[g]) if g in before else None, deletes=True, present=False)
             for n, g in enumerate(sorted(t.groups & (set(after) | set(before))))]
    picks = resolve(pa.concat_tables([classify(x, ctx) for x in tasks]).cast(CANDIDATES),
                    [x.partition for x in tasks], include_deletes=True, before_image=False, by_key=False)
    out = pa.schema(list(to_spark_arrow(schema)) + [pa.field(CHANGE_OP, pa.string())])
    rows = []
    for x in tasks:
        mine = picks.filter(pa.compute.equal(picks.column("grp"), x.grp)).select(["kind", "pos"])
        rows += images(x, ctx, mine, out).to_pylist()
    return sorted((r["id"], r["v"], r[CHANGE_OP]) for r in rows)


class Crash(Exception):
    pass


def test_crash_at_every_step_of_an_archival(tmp_path, monkeypatch):
    """Kill the archival at its k-th storage mutation (history file, manifests, version file, compaction,
    cleanup, instant file deletions) for every k: the table reads as before, every instant is completed once
    (active or archived, never pending), and the next archival finishes to the uninterrupted result."""
    src = str(tmp_path / "src")
    for n in range(7):
        _write(src, n, "COPY_ON_WRITE")
    tl = HoodieTable.open(src).timeline
    writes = [i.timestamp for i in tl.completed()]
    before = _completions(src)
    reads = {t: _ours(src, t) for t in writes}
    # earlier archivals, so this one also appends to, compacts (batch 2, two levels) and cleans a history
    for keep, done in (("6", writes[:1]), ("5", writes[1:2]), ("4", writes[2:3])):
        assert archival.archive(src, {**OPTS, "hoodie.keep.max.commits": keep, "hoodie.keep.min.commits": keep}) \
            == done
    ops = ("put_if_absent", "write_bytes", "delete", "delete_tree")
    k, crashed = 0, True
    while crashed:
        path = str(tmp_path / f"k{k}")
        shutil.copytree(src, path)
        _ARCHIVE_CACHE.clear()
        count = [0]
        with monkeypatch.context() as m:
            for name in ops:
                def fail(self, *a, _orig=getattr(LocalStorage, name), **kw):
                    if count[0] == k and a and str(a[0]).startswith(path):
                        raise Crash(f"crash at step {k}")
                    count[0] += bool(a and str(a[0]).startswith(path))
                    return _orig(self, *a, **kw)
                m.setattr(LocalStorage, name, fail)
            try:
                archival.archive(path, OPTS)
                crashed = False
            except Crash:
                pass
        tl = HoodieTable.open(path).timeline
        assert not tl.pending(), f"step {k}: an instant looks pending"
        assert _completions(path) == before, f"step {k}"
        assert {t: _ours(path, t) for t in writes} == reads, f"step {k}"
        archival.archive(path, OPTS)  # finishes (or, past the last step, finds nothing to do)
        tl = HoodieTable.open(path).timeline
        hd = lsm.history_dir(tl.meta_dir)
        assert [i.timestamp for i in tl.completed()] == writes[-2:], f"step {k}"
        assert [r.instant_time for r in lsm.read_records(hd)] == writes[:-2], f"step {k}"
        assert _completions(path) == before and {t: _ours(path, t) for t in writes} == reads, f"step {k}"
        live = {n for n, _ in lsm.read_manifest(hd, lsm.latest_version(hd))}
        versions = lsm.manifest_versions(hd)
        named = set().union(*({n for n, _ in lsm.read_manifest(hd, v)} for v in versions))
        assert live <= named and {n for n in os.listdir(hd) if n.endswith(".parquet")} == named, f"step {k}"
        k += 1
    assert k > 8  # the archival has that many steps
