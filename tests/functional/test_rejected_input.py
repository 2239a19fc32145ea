"""Input that must not be silently accepted (issue 27.7): unknown option keys (writes and the CLI), a table
type or precombine field that contradicts the table's, a directory holding another format's data, empty
record keys. Every case: a clear error, and the table / directory byte-identical. (Option values and the CLI's
unknown options are cases of the bad-input catalogue, tests/functional/bad_input_catalogue.py.)"""

import hashlib
import json
import os
import time

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import hudilite
from hudilite.errors import InvalidWriteError
from hudilite.options import BEGIN, OPTIONS, render_doc

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def tree(path):
    """Every file and directory under `path` with its bytes' digest (None: absent)."""
    if not os.path.exists(path):
        return None
    out = {}
    for root, dirs, files in os.walk(path):
        for d in dirs:
            out[os.path.relpath(os.path.join(root, d), path) + "/"] = ""
        for f in files:
            with open(os.path.join(root, f), "rb") as fh:
                out[os.path.relpath(os.path.join(root, f), path)] = hashlib.sha1(fh.read()).hexdigest()
    return out


def batch(ids, v=1, **extra):
    cols = {"id": pa.array(ids, pa.string() if ids and isinstance(ids[0], str) else pa.int64()),
            "v": pa.array([v] * len(ids), pa.int64())}
    cols.update(extra)
    return pa.table(cols)


def refused(path, match, **kw):
    before = tree(path)
    with pytest.raises(InvalidWriteError, match=match):
        hudilite.write(kw.pop("data", batch([1, 2])), path, **kw)
    assert tree(path) == before


@pytest.mark.parametrize("key,hint", [
    ("hoodie.cleaner.commits.retaind", "did you mean hoodie.cleaner.commits.retained"),
    ("hoodie.datasource.write.hive_style_partitionin", "did you mean hoodie.datasource.write.hive_style_partitioning"),
    ("foo.bar", "docs/options.md"),
])
def test_unknown_option_keys_are_rejected(table_path, key, hint):
    refused(table_path, key, record_key="id", options={key: "3"})  # no table is created
    hudilite.write(batch([1]), table_path, record_key="id", precombine_field="v")
    refused(table_path, hint, record_key="id", options={key: "3"})


def test_table_type_and_precombine_must_match_the_table(table_path):
    hudilite.write(batch([1]), table_path, record_key="id", precombine_field="v", table_type="MERGE_ON_READ")
    refused(table_path, "table_type COPY_ON_WRITE does not match the table's MERGE_ON_READ", record_key="id",
            precombine_field="v", table_type="COPY_ON_WRITE")
    refused(table_path, "table_type COPY_ON_WRITE does not match", record_key="id", precombine_field="v",
            options={"hoodie.datasource.write.table.type": "COW"})
    refused(table_path, "precombine_field=None, but the table orders records by 'v'", record_key="id",
            precombine_field=None)
    # left out: the table's own
    hudilite.write(batch([1, 2], v=2), table_path, record_key="id")
    assert hudilite.write(batch([2], v=1), table_path, record_key="id").stats["updated"] == 0  # late: loses


def _plain_parquet(d):
    os.makedirs(os.path.join(d, "dt=1"))
    pq.write_table(batch([1]), os.path.join(d, "dt=1", "part-00000-x.snappy.parquet"))
    open(os.path.join(d, "_SUCCESS"), "w").close()


def _delta(d):
    os.makedirs(os.path.join(d, "_delta_log"))
    with open(os.path.join(d, "_delta_log", "00000000000000000000.json"), "w") as f:
        f.write(json.dumps({"protocol": {"minReaderVersion": 1}}))


def _iceberg(d):
    os.makedirs(os.path.join(d, "metadata"))
    with open(os.path.join(d, "metadata", "v1.metadata.json"), "w") as f:
        f.write("{}")


@pytest.mark.parametrize("make,what", [(_plain_parquet, "data files"), (_delta, "Delta Lake"),
                                       (_iceberg, "Iceberg")])
def test_directory_of_another_format_is_refused(tmp_path, make, what):
    d = str(tmp_path / "other")
    make(d)
    refused(d, what, record_key="id")
    hudilite.write(batch([1]), d, record_key="id", options={"hudilite.write.allow.existing.files": "true"})
    assert os.path.isdir(os.path.join(d, ".hoodie"))


def test_empty_record_keys_are_refused(spark, tmp_path):
    path = str(tmp_path / "t")
    key = r"1 row\(s\) have a null or empty record key \(record key field\(s\): id\)"
    refused(path, key, record_key="id", data=batch(["a", ""]))
    df = spark.createDataFrame([("a", 1), ("", 1)], "id string, v long")
    for op in ("upsert", "bulk_insert"):
        for small in ("false", "true"):  # Spark's tasks, the driver-local writer
            before = tree(path)
            with pytest.raises(InvalidWriteError, match=key):
                hudilite.write(df, path, record_key="id", operation=op,
                               options={"hudilite.write.small.batch.enabled": small})
            assert tree(path) == before
    # complex keys: an empty part is __empty__ (Hudi's rule), all parts null or empty is refused
    two = pa.table({"a": ["x", "", ""], "b": ["", "y", None]})
    refused(path, r"1 row\(s\) have a null or empty record key \(record key field\(s\): a, b\)", record_key=["a", "b"],
            data=two)
    hudilite.write(two.slice(0, 2), path, record_key=["a", "b"])
    keys = sorted(r for r in pq.ParquetDataset(path).read().column("_hoodie_record_key").to_pylist())
    assert keys == ["a:__empty__,b:y", "a:x,b:__empty__"]


def test_a_failed_spark_write_rolls_back_files_its_cancelled_tasks_write_late(spark, tmp_path):
    """One task fails at once (an empty key), another writes its file a second later: Spark fails the job at
    the first failure and cancels the other task asynchronously, so a rollback run at once missed that file
    and left it at the new table's path. The rollback waits for the job's tasks."""
    from pyspark.sql import functions as F

    def key(i):
        if i == 0:
            time.sleep(1.0)  # the slow task: its file is opened after the job has already failed
        return "" if i == 1 else f"k{i}"

    slow_key = F.udf(key, "string")
    df = spark.range(0, 2, 1, 2).select(slow_key("id").alias("id"), F.lit(1).alias("v"))
    path = str(tmp_path / "t")
    with pytest.raises(InvalidWriteError, match="null or empty record key"):
        hudilite.write(df, path, record_key="id", operation="bulk_insert",
                       options={"hoodie.bulkinsert.sort.mode": "NONE"})
    time.sleep(4.0)  # longer than Spark lets a cancelled Python task live
    assert tree(path) is None


def test_docs_options_table_matches_the_declarations():
    with open(os.path.join(ROOT, "docs", "options.md"), encoding="utf-8") as f:
        text = f.read()
    assert BEGIN in text
    assert render_doc(text) == text, "docs/options.md is stale: run scripts/options_doc.py"
    assert len({o.key for o in OPTIONS}) == len(OPTIONS)
