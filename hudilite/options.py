"""Every `hoodie.*` / `hudilite.*` / `spark.hudilite.*` key the project reads: one declaration each (name, type,
default, meaning, where it applies), the one typed accessor (`Option.get`) and the one boolean parser
(`parse_bool`) the modules read them with, and the tables of `docs/options.md`
(`scripts/options_doc.py`; a test fails when the page is stale).

Write and service options (writes, the CLI's `-o`) are checked before anything is written: unknown keys are
refused - nothing outside this list is read, so a key we do not know could only be a typo or a setting that
would silently do nothing - and values must have their declared type. Apache Hudi keys that users copy from
real Hudi configurations and whose work Spark does for us are accepted with no effect (`effect=False`).
Data source reads and the Spark conf refuse unknown `hudilite.*` / `spark.hudilite.*` keys the same way; their
other keys belong to Spark. `hoodie.properties` keys (scope "table") are the format's: they are read as Java
reads them, never refused (a file written by another engine must stay readable)."""

from __future__ import annotations

import difflib
import os
import sys
from dataclasses import dataclass
from typing import Any

from hudilite.errors import InvalidWriteError

_TRUE, _FALSE = ("true", "1", "yes"), ("false", "0", "no")
SCOPES = ("write", "service", "read", "spark", "table")
_UNSET = object()


def parse_bool(value, key: str = "", default: bool | None = None) -> bool:
    """The project's one boolean parser: true/1/yes, false/0/no (any case); None or "" gives `default`
    when there is one. Anything else is an InvalidWriteError naming `key`."""
    if isinstance(value, bool):
        return value
    s = "" if value is None else str(value).strip().lower()
    if not s and default is not None:
        return default
    if s in _TRUE:
        return True
    if s in _FALSE:
        return False
    raise InvalidWriteError(f"option {key}={value!r}: expected true or false")


@dataclass(frozen=True)
class Option:
    """One key: `type` is int | float | bool | string | list | choice; `default` the typed value a missing
    key reads as (None: no default, the caller decides); `shown` the default as the docs state it when it
    is not a constant (e.g. "Spark default")."""

    key: str
    type: str
    default: Any
    doc: str
    scope: str = "write"
    choices: tuple = ()
    minimum: int = 0  # int keys: sizes, counts, intervals - a negative one is a mistake
    effect: bool = True  # False: an Apache Hudi key accepted and ignored
    shown: str | None = None

    def parse(self, value):
        """`value` as this key's type; InvalidWriteError naming the key when it is not one."""
        if self.type == "bool":
            if self.scope == "table":  # Java's Boolean.parseBoolean: only "true" is true, nothing fails
                return str(value).strip().lower() == "true"
            return parse_bool(value, self.key)
        if self.type == "list":
            if isinstance(value, (list, tuple)):
                return [str(c).strip() for c in value if str(c).strip()]
            return [c.strip() for c in str(value).split(",") if c.strip()]
        s = str(value).strip()
        if self.type == "int":
            try:
                n = int(s)
            except ValueError:
                raise self._bad(value, "an integer") from None
            if n < self.minimum:
                raise self._bad(value, "a non-negative integer" if self.minimum == 0 else
                                "a positive integer" if self.minimum == 1 else f"an integer >= {self.minimum}")
            return n
        if self.type == "float":
            try:
                return float(s)
            except ValueError:
                raise self._bad(value, "a number") from None
        if self.type == "choice":
            for c in self.choices:
                if c.lower() == s.lower():
                    return c
            raise self._bad(value, f"one of {', '.join(self.choices)}")
        return str(value)

    def get(self, options, default=_UNSET):
        """This key's typed value in `options` (a dict or None); missing or "" gives `default` (else the
        declared one)."""
        v = (options or {}).get(self.key)
        # hoodie.properties: an empty value is a value (Java reads "" as false, as an empty list, ...)
        if v is None or (self.scope != "table" and isinstance(v, str) and not v.strip()):
            d = self.default if default is _UNSET else default
            return list(d) if self.type == "list" and d is not None else d
        return self.parse(v)

    def _bad(self, value, expected: str) -> InvalidWriteError:
        return InvalidWriteError(f"option {self.key}={value!r}: expected {expected}")

    @property
    def default_text(self) -> str:
        if self.shown is not None:
            return self.shown
        if self.default is None or self.default == "":
            return "-"
        if isinstance(self.default, bool):
            return str(self.default).lower()
        if isinstance(self.default, (list, tuple)):
            return ",".join(self.default) or "-"
        return str(self.default)


