"""hudilite: Apache-Hudi-format tables (copy-on-write and merge-on-read) written and read through PySpark.

    hudilite.write(df, path, record_key="id", precombine_field="version", partition_by=("dt",))
    hudilite.read(spark, path, as_of=None, begin=None, end=None)
"""

from hudilite.errors import (
    CommitConflictError, CorruptTableError, HudiliteError, InvalidWriteError, LockTimeoutError,
    TableNotFoundError, UnsupportedTableError,
)

__version__ = "0.1.0"


def write(df, path, *, record_key, precombine_field=None, partition_by=(), operation="upsert",
          table_type="COPY_ON_WRITE", options=None, extra_metadata=None):
    """Write `df` to the table at `path` as one commit; returns the committed instant time (a str whose
    `.stats` holds inserted/updated/deleted counts)."""
    from hudilite.writer.client import write as _write

    return _write(df, path, record_key=record_key, precombine_field=precombine_field,
                  partition_by=partition_by, operation=operation, table_type=table_type, options=options,
                  extra_metadata=extra_metadata)


def read(spark, path, *, as_of=None, begin=None, end=None, filters=None, read_optimized=False):
    """Read the table at `path`: latest snapshot, time travel `as_of`, or incremental `(begin, end]`.
    Merge-on-read tables merge base and log files; `read_optimized=True` reads their base files only."""
    from hudilite.reader.spark_read import read as _read

    register(spark)
    return _read(spark, path, as_of=as_of, begin=begin, end=end, filters=filters, read_optimized=read_optimized)


def register(spark) -> None:
    """Register the `hudilite` data source in this session (`spark.read.format("hudilite")`)."""
    from hudilite.reader.datasource import register as _register

    _register(spark)


__all__ = [
    "write", "read", "register", "HudiliteError", "InvalidWriteError", "TableNotFoundError",
    "CorruptTableError", "UnsupportedTableError", "CommitConflictError", "LockTimeoutError",
]
