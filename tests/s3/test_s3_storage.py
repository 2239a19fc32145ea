"""S3Storage specifics against a real S3 server: compare-and-swap, multipart uploads, request counts, options."""

import pytest

from hudilite.storage.base import registered_storage
from hudilite.storage.s3 import MULTIPART_CHUNK, S3Storage, counting, register, request_counts, resolve_options


def test_compare_and_swap(s3_storage, s3_root):
    fs, p = s3_storage, f"{s3_root}/.hoodie/hoodie.properties"
    v1 = fs.create_versioned(p, b"a=1")
    assert v1 and fs.create_versioned(p, b"a=2") is None
    data, v = fs.read_versioned(p)
    assert (data, v) == (b"a=1", v1)
    v2 = fs.replace_if_match(p, b"a=2", v1)
    assert v2 and v2 != v1
    assert fs.replace_if_match(p, b"a=3", v1) is None  # a stale version loses
    assert fs.read_bytes(p) == b"a=2"
    assert fs.replace_if_match(f"{s3_root}/absent", b"x", v1) is None
    with pytest.raises(FileNotFoundError):
        fs.read_versioned(f"{s3_root}/absent")


def test_multipart_upload_of_a_large_data_file(s3_storage, s3_root):
    fs, p = s3_storage, f"{s3_root}/big.parquet"
    block = bytes(range(256)) * 4096  # 1 MiB
    n = 2 * MULTIPART_CHUNK // len(block) + 3  # two full parts and a short one
    with counting() as c:
        with fs.create_data_file(p) as sink:
            for _ in range(n):
                sink.write(block)
    assert c.counts == {"POST": 2, "PUT": 3}
    assert fs.size(p) == n * len(block)
    assert fs.read_range(p, MULTIPART_CHUNK - 2, 4) == (block * 9)[MULTIPART_CHUNK - 2:MULTIPART_CHUNK + 2]


def test_request_counts_per_verb(s3_storage, s3_root):
    fs = s3_storage
    with counting() as c:
        fs.put_if_absent(f"{s3_root}/t/1.commit", b"x")
        fs.put_if_absent(f"{s3_root}/t/1.commit", b"y")
        fs.listdir(f"{s3_root}/t")
        fs.read_bytes(f"{s3_root}/t/1.commit")
        fs.size(f"{s3_root}/t/1.commit")
        fs.delete(f"{s3_root}/t/1.commit")
    assert c.counts == {"PUT": 2, "LIST": 1, "GET": 1, "HEAD": 2, "DELETE": 1}
    assert c.total == 7
    assert request_counts()["PUT"] >= 2  # the process-wide counters include the block's


def test_parquet_footer_and_column_cost_few_requests(s3_storage, s3_root):
    import pyarrow as pa
    import pyarrow.parquet as pq

    fs, p = s3_storage, f"{s3_root}/f.parquet"
    fs.write_parquet(p, [pa.table({f"c{i}": pa.array(range(20_000)) for i in range(4)})])
    with counting() as c:
        with fs.open_input(p) as f:
            assert pq.read_table(f, columns=["c2"]).column(0).to_pylist() == list(range(20_000))
    assert c.counts == {"HEAD": 1, "GET": 1}  # a small file: one block holds footer and column


def test_options_and_environment(monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:1")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "env-key")
    monkeypatch.delenv("AWS_REGION", raising=False)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    o = resolve_options({"aws_access_key_id": "given", "aws_virtual_hosted_style_request": "true"})
    assert o["access_key_id"] == "given" and o["endpoint"] == "http://127.0.0.1:1"
    assert o["region"] == "eu-west-1" and o["path_style"] is False
    with pytest.raises(ValueError, match="unknown S3 storage option"):
        resolve_options({"endpont": "x"})
    with pytest.raises(ValueError, match="not an S3 URI"):
        S3Storage({}).read_bytes("gs://b/k")


def test_s3_and_s3a_are_one_store(s3_server, s3_root):
    register(s3_server.storage_options)
    try:
        s3, s3a = registered_storage("s3"), registered_storage("s3a")
        assert isinstance(s3, S3Storage) and isinstance(s3a, S3Storage)
        s3.write_bytes(f"{s3_root}/k", b"v")
        assert s3a.read_bytes(f"{s3_root}/k".replace("s3://", "s3a://", 1)) == b"v"
    finally:
        register()  # back to the environment's configuration
