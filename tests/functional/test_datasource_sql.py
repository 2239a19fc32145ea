"""The `hudilite` data source from SQL and the DataFrame reader: catalog tables, every form of a path,
partition filters pushed into planning, merged (merge-on-read) reads with a catalog column list."""

import os

import pyarrow as pa
import pytest

import hudilite
from hudilite.fs_view import FileSystemView
from hudilite.services.clean import run_clean
from hudilite.services.compaction import compact
from hudilite.spark.datasource import HudiliteDataSource
from hudilite.storage.local import normalize_path

PARTS = 12


def _rows(n_parts=PARTS, per=3, v=0):
    ids = list(range(n_parts * per))
    return pa.table({"id": ids, "v": [float(i + v) for i in ids], "dt": [f"p{i % n_parts:03d}" for i in ids]})


def _sorted(rows, *cols):
    return sorted(tuple(r[c] for c in cols) for r in rows)


@pytest.fixture
def reg(spark):
    hudilite.register(spark)
    return spark


def test_normalize_path_accepts_spark_and_user_forms(tmp_path):
    p = str(tmp_path / "t")
    for form in (p, "file:" + p, "file://" + p, "file://localhost" + p, "FILE:" + p):
        assert normalize_path(form) == p
    with pytest.raises(ValueError, match="host 'otherhost'"):
        normalize_path("file://otherhost" + p)
    with pytest.raises(ValueError, match="absolute path"):
        normalize_path("file:relative/x")


def test_every_path_form_reads_writes_and_serves(reg, tmp_path):
    p = str(tmp_path / "t")
    hudilite.write(_rows(), "file:" + p, record_key="id", partition_by=("dt",), operation="bulk_insert",
                   table_type="MERGE_ON_READ")
    hudilite.write(_rows(v=100).slice(0, 5), "file://" + p, record_key="id", partition_by=("dt",),
                   table_type="MERGE_ON_READ")
    want = _sorted(hudilite.read(reg, p).collect(), "id", "v")
    assert len(want) == PARTS * 3
    assert _sorted(hudilite.read(reg, "file://" + p).collect(), "id", "v") == want
    assert _sorted(reg.read.format("hudilite").load("file:" + p).collect(), "id", "v") == want
    compact("file:" + p, force=True)
    run_clean("file://" + p)
    assert _sorted(hudilite.read(reg, "file:" + p).collect(), "id", "v") == want


