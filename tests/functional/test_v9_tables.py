"""Writing table versions 8 and 9 (`hoodie.write.table.version`): hoodie.properties as Apache Hudi 1.x keys it,
the layout-2 timeline (`.hoodie/timeline/<req>_<completion>.<action>`, Avro metadata), merge-on-read log files
named by the writing deltacommit and sliced by completion time. After each step our snapshot, time travel and
change reads match a Python model, and hudi-rs reads the same.

Writes are Arrow (no Spark jobs); reads go through Spark (merge-on-read) and hudi-rs."""

from __future__ import annotations

import glob
import os

import fastavro
import pyarrow as pa
import pytest

import hudilite
from hudilite.config import TableConfig
from hudilite.log.format import parse_log_file_name
from hudilite.services.clean import run_clean
from hudilite.services.clustering import cluster
from hudilite.services.compaction import run_compaction, schedule_compaction
from hudilite.table import HoodieTable

hudi = pytest.importorskip("hudi")
from tests.hudi_rs import read_hudi_rs  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")

KEYS = dict(record_key="id", precombine_field="version", partition_by=("dt",))


def _batch(rows, deleted=()):
    """rows: (id, version, name, dt)."""
    ids, vers, names, dts = zip(*rows)
    return pa.table({"id": pa.array(ids, pa.int64()), "version": pa.array(vers, pa.int64()),
                     "name": pa.array(names, pa.string()), "dt": pa.array(dts, pa.string()),
                     "_hoodie_is_deleted": pa.array([i in deleted for i in ids], pa.bool_())})


class Model:
    """Event-time upserts, one commit at a time; `states[t]` the snapshot after the commit requested at t."""

    def __init__(self):
        self.cur: dict[int, tuple] = {}
        self.states: dict[str, dict] = {}

    def apply(self, t: str, rows, deleted=(), op="upsert"):
        if op == "insert_overwrite":
            parts = {r[3] for r in rows}
            self.cur = {k: v for k, v in self.cur.items() if v[2] not in parts}
        for i, ver, name, dt in rows:
            old = self.cur.get(i)
            if old is not None and ver < old[0] and op != "delete":
                continue
            if i in deleted or op == "delete":
                self.cur.pop(i, None)
            else:
                self.cur[i] = (ver, name, dt)
        self.states[t] = dict(self.cur)

    def same(self, t: str):
        self.states[t] = dict(self.cur)


def _rows(tbl) -> list[tuple]:
    if tbl is None:
        return []
    d = tbl.select(["id", "version", "name", "dt"]).to_pylist()
    return sorted((r["id"], r["version"], r["name"], r["dt"]) for r in d)


def _spark_rows(df) -> list[tuple]:
    rows = df.select("id", "version", "name", "dt").collect()
    return sorted((r["id"], r["version"], r["name"], r["dt"]) for r in rows)


def _expect(state: dict) -> list[tuple]:
    return sorted((i, v[0], v[1], v[2]) for i, v in state.items())


def _check(spark, path: str, model: Model, *, travel=True):
    """Snapshot (ours and hudi-rs), time travel at every completed write (ours and hudi-rs) and the change
    read of the newest commit (ours by completion time, and hudi-rs' incremental read)."""
    latest = max(model.states)
    assert _spark_rows(hudilite.read(spark, path)) == _expect(model.states[latest])
    assert _rows(read_hudi_rs(path)) == _expect(model.states[latest])
    if travel:
        for t, state in model.states.items():
            assert _spark_rows(hudilite.read(spark, path, as_of=t)) == _expect(state), t
            assert _rows(read_hudi_rs(path, as_of=t)) == _expect(state), t
    tl = HoodieTable.open(path).timeline
    writes = tl.completed()
    if len(writes) >= 2:
        prev, last = tl.completion_time(writes[-2]), tl.completion_time(writes[-1])
        ours = hudilite.changes(spark, path, prev, last, include_deletes=False, completion_bounds=True)
        theirs = read_hudi_rs(path, begin=prev, end=last)
        assert sorted(r["id"] for r in ours.select("id").collect()) == sorted(r[0] for r in _rows(theirs))


