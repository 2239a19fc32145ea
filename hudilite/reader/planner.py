"""Query planning: which file slices (and which commit times) a snapshot / time travel / incremental read
needs. Engine-independent: the Spark reader, the Python data source and tests all use it."""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass, field

import pyarrow as pa

from hudilite.errors import InvalidWriteError, UnsupportedTableError
from hudilite.file_group import FileSlice
from hudilite.keygen import KeySpec, partition_values
from hudilite.schema import SchemaError, avro_to_arrow, with_meta_fields_arrow
from hudilite.table import HoodieTable
from hudilite.timeline import REPLACE_COMMIT
from hudilite.timeline.instant_time import normalize_instant_arg

_OPS = {"=", "==", "!=", "<", "<=", ">", ">=", "in", "not in"}


@dataclass
class ReadPlan:
    table: HoodieTable
    schema: pa.Schema  # with meta fields
    slices: list[FileSlice]
    query: str  # snapshot | incremental
    as_of: str | None = None
    commit_times: list[str] | None = None  # incremental: keep rows whose _hoodie_commit_time is one of these (None: no filter)
    begin: str | None = None
    end: str | None = None
    filters: list[tuple] = field(default_factory=list)

    @property
    def base_files(self) -> list[str]:
        return [s.base_file.path for s in self.slices if s.base_file is not None]


def table_schema(table: HoodieTable) -> pa.Schema:
    """Read schema: the latest commit's schema with the 5 meta fields, else the create schema, else the
    footer of a base file."""
    avro = table.timeline.schema_json() or table.config.create_schema
    if avro:
        try:
            return with_meta_fields_arrow(avro_to_arrow(avro))
        except SchemaError:
            pass
    import pyarrow.parquet as pq

    for inst in reversed(table.timeline.completed()):
        for stats in (table.timeline.read_metadata(inst).get("partitionToWriteStats") or {}).values():
            for s in stats:
                p = s.get("path") or s.get("baseFile")
                if p and p.endswith(".parquet"):
                    return pq.read_schema(f"{table.base_path}/{p}")
    return with_meta_fields_arrow(pa.schema([]))


def _typed(value: str, t: pa.DataType):
    try:
        if pa.types.is_integer(t):
            return int(value)
        if pa.types.is_floating(t):
            return float(value)
        if pa.types.is_date(t):
            return _dt.date.fromisoformat(value)
        if pa.types.is_boolean(t):
            return value.lower() == "true"
    except ValueError:
        return value
    return value


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
        vals = partition_values(spec, p)
        keep = True
        for c, op, v in pfilters:
            if c not in vals:
                continue
            t = schema.field(c).type if c in schema.names else pa.string()
            pv = _typed(vals[c], t)
            target = _typed(v, t) if isinstance(v, str) else v
            if isinstance(v, (list, tuple, set)):
                target = {_typed(str(x), t) if isinstance(x, str) else x for x in v}
            if not _matches(pv, op, target):
                keep = False
                break
        if keep:
            out.append(p)
    return out


def plan_read(path_or_table, *, as_of=None, begin=None, end=None, filters=None) -> ReadPlan:
    table = path_or_table if isinstance(path_or_table, HoodieTable) else HoodieTable.open(path_or_table)
    filters = list(filters or [])
    for f in filters:
        if len(f) != 3 or str(f[1]).lower() not in _OPS:
            raise InvalidWriteError(f"bad filter {f!r}: expected (column, op, value) with op in {sorted(_OPS)}")
    if as_of is not None and (begin is not None or end is not None):
        raise InvalidWriteError("as_of cannot be combined with begin/end (time travel vs incremental read)")
    tl = table.timeline
    schema = table_schema(table)
    if begin is not None or end is not None:
        return _plan_incremental(table, schema, begin, end, filters)
    completed = tl.completed()
    if as_of is not None:
        as_of = normalize_instant_arg(as_of)
    elif completed:
        as_of = completed[-1].timestamp
    if not completed or (as_of is not None and as_of < completed[0].timestamp):
        return ReadPlan(table, schema, [], "snapshot", as_of=as_of, filters=filters)
    partitions = prune_partitions(table, schema, table.partitions(), filters)
    slices = table.view().latest_slices(partitions, as_of)
    _check_readable(table, slices)
    return ReadPlan(table, schema, slices, "snapshot", as_of=as_of, filters=filters)


def _plan_incremental(table: HoodieTable, schema: pa.Schema, begin, end, filters) -> ReadPlan:
    tl = table.timeline
    begin = normalize_instant_arg(begin) if begin is not None else "19700101000000000"
    completed = tl.completed()
    end = normalize_instant_arg(end) if end is not None else (completed[-1].timestamp if completed else begin)
    by_completion = table.config.version >= 8

    def key(i):
        return tl.completion_time(i) if by_completion else i.timestamp

    in_range = [i for i in completed if begin < key(i) <= end]
    groups: set[tuple[str, str]] = set()
    replaced_in_range: set[tuple[str, str]] = set()
    for inst in in_range:
        md = tl.read_metadata(inst)
        for part, stats in (md.get("partitionToWriteStats") or {}).items():
            for s in stats or []:
                if s.get("fileId"):
                    groups.add((part or "", s["fileId"]))
        if inst.action == REPLACE_COMMIT:
            for part, fids in (md.get("partitionToReplaceFileIds") or {}).items():
                for fid in fids or []:
                    replaced_in_range.add((part or "", fid))
    groups -= replaced_in_range
    as_of = max((i.timestamp for i in in_range), default=None)
    slices: list[FileSlice] = []
    if groups and as_of:
        view = table.view()
        parts = prune_partitions(table, schema, sorted({p for p, _ in groups}), filters)
        for part in parts:
            fgs = view.file_groups(part)
            for (p, fid) in sorted(groups):
                if p != part or fid not in fgs:
                    continue
                sl = fgs[fid].latest_slice(as_of)
                if sl is not None:
                    slices.append(sl)
    _check_readable(table, slices)
    # Without populated meta fields _hoodie_commit_time is null: no commit-time row filter (as hudi-rs), the
    # planned slices of the in-range commits are read whole.
    commit_times = [i.timestamp for i in in_range] if table.config.populate_meta_fields else None
    return ReadPlan(table, schema, slices, "incremental", as_of=as_of,
                    commit_times=commit_times, begin=begin, end=end, filters=filters)


def _check_readable(table: HoodieTable, slices: list[FileSlice]) -> None:
    for sl in slices:
        if sl.log_files:
            raise UnsupportedTableError(
                f"{table.base_path}: file group {sl.file_id} has log files (merge-on-read); "
                "reading merge-on-read log files is not available yet")