def test_create_table_location_and_options_path(reg, tmp_path):
    p = str(tmp_path / "t")
    hudilite.write(_rows(), p, record_key="id", partition_by=("dt",), operation="bulk_insert")
    reg.sql(f"CREATE TABLE ds_loc USING hudilite LOCATION '{p}'")  # Spark hands the source 'file:/...'
    reg.sql(f"CREATE TABLE ds_opt USING hudilite OPTIONS (path 'file://{p}')")
    try:
        for t in ("ds_loc", "ds_opt"):
            assert reg.sql(f"SELECT count(*) FROM {t}").collect()[0][0] == PARTS * 3
            got = reg.sql(f"SELECT id FROM {t} WHERE dt IN ('p001', 'p002') AND v >= 0").collect()
            assert sorted(r.id for r in got) == sorted(i for i in range(PARTS * 3) if i % PARTS in (1, 2))
    finally:
        reg.sql("DROP TABLE IF EXISTS ds_loc")
        reg.sql("DROP TABLE IF EXISTS ds_opt")
    assert os.path.isfile(os.path.join(p, ".hoodie", "hoodie.properties"))  # dropping the entry keeps the data


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_partition_filters_prune_planning(reg, tmp_path, table_type):
    """A filter on the partition column plans only the matching partitions: with every other partition's
    files damaged, and a file there that fails their listing (an ORC base file), the pruned reads still
    succeed (without pruning they list or read the damaged files and fail)."""
    p = str(tmp_path / "t")
    hudilite.write(_rows(), p, record_key="id", partition_by=("dt",), operation="bulk_insert",
                   table_type=table_type)
    hudilite.write(_rows(v=100).filter(pa.compute.is_in(pa.compute.field("dt"), pa.array(["p007", "p008"]))),
                   p, record_key="id", partition_by=("dt",), table_type=table_type)  # MOR: log files
    expect = {r.id: r.v for r in hudilite.read(reg, p, filters=[("dt", "in", ["p007", "p008"])]).collect()}
    assert set(expect.values()) >= {107.0}
    for name in os.listdir(p):
        if name.startswith("dt=") and name not in ("dt=p007", "dt=p008"):
            for f in os.listdir(os.path.join(p, name)):
                if not f.startswith("."):
                    with open(os.path.join(p, name, f), "wb") as out:
                        out.write(b"not parquet")
                    if f.endswith(".parquet"):
                        with open(os.path.join(p, name, f[:-len(".parquet")] + ".orc"), "wb") as out:
                            out.write(b"not orc")
    df = reg.read.format("hudilite").load(p)
    assert {r.id: r.v for r in df.where("dt IN ('p007', 'p008')").collect()} == expect
    assert {r.id: r.v for r in df.where("dt = 'p007'").collect()} == {k: v for k, v in expect.items()
                                                                      if k % PARTS == 7}
    assert {r.id for r in df.where("dt >= 'p007' AND dt < 'p009' AND v > 100").collect()} == \
        {k for k, v in expect.items() if v > 100}
    with pytest.raises(Exception):  # an unpruned read does reach the damaged files
        df.where("v > 0").collect()


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_pruned_read_lists_only_matching_partitions(tmp_path, monkeypatch, table_type):
    """Building a data source read the way Spark does (schema(), reader(), pushFilters(), partitions()) lists
    the files of the partitions the pushed filters keep, and of no other: the schema comes from the timeline,
    the file slices are planned once the filters are known. Run in-process: Spark calls these in Python workers,
    where no counter of the test's process would see them."""
    from pyspark.sql.datasource import EqualTo, GreaterThan

    p = str(tmp_path / "t")
    hudilite.write(_rows(), p, record_key="id", partition_by=("dt",), operation="bulk_insert",
                   table_type=table_type)
    hudilite.write(_rows(v=100).slice(0, PARTS), p, record_key="id", partition_by=("dt",),
                   table_type=table_type)  # MOR: a log file in every partition
    listed = []
    file_groups = FileSystemView.file_groups
    monkeypatch.setattr(FileSystemView, "file_groups", lambda self, part: listed.append(part) or
                        file_groups(self, part))

    source = HudiliteDataSource({"path": p})
    schema = source.schema()
    assert listed == []
    reader = source.reader(schema)
    pushed = [EqualTo(("dt",), "p007"), GreaterThan(("v",), 0.0)]
    assert list(reader.pushFilters(pushed)) == pushed  # Spark still evaluates them on the rows
    assert listed == []
    groups = reader.partitions()
    assert listed == ["dt=p007"]
    rows = pa.Table.from_batches([b for g in groups for b in reader.read(g)])
    assert sorted(zip(rows.column("id").to_pylist(), rows.column("v").to_pylist())) == \
        [(7, 107.0), (7 + PARTS, 7.0 + PARTS), (7 + 2 * PARTS, 7.0 + 2 * PARTS)]

    listed.clear()
    reader = source.reader(source.schema())
    reader.partitions()
    assert sorted(listed) == [f"dt=p{i:03d}" for i in range(PARTS)]


