"""The Spark engine on s3:// tables against the real S3 server: executor tasks write base, log, change-image and
overlay files through S3Storage with the table's own storage options (the process-wide s3:// backend, in the
driver and in the Python workers, reaches nothing), and reads scan base files with the Arrow scan (the session's
JVM has no hadoop-aws). Copy-on-write and merge-on-read: insert, upsert, delete, snapshot, time travel, changes,
compaction and clean give the same rows as the same operations on a local table; hudi-rs reads the s3:// table."""

import pyarrow as pa
import pytest

import hudilite
from hudilite.reader import overlay_cache
from hudilite.spark import read as spark_read
from hudilite.spark.files import jvm_scheme
from hudilite.storage import storage_for
from hudilite.storage.base import unbind_storage
from hudilite.storage.s3 import S3Storage, register

NOWHERE = {"endpoint": "http://127.0.0.1:9", "allow_http": "true", "access_key_id": "x", "secret_access_key": "y",
           "region": "us-east-1", "max_retries": 0, "retry_timeout_s": 1}


@pytest.fixture
def s3_table(s3_server, s3_bucket):
    """An s3:// table location reachable only through its storage options: the driver's default backend points at
    a closed port; the Python workers have only the AWS environment of the JVM (no endpoint of the test server)."""
    register(NOWHERE)
    paths = []
    yield lambda name: paths.append(f"s3://{s3_bucket}/{name}") or paths[-1]
    for p in paths:
        unbind_storage(p)
    register()


def _df(spark, ids, v=1):
    ids = list(ids)
    return spark.createDataFrame(pa.table({"id": ids, "v": [v] * len(ids), "name": [f"n{i}" for i in ids],
                                           "p": ["a" if i % 2 else "b" for i in ids]}).to_pandas())


def _rows(df, cols=("id", "v", "name", "p")):
    return sorted(tuple(r[c] for c in cols) for r in df.select(*cols).collect())


