"""The catalog entry of a hudilite table (hudilite/metastore.py): `describe` from two catalog statements equals
what Spark's catalog API and the entry's schema say, on copy-on-write, merge-on-read, view, plain-table and
missing entries, and a view or table copied from a merge-on-read entry is not taken for it; a publish whose
properties are unchanged only moves the location, changed ones are set, the per-commit properties of older
entries are unset once; plain Spark (this session and another) reads the new snapshot, and a session that
read the entry before the commits reads them within a second, never failing on a pruned snapshot. Runs on the
suite's session: classic here, Spark Connect in tests/functional/connect/test_connect_metastore.py."""

import contextlib
import os
import time
import uuid

import pyarrow as pa
import pytest

import hudilite
from hudilite import metastore as ms
from hudilite.spark.session import CATALOG_CACHE_TTL_S, is_connect

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")


@pytest.fixture
def db(spark, tmp_path):
    hudilite.register(spark)  # merge-on-read entries read through the hudilite data source
    name = f"ms_{uuid.uuid4().hex[:8]}"
    spark.sql(f"CREATE SCHEMA {name} LOCATION '{tmp_path}/{name}'")
    yield name
    spark.sql(f"DROP SCHEMA IF EXISTS {name} CASCADE")


@pytest.fixture(params=["json", "text"])
def statements(request, spark, monkeypatch):
    """The statements `describe` reads an entry with under Spark Connect: `DESCRIBE ... AS JSON`, or (a server
    before Spark 4.0) SHOW TBLPROPERTIES and the text DESCRIBE. A classic session has its own: no text variant."""
    if request.param == "text":
        if not is_connect(spark):
            pytest.skip("a Spark Connect session's fallback")
        monkeypatch.setattr(ms, "_NO_JSON_DESCRIBE", {spark})
    return request.param


def _rows(ids, version):
    return pa.table({"id": pa.array(ids, pa.int64()), "v": pa.array([version] * len(ids), pa.int64()),
                     "name": pa.array([f"n{i}" for i in ids])})


def _write(path, ids, version, table_type="COPY_ON_WRITE"):
    return hudilite.write(_rows(ids, version), path, record_key="id", precombine_field="v", table_type=table_type)


class Recorder:
    def __init__(self, spark):
        self.spark, self.statements = spark, []

    def __call__(self, statement):
        self.statements.append(statement)
        return self.spark.sql(statement)

    def kinds(self):
        return [" ".join(s.split()[3:5]) if s.startswith("ALTER TABLE") else s.split()[0] for s in self.statements]


def _reference(spark, schema, identifier):
    """What describe said before: Spark's catalog API, the collected properties, the analysed schema."""
    name = ms.qualified(schema, identifier)
    t = spark.catalog.getTable(name)
    props = {r[0]: r[1] for r in spark.sql(f"SHOW TBLPROPERTIES {name}").collect()}
    fields = spark.table(name).schema.fields
    merged = ms.merged_entry_props(fields)
    return {"kind": "VIEW" if (t.tableType or "").upper() == "VIEW" else "TABLE",
            "props": {**props, **(merged or {})},
            "columns": [f.name for f in fields if not f.name.startswith("_hoodie")],
            "merged": merged is not None, "types": [(f.name, f.dataType.simpleString()) for f in fields]}


def _said(entry):
    return {"kind": entry.kind, "props": entry.props, "columns": entry.columns, "merged": entry.merged,
            "types": entry.types}