def test_catalog_column_list_reads_merged_rows(reg, tmp_path):
    """A catalog entry with a column list (the dbt adapter's merge-on-read entry) reads exactly those
    columns of the merged snapshot: updates and deletes in log files applied, no meta columns."""
    from pyspark.sql.types import StructField, StructType

    from hudilite.spark.datasource import PATH_KEY

    p = str(tmp_path / "t")
    hudilite.write(_rows(), p, record_key="id", partition_by=("dt",), operation="bulk_insert",
                   table_type="MERGE_ON_READ")
    upd = pa.table({"id": [1, 2], "v": [-1.0, -2.0], "dt": ["p001", "p002"],
                    "_hoodie_is_deleted": [False, True]})
    hudilite.write(upd, p, record_key="id", partition_by=("dt",), table_type="MERGE_ON_READ")
    full = hudilite.read(reg, p).schema
    cols = StructType([StructField(f.name, f.dataType, True, {PATH_KEY: p}) for f in full.fields
                       if f.name in ("id", "v", "dt")])
    reg.catalog.createTable("ds_cols", source="hudilite", schema=cols, path=p)
    try:
        df = reg.table("ds_cols")
        assert df.columns == ["id", "v", "dt"]
        got = {r.id: r.v for r in df.collect()}
        want = {i: float(i) for i in range(PARTS * 3) if i != 2}
        want[1] = -1.0
        assert got == want
        assert {r.id for r in reg.sql("SELECT id FROM ds_cols WHERE dt = 'p001'").collect()} == \
            {i for i in want if i % PARTS == 1}
    finally:
        reg.sql("DROP TABLE IF EXISTS ds_cols")
    assert os.path.isfile(os.path.join(p, ".hoodie", "hoodie.properties"))


def test_a_new_session_of_a_registered_process_resolves_the_source(spark, tmp_path):
    """Spark refuses to register `hudilite` in a new session once the process's default session has it, yet
    resolves `USING hudilite` in the new session's own registry: register() must leave the source usable there
    (dbt in a process with a running PySpark session: its newSession() created the MOR catalog entries)."""
    path = str(tmp_path / "t")
    hudilite.write(pa.table({"id": [1, 2, 3], "v": [1.0, 2.0, 3.0]}), path, record_key="id",
                   table_type="MERGE_ON_READ")
    hudilite.register(spark)
    other = spark.newSession()
    hudilite.register(other)
    other.sql(f"CREATE TABLE new_session_entry USING hudilite LOCATION '{path}'")
    try:
        assert other.table("new_session_entry").count() == 3
    finally:
        other.sql("DROP TABLE IF EXISTS new_session_entry")


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_a_narrower_schema_reads_only_its_columns(reg, tmp_path, monkeypatch, table_type):
    """PySpark 4.3 prunes no columns of a Python data source (its reader gets the relation's whole schema); a
    narrower user schema is the lever: base files are read for those columns only (merged slices still merge
    whole), with the same values as the full read."""
    import pyarrow.parquet as pq

    p = str(tmp_path / "t")
    wide = _rows().append_column("w", pa.array([f"x{i}" for i in range(PARTS * 3)]))
    hudilite.write(wide, p, record_key="id", partition_by=("dt",), operation="bulk_insert", table_type=table_type)
    hudilite.write(wide.slice(0, 2), p, record_key="id", partition_by=("dt",), table_type=table_type)
    full = _sorted(reg.read.format("hudilite").load(p).collect(), "id", "v", "dt")
    narrow = reg.read.format("hudilite").schema("id long, v double, dt string").load(p)
    assert narrow.columns == ["id", "v", "dt"]
    assert _sorted(narrow.collect(), "id", "v", "dt") == full
    # in this process (the data source's reader runs in Python workers, so check the column selection directly)
    from hudilite.spark import datasource

    seen = []
    real = pq.ParquetFile.read

    def spy(self, columns=None, **kw):
        seen.append(columns)
        return real(self, columns=columns, **kw)

    monkeypatch.setattr(pq.ParquetFile, "read", spy)
    src = datasource.HudiliteDataSource({"path": p})
    from pyspark.sql.types import DoubleType, LongType, StringType, StructField, StructType

    reader = src.reader(StructType([StructField("id", LongType()), StructField("v", DoubleType()),
                                    StructField("dt", StringType())]))
    rows = [r for part in reader.partitions() for b in reader.read(part) for r in b.to_pylist()]
    assert sorted((r["id"], r["v"], r["dt"]) for r in rows) == full
    plain = [c for c in seen if c is not None]
    assert plain and all("w" not in c and "_hoodie_record_key" not in c for c in plain), seen


