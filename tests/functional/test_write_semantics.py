"""Copy-on-write semantics through the public API: upsert rules, index routing, file sizing, operations."""

import datetime as dt
import glob
import json
import os

import pyarrow.parquet as pq
import pytest

import hudilite
from hudilite.table import HoodieTable

SCHEMA = "id long, version long, dt date, name string"
D1, D2, D3 = dt.date(2024, 1, 1), dt.date(2024, 1, 2), dt.date(2024, 1, 3)


def rows(spark, path, **kw):
    df = hudilite.read(spark, path, **kw)
    return sorted((r["id"], r["version"], r["name"]) for r in df.select("id", "version", "name").collect())


def base_files(path):
    return sorted(glob.glob(os.path.join(path, "**", "*.parquet"), recursive=True))


def test_upsert_rules(spark, table_path):
    df = spark.createDataFrame([(i, 1, D1 if i % 2 else D2, f"n{i}") for i in range(6)], SCHEMA)
    c1 = hudilite.write(df, table_path, record_key="id", precombine_field="version", partition_by="dt",
                        operation="bulk_insert")
    batch = spark.createDataFrame([
        (1, 5, D1, "dup-low", False), (1, 7, D1, "dup-high", False), (1, 6, D1, "dup-mid", False),  # in-batch dups
        (2, 0, D2, "late", False),                                                              # late: loses
        (3, 2, D1, "gone", True),                                                               # delete wins
        (4, 0, D2, "late-delete", True),                                                        # late delete loses
        (10, 1, D3, "new", False), (11, 1, D3, "new-deleted", True),                            # insert; no-op delete
    ], SCHEMA + ", _hoodie_is_deleted boolean")
    c2 = hudilite.write(batch, table_path, record_key="id", precombine_field="version", partition_by="dt")
    assert c2 > c1
    assert rows(spark, table_path) == [(0, 1, "n0"), (1, 7, "dup-high"), (2, 1, "n2"), (4, 1, "n4"),
                                       (5, 1, "n5"), (10, 1, "new")]
    assert c2.stats["updated"] == 1 and c2.stats["deleted"] == 1 and c2.stats["inserted"] == 1
    assert rows(spark, table_path, as_of=c1) == [(i, 1, f"n{i}") for i in range(6)]
    assert rows(spark, table_path, begin=c1, end=c2) == [(1, 7, "dup-high"), (10, 1, "new")]
    # carried rows keep their commit time; changed rows carry the new one
    ct = {r["id"]: r["_hoodie_commit_time"] for r in hudilite.read(spark, table_path).collect()}
    assert ct[0] == c1 and ct[5] == c1 and ct[1] == c2 and ct[10] == c2


def test_updates_route_to_existing_file_group(spark, table_path):
    df = spark.createDataFrame([(i, 1, D1, f"n{i}") for i in range(100)], SCHEMA).repartition(4)
    hudilite.write(df, table_path, record_key="id", precombine_field="version", partition_by="dt",
                   operation="bulk_insert")
    fids_before = {os.path.basename(f).split("_")[0] for f in base_files(table_path)}
    assert len(fids_before) == 4
    upd = spark.createDataFrame([(i, 2, D1, f"u{i}") for i in range(0, 100, 7)], SCHEMA)
    hudilite.write(upd, table_path, record_key="id", precombine_field="version", partition_by="dt")
    snap = hudilite.read(spark, table_path)
    assert snap.count() == 100 and snap.select("id").distinct().count() == 100
    live = {r["_hoodie_file_name"].split("_")[0] for r in snap.select("_hoodie_file_name").collect()}
    assert live == fids_before  # no new file group: every update went to the group holding its key


def test_string_keys_exact_lookup(spark, table_path):
    """Overlapping key ranges (random strings) resolve through the exact key lookup: no duplicates."""
    import uuid

    keys = [str(uuid.uuid4()) for _ in range(60)]
    df = spark.createDataFrame([(k, 1, f"n{i}") for i, k in enumerate(keys)], "k string, version long, name string")
    hudilite.write(df.repartition(3), table_path, record_key="k", precombine_field="version",
                   operation="bulk_insert")
    upd = spark.createDataFrame([(k, 2, "upd") for k in keys[::5]] + [("brand-new", 1, "ins")],
                                "k string, version long, name string")
    hudilite.write(upd, table_path, record_key="k", precombine_field="version")
    snap = hudilite.read(spark, table_path).collect()
    assert len(snap) == 61 and len({r["k"] for r in snap}) == 61
    assert sum(r["name"] == "upd" for r in snap) == 12