def test_describe_equals_the_catalog_api(spark, db, tmp_path, monkeypatch, statements):
    cow, mor = str(tmp_path / "cow"), str(tmp_path / "mor")
    _write(cow, [1, 2], 1)
    _write(mor, [1, 2], 1, "MERGE_ON_READ")
    props = {"hudilite.record_key": "id", "hudilite.table_type": "cow", "note": "a, b=c] 'q'", "empty": ""}
    ms.publish(spark, db, "cow", cow, ["id", "v", "name"], props, None)
    ms.publish(spark, db, "mor", mor, ["id", "v", "name"], {**props, "hudilite.table_type": "mor"}, None)
    spark.sql(f"CREATE VIEW {db}.vw AS SELECT id, name FROM {db}.cow")
    wide = ", ".join(f"f{i}: int" for i in range(30))  # DESCRIBE abbreviates this struct: analysed instead
    spark.sql(f"CREATE TABLE {db}.plain (id bigint, s struct<{wide}>, d decimal(10,2)) USING parquet "
              f"TBLPROPERTIES ('hudilite.path' = '{tmp_path}/nowhere', 'x' = 'y')")
    # a partitioned entry's DESCRIBE repeats the partition columns after a header row (with the path property:
    # read from DESCRIBE like a copy-on-write entry's)
    spark.sql(f"CREATE TABLE {db}.part (id bigint, name string, dt string) USING parquet PARTITIONED BY (dt) "
              f"TBLPROPERTIES ('hudilite.path' = '{tmp_path}/nowhere')")
    # every type a column can have, as DESCRIBE ... AS JSON spells them (Connect) and the schema says
    spark.sql(f"CREATE TABLE {db}.typed (a timestamp, b timestamp_ntz, c array<struct<x: int, y: string>>, "
              "d map<string, decimal(5,1)>, e date, f binary, g boolean, h float, i smallint, j tinyint, "
              "k varchar(4), l char(2), m string collate UNICODE_CI, n double, o int) USING parquet "
              f"TBLPROPERTIES ('hudilite.path' = '{tmp_path}/nowhere')")
    spark.sql(f"CREATE TABLE {db}.src USING hudilite LOCATION '{mor}'")  # a data source table, not an entry
    for ident in ("cow", "mor", "vw", "plain", "part", "typed", "src"):
        entry = ms.describe(spark, db, ident)
        assert entry is not None, ident
        said, ref = _said(entry), _reference(spark, db, ident)
        if not entry.props_exact:  # DESCRIBE ... AS JSON (Connect) leaves out properties with empty values
            assert is_connect(spark)
            said["props"], ref["props"] = ({k: v for k, v in p.items() if v != ""} for p in (said["props"],
                                                                                          ref["props"]))
        assert said == ref, ident
    assert ms.describe(spark, db, "cow").path == cow and ms.describe(spark, db, "mor").path == mor
    assert ms.describe(spark, db, "mor").merged and ms.describe(spark, db, "vw").kind == "VIEW"
    assert ms.describe(spark, db, "missing") is None
    assert ms.describe(spark, "no_such_schema_here", "t") is None
    if is_connect(spark) and statements == "json":
        # a merge-on-read entry: its DESCRIBE (which Spark refuses for a data source table) and its schema; Spark
        # shows no properties of such a table, so SHOW TBLPROPERTIES is asked only for one that is no entry
        asked = []
        real = ms.command_rows
        monkeypatch.setattr(ms, "command_rows", lambda s, st: asked.append(st.split()[0]) or real(s, st))
        assert ms.describe(spark, db, "mor").merged and asked == ["DESCRIBE"]
        asked.clear()
        assert not ms.describe(spark, db, "src").merged and asked == ["DESCRIBE", "SHOW"]


def test_a_view_or_copy_of_a_merge_on_read_entry_is_not_the_entry(spark, db, tmp_path, statements):
    """A merge-on-read entry keeps its properties in its schema's field metadata, which a projection keeps:
    a view or a table made from the entry with `select *` has the same metadata but holds other rows."""
    mor = str(tmp_path / "mor")
    _write(mor, [1, 2, 3], 1, "MERGE_ON_READ")
    ms.publish(spark, db, "mor", mor, ["id", "v", "name"], {"hudilite.table_type": "mor"}, None)
    spark.sql(f"CREATE VIEW {db}.vw AS SELECT * FROM {db}.mor WHERE id > 1")
    spark.sql(f"CREATE TABLE {db}.copy USING parquet AS SELECT * FROM {db}.mor WHERE id > 1")
    assert ms.merged_entry_props(spark.table(f"{db}.vw").schema.fields) is not None  # what misled describe
    entry = ms.describe(spark, db, "mor")
    assert entry.merged and entry.is_hudilite and entry.path == mor
    for ident, kind in (("vw", "VIEW"), ("copy", "TABLE")):
        entry = ms.describe(spark, db, ident)
        assert entry is not None and entry.kind == kind, ident
        assert not entry.merged and not entry.is_hudilite and entry.path is None, (ident, entry.props)
        assert entry.columns == ["id", "v", "name"], ident


