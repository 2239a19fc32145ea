"""Spark DataFrames for read plans, using Spark's native parquet scan over the planned base files."""

from __future__ import annotations

import datetime as _dt
import os

import pyarrow as pa

from hudilite.columns import META_FIELDS
from hudilite.errors import InvalidReadError
from hudilite.file_group import parse_base_file_name
from hudilite.options import SMALL_SLICE_BYTES as SMALL_SLICE_BYTES_OPTION
from hudilite.options import spark_conf
from hudilite.reader import overlay_cache
from hudilite.reader.merge import SliceDesc, merge_slices, to_spark_arrow
from hudilite.reader.overlay_cache import ROW_BITS
from hudilite.reader.planner import ReadPlan, plan_read
from hudilite.ready import ready_partitions
from hudilite.schema import SchemaError, avro_to_arrow, map_leaves
from hudilite.spark.files import read_parquet_files
from hudilite.spark.merge import FILE, ROW, SIZE, file_ids, merged_dataframe
from hudilite.spark.schema import arrow_to_spark, to_jvm_arrow
from hudilite.spark.session import default_parallelism, is_connect
from hudilite.storage import capture_bindings, install_bindings, storage_for


def plan_to_dataframe(spark, plan: ReadPlan, columns=None, *, table_read: bool = False):
    """Slices without log files: Spark's native parquet scan. Slices with log files (merge-on-read): their base
    files natively scanned minus the rows log records supersede, plus the winning log rows (`spark_merge`;
    the whole slice merged in Python workers if base file names are ambiguous). The union, with the plan's
    filters. `columns`: only these columns, in this order; files without log records to merge are scanned for
    them (and the filters' columns) alone - Spark cannot push a later select() into the Arrow scan of object
    stores, so this is where such reads prune columns. `table_read`: a read of the table's rows (`read`), whose
    errors may name the other ways to read them."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StructType

    schema = arrow_to_spark(plan.schema)
    keep = None
    if columns is not None:
        columns = list(columns)
        unknown = [c for c in columns if c not in schema.fieldNames()]
        if unknown:
            raise InvalidReadError(f"columns {unknown} are not in the table (its columns: "
                                   f"{', '.join(schema.fieldNames())})")
        need = set(columns) | {c for c, _op, _v in plan.filters}
        if plan.query == "incremental":
            need.add("_hoodie_commit_time")
        keep = [f.name for f in schema.fields if f.name in need]
    files = plan.plain_files
    merged = plan.merged_slices
    check_time_columns(spark, plan.schema, keep, merged=bool(merged), table_read=table_read)
    if not files and not merged:
        empty = spark.createDataFrame([], schema)
        return empty.select(*[F.col(f"`{c}`") for c in columns]) if columns is not None else empty
    check = type_overrides(plan, schema)
    plain_schema = StructType([f for f in schema.fields if f.name in keep]) if keep is not None else schema

    def scan(paths, row_ids=False):
        # row_ids: base files of merged slices, whose rows the merge matches by position on the full schema
        d = _scan(spark, schema if row_ids else plain_schema, paths, check_file_types=check, row_ids=row_ids)
        if plan.query == "incremental" and plan.commit_times is not None:
            times = plan.commit_times
            d = d.filter(F.col("_hoodie_commit_time").isin(times)) if times else d.limit(0)
            if times:  # a range too, so parquet row-group statistics prune old row groups
                ct = F.col("_hoodie_commit_time")
                d = d.filter((ct >= min(times)) & (ct <= max(times)))
        return d

    merged, small = _split_small(spark, plan, merged)
    riders, ids = [], None
    if merged:
        ids = file_ids(spark, merged)
        if ids is not None:
            riders, ids = _riders(plan, merged, ids)
    df = scan(files) if files and not riders else None
    if merged:
        if ids is not None:
            mdf = merged_dataframe(spark, plan, schema, merged, ids, lambda paths: scan(paths, row_ids=True),
                                   riders=riders)
        else:
            mdf = _merged(spark, plan, schema, merged)
        if keep is not None:
            mdf = mdf.select(*[F.col(f"`{c}`") for c in keep])
        df = mdf if df is None else df.unionByName(mdf)
    if small:
        sdf = _merged(spark, plan, schema, small)
        if keep is not None:
            sdf = sdf.select(*[F.col(f"`{c}`") for c in keep])
        df = sdf if df is None else df.unionByName(sdf)
    df = apply_filters(df, plan.filters)
    return df.select(*[F.col(f"`{c}`") for c in columns]) if columns is not None else df


# Merge-on-read slices whose base and log files total at most this many bytes (Spark conf SMALL_SLICE_CONF) are
# merged whole in a few Python tasks, many slices per task, instead of joining a native scan of their base files
# with the superseded rows: for small files the row-index scan, the block join and the checkpointed log side
# cost more than reading the whole slice (issue 27 item 11: 450 slices of a few rows each).
SMALL_SLICE_CONF = SMALL_SLICE_BYTES_OPTION.key
SMALL_SLICE_BYTES = SMALL_SLICE_BYTES_OPTION.default


TIME_TYPE_CONF = "spark.sql.timeType.enabled"
# The data source makes its rows in Python: it reads time columns of either unit, with or without the conf. A
# Spark Connect client's collect refuses TIME values without it, though.
SOURCE_READ = "spark.read.format('hudilite').load(path) (after hudilite.register(spark){})"


def check_time_columns(spark, schema: pa.Schema, names, *, merged: bool, table_read: bool) -> None:
    """Refuse, naming the column, a Spark read of a time-of-day column Spark cannot read (Spark's own error,
    UNSUPPORTED_TIME_TYPE or a failed task, names neither the column nor a way out). Spark reads Avro
    time-micros only with TIME_TYPE_CONF on, and time-millis (a parquet INT32) not at all. `names`: the columns
    read, None for all; `merged`: slices with log files are read too, and they are merged with every column;
    `table_read`: the way out may name other reads of the rows (change reads and the like have none)."""
    found: list[tuple[str, pa.DataType]] = []

    def leaf(t, path):
        if pa.types.is_time(t):
            found.append((path, t))
        return t

    for f in schema:
        if merged or names is None or f.name in names:
            map_leaves(f.type, leaf, f.name)
    if not found:
        return
    path, t = next(((p, t) for p, t in found if pa.types.is_time32(t)), found[0])
    if pa.types.is_time64(t) and str(spark.conf.get(TIME_TYPE_CONF, "false")).lower() == "true":
        return  # Spark reads time-micros with the setting
    source = SOURCE_READ.format(f"; over Spark Connect with {TIME_TYPE_CONF}=true" if is_connect(spark) else "")
    if not table_read:
        way_out = "hudilite.Table(path).to_arrow() and changes_arrow() read it without Spark"
    elif merged:
        way_out = ("this read merges log files, which takes every column: read the table with "
                   f"{source}, or compact it first (Table.services.compact) and leave the column out")
    else:
        timed = {p.split(".")[0] for p, _ in found}
        rest = ", ".join(n for n in schema.names if (names is None or n in names) and n not in timed
                         and n not in META_FIELDS)
        way_out = (f"leave it out (columns=[{rest}]), or read the table with {source} or "
                   "hudilite.Table(path).to_arrow()")
    if pa.types.is_time32(t):
        raise InvalidReadError(f"column '{path}' holds times of day in milliseconds (Avro time-millis), which "
                               f"Spark cannot read: {way_out}")
    raise InvalidReadError(f"column '{path}' holds times of day (Avro time-micros), which Spark reads only with "
                           f"{TIME_TYPE_CONF}=true: set it on the session, or {way_out}")


def small_slice_bytes(spark) -> int:
    return SMALL_SLICE_BYTES_OPTION.get(spark_conf(spark))


def _split_small(spark, plan: ReadPlan, merged) -> tuple[list, list]:
    """(slices for the native merged scan, small slices merged whole in Python: `SMALL_SLICE_CONF`; never a
    slice that would use overlay cache files)."""
    limit = small_slice_bytes(spark)
    if limit <= 0 or not merged:
        return merged, []
    least = overlay_cache.min_log_bytes(spark) if overlay_cache.enabled(spark, plan) else None
    big, small = [], []
    for s in merged:
        logs = sum(lf.size for lf in s.log_files)
        size = logs + (s.base_file.size if s.base_file is not None else 0)
        (small if size <= limit and (least is None or logs < least) else big).append(s)
    return big, small


# Plain base files (slices without logs) of a merge-on-read read join the merged slices' base scan when their
# bytes are at most this fraction of the merged base files': one parquet relation instead of two (a file index
# and a union child less: ~0.1 s of driver time and a smaller generated stage) for a join probe of their rows.
RIDE_ALONG_FRACTION = 0.25


def _riders(plan: ReadPlan, merged, ids) -> tuple[list, tuple]:
    """(plain slices scanned with the merged slices' base files, file ids of merged + riders): riders only when
    the merged slices' ids are their file sizes and the riders' sizes keep every id distinct (no per-row hash);
    else ([], ids)."""
    shift, fids = ids
    plain = [s for s in plan.slices if s.base_file is not None and not s.log_files]
    merged_bytes = sum(s.base_file.size for s in merged if s.base_file is not None)
    sizes = [s.base_file.size for s in plain]
    if (shift is not None or not plain or sum(sizes) > RIDE_ALONG_FRACTION * merged_bytes
            or not all(0 < z < (1 << ROW_BITS) for z in sizes)
            or len(set(sizes) | {f for f in fids if f is not None}) != len(sizes) + sum(f is not None for f in fids)):
        return [], ids
    return plain, (None, list(fids) + sizes)


def apply_filters(df, filters):
    """`df` filtered by (column, op, value) triples."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import TimestampNTZType

    for c, op, v in filters:
        col = F.col(f"`{c}`")
        op = op.lower()
        if c in df.columns and isinstance(df.schema[c].dataType, TimestampNTZType):
            v = [_wall_clock(x) for x in v] if op in ("in", "not in") else _wall_clock(v)
        if op in ("=", "=="):
            df = df.filter(col == v)
        elif op == "!=":
            df = df.filter(col != v)
        elif op == "<":
            df = df.filter(col < v)
        elif op == "<=":
            df = df.filter(col <= v)
        elif op == ">":
            df = df.filter(col > v)
        elif op == ">=":
            df = df.filter(col >= v)
        elif op == "in":
            df = df.filter(col.isin(list(v)))
        elif op == "not in":
            df = df.filter(~col.isin(list(v)))
    return df


def _wall_clock(v):
    """A naive datetime as a TIMESTAMP_NTZ literal: PySpark makes it a TIMESTAMP in this process's time zone,
    which Spark would compare with a wall-clock column in the session's."""
    from pyspark.sql import functions as F

    if isinstance(v, _dt.datetime) and v.tzinfo is None:
        return F.expr(f"TIMESTAMP_NTZ'{v.isoformat(sep=' ')}'")
    return v


# Slices merged whole in one Python task are grouped up to about this many bytes of files per group.
MERGE_GROUP_BYTES = 64 << 20


def _merged(spark, plan: ReadPlan, schema, slices):
    """Merge-on-read slices, merged whole by `hudilite.reader.merge` in Python workers, yielding Arrow batches in
    the table schema: groups of slices (`_groups`: about as many as twice Spark's default parallelism, up to
    MERGE_GROUP_BYTES of files each), each group one vectorized merge (`merge.merge_slices`) in one task.
    A Python task costs tens of ms however little it merges, so tiny slices must not get one each."""
    spec = plan.merge_spec()
    out_schema = to_jvm_arrow(to_spark_arrow(plan.schema))
    groups = _groups([(SliceDesc.of(s), sum(lf.size for lf in s.log_files)
                       + (s.base_file.size if s.base_file is not None else 0)) for s in slices],
                     2 * default_parallelism(spark))
    n = len(groups)
    bindings = capture_bindings(plan.table.base_path)

    def merge_task(batches):
        install_bindings(bindings)
        for b in batches:
            for g in b.column(0).to_pylist():
                t = merge_slices(groups[g], spec)
                t = t.cast(out_schema) if t.schema != out_schema else t
                yield from t.to_batches(max_chunksize=65536)

    return spark.range(0, n, 1, n).mapInArrow(merge_task, schema)


def _groups(sized, tasks: int) -> list[list]:
    """`sized` ((item, bytes) pairs) in groups of consecutive items, each closed once it reaches total / `tasks`
    bytes (or MERGE_GROUP_BYTES): at most `tasks` groups (below MERGE_GROUP_BYTES), `tasks` for equal items."""
    total = sum(z for _, z in sized)
    target = max(1, min(MERGE_GROUP_BYTES, total / max(1, min(tasks, len(sized)))))
    groups, cur, cur_bytes = [], [], 0
    for item, z in sized:
        cur.append(item)
        cur_bytes += z
        if cur_bytes >= target:
            groups.append(cur)
            cur, cur_bytes = [], 0
    if cur:
        groups.append(cur)
    return groups


def _file_type_overrides(schema, path: str) -> tuple:
    """Columns whose type in this parquet file (its footer, read here) differs from the table schema, as
    ((name, spark type of the file), ...): see `_overrides_from`."""
    try:
        file_schema = storage_for(path).parquet_schema(path)
    except Exception:  # noqa: BLE001 - let Spark report unreadable files
        return ()
    return _overrides_from(schema, file_schema)


def _overrides_from(schema, file_schema: pa.Schema, promotions_only: bool = False) -> tuple:
    """Columns whose type in a file of `file_schema` (Arrow) differs from the table schema (Spark), as
    ((name, spark type of the file), ...): top-level atomic columns of another type, and columns (also nested
    ones) holding a number Apache Hudi promotes (`_has_promotion`). Java writes e.g. a timestamp-keygen source
    column as int64 while the commit schema declares it string; Spark's parquet scan cannot convert that itself
    (nor long -> double, or an integer -> float), so such columns are read with the file's type and cast
    afterwards (hudi-rs casts the same way); floats are promoted through their decimal form (`_cast_column`).
    `promotions_only`: only the number promotions."""
    from pyspark.sql.types import ArrayType, MapType, StructType, TimestampNTZType, TimestampType

    nested = (ArrayType, MapType, StructType)
    target = {f.name: f.dataType for f in schema.fields}
    out = []
    for f in file_schema:
        want = target.get(f.name)
        if want is None:
            continue
        try:
            got = arrow_to_spark(pa.schema([f])).fields[0].dataType
        except SchemaError:
            continue
        if _has_promotion(got, want):
            out.append((f.name, got))
        elif (not promotions_only and not isinstance(want, nested) and not isinstance(got, nested) and got != want
              and not (isinstance(got, TimestampType) and isinstance(want, TimestampNTZType))):
            # (a wall-clock column's UTC parquet type: Spark reads it as TIMESTAMP_NTZ itself, by its UTC value)
            out.append((f.name, got))
    return tuple(out)


def _is_float_to_double(got, want) -> bool:
    from pyspark.sql.types import DoubleType, FloatType

    return isinstance(got, FloatType) and isinstance(want, DoubleType)


def _has_promotion(got, want) -> bool:
    """Whether Spark type `got` -> `want` promotes a number as Apache Hudi does (`hudilite.schema.has_promotion`:
    float -> double, an integer -> float or double) anywhere: top level, struct fields, array elements, map
    values."""
    from pyspark.sql.types import (
        ArrayType,
        ByteType,
        DoubleType,
        FloatType,
        IntegerType,
        LongType,
        MapType,
        ShortType,
        StructType,
    )

    if _is_float_to_double(got, want) or (isinstance(got, (ByteType, ShortType, IntegerType, LongType))
                                          and isinstance(want, (FloatType, DoubleType))):
        return True
    if isinstance(got, StructType) and isinstance(want, StructType):
        have = {f.name: f.dataType for f in got.fields}
        return any(f.name in have and _has_promotion(have[f.name], f.dataType) for f in want.fields)
    if isinstance(got, ArrayType) and isinstance(want, ArrayType):
        return _has_promotion(got.elementType, want.elementType)
    if isinstance(got, MapType) and isinstance(want, MapType):
        return _has_promotion(got.valueType, want.valueType)
    return False


def _promote_sql(e: str, got, want, depth: int = 0) -> str:
    """SQL of expression `e` (of Spark type `got`) as type `want`, numbers promoted wherever they sit (floats to
    double through their decimal form, cast via string: Apache Hudi's rule, `hudilite.schema.float_to_double`;
    integers by a cast): struct fields by name (fields missing from `got` null), array elements (`transform`), map
    values (`transform_values`)."""
    from pyspark.sql.types import ArrayType, MapType, StructType

    nested = isinstance(want, (ArrayType, MapType, StructType))
    if not _has_promotion(got, want) or (not nested and not _is_float_to_double(got, want)):
        return f"CAST({e} AS {want.simpleString()})" if got != want else e  # (an integer: Java's conversion)
    if isinstance(want, StructType):
        have = {f.name: f.dataType for f in got.fields}
        parts = []
        for f in want.fields:
            sub = f"{e}.`{f.name}`"
            v = _promote_sql(sub, have[f.name], f.dataType, depth) if f.name in have \
                else f"CAST(NULL AS {f.dataType.simpleString()})"
            parts.append(f"'{f.name}', {v}")
        return f"IF({e} IS NULL, NULL, named_struct({', '.join(parts)}))"
    x = f"x{depth}"
    if isinstance(want, ArrayType):
        return f"transform({e}, {x} -> {_promote_sql(x, got.elementType, want.elementType, depth + 1)})"
    if isinstance(want, MapType):
        k = f"k{depth}"
        return f"transform_values({e}, ({k}, {x}) -> {_promote_sql(x, got.valueType, want.valueType, depth + 1)})"
    return f"CAST(CAST({e} AS STRING) AS DOUBLE)"  # float -> double


def _cast_column(name: str, stored, want):
    """A column read with its file's type `stored`, as the table's type `want`; promoted numbers (also nested
    ones) as Apache Hudi promotes them (`_promote_sql`: floats through their decimal form, not Spark's binary
    widening)."""
    from pyspark.sql import functions as F

    if _has_promotion(stored, want):
        return F.expr(_promote_sql(f"`{name}`", stored, want)).alias(name)
    return F.col(f"`{name}`").cast(want).alias(name)


def _files_may_retype(config, schema) -> bool:
    """Whether a base file's column types may differ from the read schema's: Java's timestamp-based (and custom)
    key generators leave such files, and a float or double column (also nested) may be an integer or float one in
    files written before it was widened (read through `_cast_column`). Other tables skip the per-file check."""
    return _keygen_retypes(config) or any(_has_floating(f.dataType) for f in schema.fields)


def _keygen_retypes(config) -> bool:
    kg = config.keygen.upper()
    return "TIMESTAMP" in kg or "CUSTOM" in kg


def _has_floating(t) -> bool:
    from pyspark.sql.types import ArrayType, DoubleType, FloatType, MapType, StructType

    if isinstance(t, (DoubleType, FloatType)):
        return True
    if isinstance(t, StructType):
        return any(_has_floating(f.dataType) for f in t.fields)
    if isinstance(t, ArrayType):
        return _has_floating(t.elementType)
    if isinstance(t, MapType):
        return _has_floating(t.valueType)
    return False


def type_overrides(plan: ReadPlan, schema):
    """None when no base file of the read can hold other column types than `schema`'s; else `overrides(path)`,
    the ((name, file's Spark type), ...) of one base file (`_overrides_from`).
    Key generators that retype columns (`_keygen_retypes`): every file's footer is read. Otherwise only a number
    type Apache Hudi promotes can differ (`_has_promotion`), and that is decided from the table's schema history,
    without reading a file: a base file has the column types of the schema its commit recorded (the instant in
    its name: the writer's schema, which the file was written with). Only files whose commit is not on the active
    timeline or records no schema (archived instants, some foreign writers) have their footer read."""
    if not _files_may_retype(plan.table.config, schema):
        return None
    if _keygen_retypes(plan.table.config):
        return lambda path: _file_type_overrides(schema, path)
    timeline = plan.table.timeline
    by_time = {i.timestamp: i for i in timeline.completed()}
    at_instant: dict[str, tuple | None] = {}
    of_schema: dict[str, tuple] = {}  # most commits record the same schema: compared once

    def from_history(instant: str) -> tuple | None:
        if instant not in at_instant:
            inst, got = by_time.get(instant), None
            if inst is not None:
                try:
                    avro = (timeline.read_metadata(inst).get("extraMetadata") or {}).get("schema")
                    if avro:
                        if avro not in of_schema:
                            of_schema[avro] = _overrides_from(schema, avro_to_arrow(avro), promotions_only=True)
                        got = of_schema[avro]
                except Exception:  # noqa: BLE001 - unreadable metadata or schema: the file's footer decides
                    got = None
            at_instant[instant] = got
        return at_instant[instant]

    def overrides(path: str) -> tuple:
        parsed = parse_base_file_name(os.path.basename(path))
        got = from_history(parsed[2]) if parsed else None
        return got if got is not None else _file_type_overrides(schema, path)

    return overrides


def _scan(spark, schema, files, *, check_file_types=True, row_ids: bool = False):
    """Spark's native parquet scan of `files` in the table schema (columns missing from a file read as null);
    `row_ids` adds each row's file name, file size and row position (FILE, SIZE, ROW). `check_file_types`: False,
    True (every file's footer: `_file_type_overrides`) or a function of a path giving its overrides."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StructField, StructType

    meta = {"file_name": FILE, "file_size": SIZE, "row_index": ROW} if row_ids else None
    if not check_file_types:
        return read_parquet_files(spark, schema, files, meta=meta)
    overrides_of = check_file_types if callable(check_file_types) else (lambda p: _file_type_overrides(schema, p))
    by_overrides: dict[tuple, list[str]] = {}
    for f in files:
        by_overrides.setdefault(overrides_of(f), []).append(f)
    df = None
    for overrides, group in by_overrides.items():
        if not overrides:
            part = read_parquet_files(spark, schema, group, meta=meta)
        else:
            o = dict(overrides)
            read_schema = StructType([StructField(fl.name, o.get(fl.name, fl.dataType), fl.nullable)
                                      for fl in schema.fields])
            part = read_parquet_files(spark, read_schema, group, meta=meta)
            part = part.select(*[_cast_column(fl.name, o[fl.name], fl.dataType) if fl.name in o
                                 else F.col(f"`{fl.name}`") for fl in schema.fields],
                               *[F.col(f"`{c}`") for c in (meta or {}).values()])
        df = part if df is None else df.unionByName(part)
    return df


def read(spark, path, *, as_of=None, begin=None, end=None, filters=None, read_optimized=False, ready_only=False,
         completion_bounds=False, columns=None):
    """Snapshot (latest or `as_of`) or incremental `(begin, end]` read as a Spark DataFrame; `read_optimized`
    reads merge-on-read tables from their base files only; `ready_only` reads only partitions a commit marked
    ready (hudilite.ready.ready_partitions)."""
    plan = plan_read(path, as_of=as_of, begin=begin, end=end, filters=filters, read_optimized=read_optimized,
                     completion_bounds=completion_bounds)
    if ready_only:
        ready = ready_partitions(plan.table, as_of=plan.as_of if plan.query == "snapshot" and as_of else None)
        plan.slices = [s for s in plan.slices if s.partition in ready]
    return plan_to_dataframe(spark, plan, columns, table_read=True)
