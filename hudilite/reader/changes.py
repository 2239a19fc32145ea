"""Change reads: what changed in a table between two points of its timeline, in COMPLETION order.

A range `(begin, end]` holds the write instants whose completion time lies in it, so an instant that was
requested before `begin` but completed after it belongs to the range (a concurrent writer's commit is never
skipped). Completion times come from the layout-2 file names (v8/v9), from hudilite's commit metadata
(`hudilite.completion.time`) on v6 tables, else they are the instant times (foreign v6 tables).

Bounds: the timestamp of a completed write instant stands for "that instant's completion"; other values are
completion times on v8/v9 tables (Hudi 1.x semantics) and, on v6 tables, positions in instant-time order (the
completion of the newest instant requested at or before the value: what hudi-rs reads). Callers holding a
completion time (dbt checkpoints) pass `completion_bounds=True`.

`changes()` returns the latest image of every record changed in the range with a `_change_op` column
('I' inserted, 'U' updated, 'D' deleted; 'B' = the before image of an updated record when asked for). A
copy-on-write table stores no deletes: they are derived per touched file group as the keys present in the
snapshot as of `begin` and absent at `end`. Before images are the rows as of `begin`.

A range whose file slices were cleaned away, or that starts before the oldest instant still on the active
timeline after archival, raises `RangeUnavailableError` (never partial data).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from hudilite.change_images import BEFORE, CHANGE_OP, DELETE, INSERT, UPDATE  # noqa: F401 - the op values
from hudilite.config import table_id_created
from hudilite.errors import InvalidWriteError, RangeUnavailableError, TableReplacedError, UnsupportedTableError
from hudilite.file_group import FileSlice
from hudilite.table import HoodieTable
from hudilite.timeline import REPLACE_COMMIT
from hudilite.timeline.instant_time import normalize_instant_arg

_EPOCH = "00000000000000000"


def _bound(value) -> str:
    try:
        return normalize_instant_arg(value)
    except ValueError as e:
        raise InvalidWriteError(str(e)) from None


@dataclass
class ChangeRange:
    """A resolved `(begin, end]` range in completion order."""

    table: HoodieTable
    begin: str | None  # completion position (exclusive); None = from the beginning of the table
    end: str  # completion position (inclusive)
    completion: dict[str, str]  # completed write instant time -> completion time
    in_range: list = field(default_factory=list)  # Instants, in completion order

    def visible(self, pos: str | None) -> frozenset:
        """Completed write instants whose completion is at or before `pos`."""
        if pos is None:
            return frozenset()
        return frozenset(t for t, c in self.completion.items() if c <= pos)

    @property
    def instant_times(self) -> list[str]:
        return [i.timestamp for i in self.in_range]


def completion_map(table: HoodieTable) -> dict[str, str]:
    tl = table.timeline
    return {i.timestamp: tl.completion_time(i) for i in tl.completed()}


def latest_position(path_or_table) -> str | None:
    """The completion time of the newest completed write of the table (None: no commits). A range ending
    here covers everything committed now; later commits complete after it."""
    table = path_or_table if isinstance(path_or_table, HoodieTable) else HoodieTable.open(path_or_table)
    # archived completions count too: the position never moves backwards when archival runs
    return max(list(completion_map(table).values()) + list(table.timeline.archived.completion_times.values()),
               default=None)


def checkpoint(path_or_table) -> tuple[str | None, str | None]:
    """(latest_position, table id) of ONE table: what a consumer records to continue from later. Both come
    from the same table even if the directory is swapped meanwhile (a rebuild): the id is read again after
    the position and the pair retaken when it changed."""
    table = path_or_table if isinstance(path_or_table, HoodieTable) else HoodieTable.open(path_or_table)
    for _ in range(3):
        pos = latest_position(table)
        again = HoodieTable.open(table.base_path)
        if again.config.table_id == table.config.table_id:
            return pos, table.config.table_id
        table = again
    raise TableReplacedError(f"{table.base_path}: the table was replaced three times while reading its position")


def same_table(recorded_id: str | None, position: str | None, current_id: str | None) -> bool:
    """Whether a checkpoint (`position` taken on the table whose id was `recorded_id`) continues on the table
    whose id is now `current_id`. A checkpoint without a recorded id (written before identities existed, or
    taken on a table without one) matches a table without an id (nothing to tell them apart: the old
    behaviour), and a table with an id only if that table was created at or before the position: a position
    is a completion time of the table it was taken on, so a table created after it is a rebuild. (Positions
    and creation times are both UTC milliseconds of hudilite clocks; a rebuild that completes long before the
    old checkpoint's commit cannot be told apart, see docs/incremental.md.)"""
    if recorded_id == current_id:
        return True
    if recorded_id is not None:
        return False
    created = table_id_created(current_id)
    return created is None or position is None or created <= position


def _position(table: HoodieTable, cmap: dict[str, str], value, completion_bounds: bool) -> str:
    v = _bound(value)
    if completion_bounds:
        return v
    if v in cmap:
        return cmap[v]
    if table.config.layout_version >= 2:
        return v  # v8/v9: bounds that are not instants are completion times
    floor = max((t for t in cmap if t <= v), default=None)
    return cmap[floor] if floor is not None else v


def resolve_range(table: HoodieTable, begin=None, end=None, *, completion_bounds: bool = False) -> ChangeRange:
    cmap = completion_map(table)
    b = _position(table, cmap, begin, completion_bounds) if begin is not None else None
    if end is not None:
        e = _position(table, cmap, end, completion_bounds)
    else:
        e = max(cmap.values(), default=b or _EPOCH)
    tl = table.timeline
    lo = b if b is not None else ""
    in_range = sorted((i for i in tl.completed() if lo < cmap[i.timestamp] <= e),
                      key=lambda i: (cmap[i.timestamp], i.timestamp))
    rng = ChangeRange(table, b, e, cmap, in_range)
    _check_not_archived(rng)
    return rng


def _archived(table: HoodieTable) -> bool:
    """Whether instants were archived off the active timeline (archive files exist)."""
    meta = table.meta_path
    for d in (os.path.join(meta, table.config.archive_folder),
              os.path.join(meta, "timeline", "history")):
        try:
            for e in os.scandir(d):
                if e.is_file() and not e.name.endswith(".crc"):
                    return True
        except (FileNotFoundError, NotADirectoryError):
            continue
    return False


def _check_not_archived(rng: ChangeRange) -> None:
    if rng.begin is None:
        return
    # an archived write that completed after `begin` belongs to the range, but its detail left the timeline
    arch = rng.table.timeline.archived
    late = [t for t, c in arch.completion_times.items() if c > rng.begin and t not in arch.service_times]
    if late:
        raise RangeUnavailableError(
            f"{rng.table.base_path}: the change range starts at {rng.begin}, but the archived write instant "
            f"{min(late)} completed after it; archived instants cannot be read as changes. Rebuild the consumer "
            "from the current snapshot (dbt: run the model with --full-refresh).")
    if not rng.completion:
        return
    oldest = min(rng.completion.values())
    if rng.begin < oldest and _archived(rng.table):
        raise RangeUnavailableError(
            f"{rng.table.base_path}: the change range starts at {rng.begin}, before the oldest instant still on "
            f"the active timeline (completed {oldest}); older instants were archived and their file slices may be "
            "cleaned, so the changes cannot be read completely. Rebuild the consumer from the current snapshot "
            "(dbt: run the model with --full-refresh).")


def _unavailable(rng: ChangeRange, what: str) -> RangeUnavailableError:
    return RangeUnavailableError(
        f"{rng.table.base_path}: the change range ({rng.begin}, {rng.end}] needs {what}, which no longer exists "
        "(cleaned away); the changes cannot be read completely. Rebuild the consumer from the current snapshot "
        "(dbt: run the model with --full-refresh).")


# ---- file slices as of a completion position ------------------------------------------------------------
def _replaced_upto(rng: ChangeRange, pos: str | None) -> set[tuple[str, str]]:
    tl = rng.table.timeline
    out: set[tuple[str, str]] = set()
    if pos is None:
        return out
    for inst in tl.completed((REPLACE_COMMIT,)):
        if rng.completion.get(inst.timestamp, inst.timestamp) > pos:
            continue
        for part, fids in (tl.read_metadata(inst).get("partitionToReplaceFileIds") or {}).items():
            for fid in fids or []:
                out.add((part or "", fid))
    return out


def slice_at(table: HoodieTable, fg, visible: frozenset) -> FileSlice | None:
    """The latest slice of file group `fg` whose base instant completed within `visible` (or was archived)."""
    tl = table.timeline
    first = tl.first_write_time
    keys = sorted(k for k in fg.slices
                  if k in visible or (first is not None and k < first and k not in tl.all_times))
    for k in reversed(keys):
        sl = fg.slices[k]
        if sl.base_file is not None or sl.log_files:
            # a compaction that completed after this position was pending at it: the logs of its slice (written
            # after it was scheduled) were read with this slice then (services/compaction.py)
            later = [lf for k2 in sorted(fg.slices) if k2 > k and k2 not in visible for lf in fg.slices[k2].log_files]
            if later:
                sl = FileSlice(sl.partition, sl.file_id, sl.base_instant, sl.base_file, list(sl.log_files) + later)
            return sl
    return None


def slices_at(table: HoodieTable, groups, visible: frozenset, replaced: set | None = None, view=None,
              partitions=None) -> dict[tuple[str, str], FileSlice]:
    """(partition, fileId) -> slice as of the completion position whose instants are `visible`; `groups` None
    means every file group (of `partitions`, default all). Replaced groups are left out."""
    view = view or table.view()
    replaced = replaced or set()
    if groups is None:
        parts = table.partitions() if partitions is None else partitions
        wanted = None
    else:
        parts = sorted({p for p, _ in groups})
        wanted = set(groups)
    out: dict[tuple[str, str], FileSlice] = {}
    for part in parts:
        for fid, fg in sorted(view.file_groups(part).items()):
            if (wanted is not None and (part, fid) not in wanted) or (part, fid) in replaced:
                continue
            sl = slice_at(table, fg, visible)
            if sl is not None:
                out[(part, fid)] = sl
    return out


def snapshot_plan(table: HoodieTable, pos: str | None, filters=None, rng: ChangeRange | None = None):
    """A ReadPlan of the table as of completion position `pos` (instants completed at or before it)."""
    from hudilite.reader.planner import ReadPlan, prune_partitions, table_schema

    rng = rng or ChangeRange(table, None, pos or _EPOCH, completion_map(table))
    schema = table_schema(table)
    visible = rng.visible(pos)
    filters = list(filters or [])
    parts = prune_partitions(table, schema, table.partitions(), filters)
    sl = slices_at(table, None, visible, _replaced_upto(rng, pos), partitions=parts)
    return ReadPlan(table, schema, [s for _, s in sorted(sl.items())], "snapshot", filters=filters,
                    visible=visible)


# ---- what the range touched -----------------------------------------------------------------------------
@dataclass
class _Touched:
    groups: set  # (partition, fileId) written in range
    replaced: set  # replaced by replacecommits in range
    last_path: dict  # group -> file name the last in-range write produced
    first_prev: dict  # group -> prevCommit of the first in-range write
    deletes: set  # groups whose in-range writes may have deleted records
    updates: set  # groups whose in-range writes may have updated records


def touched(rng: ChangeRange) -> _Touched:
    tl = rng.table.timeline
    t = _Touched(set(), set(), {}, {}, set(), set())
    for inst in rng.in_range:
        md = tl.read_metadata(inst)
        for part, stats in (md.get("partitionToWriteStats") or {}).items():
            for s in stats or []:
                fid = s.get("fileId")
                if not fid:
                    continue
                g = (part or "", fid)
                t.groups.add(g)
                if s.get("path"):
                    t.last_path[g] = os.path.basename(s["path"])
                if g not in t.first_prev:
                    t.first_prev[g] = s.get("prevCommit")
                if s.get("numDeletes") is None or int(s.get("numDeletes") or 0) > 0:
                    t.deletes.add(g)
                if s.get("numUpdateWrites") is None or int(s.get("numUpdateWrites") or 0) > 0:
                    t.updates.add(g)
        if inst.action == REPLACE_COMMIT:
            for part, fids in (md.get("partitionToReplaceFileIds") or {}).items():
                for fid in fids or []:
                    t.replaced.add((part or "", fid))
    return t


def check_after(rng: ChangeRange, t: _Touched, slices: dict) -> None:
    """Every group the range wrote (and that is not replaced by its end) is readable as the range left it."""
    for g, name in t.last_path.items():
        if g in t.replaced:
            continue
        sl = slices.get(g)
        if sl is None or name not in {os.path.basename(f) for f in sl.files}:
            raise _unavailable(rng, f"file {g[0] + '/' if g[0] else ''}{name} (written by the range)")


def check_before(rng: ChangeRange, t: _Touched, before: dict) -> None:
    """Every group the range changed is readable as it was at `begin`."""
    for g in sorted(t.groups | t.replaced):
        prev = t.first_prev.get(g)
        if g not in t.first_prev:  # replaced only: it existed before
            if g not in before:
                raise _unavailable(rng, f"the file slice of group {g[1]} as of the range's begin")
            continue
        if prev in (None, "", "null"):
            continue  # a new file group
        if rng.begin is not None and rng.completion.get(prev, prev) > rng.begin:
            continue  # based on a slice written inside the range (concurrent or MOR): nothing older needed
        sl = before.get(g)
        if sl is None or sl.base_instant != prev:
            raise _unavailable(rng, f"the file slice {prev} of group {g[1]} (the state as of the range's begin)")


# ---- the change read ------------------------------------------------------------------------------------
def changes(spark, path, begin=None, end=None, *, include_deletes: bool = True, before_image: bool = False,
            filters=None, completion_bounds: bool = False, columns=None, table_id: str | None = None):
    """Latest image of every record changed in `(begin, end]` (completion order) plus `_change_op`:
    'I' / 'U' / 'D' (deleted: the row as of `begin`), and with `before_image` also 'B' rows (updated records as
    of `begin`). `begin=None`: the whole snapshot as of `end`, every row 'I'. `columns`: only these columns of
    the table (plus `_change_op`; filter columns must be among them); None: all. `table_id`: the id of the
    table `begin` was taken on (see `checkpoint`); another table at `path` raises TableReplacedError."""
    from pyspark.sql import functions as F

    from hudilite.reader.planner import table_schema
    from hudilite.reader.spark_read import plan_to_dataframe

    table = path if isinstance(path, HoodieTable) else HoodieTable.open(path)
    check_table(table, begin, table_id)
    if columns is not None:
        columns = _columns(table_schema(table), columns, filters)
    rng = resolve_range(table, begin, end, completion_bounds=completion_bounds)
    if rng.begin is None:
        df = plan_to_dataframe(spark, snapshot_plan(table, rng.end, filters, rng=rng))
        if columns is not None:
            df = df.select(*[F.col(f"`{c}`") for c in columns])
        return df.withColumn(CHANGE_OP, F.lit(INSERT))
    if not table.config.populate_meta_fields:
        raise UnsupportedTableError(f"{table.base_path}: change reads need record keys (the table does not "
                                    "populate meta fields)")
    imaged = _imaged(table, rng)
    if imaged is not None:
        return _image_changes(spark, table, imaged, filters, include_deletes, before_image, columns)
    t = touched(rng)
    view = table.view()
    after = slices_at(table, t.groups, rng.visible(rng.end), _replaced_upto(rng, rng.end), view=view)
    check_after(rng, t, after)
    before = slices_at(table, t.groups | t.replaced, rng.visible(rng.begin), _replaced_upto(rng, rng.begin),
                       view=view)
    check_before(rng, t, before)
    return _group_changes(spark, table, rng, t, after, before, filters, include_deletes, before_image, columns)


def check_table(table: HoodieTable, begin, table_id: str | None) -> None:
    """Raise TableReplacedError when a `begin` taken on the table `table_id` is read on another table."""
    if table_id is not None and begin is not None and table.config.table_id != table_id:
        raise TableReplacedError(
            f"{table.base_path} is not the table the position {begin} was taken on (table id {table_id}, now "
            f"{table.config.table_id or 'none'}): it was rebuilt or recreated, so no range continues from that "
            "position. Rebuild the consumer from the current snapshot (begin=None; dbt: --full-refresh)")


LOCAL_MAX_BYTES = 256 * 1024 * 1024  # change images read in this process at most (larger: a Spark read)
LOCAL_SNAPSHOT_MAX_BYTES = 1024 * 1024 * 1024  # snapshot files a driver-local read may cover (larger: Spark)


def local_changes(path, begin, end=None, *, include_deletes: bool = True, before_image: bool = False,
                  completion_bounds: bool = False, columns=None, max_bytes: int = LOCAL_MAX_BYTES,
                  table_id: str | None = None):
    """`changes()` of `(begin, end]` as an Arrow table read in this process, without Spark, when the range is
    served by change images (one copy-on-write commit that wrote them, or no commit) of at most `max_bytes`;
    None otherwise (use `changes()`). Same rows, columns and errors as `changes()`."""
    import pyarrow.compute as pc

    from hudilite.reader.planner import table_schema

    table = path if isinstance(path, HoodieTable) else HoodieTable.open(path)
    check_table(table, begin, table_id)
    schema = table_schema(table)
    names = list(_columns(schema, columns, None) if columns is not None else schema.names)
    out_schema = pa.schema([schema.field(c) for c in names] + [pa.field(CHANGE_OP, pa.string(), True)])
    rng = resolve_range(table, begin, end, completion_bounds=completion_bounds)
    if rng.begin is None:
        return None
    if not table.config.populate_meta_fields:
        raise UnsupportedTableError(f"{table.base_path}: change reads need record keys (the table does not "
                                    "populate meta fields)")
    if not rng.in_range:
        return out_schema.empty_table()
    imaged = _imaged(table, rng)
    if imaged is None:
        return None
    images, inserted = imaged
    if sum(table.fs.size(p) for p in images + inserted) > max_bytes:
        return None
    ops = [INSERT, UPDATE] + ([DELETE] if include_deletes else []) + ([BEFORE] if before_image else [])
    parts = []
    for t in _read_conformed(images, pa.schema(list(out_schema))):
        parts.append(t.filter(pc.is_in(t.column(CHANGE_OP), value_set=pa.array(ops, pa.string()))))
    for t in _read_conformed(inserted, pa.schema([out_schema.field(c) for c in names])):
        parts.append(t.append_column(out_schema.field(CHANGE_OP), pa.repeat(pa.scalar(INSERT, pa.string()),
                                                                            t.num_rows)))
    return pa.concat_tables(parts) if parts else out_schema.empty_table()


def _read_conformed(files: list[str], schema: pa.Schema, dictionary: tuple = ()) -> list[pa.Table]:
    """The `schema` columns of each parquet file, read in parallel; files written before a later schema change
    are conformed to the table's schema (added columns as nulls, widened types). `dictionary`: string columns
    read dictionary-encoded (their type in `schema` is then dictionary<int32, string>)."""
    from concurrent.futures import ThreadPoolExecutor

    import pyarrow.parquet as pq

    from hudilite.schema import cast_table_to_schema

    def read(f):
        pf = pq.ParquetFile(f)
        encoded = [c for c in dictionary if c in pf.schema_arrow.names]
        if encoded:
            pf = pq.ParquetFile(f, read_dictionary=encoded)
        t = pf.read(columns=[c for c in schema.names if c in pf.schema_arrow.names], use_threads=len(files) == 1)
        return cast_table_to_schema(t, schema)

    if len(files) <= 1:
        return [read(f) for f in files]
    with ThreadPoolExecutor(max_workers=min(len(files), os.cpu_count() or 2)) as pool:
        return list(pool.map(read, files))


def local_snapshot(path, pos: str | None, columns: list[str], max_bytes: int | None = None,
                   dictionary: tuple = ()) -> pa.Table | None:
    """The `columns` of the table as of completion position `pos` (None: the latest), read into Arrow in this
    process; None when the snapshot has merge-on-read slices with log files to merge or its files exceed
    `max_bytes` (read it with Spark). Same rows as a Spark snapshot read of the same position. `dictionary`:
    string columns returned dictionary-encoded (cheaper to read, filter and group by)."""
    from hudilite.reader.planner import table_schema

    table = path if isinstance(path, HoodieTable) else HoodieTable.open(path)
    schema = table_schema(table)
    fields = [schema.field(c) for c in _columns(schema, columns, None)]
    dictionary = tuple(f.name for f in fields if f.name in set(dictionary) and pa.types.is_string(f.type))
    want = pa.schema([f.with_type(pa.dictionary(pa.int32(), f.type)) if f.name in dictionary else f
                      for f in fields])
    plan = snapshot_plan(table, pos if pos is not None else latest_position(table))
    if plan.merged_slices:
        return None
    files = plan.plain_files
    if max_bytes is not None and sum(table.fs.size(f) for f in files) > max_bytes:
        return None
    parts = _read_conformed(files, want, dictionary)
    return pa.concat_tables(parts).unify_dictionaries() if parts else want.empty_table()


def _imaged(table: HoodieTable, rng: ChangeRange) -> tuple[list[str], list[str]] | None:
    """The change images of the range when it is exactly one commit that wrote them (hudilite.change_images)."""
    from hudilite import change_images
    from hudilite.timeline import COMMIT

    if len(rng.in_range) != 1 or rng.in_range[0].action != COMMIT:
        return None
    inst = rng.in_range[0]
    return change_images.files_of(table, inst.timestamp, table.timeline.read_metadata(inst))


def _image_changes(spark, table: HoodieTable, imaged, filters, include_deletes: bool, before_image: bool,
                   columns: tuple | None):
    """The change rows of one commit from its change images: a native scan of the image files (and of the
    base files of the groups it created: inserts), only the requested operations and columns."""
    from pyspark.sql import functions as F

    from hudilite.reader.planner import table_schema
    from hudilite.reader.spark_read import apply_filters, read_parquet_files
    from hudilite.schema import arrow_to_spark

    images, inserted = imaged
    schema = table_schema(table)
    cols = [F.col(f"`{c}`") for c in (columns or schema.names)]
    spark_schema = arrow_to_spark(schema)
    with_op = arrow_to_spark(schema.append(pa.field(CHANGE_OP, pa.string(), True)))
    ops = [INSERT, UPDATE] + ([DELETE] if include_deletes else []) + ([BEFORE] if before_image else [])
    parts = []
    if images:
        d = read_parquet_files(spark, with_op, images)
        parts.append(d.filter(F.col(CHANGE_OP).isin(ops)).select(*cols, F.col(CHANGE_OP)))
    if inserted:
        parts.append(read_parquet_files(spark, spark_schema, inserted).select(*cols, F.lit(INSERT).alias(CHANGE_OP)))
    if not parts:
        return spark.createDataFrame([], with_op).select(*cols, F.col(CHANGE_OP))
    df = parts[0] if len(parts) == 1 else parts[0].unionByName(parts[1])
    return apply_filters(df, filters or [])


def _columns(schema, columns, filters) -> tuple:
    """`columns` in table order, checked against the table schema (filter columns are needed too)."""
    wanted = list(columns)
    unknown = [c for c in wanted if c not in schema.names]
    if unknown:
        raise InvalidWriteError(f"changes(columns=...): no such column(s) {unknown} (table columns: {schema.names})")
    missing = sorted({f[0] for f in (filters or [])} - set(wanted))
    if missing:
        raise InvalidWriteError(f"changes(columns=...): the filter column(s) {missing} must be among the columns")
    return tuple(c for c in schema.names if c in set(wanted))


def _group_changes(spark, table, rng: ChangeRange, t: _Touched, after: dict, before: dict, filters,
                   include_deletes: bool, before_image: bool, columns: tuple | None):
    """The change rows of the touched file groups, computed per group in Spark tasks (one per group) by
    `hudilite.reader.group_changes`: a first job classifies the record keys (small results, collected), the
    driver resolves keys that moved between groups, the returned DataFrame reads the full rows of the picks."""
    from hudilite.reader.group_changes import CANDIDATES, ChangeContext, GroupTask, classify, images, resolve
    from hudilite.reader.merge import SliceDesc, to_spark_arrow
    from hudilite.reader.planner import ReadPlan, _check_readable, prune_partitions, table_schema
    from hudilite.reader.spark_read import apply_filters
    from hudilite.schema import arrow_to_spark

    schema = table_schema(table)
    filters = list(filters or [])
    keep = set(prune_partitions(table, schema, sorted({p for p, _ in after} | {p for p, _ in before}), filters))
    _check_readable(table, [s for g, s in list(after.items()) + list(before.items()) if g[0] in keep])
    out = schema if columns is None else pa.schema([schema.field(c) for c in columns])
    out_arrow = to_spark_arrow(out).append(pa.field(CHANGE_OP, pa.string(), True))
    out_spark = arrow_to_spark(out).add(CHANGE_OP, "string", True)
    times = tuple(rng.instant_times)
    vis_b, vis_e = rng.visible(rng.begin), rng.visible(rng.end)
    # a replaced group's keys may live on in other groups of its partition (clustering keeps commit times)
    replaced_parts = {g[0] for g in t.replaced if g in before}
    maybe_before = t.updates | t.deletes | t.replaced
    tasks = []
    for g in sorted((t.groups | t.replaced) & (set(after) | set(before))):
        if g[0] not in keep:
            continue
        a = after.get(g)
        b = before.get(g) if (g in maybe_before or a is None) else None
        if a is None and b is None:
            continue
        tasks.append(GroupTask(len(tasks), g[0], g[1], SliceDesc.of(a) if a else None, SliceDesc.of(b) if b else None,
                               deletes=g in (t.deletes | t.replaced), present=a is not None and g[0] in replaced_parts))
    if not tasks or not times:
        return spark.createDataFrame([], out_spark)
    ctx = ChangeContext(times, ReadPlan(table, schema, [], "snapshot", visible=vis_e).merge_spec(),
                        ReadPlan(table, schema, [], "snapshot", visible=vis_b).merge_spec(), before_image, columns)

    def classify_task(batches):
        for batch in batches:
            for d in batch.column(0).to_pylist():
                yield from classify(GroupTask.from_json(d), ctx).to_batches()

    cands = _task_frame(spark, [(x.to_json(),) for x in tasks]).mapInArrow(
        classify_task, arrow_to_spark(CANDIDATES)).toArrow()
    picks = resolve(cands.cast(CANDIDATES), [x.partition for x in tasks], include_deletes=include_deletes,
                    before_image=before_image, by_key=_global_writes(table, rng))
    picks = picks.sort_by("grp")
    grp = picks.column("grp").to_numpy()
    bounds = np.searchsorted(grp, np.arange(len(tasks) + 1))  # picks of task i: rows bounds[i]:bounds[i + 1]
    work = [(x.to_json(), _ipc(picks.slice(bounds[i], bounds[i + 1] - bounds[i]).select(["kind", "pos"])))
            for i, x in enumerate(tasks) if bounds[i + 1] > bounds[i]]
    if not work:
        return spark.createDataFrame([], out_spark)

    def image_task(batches):
        for batch in batches:
            for d, blob in zip(batch.column(0).to_pylist(), batch.column(1).to_pylist()):
                yield from images(GroupTask.from_json(d), ctx, _from_ipc(blob), out_arrow).to_batches(
                    max_chunksize=65536)

    df = _task_frame(spark, work).mapInArrow(image_task, out_spark)
    return apply_filters(df, filters)


def _global_writes(table: HoodieTable, rng: ChangeRange) -> bool:
    """Whether a write in the range used a global index (its commit metadata names it,
    hudilite/index/global_index.py): then a key deleted in one partition and written in another moved."""
    from hudilite.index.global_index import META_KEY

    tl = table.timeline
    for inst in rng.in_range:
        md = tl.read_metadata(inst) or {}
        if (md.get("extraMetadata") or {}).get(META_KEY):
            return True
    return False


def _task_frame(spark, rows: list):
    """A DataFrame with one input partition (task) per row: (task json[, arrow ipc bytes])."""
    from pyspark.sql.types import BinaryType, StringType, StructField, StructType

    fields = [StructField("task", StringType(), False)]
    if len(rows[0]) > 1:
        fields.append(StructField("picks", BinaryType(), False))
    rdd = spark.sparkContext.parallelize(rows, len(rows))
    return spark.createDataFrame(rdd, StructType(fields))


def _ipc(table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    return sink.getvalue().to_pybytes()


def _from_ipc(blob: bytes):
    return pa.ipc.open_stream(pa.py_buffer(blob)).read_all()


def check_incremental(rng: ChangeRange, slices: dict, t: _Touched | None = None) -> None:
    """For plain incremental reads: the files the range wrote are still there."""
    check_after(rng, t or touched(rng), slices)
