"""hudilite.Table against the functions it fronts: on twin tables, the facade and the existing function give the
same rows, the same timeline (actions, states, operation types) and the same statistics. Arrow data (the
driver-local writer) except the Spark read cases at the end."""

import json
import os

import pyarrow as pa
import pytest

import hudilite
from hudilite import HudiliteError, InvalidWriteError, RollbackRefusedError, Table, TableNotFoundError
from hudilite.cli import main as cli_main
from hudilite.reader import changes as core_changes
from hudilite.reader.planner import table_schema
from hudilite.services import archival, clean, clustering, compaction
from hudilite.streaming import last_batch_id
from hudilite.table import HoodieTable
from hudilite.writer import client

LAYOUT = dict(record_key="id", precombine_field="v", partition_by=("p",))
META = ("_hoodie_commit_time", "_hoodie_commit_seqno", "_hoodie_file_name")  # differ between twin tables


def _rows(ids, v=1):
    return pa.table({"id": pa.array(ids, pa.int64()), "p": pa.array([f"p{i % 3}" for i in ids]),
                     "v": pa.array([v] * len(ids), pa.int64())})


def _data(path):
    """The latest snapshot's rows without the meta columns that name instants and files, sorted by key."""
    t = core_changes.local_snapshot(path, None, table_schema(HoodieTable.open(path)).names)
    assert t is not None, "a snapshot with log files: compact first"
    return sorted(t.drop_columns([c for c in META if c in t.column_names]).to_pylist(), key=lambda r: r["id"])


def _timeline(path):
    tl = HoodieTable.open(path).timeline
    return [(i.action, i.state, tl.read_metadata(i).get("operationType") if i.is_completed and i.action in (
        "commit", "deltacommit", "replacecommit") else None) for i in tl.instants]


def _twins(tmp_path, table_type):
    a, b = str(tmp_path / "facade" / "t"), str(tmp_path / "functions" / "t")  # one name: the same file bytes
    return Table.create(a, table_type=table_type, **LAYOUT), a, b


OPS = [("bulk_insert", range(10), 1), ("upsert", range(5, 15), 2), ("delete", [0, 1], 1),
       ("insert", [20, 21], 3), ("upsert", [2, 20], 4), ("insert_overwrite", [3, 6, 9], 5),
       ("insert_overwrite_table", [40, 41, 42], 6), ("upsert", [41], 7)]


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_write_every_operation_as_the_function_does(tmp_path, table_type):
    t, a, b = _twins(tmp_path, table_type)
    for op, ids, v in OPS:
        got = t.write(_rows(list(ids), v), op)
        want = client.write(_rows(list(ids), v), b, operation=op, table_type=table_type, **LAYOUT)
        # bytes differ: file ids are random uuids, compressed differently
        assert {**got.stats, "bytes_written": 0} == {**want.stats, "bytes_written": 0}, op
        assert _timeline(a) == _timeline(b), op
    assert {**t.stats(), "bytes": 0} == {**HoodieTable.open(b).snapshot_stats(), "bytes": 0}
    if table_type == "MERGE_ON_READ":
        assert t.to_arrow() is None  # log files to merge: read with Spark (or compact)
        assert len(t.services.compact(force=True)) == len(compaction.compact(b, force=True)) == 1
        assert _timeline(a) == _timeline(b)
    assert _data(a) == _data(b) and [r["id"] for r in _data(a)] == [40, 41, 42]
    assert t.to_arrow(["id", "v"]).sort_by("id").to_pylist() == [
        {"id": 40, "v": 6}, {"id": 41, "v": 7}, {"id": 42, "v": 6}]