def test_a_task_reads_many_files_into_few_batches(tmp_path, monkeypatch):
    """A task's many small base files come back as one batch per run of equal file schemas (not one per file),
    files written before a column was added read it as nulls: in-process, the way Spark's worker calls it."""
    from hudilite.spark import datasource

    p = str(tmp_path / "t")
    hudilite.write(_rows(), p, record_key="id", partition_by=("dt",), operation="bulk_insert")
    more = _rows(v=1000)
    more = pa.table({"id": pa.array([i + 1000 for i in more.column("id").to_pylist()]), "v": more.column("v"),
                     "dt": pa.array([f"q{d}" for d in more.column("dt").to_pylist()]),
                     "w": pa.array([f"x{i}" for i in range(more.num_rows)])})
    hudilite.write(more, p, record_key="id", partition_by=("dt",), operation="bulk_insert")
    source = HudiliteDataSource({"path": p})
    reader = source.reader(source.schema())
    groups = reader.partitions()
    assert len(groups) == 1 and len(groups[0].files) == 2 * PARTS
    batches = list(reader.read(groups[0]))
    assert len(batches) <= 4  # one per run of equal file schemas (2 here), not one per file (24)
    t = pa.Table.from_batches(batches)
    assert t.num_rows == 2 * more.num_rows
    got = sorted(zip(t.column("id").to_pylist(), t.column("v").to_pylist(), t.column("w").to_pylist()))
    want = sorted([(i, v, None) for i, v in zip(_rows().column("id").to_pylist(), _rows().column("v").to_pylist())]
                  + list(zip(more.column("id").to_pylist(), more.column("v").to_pylist(),
                             more.column("w").to_pylist())))
    assert got == want
    monkeypatch.setattr(datasource, "WINDOW_BYTES", 1)  # one file per window: the same rows, a batch per file
    t = pa.Table.from_batches(list(reader.read(groups[0])))
    assert sorted(zip(t.column("id").to_pylist(), t.column("v").to_pylist(), t.column("w").to_pylist())) == want


