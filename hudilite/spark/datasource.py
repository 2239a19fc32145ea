"""`spark.read.format("hudilite")`: a Python data source over the same read plans.

Options: `path` (or `.load(path)`, or a catalog table's `LOCATION`; plain paths, `file:/x` and `file:///x`),
`as_of`, `begin`, `end` (incremental; `completion_bounds=true`: they are completion times, as checkpoints), and
`hoodie.datasource.query.type=read_optimized` (or `read_optimized=true`: merge-on-read base files only); Apache
Hudi's names work too (`as.of.instant`, `hoodie.datasource.query.type=incremental` with
`hoodie.datasource.read.begin.instanttime` / `.end.instanttime`: `read_range`). SQL:
`CREATE TABLE t USING hudilite OPTIONS (path ...)` or `... LOCATION '...'`; with a column list the table reads
exactly those columns (the dbt adapter's merge-on-read catalog entries hide the `_hoodie_*` meta columns that way).

Planning: comparisons of partition columns with literals (`=`, `<`, `<=`, `>`, `>=`, `IN`) are pushed into
`plan_read`'s partition pruning (`pushFilters`, which PySpark only calls with
`spark.sql.python.filterPushdown.enabled=true`: `register()` sets it). Spark still evaluates every filter on
the rows (the pushdown only drops partitions that cannot match), so a partial or conservative prune is
never wrong. PySpark 4.3 has no column-pruning hook for Python sources: only the columns of the schema
Spark asks for (the table's, or a catalog entry's column list) are read from the files.
Files and merged slices are packed into input partitions of ~`hudilite.read.partition.bytes` (default 128
MB) so a table of many small partitions is not one Python task per file (a Python task costs far more than a
tiny file); each is read with pyarrow in a Python worker, slices with log files merged there. A task's base
files are read in a thread pool, ~16 MB of files at a time, and concatenated per run of equal file schemas,
cast and projected once and yielded as few large record batches, not one small batch per file.
`hudilite.read()` (Spark's native parquet scan, which prunes columns) stays the path for large tables of plain
base files.
"""

from __future__ import annotations

import datetime as _dt
import decimal as _decimal
import itertools
from concurrent.futures import ThreadPoolExecutor

import pyarrow as pa
import pyarrow.compute as pc

try:
    from pyspark.sql.datasource import (
        DataSource,
        DataSourceReader,
        EqualTo,
        GreaterThan,
        GreaterThanOrEqual,
        In,
        InputPartition,
        LessThan,
        LessThanOrEqual,
    )
    from pyspark.sql.udf import _wrap_function  # how PySpark's own DataSourceRegistration wraps the class
except ImportError:  # pragma: no cover - pyspark < 4.1
    DataSource = DataSourceReader = InputPartition = object
    EqualTo = GreaterThan = GreaterThanOrEqual = In = LessThan = LessThanOrEqual = ()

from hudilite.errors import InvalidReadError
from hudilite.options import QUERY_TYPE, READ_BEGIN, READ_END, READ_PARTITION_BYTES, check_read_options, parse_bool
from hudilite.reader.merge import SliceDesc, merge_slices
from hudilite.reader.planner import plan_read, table_schema
from hudilite.schema import cast_table_to_schema
from hudilite.spark.schema import arrow_to_spark, spark_to_arrow, to_jvm_arrow
from hudilite.storage import capture_all_bindings, install_bindings
from hudilite.storage.local import normalize_path, storage_for
from hudilite.table import HoodieTable

PATH_KEY = "hudilite.path"  # field metadata naming the table (catalog tables; see HudiliteDataSource.path)
SOURCE_NAME = "hudilite"  # the data source's name: `USING hudilite`, a catalog table's provider
PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"
PARTITION_BYTES = READ_PARTITION_BYTES.default
WINDOW_BYTES = 16 << 20  # base files read and concatenated together in a task (on-disk bytes)
READ_THREADS = 8  # files of a group read concurrently (pyarrow releases the GIL)
_OPS = ((EqualTo, "="), (GreaterThan, ">"), (GreaterThanOrEqual, ">="), (LessThan, "<"), (LessThanOrEqual, "<="),
        (In, "in"))

# Apache Hudi's names of the read options: a read written for Apache Hudi reads the same rows here (they used to
# be ignored, so such a read returned the latest snapshot)
HUDI_AS_OF = "as.of.instant"
HUDI_BEGIN, HUDI_END = READ_BEGIN.key, READ_END.key


