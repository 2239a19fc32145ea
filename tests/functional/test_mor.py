"""Merge-on-read writes and reads: hudilite vs an independent Python model vs hudi-rs.

Write sequences of upserts, deletes (natural and event-time), late records and re-inserts on a
MERGE_ON_READ table (updates and deletes become log blocks, inserts new base files), then check snapshot,
time travel at every instant, incremental windows and read-optimized reads three ways:

* ``hudilite.read`` (Spark; slices with logs merged in Python workers),
* hudi-rs (``HudiTable.read`` with the matching ``HudiReadOptions``),
* a model that applies the upsert rules one write at a time, as copy-on-write does (docs/incremental.md,
  "Deletes and re-inserts": the same answers on both table types).

A failed deltacommit (log files and a new base file written, never completed) is invisible to both readers
and rolled back from its markers: new base files deleted, log files it created deleted, a rollback command
block appended to a log file that also holds committed blocks.
"""

from __future__ import annotations

import glob
import os
from dataclasses import dataclass, field

import pyarrow as pa
import pytest

import hudilite
from hudilite.log import AvroDataBlock, CommandBlock, ParquetDataBlock, append_blocks, scan_log_file
from hudilite.markers import APPEND, DirectMarkers
from hudilite.reader.merge import MergeSpec, SliceDesc, merge_slice, valid_blocks
from hudilite.reader.planner import plan_read
from hudilite.services.rollback import rollback_failed_writes
from hudilite.table import HoodieTable
from tests.functional.helpers import fail_deltacommit

hudi = pytest.importorskip("hudi")
from tests.hudi_rs import read_hudi_rs  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")

SCHEMA = "id long, ts long, name string, region string, _hoodie_is_deleted boolean"
COLS = ("id", "ts", "name")


# ---- the model ---------------------------------------------------------------------------------------------
@dataclass
class Model:
    """Per key, the current record after each commit, by the upsert rules one write at a time (as copy-on-write
    applies them): against the current record a higher-or-equal ordering value wins (commit time: the newer
    write); an ordered delete applies when its value is at least the stored one, a natural delete (the delete
    operation, no ordering value) always; a deleted key is absent, so its next write is an insert whatever its
    ordering value. Inserts go to base files (a re-insert to a new file group: read-optimized reads then show the
    old base row as well, until compaction)."""

    event_time: bool
    states: list = field(default_factory=list)  # per commit: id -> (ts, name, commit that wrote it)
    base: list = field(default_factory=list)  # (id, ts, name, commit) rows written to base files

    def write(self, commit: int, rows, delete_op: bool = False) -> None:
        """One commit: rows (id, ts, name, is_deleted); in-batch duplicates collapse to the highest ts."""
        batch: dict[int, tuple] = {}
        for r in rows:
            cur = batch.get(r[0])
            if cur is None or not self.event_time or r[1] is None or (cur[1] is not None and r[1] >= cur[1]):
                batch[r[0]] = r
        state = dict(self.states[-1]) if self.states else {}
        for i, (_, ts, name, is_del) in batch.items():
            is_del = is_del or delete_op
            cur = state.get(i)
            if cur is None:
                if not is_del:
                    state[i] = (ts, name, commit)
                    self.base.append((i, ts, name, commit))
                continue
            wins = not self.event_time or ts is None or cur[0] is None or ts >= cur[0]
            if is_del and (wins or delete_op):
                del state[i]
            elif not is_del and wins:
                state[i] = (ts, name, commit)
        self.states.append(state)

    def read(self, as_of: int, window: tuple[int, int] | None = None) -> list[tuple]:
        """Snapshot as of commit `as_of`; with `window` (a, b]: the records of commit b's snapshot written in it."""
        if window is not None:
            a, b = window
            return sorted((i, ts, name) for i, (ts, name, c) in self.states[b].items() if a < c <= b)
        return sorted((i, ts, name) for i, (ts, name, _c) in self.states[as_of].items())

    def read_optimized(self, as_of: int) -> list[tuple]:
        return sorted((i, ts, name) for i, ts, name, c in self.base if c <= as_of)


