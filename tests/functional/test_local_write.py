"""Writes of Arrow data without Spark jobs (hudilite/writer/local.py): the same table as the Spark write of the
same batches (rows, commit stats, file groups, change reads), read identically by hudi-rs, and bad input
rejected with the table left byte-identical."""

import hashlib
import os
import random

import pyarrow as pa
import pytest

import hudilite
from hudilite.spark.changes import changes
from tests.hudi_rs import read_hudi_rs

COLS = ["id", "k2", "version", "dt", "name"]


def _batch(rng, n, key_space, version_base):
    ids = [rng.randrange(key_space) for _ in range(n)]
    return pa.table({
        "id": pa.array(ids, pa.int64()),
        "k2": pa.array([f"s{i % 5}" for i in ids], pa.string()),
        "version": pa.array([version_base + rng.randrange(20) for _ in ids], pa.int64()),
        "dt": pa.array([f"2024-01-0{1 + i % 3}" for i in ids], pa.string()),
        "name": pa.array([f"n{rng.randrange(1000)}" for _ in ids], pa.string()),
        "_hoodie_is_deleted": pa.array([rng.random() < 0.15 for _ in ids], pa.bool_()),
    })


def _model_apply(model, batch, complex_key, tombstones=None):
    """Event-time upsert rules, in Python: per key the highest version of the batch (ties: the later row);
    it replaces the stored row when its version is >= the stored one; a winning delete removes the key.
    Merge-on-read (`tombstones`, until compaction): a delete stays in the log with its version, and a later
    record with a lower version loses against it."""
    latest = {}
    for r in batch.to_pylist():
        k = (r["id"], r["k2"]) if complex_key else r["id"]
        if k not in latest or r["version"] >= latest[k]["version"]:
            latest[k] = r
    for k, r in latest.items():
        old = model.get(k)
        if old is not None and r["version"] < old["version"]:
            continue
        if tombstones is not None and r["version"] < tombstones.get(k, r["version"]):
            continue
        if r["_hoodie_is_deleted"]:
            if tombstones is not None and (old is not None or k in tombstones):
                tombstones[k] = r["version"]
            model.pop(k, None)
        else:
            model[k] = {c: r[c] for c in COLS}


def _rows(spark, path, **kw):
    return sorted(tuple(r) for r in hudilite.read(spark, path, **kw).select(*COLS).collect())


def _rs_rows(path):
    t = read_hudi_rs(path)
    return sorted(zip(*[t.column(c).to_pylist() for c in COLS])) if t is not None else []


def _groups(path):
    return len({f.split("_")[0] for _, _, fs in os.walk(path) if ".hoodie" not in _ for f in fs
                if f.endswith(".parquet")})


@pytest.mark.parametrize("table_type,complex_key,partitioned,seed", [
    ("COPY_ON_WRITE", False, True, 1), ("COPY_ON_WRITE", True, False, 2), ("MERGE_ON_READ", False, True, 3),
    ("MERGE_ON_READ", True, True, 4)])
def test_arrow_write_equals_spark_write(spark, tmp_path, table_type, complex_key, partitioned, seed):
    rng = random.Random(int(os.environ.get("HUDILITE_TEST_SEED", seed)))
    key = ["id", "k2"] if complex_key else "id"
    parts = ("dt",) if partitioned else ()
    local, remote = str(tmp_path / "arrow"), str(tmp_path / "spark")
    model, instants = {}, []
    tombstones = {} if table_type == "MERGE_ON_READ" else None
    for step in range(3):
        b = _batch(rng, 60, 80, step * 10)
        kw = dict(record_key=key, precombine_field="version", partition_by=parts, table_type=table_type,
                  options={"hoodie.parquet.small.file.limit": "0"} if step == 0 else None)
        c1 = hudilite.write(b, local, **kw)
        c2 = hudilite.write(spark.createDataFrame(b.to_pandas()), remote, **kw)
        instants.append(c1)
        for s in ("inserted", "updated", "deleted", "ignored"):
            assert c1.stats[s] == c2.stats[s], (step, s, c1.stats, c2.stats)
        _model_apply(model, b, complex_key, tombstones)
        expect = sorted(tuple(r[c] for c in COLS) for r in model.values())
        assert _rows(spark, local) == expect
        assert _rows(spark, remote) == expect
        assert _rs_rows(local) == expect  # hudi-rs reads the Arrow-written table
        assert _groups(local) == _groups(remote)
    # change reads of the last commit and time travel see the same as on the Spark-written table
    assert _rows(spark, local, as_of=instants[0]) != _rows(spark, local)

    def ch(path, b, e):
        return sorted(tuple(r) for r in changes(spark, path, begin=b, end=e).select(*COLS, "_change_op").collect())

    ri = _instants(remote)
    assert ch(local, instants[1], instants[2]) == ch(remote, ri[1], ri[2])