def test_upsert_insert_delete_shorthands(tmp_path):
    t, a, b = _twins(tmp_path, "COPY_ON_WRITE")
    t.insert(_rows([1, 2, 3]))
    t.upsert(_rows([3, 4], 2))
    t.delete(_rows([1]))
    for op, ids, v in (("insert", [1, 2, 3], 1), ("upsert", [3, 4], 2), ("delete", [1], 1)):
        client.write(_rows(ids, v), b, operation=op, **LAYOUT)
    assert _data(a) == _data(b) and _timeline(a) == _timeline(b)


def test_open_create_exists(tmp_path):
    path = str(tmp_path / "t")
    assert not Table.exists(path)
    with pytest.raises(TableNotFoundError):
        Table.open(path)
    t = Table.create(path, **LAYOUT)
    assert not Table.exists(path)  # created by its first write
    t.write(_rows([1, 2]))
    assert Table.exists(path)
    with pytest.raises(InvalidWriteError, match="Table.open"):
        Table.create(path, **LAYOUT)
    # an opened table writes with its own layout
    o = Table.open(path + "/")
    assert o.path == HoodieTable.open(path).base_path and repr(o) == f"hudilite.Table({o.path!r})"
    o.write(_rows([2], 5))
    assert [(r["id"], r["v"]) for r in _data(path)] == [(1, 1), (2, 5)]
    # a layout given at create is checked against the existing table by the write, as hudilite.write does
    with pytest.raises(InvalidWriteError, match="record key"):
        Table.create(path, record_key="v", exist_ok=True).write(_rows([3]))
    with pytest.raises(InvalidWriteError, match="record key"):
        hudilite.write(_rows([3]), path, record_key="v")


def test_table_options_apply_to_every_write_and_service(tmp_path):
    path = str(tmp_path / "t")
    Table.create(path, **LAYOUT).write(_rows([1]))
    bad = Table.open(path, options={"hoodie.cleaner.commits.retaind": "1"})
    with pytest.raises(HudiliteError, match="retaind"):
        bad.write(_rows([2]))
    assert len(bad.timeline.completed()) == 1
    t = Table.open(path, options={"hoodie.cleaner.commits.retained": "1"})
    for v in (2, 3):
        t.write(_rows([1], v))
    assert Table.open(path).services.clean() == []  # the default retention keeps every version
    assert t.services.clean({"hoodie.cleaner.commits.retained": "5"}) == []  # a call's options win
    assert len(t.services.clean()) == 1


def test_consumer_checkpoint(tmp_path):
    path = str(tmp_path / "t")
    t = Table.create(path, **LAYOUT)
    assert t.checkpoint("app") is None  # no table yet
    t.write(_rows([1]), checkpoint=("app", 3), extra_metadata={"mine": "x"})
    t.write(_rows([2]))  # a write without a checkpoint does not reset it
    t.write(_rows([3]), checkpoint=("other", 9))
    assert t.checkpoint("app") == last_batch_id(path, "app") == 3
    assert t.checkpoint("other") == 9 and t.checkpoint("nobody") is None
    tl = t.timeline
    assert tl.read_metadata(tl.completed()[0])["extraMetadata"]["mine"] == "x"


def test_position_and_arrow_changes_match_the_functions(tmp_path):
    path = str(tmp_path / "t")
    t = Table.create(path, **LAYOUT)
    t.write(_rows(range(6)), "bulk_insert")
    pos, tid = t.position()
    assert (pos, tid) == core_changes.checkpoint(path) and tid == t.info().table_id
    t.write(_rows([1, 7], 2))
    got = t.changes_arrow(pos, completion_bounds=True, table_id=tid, before_image=True)
    want = core_changes.local_changes(path, pos, completion_bounds=True, table_id=tid, before_image=True)
    assert got is not None and got.equals(want)
    assert sorted(zip(got["id"].to_pylist(), got["_change_op"].to_pylist())) == [(1, "B"), (1, "U"), (7, "I")]
    with pytest.raises(hudilite.TableReplacedError):
        t.changes_arrow(pos, completion_bounds=True, table_id="19700101000000000-other")


