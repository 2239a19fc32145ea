"""`hudilite.Table`: the one public object for a table — write, read, change feeds, consumer checkpoints,
table services, timeline and layout — in the manner of hudi-rs `Table` and delta-rs / pyiceberg tables.

    t = hudilite.Table.create("/data/events", record_key="id", precombine_field="ts", partition_by=("dt",))
    t.write(arrow_table_or_spark_df)                 # upsert; operation="insert" / "delete" / ...
    t = hudilite.Table.open("/data/events", spark=spark)
    t.read(); t.as_of("20240101000000000"); t.changes(begin=pos)
    t.services.compact(); t.info(); t.timeline.completed()

Each method calls the one core implementation of its operation, so the facade adds no behaviour of its own;
`hudilite.write/read/changes` are thin functions over it. A Table holds a path, not a snapshot: every call
sees the table as it is on storage then (writers may commit in between).
"""

from __future__ import annotations

import contextlib
import dataclasses

from hudilite import checkpoints as _checkpoints
from hudilite import replace as _replace
from hudilite.errors import HudiliteError, InvalidWriteError
from hudilite.metastore import carry_snapshots as _carry_snapshots
from hudilite.reader import changes as _changes
from hudilite.reader.planner import table_schema as _table_schema
from hudilite.services import archival as _archival
from hudilite.services import clean as _clean
from hudilite.services import clustering as _clustering
from hudilite.services import compaction as _compaction
from hudilite.services.rollback import rollback_failed_writes as _rollback_failed_writes
from hudilite.services.upgrade import upgrade as _upgrade
from hudilite.spark.changes import changes as _spark_changes
from hudilite.spark.datasource import register as _register
from hudilite.spark.files import scan_description as _scan_description
from hudilite.spark.read import read as _spark_read
from hudilite.spark.schema import spark_to_arrow as _spark_to_arrow
from hudilite.spark.session import active_session, check_client_storage, check_workers
from hudilite.storage import bind_storage_options as _bind_storage_options
from hudilite.storage import normalize_path
from hudilite.streaming import BATCH_ID_KEY, QUERY_ID_KEY, StreamingSink
from hudilite.streaming import last_batch_id as _last_batch_id
from hudilite.streaming import write_stream as _write_stream
from hudilite.table import HoodieTable
from hudilite.timeline import Timeline
from hudilite.timeline.heartbeat import DEFAULT_INTERVAL_MS, DEFAULT_MISSES, read_heartbeat
from hudilite.writer.client import write as _write
from hudilite.writer.conflict import pending_guard
from hudilite.writer.options import OPERATIONS, UNSET
from hudilite.writer.transaction import Transaction


class RollbackRefusedError(HudiliteError):
    """A rollback of one instant was refused: it is unknown, completed, a service plan or prepared commit
    (its owner finishes it), or its writer looks alive. The table is unchanged."""


@dataclasses.dataclass(frozen=True)
class TableInfo:
    """A table's identity and layout: what `hudilite info` prints."""

    path: str
    name: str
    table_type: str  # COPY_ON_WRITE / MERGE_ON_READ
    version: int  # the table version (6, 8, 9)
    table_id: str | None
    record_key: list[str]
    precombine_field: str | None
    partition_fields: list[str]
    partitions: list[str]
    file_groups: int
    bytes: int  # base file bytes of the latest snapshot
    completed_instants: int
    pending_instants: int
    properties: dict[str, str]  # hoodie.properties as stored
    scan: str  # how reads scan the base files in this process: `hudilite.spark.files.scan_description`


@dataclasses.dataclass(frozen=True)
class TableLayout:
    """A table's layout from hoodie.properties alone (no listing, unlike `TableInfo`): what a write must match."""

    table_type: str  # COPY_ON_WRITE / MERGE_ON_READ
    record_key: list[str]
    precombine_field: str | None
    partition_by: list[str]  # empty for a non-partitioned table (whatever fields the properties name)
    table_id: str | None


