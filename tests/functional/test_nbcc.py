"""Non-blocking concurrency control (`hoodie.write.concurrency.mode=non_blocking_concurrency_control`) on a
merge-on-read version-9 table: 4 processes upsert overlapping keys into the same file groups and all commit,
while a compaction is scheduled and run; the snapshot (ours, hudi-rs, before and after compaction) is the
per-key max-ordering-value oracle, whatever order the commits completed in; change reads list every commit
once; concurrent inserts of one new key never duplicate it; COW and version-6 tables refuse the mode.

Writes are Arrow (no Spark); reads are the per-slice merge the Spark read runs, driven in-process, and hudi-rs."""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
import random
import time

import pyarrow as pa
import pytest

import hudilite
from hudilite.errors import CommitConflictError, InvalidWriteError
from hudilite.reader.merge import SliceDesc, merge_slice
from hudilite.reader.planner import plan_read
from hudilite.services.clustering import schedule_clustering
from hudilite.services.compaction import run_compaction, schedule_compaction
from hudilite.table import HoodieTable

hudi = pytest.importorskip("hudi")
from tests.hudi_rs import read_hudi_rs  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")

LAYOUT = dict(record_key="id", precombine_field="ts", partition_by="region")
V9 = {"hoodie.write.table.version": "9", "hoodie.write.fsync": "false"}
NBCC = {**V9, "hoodie.write.concurrency.mode": "non_blocking_concurrency_control"}
COLS = ["id", "ts", "name", "region"]
KEYS = 40  # existing keys, in 2 partitions; every writer upserts half of them each round
SPAWN = mp.get_context("spawn")


def _arrow(rows) -> pa.Table:
    """rows: (id, ts, name)."""
    return pa.table({"id": pa.array([r[0] for r in rows], pa.int64()), "ts": pa.array([r[1] for r in rows], pa.int64()),
                     "name": pa.array([r[2] for r in rows], pa.string()),
                     "region": pa.array(["eu" if r[0] % 2 else "us" for r in rows], pa.string())})


def _merged(path, **kw) -> pa.Table | None:
    plan = plan_read(path, **kw)
    spec = plan.merge_spec()
    parts = [merge_slice(SliceDesc.of(s), spec) for s in plan.slices]
    return pa.concat_tables(parts) if parts else None


def _rows(tbl) -> list[tuple]:
    return [] if tbl is None else sorted((r["id"], r["ts"], r["name"]) for r in tbl.select(COLS[:3]).to_pylist())


def _oracle(*batches) -> list[tuple]:
    """The record with the greatest ordering value per key (the values are unique per key)."""
    best: dict[int, tuple] = {}
    for rows in batches:
        for r in rows:
            if r[0] not in best or r[1] > best[r[0]][1]:
                best[r[0]] = r
    return sorted(best.values())