def _layout2_files(path: str) -> list[str]:
    tdir = os.path.join(path, ".hoodie", "timeline")
    names = sorted(os.listdir(tdir))
    assert not glob.glob(os.path.join(path, ".hoodie", "*.commit")) and \
        not glob.glob(os.path.join(path, ".hoodie", "*.deltacommit"))
    return names


def _completed(names, action):
    return [n for n in names if n.endswith("." + action) and "_" in n]


@pytest.mark.parametrize("version", [9, 8])
def test_cow_v9_writes_services_and_reads(spark, tmp_path, version):
    path = str(tmp_path / f"cow{version}")
    opts = {"hoodie.write.table.version": str(version), "hoodie.parquet.small.file.limit": "0"}
    m = Model()

    def w(rows, deleted=(), op="upsert"):
        t = hudilite.write(_batch(rows, deleted), path, operation=op, table_type="COPY_ON_WRITE", options=opts,
                           **KEYS)
        m.apply(str(t), rows, deleted, op)
        return str(t)

    w([(1, 1, "a", "d1"), (2, 1, "b", "d1"), (3, 1, "c", "d2")], op="insert")
    cfg = HoodieTable.open(path).config
    assert (cfg.version, cfg.layout_version, cfg.props["hoodie.table.initial.version"]) == (version, 2, str(version))
    assert cfg.props["hoodie.record.merge.mode"] == "EVENT_TIME_ORDERING"
    ordering_key = "hoodie.table.ordering.fields" if version == 9 else "hoodie.table.precombine.field"
    assert cfg.props[ordering_key] == "version" and cfg.precombine_field == "version"
    assert cfg.props["hoodie.table.keygenerator.type"] == "SIMPLE"
    w([(1, 2, "a2", "d1"), (3, 0, "late", "d2"), (4, 1, "d", "d2")])
    w([(2, 5, "x", "d1")], op="delete")
    _check(spark, path, m, travel=version == 9)  # (version 8: the same code paths, fewer Spark jobs)
    w([(5, 1, "e", "d2")], op="insert_overwrite")
    names = _layout2_files(path)
    assert len(_completed(names, "commit")) == 3 and len(_completed(names, "replacecommit")) == 1
    with open(os.path.join(path, ".hoodie", "timeline", _completed(names, "commit")[0]), "rb") as f:
        rec = next(iter(fastavro.reader(f)))
    assert rec["operationType"] == "INSERT" and "compacted" in rec
    _check(spark, path, m, travel=version == 9)

    # a failed write (data files written, never completed) is invisible, then rolled back by the next writer
    pending = hudilite.write(_batch([(1, 9, "failed", "d1")]), path, table_type="COPY_ON_WRITE", options=opts,
                             commit=False, **KEYS)
    assert _rows(read_hudi_rs(path)) == _expect(m.cur)
    pending.abort()
    assert not [n for n in os.listdir(os.path.join(path, ".hoodie", "timeline")) if pending.instant_time in n]

    # clustering: pending as `.clustering.requested`, completed as a replacecommit
    w([(6, 1, "f", "d1")])
    done = cluster(path, {"hoodie.clustering.plan.strategy.small.file.limit": str(10 * 2 ** 20)})
    assert done
    names = _layout2_files(path)
    assert f"{done[0]}.clustering.requested" in names and any(n.startswith(done[0] + "_") and
                                                             n.endswith(".replacecommit") for n in names)
    m.same(done[0])
    _check(spark, path, m, travel=False)
    cleaned = run_clean(path, {"hoodie.cleaner.commits.retained": "1"})
    assert cleaned and any(n.startswith(cleaned[-1] + "_") and n.endswith(".clean")
                           for n in _layout2_files(path))
    assert _spark_rows(hudilite.read(spark, path)) == _expect(m.cur) == _rows(read_hudi_rs(path))

    # completion times strictly increase along the timeline, and follow their requested times
    tl = HoodieTable.open(path).timeline
    done_times = [(i.timestamp, i.completion) for i in tl.instants if i.is_completed]
    assert all(c > t for t, c in done_times)
    comps = sorted(c for _, c in done_times)
    assert len(set(comps)) == len(comps)


