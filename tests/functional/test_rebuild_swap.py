"""A rebuild that replaces a table by one written beside it (hudilite.replace, used by the dbt adapter's
`_rebuild_beside`) survives a crash at every step: a process that dies before each file-system operation of
the swap leaves the path holding the old table (crash before the intent is durable) or, once the next open
completes the swap, the new table — never nothing — with no staging or replaced directories left. Also: the
table identity (`hudilite.table.id`) moves with the directory, differs for a rebuild, and a change read
continued from a position of the old table fails with TableReplacedError."""

import os
import subprocess
import sys
import textwrap

import pyarrow as pa
import pytest

import hudilite
from hudilite import replace
from hudilite.config import table_id_created
from hudilite.reader.changes import checkpoint, local_changes, same_table
from hudilite.storage import faults
from hudilite.table import HoodieTable
from tests.hudi_rs import read_hudi_rs

OLD = pa.table({"id": pa.array([1, 2, 3], pa.int64()), "v": pa.array(["a", "b", "c"])})
NEW = pa.table({"id": pa.array([7, 8], pa.int64()), "p": pa.array(["x", "y"]), "v": pa.array(["n", "m"])})

# the storage operations of `swap` (hudilite/storage: numbered by the crash injector), in order: the intent
# (temp file + rename), table -> old, staging -> table, remove the old table, remove the intent
STEPS = ["write", "rename", "rename", "delete_tree", "delete"]

CHILD = textwrap.dedent("""
    import os, sys
    import pyarrow as pa
    import hudilite
    from hudilite import replace
    from hudilite.storage import faults

    path, crash_at = sys.argv[1], int(sys.argv[2])
    new = pa.table({"id": pa.array([7, 8], pa.int64()), "p": pa.array(["x", "y"]), "v": pa.array(["n", "m"])})
    with replace.staging_dir(path) as staging:
        hudilite.write(new, staging, record_key="id", partition_by="p", operation="insert")
        if crash_at < 0:
            os._exit(9)  # died while writing the new table
        inj = faults.install(faults.CrashInjector(crash_at + 1))  # dies before storage operation crash_at + 1
        replace.swap(path, staging)
    assert [op for op, _p, _t in inj.ops] == %r, inj.ops
    print("swapped")
""" % (STEPS,))


def _old_table(tmp_path):
    path = str(tmp_path / "wh" / "orders")
    hudilite.write(OLD, path, record_key="id", operation="insert")
    return path


def _rows(path):
    t = read_hudi_rs(path)
    return sorted(zip(t.column("id").to_pylist(), t.column("v").to_pylist()))


def _leftovers(path):
    parent, name = os.path.split(path)
    return sorted(e for e in os.listdir(parent) if e != name)


@pytest.mark.parametrize("crash_at", [-1, 0, 1, 2, 3, 4, 5], ids=["staging"] + [f"before-{i}-{s}" for i, s in
                                                                                 enumerate(STEPS)] + ["none"])
