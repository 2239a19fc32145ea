"""The Storage contract, the same assertions on LocalStorage and on S3Storage against a real S3 server."""

import threading
import time

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from hudilite.storage.local import LocalStorage


@pytest.fixture(params=["local", "s3"])
def store(request, tmp_path):
    """(storage, root): a directory on the local file system, or a prefix in a fresh bucket."""
    if request.param == "local":
        return LocalStorage(), str(tmp_path / "root")
    return request.getfixturevalue("s3_storage"), request.getfixturevalue("s3_root")


def _put(fs, path, data):
    fs.makedirs(path.rsplit("/", 1)[0])
    fs.write_bytes(path, data)


def test_write_read_and_metadata(store):
    fs, root = store
    assert not fs.exists(root)
    assert fs.listdir(root) == [] and list(fs.scandir_files(root)) == [] and list(fs.walk_files(root)) == []
    with pytest.raises(FileNotFoundError):
        fs.read_bytes(f"{root}/absent")
    with pytest.raises(FileNotFoundError):
        fs.size(f"{root}/absent")
    before = time.time()
    _put(fs, f"{root}/a/x.bin", b"0123456789")
    assert fs.read_bytes(f"{root}/a/x.bin") == b"0123456789"
    assert fs.exists(f"{root}/a/x.bin") and fs.exists(f"{root}/a") and fs.exists(root)
    assert fs.isdir(f"{root}/a") and not fs.isdir(f"{root}/a/x.bin")
    assert fs.size(f"{root}/a/x.bin") == 10
    assert before - 5 <= fs.mtime(f"{root}/a/x.bin") <= time.time() + 5
    assert fs.read_range(f"{root}/a/x.bin", 2, 3) == b"234"
    assert fs.read_range(f"{root}/a/x.bin", 8, 100) == b"89"  # fewer at the end of the file
    assert fs.read_range(f"{root}/a/x.bin", 10, 5) == b"" and fs.read_range(f"{root}/a/x.bin", 12, 1) == b""
    fs.write_bytes(f"{root}/a/x.bin", b"new")  # replaces
    assert fs.read_bytes(f"{root}/a/x.bin") == b"new"


def test_put_if_absent_and_create_empty(store):
    fs, root = store
    fs.makedirs(f"{root}/t")
    assert fs.put_if_absent(f"{root}/t/1.commit", b"first") is True
    assert fs.put_if_absent(f"{root}/t/1.commit", b"second") is False
    assert fs.read_bytes(f"{root}/t/1.commit") == b"first"
    assert fs.create_empty_if_absent(f"{root}/t/2.requested") is True
    assert fs.create_empty_if_absent(f"{root}/t/2.requested") is False
    assert fs.read_bytes(f"{root}/t/2.requested") == b""
    assert fs.put_if_absent(f"{root}/t/2.requested", b"x") is False


def test_append(store):
    fs, root = store
    fs.makedirs(root)
    assert fs.append_bytes(f"{root}/log", [b"ab", b"c"]) == 0
    assert fs.append_bytes(f"{root}/log", [b"de"]) == 3
    assert fs.read_bytes(f"{root}/log") == b"abcde"


def test_listing(store):
    fs, root = store
    for rel in ("p1/a.parquet", "p1/b.log", "p1/sub/c", "p2/d", "top"):
        _put(fs, f"{root}/{rel}", rel.encode())
    assert sorted(fs.listdir(root)) == ["p1", "p2", "top"]
    assert sorted(fs.listdir(f"{root}/p1")) == ["a.parquet", "b.log", "sub"]
    entries = sorted(fs.scandir_files(f"{root}/p1"), key=lambda e: e.name)
    assert [(e.name, e.path) for e in entries] == [("a.parquet", f"{root}/p1/a.parquet"), ("b.log", f"{root}/p1/b.log")]
    assert [e.stat().st_size for e in entries] == [len(b"p1/a.parquet"), len(b"p1/b.log")]
    assert all(e.is_file() for e in entries)
    assert sorted(fs.walk_files(root)) == sorted(f"{root}/{r}" for r in
                                                 ("p1/a.parquet", "p1/b.log", "p1/sub/c", "p2/d", "top"))
    # a prefix that is only a name's beginning is not a directory
    assert fs.listdir(f"{root}/p") == [] and not fs.isdir(f"{root}/p")


def test_delete_rename_and_delete_tree(store):
    fs, root = store
    _put(fs, f"{root}/d/a", b"a")
    _put(fs, f"{root}/d/b", b"b")
    _put(fs, f"{root}/d/e/f", b"f")
    _put(fs, f"{root}/keep", b"k")
    fs.rename(f"{root}/d/a", f"{root}/d/b")  # replaces the file there
    assert fs.read_bytes(f"{root}/d/b") == b"a" and not fs.exists(f"{root}/d/a")
    assert fs.delete(f"{root}/d/b") is True
    assert fs.delete(f"{root}/d/b") is False
    fs.delete_tree(f"{root}/d")
    assert not fs.exists(f"{root}/d") and list(fs.walk_files(root)) == [f"{root}/keep"]
    fs.delete_tree(f"{root}/nothing")  # absent: nothing to do


def test_parquet_write_and_random_access_read(store):
    fs, root = store
    fs.makedirs(f"{root}/p")
    t = pa.table({"k": pa.array(range(50_000), pa.int64()), "v": [f"v{i}" for i in range(50_000)]})
    size = fs.write_parquet(f"{root}/p/a.parquet", [t.slice(0, 20_000), t.slice(20_000)], row_group_size=10_000)
    assert size == fs.size(f"{root}/p/a.parquet")
    with fs.open_input(f"{root}/p/a.parquet") as f:
        pf = pq.ParquetFile(f)
        assert pf.metadata.num_rows == 50_000 and pf.metadata.num_row_groups == 5
        assert pf.read_row_group(3, columns=["k"]).column("k").to_pylist() == list(range(30_000, 40_000))
    with fs.create_data_file(f"{root}/p/b.parquet") as sink:
        with pq.ParquetWriter(sink, t.schema) as w:
            w.write_table(t)
    with fs.open_input(f"{root}/p/b.parquet") as f:
        assert pq.read_table(f).equals(t)


def test_put_if_absent_race_has_exactly_one_winner(store):
    fs, root = store
    fs.makedirs(root)
    path = f"{root}/20260101000000000.commit"
    start = threading.Barrier(8)
    results: dict[int, bool] = {}

    def contend(i):
        start.wait()
        results[i] = fs.put_if_absent(path, f"writer {i}".encode())

    threads = [threading.Thread(target=contend, args=(i,)) for i in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    winners = [i for i, won in results.items() if won]
    assert len(results) == 8 and len(winners) == 1
    assert fs.read_bytes(path) == f"writer {winners[0]}".encode()
