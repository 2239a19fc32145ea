"""Query planning: which file slices (and which commit times) a snapshot / time travel / incremental read
needs. Engine-independent: the Spark reader, the Python data source and tests all use it."""

from __future__ import annotations

import datetime as _dt
import decimal
import os
from dataclasses import dataclass, field

import pyarrow as pa

from hudilite.errors import InvalidReadError, RangeUnavailableError, UnsupportedTableError
from hudilite.file_group import FileSlice
from hudilite.keygen import DEFAULT_PARTITION, KeySpec, integer_key_column, partition_values
from hudilite.reader.merge import MergeSpec
from hudilite.reader.ranges import (
    archived as _archived,
)
from hudilite.reader.ranges import (
    check_incremental,
    history_in_ranges,
    resolve_range,
    slices_at,
    touched,
)
from hudilite.reader.ranges import (
    replaced_upto as _replaced_upto,
)
from hudilite.schema import SchemaError, avro_to_arrow, with_meta_fields_arrow
from hudilite.table import HoodieTable
from hudilite.timeline import COMPLETED
from hudilite.timeline.instant_time import normalize_instant_arg

_OPS = {"=", "==", "!=", "<", "<=", ">", ">=", "in", "not in"}


@dataclass
class ReadPlan:
    table: HoodieTable
    schema: pa.Schema  # with meta fields
    slices: list[FileSlice]
    query: str  # snapshot | incremental
    as_of: str | None = None
    # incremental: keep rows whose _hoodie_commit_time is one of these (None: no filter)
    commit_times: list[str] | None = None
    begin: str | None = None
    end: str | None = None
    filters: list[tuple] = field(default_factory=list)
    read_optimized: bool = False  # merge-on-read tables: base files only
    range_instants: list[str] | None = None  # incremental: the write instants in range (log blocks are kept by these)
    visible: frozenset | None = None  # completion-ordered plans: the write instants that count (log blocks too)

    @property
    def base_files(self) -> list[str]:
        """The base files that make up the read: only for plans without log files to merge (callers that read
        files directly, e.g. a parquet snapshot, cannot merge log files; see `plain_files`/`merged_slices`)."""
        if self.merged_slices:
            raise UnsupportedTableError(
                f"{self.table.base_path}: the read has merge-on-read file slices with log files; their base "
                "files alone are not the table's rows (use hudilite.read, or read_optimized=True)")
        return self.plain_files

    @property
    def plain_files(self) -> list[str]:
        """Base files of the slices that have no log files (read as they are)."""
        return [s.base_file.path for s in self.slices if s.base_file is not None and not s.log_files]

    @property
    def merged_slices(self) -> list[FileSlice]:
        """Slices with log files: base file and log blocks are merged (merge-on-read)."""
        return [s for s in self.slices if s.log_files]

    def merge_spec(self):
        """The MergeSpec for merging this plan's slices with log files."""
        tl = self.table.timeline
        cfg = self.table.config
        return MergeSpec(
            schema=self.schema, merge_mode=merge_mode(cfg), ordering_field=cfg.precombine_field,
            as_of=self.as_of if self.visible is None else None,
            # log-block validity against the whole timeline, archived instants included (services/archival.py)
            # (a v8/v9 `visible` holds the history's instants by completion: one archived after it is not visible)
            committed=tl.committed_times if self.visible is None else (
                frozenset(self.visible) if history_in_ranges(self.table)
                else frozenset(self.visible) | tl.archived.completed_write_times),
            known=tl.known_times,
            archived_before=tl.timeline_start,
            # keyed incremental reads merge every block up to the range's end and filter the merged rows
            # (`merge.in_row_range`); without record keys nothing merges: only the range's blocks are read
            block_range=frozenset(self.range_instants) if self.range_instants is not None
            and self.commit_times is None else None,
            row_range=frozenset(self.commit_times) if self.commit_times is not None else None,
            keyed=cfg.populate_meta_fields,
            int_key=_int_key(cfg, self.schema),
        )


