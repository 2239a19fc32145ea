"""Answers that do not depend on archival, table type or compaction timing: archival keeps completion order
(change ranges never lose an archived commit), incremental reads return latest images, time travel to
archived instants, one rule for deletes followed by lower-ordered re-inserts."""

import pyarrow as pa
import pytest

import hudilite
from hudilite.errors import RangeUnavailableError
from hudilite.reader.changes import latest_position
from hudilite.services import archival

OCC = {"hoodie.write.concurrency.mode": "optimistic_concurrency_control"}


def aw(path, rows, table_type="COPY_ON_WRITE", **kw):
    """A driver-local (Arrow) write of (id, v, s) rows; partition `dt` = the id's parity (writes of keys of
    different parity do not conflict)."""
    ids, vs, ss = zip(*rows)
    kw.setdefault("options", OCC)
    t = pa.table({"id": list(ids), "v": list(vs), "s": list(ss), "dt": [f"p{i % 2}" for i in ids]})
    return hudilite.write(t, path, record_key="id", precombine_field="v", partition_by="dt",
                          table_type=table_type, **kw)


def test_archival_keeps_a_late_completing_write_with_the_range_that_needs_it(spark, table_path):
    c1 = aw(table_path, [(1, 1, "one"), (2, 1, "two")])
    slow = aw(table_path, [(1, 2, "slow")], commit=False)   # requested early ...
    aw(table_path, [(2, 2, "fast")])                        # ... another write completes first
    checkpoint = latest_position(table_path)                # a consumer reads up to here
    slow.complete()                                         # completes after the checkpoint
    for i in range(3):
        aw(table_path, [(10 + i, 1, "more")])
    # 6 completed writes, keep 4: the instant-time prefix is c1 and the slow write, but the slow write completed
    # after writes kept active, so archiving it would drop it from the range that starts at the checkpoint
    assert archival.archive(table_path, {"hoodie.keep.min.commits": "4", "hoodie.keep.max.commits": "4"},
                            force=True) == [c1]
    names = {r["s"] for r in hudilite.changes(spark, table_path, begin=checkpoint, completion_bounds=True).collect()}
    assert names == {"slow", "more"}
    pos = latest_position(table_path)
    # keep 2: the slow write leaves with the writes that completed before it; the range needs archived detail
    archived = archival.archive(table_path, {"hoodie.keep.min.commits": "2", "hoodie.keep.max.commits": "2"},
                                force=True)
    assert slow.instant_time in archived and len(archived) == 3
    with pytest.raises(RangeUnavailableError):
        hudilite.changes(spark, table_path, begin=checkpoint, completion_bounds=True)
    assert latest_position(table_path) == pos


def test_a_range_needing_an_archived_completion_fails_loudly(spark, table_path, monkeypatch):
    """An archive that holds a write completed after a kept one (older hudilite, other archivers): ranges
    starting before that completion raise instead of silently skipping it; the position never goes back."""
    aw(table_path, [(1, 1, "one"), (2, 1, "two")])
    slow = aw(table_path, [(1, 2, "slow")], commit=False)
    aw(table_path, [(2, 2, "fast")])
    checkpoint = latest_position(table_path)
    slow.complete()
    pos = latest_position(table_path)
    real = archival.instants_to_archive

    def instant_time_prefix(table, tl, options, force=False):  # the archiver before completion order
        return [i for i in tl.instants if i.timestamp <= slow.instant_time], "test"

    monkeypatch.setattr(archival, "instants_to_archive", instant_time_prefix)
    assert slow.instant_time in archival.archive(table_path, {}, force=True)
    monkeypatch.setattr(archival, "instants_to_archive", real)
    with pytest.raises(RangeUnavailableError, match=slow.instant_time):
        hudilite.changes(spark, table_path, begin=checkpoint, completion_bounds=True)
    assert latest_position(table_path) == pos
