"""The dbt adapter's pure-Python parts: config resolution, profile, catalog snapshot directories."""

import os
import subprocess
import sys

import pytest
from dbt_common.exceptions import DbtRuntimeError

from dbt.adapters.hudilite.change_batches import in_bounds, parse_bound, window_of, window_sql
from dbt.adapters.hudilite.credentials import HudiliteCredentials
from dbt.adapters.hudilite.model_config import ModelSpec, is_hidden_column
from hudilite import metastore as cat


def test_model_spec_dbt_spark_hudi_aliases():
    s = ModelSpec.from_config({"options": {"primaryKey": "id", "preCombineField": "ts", "type": "cow",
                                           "hoodie.parquet.max.file.size": 1024, "owner": "team"},
                               "incremental_strategy": "merge", "partition_by": "dt"})
    assert s.record_key == ["id"] and s.precombine_field == "ts" and s.table_type == "COPY_ON_WRITE"
    assert s.strategy == "upsert" and s.partition_by == ["dt"]
    assert s.hoodie_options == {"hoodie.parquet.max.file.size": "1024"}
    assert s.table_props == {"owner": "team"}
    s = ModelSpec.from_config({"unique_key": ["a", "b"], "tblproperties": {"hoodie.x": "1"},
                               "incremental_strategy": "delete+insert", "table_type": "mor"})
    assert s.record_key == ["a", "b"] and s.hoodie_options == {"hoodie.x": "1"}
    assert s.strategy == "delete+insert" and s.table_type == "MERGE_ON_READ"
    assert ModelSpec.from_config({"incremental_strategy": "insert"}).strategy == "append"
    mb = ModelSpec.from_config({"incremental_strategy": "microbatch", "event_time": "ts",
                                "batch_start": "2020-01-01 00:00:00+00:00", "batch_end": "2020-01-02 00:00:00+00:00"})
    assert mb.strategy == "microbatch" and mb.event_time == "ts"
    assert mb.batch == ("2020-01-01 00:00:00+00:00", "2020-01-02 00:00:00+00:00")
    assert ModelSpec.from_config({"incremental_strategy": "microbatch"}).batch is None


@pytest.mark.parametrize("cfg, msg", [
    ({"unique_key": "id", "options": {"primaryKey": "other"}}, "must name the same columns"),
    ({"incremental_strategy": "replace_where"}, "not supported by hudilite"),
    ({"on_schema_change": "drop_everything"}, "on_schema_change"),
    ({"merge_update_columns": ["a"], "merge_exclude_columns": ["b"]}, "cannot both be set"),
    ({"table_type": "avro"}, "table_type"),
])
def test_model_spec_errors(cfg, msg):
    with pytest.raises(DbtRuntimeError, match=msg):
        ModelSpec.from_config(cfg)


def test_model_spec_contract_constraints():
    spec = ModelSpec.from_config({"not_null_columns": ["id", "name"], "tblproperties": {"owner": "x"},
                                  "constraints": {"id_positive": "check (id > 0)",
                                                  "primary_key_id": "primary key (id)"}})
    assert spec.not_null == ("id", "name")
    assert spec.table_props == {"owner": "x", "hudilite.constraints.id_positive": "check (id > 0)",
                                "hudilite.constraints.primary_key_id": "primary key (id)"}
    assert ModelSpec.from_config({}).not_null == ()


def test_hidden_columns():
    assert all(is_hidden_column(c) for c in ("_hoodie_commit_time", "_hoodie_is_deleted", "_hudilite_row_id",
                                             "_HOODIE_RECORD_KEY"))
    assert not is_hidden_column("hoodie") and not is_hidden_column("id")


def test_profile(tmp_path):
    c = HudiliteCredentials.from_dict({"schema": "s", "warehouse": "wh", "spark_conf": {"spark.x": 1}})
    assert c.type == "hudilite" and c.master == "local[*]" and c.database is None
    assert c.spark_conf == {"spark.x": "1"}
    assert c.resolve_warehouse(str(tmp_path)) == str(tmp_path / "wh")
    assert HudiliteCredentials.from_dict({"schema": "s"}).resolve_warehouse("/p") == "/p/warehouse"
    assert HudiliteCredentials.from_dict({"schema": "s", "warehouse": "file:///abs/w"}).resolve_warehouse(
        "/p") == "/abs/w"
    with pytest.raises(DbtRuntimeError, match="database"):
        HudiliteCredentials.from_dict({"schema": "s", "database": "other"})
    s3 = HudiliteCredentials.from_dict({"schema": "s", "warehouse": "s3://b//w/", "metastore_dir": "cat",
                                        "storage_options": {"endpoint": "http://127.0.0.1:9", "region": "r",
                                                            "access_key_id": "AKID", "secret_access_key": "SECRET"}})
    assert s3.resolve_warehouse("/p") == "s3://b/w"
    assert s3.resolve_metastore_dir("s3://b/w", "/p") == "/p/cat"
    assert HudiliteCredentials.from_dict({"schema": "s", "warehouse": "s3a://b/w"}).resolve_metastore_dir(
        "s3a://b/w", "/p") == "/p/warehouse/.metastore"
    assert c.resolve_metastore_dir(str(tmp_path / "wh"), str(tmp_path)) == str(tmp_path / "wh" / ".metastore")
    with pytest.raises(DbtRuntimeError, match=r"no storage backend for gs://.*supported: local .* s3://"):
        HudiliteCredentials.from_dict({"schema": "s", "warehouse": "gs://b/w"}).resolve_warehouse("/p")
    with pytest.raises(DbtRuntimeError, match="storage_options apply to an object-store warehouse"):
        HudiliteCredentials.from_dict({"schema": "s", "storage_options": {"region": "r"}}).resolve_warehouse("/p")