def _life(spark, path, table_type, opts):
    """Every operation once; returns what each read saw."""
    kw = {"record_key": "id", "precombine_field": "v", "partition_by": ("p",), "table_type": table_type,
          "storage_options": opts}
    c1 = hudilite.write(_df(spark, range(20)), path, operation="insert", **kw)
    c2 = hudilite.write(_df(spark, range(10, 30), v=2), path, operation="upsert", **kw)
    hudilite.write(_df(spark, [0, 1, 12]), path, operation="delete", **kw)
    c4 = hudilite.write(_df(spark, range(25, 35), v=3), path, operation="upsert", **kw)
    seen = {"snapshot": _rows(hudilite.read(spark, path, storage_options=opts)),
            "as_of_c1": _rows(hudilite.read(spark, path, as_of=c1, storage_options=opts)),
            "as_of_c2": _rows(hudilite.read(spark, path, as_of=c2, storage_options=opts)),
            "incremental": _rows(hudilite.read(spark, path, begin=c2, end=c4, storage_options=opts)),
            "changes": _rows(hudilite.changes(spark, path, c1, c4, storage_options=opts),
                             ("_change_op", "id", "v", "name", "p")),
            "changes_before": _rows(hudilite.changes(spark, path, c1, c2, before_image=True, storage_options=opts),
                                    ("_change_op", "id", "v", "name", "p"))}
    seen["columns_incremental"] = sorted(
        r[0] for r in hudilite.read(spark, path, begin=c2, end=c4, columns=["id"], storage_options=opts).collect())
    t = hudilite.Table.open(path, spark=spark, storage_options=opts)
    seen["scan"] = t.info().scan.split(" (")[0]  # "Arrow in Spark tasks (...)" on s3://, native locally
    if table_type == "MERGE_ON_READ":
        seen["read_optimized"] = _rows(hudilite.read(spark, path, read_optimized=True, storage_options=opts))
        # the merged scan with row ids (not whole slices merged in Python), with overlay files written by
        # executor tasks beside the table and without
        spark.conf.set(overlay_cache.MIN_LOG_BYTES_CONF, "0")
        spark.conf.set(spark_read.SMALL_SLICE_CONF, "0")
        try:
            for cache in ("true", "false"):
                spark.conf.set(overlay_cache.CONF, cache)
                seen[f"merged_scan_{cache}"] = _rows(hudilite.read(spark, path, storage_options=opts))
            seen["overlay_files"] = any(f"/{overlay_cache.DIR}/" in f for f in storage_for(path).walk_files(path))
        finally:
            for k in (overlay_cache.CONF, overlay_cache.MIN_LOG_BYTES_CONF, spark_read.SMALL_SLICE_CONF):
                spark.conf.unset(k)
        assert t.services.compact(force=True)
        seen["compacted"] = _rows(t.read())
    t.services.clean({"hoodie.cleaner.policy": "KEEP_LATEST_FILE_VERSIONS",
                      "hoodie.cleaner.fileversions.retained": "1"})
    seen["cleaned"] = _rows(t.read())
    seen["filtered"] = _rows(hudilite.read(spark, path, filters=[("p", "=", "a"), ("v", ">=", 2)],
                                           storage_options=opts))
    # column pruning: the projection reaches the scan (the Arrow scan on s3 fetches only these columns); a filter
    # on a column left out still applies, and the rows equal the full read's
    pruned = hudilite.read(spark, path, columns=["name", "id"], filters=[("v", ">=", 2)], storage_options=opts)
    assert pruned.columns == ["name", "id"]
    seen["columns"] = sorted(tuple(r) for r in pruned.collect())
    assert seen["columns"] == sorted((n, i) for i, v, n, _p in _rows(t.read()) if v >= 2)
    with pytest.raises(ValueError, match="nope"):
        hudilite.read(spark, path, columns=["id", "nope"], storage_options=opts)
    return seen


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_spark_life_on_s3_equals_local(spark, s3_server, s3_table, tmp_path, table_type):
    assert jvm_scheme(spark, "s3") is None  # no hadoop-aws: the Arrow scan serves the reads
    opts = s3_server.storage_options
    path = s3_table(table_type.lower())
    on_s3 = _life(spark, path, table_type, opts)
    local = _life(spark, str(tmp_path / "t"), table_type, None)
    assert on_s3.pop("scan") == "Arrow in Spark tasks" and local.pop("scan") == "Spark native parquet"
    assert on_s3 == local
    assert on_s3["columns_incremental"] == sorted(r[0] for r in on_s3["incremental"])
    latest = {i: 1 for i in range(2, 10)} | {i: 2 for i in range(10, 25) if i != 12} | {i: 3 for i in range(25, 35)}
    assert {r[0]: r[1] for r in on_s3["snapshot"]} == latest
    assert {r[0] for r in on_s3["as_of_c1"]} == set(range(20))
    files = list(S3Storage(opts).walk_files(path))
    assert any(f.endswith(".parquet") for f in files)
    if table_type == "MERGE_ON_READ":
        assert on_s3["read_optimized"] != on_s3["snapshot"]  # the logs held the updates until compaction
        assert on_s3["compacted"] == on_s3["snapshot"]
        assert on_s3["merged_scan_true"] == on_s3["merged_scan_false"] == on_s3["snapshot"]
        assert on_s3["overlay_files"], "no overlay file was written"

    # hudi-rs reads the same table through its own storage options (object_store's keys)
    from hudi import HudiReadOptions, HudiTableBuilder

    rs_options = {"aws_endpoint": opts["endpoint"], "aws_access_key_id": opts["access_key_id"],
                  "aws_secret_access_key": opts["secret_access_key"], "aws_region": opts["region"],
                  "aws_allow_http": "true"}
    batches = HudiTableBuilder.from_base_uri(path).with_storage_options(rs_options).build().read(HudiReadOptions())
    rows = pa.Table.from_batches(batches).select(["id", "v", "name", "p"]).to_pylist()
    assert sorted((r["id"], r["v"], r["name"], r["p"]) for r in rows) == on_s3["cleaned"]


def test_captured_bindings_cover_the_table_only_and_install_once(s3_server):
    from hudilite.storage import bind_storage_options, capture_bindings, install_bindings

    opts = s3_server.storage_options
    bind_storage_options("s3://b/w/t", opts)
    try:
        got = capture_bindings("s3://b/w/t/p=a/f.parquet")
        assert got == (("s3://b/w/t", opts),)
        assert capture_bindings("s3://b/w/t2") == () and capture_bindings("s3://b/w") == ()
        install_bindings(got)  # a worker: binds (here the driver's binding is replaced by an equal one) ...
        first = storage_for("s3://b/w/t/x")
        install_bindings(got)  # ... and a second task in the same worker keeps the backend and its clients
        assert storage_for("s3://b/w/t/x") is first
        install_bindings((("s3://b/w/t", {**opts, "max_retries": 1}),))  # other options: bound anew
        assert storage_for("s3://b/w/t/x") is not first
    finally:
        unbind_storage("s3://b/w/t")