def read_range(options) -> tuple:
    """(as_of, begin, end) of the data source's options: ours (`as_of`, `begin`, `end`: an incremental read) or
    Apache Hudi's (`as.of.instant`; `hoodie.datasource.query.type=incremental` with
    `hoodie.datasource.read.begin.instanttime` / `.end.instanttime`). Apache Hudi's range keys without its
    incremental query type, or that type without a begin, are an error rather than a snapshot read."""
    def one(ours: str, hudi: str):
        a, b = options.get(ours), options.get(hudi)
        if a is not None and b is not None and str(a) != str(b):
            raise InvalidReadError(f"hudilite data source: options {ours}={a!r} and {hudi}={b!r} disagree")
        return a if a is not None else b

    query_type = QUERY_TYPE.get(options)
    as_of, begin, end = one("as_of", HUDI_AS_OF), one("begin", HUDI_BEGIN), one("end", HUDI_END)
    hudi_range = [k for k in (HUDI_BEGIN, HUDI_END) if options.get(k) is not None]
    if hudi_range and query_type != "incremental":
        raise InvalidReadError(f"hudilite data source: {', '.join(hudi_range)} needs {QUERY_TYPE.key}=incremental "
                               f"(it is {query_type}): without it the read would be a snapshot")
    if query_type == "incremental" and begin is None:
        raise InvalidReadError(f"hudilite data source: {QUERY_TYPE.key}=incremental needs {HUDI_BEGIN} (or begin)")
    return as_of, begin, end


class _Group(InputPartition):
    """Plain base files and merged slices (SliceDesc JSON) read by one task, with the plan's read context
    (PySpark pickles the reader before `partitions()` runs, so what planning learns travels here)."""

    def __init__(self, files: list[str], merged: list[str], ctx: "_Context"):
        super().__init__(len(files) + len(merged))
        self.files = files
        self.merged = merged
        self.ctx = ctx


class _Context:
    def __init__(self, schema: pa.Schema, columns: list, commit_times, spec):
        self.schema = schema  # the table's read schema (meta fields first)
        self.columns = columns  # per requested field: its table column, or None (read as nulls)
        self.commit_times = commit_times
        self.spec = spec


class HudiliteDataSource(DataSource):
    # The storage options bound in the registering process (`register`): a catalog entry's reader gets no
    # options, and plans and reads in Python workers where nothing was bound (an s3:// warehouse's tables).
    # Spark pickles the instance and the reader between steps (each may run in another worker): every step
    # installs them first (cheap when already installed).
    bindings: tuple = ()

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def path(self, schema=None) -> str:
        """The table path: the `path` option, else the `hudilite.path` metadata of the schema Spark hands the
        reader. PySpark 4.3 gives the reader of a catalog table (`CREATE TABLE t USING hudilite ...`) no
        options at all, only the stored schema, so `schema()` stamps the path on every field and the catalog
        keeps it."""
        path = self.options.get("path")
        if not path and schema is not None:
            path = next((f.metadata.get(PATH_KEY) for f in schema.fields if f.metadata.get(PATH_KEY)), None)
        if not path:
            raise InvalidReadError("hudilite data source: no path given (use .load(path), OPTIONS (path '...') or "
                                   "LOCATION '...'; a catalog table created with a column list needs the "
                                   f"'{PATH_KEY}' field metadata)")
        return normalize_path(path)

    def _plan(self, path: str, filters=None):
        check_read_options(self.options)  # a misspelled hudilite.* key fails instead of doing nothing
        ro = QUERY_TYPE.get(self.options) == "read_optimized" or \
            parse_bool(self.options.get("read_optimized"), "read_optimized", False)
        as_of, begin, end = read_range(self.options)
        return plan_read(path, as_of=as_of, begin=begin, end=end, read_optimized=ro, filters=filters,
                         completion_bounds=parse_bool(self.options.get("completion_bounds"), "completion_bounds",
                                                      False))

    def schema(self):
        """The table's read schema from the timeline (the latest commit's schema: what `plan_read` reads with).
        Spark asks for it before any filter is pushed, so no file slices are planned here: that waits for
        `partitions()`, with the pushed partition filters."""
        from pyspark.sql.types import StructField, StructType

        install_bindings(self.bindings)  # each step may run in another worker (the instance is pickled)
        path = self.path()
        return StructType([StructField(f.name, f.dataType, f.nullable, {**f.metadata, PATH_KEY: path})
                           for f in arrow_to_spark(table_schema(HoodieTable.open(path))).fields])

    def reader(self, schema):
        return _Reader(self, schema)

    def writer(self, schema, overwrite: bool):
        # a commit needs the driver's planning (index lookup, file groups, markers) before any task writes,
        # which a data source writer's tasks-then-commit shape does not give
        raise NotImplementedError(
            "the hudilite data source reads only: write with hudilite.write(df, path, record_key=...) or "
            "hudilite.Table.open(path).write(df) (one commit, any size), or through dbt; nothing was written")