def test_inserts_fill_small_files_then_new_groups(spark, table_path):
    opts = {"hoodie.parquet.max.file.size": str(64 * 1024), "hoodie.parquet.small.file.limit": str(48 * 1024)}
    first = spark.createDataFrame([(i, 1, D1, "x" * 50) for i in range(50)], SCHEMA)
    hudilite.write(first, table_path, record_key="id", precombine_field="version", partition_by="dt",
                   operation="insert", options=opts)
    assert len(base_files(table_path)) == 1
    fid0 = os.path.basename(base_files(table_path)[0]).split("_")[0]
    more = spark.createDataFrame([(i, 1, D1, "y" * 50) for i in range(50, 5000)], SCHEMA)
    c = hudilite.write(more, table_path, record_key="id", precombine_field="version", partition_by="dt",
                       operation="insert", options=opts)
    t = HoodieTable.open(table_path)
    md = t.timeline.read_metadata(t.timeline.latest_completed())
    stats = md["partitionToWriteStats"]["dt=2024-01-01"]
    assert fid0 in {s["fileId"] for s in stats}  # the small file group took inserts first
    assert len(stats) >= 3  # the rest opened new groups sized to the target
    assert hudilite.read(spark, table_path).count() == 5000
    assert c.stats["inserted"] == 4950


def test_insert_overwrite_and_table(spark, table_path):
    df = spark.createDataFrame([(1, 1, D1, "a"), (2, 1, D2, "b")], SCHEMA)
    hudilite.write(df, table_path, record_key="id", precombine_field="version", partition_by="dt")
    ow = spark.createDataFrame([(3, 1, D1, "c")], SCHEMA)
    c2 = hudilite.write(ow, table_path, record_key="id", precombine_field="version", partition_by="dt",
                        operation="insert_overwrite")
    assert rows(spark, table_path) == [(2, 1, "b"), (3, 1, "c")]
    t = HoodieTable.open(table_path)
    assert t.timeline.latest_completed().action == "replacecommit"
    assert t.timeline.read_metadata(t.timeline.latest_completed())["operationType"] == "INSERT_OVERWRITE"
    c3 = hudilite.write(spark.createDataFrame([(9, 1, D3, "z")], SCHEMA), table_path, record_key="id",
                        precombine_field="version", partition_by="dt", operation="insert_overwrite_table")
    assert rows(spark, table_path) == [(9, 1, "z")]
    assert rows(spark, table_path, as_of=c2) == [(2, 1, "b"), (3, 1, "c")]
    assert c3 > c2


@pytest.mark.parametrize("version", ["6", "9"])
def test_delete_operation_and_complex_key(spark, table_path, version):
    schema = "a long, b string, version long, p1 string, p2 int, v double"
    df = spark.createDataFrame([(1, "x", 1, "eu", 1, 1.0), (1, "y", 1, "eu", 2, 2.0), (2, "x", 1, "us", 1, 3.0)],
                               schema)
    hudilite.write(df, table_path, record_key=["a", "b"], precombine_field="version", partition_by=["p1", "p2"],
                   options={"hoodie.write.table.version": version})
    t = HoodieTable.open(table_path)
    # version 6 names the key generator class; 8+ its type (hoodie.table.keygenerator.type)
    assert t.config.keygen == ("org.apache.hudi.keygen.ComplexKeyGenerator" if version == "6" else "COMPLEX")
    assert sorted(t.partitions()) == ["p1=eu/p2=1", "p1=eu/p2=2", "p1=us/p2=1"]
    keys = {r["_hoodie_record_key"] for r in hudilite.read(spark, table_path).collect()}
    assert keys == {"a:1,b:x", "a:1,b:y", "a:2,b:x"}
    dele = spark.createDataFrame([(1, "y", "eu", 2)], "a long, b string, p1 string, p2 int")
    c = hudilite.write(dele, table_path, record_key=["a", "b"], operation="delete")
    assert c.stats["deleted"] == 1
    assert {r["_hoodie_record_key"] for r in hudilite.read(spark, table_path).collect()} == {"a:1,b:x", "a:2,b:x"}


def test_schema_evolution_add_column_and_widen(spark, table_path):
    hudilite.write(spark.createDataFrame([(1, 1, 5)], "id long, version long, qty int"), table_path,
                   record_key="id", precombine_field="version")
    hudilite.write(spark.createDataFrame([(2, 1, 7, "new")], "id long, version long, qty long, note string"),
                   table_path, record_key="id", precombine_field="version")
    got = sorted((r["id"], r["qty"], r["note"]) for r in hudilite.read(spark, table_path).collect())
    assert got == [(1, 5, None), (2, 7, "new")]
    assert dict(hudilite.read(spark, table_path).dtypes)["qty"] == "bigint"