def _instants(path):
    from hudilite.table import HoodieTable

    return [i.timestamp for i in HoodieTable.open(path).timeline.completed()]


def test_arrow_operations(spark, tmp_path):
    path = str(tmp_path / "t")
    t = pa.table({"id": pa.array(range(10), pa.int64()), "v": pa.array([1] * 10, pa.int64()),
                  "p": pa.array(["a", "b"] * 5)})
    hudilite.write(t, path, record_key="id", precombine_field="v", partition_by="p", operation="bulk_insert")
    assert sorted(r["id"] for r in hudilite.read(spark, path).collect()) == list(range(10))
    c = hudilite.write(t.slice(0, 3).select(["id", "p"]), path, record_key="id", operation="delete")
    assert c.stats["deleted"] == 3
    assert sorted(r["id"] for r in hudilite.read(spark, path).collect()) == list(range(3, 10))
    ow = pa.table({"id": pa.array([100], pa.int64()), "v": pa.array([1], pa.int64()), "p": ["a"]})
    hudilite.write(ow, path, record_key="id", precombine_field="v", operation="insert_overwrite")
    assert sorted(r["id"] for r in hudilite.read(spark, path).collect()) == [3, 5, 7, 9, 100]
    # record batches and dictionary / narrow types are stored as Spark would store them
    rb = pa.record_batch({"id": pa.array([200], pa.int64()), "v": pa.array([1], pa.uint8()),
                          "p": pa.array(["b"]).dictionary_encode()})
    hudilite.write(rb, path, record_key="id", precombine_field="v")
    assert sorted(r["id"] for r in hudilite.read(spark, path).collect()) == [3, 5, 7, 9, 100, 200]
    assert _rs_rows_ids(path) == [3, 5, 7, 9, 100, 200]


def _rs_rows_ids(path):
    return sorted(read_hudi_rs(path).column("id").to_pylist())


def _digest(path):
    h = hashlib.sha256()
    for root, dirs, files in sorted(os.walk(path)):
        dirs.sort()
        for f in sorted(files):
            if f.endswith(".lock"):
                continue
            p = os.path.join(root, f)
            h.update(p.encode())
            with open(p, "rb") as fh:
                h.update(fh.read())
    return h.hexdigest()


@pytest.mark.parametrize("bad,message", [
    (pa.table({"id": pa.array([1, None], pa.int64()), "v": pa.array([1, 1], pa.int64()), "p": ["a", "a"]}),
     "null or empty record key"),
    (pa.table({"id": pa.array([1, 2], pa.int64()), "v": pa.array([1, None], pa.int64()), "p": ["a", "a"]}),
     "null precombine"),
    (pa.table({"id": pa.array([1.5], pa.float64()), "v": pa.array([1], pa.int64()), "p": ["a"]}),
     "column 'id': a record key column cannot change type from int64 to double"),
    (pa.table({"id": pa.array([1], pa.int64()), "v": pa.array([1], pa.int64()), "p": ["a/b"]}),
     "may not contain '/'"),
    (pa.table({"id": pa.array([1], pa.int64()), "v": pa.array(["x"], pa.string()), "p": ["a"]}),
     "v"),
])
def test_arrow_bad_input_leaves_table_unchanged(spark, tmp_path, bad, message):
    path = str(tmp_path / "t")
    t = pa.table({"id": pa.array([1, 2, 3], pa.int64()), "v": pa.array([1, 1, 1], pa.int64()),
                  "p": ["a", "a", "b"]})
    hudilite.write(t, path, record_key="id", precombine_field="v", partition_by="p")
    before = _digest(path)
    with pytest.raises(hudilite.InvalidWriteError, match=message):
        hudilite.write(bad, path, record_key="id", precombine_field="v", partition_by="p")
    assert _digest(path) == before


