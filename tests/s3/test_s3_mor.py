"""Merge-on-read on an object store, which cannot append: every deltacommit writes new log versions of the file
slices it updates (never an append, which would read and rewrite the object), the same layout and rows as the
same history on a local table; compaction folds the versions; a failed deltacommit rolled back leaves no
trace; rollback command blocks and archive records go to new files; hudi-rs reads the same rows."""

import os
from collections import defaultdict

import pyarrow as pa
import pytest

import hudilite
from hudilite.log import CommandBlock, LogWriter, create_log_file, parse_log_file_name, scan_log_file
from hudilite.storage import storage_for
from hudilite.storage.local import LocalStorage
from hudilite.storage.s3 import S3Storage
from hudilite.timeline.archive import append_archive_records, list_archive_files
from hudilite.writer import client
from hudilite.writer.transaction import Transaction

KW = {"record_key": "id", "precombine_field": "v", "partition_by": ("p",), "table_type": "MERGE_ON_READ"}
# log file versions of a slice are a version-6 layout (8+ name each log file with its own deltacommit, version 1)
V6 = {"hoodie.write.table.version": "6"}


def _rows(ids, v=1):
    ids = list(ids)
    return pa.table({"id": ids, "v": [v] * len(ids), "p": ["a" if i % 2 else "b" for i in ids]})


HISTORY = [(range(10), 1, "insert"), (range(2, 7), 2, "upsert"), (range(3, 8), 3, "upsert"), ([4], 1, "delete"),
           ([5, 6], 4, "upsert")]
LATEST = {0: 1, 1: 1, 2: 2, 3: 3, 5: 4, 6: 4, 7: 3, 8: 1, 9: 1}


def _no_append(*_a, **_k):
    raise AssertionError("an object was appended to (read and rewritten)")


def _slices(path) -> dict:
    """(partition, fileId, base instant) -> sorted log versions."""
    out = defaultdict(list)
    for f in storage_for(path).walk_files(path):
        if ".log." in os.path.basename(f) and "/.hoodie/" not in f:
            n = parse_log_file_name(f)
            out[(os.path.basename(os.path.dirname(f)), n.file_id, n.instant)].append(n.version)
    return {k: sorted(v) for k, v in out.items()}


def _layout(slices: dict) -> list:
    """The slices' versions without the (random) file ids and instants."""
    return sorted((k[0], v) for k, v in slices.items())


def _hudi_rs(server, path) -> dict:
    from hudi import HudiReadOptions, HudiTableBuilder

    b = HudiTableBuilder.from_base_uri(path)
    if path.startswith("s3://"):
        o = server.storage_options
        b = b.with_storage_options({"aws_endpoint": o["endpoint"], "aws_access_key_id": o["access_key_id"],
                                    "aws_secret_access_key": o["secret_access_key"], "aws_region": o["region"],
                                    "aws_allow_http": "true"})
    rows = pa.Table.from_batches(b.build().read(HudiReadOptions())).select(["id", "v"]).to_pylist()
    return {r["id"]: r["v"] for r in rows}


def _objects(path) -> dict:
    """Every object outside the timeline, with its content."""
    fs = storage_for(path)
    return {f: fs.read_bytes(f) for f in fs.walk_files(path) if "/.hoodie/" not in f}


def test_deltacommits_write_new_log_versions_on_s3(s3_server, s3_tables, tmp_path_factory, monkeypatch):
    assert not S3Storage.supports_append and LocalStorage.supports_append
    monkeypatch.setattr(S3Storage, "append_bytes", _no_append)
    paths = {"s3": f"{s3_tables}/mor", "local": str(tmp_path_factory.mktemp("local") / "mor")}
    for path in paths.values():
        t = hudilite.Table.create(path, **KW, options=V6)
        for ids, v, op in HISTORY:
            t.write(_rows(ids, v), op)
    s3, local = _slices(paths["s3"]), _slices(paths["local"])
    assert _layout(s3) == _layout(local)
    # the partition-b group got a log version from each of the 4 deltacommits, partition a's from 3
    assert _layout(s3) == [("p=a", [1, 2, 3]), ("p=b", [1, 2, 3, 4])]
    for (part, fid, base), versions in s3.items():  # each log file holds one deltacommit's blocks
        d = f"{paths['s3']}/{part}"
        for f in storage_for(d).listdir(d):
            if f.startswith(f".{fid}_{base}.log."):
                assert len({b.instant_time for b in scan_log_file(f"{d}/{f}")}) == 1
    assert _hudi_rs(s3_server, paths["s3"]) == _hudi_rs(s3_server, paths["local"]) == LATEST

    # a deltacommit killed before its commit: rollback deletes the log files it created (CREATE and APPEND
    # markers name them)
    t = hudilite.Table.open(paths["s3"])
    before = _objects(paths["s3"])

    _kill_write(monkeypatch, t, _rows([2, 3, 8, 9], 9))
    # the killed writer left its new log versions (and markers) for the rollback
    assert sorted(v[-1] for v in _slices(paths["s3"]).values()) == [4, 5]
    t = hudilite.Table.open(paths["s3"])
    assert t.services.rollback(force=True)
    assert _objects(paths["s3"]) == before
    assert not list(storage_for(paths["s3"]).walk_files(f"{paths['s3']}/.hoodie/.temp"))  # no marker left
    assert _hudi_rs(s3_server, paths["s3"]) == LATEST

    # compaction folds every version into new base files
    t = hudilite.Table.open(paths["s3"])
    assert t.services.compact(force=True)
    got = t.to_arrow(["id", "v"])
    assert got is not None  # no log file left in the latest slices
    assert {r["id"]: r["v"] for r in got.to_pylist()} == LATEST == _hudi_rs(s3_server, paths["s3"])

    # archival: every run starts a new archive file version (the append above still fails)
    opts = {"hoodie.keep.min.commits": "2", "hoodie.keep.max.commits": "2"}
    assert t.services.archive(opts, force=True)
    t.write(_rows([1], 5), "upsert")
    t.write(_rows([1], 6), "upsert")
    assert t.services.archive(opts, force=True)
    arch = f"{paths['s3']}/.hoodie/archived"
    assert [v for v, _ in list_archive_files(arch)] == [1, 2]
    assert _hudi_rs(s3_server, paths["s3"]) == LATEST | {1: 6}