def _int_key(cfg, schema: pa.Schema) -> str | None:
    """The record-key column when the table's keys are the decimal strings of one signed integer column (a
    simple, non-partitioned or complex key generator over that one field). Readers still check that the log
    records' keys are such strings before matching on the integers."""
    column = integer_key_column(cfg.record_key_fields, schema)
    kg = cfg.keygen.split(".")[-1].upper()
    return column if kg in ("", "SIMPLEKEYGENERATOR", "NONPARTITIONEDKEYGENERATOR", "COMPLEXKEYGENERATOR",
                               "SIMPLE", "NON_PARTITION", "COMPLEX") else None


_KNOWN_PAYLOADS = ("DefaultHoodieRecordPayload", "EventTimeAvroPayload", "OverwriteWithLatestAvroPayload")


def merge_mode(cfg) -> str:
    """EVENT_TIME_ORDERING, COMMIT_TIME_ORDERING or CUSTOM (v6: a payload class other than the event-time and
    overwrite-with-latest ones; v8+: hoodie.record.merge.mode=CUSTOM)."""
    mode = cfg.merge_mode
    payload = cfg.payload_class
    if cfg.version < 8 and payload and not payload.endswith(_KNOWN_PAYLOADS):
        return "CUSTOM"
    return mode


def table_schema(table: HoodieTable) -> pa.Schema:
    """Read schema: the latest commit's schema with the 5 meta fields, else the create schema, else the
    footer of a base file."""
    avro = table.timeline.schema_json() or table.config.create_schema
    if avro:
        try:
            return with_meta_fields_arrow(avro_to_arrow(avro))
        except SchemaError:
            pass

    for inst in reversed(table.timeline.completed()):
        for stats in (table.timeline.read_metadata(inst).get("partitionToWriteStats") or {}).values():
            for s in stats:
                p = s.get("path") or s.get("baseFile")
                if p and p.endswith(".parquet"):
                    return table.fs.parquet_schema(f"{table.base_path}/{p}")
    return with_meta_fields_arrow(pa.schema([]))


def _typed(value: str, t: pa.DataType):
    """A partition directory's value as a value of the column's type (as it came from Spark's cast to string:
    a timestamp with a time zone as its UTC wall clock); the string itself when it does not parse."""
    try:
        if pa.types.is_integer(t):
            return int(value)
        if pa.types.is_floating(t):
            return float(value)
        if pa.types.is_date(t):
            return _dt.date.fromisoformat(value)
        if pa.types.is_boolean(t):
            return value.lower() == "true"
        if pa.types.is_decimal(t):
            return decimal.Decimal(value)
        if pa.types.is_timestamp(t):
            stamp = _dt.datetime.fromisoformat(value)
            return stamp.replace(tzinfo=_dt.timezone.utc) if t.tz else stamp
    except (ValueError, decimal.InvalidOperation):
        return value
    return value


class _Unknown(Exception):
    """A filter operand whose comparison with a partition's value the planner cannot decide exactly."""


def _operand(v, t: pa.DataType):
    """A filter's operand as `_typed` values compare with it, as the row filter (`F.col(c) == v`) reads it."""
    if isinstance(v, str):
        if pa.types.is_timestamp(t) or pa.types.is_decimal(t):
            raise _Unknown  # Spark casts the string (a timestamp in the session's time zone)
        return _typed(v, t)
    if pa.types.is_decimal(t) and isinstance(v, float):
        raise _Unknown  # Spark compares the two as doubles: Decimal("1.1") != 1.1 in Python
    if pa.types.is_timestamp(t):
        if not isinstance(v, _dt.datetime):
            raise _Unknown
        if t.tz:  # PySpark takes a naive datetime in this process's local time, as astimezone does
            return v.astimezone(_dt.timezone.utc)
        if v.tzinfo is not None:
            raise _Unknown
    return v


