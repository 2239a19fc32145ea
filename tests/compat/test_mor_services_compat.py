"""Compatibility suite for merge-on-read tables with table services: hudilite vs hudi-rs vs a model.

A MOR write sequence with upserts, deletes, a compaction scheduled before a write and executed after it
(logs of the compaction's slice), inserts into new small file groups, a sorted clustering, writes to the
clustered groups, an inline compaction and a clean. After every step, and again after the clean for the
retained instants, three answers are compared:
* hudilite (the Python merge reader the Spark read runs per slice; the Spark read itself for the final
  snapshot, a time travel and an incremental window),
* hudi-rs (`hudi` 0.5.0): snapshot, read-optimized, time travel at every instant, incremental windows,
* a model: per record key the latest (ts, name) as of each commit (ordering values increase per key, so event
  time and commit time agree); incremental = the snapshot at `end` restricted to records whose last change
  lies in (begin, end]. Read-optimized is checked against the model right after full compactions.
"""

from __future__ import annotations

import pyarrow as pa
import pytest

hudi = pytest.importorskip("hudi")
from tests.hudi_rs import read_hudi_rs  # noqa: E402

import hudilite  # noqa: E402
from hudilite.reader.merge import SliceDesc, merge_slice  # noqa: E402
from hudilite.reader.planner import plan_read  # noqa: E402
from hudilite.services.clean import run_clean  # noqa: E402
from hudilite.services.clustering import cluster  # noqa: E402
from hudilite.services.compaction import run_compaction, schedule_compaction  # noqa: E402
from hudilite.table import HoodieTable  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")

SCHEMA = "id long, ts long, name string, region string"
COLS = ("id", "ts", "name")


def _rows(t: pa.Table) -> list[tuple]:
    return sorted(tuple(r[c] for c in COLS) for r in t.select(list(COLS)).to_pylist())


def ours(path, **kw) -> list[tuple]:
    plan = plan_read(path, **kw)
    spec = plan.merge_spec()
    parts = [merge_slice(SliceDesc.of(s), spec) for s in plan.slices]
    return _rows(pa.concat_tables(parts)) if parts else []


def theirs(path, storage_options=None, **kw) -> list[tuple]:
    t = read_hudi_rs(path, storage_options=storage_options, **kw)
    return _rows(t) if t is not None else []

class Model:
    def __init__(self):
        self.state: dict[int, tuple] = {}  # id -> (ts, name, commit index of the last change)
        self.snaps: list[dict] = []

    def apply(self, rows, delete=False):
        for i, ts, name in rows:
            if delete:
                self.state.pop(i, None)
            else:
                self.state[i] = (ts, name, len(self.snaps))
        self.snaps.append(dict(self.state))

    def same(self):  # a service commit: data unchanged
        self.snaps.append(dict(self.state))

    def at(self, k) -> list[tuple]:
        return sorted((i, v[0], v[1]) for i, v in self.snaps[k].items())

    def incr(self, a, b) -> list[tuple]:
        return sorted((i, v[0], v[1]) for i, v in self.snaps[b].items() if a < v[2] <= b)


def _spark_rows(df) -> list[tuple]:
    return sorted(tuple(r) for r in df.select(*COLS).collect())


@pytest.mark.parametrize("block_format", ["avro", "parquet"])
def test_mor_with_services_reads_identically(spark, tmp_path, block_format):
    run_mor_with_services(spark, str(tmp_path / f"mor_{block_format}"), block_format)


