"""Compatibility of the version-9 (and 8) tables we write: hudilite vs hudi-rs vs a model, merge-on-read with
services.

Upserts, deletes, a compaction scheduled while a deltacommit is in flight (which completes after the plan's
instant: its log starts the compaction's slice), new file groups, a clustering, updates of the clustered
groups, an inline compaction and a clean, Avro and Parquet log blocks. After every step the snapshot and the
read-optimized view; at the end time travel at every write and incremental ranges between consecutive
completion times (version 9 orders incremental reads by completion time, hudi-rs too), and from the beginning of
the table, against hudi-rs and a model kept in completion order. Arrow writes and the in-process merge reader: no
Spark jobs."""

from __future__ import annotations

import pyarrow as pa
import pytest

hudi = pytest.importorskip("hudi")
import hudilite  # noqa: E402
from hudilite.reader.merge import SliceDesc, merge_slice  # noqa: E402
from hudilite.reader.planner import plan_read  # noqa: E402
from hudilite.services.clean import run_clean  # noqa: E402
from hudilite.services.clustering import cluster  # noqa: E402
from hudilite.services.compaction import run_compaction, schedule_compaction  # noqa: E402
from hudilite.table import HoodieTable  # noqa: E402
from tests.hudi_rs import read_hudi_rs  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")

COLS = ("id", "ts", "name")


def _rows(t) -> list[tuple]:
    return sorted(tuple(r[c] for c in COLS) for r in t.select(list(COLS)).to_pylist()) if t is not None else []


def ours(path, **kw) -> list[tuple]:
    plan = plan_read(path, **kw)
    spec = plan.merge_spec()
    parts = [merge_slice(SliceDesc.of(s), spec) for s in plan.slices]
    return _rows(pa.concat_tables(parts)) if parts else []


def _arrow(rows) -> pa.Table:
    return pa.table({"id": pa.array([r[0] for r in rows], pa.int64()), "ts": pa.array([r[1] for r in rows], pa.int64()),
                     "name": pa.array([r[2] for r in rows], pa.string()),
                     "region": pa.array(["eu" if r[0] % 2 else "us" for r in rows], pa.string())})


@pytest.mark.parametrize("version, block_format", [(9, "avro"), (9, "parquet"), (8, "parquet")])
def test_v9_mor_with_services_reads_identically(tmp_path, version, block_format):
    path = str(tmp_path / f"mor{version}_{block_format}")
    opts = {"hoodie.write.table.version": str(version), "hoodie.logfile.data.block.format": block_format}
    state: dict[int, tuple] = {}
    snaps: dict[str, dict] = {}  # requested time of a completed write -> the rows after it (completion order)
    changed_by: dict[int, str] = {}  # record key -> the write that last changed it (requested time)

    def write(rows, op="upsert", extra=None, commit=True):
        c = hudilite.write(_arrow(rows), path, record_key="id", precombine_field="ts", partition_by="region",
                           operation=op, table_type="MERGE_ON_READ", options={**opts, **(extra or {})},
                           commit=commit)
        return c

    def applied(t, rows, delete=False):
        for i, ts, name in rows:
            if delete:
                state.pop(i, None)
            else:
                state[i] = (ts, name)
                changed_by[i] = str(t)
        snaps[str(t)] = (dict(state), dict(changed_by))

    def want(s) -> list[tuple]:
        return sorted((i, v[0], v[1]) for i, v in s.items())

    def want_incr(completed_at, b, e) -> list[tuple]:
        """The rows as of the last data write completed at or before `e` whose last change completed in
        (b, e] (`completed_at`: write requested time -> completion time; deletes are not emitted)."""
        writes = [t for t in snaps if completed_at[t] <= e]  # snaps is in completion order
        if not writes:
            return []
        rows, by = snaps[writes[-1]]
        return sorted((i, v[0], v[1]) for i, v in rows.items() if b < completed_at[by[i]] <= e)

    def check(ro_complete=False):
        assert ours(path) == _rows(read_hudi_rs(path)) == want(state)
        ro = ours(path, read_optimized=True)
        assert ro == _rows(read_hudi_rs(path, read_optimized=True))
        if ro_complete:
            assert ro == want(state)

    rows = [(i, 1, f"n{i}") for i in range(12)]
    applied(write(rows), rows)
    check(ro_complete=True)
    rows = [(1, 2, "u1"), (2, 2, "u2"), (3, 2, "u3"), (20, 1, "n20")]
    applied(write(rows), rows)
    rows = [(4, 3, None), (5, 3, None)]
    applied(write(rows, "delete"), rows, delete=True)
    check()
    slow_rows = [(1, 4, "u1b"), (6, 4, "u6")]
    slow = write(slow_rows, commit=False)
    c = schedule_compaction(path, {"hoodie.compact.inline.max.delta.commits": "2"})
    assert c is not None
    slow.complete()
    applied(slow.instant_time, slow_rows)
    check()
    assert run_compaction(path) == [c]
    check()
    rows = [(i, 1, f"n{i}") for i in range(30, 34)]
    applied(write(rows, "insert"), rows)
    done = cluster(path, {"hoodie.clustering.plan.strategy.sort.columns": "name",
                          "hoodie.clustering.plan.strategy.small.file.limit": str(10 * 2 ** 20)})
    assert len(done) == 1
    check()
    rows = [(2, 5, "u2b"), (30, 5, "u30"), (7, 5, "u7")]
    applied(write(rows), rows)
    rows = [(8, 6, None)]
    applied(write(rows, "delete", extra={"hoodie.compact.inline": "true",
                                         "hoodie.compact.inline.max.delta.commits": "1"}), rows, delete=True)
    check(ro_complete=True)

    tl = HoodieTable.open(path).timeline
    for t, (s, _) in snaps.items():
        got = ours(path, as_of=t)
        assert got == _rows(read_hudi_rs(path, as_of=t)), f"as of {t}"
        # time travel compares requested times: the slow deltacommit (requested before the compaction, completed
        # after it) is in the compaction's slice, which a time travel to its own requested time does not reach
        if t != slow.instant_time:
            assert got == want(s), f"as of {t}"
    for t in (c, *done):
        assert ours(path, as_of=t) == _rows(read_hudi_rs(path, as_of=t)), f"as of service {t}"
    done_at = [tl.completion_time(i) for i in tl.completed()]
    completed_at = {i.timestamp: tl.completion_time(i) for i in tl.completed()}
    assert list(snaps) == sorted(snaps, key=completed_at.get)
    slow_done = tl.completion_time(tl.get(slow.instant_time))
    for e in done_at:  # from the beginning of the table (hudi-rs needs a start: ours alone, against the model)
        assert ours(path, end=e, completion_bounds=True) == want_incr(completed_at, "", e), f"incremental (, {e}]"
    for b, e in list(zip(done_at, done_at[1:])) + [(done_at[0], done_at[-1])]:
        got = ours(path, begin=b, end=e)
        assert got == want_incr(completed_at, b, e), f"incremental ({b}, {e}] against the model"
        if e == slow_done:
            # the window of the slow deltacommit alone: its log sits in the compaction's slice, whose commit
            # completed after `e`; hudi-rs 0.5 then reads nothing of it (Apache Hudi reads it: tests/judge)
            assert got == sorted(slow_rows), f"incremental ({b}, {e}]"
            continue
        assert got == _rows(read_hudi_rs(path, begin=b, end=e)), f"incremental ({b}, {e}]"
    assert run_clean(path, {"hoodie.cleaner.commits.retained": "3"})
    check(ro_complete=True)