def _writer(path: str, w: int, rounds: int, seed: int, keys: list[int], out) -> None:
    """One writer process: `rounds` upserts of a random half of `keys`, ordering values unique per (writer,
    round) and random in magnitude (so the winner of a key is unrelated to commit order). A conflict is retried
    (only inserts of new keys may conflict under NBCC) and counted."""
    rng = random.Random(seed)
    written, conflicts = [], 0
    for r in range(rounds):
        rows = [(k, rng.randrange(1, 10**6) * 64 + r * 4 + w, f"w{w}r{r}") for k in rng.sample(keys, len(keys) // 2)]
        for _ in range(20):
            try:
                res = hudilite.write(_arrow(rows), path, **LAYOUT, options=NBCC)
                break
            except CommitConflictError:
                conflicts += 1
        else:
            raise AssertionError("20 conflicts in a row")
        written.append((str(res), rows))  # a WriteResult is its instant time
    out.put((w, written, conflicts))


def _run_writers(path: str, keys: list[int], rounds: int, seed: int, during=None) -> tuple[list, int]:
    q = SPAWN.Queue()
    procs = [SPAWN.Process(target=_writer, args=(path, w, rounds, seed * 10 + w, keys, q)) for w in range(4)]
    for p in procs:
        p.start()
    if during is not None:
        during()
    results, deadline = [], time.time() + 300
    while len(results) < len(procs):
        try:
            results.append(q.get(timeout=1))
        except queue.Empty:
            assert time.time() < deadline, "writers timed out"
            dead = [p.exitcode for p in procs if p.exitcode not in (None, 0)]
            assert not dead, f"a writer failed (exit codes {dead})"
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    return [x for _, wr, _ in results for x in wr], sum(c for _, _, c in results)


def _check_changes(path: str, writes: dict) -> None:
    """Incremental reads of each commit's completion range return only records of that commit, each key at most
    once (a key a later commit outranks still shows in its range: the range's state as of its end); the read
    of the whole history holds the winners, and each shows in its own commit's range. (hudi-rs' incremental
    reads of commits that completed out of their instants' order differ where a compaction intervened -
    docs/concurrency.md, "hudi-rs and out-of-order commits", pinned below - so they are not compared here.)"""
    tl = HoodieTable.open(path).timeline
    done = sorted(tl.completed(), key=tl.completion_time)  # writers completed out of their instants' order
    seen = []
    for prev, inst in zip(done, done[1:]):
        b, e = tl.completion_time(prev), tl.completion_time(inst)
        got = _merged(path, begin=b, end=e, completion_bounds=True)
        if got is None:
            continue
        assert set(got.column("_hoodie_commit_time").to_pylist()) <= {inst.timestamp}
        ids = got.column("id").to_pylist()
        assert len(ids) == len(set(ids))
        seen.extend(ids)
    first = _merged(path, begin=tl.completion_time(done[0]), end=tl.completion_time(done[-1]),
                    completion_bounds=True)
    latest = dict(zip(first.column("id").to_pylist(), first.column("_hoodie_commit_time").to_pylist()))
    assert set(latest.values()) <= set(writes)  # the snapshot's winners, each from the range of its commit
    assert set(latest) <= set(seen)


def test_four_nbcc_writers_and_a_compaction(tmp_path):
    path = str(tmp_path / "t")
    seed = int(os.environ.get("HUDILITE_NBCC_SEED", "7"))
    initial = [(k, 0, "init") for k in range(KEYS)]
    hudilite.write(_arrow(initial), path, **LAYOUT, operation="insert", table_type="MERGE_ON_READ", options=NBCC)
    groups = {sl.file_id for sl in HoodieTable.open(path).view().latest_slices(["eu", "us"])}
    compactions = []

    def compact_meanwhile():  # scheduled and run while the writers append to the groups it compacts
        deadline = time.time() + 60
        while time.time() < deadline and not compactions:
            time.sleep(0.5)
            c = schedule_compaction(path, NBCC, force=True)
            if c:
                assert run_compaction(path, NBCC, instant=c) == [c]
                compactions.append(c)

    writes, conflicts = _run_writers(path, list(range(KEYS)), 3, seed, compact_meanwhile)
    assert conflicts == 0  # upserts of existing keys never conflict under NBCC
    assert compactions
    tl = HoodieTable.open(path).timeline
    done = {i.timestamp for i in tl.completed()}
    assert all(t in done for t, _ in writes) and len(writes) == 12
    # the writers really shared file groups: no new group, each group got logs from several writers
    assert {sl.file_id for sl in HoodieTable.open(path).view().latest_slices(["eu", "us"])} == groups
    expect = _oracle(initial, *[rows for _, rows in writes])
    assert _rows(_merged(path)) == expect == _rows(read_hudi_rs(path))
    _check_changes(path, dict(writes))
    c = schedule_compaction(path, NBCC, force=True)
    assert run_compaction(path, NBCC, instant=c) == [c]
    assert _rows(_merged(path)) == expect == _rows(read_hudi_rs(path))


def test_concurrent_inserts_of_one_new_key(tmp_path):
    """4 processes insert the same new keys (no bucket index pins a key to a file group): one insert per key
    wins, the others conflict and their retries update it. Deterministic: a pending insert conflicts with an
    insert of the same key that completed meanwhile, not with one of other keys."""
    path = str(tmp_path / "t")
    hudilite.write(_arrow([(k, 0, "init") for k in range(4)]), path, **LAYOUT, operation="insert",
                   table_type="MERGE_ON_READ", options=NBCC)
    slow = hudilite.write(_arrow([(100, 5, "slow"), (2, 5, "slow")]), path, **LAYOUT, options=NBCC, commit=False)
    hudilite.write(_arrow([(101, 1, "other"), (2, 4, "other")]), path, **LAYOUT, options=NBCC)  # no shared new key
    hudilite.write(_arrow([(100, 7, "fast")]), path, **LAYOUT, options=NBCC)
    with pytest.raises(CommitConflictError, match="inserting the same new keys"):
        slow.complete()
    hudilite.write(_arrow([(100, 5, "slow"), (2, 5, "slow")]), path, **LAYOUT, options=NBCC)  # the retry
    assert _rows(_merged(path)) == [(0, 0, "init"), (1, 0, "init"), (2, 5, "slow"), (3, 0, "init"),
                                    (100, 7, "fast"), (101, 1, "other")] == _rows(read_hudi_rs(path))

    new = list(range(200, 216))
    writes, conflicts = _run_writers(path, new, 2, 3)
    ids = _merged(path).column("id").to_pylist()
    assert len(ids) == len(set(ids))
    expect = _oracle([(0, 0, "init"), (1, 0, "init"), (2, 5, "slow"), (3, 0, "init"), (100, 7, "fast"),
                      (101, 1, "other")], *[rows for _, rows in writes])
    assert _rows(_merged(path)) == expect == _rows(read_hudi_rs(path))


def test_nbcc_vs_occ_on_a_shared_file_group(tmp_path):
    """A pending upsert and a concurrent upsert of the same key: under NBCC both commit and the greater ordering
    value wins whichever completed last; under OCC the later one conflicts; a clustering plan conflicts with
    NBCC writers too."""
    path = str(tmp_path / "t")
    hudilite.write(_arrow([(1, 0, "init"), (3, 0, "init")]), path, **LAYOUT, operation="insert",
                   table_type="MERGE_ON_READ", options=NBCC)
    slow = hudilite.write(_arrow([(1, 9, "slow")]), path, **LAYOUT, options=NBCC, commit=False)
    hudilite.write(_arrow([(1, 3, "fast")]), path, **LAYOUT, options=NBCC)
    slow.complete()
    assert _rows(_merged(path)) == [(1, 9, "slow"), (3, 0, "init")] == _rows(read_hudi_rs(path))
    slow = hudilite.write(_arrow([(1, 10, "slow")]), path, **LAYOUT, options=NBCC, commit=False)
    hudilite.write(_arrow([(1, 11, "fast")]), path, **LAYOUT, options=NBCC)
    slow.complete()  # completes last, loses by its ordering value
    assert _rows(_merged(path)) == [(1, 11, "fast"), (3, 0, "init")] == _rows(read_hudi_rs(path))
    slow = hudilite.write(_arrow([(1, 12, "occ")]), path, **LAYOUT, options=V9, commit=False)
    hudilite.write(_arrow([(1, 13, "occ2")]), path, **LAYOUT, options=V9)
    with pytest.raises(CommitConflictError):
        slow.complete()
    # clustering still conflicts (as in Apache Hudi): a plan covering the group aborts the NBCC writer
    slow = hudilite.write(_arrow([(1, 14, "slow")]), path, **LAYOUT, options=NBCC, commit=False)
    assert schedule_clustering(path, {**NBCC, "hoodie.clustering.plan.strategy.sort.columns": "name"})
    with pytest.raises(CommitConflictError, match="pending clustering plan"):
        slow.complete()


def test_time_travel_same_before_and_after_the_compaction(tmp_path):
    """A deltacommit requested first but completed after a compaction was planned has its logs in the
    compaction's slice: as of any instant before the plan it is not in the table, whether the compaction is
    still pending or completed (Apache Hudi 1.2 answers so too: tests/judge, docs/concurrency.md)."""
    path = str(tmp_path / "t")

    def write(rows, **kw):
        return hudilite.write(_arrow(rows), path, **LAYOUT, table_type="MERGE_ON_READ", options=NBCC, **kw)

    write([(i, 1, f"n{i}") for i in range(4)], operation="insert")
    a = write([(1, 9, "a1"), (2, 3, "a2")], commit=False)
    write([(1, 4, "b1"), (3, 6, "b3")])
    plan = schedule_compaction(path, NBCC, force=True)
    a.complete()
    tl = HoodieTable.open(path).timeline
    times = sorted({i.timestamp for i in tl.completed()} | {tl.completion_time(i) for i in tl.completed()})
    pending = {t: _rows(_merged(path, as_of=t)) for t in times}
    # a1's group (eu, with b's logs) is in the plan; a2's (us, no logs before) is not: a2 is in its old slice
    assert pending[a.instant_time] == [(0, 1, "n0"), (1, 1, "n1"), (2, 3, "a2"), (3, 1, "n3")]
    assert pending[max(times)] == _rows(_merged(path)) == [(0, 1, "n0"), (1, 9, "a1"), (2, 3, "a2"), (3, 6, "b3")]
    assert run_compaction(path, NBCC) == [plan]
    assert {t: _rows(_merged(path, as_of=t)) for t in times} == pending


def _listing(path):
    return sorted(os.path.relpath(os.path.join(d, f), path) for d, _, fs in os.walk(path) for f in fs
                  if ".locks" not in d and ".heartbeat" not in d)


@pytest.mark.parametrize("table_type,version", [("COPY_ON_WRITE", "9"), ("MERGE_ON_READ", "6")])
def test_nbcc_refused_on_cow_and_v6(tmp_path, table_type, version):
    path = str(tmp_path / "t")
    opts = {"hoodie.write.table.version": version}
    hudilite.write(_arrow([(1, 0, "a")]), path, **LAYOUT, operation="insert", table_type=table_type, options=opts)
    before = _listing(path)
    with pytest.raises(InvalidWriteError, match=f"non_blocking_concurrency_control needs a MERGE_ON_READ table of "
                                                f"version 8 or 9; this table is {table_type} version {version}"):
        hudilite.write(_arrow([(1, 1, "b")]), path, **LAYOUT,
                       options={**opts, "hoodie.write.concurrency.mode": "NON_BLOCKING_CONCURRENCY_CONTROL"})
    assert _listing(path) == before
    assert _rows(_merged(path)) == [(1, 0, "a")]
    new = str(tmp_path / "new")  # and a table the write would create
    with pytest.raises(InvalidWriteError, match="needs a MERGE_ON_READ table"):
        hudilite.write(_arrow([(1, 1, "b")]), new, **LAYOUT, table_type=table_type,
                       options={**opts, "hoodie.write.concurrency.mode": "non_blocking_concurrency_control"})
    assert not os.path.exists(new)



@pytest.mark.parametrize("case", ["no_compaction", "compaction_pending", "other_group_compacted", "compacted"])
def test_hudi_rs_per_commit_window_of_a_commit_completed_out_of_order(tmp_path, case):
    """Pins a hudi-rs 0.5 behaviour (docs/concurrency.md, "hudi-rs and out-of-order commits"). Deltacommit `a` is
    requested before `b` and `c` and completes after them, so its per-commit window is (b's completion, a's
    completion]. hudi-rs returns `a`'s change there as we do - unless `a`'s log landed in the slice of a
    compaction planned while `a` was in flight (a compaction of `a`'s file group, which holds `b`'s log) and that
    compaction has completed: then hudi-rs answers an empty window. Should hudi-rs change, this test fails and the
    doc must change with it."""
    path = str(tmp_path / "t")

    def write(rows, **kw):
        return hudilite.write(_arrow(rows), path, **LAYOUT, table_type="MERGE_ON_READ", options=NBCC, **kw)

    write([(i, 1, f"n{i}") for i in range(4)], operation="insert")
    a = write([(1, 5, "a1")], commit=False)
    # b in a's file group (keys 1 and 3 are both "eu"), except where the compacted group must be another one
    b = write([(2 if case == "other_group_compacted" else 3, 6, "b")], commit=False)
    write([(0, 7, "c0")])
    b.complete()
    if case != "no_compaction":
        assert schedule_compaction(path, NBCC, force=True)
    a.complete()
    if case in ("other_group_compacted", "compacted"):
        assert run_compaction(path, NBCC)
    tl = HoodieTable.open(path).timeline
    b_done, a_done = tl.completion_time(tl.get(b.instant_time)), tl.completion_time(tl.get(a.instant_time))
    assert a.instant_time < b.instant_time < b_done < a_done
    assert _rows(_merged(path, begin=b_done, end=a_done)) == [(1, 5, "a1")]
    assert _rows(read_hudi_rs(path, begin=b_done, end=a_done)) == ([] if case == "compacted" else [(1, 5, "a1")])