_DECLARED: list[Option] = []


def _o(key, type_, default, doc, **kw) -> Option:
    opt = Option(key, type_, default, doc, **kw)
    _DECLARED.append(opt)
    return opt


MB = 1024 * 1024
_PARALLELISM = "accepted, no effect (Spark's partitioning)"

# ---- keys and layout -------------------------------------------------------------------------------------
TABLE_NAME = _o("hoodie.table.name", "string", None, "table name written into hoodie.properties",
                shown="directory name")
RECORD_KEY = _o("hoodie.datasource.write.recordkey.field", "list", None,
                "record key column(s) (the `record_key=` argument)")
PRECOMBINE = _o("hoodie.datasource.write.precombine.field", "string", None,
                "ordering column (the `precombine_field=` argument)")
TABLE_PRECOMBINE = _o("hoodie.table.precombine.field", "string", None,
                      "same as hoodie.datasource.write.precombine.field")
PARTITION_BY = _o("hoodie.datasource.write.partitionpath.field", "list", None,
                  "partition column(s) (`partition_by=`)")
OPERATION = _o("hoodie.datasource.write.operation", "choice", "upsert", "write operation (`operation=`)",
               choices=("bulk_insert", "insert", "upsert", "delete", "insert_overwrite", "insert_overwrite_table"))
TABLE_TYPE = _o("hoodie.datasource.write.table.type", "choice", "COPY_ON_WRITE",
                "table type of a new table (`table_type=`)", choices=("COPY_ON_WRITE", "MERGE_ON_READ", "COW", "MOR"))
HIVE_STYLE = _o("hoodie.datasource.write.hive_style_partitioning", "bool", True,
                "partition directories as `col=value`")
# ---- files -------------------------------------------------------------------------------------------------
MAX_FILE_SIZE = _o("hoodie.parquet.max.file.size", "int", 120 * MB, "target base file size in bytes", minimum=1)
SMALL_FILE_LIMIT = _o("hoodie.parquet.small.file.limit", "int", 100 * MB,
                      "base files below this size take new inserts")
RECORD_SIZE_ESTIMATE = _o("hoodie.copyonwrite.record.size.estimate", "int", 1024,
                          "bytes per record before the table has any")
BLOCK_ROWS = _o("hoodie.parquet.block.rows", "int", 131072, "rows per parquet row group", minimum=1)
COMPRESSION = _o("hoodie.parquet.compression.codec", "string", "snappy", "parquet compression codec")
LOG_BLOCK_FORMAT = _o("hoodie.logfile.data.block.format", "choice", "parquet",
                      "merge-on-read log data block format", choices=("parquet", "avro"))
LOG_MAX_SIZE = _o("hoodie.logfile.max.size", "int", 1024 * MB,
                  "a log file rolls over to the next version above this size")
BULK_SORT_MODE = _o("hoodie.bulkinsert.sort.mode", "choice", "NONE", "bulk_insert ordering",
                    choices=("NONE", "PARTITION_SORT", "GLOBAL_SORT"))
BULK_SOURCE_FILES = _o("hoodie.bulkinsert.read.source.files", "bool", True,
                       "bulk_insert of a plain parquet scan reads its files directly (false: through the DataFrame)")
# ---- write behaviour ---------------------------------------------------------------------------------------
PARTIAL_UPDATE = _o("hoodie.write.partial.update", "bool", False,
                    "columns missing from the batch keep their stored values")
