"""`hudilite upgrade`: version-6 tables (COW and MOR: commits, clustering, clean, a pending compaction, a failed
write) become version 9 with the same snapshot, time travel and change reads, by us and by hudi-rs; writes and
services go on after it; a consumer's change-read position taken before it stays valid. Writes are Arrow, reads
in-process (no Spark). The kill at every storage operation of an upgrade is the crash harness's `upgrade_cow` /
`upgrade_mor` scenarios (tests/functional/test_crashpoints.py)."""

from __future__ import annotations

import json
import os
import time
import zipfile

import pyarrow as pa
import pytest

import hudilite
from bench.crashpoints import BASE_OPTIONS, HEARTBEAT_TOLERANCE_S, _rows, _rows_of, _write, read_own
from hudilite.cli import main as cli
from hudilite.errors import RangeUnavailableError
from hudilite.reader.changes import checkpoint
from hudilite.reader.merge import SliceDesc, merge_slice
from hudilite.reader.planner import plan_read
from hudilite.services.archival import archive
from hudilite.services.clean import run_clean
from hudilite.services.clustering import cluster
from hudilite.services.compaction import compact, schedule_compaction
from hudilite.services.upgrade import upgrade
from hudilite.table import HoodieTable
from hudilite.timeline import WRITE_ACTIONS

hudi = pytest.importorskip("hudi")
from tests.hudi_rs import read_hudi_rs  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")
COLS = ["id", "v", "dt", "name"]


def _read(path, **kw):
    """The rows of a read, or "cleaned" where a clean removed what it needs (refused alike before and after)."""
    try:
        plan = plan_read(path, **kw)
    except RangeUnavailableError:
        return "cleaned"
    spec = plan.merge_spec()
    parts = [merge_slice(SliceDesc.of(sl), spec) for sl in plan.slices]
    return _rows_of(pa.concat_tables(parts, promote_options="default"), COLS) if parts else []


def _state(path) -> dict:
    """Snapshot, time travel at every completed write and the change range after every one, by us; hudi-rs
    agrees on the snapshot and the time travel."""
    tl = HoodieTable.open(path).timeline
    times = [i.timestamp for i in tl.completed(WRITE_ACTIONS)]
    out = {"snapshot": read_own(path, COLS)}
    assert _rows_of(read_hudi_rs(path), COLS) == out["snapshot"]
    for t in times:
        out[("as_of", t)] = _read(path, as_of=t)
        if out[("as_of", t)] != "cleaned":
            assert _rows_of(read_hudi_rs(path, as_of=t), COLS) == out[("as_of", t)], t
    for a, b in zip(times, times[1:]):
        out[("changes", a, b)] = _read(path, begin=a, end=b)
    return out


def _v6_table(path, table_type):
    _write(path, _rows(0, 30, 1), operation="insert", table_type=table_type)
    _write(path, _rows(5, 10, 2))
    cluster(path, {**BASE_OPTIONS, "hoodie.clustering.plan.strategy.sort.columns": "id"})
    _write(path, _rows(8, 10, 3))
    run_clean(path, {**BASE_OPTIONS, "hoodie.cleaner.commits.retained": "2"})
    if table_type == "MERGE_ON_READ":
        _write(path, _rows(12, 6, 4))
        schedule_compaction(path, BASE_OPTIONS, force=True)  # left pending: the upgrade runs it
    # a failed write: inflight, its writer gone (heartbeat stopped; expired after 300 ms x 1 miss)
    failed = hudilite.write(_rows(40, 5, 5), path, record_key="id", precombine_field="v", partition_by=("dt",),
                            options=BASE_OPTIONS, commit=False)
    failed.heartbeat.stop()
    time.sleep(HEARTBEAT_TOLERANCE_S)
    assert HoodieTable.open(path).timeline.pending(WRITE_ACTIONS)


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_upgrade_reads_the_same_and_writes_go_on(tmp_path, table_type):
    path = str(tmp_path / "t")
    _v6_table(path, table_type)
    before = _state(path)
    assert sum(1 for k, v in before.items() if k[0] == "as_of" and v != "cleaned") >= 2
    pos, table_id = checkpoint(path)  # a consumer's position before the upgrade
    assert HoodieTable.open(path).config.version == 6
    assert cli(["upgrade", path, "-o", "hoodie.write.lock.filesystem.expire.ms=1500"]) == 0
    table = HoodieTable.open(path)
    assert table.config.version == 9 and table.config.layout_version == 2
    assert table.config.props["hoodie.table.initial.version"] == "6"
    assert not [n for n in os.listdir(os.path.join(path, ".hoodie")) if n[:1].isdigit()], "old instants removed"
    assert not table.timeline.pending(), "the pending compaction ran, the failed write was rolled back"
    after = _state(path)
    # the compaction the upgrade ran adds a commit: every read of the instants before it is unchanged
    assert {k: v for k, v in after.items() if k in before} == before
    assert after["snapshot"] == before["snapshot"]
    # writes and services go on at version 9
    _write(path, _rows(20, 10, 6))
    if table_type == "MERGE_ON_READ":
        _write(path, _rows(22, 4, 7))
        assert compact(path, BASE_OPTIONS, force=True)
    expect = {r[0]: r for r in before["snapshot"]}
    for r in _rows(20, 10, 6).to_pylist() + (_rows(22, 4, 7).to_pylist() if table_type == "MERGE_ON_READ" else []):
        expect[r["id"]] = tuple(r[c] for c in COLS)
    assert read_own(path, COLS) == sorted(expect.values()) == _rows_of(read_hudi_rs(path), COLS)
    # the consumer continues from its position: exactly the commits after the upgrade
    assert checkpoint(path)[1] == table_id
    changed = {r[0] for r in _read(path, begin=pos, completion_bounds=True)}
    assert changed == {r["id"] for r in _rows(20, 10, 6).to_pylist()} | \
        ({r["id"] for r in _rows(22, 4, 7).to_pylist()} if table_type == "MERGE_ON_READ" else set())
    assert upgrade(path, options=BASE_OPTIONS) is False  # already at 9


