"""Bulk inserts from a plain parquet scan: the write tasks read the source files themselves with pyarrow.

A DataFrame that is nothing but `spark.read.parquet(...)` (optionally with columns dropped, selected or
reordered) reaches a write task through Spark's parquet reader, a row conversion and Spark's Arrow
writer; on 2 cores that conversion alone costs about as much as Spark's whole parquet write. When the plan
is such a scan and every source file holds the needed columns with exactly the Arrow types Spark reads
them as, the tasks read row groups of the files directly: the same rows and values, without the
conversion. Anything else (filters, expressions, partition discovery, reader options, legacy
datetime files, type differences, non-local paths, Spark Connect) returns None and the caller keeps the
DataFrame path.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator
from urllib.parse import unquote, urlparse

import pyarrow as pa

from hudilite.options import BULK_SOURCE_FILES
from hudilite.storage import storage_for

OPTION = BULK_SOURCE_FILES.key  # "false" keeps the DataFrame path
_PATH_OPTIONS = {"path", "paths"}
_LEGACY_KEYS = (b"org.apache.spark.legacyDateTime", b"org.apache.spark.legacyINT96")
_UNIT_BYTES = 128 * 1024 * 1024  # compressed bytes of row groups read by one task (Spark's maxPartitionBytes)


@dataclass(frozen=True)
class ScanUnit:
    """Row groups of one source file, read by one task."""

    path: str
    row_groups: tuple[int, ...]


def _scan_relation(df):
    """The HadoopFsRelation of a parquet scan the DataFrame consists of (plus a projection of plain columns),
    or None."""
    try:
        plan = df._jdf.queryExecution().optimizedPlan()
    except Exception:  # noqa: BLE001 - Spark Connect or another DataFrame without a JVM plan
        return None
    node = plan
    if node.nodeName() == "Project":
        exprs = node.projectList()
        if any(exprs.apply(i).getClass().getSimpleName() != "AttributeReference" for i in range(exprs.size())):
            return None
        node = node.child()
    if node.getClass().getSimpleName() != "LogicalRelation":
        return None
    rel = node.relation()
    if rel.getClass().getSimpleName() != "HadoopFsRelation":
        return None
    if rel.fileFormat().getClass().getSimpleName() != "ParquetFileFormat":
        return None
    if not rel.partitionSchema().isEmpty() or rel.bucketSpec().isDefined():
        return None
    keys = rel.options().keySet().iterator()
    while keys.hasNext():
        if str(keys.next()).lower() not in _PATH_OPTIONS:
            return None
    return rel


def _local_path(uri: str) -> str | None:
    u = urlparse(uri)
    if u.scheme not in ("", "file") or (u.netloc not in ("", "localhost")):
        return None
    return unquote(u.path)


def plain_parquet_units(df, expected: pa.Schema, min_units: int) -> list[ScanUnit] | None:
    """Read units for a DataFrame that is a plain scan of local parquet files whose columns `expected`
    (name and Arrow type, as Spark reads them) are all present with exactly those types; None otherwise."""
    rel = _scan_relation(df)
    if rel is None:
        return None
    paths = []
    for uri in rel.location().inputFiles():
        p = _local_path(str(uri))
        if p is None:
            return None
        paths.append(p)
    units: list[ScanUnit] = []
    for p in sorted(paths):
        try:
            md = storage_for(p).parquet_metadata(p)
            schema = md.schema.to_arrow_schema()
        except Exception:  # noqa: BLE001 - let Spark's reader report (or skip) what pyarrow cannot open
            return None
        kv = md.metadata or {}
        if any(k in kv for k in _LEGACY_KEYS):
            return None
        for f in expected:
            i = schema.get_field_index(f.name)
            if i < 0 or not schema.field(i).type.equals(f.type):
                return None
        groups: list[int] = []
        size = 0
        for rg in range(md.num_row_groups):
            g = md.row_group(rg)
            groups.append(rg)
            size += sum(g.column(c).total_compressed_size for c in range(g.num_columns))
            if size >= _UNIT_BYTES:
                units.append(ScanUnit(p, tuple(groups)))
                groups, size = [], 0
        if groups:
            units.append(ScanUnit(p, tuple(groups)))
    # enough tasks to keep every core busy: split the largest units by row groups
    while 0 < len(units) < min_units:
        big = max(units, key=lambda u: len(u.row_groups))
        if len(big.row_groups) < 2:
            break
        units.remove(big)
        half = len(big.row_groups) // 2
        units += [ScanUnit(big.path, big.row_groups[:half]), ScanUnit(big.path, big.row_groups[half:])]
    return units


def read_units(units: list[ScanUnit], schema: pa.Schema, batch_rows: int) -> Iterator[pa.RecordBatch]:
    """The rows of `units` as record batches with exactly `schema`'s columns (in its order)."""
    for u in units:
        pf = storage_for(u.path).parquet_file(u.path)
        for b in pf.iter_batches(batch_size=batch_rows, row_groups=list(u.row_groups), columns=schema.names,
                                 use_threads=False):
            yield pa.RecordBatch.from_arrays([b.column(n) for n in schema.names], schema=schema)