def test_a_data_source_table_reads_its_table_and_is_no_entry(spark, db, tmp_path, statements):
    """A table registered outside the adapter (`CREATE TABLE ... USING hudilite LOCATION`, say a dbt source)
    reads the hudilite table there: `describe` names it as the entry's `source_path`, not as the path of one of
    the adapter's entries (which the adapter publishes to and drops with its data). A view of it reads none."""
    cow, mor = str(tmp_path / "raw_cow"), str(tmp_path / "raw_mor")
    _write(cow, [1, 2], 1)
    _write(mor, [1, 2], 1, "MERGE_ON_READ")
    spark.sql(f"CREATE TABLE {db}.raw_cow USING hudilite LOCATION '{cow}'")
    spark.sql(f"CREATE TABLE {db}.raw_mor USING hudilite LOCATION '{mor}'")
    spark.sql(f"CREATE VIEW {db}.raw_view AS SELECT * FROM {db}.raw_cow WHERE id > 1")
    ms.publish(spark, db, "entry", mor, ["id", "v", "name"], {"hudilite.table_type": "mor"}, None)
    for ident, path in (("raw_cow", cow), ("raw_mor", mor)):
        entry = ms.describe(spark, db, ident)
        assert entry.kind == "TABLE" and not entry.merged, ident
        assert not entry.is_hudilite and entry.path is None, (ident, entry.props)
        assert entry.source_path == path and entry.table_path == path, ident
    view = ms.describe(spark, db, "raw_view")
    assert view.kind == "VIEW" and view.source_path is None and view.table_path is None
    entry = ms.describe(spark, db, "entry")
    assert entry.merged and entry.source_path is None and entry.table_path == entry.path == mor


def _location(spark, db, ident):
    rows = spark.sql(f"DESCRIBE TABLE EXTENDED {db}.{ident}").collect()
    return next(r[1] for r in rows if r[0] == "Location")


@contextlib.contextmanager
def _another_session(spark):
    """Another session of the same catalog (its own relation cache): over Connect another client session."""
    if is_connect(spark):
        from pyspark.sql import SparkSession

        other = SparkSession.builder.remote(os.environ["HUDILITE_TEST_CONNECT"]).create()
        try:
            yield other
        finally:
            other.stop()
    else:
        yield spark.newSession()


def _ids(session, name):
    return sorted(r[0] for r in session.table(name).collect())


def _seen_by_another_session(spark, name):
    """The ids a new session of the same catalog reads from `name`."""
    with _another_session(spark) as other:
        return _ids(other, name)


def test_a_session_that_read_the_entry_reads_later_commits(spark, db, tmp_path):
    """A session that resolved a copy-on-write entry before commits of another session (a Connect client
    beside a dbt run) reads the new snapshot once its cached relation expires (CATALOG_CACHE_TTL_S), and never
    fails meanwhile: the snapshot it resolved outlives its cache even after more than KEEP_SNAPSHOTS commits."""
    path, cols, props = str(tmp_path / "t"), ["id", "v", "name"], {"hudilite.record_key": "id"}
    name = f"{db}.t"
    _write(path, [1], 1)
    ms.publish(spark, db, "t", path, cols, props, None)
    with _another_session(spark) as other:
        assert _ids(other, name) == [1]
        last = 1
        for k in range(2, ms.KEEP_SNAPSHOTS + 5):
            _write(path, [k], 1)
            ms.publish(spark, db, "t", path, cols, props, ms.describe(spark, db, "t"))
            assert _ids(spark, name) == list(range(1, k + 1))  # the publishing session: at once
            seen = _ids(other, name)  # the other one: a snapshot at least as new as it read last
            assert seen in [list(range(1, j + 1)) for j in range(last, k + 1)], seen
            last = len(seen)
        deadline = time.monotonic() + 10 * CATALOG_CACHE_TTL_S + 10
        while _ids(other, name) != list(range(1, k + 1)) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _ids(other, name) == list(range(1, k + 1))
    # the superseded snapshots stay until an hour after their successors were published
    assert len([n for n in os.listdir(ms.snapshot_root(path)) if not n.startswith(".")]) == k


