"""hudilite.checkpoints: a consumer's checkpoint read from its table's timeline, the entries committed with its
output (driver-local Arrow writes, no Spark)."""

import json

import pyarrow as pa
import pytest

import hudilite
from hudilite import checkpoints
from hudilite.checkpoints import CHECKPOINT_KEY, CHECKPOINT_TABLES_KEY
from hudilite.table import HoodieTable


def _rows(ids):
    return pa.table({"id": pa.array(list(ids), pa.int64()), "v": pa.array([1] * len(ids), pa.int64())})


def _write(path, ids, extra=None):
    return hudilite.write(_rows(ids), path, record_key="id", operation="upsert", extra_metadata=extra)


def test_no_table_and_no_checkpoint_read_as_empty(tmp_path):
    path = str(tmp_path / "consumer")
    assert checkpoints.read(path) == checkpoints.Checkpoint()
    assert checkpoints.read(None) == checkpoints.Checkpoint()
    assert checkpoints.newest_metadata(path, CHECKPOINT_KEY) is None
    _write(path, [1])
    assert checkpoints.read(path).positions == {}
    assert checkpoints.resume_position(path, "/up", "id-1") == (None, False)


def test_newest_commit_carrying_the_key_wins_and_later_commits_without_it_do_not_hide_it(tmp_path):
    path = str(tmp_path / "consumer")
    _write(path, [1], checkpoints.entries({"/up": ("20240101000000001", "t1")}))
    _write(path, [2], checkpoints.entries({"/up": ("20240101000000002", "t1")}))
    _write(path, [3], {"other": "x"})  # e.g. a DML statement: no checkpoint
    cp = checkpoints.read(path)
    assert cp.positions == {"/up": "20240101000000002"} and cp.table_ids == {"/up": "t1"}
    tl = HoodieTable.open(path).timeline
    inst, extra = checkpoints.newest(tl, CHECKPOINT_KEY)
    assert inst.timestamp == tl.completed()[1].timestamp and extra[CHECKPOINT_KEY] == json.dumps(cp.positions)
    assert checkpoints.newest(tl, "other", "x")[0].timestamp == tl.completed()[2].timestamp
    assert checkpoints.newest(tl, "other", "y") is None


def test_entries_merge_over_the_stored_checkpoint_unless_rebuilt(tmp_path):
    path = str(tmp_path / "consumer")
    _write(path, [1], checkpoints.entries({"/a": ("p1", "ta"), "/b": ("p2", None)}))
    merged = checkpoints.entries({"/a": ("p3", "ta")}, previous=path)
    # on-disk format: sorted JSON objects; ids only for upstreams that have one
    assert merged == {CHECKPOINT_KEY: json.dumps({"/a": "p3", "/b": "p2"}, sort_keys=True),
                      CHECKPOINT_TABLES_KEY: json.dumps({"/a": "ta"})}
    assert checkpoints.entries({"/a": ("p3", "ta")}) == {CHECKPOINT_KEY: '{"/a": "p3"}',
                                                         CHECKPOINT_TABLES_KEY: '{"/a": "ta"}'}


def test_resume_only_on_the_table_the_position_was_taken_on(tmp_path):
    path = str(tmp_path / "consumer")
    _write(path, [1], checkpoints.entries({"/up": ("20240101000000005", "t1")}))
    assert checkpoints.resume_position(path, "/up", "t1") == ("20240101000000005", False)
    assert checkpoints.resume_position(path, "/up", "t2") == (None, True)  # the upstream was rebuilt
    assert checkpoints.resume_position(path, "/other", "t1") == (None, False)


def test_position_is_the_upstreams_newest_completion_and_id(tmp_path):
    up = str(tmp_path / "up")
    _write(up, [1])
    _write(up, [2])
    pos, table_id = checkpoints.position(up)
    table = HoodieTable.open(up)
    assert table_id == table.config.table_id
    assert pos == max(table.timeline.completion_time(i) for i in table.timeline.completed())


def test_unreadable_entry_is_an_error(tmp_path):
    path = str(tmp_path / "consumer")
    _write(path, [1], {CHECKPOINT_KEY: "{not json"})
    with pytest.raises(checkpoints.CheckpointError, match="unreadable hudilite.checkpoints"):
        checkpoints.read(path)