# ---- readers -----------------------------------------------------------------------------------------------
def ours(spark, path, **kw) -> list[tuple]:
    return sorted(tuple(r) for r in hudilite.read(spark, path, **kw).select(*COLS).collect())


def hudi_rs(path, **kw) -> list[tuple]:
    t = read_hudi_rs(path, **kw)
    if t is None:
        return []
    return sorted(tuple(r[c] for c in COLS) for r in t.select(list(COLS)).to_pylist())


def hudi_rs_bound(path, t: str) -> str:
    """The bound for hudi-rs of an incremental range bounded by instant `t` in hudilite's terms: hudi-rs compares
    completion times on table version 8+ (as tests/compat/test_v9_compat.py does), instant times on 6."""
    table = HoodieTable.open(path)
    if table.config.version < 8:
        return t
    return table.timeline.completion_time(table.timeline.get(t))


def write(spark, path, rows, *, event_time=True, operation="upsert", options=None):
    df = spark.createDataFrame([(i, ts, name, ("eu" if i % 2 else "us"), d) for i, ts, name, d in rows], SCHEMA)
    return hudilite.write(df, path, record_key="id", precombine_field="ts" if event_time else None,
                          partition_by="region", operation=operation, table_type="MERGE_ON_READ",
                          options=options)


def log_files(path):
    return sorted(glob.glob(os.path.join(path, "**", ".*.log.*"), recursive=True))


# ---- the sequences -----------------------------------------------------------------------------------------
SEQUENCE = [
    # (rows (id, ts, name, is_deleted), operation)
    ([(i, 10, f"n{i}", False) for i in range(10)], "upsert"),
    ([(1, 20, "u1", False), (2, 20, "u2", False), (3, 5, "late3", False), (2, 25, "u2b", False),
      (20, 1, "new20", False), (21, 1, "new21", False)], "upsert"),
    # the delete operation always wins, whatever ordering value the rows carry (9: ts 1 < stored 10)
    ([(4, None, None, True), (9, 1, None, True), (20, None, None, True), (99, None, None, True)], "delete"),
    # 9: re-inserted after its delete with a lower ordering value than the old base row: a new insert (it takes
    # the insert path, a new file group, so hudi-rs reads the same)
    ([(1, 30, "u1b", False), (5, 15, "u5", False), (6, 5, "late-delete6", True), (7, 50, "delete7", True),
      (3, 12, "u3", False), (9, 3, "low9", False)], "upsert"),
    ([(4, 40, "back4", False), (8, 10, "tie8", False), (22, 2, "new22", False)], "upsert"),
]


@pytest.mark.parametrize("event_time, block_format", [(True, "avro"), (False, "parquet")],
                         ids=["event_time-avro", "commit_time-parquet"])
def test_mor_sequence_matches_model_and_hudi_rs(spark, tmp_path, event_time, block_format):
    path = str(tmp_path / "mor")
    model = Model(event_time)
    commits = []
    for k, (rows, op) in enumerate(SEQUENCE):
        c = write(spark, path, rows, event_time=event_time, operation=op,
                  options={"hoodie.logfile.data.block.format": block_format})
        commits.append(c)
        model.write(k, rows, delete_op=(op == "delete"))
        assert hudi_rs(path) == model.read(k), f"hudi-rs snapshot after commit {k}"

    table = HoodieTable.open(path)
    assert table.config.table_type == "MERGE_ON_READ"
    assert [i.action for i in table.timeline.completed()] == ["deltacommit"] * len(SEQUENCE)
    logs = log_files(path)
    assert logs, "updates were written to log files"
    kinds = {type(b).__name__ for p in logs for b in scan_log_file(p)}
    assert ("AvroDataBlock" if block_format == "avro" else "ParquetDataBlock") in kinds and "DeleteBlock" in kinds
    md = table.timeline.read_metadata(table.timeline.completed()[1])
    log_stats = [s for st in md["partitionToWriteStats"].values() for s in st if s.get("logFiles")]
    assert log_stats and all(s["baseFile"].endswith(".parquet") and s["logVersion"] >= 1 for s in log_stats)
    assert not os.path.exists(os.path.join(path, ".hoodie", ".temp", commits[-1]))

    for k, c in enumerate(commits):  # time travel
        want = model.read(k)
        assert ours(spark, path, as_of=c) == want, f"as_of commit {k}"
        assert hudi_rs(path, as_of=c) == want, f"hudi-rs as_of commit {k}"
    # these writes ran one after another: completion order is the commits' order (hudi_rs_bound)
    windows = [(-1, 0)] + [(k - 1, k) for k in range(1, len(commits))] + [(0, len(commits) - 1)]
    for a, b in windows:  # incremental (begin, end]
        begin = "19700101000000000" if a < 0 else commits[a]
        want = model.read(b, window=(a, b))
        assert ours(spark, path, begin=begin, end=commits[b]) == want, f"incremental ({a}, {b}]"
        rs_begin = begin if a < 0 else hudi_rs_bound(path, commits[a])
        got = hudi_rs(path, begin=rs_begin, end=hudi_rs_bound(path, commits[b]))
        assert got == want, f"hudi-rs incremental ({a}, {b}]"
    assert ours(spark, path) == model.read(len(commits) - 1)
    want = model.read_optimized(len(commits) - 1)
    assert ours(spark, path, read_optimized=True) == want
    assert hudi_rs(path, read_optimized=True) == want
    df = spark.read.format("hudilite").load(path)  # the Python data source merges too
    assert sorted(tuple(r) for r in df.select(*COLS).collect()) == model.read(len(commits) - 1)