def test_crash_at_each_step_of_the_swap(tmp_path, crash_at):
    path = _old_table(tmp_path)
    old_id = HoodieTable.open(path).config.table_id
    p = subprocess.run([sys.executable, "-c", CHILD, path, str(crash_at)], capture_output=True, text=True,
                       cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    assert p.returncode == (0 if crash_at == len(STEPS) else 9 if crash_at < 0 else faults.EXIT_CODE), p.stderr
    if crash_at < 0:
        assert len(_leftovers(path)) == 1  # the dead writer's staging directory
    # the next open completes the swap (or finds the old table untouched)
    assert HoodieTable.exists(path)
    table = HoodieTable.open(path)
    if crash_at <= 0:  # the intent was not durable yet: the rebuild did not happen
        assert table.config.table_id == old_id and _rows(path) == [(1, "a"), (2, "b"), (3, "c")]
    else:
        assert table.config.table_id != old_id and table.config.partition_fields == ["p"]
        assert _rows(path) == [(7, "n"), (8, "m")]
    if crash_at <= 0:  # the dead writer's staging dir (and intent temp file) wait for the next swap of the path
        assert _leftovers(path)
    else:
        assert _leftovers(path) == []
    # the next rebuild works from whatever state was left, and removes orphans
    with replace.staging_dir(path) as staging:
        hudilite.write(OLD, staging, record_key="id", operation="insert")
        replace.swap(path, staging)
    assert _leftovers(path) == [] and _rows(path) == [(1, "a"), (2, "b"), (3, "c")]


def test_failed_rebuild_leaves_the_table_untouched(tmp_path):
    path = _old_table(tmp_path)
    old_id = HoodieTable.open(path).config.table_id
    with pytest.raises(hudilite.InvalidWriteError):
        with replace.staging_dir(path) as staging:
            hudilite.write(NEW, staging, record_key="nope", operation="insert")
            replace.swap(path, staging)
    assert HoodieTable.open(path).config.table_id == old_id and _leftovers(path) == []


def test_identity_moves_with_the_directory_and_changes_on_rebuild(spark, tmp_path):
    path = _old_table(tmp_path)
    pos, tid = checkpoint(path)
    assert tid and table_id_created(tid) <= pos
    moved = str(tmp_path / "elsewhere")
    os.rename(path, moved)
    assert checkpoint(moved) == (pos, tid)  # same table, same position, another path
    assert local_changes(moved, pos, completion_bounds=True, table_id=tid).num_rows == 0
    # a table rebuilt at the path: another id; continuing the old position there fails loudly
    hudilite.write(NEW, path, record_key="id", partition_by="p", operation="insert")
    pos2, tid2 = checkpoint(path)
    assert tid2 != tid
    with pytest.raises(hudilite.TableReplacedError, match="rebuilt or recreated"):
        local_changes(path, pos, completion_bounds=True, table_id=tid)
    with pytest.raises(hudilite.TableReplacedError, match="rebuilt or recreated"):
        hudilite.changes(spark, path, begin=pos, completion_bounds=True, table_id=tid)
    assert hudilite.changes(spark, path, begin=pos2, completion_bounds=True, table_id=tid2).count() == 0
    assert isinstance(hudilite.TableReplacedError("x"), hudilite.RangeUnavailableError)  # the same way out


def test_checkpoints_without_a_recorded_id():
    """Checkpoints written before table ids existed record none: they continue on a table without an id (no
    way to tell) and on a table created at or before their position; a table created after the position is
    a rebuild (a position is a completion time of the table it was taken on)."""
    tid = "20260101000000000-" + "0" * 32
    assert same_table(None, "20251231000000000", None)
    assert same_table(None, "20260102000000000", tid) and same_table(None, "20260101000000000", tid)
    assert not same_table(None, "20251231000000000", tid)
    assert same_table(tid, "20251231000000000", tid)
    assert not same_table(tid, "20260102000000000", "20260101000000000-" + "1" * 32)
    assert not same_table(tid, "20260102000000000", None)  # an id recorded, a table without one: another table


def test_aggregate_refresh_over_a_rebuilt_detail(spark, tmp_path):
    """The aggregate engine without dbt (`refresh`, the PySpark entry point): a detail rebuilt at its path is
    recomputed from, not folded on top of (before: ('a', 4, 75) and ('b', 1, 5))."""
    from hudilite.aggregate import parse, refresh

    detail, agg = str(tmp_path / "detail"), str(tmp_path / "agg")
    q = parse("select g, count(*) as n, sum(x) as s from `db`.`detail` group by g")
    t = {"id": pa.array([1, 2, 3], pa.int64()), "g": ["a", "a", "b"], "x": pa.array([10, 20, 5], pa.int64())}
    hudilite.write(pa.table(t), detail, record_key="id")
    refresh(spark, q, detail, agg)
    with replace.staging_dir(detail) as staging:
        t = {"id": pa.array([1, 4], pa.int64()), "g": ["a", "a"], "x": pa.array([15, 30], pa.int64())}
        hudilite.write(pa.table(t), staging, record_key=["id", "g"])
        replace.swap(detail, staging)
    refresh(spark, q, detail, agg)
    assert sorted((r["g"], r["n"], r["s"]) for r in hudilite.read(spark, agg).collect()) == [("a", 2, 45)]