def test_storage_options_are_redacted_in_connection_info():
    """`dbt debug` prints connection_info: the endpoint and region show, keys and secrets never."""
    creds = HudiliteCredentials.from_dict({
        "schema": "s", "warehouse": "s3://b/w",
        "storage_options": {"endpoint": "http://127.0.0.1:9", "region": "r", "access_key_id": "AKID",
                            "secret_access_key": "SECRET", "session_token": "TOKEN"}})
    info = dict(creds.connection_info())
    assert info["warehouse"] == "s3://b/w"
    assert info["storage_options"] == {"endpoint": "http://127.0.0.1:9", "region": "r", "access_key_id": "***",
                                       "secret_access_key": "***", "session_token": "***"}
    text = repr(list(creds.connection_info(with_aliases=True)))
    assert "SECRET" not in text and "AKID" not in text and "TOKEN" not in text


def test_a_token_in_the_connect_url_is_redacted_in_connection_info():
    creds = HudiliteCredentials.from_dict({"schema": "s", "method": "connect", "token": "SECRET1",
                                           "host": "sc://h:15002/;user_id=me;Token=SECRET2;use_ssl=true"})
    info = dict(creds.connection_info())
    assert info["host"] == "sc://h:15002/;user_id=me;Token=***;use_ssl=true"
    assert "SECRET" not in repr(list(creds.connection_info(with_aliases=True)))


def test_snapshot_directories_hold_links_to_exactly_the_committed_files(tmp_path):
    base = tmp_path / "t"
    (base / "dt=1").mkdir(parents=True)
    files = []
    for i in range(3):
        f = base / "dt=1" / f"f{i}_0-1-2_00{i}.parquet"
        f.write_bytes(b"x" * (i + 1))
        files.append(str(f))
    s1 = cat.publish_snapshot(str(base), "001", files[:2])
    assert sorted(os.listdir(s1)) == sorted(os.path.basename(f) for f in files[:2])
    assert os.path.samefile(os.path.join(s1, os.path.basename(files[0])), files[0])  # a hard link, no copy
    assert cat.publish_snapshot(str(base), "001", files[:2]) == s1  # idempotent
    s2 = cat.publish_snapshot(str(base), "002", files[1:])
    s3 = cat.publish_snapshot(str(base), "003", files)
    assert cat.prune_snapshots(str(base), s3) == []  # 001 superseded just now: a reader may still be on it
    assert cat.prune_snapshots(str(base), s3, retain_s=0) == ["001"]
    assert sorted(os.listdir(cat.snapshot_root(str(base)))) == ["002", "003"]
    assert os.path.isdir(s2)


def test_superseded_snapshot_directories_stay_for_the_retention(tmp_path):
    base, hour = str(tmp_path / "t"), 3600.0
    now = 1_000_000.0
    published = {"001": now - 5 * hour, "002": now - 3 * hour, "003": now - 2 * hour, "004": now - 60,
                 "005": now}
    for name, at in published.items():
        d = cat.publish_snapshot(base, name, [])
        os.utime(d, (at, at))
    root = cat.snapshot_root(base)
    crashed, running = os.path.join(root, ".tmp-crashed"), os.path.join(root, ".tmp-running")
    for d, at in ((crashed, now - 2 * hour), (running, now - 5)):
        os.makedirs(d)
        os.utime(d, (at, at))
    # 001 and 002 were superseded (by 002, 003) more than an hour ago; 003 only by 004, a minute ago
    assert sorted(cat.prune_snapshots(base, os.path.join(root, "005"), retain_s=hour, now=now)) == [
        ".tmp-crashed", "001", "002"]
    assert sorted(os.listdir(root)) == [".tmp-running", "003", "004", "005"]
    # the newest two and the current one stay whatever their age
    assert sorted(cat.prune_snapshots(base, os.path.join(root, "003"), retain_s=0, now=now + hour)) == [
        ".tmp-running"]
    assert sorted(os.listdir(root)) == ["003", "004", "005"]
    # an entry that names none (merge-on-read): none is kept for being the newest; the newest was superseded
    # when it was made
    os.utime(os.path.join(root, "005"), (now + hour, now + hour))
    assert sorted(cat.prune_snapshots(base, None, retain_s=hour, now=now + 1.5 * hour)) == ["003"]
    assert sorted(cat.prune_snapshots(base, None, retain_s=hour, now=now + 2.5 * hour)) == ["004", "005"]
    assert os.listdir(root) == []