INPUT_PERSIST = _o("hoodie.write.input.persist", "bool", False, "persist the input DataFrame (evaluated once)")
BUFFER_LIMIT = _o("hoodie.write.buffer.limit.bytes", "int", 64 * MB, "bounded write queue size")
CHANGE_IMAGES = _o("hoodie.write.change.images", "bool", True,
                   "copy-on-write updates and deletes store change images for change reads")
READ_OVERLAYS = _o("hoodie.write.read.overlays", "bool", True, "merge-on-read appends write overlay cache entries "
                   "(of slices whose logs reach the Spark conf spark.hudilite.read.overlayCache.minLogBytes)")
FSYNC = _o("hoodie.write.fsync", "bool", True,
           "fsync data files and their directories before the commit that names them (false: scratch tables)")
SMALL_BATCH = _o("hudilite.write.small.batch.enabled", "bool", False,
                  "a small Spark input (see the next two keys) is written by the driver-local Arrow writer, no "
                  "Spark jobs: same planning, merge and commit (the dbt adapter turns it on)")
SMALL_BATCH_ROWS = _o("hudilite.write.small.batch.max.rows", "int", 10000,
                      "most rows of an input written without Spark jobs")
SMALL_BATCH_BYTES = _o("hudilite.write.small.batch.max.bytes", "int", 16 * MB,
                       "most bytes (plan estimate, then as Arrow) of an input written without Spark jobs")
SMALL_BATCH_ESTIMATE = _o("hudilite.write.small.batch.estimate", "choice", "auto",
                          "rule an input out by the optimized plan's size estimate before collecting it (true); "
                          "false: the caller knows the input has few rows (joins estimate the product of their "
                          "sides' sizes, a filter keeps its source's size); auto: false when the table's newest "
                          "write took at most max.rows records, else true",
                          choices=("auto", "true", "false"))
NEWEST_PER_KEY = _o("hudilite.write.newest.per.key", "bool", False,
                    "reduce the input to each record key's newest row first (highest precombine value, then the "
                    "latest arrival), deletes included: the newest event per key decides, so a key inserted and "
                    "deleted in one batch is not written. A small batch is reduced in the client after its "
                    "collect, a Spark input by a window (the dbt adapter sets it for change events)")
WRITER_TAG = _o("hudilite.write.writer.tag", "string", None,
                "who wrote a pending instant (the streaming sink sets stream:<query>): a restart rolls back its own "
                "dead run's instants at once")
WRITE_TABLE_VERSION = _o("hoodie.write.table.version", "choice", "9",
                        "table version of a table this write creates (6, 8 or 9; an existing table keeps its own)",
                        choices=("6", "8", "9"))
AUTO_UPGRADE = _o("hoodie.write.auto.upgrade", "bool", False,
                  "upgrade a version-6 table to version 9 before this write (hudilite upgrade; Apache Hudi's key, "
                  "default false here)")
ALLOW_EXISTING_FILES = _o("hudilite.write.allow.existing.files", "bool", False,
                          "create a table in a directory that holds other data files (Delta, Iceberg, plain parquet)")
# ---- index -------------------------------------------------------------------------------------------------
INDEX_TYPE = _o("hoodie.index.type", "choice", "BLOOM", "BLOOM/SIMPLE: a key is unique within its partition; "
                "GLOBAL_BLOOM/GLOBAL_SIMPLE: unique in the table (dbt models with unique_key use GLOBAL_BLOOM)",
                choices=("BLOOM", "SIMPLE", "GLOBAL_BLOOM", "GLOBAL_SIMPLE"))
BLOOM_UPDATE_PARTITION_PATH = _o(
    "hoodie.bloom.index.update.partition.path", "bool", True,
    "GLOBAL_BLOOM: a key whose partition value changes moves there (false: updated in its old partition)")
SIMPLE_UPDATE_PARTITION_PATH = _o("hoodie.simple.index.update.partition.path", "bool", True,
                                  "GLOBAL_SIMPLE: as hoodie.bloom.index.update.partition.path")
STREAMING_CONFLICT_RETRIES = _o("hoodie.write.streaming.conflict.retries", "int", 3,
                                "streaming micro-batch retries on a write conflict")