class _Reader(DataSourceReader):
    def __init__(self, source: HudiliteDataSource, schema):
        install_bindings(source.bindings)
        self.source = source
        self.bindings = source.bindings  # the reader is unpickled for each later step, in other workers
        self.path = source.path(schema)
        self.want = spark_to_arrow(schema)  # what Spark asked for: the table's columns or a catalog entry's
        self.out = to_jvm_arrow(self.want)  # the batches' types PySpark checks (TIME as nanoseconds)
        self.filters: list[tuple] = []

    def pushFilters(self, filters):
        install_bindings(self.bindings)
        cfg = HoodieTable.open(self.path).config
        parts = {c.lower(): c for c in (cfg.partition_fields if cfg.is_partitioned else ())}
        types = {f.name: f.type for f in self.want}
        for f in filters:
            t = _partition_filter(f, parts, types)
            if t is not None:
                self.filters.append(t)
            yield f  # Spark still filters the rows: the pushdown only prunes partitions

    def partitions(self):
        install_bindings(self.bindings)
        plan = self.source._plan(self.path, self.filters)
        names = {n.lower(): n for n in plan.schema.names}
        merged = plan.merged_slices
        ctx = _Context(plan.schema, [names.get(f.name.lower()) for f in self.want],
                       plan.commit_times if plan.query == "incremental" else None,
                       plan.merge_spec() if merged else None)
        limit = READ_PARTITION_BYTES.get(self.source.options)
        units = [(_size(f), f, None) for f in plan.plain_files]
        units += [(sum(_size(p) for p in s.files), None, SliceDesc.of(s).to_json()) for s in merged]
        groups, cur, cur_bytes = [], ([], []), 0
        for size, f, m in units:
            if (cur[0] or cur[1]) and cur_bytes + size > limit:
                groups.append(_Group(*cur, ctx))
                cur, cur_bytes = ([], []), 0
            (cur[0].append(f) if f is not None else cur[1].append(m))
            cur_bytes += size
        if cur[0] or cur[1] or not groups:
            groups.append(_Group(*cur, ctx))
        return groups

    def _project(self, t: pa.Table, ctx: _Context) -> pa.Table:
        cols = []
        for f, src in zip(self.want, ctx.columns):
            if src is None or src not in t.column_names:
                cols.append(pa.nulls(t.num_rows, f.type))
            else:
                c = t.column(src)
                cols.append(c if c.type.equals(f.type) else c.cast(f.type))
        out = pa.Table.from_arrays(cols, schema=self.want)
        return out if self.out.equals(self.want) else out.cast(self.out)

    def read(self, partition):
        install_bindings(self.bindings)
        ctx = partition.ctx
        needed = {c for c in ctx.columns if c is not None}
        if ctx.commit_times is not None:
            needed.add("_hoodie_commit_time")
        sub = pa.schema([f for f in ctx.schema if f.name in needed])
        if partition.merged:  # one vectorized merge for the group's slices (many tiny slices: one fold)
            t = merge_slices([SliceDesc.from_json(m) for m in partition.merged], ctx.spec)
            yield from self._project(cast_table_to_schema(t, ctx.schema), ctx).to_batches()
        # The group's base files read concurrently, then converted once per run of files with the same
        # schema: many tiny files make a few large batches, not one small 50-column batch per file. In windows
        # of ~WINDOW_BYTES on disk, so a task of many files never holds all of them decoded at once.
        for window in _windows(partition.files):
            for _schema, run in itertools.groupby(_read_files(window, needed), key=lambda t: t.schema):
                t = pa.concat_tables(list(run))
                t = cast_table_to_schema(_retype_to_string(t, sub), sub)
                if ctx.commit_times is not None:
                    t = t.filter(pc.is_in(t.column("_hoodie_commit_time"), value_set=pa.array(ctx.commit_times)))
                yield from self._project(t, ctx).combine_chunks().to_batches()


def _windows(files: list[str]):
    cur, size = [], 0
    for f in files:
        s = _size(f)
        if cur and size + s > WINDOW_BYTES:
            yield cur
            cur, size = [], 0
        cur.append(f)
        size += s
    if cur:
        yield cur


