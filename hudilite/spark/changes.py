"""Change reads as Spark DataFrames (the queries of hudilite.reader.changes): the latest image of every record
changed in a range, from the change images copy-on-write merges wrote or per file group from the slices at both
ends of the range (`hudilite.reader.group_changes` run in Spark tasks).

A range served by change images of at most `LOCAL_FRAME_MAX_BYTES` is read in this process (pyarrow) and
handed to Spark as a local relation: no file listing or scan to plan, no Python workers (a dbt model's change
read is often a few rows, and under Spark Connect each of those steps is a round trip to the server)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from hudilite.change_images import BEFORE, CHANGE_OP, DELETE, INSERT, UPDATE
from hudilite.errors import UnsupportedTableError
from hudilite.reader.changes import (
    check_table,
    global_writes,
    image_bytes,
    image_files,
    image_rows,
    select_columns,
    snapshot_plan,
)
from hudilite.reader.group_changes import CANDIDATES, ChangeContext, GroupTask, classify, images, resolve
from hudilite.reader.merge import SliceDesc, to_spark_arrow
from hudilite.reader.planner import ReadPlan, check_filters, check_readable, prune_partitions, table_schema
from hudilite.reader.ranges import (
    ChangeRange,
    Touched,
    check_after,
    check_before,
    replaced_upto,
    resolve_range,
    slices_at,
    touched,
)
from hudilite.spark.files import read_parquet_files
from hudilite.spark.read import apply_filters, check_time_columns, plan_to_dataframe
from hudilite.spark.schema import arrow_frame, arrow_to_spark, to_jvm_arrow
from hudilite.spark.session import check_workers, task_frame
from hudilite.storage import capture_bindings, install_bindings
from hudilite.table import HoodieTable

LOCAL_FRAME_MAX_BYTES = 4 * 1024 * 1024  # change image files read in this process for a local relation, at most


# ---- the change read ------------------------------------------------------------------------------------
def changes(spark, path, begin=None, end=None, *, include_deletes: bool = True, before_image: bool = False,
            filters=None, completion_bounds: bool = False, columns=None, table_id: str | None = None,
            local_max_bytes: int = LOCAL_FRAME_MAX_BYTES):
    """Latest image of every record changed in `(begin, end]` (completion order) plus `_change_op`:
    'I' / 'U' / 'D' (deleted: the row as of `begin`), and with `before_image` also 'B' rows (updated records as
    of `begin`). `begin=None`: the whole snapshot as of `end`, every row 'I'. `columns`: only these columns of
    the table (plus `_change_op`; filter columns must be among them); None: all. `table_id`: the id of the
    table `begin` was taken on (see `checkpoint`); another table at `path` raises TableReplacedError.
    `local_max_bytes`: a range served by change images of at most this size is a local relation (0: a scan).
    The session's Python workers are checked (`check_workers`) before a frame that may run Python tasks."""
    from pyspark.sql import functions as F

    table = path if isinstance(path, HoodieTable) else HoodieTable.open(path)
    check_table(table, begin, table_id)
    filters = check_filters(filters, table_schema(table).names)
    if columns is not None:
        columns = select_columns(table_schema(table), columns, filters)
    # every way below may scan files natively or hand Arrow batches to Spark: one check, one message
    check_time_columns(spark, table_schema(table), columns, merged=False, table_read=False)
    rng = resolve_range(table, begin, end, completion_bounds=completion_bounds)
    if rng.begin is None:
        check_workers(spark)
        df = plan_to_dataframe(spark, snapshot_plan(table, rng.end, filters, rng=rng))
        if columns is not None:
            df = df.select(*[F.col(f"`{c}`") for c in columns])
        return df.withColumn(CHANGE_OP, F.lit(INSERT))
    if not table.config.populate_meta_fields:
        raise UnsupportedTableError(f"{table.base_path}: change reads need record keys (the table does not "
                                    "populate meta fields)")
    if not rng.in_range:  # nothing committed in the range: no file to read or check
        out = table_schema(table) if columns is None else pa.schema([table_schema(table).field(c) for c in columns])
        return spark.createDataFrame([], arrow_to_spark(out).add(CHANGE_OP, "string", True))
    imaged = image_files(table, rng)
    if imaged is not None:
        return _image_changes(spark, table, imaged, filters, include_deletes, before_image, columns,
                              local_max_bytes)
    check_workers(spark)
    t = touched(rng)
    view = table.view()
    after = slices_at(table, t.groups, rng.visible(rng.end), replaced_upto(rng, rng.end), view=view)
    check_after(rng, t, after)
    before = slices_at(table, t.groups | t.replaced, rng.visible(rng.begin), replaced_upto(rng, rng.begin),
                       view=view)
    check_before(rng, t, before)
    return _group_changes(spark, table, rng, t, after, before, filters, include_deletes, before_image, columns)