# ---- concurrency -------------------------------------------------------------------------------------------
CONCURRENCY_MODE = _o("hoodie.write.concurrency.mode", "string", "optimistic_concurrency_control",
                      "SINGLE_WRITER, OPTIMISTIC_CONCURRENCY_CONTROL or NON_BLOCKING_CONCURRENCY_CONTROL "
                      "(merge-on-read version 8/9 only; docs/concurrency.md)")
LOCK_PROVIDER = _o("hoodie.write.lock.provider", "string", None, "lock provider class or name",
                   shown="file system lock; storage lock on s3://")
LOCK_WAIT_MS = _o("hoodie.write.lock.wait_time_ms", "int", 600_000, "how long to wait for the lock")
LOCK_RETRY_MS = _o("hoodie.write.lock.wait_time_ms_between_retry", "int", 20, "lock retry interval")
LOCK_PATH = _o("hoodie.write.lock.filesystem.path", "string", None, "lock file directory",
               shown=".hoodie/.locks/table.lock")
LOCK_EXPIRE_MINUTES = _o("hoodie.write.lock.filesystem.expire", "float", None,
                         "lock expiry in minutes (Apache Hudi's key)")
LOCK_EXPIRE_MS = _o("hoodie.write.lock.filesystem.expire.ms", "int", None, "lock expiry in milliseconds")
LOCK_STORAGE_VALIDITY_SECS = _o("hoodie.write.lock.storage.validity.timeout.secs", "int", 300,
                                "storage lock: lease of the lock object, seconds", minimum=1)
LOCK_STORAGE_RENEW_SECS = _o("hoodie.write.lock.storage.renew.interval.secs", "int", None,
                             "storage lock: lease renewal interval, seconds", minimum=1,
                             shown="30, at most a third of the lease")
MAX_CLOCK_SKEW_MS = _o("hoodie.write.instant.max.clock.skew.ms", "int", 5, "tolerated clock skew between writers")
HEARTBEAT_INTERVAL_MS = _o("hoodie.client.heartbeat.interval_in_ms", "int", 60_000, "writer heartbeat interval",
                           minimum=1)
HEARTBEAT_MISSES = _o("hoodie.client.heartbeat.tolerable.misses", "int", 2,
                      "missed heartbeats before a write counts as failed", minimum=1)
MARKERS_TYPE = _o("hoodie.write.markers.type", "string", "DIRECT",
                  "DIRECT or TIMELINE_SERVER_BASED (the batched marker service)",
                  shown="DIRECT locally, TIMELINE_SERVER_BASED on object storage")
MARKERS_SERVICE_URL = _o("hoodie.write.markers.service.url", "string", None, "an external marker service")
MARKERS_BATCH_INTERVAL_MS = _o("hoodie.markers.timeline_server_based.batch.interval_ms", "float", 20.0,
                               "marker service batch interval", shown="20")
MARKERS_NUM_THREADS = _o("hoodie.markers.timeline_server_based.batch.num_threads", "int", 4,
                         "marker service threads", minimum=1)
# ---- table services ----------------------------------------------------------------------------------------
COMPACT_INLINE = _o("hoodie.compact.inline", "bool", False, "run compaction after writes", scope="service")
COMPACT_SCHEDULE_INLINE = _o("hoodie.compact.schedule.inline", "bool", False, "schedule compaction after writes",
                             scope="service")
COMPACT_TRIGGER = _o("hoodie.compact.inline.trigger.strategy", "choice", "NUM_COMMITS", "when compaction is due",
                     choices=("NUM_COMMITS", "NUM_COMMITS_AFTER_LAST_REQUEST", "TIME_ELAPSED", "NUM_AND_TIME",
                              "NUM_OR_TIME", "LOG_SIZE"), scope="service")
COMPACT_MAX_DELTA_COMMITS = _o("hoodie.compact.inline.max.delta.commits", "int", 5, "delta commits before compaction",
                               scope="service", minimum=1)
