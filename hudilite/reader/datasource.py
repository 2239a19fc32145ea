"""`spark.read.format("hudilite")`: a Python data source over the same read plans.

Options: `path` (or `.load(path)`), `as_of`, `begin`, `end` (incremental), and
`hoodie.datasource.query.type=read_optimized` (or `read_optimized=true`: merge-on-read base files only). One
input partition per file slice, read with pyarrow in the Python workers; slices with log files (merge-on-read)
are merged there. `hudilite.read()` is the fast path (Spark's native parquet scan); this source exists so SQL
(`CREATE TABLE t USING hudilite OPTIONS (path ...)`) and `format("hudilite")` work.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

try:
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
except ImportError:  # pragma: no cover - pyspark < 4
    DataSource = object
    DataSourceReader = object
    InputPartition = object

from hudilite.schema import arrow_to_spark, cast_table_to_schema


class _SlicePartition(InputPartition):
    def __init__(self, files: list[str], merged: str | None = None):
        super().__init__(files)
        self.files = files
        self.merged = merged  # SliceDesc JSON of a slice with log files


class HudiliteDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "hudilite"

    def _plan(self):
        from hudilite.reader.planner import plan_read

        path = self.options.get("path")
        if not path:
            raise ValueError("hudilite data source: no path given (use .load(path) or OPTIONS (path '...'))")
        qt = str(self.options.get("hoodie.datasource.query.type", "snapshot")).lower()
        ro = qt == "read_optimized" or str(self.options.get("read_optimized", "false")).lower() == "true"
        return plan_read(path, as_of=self.options.get("as_of"), begin=self.options.get("begin"),
                         end=self.options.get("end"), read_optimized=ro)

    def schema(self):
        return arrow_to_spark(self._plan().schema)

    def reader(self, schema):
        return _Reader(self._plan())


class _Reader(DataSourceReader):
    def __init__(self, plan):
        self.schema = plan.schema
        self.files = plan.plain_files
        self.commit_times = plan.commit_times if plan.query == "incremental" else None
        from hudilite.reader.merge import SliceDesc

        self.merged = [SliceDesc.of(s).to_json() for s in plan.merged_slices]
        self.spec = plan.merge_spec() if self.merged else None

    def partitions(self):
        parts = [_SlicePartition([f]) for f in self.files] + [_SlicePartition([], m) for m in self.merged]
        return parts or [_SlicePartition([])]

    def read(self, partition):
        if getattr(partition, "merged", None):
            from hudilite.reader.merge import SliceDesc, merge_slice

            t = cast_table_to_schema(merge_slice(SliceDesc.from_json(partition.merged), self.spec), self.schema)
            yield from t.to_batches()
            return
        for f in partition.files:
            t = cast_table_to_schema(_retype_to_string(pq.read_table(f), self.schema), self.schema)
            if self.commit_times is not None:
                t = t.filter(pc.is_in(t.column("_hoodie_commit_time"), value_set=pa.array(self.commit_times)))
            for b in t.to_batches():
                yield b


def _retype_to_string(t: pa.Table, schema: pa.Schema) -> pa.Table:
    """Columns stored as numbers where the table schema says string (Java's timestamp key generators) are read
    as their string form, as hudi-rs does."""
    for i, f in enumerate(t.schema):
        if f.name in schema.names and pa.types.is_string(schema.field(f.name).type) and (
                pa.types.is_integer(f.type) or pa.types.is_floating(f.type)):
            t = t.set_column(i, pa.field(f.name, pa.string()), pc.cast(t.column(i), pa.string()))
    return t


def register(spark) -> None:
    if getattr(spark, "_hudilite_registered", False):
        return
    try:
        spark.dataSource.register(HudiliteDataSource)
    except Exception as e:  # noqa: BLE001 - sessions sharing a registry (newSession()) already have it
        if "DATA_SOURCE_ALREADY_EXISTS" not in str(e):
            raise
    try:
        spark._hudilite_registered = True
    except Exception:  # noqa: BLE001
        pass