def _matches(v, op: str, target) -> bool:
    if op in ("=", "=="):
        return v == target
    if op == "!=":
        return v != target
    if op == "in":
        return v in target
    if op == "not in":
        return v not in target
    try:
        return {"<": v < target, "<=": v <= target, ">": v > target, ">=": v >= target}[op]
    except TypeError:
        return True  # incomparable: keep (the row filter decides)


def _default_partition_may_match(t: pa.DataType, op: str, v) -> bool:
    """Whether rows of the default partition can pass the filter. Hudi's key generators put null AND empty
    partition values there (and a literal `__HIVE_DEFAULT_PARTITION__` lands there too), so the directory name
    does not tell the value: the rows' stored column decides. Nulls pass no comparison (SQL semantics of the
    row filter); of a string column, "" or the literal may pass; other types can hold only nulls there, except
    binary ("" cast to string), which is kept."""
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return True
    if not (pa.types.is_string(t) or pa.types.is_large_string(t)):
        return False
    for candidate in ("", DEFAULT_PARTITION):
        target = set(v) if isinstance(v, (list, tuple, set)) else v
        if _matches(candidate, op, target):
            return True
    return False


def prune_partitions(table: HoodieTable, schema: pa.Schema, partitions: list[str], filters) -> list[str]:
    cfg = table.config
    if not filters or not cfg.is_partitioned:
        return partitions
    spec = KeySpec(tuple(cfg.record_key_fields), tuple(cfg.partition_fields), cfg.hive_style)
    pfilters = [(c, op.lower(), v) for c, op, v in filters if c in cfg.partition_fields]
    if not pfilters:
        return partitions
    out = []
    for p in partitions:
        vals = partition_values(spec, p, cfg.url_encode)
        keep = True
        for c, op, v in pfilters:
            if c not in vals:
                continue
            t = schema.field(c).type if c in schema.names else pa.string()
            if vals[c] == DEFAULT_PARTITION:
                if not _default_partition_may_match(t, op, v):
                    keep = False
                    break
                continue
            if pa.types.is_timestamp(t) and t.tz and not cfg.timestamp_keys_utc:
                continue  # its directories hold the writing sessions' wall clocks, whatever zones they had
            pv = _typed(vals[c], t)
            if isinstance(pv, str) and not (pa.types.is_string(t) or pa.types.is_large_string(t)):
                continue  # a directory value that does not parse as the column's type: the row filter decides
            try:
                if isinstance(v, (list, tuple, set)):
                    target = {_operand(x, t) for x in v}
                else:
                    target = _operand(v, t)
            except _Unknown:
                continue  # kept: the row filter decides
            if not _matches(pv, op, target):
                keep = False
                break
        if keep:
            out.append(p)
    return out


def check_filters(filters, names) -> list:
    """`filters` (a list of (column, op, value) with op in _OPS; 'in' / 'not in' take a list, tuple or set) as a
    list, each column a column of the table (`names`; letter case as Spark SQL ignores it); InvalidReadError
    naming the first that is not."""
    if filters is None:
        return []
    if isinstance(filters, (str, bytes)) or not isinstance(filters, (list, tuple)):
        raise InvalidReadError(f"filters={filters!r}: expected a list of (column, op, value) tuples, e.g. "
                               "[('dt', '>=', '2024-01-01')]")
    lower = {n.lower() for n in names}
    for f in filters:
        if not isinstance(f, (list, tuple)) or len(f) != 3 or str(f[1]).lower() not in _OPS:
            raise InvalidReadError(f"bad filter {f!r}: expected (column, op, value) with op in {sorted(_OPS)}")
        col, op, value = f
        if not isinstance(col, str) or col.lower() not in lower:
            raise InvalidReadError(f"bad filter {tuple(f)!r}: {col!r} is not a column of the table (its columns: "
                                   f"{', '.join(names)})")
        if str(op).lower() in ("in", "not in") and not isinstance(value, (list, tuple, set, frozenset)):
            raise InvalidReadError(f"bad filter {tuple(f)!r}: {op!r} takes a list, tuple or set of values")
    return list(filters)