COMPACT_MAX_DELTA_SECONDS = _o("hoodie.compact.inline.max.delta.seconds", "int", 3600, "seconds before compaction",
                               scope="service")
COMPACT_LOG_SIZE = _o("hoodie.compaction.logfile.size.threshold", "int", 0, "log bytes before compaction (LOG_SIZE)",
                      scope="service")
COMPACT_PARALLELISM = _o("hoodie.compaction.parallelism", "int", None, "compaction tasks", scope="service",
                         minimum=1, shown="Spark default")
CLEAN_AUTOMATIC = _o("hoodie.clean.automatic", "bool", False, "clean after writes", scope="service")
CLEANER_POLICY = _o("hoodie.cleaner.policy", "choice", "KEEP_LATEST_COMMITS", "what clean keeps",
                    choices=("KEEP_LATEST_COMMITS", "KEEP_LATEST_FILE_VERSIONS"), scope="service")
CLEANER_COMMITS_RETAINED = _o("hoodie.cleaner.commits.retained", "int", 10, "commits whose files clean keeps",
                              scope="service", minimum=1)
CLEANER_VERSIONS_RETAINED = _o("hoodie.cleaner.fileversions.retained", "int", 3, "file versions clean keeps",
                               scope="service", minimum=1)
CLUSTER_INLINE = _o("hoodie.clustering.inline", "bool", False, "run clustering after writes", scope="service")
CLUSTER_SCHEDULE_INLINE = _o("hoodie.clustering.schedule.inline", "bool", False,
                             "schedule clustering after writes", scope="service")
CLUSTER_MAX_COMMITS = _o("hoodie.clustering.inline.max.commits", "int", 4, "commits between clusterings",
                         scope="service", minimum=1)
CLUSTER_SMALL_FILE_LIMIT = _o("hoodie.clustering.plan.strategy.small.file.limit", "int", 300 * MB,
                              "files below this are clustered", scope="service", minimum=1)
CLUSTER_TARGET_FILE_BYTES = _o("hoodie.clustering.plan.strategy.target.file.max.bytes", "int", 1024 * MB,
                               "clustered file size", scope="service", minimum=1)
CLUSTER_GROUP_BYTES = _o("hoodie.clustering.plan.strategy.max.bytes.per.group", "int", 2048 * MB,
                         "bytes per clustering group", scope="service", minimum=1)
CLUSTER_MAX_GROUPS = _o("hoodie.clustering.plan.strategy.max.num.groups", "int", 30, "groups per clustering plan",
                        scope="service", minimum=1)
CLUSTER_SORT_COLUMNS = _o("hoodie.clustering.plan.strategy.sort.columns", "list", (),
                          "sort columns of clustered files", scope="service")
CLUSTER_PARALLELISM = _o("hoodie.clustering.parallelism", "int", None, "clustering tasks", scope="service",
                         minimum=1, shown="Spark default")
ARCHIVE_AUTOMATIC = _o("hoodie.archive.automatic", "bool", False, "archive after writes", scope="service")
KEEP_MIN_COMMITS = _o("hoodie.keep.min.commits", "int", 20, "instants archival keeps at least", scope="service",
                      minimum=1)
KEEP_MAX_COMMITS = _o("hoodie.keep.max.commits", "int", 30, "instants that trigger archival", scope="service",
                      minimum=1)
TIMELINE_COMPACTION_BATCH = _o("hoodie.timeline.compaction.batch.size", "int", 10, "LSM timeline history files of "
                               "one level merged into one file of the next level (v8/9)", scope="service",
                               minimum=2)
# ---- reads (data source options; hoodie.datasource.query.type is taken by writes too, as it always was) -----
QUERY_TYPE = _o("hoodie.datasource.query.type", "choice", "snapshot", "data source reads: snapshot, read_optimized, "
                "incremental", choices=("snapshot", "read_optimized", "incremental"), scope="read")
READ_BEGIN = _o("hoodie.datasource.read.begin.instanttime", "string", None,
                "data source reads with query type incremental: commits after this instant (as `begin`)",
                scope="read")