def test_a_query_of_the_old_entry_reads_on_across_a_rebuild_beside(spark, db, tmp_path, monkeypatch):
    """A table rebuilt beside the old one (`Table.replacing`: key, partitioning or column types changed) takes
    over the old table's snapshot directories: a query that listed the old entry's snapshot, or a session whose
    cached relation names it, reads the old rows after the swap instead of failing; the next resolution of the
    entry reads the new table; the new table's publishes prune them as its own, a merge-on-read one's too (its
    entry names no snapshot directory)."""
    path, cols, props = str(tmp_path / "t"), ["id", "v", "name"], {"hudilite.record_key": "id"}
    name = f"{db}.t"
    _write(path, [1], 1)
    ms.publish(spark, db, "t", path, cols, props, None)
    _write(path, [2], 1)
    ms.publish(spark, db, "t", path, cols, props, ms.describe(spark, db, "t"))
    old = _location(spark, db, "t")
    old_dirs = sorted(n for n in os.listdir(ms.snapshot_root(path)) if not n.startswith("."))
    with _another_session(spark) as other:
        listed = other.read.parquet(old).select("id")  # the old snapshot's files are listed here
        assert sorted(r[0] for r in listed.collect()) == [1, 2]
        with hudilite.Table(path).replacing() as staging:
            _write(staging, [7, 8], 1)
        assert sorted(n for n in os.listdir(ms.snapshot_root(path)) if not n.startswith(".")) == old_dirs
        assert sorted(r[0] for r in listed.collect()) == [1, 2]  # the swap is done, the entry not yet moved
        ms.publish(spark, db, "t", path, cols, props, ms.describe(spark, db, "t"))
        assert sorted(r[0] for r in listed.collect()) == [1, 2]
        assert _ids(spark, name) == [7, 8]
        deadline = time.monotonic() + 10 * CATALOG_CACHE_TTL_S + 10
        while _ids(other, name) != [7, 8] and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _ids(other, name) == [7, 8]
    # the carried directories are the new table's: pruned as its own once superseded for the retention
    removed = ms.prune_snapshots(path, _location(spark, db, "t"), keep=1, now=time.time() + 2 * ms.SNAPSHOT_RETAIN_S)
    assert sorted(removed) == old_dirs

    mor = str(tmp_path / "m")
    _write(mor, [1], 1)
    ms.publish(spark, db, "m", mor, cols, props, None)
    cow_dirs = sorted(os.listdir(ms.snapshot_root(mor)))
    with _another_session(spark) as other:
        listed = other.read.parquet(_location(spark, db, "m")).select("id")
        with hudilite.Table(mor).replacing() as staging:
            _write(staging, [3], 1, table_type="MERGE_ON_READ")
        ms.publish(spark, db, "m", mor, cols, props, ms.describe(spark, db, "m"))
        assert sorted(r[0] for r in listed.collect()) == [1]  # the old snapshot, after the swap and the publish
    assert _ids(spark, f"{db}.m") == [3]
    assert sorted(os.listdir(ms.snapshot_root(mor))) == cow_dirs  # superseded just now: kept
    assert sorted(ms.prune_snapshots(mor, None, now=time.time() + 2 * ms.SNAPSHOT_RETAIN_S)) == cow_dirs

    # no hard links on the file system: nothing carried (a symbolic link would name the swapped path), and the
    # replacement goes on
    nolinks = str(tmp_path / "n")
    _write(nolinks, [1], 1)
    ms.publish(spark, db, "n", nolinks, cols, props, None)

    def no_link(*_a, **_k):
        raise OSError(1, "Operation not permitted")

    with hudilite.Table(nolinks).replacing() as staging:
        _write(staging, [5], 1)
        monkeypatch.setattr(os, "link", no_link)
    monkeypatch.undo()
    assert not os.path.isdir(ms.snapshot_root(nolinks)) or not os.listdir(ms.snapshot_root(nolinks))
    assert sorted(r["id"] for r in hudilite.read(spark, nolinks).collect()) == [5]