@pytest.mark.parametrize("version", ["6", "9"])
def test_mor_inserts_go_to_new_base_files_and_updates_to_logs(spark, tmp_path, version):
    path = str(tmp_path / "mor")
    write(spark, path, [(i, 1, f"n{i}", False) for i in range(6)], options={"hoodie.write.table.version": version})
    bases = set(glob.glob(os.path.join(path, "*", "*.parquet")))
    c2 = write(spark, path, [(1, 2, "u1", False), (2, 2, "u2", False)],
               options={"hoodie.write.markers.type": "TIMELINE_SERVER_BASED"})  # APPEND markers via the service
    assert set(glob.glob(os.path.join(path, "*", "*.parquet"))) == bases  # no base file rewritten
    assert ours(spark, path)[1:3] == [(1, 2, "u1"), (2, 2, "u2")] == hudi_rs(path)[1:3]
    assert c2.stats["updated"] == 2 and c2.stats["inserted"] == 0
    c3 = write(spark, path, [(100, 1, "ins", False)])
    assert c3.stats["inserted"] == 1 and len(glob.glob(os.path.join(path, "*", "*.parquet"))) == len(bases) + 1
    plan = plan_read(path)
    assert plan.merged_slices and all(s.base_file is not None for s in plan.merged_slices)
    # log naming .<fileId>_<instant>.log.<version>_<writeToken>, attached to the base file's slice; the instant is
    # the base file's on version 6, the deltacommit's own on 8+ (one new log file per deltacommit)
    for sl in plan.merged_slices:
        for lf in sl.log_files:
            assert lf.name.file_id == sl.file_id
            if version == "6":
                assert lf.name.instant == sl.base_file.instant
            else:
                assert lf.name.instant == c2 != sl.base_file.instant and lf.name.version == 1