READ_END = _o("hoodie.datasource.read.end.instanttime", "string", None,
              "data source reads with query type incremental: commits up to this instant (as `end`)", scope="read")
READ_PARTITION_BYTES = _o("hudilite.read.partition.bytes", "int", 128 * MB,
                          "data source reads pack files and merged slices into input partitions of about this size",
                          scope="read", minimum=1)
# ---- Apache Hudi keys whose work Spark's own scheduling does here --------------------------------------------
UPSERT_PARALLELISM = _o("hoodie.upsert.shuffle.parallelism", "int", None, _PARALLELISM, effect=False)
INSERT_PARALLELISM = _o("hoodie.insert.shuffle.parallelism", "int", None, _PARALLELISM, effect=False)
BULKINSERT_PARALLELISM = _o("hoodie.bulkinsert.shuffle.parallelism", "int", None, _PARALLELISM, effect=False)
DELETE_PARALLELISM = _o("hoodie.delete.shuffle.parallelism", "int", None, _PARALLELISM, effect=False)
# ---- Spark conf (spark.conf.set / the dbt profile's spark_conf) ---------------------------------------------
SMALL_SLICE_BYTES = _o("spark.hudilite.read.smallSliceBytes", "int", 1 << 20,
                       "merge-on-read slices of at most this many bytes are merged whole in Python tasks "
                       "(0: never)", scope="spark")
OVERLAY_CACHE = _o("spark.hudilite.read.overlayCache", "bool", True,
                   "snapshot reads keep merged log overlays as files under .hoodie/.aux", scope="spark")
OVERLAY_MIN_LOG_BYTES = _o("spark.hudilite.read.overlayCache.minLogBytes", "int", 1 << 20,
                           "slices whose logs reach this size get overlay files", scope="spark")

# ---- hoodie.properties: the format's keys (hudi-format.md), read as Java reads them ------------------------
T_NAME = _o("hoodie.table.name", "string", "", "the table's name (required)", scope="table")
T_TYPE = _o("hoodie.table.type", "string", "COPY_ON_WRITE", "COPY_ON_WRITE or MERGE_ON_READ (required)",
            scope="table")
T_VERSION = _o("hoodie.table.version", "string", "0", "table version: read and write 6, 8, 9 (required)",
               scope="table")
T_LAYOUT_VERSION = _o("hoodie.timeline.layout.version", "string", "0", "timeline layout (1 for 6, 2 for 8 and 9)",
                      scope="table")
T_TIMELINE_PATH = _o("hoodie.timeline.path", "string", "timeline", "timeline folder under .hoodie (layout 2)",
                     scope="table")
T_HISTORY_PATH = _o("hoodie.timeline.history.path", "string", "history",
                    "LSM timeline history folder under the timeline folder (layout 2)", scope="table")
T_INITIAL_VERSION = _o("hoodie.table.initial.version", "string", None, "table version the table was created at "
                       "(version 8+)", scope="table")
T_TABLE_FORMAT = _o("hoodie.table.format", "string", None, "table format plug-in (version 9: native)",
                    scope="table")
T_RECORD_KEYS = _o("hoodie.table.recordkey.fields", "list", (), "record key columns", scope="table")
T_ORDERING = _o("hoodie.table.ordering.fields", "string", None, "ordering column (version 8+)", scope="table")
T_PRECOMBINE = _o("hoodie.table.precombine.field", "string", None, "ordering column (version 6)", scope="table")
T_PARTITIONS = _o("hoodie.table.partition.fields", "list", (), "partition columns", scope="table")
T_KEYGEN_CLASS = _o("hoodie.table.keygenerator.class", "string", "", "key generator class", scope="table")
T_KEYGEN_TYPE = _o("hoodie.table.keygenerator.type", "string", "", "key generator type (version 8+)",
                   scope="table")
T_HIVE_STYLE = _o("hoodie.datasource.write.hive_style_partitioning", "bool", False,
                  "partition directories are `col=value`", scope="table")
