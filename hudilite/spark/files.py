"""Spark reads of a known list of parquet files (the lowest Spark module: the scan and the merge both use it).

Local files and files of a scheme the session's JVM has a Hadoop file system for are read by Spark's native
parquet scan. Other schemes (`s3://` without hadoop-aws on the classpath, the default) are read by an Arrow scan
in Python tasks through the table's `Storage` (`S3Storage.open_input`: ranged GETs), with the same columns."""

from __future__ import annotations

import logging
import os
import re
import threading

import pyarrow as pa

from hudilite.spark.schema import spark_to_arrow
from hudilite.spark.session import default_parallelism, is_connect
from hudilite.storage import capture_bindings, install_bindings, scheme_of, storage_for

log = logging.getLogger(__name__)

_DISCOVERY_THRESHOLD = "spark.sql.sources.parallelPartitionDiscovery.threshold"
_GLOB_PATHS = "__globPaths__"  # Spark's DataSource.GLOB_PATHS_KEY (its file stream source sets it the same way)
_GLOB_CHARS = frozenset("\\*?[]{}")  # what Spark's SparkHadoopUtil.isGlobPath looks for
_SCHEME_AUTHORITY = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:(//[^/]*)?")
# Spark's hidden `_metadata` fields a read may ask for, and their Spark types
META_FIELDS = {"file_name": "string", "file_size": "long", "row_index": "long"}
# Object-store schemes the JVM may serve under another name: hadoop-aws serves s3a://, not s3://
_JVM_ALIASES = {"s3": ("s3", "s3a"), "s3a": ("s3a",)}
_JVM_SCHEMES: dict[tuple[str, str], str | None] = {}  # (application id, scheme) -> the scheme the JVM reads it as
_JVM_LOCK = threading.Lock()
ARROW_BATCH_ROWS = 65536


def read_parquet_files(spark, schema, files, *, meta: dict[str, str] | None = None):
    """`files` read in Spark StructType `schema` (columns missing from a file read as null), plus the `_metadata`
    fields named in `meta` ({"file_name" | "file_size" | "row_index": column name}) as columns.
    Native scan when the JVM reads the files' scheme (`jvm_scheme`), else `arrow_scan`."""
    files = list(files)
    scheme = scheme_of(files[0]) if files else ""
    if scheme not in ("", "file"):
        as_scheme = jvm_scheme(spark, scheme)
        if as_scheme is None:
            return arrow_scan(spark, schema, files, meta=meta)
        if as_scheme != scheme:
            files = [as_scheme + f[len(scheme):] for f in files]
    return _native(spark, schema, files, meta or {})


def _native(spark, schema, files, meta: dict[str, str]):
    """`spark.read.parquet(*files)`, the files' status taken on the driver: the planned files are known to exist,
    and above 32 paths Spark would otherwise run a listing job per read (~0.2 s even for local files).
    Spark reads a path holding `\\ * ? [ ] { }` (a partition value may) as a Hadoop glob: such a path goes in
    escaped (`_glob_literal`), or, when Hadoop's globber cannot take it (a ':' in one of its directories), is
    read on its own with globbing off (`_GLOB_PATHS`; with more than one path Spark 4.3 then reads every path
    of the call once per such path)."""
    listed: list[str] = []
    alone: list[str] = []
    for f in files:
        literal = _glob_literal(f)
        if literal is None:
            alone.append(f)
        else:
            listed.append(literal)
    reader = spark.read.schema(schema)
    parts = [reader.option(_GLOB_PATHS, "false").parquet(f) for f in alone]
    if listed or not parts:
        parts.insert(0, _read_listed(spark, reader, listed))
    if meta:  # before the union: it has no `_metadata` column
        parts = [p.selectExpr("*", *[f"_metadata.{k} AS `{v}`" for k, v in meta.items()]) for p in parts]
    df = parts[0]
    for part in parts[1:]:
        df = df.union(part)
    return df


def _read_listed(spark, reader, files):
    if is_connect(spark):
        # a Connect reader is a plan analysed on the server later, after a conf window here would have closed:
        # setting and restoring the threshold around it changed nothing and cost three round trips per read
        return reader.parquet(*files)
    old = spark.conf.get(_DISCOVERY_THRESHOLD, None)
    if old is not None and int(old) > len(files):
        return reader.parquet(*files)
    spark.conf.set(_DISCOVERY_THRESHOLD, str(len(files) + 1))
    try:
        return reader.parquet(*files)
    finally:
        if old is None:
            spark.conf.unset(_DISCOVERY_THRESHOLD)
        else:
            spark.conf.set(_DISCOVERY_THRESHOLD, old)


def _glob_literal(path: str) -> str | None:
    """`path` as a Hadoop glob matching only itself: unchanged without glob characters, else each escaped with
    a backslash. None when the globber cannot resolve it: it makes a Hadoop `Path` of each directory name,
    which fails on a ':' ("Relative path in absolute URI")."""
    if not any(c in _GLOB_CHARS for c in path):
        return path
    m = _SCHEME_AUTHORITY.match(path)
    prefix, rest = (m.group(0), path[m.end():]) if m else ("", path)
    if ":" in rest:
        return None
    return prefix + "".join("\\" + c if c in _GLOB_CHARS else c for c in rest)


def jvm_scheme(spark, scheme: str) -> str | None:
    """The scheme under which this session's JVM reads `scheme://` files (`s3` may be read as `s3a` when only
    hadoop-aws's S3AFileSystem is there), or None when it has no Hadoop file system for it. Found once per
    Spark application and scheme (a lookup through py4j) and logged, since it decides how every read scans."""
    key = (_app_id(spark), scheme)
    with _JVM_LOCK:
        if key in _JVM_SCHEMES:
            return _JVM_SCHEMES[key]
    found = next((s for s in _JVM_ALIASES.get(scheme, (scheme,)) if _jvm_has_filesystem(spark, s)), None)
    with _JVM_LOCK:
        _JVM_SCHEMES[key] = found
    if found is None:
        log.info("%s:// base files are read by an Arrow scan in Spark tasks: the session's JVM has no Hadoop "
                 "file system for the scheme (add hadoop-aws for the native scan)", scheme)
    else:
        log.info("%s:// base files are read by Spark's native parquet scan as %s://", scheme, found)
    return found


def scan_description(spark, path: str) -> str:
    """How base files under `path` are read, for `hudilite info`: by this session's JVM (`jvm_scheme`), by an
    Arrow scan in Spark tasks, or (`spark` None) driver-local Arrow reads."""
    if spark is None:
        return "Arrow (no Spark session)"
    scheme = scheme_of(path)
    if scheme in ("", "file"):
        return "Spark native parquet"
    found = jvm_scheme(spark, scheme)
    if found is None:
        return f"Arrow in Spark tasks (the session's JVM has no Hadoop file system for {scheme}://)"
    return f"Spark native parquet (as {found}://)"


def _app_id(spark) -> str:
    try:
        return spark.sparkContext.applicationId
    except Exception:  # noqa: BLE001 - Spark Connect has no SparkContext: one answer per session object
        return f"session-{id(spark)}"


def _jvm_has_filesystem(spark, scheme: str) -> bool:
    """Whether Hadoop's FileSystem finds a class for `scheme` in the session's configuration. core-default.xml
    names S3AFileSystem for s3a even without hadoop-aws, so the lookup loads the class: it must exist too.
    Spark Connect (no py4j gateway): False, the Arrow scan works there."""
    try:
        conf = spark.sparkContext._jsc.hadoopConfiguration()
        cls = spark.sparkContext._jvm.org.apache.hadoop.fs.FileSystem.getFileSystemClass(scheme, conf)
        return cls is not None
    except Exception:  # noqa: BLE001 - UnsupportedFileSystemException, ClassNotFound, no gateway: not readable
        return False


def arrow_scan(spark, schema, files, *, meta: dict[str, str] | None = None):
    """`files` read by pyarrow in Spark tasks (each task every n-th file), through the files' `Storage` with the
    table's storage options (`capture_bindings`): only the columns of `schema` are fetched from each file
    (ranged GETs of their column chunks), missing ones are null, each cast to `schema`'s type. Partition pruning
    is the planner's (`files` is the pruned list); Spark cannot push a later projection into the task."""
    from pyspark.sql.types import StructType

    meta = dict(meta or {})
    out = StructType(list(schema.fields))
    for k, name in meta.items():
        out = out.add(name, META_FIELDS[k], False)
    target = spark_to_arrow(out)
    if not files:
        return spark.createDataFrame([], out)
    by_name = {v: k for k, v in meta.items()}
    bindings = capture_bindings(files[0])
    n = max(1, min(len(files), 4 * default_parallelism(spark)))

    def scan_task(batches):
        install_bindings(bindings)
        for b in batches:
            for t in b.column(0).to_pylist():
                for path in files[t::n]:
                    yield from _file_batches(path, target, by_name)

    return spark.range(0, n, 1, n).mapInArrow(scan_task, out)


def _file_batches(path: str, target: pa.Schema, meta: dict[str, str]):
    """Record batches of one parquet file in `target`: data columns cast, `meta` columns ({column: _metadata
    field}) computed, as Spark's `_metadata` has them (file_name is the base name, row_index counts from 0)."""
    fs = storage_for(path)
    with fs.parquet_file(path) as pf:
        yield from _batches(pf, target, meta, os.path.basename(path),
                            fs.size(path) if "file_size" in meta.values() else None)


def _batches(pf, target: pa.Schema, meta: dict[str, str], name: str, size: int | None):
    have = set(pf.schema_arrow.names)
    cols = [f.name for f in target if f.name not in meta and f.name in have]
    row = 0
    for rb in pf.iter_batches(batch_size=ARROW_BATCH_ROWS, columns=cols, use_threads=False):
        n = rb.num_rows
        arrays = []
        for f in target:
            kind = meta.get(f.name)
            if kind == "file_name":
                arrays.append(pa.array([name] * n, f.type))
            elif kind == "file_size":
                arrays.append(pa.array([size] * n, f.type))
            elif kind == "row_index":
                arrays.append(pa.array(range(row, row + n), f.type))
            elif f.name in have:
                col = rb.column(f.name)
                arrays.append(col if col.type == f.type else col.cast(f.type))
            else:
                arrays.append(pa.nulls(n, f.type))
        row += n
        yield pa.RecordBatch.from_arrays(arrays, schema=target)
