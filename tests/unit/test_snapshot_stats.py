"""HoodieTable.snapshot_stats: the latest snapshot's row count without reading data (the dbt docs catalog and
a --full-refresh's count of the rows it removed)."""

import os

import pyarrow as pa
import pyarrow.parquet as pq

import hudilite
from hudilite.table import HoodieTable


def _rows(ids, v=1):
    return pa.table({"id": pa.array(ids, pa.int64()), "p": pa.array([f"p{i % 3}" for i in ids]),
                     "v": pa.array([v] * len(ids), pa.int64())})


def _footer_rows(t):
    return sum(pq.read_metadata(s.base_file.path).num_rows for s in t.view().latest_slices(t.partitions()))


def test_rows_of_the_latest_snapshot(tmp_path, monkeypatch):
    path = str(tmp_path / "t")
    kw = dict(record_key="id", precombine_field="v", partition_by="p")
    hudilite.write(_rows(range(10)), path, operation="bulk_insert", **kw)
    hudilite.write(_rows(range(5, 15), v=2), path, operation="upsert", **kw)   # 5 updated, 5 new
    hudilite.write(_rows([0, 1, 2]), path, operation="delete", **kw)
    t = HoodieTable.open(path)
    expected = _footer_rows(t)

    def no_footer(*a, **k):
        raise AssertionError("the commits recorded every file's rows: no footer needs reading")

    monkeypatch.setattr(t.fs, "parquet_metadata", no_footer)
    st = t.snapshot_stats()
    assert st["rows"] == 12 == expected
    assert st["files"] == 3 and st["bytes"] == sum(os.path.getsize(s.base_file.path)
                                                     for s in t.view().latest_slices(t.partitions()))


def test_rows_from_the_footers_when_the_commit_is_not_on_the_timeline(tmp_path):
    path = str(tmp_path / "t")
    c = hudilite.write(_rows(range(7)), path, record_key="id", operation="bulk_insert")
    t = HoodieTable.open(path)
    meta = os.path.join(t.meta_path, f"{c}.commit")
    with open(meta, "w") as f:   # unreadable commit metadata: the file slices are still there
        f.write("{")
    assert HoodieTable.open(path).snapshot_stats()["rows"] == 7


def test_merge_on_read_rows_unknown_while_slices_have_logs(tmp_path):
    path = str(tmp_path / "t")
    kw = dict(record_key="id", precombine_field="v", table_type="MERGE_ON_READ")
    hudilite.write(_rows(range(4)), path, operation="bulk_insert", **kw)
    assert HoodieTable.open(path).snapshot_stats()["rows"] == 4
    hudilite.write(_rows([1], v=2), path, operation="upsert", **kw)
    assert HoodieTable.open(path).snapshot_stats()["rows"] is None
