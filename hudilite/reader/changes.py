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

Deletes first: the change rows list every 'D' before the other rows. They are net changes of the range, so a
record with an 'I' or 'U' exists at `end` and one with a 'D' does not, whatever the order they happened in. A
consumer that keys the rows anew (a seed's rows, keyed by their row ids, upserted by a business key) and lets
the later row of a key win then ends with what the table holds at `end`: a business key whose old row went
and whose new row came in the range (a re-seeded row) is kept, not deleted.

A range whose file slices were cleaned away raises `RangeUnavailableError` (never partial data); so does, on
version 6, one that starts before the oldest instant still on the active timeline after archival (v8/v9 ranges
read archived writes from the LSM history, docs/services.md).
"""

from __future__ import annotations

import os

import pyarrow as pa

from hudilite import change_images
from hudilite.change_images import BEFORE, CHANGE_OP, DELETE, INSERT, UPDATE  # noqa: F401 - the op values
from hudilite.config import table_id_created
from hudilite.errors import InvalidReadError, TableReplacedError, UnsupportedTableError
from hudilite.index.global_index import META_KEY
from hudilite.reader.planner import ReadPlan, prune_partitions, table_schema
from hudilite.reader.ranges import EPOCH, ChangeRange, completion_map, replaced_upto, resolve_range, slices_at
from hudilite.schema import cast_table_to_schema
from hudilite.storage import storage_for
from hudilite.table import HoodieTable
from hudilite.timeline import COMMIT


def latest_position(path_or_table) -> str | None:
    """The completion time of the newest completed write of the table (None: no commits). A range ending
    here covers everything committed now; later commits complete after it."""
    table = path_or_table if isinstance(path_or_table, HoodieTable) else HoodieTable.open(path_or_table)
    # archived completions count too (v6 too): the position never moves backwards when archival runs
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


def snapshot_plan(table: HoodieTable, pos: str | None, filters=None, rng: ChangeRange | None = None):
    """A ReadPlan of the table as of completion position `pos` (instants completed at or before it)."""
    rng = rng or ChangeRange(table, None, pos or EPOCH, completion_map(table))
    schema = table_schema(table)
    visible = rng.visible(pos)
    filters = list(filters or [])
    partitions, view = table.listed_view()
    parts = prune_partitions(table, schema, partitions, filters)
    sl = slices_at(table, None, visible, replaced_upto(rng, pos), view=view, partitions=parts)
    return ReadPlan(table, schema, [s for _, s in sorted(sl.items())], "snapshot", filters=filters,
                    visible=visible)


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
    table = path if isinstance(path, HoodieTable) else HoodieTable.open(path)
    check_table(table, begin, table_id)
    schema = table_schema(table)
    names = list(select_columns(schema, columns, None) if columns is not None else schema.names)
    out_schema = pa.schema([schema.field(c) for c in names] + [pa.field(CHANGE_OP, pa.string(), True)])
    rng = resolve_range(table, begin, end, completion_bounds=completion_bounds)
    if rng.begin is None:
        return None
    if not table.config.populate_meta_fields:
        raise UnsupportedTableError(f"{table.base_path}: change reads need record keys (the table does not "
                                    "populate meta fields)")
    if not rng.in_range:
        return out_schema.empty_table()
    imaged = image_files(table, rng)
    if imaged is None or image_bytes(table, imaged) > max_bytes:
        return None
    return image_rows(table, imaged, names, include_deletes=include_deletes, before_image=before_image)


def image_bytes(table: HoodieTable, imaged: tuple[list[str], list[str]]) -> int:
    """The size of the files that serve a range from change images (`image_files`)."""
    images, inserted = imaged
    return sum(table.fs.size(p) for p in images + inserted)


def image_rows(table: HoodieTable, imaged: tuple[list[str], list[str]], names, *, include_deletes: bool = True,
               before_image: bool = False) -> pa.Table:
    """The change rows of a range served by change images (`image_files`), read in this process: the columns
    `names` (in table order) plus `_change_op`, only the requested operations."""
    import pyarrow.compute as pc

    schema = table_schema(table)
    out_schema = pa.schema([schema.field(c) for c in names] + [pa.field(CHANGE_OP, pa.string(), True)])
    images, inserted = imaged
    ops = [INSERT, UPDATE] + ([DELETE] if include_deletes else []) + ([BEFORE] if before_image else [])
    gone, parts = [], []
    for t in _read_conformed(images, out_schema):
        t = t.filter(pc.is_in(t.column(CHANGE_OP), value_set=pa.array(ops, pa.string())))
        d = pc.equal(t.column(CHANGE_OP), DELETE)
        gone.append(t.filter(d))  # deletes first (module docstring)
        parts.append(t.filter(pc.invert(d)))
    parts = gone + parts
    for t in _read_conformed(inserted, pa.schema([out_schema.field(c) for c in names])):
        parts.append(t.append_column(out_schema.field(CHANGE_OP), pa.repeat(pa.scalar(INSERT, pa.string()),
                                                                            t.num_rows)))
    return pa.concat_tables(parts) if parts else out_schema.empty_table()


def _read_conformed(files: list[str], schema: pa.Schema, dictionary: tuple = (),
                    sizes: dict[str, int] | None = None) -> list[pa.Table]:
    """The `schema` columns of each parquet file, read in parallel; files written before a later schema change
    are conformed to the table's schema (added columns as nulls, widened types). `dictionary`: string columns
    read dictionary-encoded (their type in `schema` is then dictionary<int32, string>). `sizes`: the files'
    sizes where a listing gave them (object stores then ask for none)."""
    from concurrent.futures import ThreadPoolExecutor

    sizes = sizes or {}

    def read(f):
        fs = storage_for(f)
        pf = fs.parquet_file(f, size=sizes.get(f))
        encoded = [c for c in dictionary if c in pf.schema_arrow.names]
        if encoded:
            pf = fs.parquet_file(f, size=sizes.get(f), read_dictionary=encoded)
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
    table = path if isinstance(path, HoodieTable) else HoodieTable.open(path)
    schema = table_schema(table)
    fields = [schema.field(c) for c in select_columns(schema, columns, None)]
    dictionary = tuple(f.name for f in fields if f.name in set(dictionary) and pa.types.is_string(f.type))
    want = pa.schema([f.with_type(pa.dictionary(pa.int32(), f.type)) if f.name in dictionary else f
                      for f in fields])
    plan = snapshot_plan(table, pos if pos is not None else latest_position(table))
    if plan.merged_slices:
        return None
    files = plan.plain_files
    sizes = {s.base_file.path: s.base_file.size for s in plan.slices if s.base_file is not None and s.base_file.size}
    if max_bytes is not None and sum(sizes.get(f) or table.fs.size(f) for f in files) > max_bytes:
        return None
    parts = _read_conformed(files, want, dictionary, sizes)
    return pa.concat_tables(parts).unify_dictionaries() if parts else want.empty_table()


def image_files(table: HoodieTable, rng: ChangeRange) -> tuple[list[str], list[str]] | None:
    """The change images of the range when it is exactly one commit that wrote them (hudilite.change_images)."""
    if len(rng.in_range) != 1 or rng.in_range[0].action != COMMIT:
        return None
    inst = rng.in_range[0]
    return change_images.files_of(table, inst.timestamp, rng.metadata(inst))


def global_writes(table: HoodieTable, rng: ChangeRange) -> bool:
    """Whether a write in the range used a global index (its commit metadata names it,
    hudilite/index/global_index.py): then a key deleted in one partition and written in another moved."""
    for inst in rng.in_range:
        md = rng.metadata(inst) or {}
        if (md.get("extraMetadata") or {}).get(META_KEY):
            return True
    return False


def select_columns(schema, columns, filters) -> tuple:
    """`columns` in table order, checked against the table schema (filter columns are needed too)."""
    wanted = list(columns)
    unknown = [c for c in wanted if c not in schema.names]
    if unknown:
        raise InvalidReadError(f"changes(columns=...): no such column(s) {unknown} (table columns: {schema.names})")
    missing = sorted({f[0] for f in (filters or [])} - set(wanted))
    if missing:
        raise InvalidReadError(f"changes(columns=...): the filter column(s) {missing} must be among the columns")
    return tuple(c for c in schema.names if c in set(wanted))
