"""Every `hoodie.*` / `hudilite.*` option key the project reads: one declaration (name, type, default, meaning),
used to reject unknown keys before anything is written (writes, the CLI's `-o`) and to generate the options
table in `docs/options.md` (`scripts/options_doc.py`; a test checks the table is current).

Keys of other systems are rejected too: nothing outside this list is read, so a key we do not know could only
be a typo or a setting that would silently do nothing. Apache Hudi keys that users copy from real Hudi
configurations and whose work Spark does for us are accepted with no effect (`effect=False`)."""

from __future__ import annotations

import difflib
from dataclasses import dataclass

from hudilite.errors import InvalidWriteError

_BOOLS = ("true", "false", "1", "0", "yes", "no")


@dataclass(frozen=True)
class Option:
    key: str
    type: str  # int | float | bool | string | list | choice
    default: str
    doc: str
    choices: tuple = ()
    effect: bool = True  # False: an Apache Hudi key accepted and ignored
    scope: str = "write"  # write | service | read


def _o(key, type_, default, doc, **kw) -> Option:
    return Option(key, type_, str(default), doc, **kw)


MB = 1024 * 1024
OPTIONS: tuple[Option, ...] = (
    # keys and layout
    _o("hoodie.table.name", "string", "directory name", "table name written into hoodie.properties"),
    _o("hoodie.datasource.write.recordkey.field", "list", "-", "record key column(s) (the `record_key=` argument)"),
    _o("hoodie.datasource.write.precombine.field", "string", "-",
       "ordering column (the `precombine_field=` argument)"),
    _o("hoodie.table.precombine.field", "string", "-", "same as hoodie.datasource.write.precombine.field"),
    _o("hoodie.datasource.write.partitionpath.field", "list", "-", "partition column(s) (`partition_by=`)"),
    _o("hoodie.datasource.write.operation", "choice", "upsert", "write operation (`operation=`)",
       choices=("bulk_insert", "insert", "upsert", "delete", "insert_overwrite", "insert_overwrite_table")),
    _o("hoodie.datasource.write.table.type", "choice", "COPY_ON_WRITE", "table type of a new table (`table_type=`)",
       choices=("COPY_ON_WRITE", "MERGE_ON_READ", "COW", "MOR")),
    _o("hoodie.datasource.write.hive_style_partitioning", "bool", "true", "partition directories as `col=value`"),
    # files
    _o("hoodie.parquet.max.file.size", "int", 120 * MB, "target base file size in bytes"),
    _o("hoodie.parquet.small.file.limit", "int", 100 * MB, "base files below this size take new inserts"),
    _o("hoodie.copyonwrite.record.size.estimate", "int", 1024, "bytes per record before the table has any"),
    _o("hoodie.parquet.block.rows", "int", 131072, "rows per parquet row group"),
    _o("hoodie.parquet.compression.codec", "string", "snappy", "parquet compression codec"),
    _o("hoodie.logfile.data.block.format", "choice", "parquet", "merge-on-read log data block format",
       choices=("parquet", "avro")),
    _o("hoodie.logfile.max.size", "int", 1024 * MB, "a log file rolls over to the next version above this size"),
    _o("hoodie.bulkinsert.sort.mode", "choice", "NONE", "bulk_insert ordering",
       choices=("NONE", "PARTITION_SORT", "GLOBAL_SORT")),
    _o("hoodie.bulkinsert.read.source.files", "bool", "true",
       "bulk_insert of a plain parquet scan reads its files directly (false: through the DataFrame)"),
    # write behaviour
    _o("hoodie.write.partial.update", "bool", "false", "columns missing from the batch keep their stored values"),
    _o("hoodie.write.input.persist", "bool", "false", "persist the input DataFrame (evaluated once)"),
    _o("hoodie.write.buffer.limit.bytes", "int", 64 * MB, "bounded write queue size"),
    _o("hoodie.write.change.images", "bool", "false", "store change images for change reads"),
    _o("hoodie.write.read.overlays", "bool", "true", "merge-on-read appends write overlay cache entries (of "
       "slices whose logs reach the Spark conf spark.hudilite.read.overlayCache.minLogBytes, default 1 MiB)"),
    _o("hoodie.write.fsync", "bool", "true",
       "fsync data files and their directories before the commit that names them (false: scratch tables)"),
    _o("hudilite.write.writer.tag", "string", "-",
       "who wrote a pending instant (the streaming sink sets stream:<query>): a restart rolls back its own dead "
       "run's instants at once"),
    # index
    _o("hoodie.index.type", "choice", "BLOOM", "BLOOM/SIMPLE: a key is unique within its partition; "
       "GLOBAL_BLOOM/GLOBAL_SIMPLE: unique in the table (dbt models with unique_key use GLOBAL_BLOOM)",
       choices=("BLOOM", "SIMPLE", "GLOBAL_BLOOM", "GLOBAL_SIMPLE")),
    _o("hoodie.bloom.index.update.partition.path", "bool", "true",
       "GLOBAL_BLOOM: a key whose partition value changes moves there (false: updated in its old partition)"),
    _o("hoodie.simple.index.update.partition.path", "bool", "true",
       "GLOBAL_SIMPLE: as hoodie.bloom.index.update.partition.path"),
    _o("hoodie.write.streaming.conflict.retries", "int", 3, "streaming micro-batch retries on a write conflict"),
    # concurrency
    _o("hoodie.write.concurrency.mode", "string", "optimistic_concurrency_control",
       "SINGLE_WRITER or OPTIMISTIC_CONCURRENCY_CONTROL (docs/concurrency.md)"),
    _o("hoodie.write.lock.provider", "string", "file system lock", "lock provider class or name"),
    _o("hoodie.write.lock.wait_time_ms", "int", 600_000, "how long to wait for the lock"),
    _o("hoodie.write.lock.wait_time_ms_between_retry", "int", 20, "lock retry interval"),
    _o("hoodie.write.lock.filesystem.path", "string", ".hoodie/.lock", "lock file directory"),
    _o("hoodie.write.lock.filesystem.expire", "float", "-", "lock expiry in minutes (Apache Hudi's key)"),
    _o("hoodie.write.lock.filesystem.expire.ms", "int", "-", "lock expiry in milliseconds"),
    _o("hoodie.write.instant.max.clock.skew.ms", "int", 5, "tolerated clock skew between writers"),
    _o("hoodie.client.heartbeat.interval_in_ms", "int", 60_000, "writer heartbeat interval"),
    _o("hoodie.client.heartbeat.tolerable.misses", "int", 2, "missed heartbeats before a write counts as failed"),
    _o("hoodie.write.markers.type", "string", "DIRECT",
       "DIRECT or TIMELINE_SERVER_BASED (the batched marker service)"),
    _o("hoodie.write.markers.service.url", "string", "-", "an external marker service"),
    _o("hoodie.markers.timeline_server_based.batch.interval_ms", "float", 20, "marker service batch interval"),
    _o("hoodie.markers.timeline_server_based.batch.num_threads", "int", 4, "marker service threads"),
    # table services
    _o("hoodie.compact.inline", "bool", "false", "run compaction after writes", scope="service"),
    _o("hoodie.compact.schedule.inline", "bool", "false", "schedule compaction after writes", scope="service"),
    _o("hoodie.compact.inline.trigger.strategy", "choice", "NUM_COMMITS", "when compaction is due",
       choices=("NUM_COMMITS", "NUM_COMMITS_AFTER_LAST_REQUEST", "TIME_ELAPSED", "NUM_AND_TIME", "NUM_OR_TIME",
                "LOG_SIZE"), scope="service"),
    _o("hoodie.compact.inline.max.delta.commits", "int", 5, "delta commits before compaction", scope="service"),
    _o("hoodie.compact.inline.max.delta.seconds", "int", 3600, "seconds before compaction", scope="service"),
    _o("hoodie.compaction.logfile.size.threshold", "int", 0, "log bytes before compaction (LOG_SIZE)",
       scope="service"),
    _o("hoodie.compaction.parallelism", "int", "Spark default", "compaction tasks", scope="service"),
    _o("hoodie.clean.automatic", "bool", "false", "clean after writes", scope="service"),
    _o("hoodie.cleaner.policy", "choice", "KEEP_LATEST_COMMITS", "what clean keeps",
       choices=("KEEP_LATEST_COMMITS", "KEEP_LATEST_FILE_VERSIONS"), scope="service"),
    _o("hoodie.cleaner.commits.retained", "int", 10, "commits whose files clean keeps", scope="service"),
    _o("hoodie.cleaner.fileversions.retained", "int", 3, "file versions clean keeps", scope="service"),
    _o("hoodie.clustering.inline", "bool", "false", "run clustering after writes", scope="service"),
    _o("hoodie.clustering.schedule.inline", "bool", "false", "schedule clustering after writes", scope="service"),
    _o("hoodie.clustering.inline.max.commits", "int", 4, "commits between clusterings", scope="service"),
    _o("hoodie.clustering.plan.strategy.small.file.limit", "int", 300 * MB, "files below this are clustered",
       scope="service"),
    _o("hoodie.clustering.plan.strategy.target.file.max.bytes", "int", 1024 * MB, "clustered file size",
       scope="service"),
    _o("hoodie.clustering.plan.strategy.max.bytes.per.group", "int", 2048 * MB, "bytes per clustering group",
       scope="service"),
    _o("hoodie.clustering.plan.strategy.max.num.groups", "int", 30, "groups per clustering plan", scope="service"),
    _o("hoodie.clustering.plan.strategy.sort.columns", "list", "-", "sort columns of clustered files",
       scope="service"),
    _o("hoodie.clustering.parallelism", "int", "Spark default", "clustering tasks", scope="service"),
    _o("hoodie.archive.automatic", "bool", "false", "archive after writes", scope="service"),
    _o("hoodie.keep.min.commits", "int", 20, "instants archival keeps at least", scope="service"),
    _o("hoodie.keep.max.commits", "int", 30, "instants that trigger archival", scope="service"),
    _o("hudilite.write.allow.existing.files", "bool", "false",
       "create a table in a directory that holds other data files (Delta, Iceberg, plain parquet)"),
    # reads
    _o("hoodie.datasource.query.type", "choice", "snapshot", "data source reads: snapshot, read_optimized, "
       "incremental", choices=("snapshot", "read_optimized", "incremental"), scope="read"),
    # Apache Hudi keys whose work Spark's own scheduling does here
    _o("hoodie.upsert.shuffle.parallelism", "int", "-", "accepted, no effect (Spark's partitioning)", effect=False),
    _o("hoodie.insert.shuffle.parallelism", "int", "-", "accepted, no effect (Spark's partitioning)", effect=False),
    _o("hoodie.bulkinsert.shuffle.parallelism", "int", "-", "accepted, no effect (Spark's partitioning)",
       effect=False),
    _o("hoodie.delete.shuffle.parallelism", "int", "-", "accepted, no effect (Spark's partitioning)", effect=False),
)