def test_timestamp_and_decimal_partition_filters_prune(reg, tmp_path, monkeypatch):
    """PySpark hands TIMESTAMP literals to pushFilters as aware UTC datetimes and DECIMAL ones as Decimals: both
    are pushed into planning, which compares them with the partitions' values (in-process, as above; the same
    queries through Spark return the rows)."""
    import datetime as dt
    from decimal import Decimal

    from pyspark.sql.datasource import EqualTo, In

    p = str(tmp_path / "t")
    utc = dt.timezone.utc
    stamps = [dt.datetime(2024, 1, 1, 10, 30, tzinfo=utc), dt.datetime(2024, 7, 1, 0, 0, 0, 250000, tzinfo=utc)]
    df = reg.createDataFrame([(i, stamps[i % 2], Decimal("1.50") if i < 2 else Decimal("-3.00")) for i in range(4)],
                             "id long, ts timestamp, amount decimal(5,2)")
    hudilite.write(df, p, record_key="id", partition_by=["ts", "amount"])
    zone = reg.conf.get("spark.sql.session.timeZone")
    reg.conf.set("spark.sql.session.timeZone", "America/New_York")
    try:
        sql = reg.read.format("hudilite").load(p)
        assert sorted(r.id for r in sql.where("ts = timestamp'2024-01-01 05:30:00'").collect()) == [0, 2]
        assert sorted(r.id for r in sql.where("amount in (1.5, -3) and ts > timestamp'2024-06-01 00:00:00'")
                      .collect()) == [1, 3]
        assert sorted(r.id for r in sql.where("amount = 1.5").collect()) == [0, 1]
    finally:
        reg.conf.set("spark.sql.session.timeZone", zone)

    listed = []
    file_groups = FileSystemView.file_groups
    monkeypatch.setattr(FileSystemView, "file_groups", lambda self, part: listed.append(part) or
                        file_groups(self, part))
    source = HudiliteDataSource({"path": p})
    every = [f"ts={t}/amount={a}" for t in ("2024-01-01 10:30:00", "2024-07-01 00:00:00.25") for a in ("-3.00", "1.50")]
    for pushed, parts in (
            ([EqualTo(("ts",), stamps[0])], every[:2]),
            ([In(("amount",), [Decimal("1.5")]), EqualTo(("ts",), stamps[1])], every[3:]),
            ([EqualTo(("ts",), "2024-01-01 10:30:00")], every)):  # a string: Spark casts it in the session's zone
        listed.clear()
        reader = source.reader(source.schema())
        list(reader.pushFilters(pushed))
        reader.partitions()
        assert sorted(listed) == parts, pushed


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_apache_hudi_read_option_names(reg, tmp_path, table_type):
    """A read written for Apache Hudi (`as.of.instant`; query type incremental with its begin/end keys) reads the
    rows it reads there: before, those keys were ignored and every such read returned the latest snapshot.
    Range keys without their query type are refused instead of read as a snapshot."""
    p = str(tmp_path / "t")
    c1 = hudilite.write(_rows(n_parts=2, per=2), p, record_key="id", partition_by=("dt",), table_type=table_type)
    c2 = hudilite.write(_rows(n_parts=2, per=1, v=100), p, record_key="id", partition_by=("dt",))
    c3 = hudilite.write(_rows(n_parts=2, per=2, v=200).slice(3, 1), p, record_key="id", partition_by=("dt",))

    def read(**options):
        return _sorted(reg.read.format("hudilite").options(**options).load(p).collect(), "id", "v")

    assert read(**{"as.of.instant": c1}) == [(i, float(i)) for i in range(4)]
    assert read(**{"as.of.instant": c2}) == read(as_of=c2) == [(0, 100.0), (1, 101.0), (2, 2.0), (3, 3.0)]
    incremental = {"hoodie.datasource.query.type": "incremental", "hoodie.datasource.read.begin.instanttime": c1}
    assert read(**incremental) == [(0, 100.0), (1, 101.0), (3, 203.0)]
    assert read(**incremental, **{"hoodie.datasource.read.end.instanttime": c2}) == read(begin=c1, end=c2) == \
        [(0, 100.0), (1, 101.0)]
    assert c3 > c2
    for bad, message in (({"hoodie.datasource.read.begin.instanttime": c1}, "needs hoodie.datasource.query.type"),
                         ({"hoodie.datasource.query.type": "incremental"}, "needs hoodie.datasource.read.begin"),
                         ({"as_of": c1, "as.of.instant": c2}, "disagree")):
        with pytest.raises(Exception, match=message):
            read(**bad)


def test_a_write_through_the_data_source_is_refused_clearly(reg, tmp_path):
    """`df.write.format("hudilite")` names the ways to write (before: PySpark's "writer is not implemented");
    the table is unchanged."""
    p = str(tmp_path / "t")
    hudilite.write(_rows(n_parts=2, per=1), p, record_key="id", partition_by=("dt",))
    before = sorted((d, f, os.path.getmtime(os.path.join(d, f))) for d, _, fs in os.walk(p) for f in fs)
    for mode in ("append", "overwrite"):
        with pytest.raises(Exception, match="reads only: write with hudilite.write"):
            reg.createDataFrame([(9, 9.0, "p000")], "id long, v double, dt string").write.format("hudilite") \
                .mode(mode).save(p)
    assert sorted((d, f, os.path.getmtime(os.path.join(d, f))) for d, _, fs in os.walk(p) for f in fs) == before
    assert _sorted(hudilite.read(reg, p).collect(), "id") == [(0,), (1,)]
