"""Per-table `storage_options`: two tables on the S3 server in one process, each reached through its own options
while the process-wide s3:// backend points at nothing; bad keys and local paths."""

import pyarrow as pa
import pytest

import hudilite
from hudilite.storage import storage_for
from hudilite.storage.base import unbind_storage
from hudilite.storage.s3 import S3Storage, register


def _rows(ids, v=1):
    ids = list(ids)
    return pa.table({"id": ids, "v": [v] * len(ids), "p": ["a" if i % 2 else "b" for i in ids]})


@pytest.fixture
def nowhere_default(s3_admin):
    """The process-wide s3:// backend refuses at once: only a table's own options can reach the server."""
    register({"endpoint": "http://127.0.0.1:9", "allow_http": "true", "access_key_id": "x",
              "secret_access_key": "y", "region": "us-east-1", "max_retries": 0, "retry_timeout_s": 1})
    bound = []
    yield bound
    for loc in bound:
        unbind_storage(loc)
    register()


def test_two_tables_with_their_own_options(s3_server, s3_admin, nowhere_default):
    import uuid

    buckets = [f"t-{uuid.uuid4().hex[:20]}" for _ in range(2)]
    for b in buckets:
        s3_admin.create_dir(b)
    try:
        opts = s3_server.storage_options
        # the same server under another endpoint spelling: a second client with its own settings
        other = {**opts, "endpoint": opts["endpoint"].rstrip("/") + "/"}
        p1, p2 = f"s3://{buckets[0]}/w/t1", f"s3://{buckets[1]}/t2"
        nowhere_default.extend([p1, p2])
        hudilite.write(_rows(range(6)), p1, record_key="id", precombine_field="v", partition_by=("p",),
                       storage_options=opts)
        t2 = hudilite.Table.create(p2, record_key="id", precombine_field="v", storage_options=other)
        t2.write(_rows(range(3), v=7), "insert")
        fs1, fs2 = storage_for(p1 + "/.hoodie/hoodie.properties"), storage_for(p2)
        assert isinstance(fs1, S3Storage) and isinstance(fs2, S3Storage) and fs1 is not fs2
        assert fs1.options["endpoint"] == opts["endpoint"] and fs2.options["endpoint"] == other["endpoint"]
        got1 = hudilite.Table.open(p1, storage_options=opts).to_arrow(["id", "v"]).to_pylist()
        got2 = hudilite.Table.open(p2, storage_options=other).to_arrow(["id", "v"]).to_pylist()
        assert sorted((r["id"], r["v"]) for r in got1) == [(i, 1) for i in range(6)]
        assert sorted((r["id"], r["v"]) for r in got2) == [(i, 7) for i in range(3)]
        # a table without options of its own gets the process-wide backend, which reaches nothing here
        with pytest.raises(Exception):
            hudilite.Table.open(f"s3://{buckets[0]}/w/t3")
        # wrong credentials for one table break that table only
        bad = f"s3://{buckets[0]}/bad"
        nowhere_default.append(bad)
        with pytest.raises(Exception):
            hudilite.write(_rows([1]), bad, record_key="id",
                           storage_options={**opts, "secret_access_key": "wrong", "max_retries": 0})
        assert len(hudilite.Table.open(p1).to_arrow(["id"])) == 6  # still bound from before
    finally:
        for b in buckets:
            s3_admin.delete_dir(b)


def test_unknown_option_names_the_key(s3_server):
    with pytest.raises(ValueError, match="endpiont"):
        hudilite.Table.open("s3://b/t", storage_options={"endpiont": s3_server.endpoint})
    with pytest.raises(ValueError, match="endpiont"):
        hudilite.write(_rows([1]), "s3://b/t", record_key="id", storage_options={"endpiont": "x"})
    assert storage_for("s3://b/t") is not None  # nothing was bound


def test_local_paths_take_no_storage_options(tmp_path):
    with pytest.raises(ValueError, match="'region'.*local path"):
        hudilite.write(_rows([1]), str(tmp_path / "t"), record_key="id", storage_options={"region": "x"})
    assert not (tmp_path / "t").exists()
    hudilite.write(_rows([1]), str(tmp_path / "t"), record_key="id", storage_options={})
    assert len(hudilite.Table.open(str(tmp_path / "t")).to_arrow(["id"])) == 1


def test_binding_covers_the_table_and_nothing_beside_it():
    from hudilite.storage.base import bind_storage_options, bound_storage, registered_storage

    opts = {"endpoint": "http://127.0.0.1:9", "allow_http": "true", "region": "r1"}
    try:
        bind_storage_options("s3://b/w/t", opts)
        bind_storage_options("s3://b/w/t/inner", {**opts, "region": "r2"})
        fs = bound_storage("s3://b/w/t/.hoodie/hoodie.properties")
        assert fs is not None and fs.options["region"] == "r1"
        assert bound_storage("s3://b/w/t/inner/x").options["region"] == "r2"  # the nearest location wins
        assert bound_storage("s3://b/w/t") is fs
        for beside in ("s3://b/w/t2", "s3://b/w", "s3://c/w/t"):  # a sibling sharing a prefix, a parent, a bucket
            assert bound_storage(beside) is None
            assert storage_for(beside) is registered_storage("s3")
        bind_storage_options("s3://b/w/t", dict(opts))  # equal options: the same backend and clients
        assert bound_storage("s3://b/w/t/x") is fs
    finally:
        unbind_storage("s3://b/w/t")
        unbind_storage("s3://b/w/t/inner")