def test_publish_sets_only_changed_properties(spark, db, tmp_path):
    path = str(tmp_path / "t")
    cols = ["id", "v", "name"]
    props = {"hudilite.record_key": "id", "hudilite.table_type": "cow", "hudilite.partition_by": ""}
    _write(path, [1, 2], 1)
    first = Recorder(spark)
    ms.publish(spark, db, "t", path, cols, props, ms.describe(spark, db, "t"), sql=first)
    assert first.kinds() == ["CREATE"]
    assert _seen_by_another_session(spark, f"{db}.t") == [1, 2]

    c2 = _write(path, [3], 1)
    same = Recorder(spark)
    ms.publish(spark, db, "t", path, cols, dict(props), ms.describe(spark, db, "t"), sql=same)
    assert same.kinds() == ["SET LOCATION"]  # properties unchanged: no SET TBLPROPERTIES
    assert sorted(r[0] for r in spark.table(f"{db}.t").collect()) == [1, 2, 3]
    assert _seen_by_another_session(spark, f"{db}.t") == [1, 2, 3]
    assert _location(spark, db, "t").rstrip("/").endswith(f"/{c2}")  # the instant is the location's last part
    entry = ms.describe(spark, db, "t")
    assert entry is not None and ms.PROP_INSTANT not in entry.props and ms.PROP_SNAPSHOT not in entry.props

    c3 = _write(path, [4], 1)
    changed = Recorder(spark)
    ms.publish(spark, db, "t", path, cols, {**props, "hudilite.partition_by": "name", "extra": "1"}, entry,
               sql=changed)
    assert changed.kinds() == ["SET TBLPROPERTIES", "SET LOCATION"]
    assert "'hudilite.record_key'" not in changed.statements[0]  # only what differs is set
    entry = ms.describe(spark, db, "t")
    assert entry.props["hudilite.partition_by"] == "name" and entry.props["extra"] == "1"
    assert _location(spark, db, "t").rstrip("/").endswith(f"/{c3}")
    assert _seen_by_another_session(spark, f"{db}.t") == [1, 2, 3, 4]
    assert sorted(r[0] for r in spark.table(f"{db}.t").collect()) == [1, 2, 3, 4]


def test_per_commit_properties_of_an_older_entry_are_unset_once(spark, db, tmp_path):
    path = str(tmp_path / "t")
    cols = ["id", "v", "name"]
    props = {"hudilite.record_key": "id", "hudilite.table_type": "cow"}
    c1 = _write(path, [1], 1)
    ms.publish(spark, db, "t", path, cols, props, None)
    # an entry as earlier versions published it: the instant and the snapshot directory as properties
    spark.sql(f"ALTER TABLE {db}.t SET TBLPROPERTIES ('{ms.PROP_INSTANT}' = '{c1}', "
              f"'{ms.PROP_SNAPSHOT}' = '{_location(spark, db, 't')}')")
    _write(path, [2], 1)
    old = Recorder(spark)
    ms.publish(spark, db, "t", path, cols, props, ms.describe(spark, db, "t"), sql=old)
    assert old.kinds() == ["UNSET TBLPROPERTIES", "SET LOCATION"]
    assert ms.PROP_INSTANT in old.statements[0] and ms.PROP_SNAPSHOT in old.statements[0]
    entry = ms.describe(spark, db, "t")
    assert ms.PROP_INSTANT not in entry.props and ms.PROP_SNAPSHOT not in entry.props
    _write(path, [3], 1)
    again = Recorder(spark)
    ms.publish(spark, db, "t", path, cols, props, entry, sql=again)
    assert again.kinds() == ["SET LOCATION"]
    assert sorted(r[0] for r in spark.table(f"{db}.t").collect()) == [1, 2, 3]


def test_describe_round_trips_over_connect(spark, db, tmp_path):
    if not is_connect(spark):
        pytest.skip("round trips of a Spark Connect session")
    from pyspark.sql.connect.client.core import SparkConnectClient

    path = str(tmp_path / "t")
    _write(path, [1], 1)
    ms.publish(spark, db, "t", path, ["id", "v", "name"], {"hudilite.record_key": "id"}, None)
    calls = []
    saved = {n: getattr(SparkConnectClient, n) for n in ("_execute_and_fetch_as_iterator", "_analyze", "config")}
    try:
        for n, orig in saved.items():
            def counted(*a, _orig=orig, _name=n, **k):
                calls.append(_name)
                return _orig(*a, **k)
            setattr(SparkConnectClient, n, counted)
        entry = ms.describe(spark, db, "t")
        described = list(calls)
    finally:
        for n, orig in saved.items():
            setattr(SparkConnectClient, n, orig)
    assert entry is not None and entry.path == path and entry.columns == ["id", "v", "name"]
    # DESCRIBE TABLE EXTENDED ... AS JSON, its row read from the reply: no analysis, no conf
    assert described == ["_execute_and_fetch_as_iterator"]