def plan_read(path_or_table, *, as_of=None, begin=None, end=None, filters=None, read_optimized=False,
              completion_bounds=False) -> ReadPlan:
    """Plan a snapshot (latest or `as_of`) or incremental `(begin, end]` read. `read_optimized`: merge-on-read
    tables are read from their base files only (log files ignored). `completion_bounds`: `begin`/`end` are
    completion times (positions from `hudilite.reader.changes.checkpoint`), not instant times."""
    table = path_or_table if isinstance(path_or_table, HoodieTable) else HoodieTable.open(path_or_table)
    if as_of is not None and (begin is not None or end is not None):
        raise InvalidReadError("as_of cannot be combined with begin/end (time travel vs incremental read)")
    tl = table.timeline
    schema = table_schema(table)
    filters = check_filters(filters, schema.names)
    if begin is not None or end is not None:
        return _finish(_plan_incremental(table, schema, begin, end, filters, completion_bounds), read_optimized)
    completed = tl.completed()
    travel = as_of is not None  # (a clean never removes the latest slices: the latest snapshot needs no check)
    if as_of is not None:
        try:
            as_of = normalize_instant_arg(as_of)
        except ValueError as e:
            raise InvalidReadError(f"as_of: {e}") from None
    elif completed:
        as_of = completed[-1].timestamp
    archived = as_of is not None and (not completed or as_of < completed[0].timestamp)
    if archived and _before_first_commit(table, as_of):
        # before the table's first commit the table had no rows (documented: an empty result, as hudi-rs)
        return ReadPlan(table, schema, [], "snapshot", as_of=as_of, filters=filters, read_optimized=read_optimized)
    partitions, view = table.listed_view()
    partitions = prune_partitions(table, schema, partitions, filters)
    slices = view.latest_slices(partitions, as_of)
    if travel:
        slices = view.travel_slices(slices, as_of)
    if archived or (travel and _cleaned_since(tl, as_of)):
        _check_as_of_files(table, as_of, slices, set(partitions), archived)
    return _finish(ReadPlan(table, schema, slices, "snapshot", as_of=as_of, filters=filters), read_optimized)


def _before_first_commit(table: HoodieTable, as_of: str) -> bool:
    """`as_of` is older than every write of the table, the archived ones included. Archive files that cannot
    be read say nothing about it: the read is refused then (`_check_as_of_files`)."""
    tl = table.timeline
    firsts = [t for t in (min(tl.archived.completed_write_times, default=None), tl.first_write_time) if t]
    if tl.archived.completed_write_times or not _archived(table):
        return not firsts or as_of < min(firsts)
    return False


def _cleaned_since(tl, as_of: str | None) -> bool:
    """A clean completed after `as_of` may have deleted files the table as of then consists of (Apache Hudi
    refuses time travel before the last clean's earliest retained commit; we check the files instead)."""
    return as_of is not None and any(i.timestamp > as_of for i in tl.completed(("clean",)))


def _unavailable_as_of(table: HoodieTable, as_of: str, what: str, archived: bool = True) -> RangeUnavailableError:
    kind = "an archived instant" if archived else "an instant older than a later clean"
    return RangeUnavailableError(
        f"{table.base_path}: time travel to {as_of} ({kind}) needs {what}; the table as of then "
        "cannot be read completely. Read a later instant instead.")