def _read_files(files: list[str], needed: set) -> list[pa.Table]:
    def one(f):
        pf = storage_for(f).parquet_file(f)
        return pf.read(columns=[n for n in pf.schema_arrow.names if n in needed], use_threads=False)

    if len(files) <= 1:
        return [one(f) for f in files]
    with ThreadPoolExecutor(min(READ_THREADS, len(files))) as ex:
        return list(ex.map(one, files))


def _size(path: str) -> int:
    try:
        return storage_for(path).size(path)
    except OSError:
        return 0


def _partition_filter(f, parts: dict, types: dict):
    """(column, op, value) for plan_read's partition pruner, or None when `f` is not a comparison of a
    partition column with a literal the pruner compares exactly. Empty strings are not pushed: `""` and null
    are stored in the same default partition."""
    op = next((o for cls, o in _OPS if isinstance(f, cls)), None)
    if op is None or len(f.attribute) != 1:
        return None
    col = parts.get(f.attribute[0].lower())
    if col is None:
        return None
    t = types.get(col) or next((v for k, v in types.items() if k.lower() == col.lower()), None)
    values = list(f.value) if op == "in" else [f.value]
    if t is None or not values or not all(_exact(v, t) for v in values):
        return None
    return (col, op, values if op == "in" else values[0])


def _exact(v, t: pa.DataType) -> bool:
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return isinstance(v, str) and v != ""
    if pa.types.is_integer(t):
        return type(v) is int
    if pa.types.is_date(t):
        return type(v) is _dt.date
    if pa.types.is_decimal(t):
        return isinstance(v, _decimal.Decimal)
    if pa.types.is_timestamp(t):  # PySpark hands a TIMESTAMP literal over as an aware UTC datetime
        return isinstance(v, _dt.datetime) and (v.tzinfo is None) == (t.tz is None)
    return False


def _retype_to_string(t: pa.Table, schema: pa.Schema) -> pa.Table:
    """Columns stored as numbers where the table schema says string (Java's timestamp key generators) are read
    as their string form, as hudi-rs does."""
    for i, f in enumerate(t.schema):
        if f.name in schema.names and pa.types.is_string(schema.field(f.name).type) and (
                pa.types.is_integer(f.type) or pa.types.is_floating(f.type)):
            t = t.set_column(i, pa.field(f.name, pa.string()), pc.cast(t.column(i), pa.string()))
    return t


def _source_class() -> type:
    """The data source class to register: HudiliteDataSource itself, or, when storage options are bound in this
    process, a subclass carrying them. Made here, it is pickled by value with its `bindings` (cloudpickle pickles
    a class its module does not hold under its name by value), so the workers get them; they may hold
    credentials and travel like any task closure."""
    bindings = capture_all_bindings()
    if not bindings:
        return HudiliteDataSource
    return type("HudiliteDataSource", (HudiliteDataSource,),
                {"bindings": bindings, "__qualname__": "HudiliteDataSource_with_bindings", "__module__": __name__})


def _register_in_own_manager(spark, cls: type) -> None:
    """Spark refuses a registration whose name already resolves anywhere - e.g. in the process's default session
    - but resolves `USING hudilite` in the statement's own session: a new session (`newSession()`) of a process
    whose default session has the source would then have none. Register in the session's own manager (classic
    sessions; a Spark Connect session has no JVM handle and keeps the refusal's meaning)."""
    jsession = getattr(spark, "_jsparkSession", None)
    if jsession is None:
        return
    manager = jsession.sessionState().dataSourceManager()
    name = HudiliteDataSource.name()
    if manager.dataSourceExists(name):
        return
    sc = spark.sparkContext
    ds = sc._jvm.org.apache.spark.sql.execution.datasources.v2.python.UserDefinedPythonDataSource(
        _wrap_function(sc, cls))
    manager.registerDataSource(name, ds)


def register(spark) -> None:
    """Register the data source in `spark` and enable Python filter pushdown there (the reader prunes
    partitions; PySpark refuses a reader with `pushFilters` in a session where the conf is off). The storage
    options bound in this process now (`bind_storage_options`) go with it to the workers."""
    if getattr(spark, "_hudilite_registered", False):
        return
    cls = _source_class()
    try:
        spark.dataSource.register(cls)
    except Exception as e:  # noqa: BLE001
        if "DATA_SOURCE_ALREADY_EXISTS" not in str(e):
            raise
        _register_in_own_manager(spark, cls)
    spark.conf.set(PUSHDOWN_CONF, "true")
    try:
        spark._hudilite_registered = True
    except Exception:  # noqa: BLE001
        pass