def test_mor_v9_deltacommits_compaction_while_pending(spark, tmp_path):
    path = str(tmp_path / "mor9")
    opts = {"hoodie.write.table.version": "9"}
    m = Model()

    def w(rows, deleted=(), op="upsert", via_spark=False):
        data = _batch(rows, deleted)
        if via_spark:  # the Spark write path (executor-side log appends)
            data = spark.createDataFrame(data.to_pandas())
        t = hudilite.write(data, path, operation=op, table_type="MERGE_ON_READ", options=opts, **KEYS)
        m.apply(str(t), rows, deleted, op)
        return str(t)

    t1 = w([(1, 1, "a", "d1"), (2, 1, "b", "d1"), (3, 1, "c", "d2")], op="insert")
    t2 = w([(1, 2, "a2", "d1"), (3, 3, "c3", "d2")])
    t3 = w([(2, 4, "gone", "d1")], deleted=(2,))
    logs = sorted(glob.glob(os.path.join(path, "dt=*", ".*.log.*")))
    assert logs and {parse_log_file_name(p).instant for p in logs} == {t2, t3}  # named by the deltacommit
    names = _layout2_files(path)
    assert len(_completed(names, "deltacommit")) == 3
    _check(spark, path, m)

    # a deltacommit in flight while a compaction is scheduled: its logs are not in the plan, and once it
    # completes (after the plan's instant) they start the compaction's slice
    slow = hudilite.write(_batch([(1, 7, "slow", "d1")]), path, table_type="MERGE_ON_READ", options=opts,
                          commit=False, **KEYS)
    c = schedule_compaction(path, opts, force=True)
    assert c is not None and c > slow.instant_time
    slow.complete()
    m.apply(slow.instant_time, [(1, 7, "slow", "d1")])
    assert _spark_rows(hudilite.read(spark, path)) == _expect(m.cur) == _rows(read_hudi_rs(path))
    assert run_compaction(path, opts) == [c]
    m.same(c)
    view = HoodieTable.open(path).view()
    fg = [g for g in view.file_groups("dt=d1").values() if any(
        parse_log_file_name(lf.path).instant == slow.instant_time for s in g.slices.values() for lf in s.log_files)]
    assert len(fg) == 1 and fg[0].latest_slice().base_instant == c  # the slow log joined the new slice
    assert [parse_log_file_name(lf.path).instant for lf in fg[0].latest_slice().log_files] == [slow.instant_time]
    assert _spark_rows(hudilite.read(spark, path)) == _expect(m.cur) == _rows(read_hudi_rs(path))
    for t in (t1, t2, t3):
        assert _spark_rows(hudilite.read(spark, path, as_of=t)) == _expect(m.states[t]) == \
            _rows(read_hudi_rs(path, as_of=t))

    # more writes on the compacted slice, a failed deltacommit rolled back, clean
    w([(3, 9, "c9", "d2"), (4, 1, "d", "d2")], via_spark=True)
    failed = hudilite.write(_batch([(3, 10, "failed", "d2")]), path, table_type="MERGE_ON_READ", options=opts,
                            commit=False, **KEYS)
    failed_logs = [p for p in glob.glob(os.path.join(path, "dt=*", ".*.log.*"))
                   if parse_log_file_name(p).instant == failed.instant_time]
    assert failed_logs
    assert _rows(read_hudi_rs(path)) == _expect(m.cur)
    failed.abort()
    assert not any(os.path.exists(p) for p in failed_logs)
    _check(spark, path, m, travel=False)
    assert run_clean(path, {"hoodie.cleaner.commits.retained": "1"})
    assert _spark_rows(hudilite.read(spark, path)) == _expect(m.cur) == _rows(read_hudi_rs(path))
    written = TableConfig.parse(open(os.path.join(path, ".hoodie", "hoodie.properties")).read())
    assert written.props["hoodie.timeline.path"] == "timeline" and written.props["hoodie.table.version"] == "9"