T_URL_ENCODE = _o("hoodie.datasource.write.partitionpath.urlencode", "bool", False,
                  "partition values are URL-encoded in paths (tables Apache Hudi wrote: read decoded; a value "
                  "such a table would escape is refused on write; hudilite creates tables with false)",
                  scope="table")
T_KEYGEN_UTC = _o("hudilite.keygen.timestamp.utc", "bool", False,
                  "record keys and partition values of timestamp columns are their UTC wall clock, whatever the "
                  "writing session's time zone (written true when hudilite creates a table; a table without it "
                  "keeps the session's, as its keys were written)", scope="table")
T_DROP_PARTITION_COLUMNS = _o("hoodie.datasource.write.drop.partition.columns", "bool", False,
                              "partition columns left out of data files (true: not supported)", scope="table")
T_BASE_FORMAT = _o("hoodie.table.base.file.format", "string", "PARQUET", "base file format (only PARQUET)",
                   scope="table")
T_LOG_FORMAT = _o("hoodie.table.log.file.format", "string", "HOODIE_LOG", "log file format (written)",
                  scope="table")
T_META_FIELDS = _o("hoodie.populate.meta.fields", "bool", True, "rows carry the _hoodie_* meta columns",
                   scope="table")
T_CREATE_SCHEMA = _o("hoodie.table.create.schema", "string", None, "Avro schema at creation (escaped)",
                     scope="table")
T_MERGE_MODE = _o("hoodie.record.merge.mode", "string", None, "EVENT_TIME_ORDERING or COMMIT_TIME_ORDERING",
                  scope="table")
T_MERGE_STRATEGY = _o("hoodie.record.merge.strategy.id", "string", None, "merge strategy id (version 8+)",
                      scope="table")
T_MERGER_STRATEGY = _o("hoodie.compaction.record.merger.strategy", "string", None,
                       "merge strategy id (version 6)", scope="table")
T_PAYLOAD = _o("hoodie.compaction.payload.class", "string", "", "payload class: its ordering semantics",
               scope="table")
T_CHECKSUM = _o("hoodie.table.checksum", "string", None, "crc32 of `<database>.<table name>`", scope="table")
T_DATABASE = _o("hoodie.database.name", "string", None, "database name (part of the checksum)", scope="table")
T_TIMEZONE = _o("hoodie.table.timeline.timezone", "string", "UTC", "instant time zone (written)", scope="table")
T_ARCHIVE_FOLDER = _o("hoodie.archivelog.folder", "string", "archived", "archived timeline folder under .hoodie",
                      scope="table")
T_METADATA_PARTITIONS = _o("hoodie.table.metadata.partitions", "string", "",
                           "metadata table partitions (written empty: no metadata table)", scope="table")
# The table's identity: `<creation time (17-digit UTC ms)>-<uuid4 hex>`, written once when the table is created.
# Apache Hudi has no table id (`hoodie.table.checksum` is a crc of database and name), so this is a hudilite
# key; Java and hudi-rs ignore keys they do not know.
T_TABLE_ID = _o("hudilite.table.id", "string", None, "hudilite's table identity: creation time and a uuid",
                scope="table")

DECLARED: tuple[Option, ...] = tuple(_DECLARED)
# The keys writes, services and the CLI take (the first table of docs/options.md).
OPTIONS: tuple[Option, ...] = tuple(o for o in DECLARED if o.scope in ("write", "service", "read"))
BY_KEY = {o.key: o for o in OPTIONS}
SPARK_CONF: tuple[Option, ...] = tuple(o for o in DECLARED if o.scope == "spark")
TABLE_PROPERTIES: tuple[Option, ...] = tuple(o for o in DECLARED if o.scope == "table")


def _unknown(key: str, known, where: str, hint: str) -> InvalidWriteError:
    close = difflib.get_close_matches(key, known, n=2, cutoff=0.8)
    return InvalidWriteError(f"unknown {where} {key!r}" + (f"; did you mean {' or '.join(close)}?" if close else hint))


