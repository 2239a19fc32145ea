"""The v8/9 LSM timeline history: format round trip, version/manifest handling, crash points, orphans."""

import io
import json
import os

import fastavro
import pyarrow.parquet as pq
import pytest

from hudilite.timeline import lsm
from hudilite.timeline.instant import Instant
from hudilite.timeline.timeline import Timeline, _ARCHIVE_CACHE


def _avro_metadata(completion_extra: dict) -> bytes:
    schema = {"type": "record", "name": "HoodieCommitMetadata", "namespace": "org.apache.hudi.avro.model",
              "fields": [{"name": "extraMetadata", "type": {"type": "map", "values": "string"}},
                         {"name": "operationType", "type": "string"}]}
    buf = io.BytesIO()
    fastavro.writer(buf, fastavro.parse_schema(schema), [{"extraMetadata": completion_extra,
                                                          "operationType": "UPSERT"}])
    return buf.getvalue()


def _rec(t: str, action: str = "commit") -> lsm.HistoryRecord:
    return lsm.HistoryRecord(t, str(int(t) + 5), action, _avro_metadata({"schema": f"s{t}"}), b"plan" + t.encode())


@pytest.fixture
def tl_dir(tmp_path):
    d = tmp_path / ".hoodie" / "timeline"
    d.mkdir(parents=True)
    _ARCHIVE_CACHE.clear()
    return str(d)


def _archived(tl_dir):
    return Timeline(tl_dir, 2, []).archived


def test_round_trip_through_timeline(tl_dir):
    hd = lsm.history_dir(tl_dir)
    assert not _archived(tl_dir)  # never archived
    assert lsm.append_level0(hd, [_rec("20250101000000001"), _rec("20250101000000002", "deltacommit")]) == 0
    assert lsm.append_level0(hd, [_rec("20250101000000003", "clean")]) == 1
    names = sorted(os.listdir(hd))
    assert names == ["20250101000000001_20250101000000002_0.parquet", "20250101000000003_20250101000000003_0.parquet",
                     "_version_", "manifest_0", "manifest_1"]
    # Hudi's schema and manifest shape
    tbl = pq.read_table(os.path.join(hd, names[0]))
    assert tbl.column_names == ["instantTime", "completionTime", "action", "metadata", "plan", "version"]
    assert tbl.column("version").to_pylist() == [1, 1]
    man = json.loads(open(os.path.join(hd, "manifest_1")).read())
    assert [f["fileName"] for f in man["files"]] == names[:2]
    assert man["files"][1]["fileLen"] == os.path.getsize(os.path.join(hd, names[1]))
    assert open(os.path.join(hd, "_version_")).read() == "1"

    arch = _archived(tl_dir)
    assert [(i.timestamp, i.action, i.state) for i in arch.instants] == [
        ("20250101000000001", "commit", "COMPLETED"), ("20250101000000002", "deltacommit", "COMPLETED"),
        ("20250101000000003", "clean", "COMPLETED")]
    assert arch.completed_write_times == {"20250101000000001", "20250101000000002"}
    assert arch.completion_times == {"20250101000000001": "20250101000000006",
                                     "20250101000000002": "20250101000000007"}
    i1 = Instant("20250101000000001", "commit", "COMPLETED")
    assert arch.completion_time(i1) == "20250101000000006"
    assert arch.metadata(i1)["extraMetadata"] == {"schema": "s20250101000000001"}
    assert [r.plan for r in lsm.read_records(hd)][2] == b"plan20250101000000003"
    # the timeline's whole-history views include the archived instants
    assert Timeline(tl_dir, 2, []).committed_times == {"20250101000000001", "20250101000000002"}
    assert Timeline(tl_dir, 2, []).timeline_start == "20250101000000001"


def test_cache_follows_new_snapshots(tl_dir):
    hd = lsm.history_dir(tl_dir)
    lsm.append_level0(hd, [_rec("20250101000000001")])
    assert len(_archived(tl_dir).instants) == 1
    lsm.append_level0(hd, [_rec("20250101000000002")])
    assert len(_archived(tl_dir).instants) == 2


def test_version_file_missing_or_stale(tl_dir):
    hd = lsm.history_dir(tl_dir)
    lsm.append_level0(hd, [_rec("20250101000000001")])
    lsm.append_level0(hd, [_rec("20250101000000002")])
    # a kill after manifest_1, before _version_ moved: the complete manifest counts
    with open(os.path.join(hd, "_version_"), "w") as f:
        f.write("0")
    assert lsm.latest_version(hd) == 1
    os.remove(os.path.join(hd, "_version_"))
    assert lsm.latest_version(hd) == 1
    assert len(_archived(tl_dir).instants) == 2
    # the next append builds on the newest manifest
    assert lsm.append_level0(hd, [_rec("20250101000000003")]) == 2
    assert len(lsm.read_records(hd)) == 3


def test_orphan_data_file_is_invisible_and_replaced(tl_dir):
    hd = lsm.history_dir(tl_dir)
    lsm.append_level0(hd, [_rec("20250101000000001")])
    # a kill after the data file, before its manifest: readers do not see it
    orphan = os.path.join(hd, lsm.data_file_name("20250101000000002", "20250101000000002", 0))
    with open(orphan, "wb") as f:
        f.write(b"partial")
    assert [i.timestamp for i in _archived(tl_dir).instants] == ["20250101000000001"]
    # the retried archival replaces it
    lsm.append_level0(hd, [_rec("20250101000000002")])
    assert [r.instant_time for r in lsm.read_records(hd)] == ["20250101000000001", "20250101000000002"]


def test_live_file_is_never_overwritten(tl_dir):
    hd = lsm.history_dir(tl_dir)
    lsm.append_level0(hd, [_rec("20250101000000001")])
    with pytest.raises(FileExistsError):
        lsm.append_level0(hd, [_rec("20250101000000001")])
    assert lsm.latest_version(hd) == 0


def test_damaged_manifest_reads_as_unarchived(tl_dir):
    hd = lsm.history_dir(tl_dir)
    lsm.append_level0(hd, [_rec("20250101000000001")])
    with open(os.path.join(hd, "manifest_0"), "w") as f:
        f.write("{not json")
    assert not _archived(tl_dir)
