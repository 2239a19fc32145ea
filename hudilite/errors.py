"""Errors raised by hudilite. Every error names the problem; none leaves a table half-written."""

import contextlib


class HudiliteError(Exception):
    """Base class of every hudilite error."""


class TableNotFoundError(HudiliteError):
    """The path holds no hudilite/Hudi table."""


class CorruptTableError(HudiliteError):
    """Table metadata (hoodie.properties, timeline files) cannot be parsed."""


class UnsupportedTableError(HudiliteError):
    """A table feature this implementation does not read or write (e.g. Lance base files)."""


class InvalidWriteError(HudiliteError, ValueError):
    """The data or the options of a write are invalid; nothing was written."""


class InvalidReadError(HudiliteError, ValueError):
    """The arguments of a read are invalid (a filter, a column, an instant or a range); nothing was read."""


class CommitConflictError(HudiliteError):
    """Another writer committed first (put-if-absent lost, or overlapping file groups).

    Retryable: the attempt was rolled back.
    """

    retryable = True


class LockTimeoutError(HudiliteError):
    """The table lock could not be acquired in time."""


class RangeUnavailableError(HudiliteError):
    """An incremental/change range needs file slices or instants that were cleaned or archived away; reading
    it would return partial data. Rebuild the consumer from the current snapshot (dbt: --full-refresh)."""


class TableReplacedError(RangeUnavailableError):
    """The table at the path is not the table a position was taken on (it was rebuilt or recreated there):
    no range of the new table continues the old position. Rebuild the consumer from the current snapshot."""


class WorkerEnvironmentError(HudiliteError):
    """The Spark session's Python workers cannot run hudilite (their interpreter lacks hudilite or pyarrow, or
    cannot be started). Nothing was read or written."""


class StorageAccessError(HudiliteError, PermissionError):
    """This process cannot reach a table's storage (permissions, a path only another process sees, missing
    object-store credentials). Raised before anything is read or written."""


class TableServiceError(HudiliteError):
    """An inline table service failed after the write itself committed (the write stays committed; pending
    service plans are retried by the next run)."""


@contextlib.contextmanager
def damaged_file(path: str, what: str = "base file"):
    """Arrow's errors on a file that is not readable Parquet (truncated footer, garbage) as a CorruptTableError
    naming the file."""
    import pyarrow as pa

    try:
        yield
    except pa.ArrowInvalid as e:
        raise CorruptTableError(f"{path}: {what} is damaged ({e})") from e