class Table:
    """A Hudi table at a path. `Table.open` for an existing table, `Table.create` for one that its first write
    creates (tables come into being with their first commit, as in Hudi). `spark` is needed for Spark reads
    and change feeds only: Arrow data is written in this process without Spark."""

    def __init__(self, path, *, spark=None, options: dict | None = None, record_key=None,
                 precombine_field=UNSET, partition_by=(), table_type=UNSET, storage_options: dict | None = None):
        # no I/O here: `open`/`create` check the path; the thin functions use this to keep their error order
        _bind(path, storage_options)
        self._path = path
        self.storage_options = dict(storage_options or {})
        self.spark = spark
        self.options = dict(options or {})
        self._layout = dict(record_key=record_key, precombine_field=precombine_field, partition_by=partition_by,
                            table_type=table_type)
        self.services = TableServices(self)

    # ---- opening / creating --------------------------------------------------------------
    @classmethod
    def open(cls, path, spark=None, options: dict | None = None, *,
             storage_options: dict | None = None) -> "Table":
        """The table at `path`; raises TableNotFoundError (none there) or CorruptTableError (damaged).
        `storage_options`: how to reach an object store (docs/storage.md), for this table only."""
        _bind(path, storage_options)
        meta = HoodieTable.open(path)
        return cls(meta.base_path, spark=spark, options=options, storage_options=storage_options)

    @classmethod
    def create(cls, path, *, record_key, precombine_field=UNSET, partition_by=(), table_type=UNSET, spark=None,
               options: dict | None = None, exist_ok: bool = False,
               storage_options: dict | None = None) -> "Table":
        """A table with this layout at `path`, created on storage by its first write. `exist_ok=True`: an
        existing table is fine, and each write checks the layout given here against it (as `hudilite.write`)."""
        _bind(path, storage_options)
        if not exist_ok and HoodieTable.exists(path):
            raise InvalidWriteError(f"a table exists at {path}: open it with Table.open (or pass exist_ok=True)")
        return cls(path, spark=spark, options=options, record_key=record_key, precombine_field=precombine_field,
                   partition_by=partition_by, table_type=table_type, storage_options=storage_options)

    @staticmethod
    def exists(path) -> bool:
        """A table is at `path` (a damaged one too: `open` then raises CorruptTableError)."""
        return HoodieTable.exists(path)

    @property
    def path(self) -> str:
        return str(self._path)

    def _meta(self) -> HoodieTable:
        return HoodieTable.open(self._path)

    def _opts(self, options: dict | None) -> dict | None:
        if not self.options:
            return options
        return {**self.options, **(options or {})}

    def _spark(self, spark, workers: bool = True):
        """The session for a read; `workers=False`: the caller checks the Python workers itself, only when its
        frame runs Python tasks (a change read's local relation runs none)."""
        s = spark if spark is not None else self.spark
        if s is None:
            raise HudiliteError(f"{self.path}: this read needs a Spark session (Table.open(path, spark=...)); "
                                "to_arrow / changes_arrow read without Spark")
        check_client_storage(s, self.path, write=False)
        if workers:
            check_workers(s)
        register(s)
        return s

    # ---- writing -------------------------------------------------------------------------
    def write(self, data, operation: str = "upsert", *, options: dict | None = None,
              extra_metadata: dict | None = None, commit: bool = True, checkpoint: tuple[str, int] | None = None,
              consumed: dict | None = None):
        """Write `data` (a Spark DataFrame, or an Arrow table / record batches: written in this process) as one
        commit with `operation` (see OPERATIONS). Returns the committed instant time (a str with `.stats`), or
        with `commit=False` a PendingWrite to audit (`.read(spark)`) and `.complete()` / `.abort()`.
        `checkpoint=(app_id, n)` records in the same commit that consumer `app_id` processed up to `n` (see
        `checkpoint`), so output and progress commit together. `consumed={upstream path: (position, table id)}`
        (positions from the upstreams' `position()`) records how far this table, as a consumer, has read them,
        merged over what it recorded before (see `consumed()`): the dbt models' and aggregates' checkpoints."""
        extra = extra_metadata
        if consumed:
            extra = {**(extra or {}), **_checkpoints.entries(consumed, previous=self._path)}
        if checkpoint is not None:
            app_id, n = checkpoint
            extra = {**(extra or {}), QUERY_ID_KEY: str(app_id), BATCH_ID_KEY: str(int(n))}
        return _write(data, self._path, **self._write_layout(), operation=operation, options=self._opts(options),
                      extra_metadata=extra, commit=commit)

    def _write_layout(self) -> dict:
        lay = dict(self._layout)
        if lay["record_key"] is None:  # an opened table writes with its own key; the write checks the rest
            lay["record_key"] = self._meta().config.record_key_fields
        return lay

    def upsert(self, data, **kw):
        return self.write(data, "upsert", **kw)

    def insert(self, data, **kw):
        return self.write(data, "insert", **kw)

    def delete(self, data, **kw):
        """Delete the records whose keys `data` holds (other columns are ignored)."""
        return self.write(data, "delete", **kw)

    # ---- streaming -----------------------------------------------------------------------
    def sink(self, *, operation: str = "upsert", options: dict | None = None, query_id: str | None = None,
             async_instants: bool = True, checkpoint_location: str | None = None) -> StreamingSink:
        """A Structured Streaming `foreachBatch` function writing each micro-batch as one commit, exactly once
        (hudilite/streaming.py). Its app id for `checkpoint` is the query id."""
        return StreamingSink(self._path, **self._write_layout(), operation=operation, options=self._opts(options),
                             query_id=query_id, async_instants=async_instants,
                             checkpoint_location=checkpoint_location)

    def write_stream(self, df, *, checkpointLocation: str, trigger: dict | None = None,
                     query_name: str | None = None, operation: str = "upsert", options: dict | None = None,
                     **kwargs):
        """Start a streaming query writing `df` here, one commit per micro-batch; returns the StreamingQuery
        (`.hudilite_sink` is the sink). `trigger`: keyword arguments of `DataStreamWriter.trigger`."""
        return _write_stream(df, self._path, checkpointLocation=checkpointLocation, trigger=trigger,
                             query_name=query_name, **self._write_layout(), operation=operation,
                             options=self._opts(options), **kwargs)

    # ---- reading -------------------------------------------------------------------------
    def read(self, *, as_of=None, begin=None, end=None, filters=None, read_optimized: bool = False,
             ready_only: bool = False, completion_bounds: bool = False, columns=None, spark=None):
        """A Spark DataFrame: the latest snapshot, time travel `as_of` (an instant time), or incremental
        `(begin, end]` in completion order (`completion_bounds=True`: the bounds are completion times, the
        positions `position()` returns). `read_optimized`: merge-on-read base files only. `ready_only`: only
        partitions a commit marked ready (write-audit-publish). `columns`: only these columns, pruned in the
        scan of files without log records (the way to prune columns on object stores read by the Arrow scan)."""
        s = self._spark(spark)
        return _spark_read(s, self._path, as_of=as_of, begin=begin, end=end, filters=filters,
                           read_optimized=read_optimized, ready_only=ready_only, completion_bounds=completion_bounds,
                           columns=columns)

    def as_of(self, instant, *, filters=None, spark=None):
        """The snapshot as of `instant` (time travel)."""
        return self.read(as_of=instant, filters=filters, spark=spark)

    def to_arrow(self, columns=None, *, position: str | None = None, max_bytes: int | None = None):
        """The snapshot (latest, or as of completion `position`) as an Arrow table read in this process, or
        None when it has merge-on-read log files to merge or exceeds `max_bytes` (read it with Spark)."""
        meta = self._meta()
        cols = list(columns) if columns is not None else _table_schema(meta).names
        return _changes.local_snapshot(meta, position, cols, max_bytes)

    def schema(self):
        """The table's Arrow schema (data columns and Hudi meta columns)."""
        return _table_schema(self._meta())

    def row_count(self, spark=None) -> int:
        """Rows of the latest snapshot: from commit metadata, or (merge-on-read slices with log files, whose
        rows only a merge counts) by a Spark read."""
        rows = self.stats()["rows"]
        return rows if rows is not None else self.read(spark=spark).count()

    # ---- change feeds and consumer checkpoints ---------------------------------------------
    def changes(self, begin=None, end=None, *, include_deletes: bool = True, before_image: bool = False,
                filters=None, completion_bounds: bool = False, table_id: str | None = None, spark=None):
        """What changed in `(begin, end]` (completion order) as a Spark DataFrame with `_change_op` ('I', 'U',
        'D', with `before_image` also 'B'). `table_id` (from `position()`): raises TableReplacedError when
        another table now lives at the path; RangeUnavailableError when the range was cleaned/archived."""
        s = self._spark(spark, workers=False)  # _spark_changes checks them where its frame needs them
        return _spark_changes(s, self._path, begin=begin, end=end, include_deletes=include_deletes,
                                before_image=before_image, filters=filters, completion_bounds=completion_bounds,
                                table_id=table_id)

    def changes_arrow(self, begin, end=None, *, include_deletes: bool = True, before_image: bool = False,
                      completion_bounds: bool = False, columns=None, table_id: str | None = None):
        """`changes()` as an Arrow table read without Spark when change images serve the range; None
        otherwise (use `changes()`)."""
        return _changes.local_changes(self._path, begin, end, include_deletes=include_deletes,
                                      before_image=before_image, completion_bounds=completion_bounds,
                                      columns=columns, table_id=table_id)

    def latest_position(self) -> str | None:
        """The completion position of the newest commit (None: no commits), without the table id `position()`
        adds: a range ending here covers everything committed now."""
        return _changes.latest_position(self._path)

    def position(self) -> tuple[str | None, str | None]:
        """(completion position of the newest commit, table id): what a consumer of this table records to
        continue from later (`changes(begin=position, table_id=id, completion_bounds=True)`)."""
        return _changes.checkpoint(self._path)

    def checkpoint(self, app_id: str) -> int | None:
        """The highest `n` consumer `app_id` recorded on this table (`write(..., checkpoint=(app_id, n))` or
        the streaming sink, whose app id is its query id); None if it never wrote here. A consumer skips the
        inputs up to it: the exactly-once test of a replayed batch."""
        return _last_batch_id(self.path, app_id)

    def consumed(self) -> _checkpoints.Checkpoint:
        """How far this table, as a consumer, has read its upstream tables: `.positions` / `.table_ids` per
        upstream path, and `.resume(upstream, current_id)` -> (position to continue from, rebuilt upstream)."""
        return _checkpoints.read(self._path)

    # ---- metadata ------------------------------------------------------------------------
    @property
    def timeline(self) -> Timeline:
        """The active timeline as loaded now (`.instants`, `.completed()`, `.pending()`, `.archived`)."""
        return self._meta().timeline

    def upgrade(self, to: int = 9, options: dict | None = None) -> bool:
        """Upgrade a version-6 table to version `to` (9) as Apache Hudi 1.x does, under the table lock and
        crash-safe (see hudilite/services/upgrade.py). False when it was at `to` already."""
        return _upgrade(self._meta(), to, self._opts(options))

    def info(self) -> TableInfo:
        """Properties, type, version, keys, partitions and latest-snapshot layout."""
        t = self._meta()
        c = t.config
        parts = t.partitions()
        slices = t.view().latest_slices(parts)
        tl = t.timeline
        return TableInfo(
            path=t.base_path, name=c.name, table_type=c.table_type, version=c.version, table_id=c.table_id,
            record_key=c.record_key_fields, precombine_field=c.precombine_field,
            partition_fields=c.partition_fields, partitions=parts, file_groups=len(slices),
            bytes=sum(s.base_file.size for s in slices if s.base_file),
            completed_instants=len(tl.completed()), pending_instants=len(tl.pending()), properties=dict(c.props),
            scan=_scan_description(self.spark if self.spark is not None else active_session(), t.base_path))

    def layout(self) -> TableLayout:
        """Type, record key, precombine field and partitioning from the table's properties."""
        c = self._meta().config
        return TableLayout(table_type=c.table_type, record_key=list(c.record_key_fields),
                           precombine_field=c.precombine_field,
                           partition_by=list(c.partition_fields) if c.is_partitioned else [], table_id=c.table_id)

    def accepts(self, df, *, table_type: str, record_key, partition_by, precombine_field) -> bool:
        """Whether writing Spark DataFrame `df` with this layout can be a commit on this table (same type, key,
        partitioning and precombine field, a permitted schema evolution) rather than needing `replacing()`."""
        return self._meta().accepts(table_type, record_key, partition_by, precombine_field, df.columns,
                                    _spark_to_arrow(df.schema))

    @contextlib.contextmanager
    def replacing(self):
        """A staging path beside this table: write the new table there (any layout) inside the block; on a
        clean exit it replaces this one crash-safely (hudilite/replace.py: a crash leaves the old or the new
        table at the path, never nothing). The new table has a new table id, so its consumers rebuild."""
        with _replace.staging_dir(self._path) as staging:
            yield staging
            # the old table's catalog entry, and sessions that resolved it, name snapshot directories under
            # this path: inside the new table after the swap
            _carry_snapshots(self._path, staging)
            _replace.swap(self._path, staging)

    def stats(self) -> dict:
        """{'rows', 'bytes', 'files'} of the latest snapshot from metadata only ('rows' None on merge-on-read
        slices with log files)."""
        return self._meta().snapshot_stats()

    def __repr__(self) -> str:
        return f"hudilite.Table({self.path!r})"