def test_ddl_quotes_nested_names():
    from pyspark.sql.types import ArrayType, DecimalType, LongType, MapType, StringType, StructField, StructType

    t = StructType([StructField("a b", LongType()), StructField("m", MapType(StringType(), ArrayType(
        StructType([StructField("x`y", DecimalType(10, 2))]))))])
    assert cat.columns_ddl(t.fields) == "`a b` bigint, `m` map<string,array<struct<`x``y`:decimal(10,2)>>>"
    assert cat.props_sql({"k": "it's \\ here"}) == "'k' = 'it\\'s \\\\ here'"


def test_microbatch_source_config():
    mb = ModelSpec.from_config({"incremental_strategy": "microbatch", "microbatch_source": "Changes",
                                "batch_size": "day", "microbatch_upstreams": [
                                    {"schema": "s", "identifier": "events", "event_time": "ts"}]})
    assert mb.microbatch_source == "changes" and mb.batch_size == "day"
    assert mb.upstreams == ({"schema": "s", "identifier": "events", "event_time": "ts"},)
    assert ModelSpec.from_config({"incremental_strategy": "microbatch"}).microbatch_source == "time"
    with pytest.raises(DbtRuntimeError, match="expected 'time'"):
        ModelSpec.from_config({"incremental_strategy": "microbatch", "microbatch_source": "commits"})
    with pytest.raises(DbtRuntimeError, match="needs incremental_strategy 'microbatch'"):
        ModelSpec.from_config({"incremental_strategy": "upsert", "microbatch_source": "changes"})


def test_change_batch_windows_and_sql():
    day = window_of(parse_bound("2020-01-31 00:00:00+00:00"), "day")
    assert day == ("2020-01-31 00:00:00+00:00", "2020-02-01 00:00:00+00:00")
    assert window_of(parse_bound("2020-12-01 00:00:00+00:00"), "month")[1] == "2021-01-01 00:00:00+00:00"
    assert parse_bound("2020-01-01 00:00:00").tzinfo is not None  # dbt's naive `begin` is UTC
    batch = ("2020-01-04 00:00:00+00:00", "2020-01-05 00:00:00+00:00")
    sql = ("select * from (select * from s.a where event_time >= '2020-01-04 00:00:00+00:00' and event_time < "
           "'2020-01-05 00:00:00+00:00') x join (select * from s.b where ts >= '2020-01-04 00:00:00+00:00' and "
           "ts < '2020-01-05 00:00:00+00:00') y using (id) where note <> '2020-01-04 00:00:00+00:00'")
    out = window_sql(sql, batch, day, "s.m")
    assert out.count("event_time >= '2020-01-31 00:00:00+00:00' and event_time < '2020-02-01 00:00:00+00:00'") == 1
    assert out.count("ts >= '2020-01-31 00:00:00+00:00' and ts < '2020-02-01 00:00:00+00:00'") == 1
    assert out.endswith("where note <> '2020-01-04 00:00:00+00:00'")  # only the filters' literal pairs move
    assert window_sql(sql, batch, batch, "s.m") == sql
    with pytest.raises(DbtRuntimeError, match="no upstream ref\\(\\) filtered"):
        window_sql("select 1", batch, day, "s.m")


def test_event_time_bounds_select_windows():
    """--event-time-start/-end of a changes-driven run: the windows that overlap [start, end) are rebuilt."""
    spec = ModelSpec.from_config({"event_time_start": "2020-01-04 00:00:00", "event_time_end": "2020-01-05"})
    lower, upper = spec.event_time_bounds
    assert (lower.isoformat(), upper.isoformat()) == ("2020-01-04T00:00:00+00:00", "2020-01-05T00:00:00+00:00")
    day = [parse_bound(f"2020-01-0{d} 00:00:00") for d in (1, 3, 4, 5)]
    assert [in_bounds(s, "day", lower, upper) for s in day] == [False, False, True, False]
    assert in_bounds(day[0], "day", None, None)
    assert in_bounds(day[1], "day", parse_bound("2020-01-03 12:00:00"), None)  # a window the start cuts
    assert ModelSpec.from_config({}).event_time_bounds == (None, None)
    with pytest.raises(DbtRuntimeError, match="is not a date or timestamp"):
        ModelSpec.from_config({"event_time_start": "yesterday"}).event_time_bounds


def test_adapter_import_freezes_the_long_lived_objects_and_later_garbage_is_still_collected():
    """The adapter freezes what exists when dbt loads it (dbt's, PySpark's and hudilite's modules): full
    collections stop re-scanning them; cyclic garbage made afterwards is collected as before."""
    code = """
import gc, weakref
import dbt.cli.main
import dbt.adapters.hudilite
assert gc.get_freeze_count() > 50000, gc.get_freeze_count()
class Node: pass
a, b = Node(), Node(); a.other, b.other = b, a
gone = weakref.ref(a); del a, b
gc.collect()
assert gone() is None, "a cycle made after the import was not collected"
print("ok")
"""
    out = subprocess.run([sys.executable, "-W", "ignore", "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]