def check_options(options, where: str = "option") -> None:
    """Raise InvalidWriteError for a key that is not declared above (with the closest declared keys) or a
    value that is not of its declared type."""
    for k, v in (options or {}).items():
        key = str(k)
        opt = BY_KEY.get(key)
        if opt is None:
            raise _unknown(key, BY_KEY, where, " (hudilite reads only the hoodie.* keys listed in docs/options.md)")
        opt.parse(str(v))


def check_read_options(options) -> None:
    """Data source options: the declared read keys must be well typed and an unknown `hudilite.*` key is an
    error; everything else (path, as_of, Apache Hudi's many read keys) is the data source's or Spark's."""
    known = {o.key: o for o in OPTIONS if o.scope == "read"}
    for k, v in (options or {}).items():
        key = str(k)
        if key in known:
            known[key].parse(v)
        elif key.lower().startswith("hudilite."):
            raise _unknown(key, known, "data source option", " (see docs/options.md)")


def spark_conf(spark) -> dict[str, str]:
    """The session's `spark.hudilite.*` settings, checked: an unknown one (a typo would silently do nothing)
    or an ill-typed one raises InvalidWriteError. {} without a session."""
    if spark is None:
        return {}
    known = {o.key: o for o in SPARK_CONF}
    out = {}
    for k in _conf_keys(spark):
        if k.startswith("spark.hudilite."):
            if k not in known:
                raise _unknown(k, known, "Spark conf", " (see docs/options.md)")
            out[k] = spark.conf.get(k)
            known[k].parse(out[k])
    return out


def _conf_keys(spark) -> list[str]:
    jconf = getattr(spark.conf, "_jconf", None)
    if jconf is None:  # Spark Connect: getAll is one round trip
        return list(spark.conf.getAll)
    # classic PySpark's getAll converts the map entry by entry over py4j (~130 ms); the key set as one string
    # is one call (Spark's conf keys hold no ", ")
    return jconf.getAllAsJava().keySet().toString()[1:-1].split(", ")


# ---- docs/options.md -----------------------------------------------------------------------------------------
def markdown_table(options=None) -> str:
    rows = ["| key | type | default | applies to | meaning |", "|---|---|---|---|---|"]
    for o in OPTIONS if options is None else options:
        t = o.type if o.type != "choice" else " / ".join(o.choices)
        rows.append(f"| `{o.key}` | {t} | {o.default_text} | {o.scope} | {o.doc} |")
    return "\n".join(rows) + "\n"


GENERATOR = "scripts/options_doc.py"
_SECTIONS = {"options": OPTIONS, "spark": SPARK_CONF, "table": TABLE_PROPERTIES}


def _markers(name: str) -> tuple[str, str]:
    return f"<!-- {name}:begin (generated by {GENERATOR}) -->", f"<!-- {name}:end -->"


BEGIN, END = _markers("options")


def render_doc(text: str) -> str:
    """`text` (docs/options.md) with its generated tables replaced by the current declarations."""
    for name, opts in _SECTIONS.items():
        begin, end = _markers(name)
        head, rest = text.split(begin, 1)
        _, tail = rest.split(end, 1)
        text = f"{head}{begin}\n{markdown_table(opts)}{end}{tail}"
    return text


def main(argv=None) -> int:
    """`--markdown`: print the tables; `--write [PATH]` (the default): regenerate docs/options.md (or PATH)
    in place."""
    args = list(sys.argv[1:] if argv is None else argv) or ["--write"]
    if args[:1] == ["--markdown"]:
        for name, opts in _SECTIONS.items():
            print(f"<!-- {name} -->\n{markdown_table(opts)}")
        return 0
    if args[:1] == ["--write"]:  # a developer tool rewriting the source tree's doc: local files
        doc = args[1] if len(args) > 1 else os.path.join(os.path.dirname(__file__), "..", "docs", "options.md")
        with open(doc, encoding="utf-8") as f:
            text = render_doc(f.read())
        with open(doc, "w", encoding="utf-8") as f:
            f.write(text)
        return 0
    print("usage: scripts/options_doc.py [--markdown | --write [docs/options.md]]", file=sys.stderr)
    return 2