def _image_changes(spark, table: HoodieTable, imaged, filters, include_deletes: bool, before_image: bool,
                   columns: tuple | None, local_max_bytes: int = LOCAL_FRAME_MAX_BYTES):
    """The change rows of one commit from its change images: a native scan of the image files (and of the
    base files of the groups it created: inserts), only the requested operations and columns; up to
    `local_max_bytes` of files, read here into a local relation instead."""
    from pyspark.sql import functions as F

    if image_bytes(table, imaged) <= local_max_bytes:
        rows = image_rows(table, imaged, list(columns or table_schema(table).names),
                          include_deletes=include_deletes, before_image=before_image)
        return apply_filters(arrow_frame(spark, rows), filters or [])
    check_workers(spark)  # an object store without a JVM file system is scanned in Python tasks
    images, inserted = imaged
    schema = table_schema(table)
    cols = [F.col(f"`{c}`") for c in (columns or schema.names)]
    spark_schema = arrow_to_spark(schema)
    with_op = arrow_to_spark(schema.append(pa.field(CHANGE_OP, pa.string(), True)))
    ops = [INSERT, UPDATE] + ([DELETE] if include_deletes else []) + ([BEFORE] if before_image else [])
    parts = []
    if images:  # deletes first (hudilite.reader.changes): the image files scanned twice, they are small
        d = read_parquet_files(spark, with_op, images)
        if include_deletes:
            parts.append(d.filter(F.col(CHANGE_OP) == DELETE).select(*cols, F.col(CHANGE_OP)))
        kept = [op for op in ops if op != DELETE]
        parts.append(d.filter(F.col(CHANGE_OP).isin(kept)).select(*cols, F.col(CHANGE_OP)))
    if inserted:
        parts.append(read_parquet_files(spark, spark_schema, inserted).select(*cols, F.lit(INSERT).alias(CHANGE_OP)))
    if not parts:
        return spark.createDataFrame([], with_op).select(*cols, F.col(CHANGE_OP))
    df = parts[0]
    for part in parts[1:]:
        df = df.unionByName(part)
    return apply_filters(df, filters or [])


def _group_changes(spark, table, rng: ChangeRange, t: Touched, after: dict, before: dict, filters,
                   include_deletes: bool, before_image: bool, columns: tuple | None):
    """The change rows of the touched file groups, computed per group in Spark tasks (one per group) by
    `hudilite.reader.group_changes`: a first job classifies the record keys (small results, collected), the
    driver resolves keys that moved between groups, the returned DataFrame reads the full rows of the picks."""
    schema = table_schema(table)
    filters = list(filters or [])
    keep = set(prune_partitions(table, schema, sorted({p for p, _ in after} | {p for p, _ in before}), filters))
    check_readable(table, [s for g, s in list(after.items()) + list(before.items()) if g[0] in keep])
    out = schema if columns is None else pa.schema([schema.field(c) for c in columns])
    out_arrow = to_jvm_arrow(to_spark_arrow(out)).append(pa.field(CHANGE_OP, pa.string(), True))
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

    bindings = capture_bindings(table.base_path)

    def classify_task(batches):
        install_bindings(bindings)
        for batch in batches:
            for d in batch.column(0).to_pylist():
                yield from classify(GroupTask.from_json(d), ctx).to_batches()

    cands = _task_frame(spark, [(x.to_json(),) for x in tasks]).mapInArrow(
        classify_task, arrow_to_spark(CANDIDATES)).toArrow()
    picks = resolve(cands.cast(CANDIDATES), [x.partition for x in tasks], include_deletes=include_deletes,
                    before_image=before_image, by_key=global_writes(table, rng))
    picks = picks.sort_by("grp")
    gone = pc.equal(picks.column("kind"), DELETE)
    work = []
    for sub in (picks.filter(gone), picks.filter(pc.invert(gone))):  # deletes first (reader.changes)
        grp = sub.column("grp").to_numpy()
        bounds = np.searchsorted(grp, np.arange(len(tasks) + 1))  # picks of task i: rows bounds[i]:bounds[i + 1]
        work += [(x.to_json(), _ipc(sub.slice(bounds[i], bounds[i + 1] - bounds[i]).select(["kind", "pos"])))
                 for i, x in enumerate(tasks) if bounds[i + 1] > bounds[i]]
    if not work:
        return spark.createDataFrame([], out_spark)

    def image_task(batches):
        install_bindings(bindings)
        for batch in batches:
            for d, blob in zip(batch.column(0).to_pylist(), batch.column(1).to_pylist()):
                yield from images(GroupTask.from_json(d), ctx, _from_ipc(blob), out_arrow).to_batches(
                    max_chunksize=65536)

    df = _task_frame(spark, work).mapInArrow(image_task, out_spark)
    return apply_filters(df, filters)

def _task_frame(spark, rows: list):
    """A DataFrame with one input partition (task) per row: (task json[, arrow ipc bytes])."""
    from pyspark.sql.types import BinaryType, StringType, StructField, StructType

    fields = [StructField("task", StringType(), False)]
    if len(rows[0]) > 1:
        fields.append(StructField("picks", BinaryType(), False))
    return task_frame(spark, rows, StructType(fields))

def _ipc(table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    return sink.getvalue().to_pybytes()

def _from_ipc(blob: bytes):
    return pa.ipc.open_stream(pa.py_buffer(blob)).read_all()
