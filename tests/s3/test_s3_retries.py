"""Retries with backoff against a misbehaving S3 front (tests/s3/proxy.py before the real server): 503 SlowDown,
500 and reset connections on every verb are retried; a put-if-absent whose answer was lost is not lost to its own
writer; a table write under throttling succeeds; multipart uploads with a lowered part size."""

import pyarrow as pa
import pytest
from obstore.exceptions import GenericError

import hudilite
from hudilite.storage.base import register_storage
from hudilite.storage.s3 import S3Storage, counting, register
from tests.s3.proxy import FaultyProxy

FAST = {"backoff_init_ms": 5, "backoff_max_ms": 20, "retry_timeout_s": 30}


@pytest.fixture
def proxy(s3_server):
    with FaultyProxy(s3_server.endpoint) as p:
        yield p


@pytest.fixture
def fs(s3_server, proxy):
    return S3Storage(s3_server.storage_options | FAST | {"endpoint": proxy.endpoint})


@pytest.mark.parametrize("kind", ["slow_down", "error500", "reset"])
def test_every_verb_is_retried(fs, proxy, s3_bucket, kind):
    root = f"s3://{s3_bucket}/r"
    ops = [("PUT", lambda: fs.put_if_absent(f"{root}/a", b"a"), True),  # conditional
           ("PUT", lambda: fs.write_bytes(f"{root}/b", b"b"), None),
           ("GET", lambda: fs.read_bytes(f"{root}/a"), b"a"),
           ("GET", lambda: sorted(fs.listdir(root)), ["a", "b"]),  # LIST is a GET on the bucket
           ("HEAD", lambda: fs.size(f"{root}/b"), 1),
           ("POST", lambda: fs.delete(f"{root}/b"), True),  # object_store deletes by DeleteObjects
           ("POST", lambda: fs.delete_tree(root), None)]  # DeleteObjects
    for method, op, want in ops:
        failed = proxy.did(kind)
        proxy.fail(2, kind, methods=(method,))
        assert op() == want, method
        assert proxy.did(kind) - failed == 2, f"{method}: the failures were not all met"
    assert not list(fs.walk_files(root))


def test_retries_are_bounded_by_the_options(s3_server, proxy, s3_bucket):
    fs = S3Storage(s3_server.storage_options | FAST | {"endpoint": proxy.endpoint, "max_retries": 1})
    proxy.fail(3, methods=("PUT",))
    with pytest.raises(GenericError, match="503"):
        fs.write_bytes(f"s3://{s3_bucket}/x", b"x")
    assert proxy.did("slow_down", "PUT") == 2  # the attempt and its one retry


def test_put_if_absent_whose_answer_was_lost_is_ours(fs, proxy, s3_bucket):
    p = f"s3://{s3_bucket}/.hoodie/001.commit"
    proxy.drop_after_conditional_put()
    assert fs.put_if_absent(p, b"mine")  # done upstream, answer dropped, the retry answered 412
    assert proxy.did("drop", "PUT") == 1 and proxy.did("forward", "PUT") == 1
    assert fs.read_bytes(p) == b"mine"
    assert not fs.put_if_absent(p, b"mine")  # a 412 on the first attempt: somebody's, not a retry of ours
    q = f"s3://{s3_bucket}/.hoodie/002.commit"
    assert fs.put_if_absent(q, b"theirs")
    proxy.drop_after_conditional_put()  # (412 at once: the object exists; nothing dropped)
    assert not fs.put_if_absent(q, b"mine")
    r = f"s3://{s3_bucket}/.hoodie/003.commit"
    proxy.drop_after_conditional_put()
    assert not fs.create_empty_if_absent(r)  # empty content cannot tell whose it is: a loss (safe)


def test_table_write_through_throttling_and_a_lost_answer(s3_server, proxy, s3_bucket, tmp_path, monkeypatch):
    opts = s3_server.storage_options | FAST | {"endpoint": proxy.endpoint}
    register_storage("s3", lambda _scheme: S3Storage(opts))
    monkeypatch.chdir(tmp_path)
    try:
        path = f"s3://{s3_bucket}/t"
        t = hudilite.Table.create(path, record_key="id", precombine_field="v")
        rows = pa.table({"id": list(range(20)), "v": [1] * 20})
        proxy.fail(6)
        proxy.drop_after_conditional_put()
        t.write(rows, "insert")
        assert proxy.did("slow_down") == 6 and proxy.did("drop") == 1
        assert sorted(r["id"] for r in hudilite.Table.open(path).to_arrow(["id"]).to_pylist()) == list(range(20))
    finally:
        register()


def test_multipart_upload_with_a_lowered_part_size(s3_server, proxy, s3_bucket):
    chunk = 5 << 20  # S3's (and SeaweedFS's) least part size
    fs = S3Storage(s3_server.storage_options | FAST | {"endpoint": proxy.endpoint, "multipart_chunk_bytes": chunk})
    p = f"s3://{s3_bucket}/big.parquet"
    block = bytes(range(256)) * 4096  # 1 MiB
    n = 11  # 2 parts and a short one
    proxy.fail(1, methods=("PUT",))  # a part is throttled once
    with counting() as c:
        with fs.create_data_file(p) as sink:
            for _ in range(n):
                sink.write(block)
    assert c.counts == {"POST": 2, "PUT": 3}
    assert proxy.did("forward", "POST") == 2 and proxy.did("forward", "PUT") == 3 and proxy.did("slow_down") == 1
    assert fs.size(p) == n * len(block)
    assert fs.read_range(p, chunk - 2, 4) == (block * 6)[chunk - 2:chunk + 2]
    with pytest.raises(ValueError, match="multipart_chunk_bytes"):
        S3Storage({"multipart_chunk_bytes": 1 << 20})