def run_mor_with_services(spark, path, block_format, so=None):
    """The whole sequence on the table at `path`: a local directory, or an object store location with its
    storage options `so` (bound to the path for the services; hudi-rs reads through its own options)."""
    # table version 6: its log naming, hudi-rs's instant-time incremental bounds and its visibility rule below are
    # what this sequence checks; tests/compat/test_v9_compat.py runs the same sequence on version 9
    opts = {"hoodie.logfile.data.block.format": block_format, "hoodie.write.table.version": "6"}
    model = Model()
    commits: list[str] = []

    def write(rows, op="upsert", extra=None):
        df = spark.createDataFrame([(i, ts, n, "eu" if i % 2 else "us") for i, ts, n in rows], SCHEMA)
        c = hudilite.write(df, path, record_key="id", precombine_field="ts", partition_by="region",
                           operation=op, table_type="MERGE_ON_READ", options={**opts, **(extra or {})},
                           storage_options=so)
        model.apply(rows, delete=op == "delete")
        commits.append(str(c))
        return c

    def service_done(instants):
        for t in instants:
            commits.append(t)
            model.same()

    def check_now(ro_complete=False):
        k = len(commits) - 1
        assert ours(path) == theirs(path, so) == model.at(k), f"snapshot after step {k}"
        ro = ours(path, read_optimized=True)
        assert ro == theirs(path, so, read_optimized=True), f"read-optimized after step {k}"
        if ro_complete:
            assert ro == model.at(k)

    write([(i, 1, f"n{i}") for i in range(12)])
    check_now(ro_complete=True)
    write([(1, 2, "u1"), (2, 2, "u2"), (3, 2, "u3"), (20, 1, "n20"), (21, 1, "n21")])
    check_now()
    write([(4, 3, None), (5, 3, None)], op="delete")
    check_now()
    c = schedule_compaction(path, {"hoodie.compact.inline.max.delta.commits": "3"})
    assert c is not None
    write([(1, 4, "u1b"), (6, 4, "u6")])  # logs of the compaction's slice, read with the previous one
    k = len(commits) - 1
    assert ours(path) == model.at(k)
    # hudi-rs applies the format's visibility rule to log file names: a log named with the pending compaction
    # instant is invisible to it until the compaction completes (Java reads it; see docs/services.md)
    assert theirs(path, so) == model.at(k - 1)
    assert run_compaction(path) == [c]
    commits.insert(len(commits) - 1, c)  # the compaction's instant precedes the write above
    model.snaps.insert(len(model.snaps) - 1, dict(model.snaps[-2]))
    # the write's changes carry commit index len-1 in the model: re-stamp them after the insert
    for i in (1, 6):
        ts, n, _ = model.state[i]
        model.state[i] = (ts, n, len(model.snaps) - 1)
    model.snaps[-1] = dict(model.state)
    check_now()
    write([(i, 1, f"n{i}") for i in range(30, 34)], op="insert")  # new small file groups
    done = cluster(path, {"hoodie.clustering.plan.strategy.sort.columns": "name",
                          "hoodie.clustering.plan.strategy.small.file.limit": str(10 * 2 ** 20)})
    assert len(done) == 1
    service_done(done)
    check_now(ro_complete=False)
    write([(2, 5, "u2b"), (30, 5, "u30"), (7, 5, "u7")])  # updates of clustered groups
    check_now()
    write([(8, 6, None)], op="delete", extra={"hoodie.compact.inline": "true",
                                              "hoodie.compact.inline.max.delta.commits": "1"})
    tl = HoodieTable.open(path).timeline
    inline = [i.timestamp for i in tl.completed() if i.timestamp > commits[-1]]
    assert inline, "the inline compaction ran"
    service_done(inline)
    check_now(ro_complete=True)

    # time travel at every instant, incremental windows between consecutive instants and a long one
    for k, t in enumerate(commits):
        assert ours(path, as_of=t) == theirs(path, so, as_of=t) == model.at(k), f"as_of step {k} ({t})"
    ooo = commits.index(c)  # the compaction completed after the write that followed it was requested
    for a in range(len(commits) - 1):
        b = a + 1
        want = model.incr(a, b)
        assert theirs(path, so, begin=commits[a], end=commits[b]) == want, f"hudi-rs incremental ({a}, {b}]"
        if ooo not in (a, b):
            assert ours(path, begin=commits[a], end=commits[b]) == want, f"incremental ({a}, {b}]"
    # hudilite orders incremental ranges by completion (reader/changes.py), hudi-rs v6 by instant time: they
    # agree on every window that does not end or start at the compaction that completed out of order
    assert ours(path, begin=commits[ooo - 1], end=commits[ooo + 1]) == model.incr(ooo - 1, ooo + 1) \
        == theirs(path, so, begin=commits[ooo - 1], end=commits[ooo + 1])
    want = model.incr(0, len(commits) - 1)
    assert ours(path, begin=commits[0], end=commits[-1]) == theirs(path, so, begin=commits[0], end=commits[-1]) == want

    # the Spark read agrees
    assert _spark_rows(hudilite.read(spark, path, storage_options=so)) == model.at(len(commits) - 1)
    assert _spark_rows(hudilite.read(spark, path, as_of=commits[3], storage_options=so)) == model.at(3)

    # clean: every retained instant still reads the same in both readers
    retained = 4
    cleaned = run_clean(path, {"hoodie.cleaner.commits.retained": str(retained)})
    assert cleaned
    n = len(commits)
    for k in range(n - retained, n):
        assert ours(path, as_of=commits[k]) == theirs(path, so, as_of=commits[k]) == model.at(k), f"after clean {k}"
    for a in range(n - retained, n - 1):
        assert ours(path, begin=commits[a], end=commits[a + 1]) == theirs(path, so, begin=commits[a],
                                                                          end=commits[a + 1]) == model.incr(a, a + 1)
    assert ours(path) == theirs(path, so) == model.at(n - 1)
    assert ours(path, read_optimized=True) == theirs(path, so, read_optimized=True)