def test_info_timeline_schema_stats(tmp_path, capsys):
    path = str(tmp_path / "t")
    t = Table.create(path, table_type="MERGE_ON_READ", **LAYOUT)
    t.write(_rows(range(9)), "bulk_insert")
    t.write(_rows([1, 2], 2))
    meta = HoodieTable.open(path)
    i = t.info()
    assert (i.path, i.name, i.table_type, i.version, i.record_key, i.precombine_field, i.partition_fields) == (
        meta.base_path, meta.config.name, "MERGE_ON_READ", meta.config.version, ["id"], "v", ["p"])
    assert i.partitions == meta.partitions() and i.properties == meta.config.props
    assert cli_main(["info", path]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert (printed["file_groups"], printed["bytes"], printed["partitions"], printed["completed_instants"]) == (
        i.file_groups, i.bytes, len(i.partitions), i.completed_instants) and i.completed_instants == 2
    # the CLI has no Spark session; a test process may have one (local files: the native scan either way)
    assert printed["scan"] == i.scan in ("Arrow (no Spark session)", "Spark native parquet")
    assert [x.timestamp for x in t.timeline.instants] == [x.timestamp for x in meta.timeline.instants]
    assert t.schema() == table_schema(meta) and t.stats() == meta.snapshot_stats()


def test_services_as_the_functions(tmp_path):
    """Clean, clustering and archival on twin copy-on-write tables: the same plans, the same timeline."""
    opts = {"hoodie.cleaner.commits.retained": "1", "hoodie.keep.min.commits": "2", "hoodie.keep.max.commits": "3"}
    t, a, b = _twins(tmp_path, "COPY_ON_WRITE")
    for n in range(4):
        ids = list(range(n * 3, n * 3 + 3))
        t.write(_rows(ids), "bulk_insert")  # one small file group per partition and commit
        client.write(_rows(ids), b, operation="bulk_insert", **LAYOUT)
    assert t.services.schedule_clustering(opts, sort_columns=["v"]) is not None
    assert clustering.schedule_clustering(b, {**opts, clustering.SORT_KEY: "v"}) is not None
    assert len(t.services.run_clustering(opts)) == len(clustering.run_clustering(b, opts)) == 1
    assert len(t.services.cluster(opts)) == len(clustering.cluster(b, opts))
    for v in (2, 3):  # new versions of the clustered file groups: the old ones are outside the retention
        t.write(_rows([0, 1, 2], v))
        client.write(_rows([0, 1, 2], v), b, **LAYOUT)
    assert len(t.services.clean(opts)) == len(clean.run_clean(b, opts)) == 1
    assert _timeline(a) == _timeline(b)
    assert len(t.services.archive(opts)) == len(archival.archive(b, opts)) > 0
    assert _timeline(a) == _timeline(b) and _data(a) == _data(b)
    assert [i.action for i in t.timeline.archived.instants] == [i.action for i in archival.archived_instants(b)]


def test_compaction_schedule_and_run(tmp_path):
    t, a, b = _twins(tmp_path, "MERGE_ON_READ")
    for op, ids, v in OPS[:3]:
        t.write(_rows(list(ids), v), op)
        client.write(_rows(list(ids), v), b, operation=op, table_type="MERGE_ON_READ", **LAYOUT)
    assert t.services.schedule_compaction() is None is compaction.schedule_compaction(b)  # trigger not met
    inst = t.services.schedule_compaction(force=True)
    assert inst is not None and compaction.schedule_compaction(b, force=True) is not None
    assert t.services.run_compaction(instant=inst) == [inst]
    compaction.run_compaction(b)
    assert _timeline(a) == _timeline(b) and _data(a) == _data(b)
    Table.create(str(tmp_path / "cow"), **LAYOUT).write(_rows([1]))
    with pytest.raises(InvalidWriteError, match="MERGE_ON_READ"):
        Table.open(str(tmp_path / "cow")).services.schedule_compaction()


def test_rollback(tmp_path):
    path = str(tmp_path / "t")
    t = Table.create(path, **LAYOUT)
    done = t.write(_rows([1, 2]))
    pending = t.write(_rows([3]), commit=False)  # inflight, its writer's heartbeat running
    inst = pending.instant_time
    with pytest.raises(RollbackRefusedError, match="completed"):
        t.services.rollback_instant(done)
    with pytest.raises(RollbackRefusedError, match="no instant"):
        t.services.rollback_instant("20000101000000000")
    assert t.services.rollback() == []  # alive: left alone
    assert list(t.services.live_writes()) == [inst]
    with pytest.raises(RollbackRefusedError, match="alive"):
        t.services.rollback_instant(inst)
    assert t.timeline.get(inst) is not None
    files = t.services.rollback_instant(inst, force=True)
    pending.heartbeat.stop()
    assert files and not any(os.path.exists(f) for f in files)
    assert [i.timestamp for i in t.timeline.completed()] == [done] and [r["id"] for r in _data(path)] == [1, 2]
    assert [(i.action, i.is_completed) for i in t.timeline.instants] == [("commit", True), ("rollback", True)]


def test_spark_read_as_of_changes_match_the_functions(spark, tmp_path):
    path = str(tmp_path / "t")
    t = Table.create(path, table_type="MERGE_ON_READ", spark=spark, **LAYOUT)
    first = t.write(_rows(range(6)), "bulk_insert")
    pos, tid = t.position()
    t.write(_rows([1, 7], 2))  # log files: the reads merge them

    def rows(df):
        return sorted(tuple(r) for r in df.drop(*META).collect())

    assert rows(t.read()) == rows(hudilite.read(spark, path)) and len(rows(t.read())) == 7
    assert rows(t.as_of(first)) == rows(hudilite.read(spark, path, as_of=first)) and len(rows(t.as_of(first))) == 6
    assert rows(t.read(read_optimized=True)) == rows(hudilite.read(spark, path, read_optimized=True))
    got = t.changes(pos, completion_bounds=True, table_id=tid)
    assert rows(got) == rows(hudilite.changes(spark, path, pos, completion_bounds=True, table_id=tid))
    assert sorted(r["_change_op"] for r in got.collect()) == ["I", "U"]
    assert rows(Table.open(path).read(spark=spark)) == rows(t.read())
    with pytest.raises(HudiliteError, match="Spark session"):
        Table.open(path).read()


def test_streaming_sink_of_a_table(spark, tmp_path):
    """`Table.sink` is the streaming sink with the table's layout; its query id is the app id `checkpoint`
    reads, and a replayed batch is skipped."""
    path = str(tmp_path / "t")
    Table.create(path, **LAYOUT).write(_rows([1]))
    t = Table.open(path, spark=spark)
    sink = t.sink(query_id="q", async_instants=False)
    batch = spark.createDataFrame(_rows([1, 2], 2).to_pandas())
    sink(batch, 0)
    sink(spark.createDataFrame(_rows([3], 3).to_pandas()), 1)
    sink(batch, 1)  # a replay: already committed
    assert sink.skipped == [1] and [b for b, _ in sink.committed] == [0, 1]
    assert t.checkpoint("q") == 1 == last_batch_id(path, "q")
    assert [(r["id"], r["v"]) for r in _data(path)] == [(1, 2), (2, 2), (3, 3)]
    with pytest.raises(InvalidWriteError, match="streaming sink operation"):
        t.sink(operation="insert_overwrite")


def test_consumer_positions_commit_with_the_output(tmp_path):
    up_a, up_b, out = (str(tmp_path / n) for n in ("a", "b", "out"))
    a, b = Table.create(up_a, **LAYOUT), Table.create(up_b, **LAYOUT)
    a.write(_rows([1, 2]))
    b.write(_rows([3]))
    t = Table.create(out, **LAYOUT)
    assert t.consumed().positions == {}
    pa_, ida = a.position()
    t.write(_rows([1, 2]), consumed={up_a: (pa_, ida)})
    b.write(_rows([4]))
    pb, idb = b.position()
    t.write(_rows([3, 4]), consumed={up_b: (pb, idb)})  # merged over what it recorded before
    cp = t.consumed()
    assert cp.positions == {up_a: pa_, up_b: pb} and cp.table_ids == {up_a: ida, up_b: idb}
    assert cp.resume(up_a, ida) == (pa_, False)
    assert cp.resume(up_a, "another-table") == (None, True)
    a.write(_rows([5]))  # the upstream moves on: the consumer continues from its own recorded position
    assert [r["id"] for r in a.changes_arrow(cp.resume(up_a, ida)[0], completion_bounds=True).to_pylist()] == [5]


def test_accepts_a_write_only_of_the_same_layout_and_an_evolvable_schema(tmp_path):
    path = str(tmp_path / "t")
    Table.create(path, **LAYOUT).write(_rows([1, 2]), "insert")
    t = HoodieTable.open(path)
    cow, key, parts, cols, schema = "COPY_ON_WRITE", ["id"], ["p"], ["id", "p", "v"], _rows([1]).schema
    assert t.accepts(cow, key, parts, "v", cols, schema)
    assert t.accepts(cow, key, parts, None, cols, schema)  # no precombine given: the stored one
    wider = schema.append(pa.field("w", pa.string()))
    assert t.accepts(cow, key, parts, "v", cols + ["w"], wider)  # a new column evolves the schema
    assert not t.accepts("MERGE_ON_READ", key, parts, "v", cols, schema)
    assert not t.accepts(cow, ["p"], parts, "v", cols, schema)
    assert not t.accepts(cow, key, [], "v", cols, schema)
    assert not t.accepts(cow, key, parts, "id", cols, schema)
    assert not t.accepts(cow, key, parts, "v", ["id", "p"], schema)  # the stored precombine field is missing
    narrowed = pa.schema([schema.field("id"), schema.field("p"), pa.field("v", pa.string())])
    assert not t.accepts(cow, key, parts, "v", cols, narrowed)  # long -> string is not an evolution


def test_layout_position_row_count_and_replacing(tmp_path):
    """The facade methods the dbt adapter uses instead of internals give what the core functions give."""
    path = str(tmp_path / "t")
    t = Table.create(path, **LAYOUT)
    t.write(_rows(range(10)), "bulk_insert")
    t.write(_rows([3, 11], v=2))
    t = Table.open(path)
    cfg = HoodieTable.open(path).config
    lay = t.layout()
    assert (lay.table_type, lay.record_key, lay.precombine_field, lay.partition_by, lay.table_id) == (
        "COPY_ON_WRITE", ["id"], "v", ["p"], cfg.table_id)
    assert t.latest_position() == core_changes.latest_position(path) == t.position()[0] is not None
    assert t.row_count() == 11 == HoodieTable.open(path).snapshot_stats()["rows"]
    # replacing: the table written at the staging path (another key) takes the path's place, a new table id
    with t.replacing() as staging:
        assert staging != path and not os.path.exists(os.path.join(staging, ".hoodie", "hoodie.properties"))
        hudilite.write(_rows([1, 2]), staging, record_key="id", partition_by=())
    new = Table.open(path).layout()
    assert (new.partition_by, new.precombine_field) == ([], None) and new.table_id != lay.table_id
    assert Table.open(path).row_count() == 2
    # a failed write inside the block leaves the old table at the path
    with pytest.raises(RuntimeError), Table.open(path).replacing() as staging:
        hudilite.write(_rows([7]), staging, record_key="id", partition_by=())
        raise RuntimeError("the rebuild failed")
    assert Table.open(path).row_count() == 2 and Table.open(path).layout().table_id == new.table_id