def test_failed_deltacommit_is_invisible_and_rolled_back(spark, tmp_path, monkeypatch):
    path = str(tmp_path / "mor")
    write(spark, path, [(i, 10, f"n{i}", False) for i in range(8)])
    write(spark, path, [(1, 20, "u1", False), (2, 20, "u2", False)])
    before = ours(spark, path)
    assert hudi_rs(path) == before
    logs_before = set(log_files(path))
    bases_before = set(glob.glob(os.path.join(path, "*", "*.parquet")))

    failed = fail_deltacommit(monkeypatch, path, lambda: write(spark, path, [
        (1, 30, "bad1", False), (3, 30, "bad3", False), (5, None, None, True), (50, 1, "bad-insert", False)]))
    new_logs = set(log_files(path)) - logs_before
    assert new_logs and set(glob.glob(os.path.join(path, "*", "*.parquet"))) - bases_before
    # A log file the failed instant appended to that also holds committed blocks: simulated by appending one
    # of its blocks to a committed log file, with an APPEND marker (as a Java writer appending in place does).
    shared = sorted(logs_before)[0]
    schema = next(b for b in scan_log_file(shared) if isinstance(b, (AvroDataBlock, ParquetDataBlock))).schema
    rec = next(b for b in scan_log_file(shared) if isinstance(b, (AvroDataBlock, ParquetDataBlock))).records()
    rec = rec.set_column(rec.schema.get_field_index("name"), "name", pa.array(["bad"] * rec.num_rows))
    rec = rec.set_column(rec.schema.get_field_index("ts"), "ts", pa.array([99] * rec.num_rows, pa.int64()))
    append_blocks(shared, [AvroDataBlock.from_table(rec, schema, failed)])
    part = os.path.relpath(os.path.dirname(shared), path)
    DirectMarkers(path, failed).create(part, os.path.basename(shared), APPEND)

    assert ours(spark, path) == before  # blocks and files of a pending instant are not read
    assert hudi_rs(path) == before

    table = HoodieTable.open(path)
    assert rollback_failed_writes(table) == [failed]
    assert set(log_files(path)) == logs_before  # the log files it created are gone
    assert set(glob.glob(os.path.join(path, "*", "*.parquet"))) == bases_before
    cmds = [b for b in scan_log_file(shared) if isinstance(b, CommandBlock)]
    assert len(cmds) == 1 and cmds[0].is_rollback and cmds[0].target_instant_time == failed
    assert not HoodieTable.open(path).timeline.pending()
    assert ours(spark, path) == before
    assert hudi_rs(path) == before
    rollback_failed_writes(HoodieTable.open(path))  # idempotent: nothing left to do
    assert len([b for b in scan_log_file(shared) if isinstance(b, CommandBlock)]) == 1

    # The command block drops the failed blocks even where the instant would count as committed (older than
    # the active timeline after archival, or another instant with that time).
    plan = plan_read(path)
    sl = next(s for s in plan.slices if any(lf.path == shared for lf in s.log_files))
    spec = plan.merge_spec()
    spec_archived = MergeSpec(**{**spec.__dict__, "committed": spec.committed | {failed}})
    assert any(b.instant_time == failed for b in scan_log_file(shared) if not isinstance(b, CommandBlock))
    assert all(b.instant_time != failed for b in valid_blocks([lf.path for lf in sl.log_files], spec_archived))
    assert merge_slice(SliceDesc.of(sl), spec_archived).equals(merge_slice(SliceDesc.of(sl), spec))

    c = write(spark, path, [(1, 40, "after", False)])  # the table keeps working
    assert c and (1, 40, "after") in ours(spark, path) and (1, 40, "after") in hudi_rs(path)


def test_inline_rollback_of_a_failing_deltacommit(spark, tmp_path, monkeypatch):
    """A write that fails before its commit rolls itself back: the table reads as before."""
    from hudilite.writer import client

    path = str(tmp_path / "mor")
    write(spark, path, [(i, 10, f"n{i}", False) for i in range(4)])
    write(spark, path, [(1, 20, "u1", False)])
    before, logs_before = ours(spark, path), set(log_files(path))

    def boom(*a, **k):
        raise RuntimeError("commit failed")

    monkeypatch.setattr(client.Transaction, "complete", boom)
    with pytest.raises(RuntimeError):
        write(spark, path, [(2, 30, "bad", False), (9, 1, "bad-insert", False)])
    monkeypatch.undo()
    assert set(log_files(path)) == logs_before
    assert not HoodieTable.open(path).timeline.pending()
    assert ours(spark, path) == before and hudi_rs(path) == before


def test_mor_partial_update_is_refused(spark, tmp_path):
    path = str(tmp_path / "mor")
    write(spark, path, [(1, 1, "a", False)])
    with pytest.raises(hudilite.UnsupportedTableError):
        write(spark, path, [(1, 2, "b", False)], options={"hoodie.write.partial.update": "true"})
    with pytest.raises(hudilite.InvalidWriteError):
        write(spark, path, [(1, 2, "b", False)], options={"hoodie.logfile.data.block.format": "orc"})