def _bind(path, storage_options: dict | None) -> None:
    """Paths of this table go to a backend made from its `storage_options` (none given: the scheme's default)."""
    if storage_options:
        _bind_storage_options(normalize_path(path), storage_options)


def register(spark) -> None:
    """Register the `hudilite` data source in this session (`spark.read.format("hudilite")`)."""
    _register(spark)


class TableServices:
    """Table services of one table: schedule a plan, execute pending plans, or both. They run beside live
    writers (plans are decided and completed under the table lock). `options`: hoodie.* service options,
    over the table's."""

    def __init__(self, table: Table):
        self._table = table

    def _opts(self, options):
        return self._table._opts(options)

    def _meta(self) -> HoodieTable:
        return self._table._meta()

    # compaction (merge-on-read)
    def schedule_compaction(self, options: dict | None = None, *, force: bool = False) -> str | None:
        """Schedule a compaction plan if its trigger fires (`force`: always); its instant, or None."""
        return _compaction.schedule_compaction(self._meta(), self._opts(options), force=force)

    def run_compaction(self, options: dict | None = None, *, instant: str | None = None, progress: bool = False,
                       wait: bool = False) -> list[str]:
        """Execute pending compaction plans oldest first (or only `instant`); `wait` for plans another
        executor holds. Returns the completed instants."""
        return _compaction.run_compaction(self._meta(), self._opts(options), instant=instant, progress=progress,
                                          wait=wait)

    def compact(self, options: dict | None = None, *, force: bool = False, progress: bool = False) -> list[str]:
        """Schedule (if the trigger fires) and run every pending compaction."""
        return _compaction.compact(self._meta(), self._opts(options), force=force, progress=progress)

    # clustering
    def _cluster_opts(self, options, sort_columns):
        opts = self._opts(options)
        if sort_columns:
            cols = sort_columns if isinstance(sort_columns, str) else ",".join(sort_columns)
            opts = {**(opts or {}), _clustering.SORT_KEY: cols}
        return opts

    def schedule_clustering(self, options: dict | None = None, *, sort_columns=None) -> str | None:
        """Schedule a clustering plan (its file groups sorted by `sort_columns`); its instant, or None when no
        partition has small file groups to combine."""
        return _clustering.schedule_clustering(self._meta(), self._cluster_opts(options, sort_columns))

    def run_clustering(self, options: dict | None = None, *, instant: str | None = None, progress: bool = False,
                       wait: bool = False, sort_columns=None) -> list[str]:
        """Execute pending clustering plans oldest first (or only `instant`); `wait` for plans another
        executor holds. Returns the completed instants."""
        return _clustering.run_clustering(self._meta(), self._cluster_opts(options, sort_columns), instant=instant,
                                          progress=progress, wait=wait)

    def cluster(self, options: dict | None = None, *, progress: bool = False, sort_columns=None) -> list[str]:
        """Schedule a clustering plan (if some partition has small file groups) and run every pending one."""
        return _clustering.cluster(self._meta(), self._cluster_opts(options, sort_columns), progress=progress)

    # clean, archive
    def schedule_clean(self, options: dict | None = None) -> str | None:
        return _clean.schedule_clean(self._meta(), self._opts(options))

    def clean(self, options: dict | None = None, *, progress: bool = False, schedule: bool = True) -> list[str]:
        """Finish pending cleans, then (`schedule`) plan and run a new one. Returns the completed cleans."""
        return _clean.run_clean(self._meta(), self._opts(options), progress=progress, schedule=schedule)

    def archive(self, options: dict | None = None, *, force: bool = False) -> list[str]:
        """Move old instants to .hoodie/archived (`force`: down to hoodie.keep.min.commits now)."""
        return _archival.archive(self._meta(), self._opts(options), force=force)

    # rollback
    def rollback(self, *, force: bool = False) -> list[str]:
        """Roll back failed writes: every pending write whose writer's heartbeat expired (`force`: also those
        whose writer looks alive — only when no writer runs). Plans and prepared commits are left to their
        owners. Returns the rolled-back instants."""
        return _rollback_failed_writes(self._meta(), lazy=not force, options=self._opts(None))

    def rollback_instant(self, instant: str, *, force: bool = False) -> list[str]:
        """Roll back the one pending write `instant`; returns the files deleted. Refused (RollbackRefusedError,
        nothing changed) when it is unknown, completed, a plan or prepared commit, or its writer looks alive
        and not `force`."""
        t = self._meta()
        inst = t.timeline.get(instant)
        if inst is None:
            raise RollbackRefusedError(f"no instant {instant} on the timeline of {t.base_path}")
        if inst.is_completed:
            raise RollbackRefusedError(f"instant {instant} is completed; only pending writes can be rolled back")
        txn = Transaction(t, self._opts(None) or {})
        with txn.lock:  # no writer completes it meanwhile
            tl = t.reload()
            inst = tl.get(instant)
            guard = pending_guard(tl, inst) if inst is not None and not inst.is_completed else None
            if guard is not None:
                raise RollbackRefusedError(
                    f"instant {instant} is a {guard[0]}, not a failed write: its owner finishes it "
                    "(hudilite compaction run / cluster --run-only / the streaming query's restart)")
            if inst is None or inst.is_completed:
                raise RollbackRefusedError(f"instant {instant} completed or vanished meanwhile; nothing to roll back")
            live = _live_writer(t.base_path, instant)
            if live and not force:
                raise RollbackRefusedError(
                    f"instant {instant} belongs to a writer that is alive ({live}); rolling it back would fail "
                    "that write. Use --force if you know the writer is dead")
            return txn.rollback(inst)

    def live_writes(self) -> dict[str, str]:
        """Pending writes whose writer looks alive (its heartbeat within its tolerance), instant -> why:
        what `rollback()` leaves alone. Service plans and prepared streaming commits are not writes here."""
        t = self._meta()
        tl = t.timeline
        out = {}
        for inst in tl.pending():
            live = _live_writer(t.base_path, inst.timestamp)
            if live and pending_guard(tl, inst) is None:
                out[inst.timestamp] = live
        return out


def _live_writer(base_path: str, instant: str) -> str | None:
    """Why the writer of a pending `instant` counts as alive (its heartbeat within its tolerance), or None."""
    hb = read_heartbeat(base_path, instant)
    if hb is None:
        return None
    tolerance = hb["tolerance_ms"] or DEFAULT_INTERVAL_MS * DEFAULT_MISSES
    if hb["age_ms"] > tolerance:
        return None
    return (f"heartbeat {hb['age_ms'] / 1000:.1f} s old, tolerance {tolerance / 1000:.0f} s: rolled back "
            f"automatically once it is {tolerance / 1000:.0f} s old")


__all__ = ["Table", "TableServices", "TableInfo", "TableLayout", "RollbackRefusedError", "OPERATIONS", "register"]