BY_KEY = {o.key: o for o in OPTIONS}


def check_options(options, where: str = "option") -> None:
    """Raise InvalidWriteError for a key that is not declared above (with the closest declared keys) or a
    value that is not of its declared type."""
    for k, v in (options or {}).items():
        key = str(k)
        opt = BY_KEY.get(key)
        if opt is None:
            close = difflib.get_close_matches(key, BY_KEY, n=2, cutoff=0.8)
            hint = f"; did you mean {' or '.join(close)}?" if close else \
                " (hudilite reads only the hoodie.* keys listed in docs/options.md)"
            raise InvalidWriteError(f"unknown {where} {key!r}{hint}")
        _check_value(opt, str(v), where)


def _check_value(opt: Option, v: str, where: str) -> None:
    s = v.strip()
    try:
        if opt.type == "int":
            int(s)
        elif opt.type == "float":
            float(s)
    except ValueError:
        kind = "an integer" if opt.type == "int" else "a number"
        raise InvalidWriteError(f"{where} {opt.key}={v!r}: expected {kind}") from None
    if opt.type == "int" and int(s) < 0:  # sizes, counts, intervals: a negative one is a mistake
        raise InvalidWriteError(f"{where} {opt.key}={v!r}: expected a non-negative integer")
    if opt.type == "bool" and s.lower() not in _BOOLS:
        raise InvalidWriteError(f"{where} {opt.key}={v!r}: expected true or false")
    if opt.type == "choice" and s.lower() not in {c.lower() for c in opt.choices}:
        raise InvalidWriteError(f"{where} {opt.key}={v!r}: expected one of {', '.join(opt.choices)}")


def markdown_table() -> str:
    rows = ["| key | type | default | meaning |", "|---|---|---|---|"]
    for o in OPTIONS:
        t = o.type if o.type != "choice" else " / ".join(o.choices)
        rows.append(f"| `{o.key}` | {t} | {o.default} | {o.doc} |")
    return "\n".join(rows) + "\n"


BEGIN, END = "<!-- options:begin (generated by scripts/options_doc.py) -->", "<!-- options:end -->"


def render_doc(text: str) -> str:
    """`text` (docs/options.md) with its generated table replaced by the current declarations."""
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{BEGIN}\n{markdown_table()}{END}{tail}"

