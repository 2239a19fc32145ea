"""hudilite: Apache-Hudi-format tables (copy-on-write and merge-on-read) written and read through PySpark.

    t = hudilite.Table.open(path, spark=spark)      # the one public object (hudilite/api.py)
    t.write(df, "upsert"); t.read(); t.changes(begin); t.services.compact()
    hudilite.write(df, path, record_key="id", precombine_field="version", partition_by=("dt",))
    hudilite.read(spark, path, as_of=None, begin=None, end=None)
"""

from hudilite.api import OPERATIONS, RollbackRefusedError, Table, TableInfo, TableLayout, TableServices, register
from hudilite.errors import (
    CommitConflictError,
    CorruptTableError,
    HudiliteError,
    InvalidReadError,
    InvalidWriteError,
    LockTimeoutError,
    RangeUnavailableError,
    StorageAccessError,
    TableNotFoundError,
    TableReplacedError,
    UnsupportedTableError,
    WorkerEnvironmentError,
)
from hudilite.options import check_options
from hudilite.spark.session import check_workers, local_session
from hudilite.writer.options import UNSET


def write(df, path, *, record_key, precombine_field=UNSET, partition_by=(), operation="upsert",
          table_type=UNSET, options=None, extra_metadata=None, commit=True, storage_options=None):
    """Write `df` to the table at `path` as one commit; returns the committed instant time (a str whose
    `.stats` holds inserted/updated/deleted counts). `precombine_field` / `table_type` left out: the existing
    table's (a new table: none / COPY_ON_WRITE); given, they must match an existing table's. `commit=False`
    writes the data but leaves the instant inflight and returns a `PendingWrite` (`.read(spark)` to audit,
    then `.complete()` or `.abort()`). `Table(...).write` with the table's layout given here.
    `storage_options`: how to reach the object store of `path` (endpoint, region, credentials, ...;
    docs/storage.md), for this table only; left out, the process-wide settings (the AWS environment)."""
    t = Table(path, record_key=record_key, precombine_field=precombine_field, partition_by=partition_by,
              table_type=table_type, storage_options=storage_options)
    return t.write(df, operation, options=options, extra_metadata=extra_metadata, commit=commit)


def read(spark, path, *, as_of=None, begin=None, end=None, filters=None, read_optimized=False, ready_only=False,
         completion_bounds=False, columns=None, storage_options=None):
    """Read the table at `path`: latest snapshot, time travel `as_of`, or incremental `(begin, end]` (completion
    order). Merge-on-read tables merge base and log files; `read_optimized=True` reads their base files only.
    `ready_only=True` reads only the partitions a commit marked ready (write-audit-publish).
    `completion_bounds=True`: `begin`/`end` are completion times — the positions `Table.position()`
    returns — rather than instant times (on a version-6 table a bare time is read as an instant position, which
    skips a write requested before the checkpoint that completed after it). `columns`: only these columns (pruned
    in the scan). `storage_options`: as for `write`. `Table.read`."""
    t = Table(path, spark=spark, storage_options=storage_options)
    return t.read(as_of=as_of, begin=begin, end=end, filters=filters, read_optimized=read_optimized,
                  ready_only=ready_only, completion_bounds=completion_bounds, columns=columns)


def changes(spark, path, begin=None, end=None, *, include_deletes=True, before_image=False, filters=None,
            completion_bounds=False, table_id=None, storage_options=None):
    """What changed in `(begin, end]` (completion order): the latest image of every changed record with a
    `_change_op` column ('I', 'U', 'D'; with `before_image` also 'B': updated records as of `begin`). Deleted
    records carry their last image. `begin=None` reads the whole snapshot as of `end` (all 'I'). Raises
    `RangeUnavailableError` when the range was cleaned/archived away (rebuild from the snapshot instead).
    `table_id`: the identity of the table `begin` was taken on (`Table.position()` gives both); a different
    table at `path` (rebuilt or recreated) raises `TableReplacedError`. `storage_options`: as for `write`.
    `Table.changes`."""
    t = Table(path, spark=spark, storage_options=storage_options)
    return t.changes(begin, end, include_deletes=include_deletes, before_image=before_image, filters=filters,
                     completion_bounds=completion_bounds, table_id=table_id)


__all__ = [
    "Table", "TableInfo", "TableLayout", "TableServices", "OPERATIONS", "write", "read", "changes", "register",
    "check_workers", "local_session", "check_options", "UNSET", "HudiliteError", "InvalidWriteError",
    "InvalidReadError", "TableNotFoundError", "CorruptTableError",
    "UnsupportedTableError", "CommitConflictError", "LockTimeoutError", "RangeUnavailableError",
    "TableReplacedError", "WorkerEnvironmentError", "StorageAccessError", "RollbackRefusedError",
]