def _check_as_of_files(table: HoodieTable, as_of: str, slices: list[FileSlice], partitions: set,
                       archived: bool) -> None:
    """Time travel before the active timeline (`archived`) or before a clean: the slices planned from the files
    on disk are the table as of `as_of` only if every file group's newest file written at or before `as_of` (by
    the archived and active commit metadata) is in its planned slice; a cleaned file, or an archive without the
    commit metadata, raises RangeUnavailableError instead of returning fewer rows."""
    tl = table.timeline
    arch = tl.archived
    writes = []  # (instant time, commit metadata)
    if not arch.completed_write_times and (archived or _archived(table)):
        raise _unavailable_as_of(table, as_of, "the archived timeline, which cannot be read", archived)
    by_time = {}
    for e in arch.entries:
        if e.state == COMPLETED and e.timestamp in arch.completed_write_times and e.metadata is not None:
            by_time[e.timestamp] = e.metadata
    for t in sorted(arch.completed_write_times):
        if t > as_of:
            continue
        if t not in by_time:
            raise _unavailable_as_of(table, as_of, f"the commit metadata of archived instant {t}, which the "
                                                   "archive does not hold", archived)
        writes.append((t, by_time[t]))
    writes += [(i.timestamp, tl.read_metadata(i)) for i in tl.completed() if i.timestamp <= as_of]
    need: dict[tuple[str, str], set] = {}  # group -> its newest base file and the log files written after it
    for _t, md in sorted(writes, key=lambda x: x[0]):
        for part, stats in (md.get("partitionToWriteStats") or {}).items():
            for st in stats or []:
                if st.get("fileId") and st.get("path"):
                    name = st["path"].rsplit("/", 1)[-1]
                    g = (part or "", st["fileId"])
                    if name.startswith("."):  # a log file
                        need.setdefault(g, set()).add(name)
                    else:
                        need[g] = {name}
        for part, fids in (md.get("partitionToReplaceFileIds") or {}).items():
            for fid in fids or []:
                need.pop((part or "", fid), None)
    planned = {(s.partition, s.file_id): {os.path.basename(f) for f in s.files} for s in slices}
    for (part, fid), names in sorted(need.items()):
        gone = sorted(names - planned.get((part, fid), set())) if part in partitions else []
        if gone:
            raise _unavailable_as_of(table, as_of, f"file {part + '/' if part else ''}{gone[0]}, which was cleaned",
                                     archived)


def _finish(plan: ReadPlan, read_optimized: bool) -> ReadPlan:
    plan.read_optimized = bool(read_optimized)
    if plan.read_optimized:
        plan.slices = [FileSlice(s.partition, s.file_id, s.base_instant, s.base_file)
                       for s in plan.slices if s.base_file is not None]
    check_readable(plan.table, plan.slices)
    return plan


def _plan_incremental(table: HoodieTable, schema: pa.Schema, begin, end, filters,
                      completion_bounds: bool = False) -> ReadPlan:
    """The file groups the instants of the range wrote, as the range left them. The range is in completion
    order (`hudilite.reader.ranges.resolve_range`): an instant requested before `begin` that completed after
    it is in the range. Raises RangeUnavailableError when the range's files were cleaned away."""
    rng = resolve_range(table, begin, end, completion_bounds=completion_bounds)
    t = touched(rng)
    groups = t.groups - t.replaced
    visible = rng.visible(rng.end)
    found = slices_at(table, groups, visible, _replaced_upto(rng, rng.end)) if groups else {}
    check_incremental(rng, found, t)
    parts = set(prune_partitions(table, schema, sorted({p for p, _ in groups}), filters))
    slices = [sl for (p, _), sl in sorted(found.items()) if p in parts]
    in_range = rng.instant_times
    # Without populated meta fields _hoodie_commit_time is null: no commit-time row filter (as hudi-rs), the
    # planned slices of the in-range commits are read whole.
    commit_times = list(in_range) if table.config.populate_meta_fields else None
    return ReadPlan(table, schema, slices, "incremental", as_of=max(in_range, default=None),
                    commit_times=commit_times, begin=rng.begin or "19700101000000000", end=rng.end,
                    filters=filters, range_instants=list(in_range), visible=visible)


def check_readable(table: HoodieTable, slices: list[FileSlice]) -> None:
    if any(sl.log_files for sl in slices):
        mode = merge_mode(table.config)
        if mode not in ("EVENT_TIME_ORDERING", "COMMIT_TIME_ORDERING"):
            raise UnsupportedTableError(
                f"{table.base_path}: merge mode {mode} (payload "
                f"{table.config.payload_class or '-'}) needs a custom merger; "
                "merge-on-read log files can be merged with EVENT_TIME_ORDERING or COMMIT_TIME_ORDERING only "
                "(read_optimized=True reads the base files)")