def test_write_with_auto_upgrade_upgrades_first(tmp_path):
    path = str(tmp_path / "t")
    _write(path, _rows(0, 10, 1), operation="insert", table_type="COPY_ON_WRITE")
    _write(path, _rows(0, 3, 2))
    assert HoodieTable.open(path).config.version == 6
    _write(path, _rows(5, 3, 3), options={"hoodie.write.auto.upgrade": "true"})
    assert HoodieTable.open(path).config.version == 9
    assert len(read_own(path, COLS)) == 10 and read_own(path, COLS) == _rows_of(read_hudi_rs(path), COLS)


def test_archived_instants_become_the_lsm_history(tmp_path):
    path = str(tmp_path / "t")
    _write(path, _rows(0, 10, 1), operation="insert", table_type="COPY_ON_WRITE")
    for v in range(2, 7):
        _write(path, _rows(v, 3, v))
    opts = {**BASE_OPTIONS, "hoodie.keep.min.commits": "2", "hoodie.keep.max.commits": "3",
            "hoodie.cleaner.commits.retained": "1"}
    run_clean(path, opts)
    archive(path, opts)
    old = HoodieTable.open(path).timeline
    assert old.archived.completed_write_times
    archived = {t: old.archived.completion_time(old.archived.instants[[i.timestamp for i in
                                                                       old.archived.instants].index(t)])
                for t in old.archived.completed_write_times}
    before = _state(path)
    assert upgrade(path, options=BASE_OPTIONS) is True
    tl = HoodieTable.open(path).timeline
    assert os.listdir(os.path.join(path, ".hoodie", "timeline", "history"))
    assert tl.archived.completed_write_times == old.archived.completed_write_times
    assert tl.archived.completion_times == archived
    assert _state(path) == before


REAL = "/work/shared/hudi-tables" if os.path.isdir("/work/shared/hudi-tables") else \
    os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared", "hudi-tables")
REAL_V6 = [t for t in json.load(open(os.path.join(REAL, "expected.json"), encoding="utf-8"))["tables"]
           if t["table_version"] == 6] if os.path.isfile(os.path.join(REAL, "expected.json")) else []


@pytest.mark.skipif(not REAL_V6, reason="no Apache-Hudi-written tables in shared/hudi-tables")
def test_apache_hudi_written_v6_tables_upgrade(tmp_path):
    """Every version-6 table Apache Hudi 0.x wrote (shared/hudi-tables) upgrades and reads the same, by us and
    hudi-rs."""
    for t in REAL_V6:
        dest = tmp_path / t["zip"][:-4].replace("/", "_")
        with zipfile.ZipFile(os.path.join(REAL, t["zip"])) as z:
            z.extractall(dest, members=[m for m in z.namelist() if not m.startswith("__MACOSX/")])
        path = str(dest / t["table_dir_in_zip"])
        before = read_own(path, None)
        upgrade(path, options=BASE_OPTIONS)
        assert HoodieTable.open(path).config.version == 9, t["zip"]
        assert read_own(path, None) == before, t["zip"]
        rs = read_hudi_rs(path)
        assert (_rows_of(rs, None) if rs is not None else []) == before, t["zip"]


def test_a_writer_that_opened_the_v6_table_fails_after_the_upgrade(tmp_path):
    from hudilite.errors import CommitConflictError
    from hudilite.writer.transaction import Transaction

    path = str(tmp_path / "t")
    _write(path, _rows(0, 5, 1), operation="insert", table_type="COPY_ON_WRITE")
    stale = HoodieTable.open(path)  # opened at version 6
    upgrade(path, options=BASE_OPTIONS)
    with pytest.raises(CommitConflictError, match="upgraded"):
        Transaction(stale, BASE_OPTIONS).start()
    assert not [n for n in os.listdir(os.path.join(path, ".hoodie")) if n[:1].isdigit()]
