"""hudilite: Apache-Hudi-format tables (copy-on-write and merge-on-read) written and read through PySpark.

    hudilite.write(df, path, record_key="id", precombine_field="version", partition_by=("dt",))
    hudilite.read(spark, path, as_of=None, begin=None, end=None)
"""

from hudilite.errors import (
    CommitConflictError,
    CorruptTableError,
    HudiliteError,
    InvalidWriteError,
    LockTimeoutError,
    RangeUnavailableError,
    TableNotFoundError,
    TableReplacedError,
    UnsupportedTableError,
    WorkerEnvironmentError,
)
from hudilite.spark.session import check_workers
from hudilite.version import __version__ as __version__
from hudilite.writer.options import UNSET


def write(df, path, *, record_key, precombine_field=UNSET, partition_by=(), operation="upsert",
          table_type=UNSET, options=None, extra_metadata=None, commit=True):
    """Write `df` to the table at `path` as one commit; returns the committed instant time (a str whose
    `.stats` holds inserted/updated/deleted counts). `precombine_field` / `table_type` left out: the existing
    table's (a new table: none / COPY_ON_WRITE); given, they must match an existing table's. `commit=False`
    writes the data but leaves the instant inflight and returns a `PendingWrite` (`.read(spark)` to audit,
    then `.complete()` or `.abort()`)."""
    from hudilite.writer.client import write as _write

    return _write(df, path, record_key=record_key, precombine_field=precombine_field,
                  partition_by=partition_by, operation=operation, table_type=table_type, options=options,
                  extra_metadata=extra_metadata, commit=commit)


def read(spark, path, *, as_of=None, begin=None, end=None, filters=None, read_optimized=False, ready_only=False,
         completion_bounds=False):
    """Read the table at `path`: latest snapshot, time travel `as_of`, or incremental `(begin, end]` (completion
    order). Merge-on-read tables merge base and log files; `read_optimized=True` reads their base files only.
    `ready_only=True` reads only the partitions a commit marked ready (write-audit-publish).
    `completion_bounds=True`: `begin`/`end` are completion times — the positions `hudilite.reader.changes.checkpoint`
    returns — rather than instant times (on a version-6 table a bare time is read as an instant position, which
    skips a write requested before the checkpoint that completed after it)."""
    from hudilite.spark.read import read as _read

    check_workers(spark)
    register(spark)
    return _read(spark, path, as_of=as_of, begin=begin, end=end, filters=filters, read_optimized=read_optimized,
                 ready_only=ready_only, completion_bounds=completion_bounds)


def changes(spark, path, begin=None, end=None, *, include_deletes=True, before_image=False, filters=None,
            completion_bounds=False, table_id=None):
    """What changed in `(begin, end]` (completion order): the latest image of every changed record with a
    `_change_op` column ('I', 'U', 'D'; with `before_image` also 'B': updated records as of `begin`). Deleted
    records carry their last image. `begin=None` reads the whole snapshot as of `end` (all 'I'). Raises
    `RangeUnavailableError` when the range was cleaned/archived away (rebuild from the snapshot instead).
    `table_id`: the identity of the table `begin` was taken on (`hudilite.reader.changes.checkpoint(path)`
    gives both); a different table at `path` (rebuilt or recreated) raises `TableReplacedError`."""
    from hudilite.spark.changes import changes as _changes

    check_workers(spark)
    register(spark)
    return _changes(spark, path, begin=begin, end=end, include_deletes=include_deletes, before_image=before_image,
                    filters=filters, completion_bounds=completion_bounds, table_id=table_id)


def register(spark) -> None:
    """Register the `hudilite` data source in this session (`spark.read.format("hudilite")`)."""
    from hudilite.spark.datasource import register as _register

    _register(spark)


__all__ = [
    "write", "read", "changes", "register", "HudiliteError", "InvalidWriteError", "TableNotFoundError",
    "CorruptTableError", "UnsupportedTableError", "CommitConflictError", "LockTimeoutError",
    "RangeUnavailableError", "TableReplacedError", "WorkerEnvironmentError",
]