def test_partial_update_keeps_other_columns(spark, table_path):
    hudilite.write(spark.createDataFrame([(1, 1, "a", 10)], "id long, version long, name string, qty int"),
                   table_path, record_key="id", precombine_field="version")
    hudilite.write(spark.createDataFrame([(1, 2, 99), (2, 1, 5)], "id long, version long, qty int"), table_path,
                   record_key="id", precombine_field="version", options={"hoodie.write.partial.update": "true"})
    got = sorted((r["id"], r["name"], r["qty"]) for r in hudilite.read(spark, table_path).collect())
    assert got == [(1, "a", 99), (2, None, 5)]


def test_commit_metadata_and_properties(spark, table_path):
    # version 6 properties and JSON commit file; 8/9 field by field: test_v9_tables
    hudilite.write(spark.createDataFrame([(1, 1, D1, "a")], SCHEMA), table_path, record_key="id",
                   precombine_field="version", partition_by="dt", options={"hoodie.write.table.version": "6"})
    props = open(os.path.join(table_path, ".hoodie", "hoodie.properties")).read()
    for needle in ("hoodie.table.version=6", "hoodie.timeline.layout.version=1", "hoodie.table.recordkey.fields=id",
                   "hoodie.table.precombine.field=version", "hoodie.table.partition.fields=dt",
                   "hoodie.table.keygenerator.class=org.apache.hudi.keygen.SimpleKeyGenerator",
                   "hoodie.datasource.write.hive_style_partitioning=true", "hoodie.table.timeline.timezone=UTC",
                   "DefaultHoodieRecordPayload", "hoodie.table.checksum="):
        assert needle in props
    [commit] = glob.glob(os.path.join(table_path, ".hoodie", "*.commit"))
    md = json.load(open(commit))
    assert md["operationType"] == "UPSERT"
    schema = json.loads(md["extraMetadata"]["schema"])
    assert [f["name"] for f in schema["fields"]] == ["id", "version", "dt", "name"]
    [stat] = md["partitionToWriteStats"]["dt=2024-01-01"]
    assert stat["path"].startswith("dt=2024-01-01/") and stat["numInserts"] == 1
    f = pq.read_table(os.path.join(table_path, stat["path"]))
    assert f.column_names[:5] == ["_hoodie_commit_time", "_hoodie_commit_seqno", "_hoodie_record_key",
                                  "_hoodie_partition_path", "_hoodie_file_name"]
    assert os.path.exists(os.path.join(table_path, "dt=2024-01-01", ".hoodie_partition_metadata"))


def test_datasource_format_and_filters(spark, table_path):
    df = spark.createDataFrame([(i, 1, [D1, D2, D3][i % 3], f"n{i}") for i in range(9)], SCHEMA)
    hudilite.write(df, table_path, record_key="id", precombine_field="version", partition_by="dt")
    hudilite.register(spark)
    via_source = spark.read.format("hudilite").load(table_path)
    assert sorted(r["id"] for r in via_source.collect()) == list(range(9))
    pruned = hudilite.read(spark, table_path, filters=[("dt", "=", "2024-01-02")])
    assert sorted(r["id"] for r in pruned.collect()) == [1, 4, 7]
    from hudilite.reader import plan_read

    assert len(plan_read(table_path, filters=[("dt", ">=", "2024-01-02")]).slices) < len(plan_read(table_path).slices)