def test_arrow_keys_other_than_integers_and_strings_ask_for_spark(tmp_path):
    path = str(tmp_path / "new")
    bad = pa.table({"id": pa.array([1.5], pa.float64()), "v": pa.array([1], pa.int64())})
    with pytest.raises(hudilite.InvalidWriteError, match=r"Arrow input: record key / partition columns \(id "
                                                         r"double\) must be integer or string columns"):
        hudilite.write(bad, path, record_key="id", precombine_field="v")
    assert not os.path.exists(path)


def test_arrow_first_write_failure_leaves_no_table(tmp_path):
    path = str(tmp_path / "new")
    bad = pa.table({"id": pa.array([None], pa.int64()), "v": pa.array([1], pa.int64())})
    with pytest.raises(hudilite.InvalidWriteError):
        hudilite.write(bad, path, record_key="id", precombine_field="v")
    assert not os.path.exists(os.path.join(path, ".hoodie", "hoodie.properties"))


class _ArrowStream:
    """An object that only exports an Arrow stream (the PyCapsule interface polars and DuckDB implement)."""

    def __init__(self, table: pa.Table):
        self._table = table

    def __arrow_c_stream__(self, requested_schema=None):
        return self._table.__arrow_c_stream__(requested_schema)


def test_pandas_readers_and_arrow_streams_are_written_on_the_driver(tmp_path):
    """A pandas DataFrame (its index left out), a RecordBatchReader and any object exporting an Arrow stream are
    written like a pyarrow Table (before: each failed with "'DataFrame' object has no attribute 'sparkSession'");
    other objects are refused naming what can be written, and nothing is written."""
    import pandas as pd

    path = str(tmp_path / "t")
    kw = dict(record_key="id", precombine_field="v")
    frame = pd.DataFrame({"id": pd.array([1, 2], dtype="Int64"), "v": [1, 1], "s": pd.array(["a", None], "string"),
                          "c": pd.Categorical(["x", "y"])}, index=[10, 20])
    hudilite.write(frame, path, **kw)
    schema = pa.schema([("id", pa.int64()), ("v", pa.int64()), ("s", pa.string()), ("c", pa.string())])
    reader = pa.RecordBatchReader.from_batches(schema, [pa.record_batch([[2], [2], ["b"], ["z"]], schema=schema)])
    hudilite.write(reader, path, **kw)
    hudilite.write(_ArrowStream(pa.table({"id": [3], "v": [1], "s": ["c"], "c": ["w"]}, schema=schema)), path, **kw)
    got = hudilite.Table(path).to_arrow(["id", "v", "s", "c"])
    assert sorted(got.to_pylist(), key=lambda r: r["id"]) == [
        {"id": 1, "v": 1, "s": "a", "c": "x"}, {"id": 2, "v": 2, "s": "b", "c": "z"},
        {"id": 3, "v": 1, "s": "c", "c": "w"}]
    assert "__index_level_0__" not in hudilite.Table(path).schema().names
    before = sorted(os.walk(path))
    for bad, what in (({"id": [4], "v": [1]}, "a dict"), ([], "an empty list"), (None, "a NoneType")):
        with pytest.raises(hudilite.InvalidWriteError, match=f"cannot write {what}: write a Spark DataFrame"):
            hudilite.write(bad, path, **kw)
    mixed = pd.DataFrame({"id": [4, 5], "v": [1, 1], "s": [1, "a"], "c": ["u", "v"]})  # numbers and strings
    with pytest.raises(hudilite.InvalidWriteError, match="cannot read the DataFrame as Arrow data: .*column s"):
        hudilite.write(mixed, path, **kw)
    assert sorted(os.walk(path)) == before