def test_log_only_file_group(spark, tmp_path):
    """A file group with log files and no base file (Java writes these when an index can route inserts to
    logs) is read by both readers; its blocks follow the same visibility rule."""
    from hudilite.file_group import new_file_id
    from hudilite.log import DeleteBlock, format_log_file_name

    path = str(tmp_path / "mor")
    c1 = write(spark, path, [(i, 10, f"n{i}", False) for i in range(4)])
    c2 = write(spark, path, [(1, 20, "u1", False)])
    before = ours(spark, path)
    shared = sorted(log_files(path))[0]
    block = next(b for b in scan_log_file(shared) if isinstance(b, (AvroDataBlock, ParquetDataBlock)))
    rec = block.records()
    fid = new_file_id()
    part = os.path.dirname(shared)
    region = os.path.basename(part).split("=", 1)[1]
    rows = pa.table({
        "_hoodie_commit_time": [c2] * 3, "_hoodie_commit_seqno": [f"{c2}_0_{i}" for i in range(3)],
        "_hoodie_record_key": ["100", "101", "100"], "_hoodie_partition_path": [rec["_hoodie_partition_path"][0]] * 3,
        "_hoodie_file_name": [fid] * 3, "id": pa.array([100, 101, 100], pa.int64()),
        "ts": pa.array([5, 5, 7], pa.int64()), "name": ["lo100", "lo101", "lo100b"], "region": [region] * 3,
        "_hoodie_is_deleted": pa.array([False] * 3),
    })
    blocks = [AvroDataBlock.from_table(rows.select(rec.column_names), block.schema, c2),
              DeleteBlock.from_keys([("101", rec["_hoodie_partition_path"][0].as_py())], c2)]
    append_blocks(os.path.join(part, format_log_file_name(fid, c2, 1, "0-0-0")), blocks)
    want = sorted(before + [(100, 7, "lo100b")])
    assert ours(spark, path) == want and hudi_rs(path) == want
    assert (100, 7, "lo100b") not in ours(spark, path, as_of=c1) + hudi_rs(path, as_of=c1)
    plan = plan_read(path)
    assert any(s.base_file is None and s.log_files for s in plan.merged_slices)


@pytest.mark.parametrize("version", ["6", "9"])
def test_reinsert_behind_a_pending_compaction_reads_the_same_before_and_after(spark, tmp_path, version):
    """Behind a pending compaction the writer decides against the merged state of the previous slice (base file
    and logs, here a delete): the lower-ordered re-insert of the deleted key is a new insert (a new file group)
    and the late update of 3 is dropped, so the snapshot is the same before and after the compaction (it used
    to resurrect the deleted base row until the compaction completed)."""
    from hudilite.reader import overlay_cache
    from hudilite.services.compaction import run_compaction, schedule_compaction

    path = str(tmp_path / "mor")
    spark.conf.set(overlay_cache.MIN_LOG_BYTES_CONF, "0")  # entries for these tiny logs too
    try:
        write(spark, path, [(1, 5, "a", False), (3, 5, "c", False)], options={"hoodie.write.table.version": version})
        write(spark, path, [(1, None, None, True)], operation="delete")
    finally:
        spark.conf.unset(overlay_cache.MIN_LOG_BYTES_CONF)
    assert schedule_compaction(path, {"hoodie.compact.inline.max.delta.commits": "1"})
    def entries():
        return sorted(os.path.join(d, f) for d, _, fs in os.walk(os.path.join(path, overlay_cache.DIR))
                      for f in fs if f.endswith(overlay_cache.ROWS))

    before = entries()
    # deltacommits write overlay entries on version 6 only (docs/compatibility.md)
    assert bool(before) == (version == "6"), "the delete's deltacommit wrote its slice's entry (version 6)"
    write(spark, path, [(1, 3, "back", False), (3, 1, "late3", False)])
    assert entries() == before, "nothing appended behind the pending compaction: no overlay entry"
    want = [(1, 3, "back"), (3, 5, "c")]
    assert ours(spark, path) == want and hudi_rs(path) == want
    assert run_compaction(path)
    assert ours(spark, path) == want and hudi_rs(path) == want