def test_marker_service_markers(spark, table_path, monkeypatch):
    """With the batched marker service the executors' markers land in MARKERS<n> files of the instant."""
    import hudilite.writer.client as client
    from hudilite.markers import list_markers

    monkeypatch.setattr(client, "delete_markers", lambda *a: None)  # keep the markers to inspect them
    opts = {"hoodie.write.markers.type": "TIMELINE_SERVER_BASED"}

    def check(c):
        tdir = os.path.join(table_path, ".hoodie", ".temp", c)
        assert open(os.path.join(tdir, "MARKERS.type")).read() == "TIMELINE_SERVER_BASED"
        assert any(f.startswith("MARKERS") and f != "MARKERS.type" for f in os.listdir(tdir))
        marked = {f"{p}/{n}" for p, n, _ in list_markers(table_path, c)}
        t = HoodieTable.open(table_path)
        stats = t.timeline.read_metadata(t.timeline.get(c))["partitionToWriteStats"]
        written = {s["path"] for v in stats.values() for s in v}
        assert written and written <= marked

    df = spark.createDataFrame([(i, 1, [D1, D2][i % 2], f"n{i}") for i in range(20)], SCHEMA)
    check(hudilite.write(df, table_path, record_key="id", precombine_field="version", partition_by="dt",
                         operation="bulk_insert", options=opts))
    check(hudilite.write(spark.createDataFrame([(1, 2, D2, "u")], SCHEMA), table_path, record_key="id",
                         precombine_field="version", partition_by="dt", options=opts))
    assert rows(spark, table_path)[1] == (1, 2, "u")


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_integer_keys_match_on_their_values(spark, table_path, table_type):
    """Writers match a single integer key on its values (hudilite.writer.handle.key_columns): negative keys, and
    an int key column widened to long by a later batch, still find their stored rows."""
    kw = dict(record_key="id", precombine_field="v", table_type=table_type)
    hudilite.write(spark.createDataFrame([(-5, 1, "a"), (0, 1, "b"), (7, 1, "c")], "id int, v long, s string"),
                   table_path, **kw)
    up = spark.createDataFrame([(-5, 2, "A"), (7, 2, "C"), (8, 1, "new"), (0, 0, "late")], "id long, v long, s string")
    st = hudilite.write(up, table_path, **kw).stats
    assert (st["inserted"], st["updated"] + st["ignored"]) == (1, 3)
    assert sorted((r.id, r.s) for r in hudilite.read(spark, table_path).collect()) == [
        (-5, "A"), (0, "b"), (7, "C"), (8, "new")]


def test_key_and_partition_columns_keep_the_spelling_of_their_values(spark, table_path):
    """A record key or partition column widened from an integer to a floating type would spell stored values
    anew ('1' -> '1.0'): a second record of one key, a second directory of one partition value. Refused, table
    unchanged; widening to a larger integer keeps the spelling and is taken."""
    kw = dict(record_key="id", precombine_field="v", partition_by="p")
    hudilite.write(spark.createDataFrame([(1, 1, 10)], "id int, v long, p int"), table_path, **kw)
    files = base_files(table_path)
    for row, ddl, message in (
            ((1.0, 2, 10), "id double, v long, p int",
             "column 'id': a record key column cannot change type from int32 to double: its stored keys are text"),
            ((1, 2, 10.0), "id int, v long, p double",
             "column 'p': a partition column cannot change type from int32 to double: its partition paths")):
        with pytest.raises(hudilite.InvalidWriteError, match=message):
            hudilite.write(spark.createDataFrame([row], ddl), table_path, **kw)
        assert base_files(table_path) == files and len(HoodieTable.open(table_path).timeline.completed()) == 1
    hudilite.write(spark.createDataFrame([(1, 3, 10)], "id long, v long, p long"), table_path, **kw)
    assert [(r.id, r.v, r.p) for r in hudilite.read(spark, table_path).collect()] == [(1, 3, 10)]


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_string_keys_that_look_like_numbers_stay_distinct(spark, table_path, table_type):
    kw = dict(record_key="k", precombine_field="v", table_type=table_type)
    hudilite.write(spark.createDataFrame([("7", 1, "a"), ("007", 1, "b")], "k string, v long, s string"),
                   table_path, **kw)
    hudilite.write(spark.createDataFrame([("007", 2, "B")], "k string, v long, s string"), table_path, **kw)
    assert sorted((r.k, r.s) for r in hudilite.read(spark, table_path).collect()) == [("007", "B"), ("7", "a")]


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_new_key_inserted_and_deleted_in_one_batch(spark, table_path, table_type):
    """A change stream can create and delete a record within one batch: the batch's latest row per key
    decides, also for keys the table does not hold yet (the delete must meet the insert, not be dropped)."""
    base = spark.createDataFrame([(1, 1, D1, "a")], SCHEMA)
    hudilite.write(base, table_path, record_key="id", precombine_field="version", partition_by="dt",
                   table_type=table_type)
    batch = spark.createDataFrame([
        (7, 1, D1, "created", False), (7, 2, D1, "deleted", True),      # delete is newer: the key stays absent
        (8, 2, D2, "kept", False), (8, 1, D2, "old-delete", True),      # delete is older: the insert stands
        (9, 3, D3, "gone", True), (9, 1, D3, "first", False),           # new partition, delete newer
    ], SCHEMA + ", _hoodie_is_deleted boolean")
    c = hudilite.write(batch, table_path, record_key="id", precombine_field="version", partition_by="dt")
    assert rows(spark, table_path) == [(1, 1, "a"), (8, 2, "kept")]
    assert c.stats["inserted"] == 1