def _kill_write(monkeypatch, t, rows, op="upsert"):
    """Run a write that is killed before its commit: its files and markers stay for a rollback."""
    def fail(*_a, **_k):
        raise RuntimeError("killed before the commit")

    with monkeypatch.context() as m:
        m.setattr(Transaction, "complete", fail)
        m.setattr(client, "abort_write", lambda *_a: None)
        with pytest.raises(RuntimeError, match="killed before the commit"):
            t.write(rows, op)


def test_rollback_of_a_log_file_with_other_instants_writes_a_new_version_on_s3(s3_server, s3_tables, monkeypatch):
    """A log file that holds committed blocks too (as Java's appending writer leaves them) keeps them: the
    rollback command block goes to the slice's next log version, not appended to the object."""
    path = f"{s3_tables}/mor"
    t = hudilite.Table.create(path, **KW, options=V6)
    t.write(_rows(range(6)), "insert")
    t.write(_rows([2, 4], 2), "upsert")  # partition b: log version 1
    _kill_write(monkeypatch, t, _rows([2], 7))  # version 2, failed
    ((part, fid, base), versions), = _slices(path).items()
    assert versions == [1, 2]
    fs = storage_for(path)
    d = f"{path}/{part}"
    v1, v2 = (f"{d}/{f}" for f in sorted(fs.listdir(d)) if ".log." in f)
    failed = {b.instant_time for b in scan_log_file(v2)}.pop()
    fs.write_bytes(v2, fs.read_bytes(v1) + fs.read_bytes(v2))  # committed blocks ahead of the failed ones
    monkeypatch.setattr(S3Storage, "append_bytes", _no_append)
    assert hudilite.Table.open(path).services.rollback(force=True)
    assert _slices(path) == {(part, fid, base): [1, 2, 3]}
    v3, = (f"{d}/{f}" for f in fs.listdir(d) if ".log.3_" in f)
    assert parse_log_file_name(v3).write_token == "0-0-0"
    (cmd,) = scan_log_file(v3)
    assert isinstance(cmd, CommandBlock) and cmd.is_rollback and cmd.target_instant_time == failed
    assert _hudi_rs(s3_server, path) == {0: 1, 1: 1, 2: 2, 3: 1, 4: 2, 5: 1}


def test_rollback_blocks_and_archive_records_start_new_files_on_s3(s3_tables, monkeypatch):
    s3_root = f"{s3_tables}/root"
    monkeypatch.setattr(S3Storage, "append_bytes", _no_append)
    d = f"{s3_root}/p"
    w = LogWriter(d, "f1", "20260101000000000", "1-0-1")
    w.append([CommandBlock.rollback("20260101000000001", "20260101000000002")])
    w.append([CommandBlock.rollback("20260101000000003", "20260101000000004")])
    assert [parse_log_file_name(f).version for f in sorted(storage_for(d).listdir(d))] == [1, 2]
    with pytest.raises(FileExistsError):
        create_log_file(w.path, [CommandBlock.rollback("20260101000000005", "20260101000000006")])

    arch = f"{s3_root}/.hoodie/archived"
    rec = {"commitTime": "20260101000000001", "actionType": "commit", "actionState": "COMPLETED"}
    first = append_archive_records(arch, [rec])
    second = append_archive_records(arch, [rec | {"commitTime": "20260101000000002"}])
    assert first != second and [v for v, _ in list_archive_files(arch)] == [1, 2]
