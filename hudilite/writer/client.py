"""The write client: one Spark job per write, data files written by executors with Arrow + pyarrow.

    validate (columns, keys, schema)   -> nothing written on bad input
    tag with the index + profile       -> counts per partition, null keys / ordering values rejected
    start instant (lock, requested)    -> inflight
    route: updates to the file group holding the key, inserts to small groups then new ones
    one task per file group merges with Arrow and writes the new base file (marker first)
    reconcile markers, complete instant (put-if-absent)  -> visible
Any failure rolls the instant back from its markers before the error is raised.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re

import pyarrow as pa

from hudilite import change_images
from hudilite import options as o
from hudilite.columns import ARRIVAL_COL, DELETE_COL, IS_DELETED_FIELD, KEY_COL, META_FIELDS, PART_COL, SEQ_COL
from hudilite.config import MERGE_ON_READ, TableConfig
from hudilite.errors import HudiliteError, InvalidWriteError, UnsupportedTableError
from hudilite.index.global_index import META_KEY as INDEX_META_KEY
from hudilite.index.global_index import index_choice
from hudilite.keygen import KeySpec, arrow_keygen, integer_key_column
from hudilite.markers import TIMELINE_SERVER_BASED, MarkerService, delete_markers, list_markers, marker_type
from hudilite.reader import overlay_cache
from hudilite.schema import SchemaError, arrow_to_avro, avro_to_arrow, avro_to_json, check_key_types, evolve
from hudilite.services.inline import check_service_options, run_inline_services
from hudilite.services.rollback import abort_write
from hudilite.services.upgrade import upgrade
from hudilite.spark.keygen import partition_path_expr, record_key_expr
from hudilite.spark.schema import spark_to_arrow
from hudilite.spark.session import (
    check_client_storage,
    check_workers,
    default_parallelism,
    is_connect,
    job_tag,
    wait_for_tasks,
)
from hudilite.spark.small_batch import collect_small
from hudilite.spark.write import SparkPlanner, collect_stats, stat_struct
from hudilite.sql_merge import latest_per_key
from hudilite.storage import capture_bindings, install_bindings, normalize_path, relative_to, storage_for
from hudilite.table import PROPS_FILE, HoodieTable
from hudilite.timeline import COMMIT, DELTA_COMMIT, REPLACE_COMMIT, Instant
from hudilite.writer import local as local_write
from hudilite.writer.conflict import read_basis
from hudilite.writer.context import WriteContext
from hudilite.writer.handle import StreamingBaseFileWriter, newest_per_key, stats_table
from hudilite.writer.log_handle import block_format_option, state_spec
from hudilite.writer.options import UNSET, WriteOptions, resolve
from hudilite.writer.pending import PendingWrite, WriteResult
from hudilite.writer.queue import run_bounded
from hudilite.writer.source_files import plain_parquet_units, read_units
from hudilite.writer.transaction import Transaction, check_nbcc_table

log = logging.getLogger(__name__)
_INVALID_PREFIX = "HUDILITE_INVALID_INPUT: "
OPERATION_TYPES = {
    "bulk_insert": "BULK_INSERT", "insert": "INSERT", "upsert": "UPSERT", "delete": "DELETE",
    "insert_overwrite": "INSERT_OVERWRITE", "insert_overwrite_table": "INSERT_OVERWRITE_TABLE",
}


def write(df, path, *, record_key, precombine_field=UNSET, partition_by=(), operation="upsert",
          table_type=UNSET, options=None, extra_metadata=None, commit=True):
    """`commit=False`: the data is written but the instant stays inflight; returns a PendingWrite
    (`.complete()` / `.abort()`, `.read(spark)` for audits) - see hudilite/writer/pending.py."""
    df = writer_input(df)
    if not is_arrow(df):  # Spark Connect: before the first storage access (the upgrade probe, the table)
        check_client_storage(df.sparkSession, path, write=True)
    if o.AUTO_UPGRADE.get(options) and HoodieTable.exists(path) and HoodieTable.open(path).config.version == 6:
        upgrade(path, options=options)
    wo = resolve(path, record_key, precombine_field, partition_by, operation, table_type, options)
    if is_arrow(df):  # written by this process, no Spark jobs (hudilite/writer/local.py)
        return WriteClient(None, wo).run(df, extra_metadata or {}, commit=commit)
    return WriteClient(df.sparkSession, wo, storage_checked=True).run(df, extra_metadata or {}, commit=commit)


def is_arrow(data) -> bool:
    return isinstance(data, (pa.Table, pa.RecordBatch)) or (
        isinstance(data, (list, tuple)) and bool(data) and all(isinstance(b, pa.RecordBatch) for b in data))


def _is_spark(data) -> bool:
    return type(data).__module__.split(".")[:2] == ["pyspark", "sql"] and hasattr(data, "sparkSession")


def writer_input(data):
    """`data` as the writer takes it: a Spark DataFrame (classic or Connect) or Arrow input (a Table, a RecordBatch,
    a list of batches) as it is; a RecordBatchReader, a pandas DataFrame (without its index) or any other object
    exporting an Arrow stream (`__arrow_c_stream__`: polars, DuckDB, ...) as the Arrow Table it reads, written on
    the driver. Anything else raises InvalidWriteError (nothing is written)."""
    if is_arrow(data) or _is_spark(data):  # (a Spark DataFrame exports an Arrow stream too: never collected here)
        return data
    try:
        if isinstance(data, pa.RecordBatchReader):
            return data.read_all()
        if type(data).__module__.split(".")[0] == "pandas" and type(data).__name__ == "DataFrame":
            return pa.Table.from_pandas(data, preserve_index=False)
        if hasattr(data, "__arrow_c_stream__"):
            return pa.table(data)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as e:
        # e.g. a pandas object column holding numbers and strings ("Conversion failed for column x ...")
        raise InvalidWriteError(f"cannot read the {type(data).__name__} as Arrow data: {e}") from None
    what = "an empty list" if isinstance(data, (list, tuple)) and not data else f"a {type(data).__name__}"
    raise InvalidWriteError(f"cannot write {what}: write a Spark DataFrame, a pyarrow Table, RecordBatch, list of "
                            "RecordBatches or RecordBatchReader, a pandas DataFrame, or an object exporting an Arrow "
                            "stream (__arrow_c_stream__)")


_NOT_COLLECTED = object()  # WriteClient._small_batch: the input was not collected yet


class WriteClient:
    def __init__(self, spark, wo: WriteOptions, *, transaction_factory=None, open_table=None,
                 storage_checked: bool = False):
        self.spark = spark
        self.wo = wo
        self.storage_checked = storage_checked  # check_client_storage already ran for this write
        # hooks for prepared commits (hudilite/prepared.py, the streaming sink's): a Transaction subclass, and a
        # table opener that presents the writer's prepared commits as completed to the planner
        self.transaction_factory = transaction_factory or Transaction
        self.open_table = open_table or HoodieTable.open

    # ------------------------------------------------------------------------------------------
    def run(self, df, extra_metadata: dict, commit: bool = True):
        wo = self.wo
        check_service_options(wo.options)  # inline table service options: bad ones fail before any write
        choice = index_choice(wo.options)  # a bad index type fails before any write (bulk inserts included)
        local = is_arrow(df)
        if not local and not self.storage_checked:
            check_client_storage(self.spark, wo.path, write=True)  # before any Spark job
        small_batch = not local and wo.get(o.SMALL_BATCH)
        if not local and not small_batch:
            check_workers(self.spark)  # once per session: workers without hudilite fail here, readably
        existing = self.open_table(wo.path) if HoodieTable.exists(wo.path) else None
        collected = _NOT_COLLECTED
        if small_batch and is_connect(self.spark):
            # collected first: the job's reply gives the frame's columns without an analysis of their own
            collected = self._collect_small(df, existing)
            if existing is not None:  # the plan's basis is the timeline after the job: no wider conflict window
                existing = self.open_table(wo.path)
        if local:
            df = local_write.as_table(df)
            df = df.drop_columns([c for c in META_FIELDS if c in df.column_names])
            columns, incoming = df.column_names, df.schema
        else:
            columns = df.columns
            meta = [c for c in META_FIELDS if c in columns]
            if meta:  # a derived frame is analysed again (a Spark Connect round trip): only when it differs
                df = df.drop(*meta)
                columns = df.columns
                if isinstance(collected, pa.Table):
                    collected = collected.drop_columns(meta)
            incoming = None
        table, data_schema, new_config = self._prepare_table(columns, incoming if local else df, existing)
        cfg = table.config if table is not None else new_config
        check_nbcc_table(wo.options, cfg.table_type, cfg.version)  # before anything is written
        basis = read_basis(table)  # what the plan is built on: commits completed after it are conflict-checked
        spec = KeySpec(tuple(wo.record_key), tuple(wo.partition_by), wo.hive_style, cfg.timestamp_keys_utc)
        if small_batch:
            batch = self._small_batch(df, spec, table, collected)
            if batch is not None:  # from here on the write of an Arrow batch (hudilite/writer/local.py)
                df, local = local_write.as_table(batch), True
            else:
                check_workers(self.spark)
        if self._newest_first():  # after _prepare_table: the table's precombine field is known
            if local:
                arrival = ARRIVAL_COL if ARRIVAL_COL in df.column_names else None
                df = newest_per_key(df, wo.record_key, wo.precombine_field, arrival)
                if arrival:
                    df = df.drop_columns([arrival])
            else:
                df = latest_per_key(df, wo.record_key, wo.precombine_field)
        mor = (table.config.table_type if table else wo.table_type) == MERGE_ON_READ
        if mor and wo.get(o.PARTIAL_UPDATE):
            raise UnsupportedTableError("partial updates are not supported on merge-on-read tables")
        block_format = block_format_option(wo.options) if mor else None
        event_time = bool(wo.precombine_field)
        prepared = local_write.prepare_rows(df, spec, wo.operation == "delete") if local \
            else self._prepare_rows(df, spec)

        # Profile before anything is written: bad input fails with the table untouched.
        plan = None
        if wo.operation in ("insert", "upsert", "delete", "insert_overwrite", "insert_overwrite_table"):
            plan = (local_write.LocalPlanner if local else SparkPlanner)(self, table, data_schema, prepared)
            plan.mor, plan.block_format = mor, block_format
            plan.profile()

        created = None  # a table this write creates: removed again if the write fails (path as it was)
        if table is None:
            base = normalize_path(wo.path)
            created = (base, storage_for(base).exists(base))
            table = HoodieTable.create(base, new_config)
        txn = self.transaction_factory(table, wo.options)
        # under the table lock; lazy (the default mode): only writers whose heartbeat expired by their own
        # tolerance; prepared commits and service plans are left alone
        txn.rollback_failed_writes()
        action = REPLACE_COMMIT if wo.operation.startswith("insert_overwrite") else DELTA_COMMIT if mor else COMMIT
        inst = txn.start(action, basis=basis)
        hb = txn.heartbeat(inst)
        marker_opts, service = _marker_options(table, wo)
        ctx = WriteContext(
            marker_options=marker_opts,
            buffer_limit_bytes=wo.get(o.BUFFER_LIMIT),
            base_path=table.base_path, instant=inst.timestamp, table_name=table.config.name,
            data_schema=data_schema, precombine_field=wo.precombine_field, event_time=event_time,
            target_file_bytes=wo.target_file_bytes, row_group_rows=wo.row_group_rows,
            compression=wo.compression, partial_update=wo.get(o.PARTIAL_UPDATE),
            incoming_columns=tuple(columns), delete_operation=wo.operation == "delete",
            int_key=integer_key_column(wo.record_key, data_schema),
            change_images=action == COMMIT and wo.operation != "bulk_insert"
            and wo.get(o.CHANGE_IMAGES),
            fsync=wo.get(o.FSYNC), partition_depth=len(wo.partition_by), record_key=tuple(wo.record_key),
            url_encoded=table.config.url_encode, hive_style=wo.hive_style,
        )
        schema_json = avro_to_json(arrow_to_avro(data_schema, table.config.name))
        if action == DELTA_COMMIT:
            ctx.state_spec = state_spec(table, schema_json)
        if action == DELTA_COMMIT and wo.get(o.READ_OVERLAYS):
            ctx.overlays = overlay_cache.for_write(self.spark, table, schema_json, inst.timestamp)
        counted: list[dict] = []
        # tagged: after a failure, the rollback waits for the job's cancelled tasks (wait_for_tasks)
        with contextlib.nullcontext(None) if local else job_tag(self.spark) as tag:
            try:
                ctx.markers().init()
                txn.mark_inflight(inst, _metadata({}, OPERATION_TYPES[wo.operation], None))
                if wo.operation == "bulk_insert":
                    stats = local_write.bulk_insert(prepared, ctx) if local \
                        else self._bulk_insert(df, prepared, ctx, spec)
                    replaced = {}
                else:
                    stats, replaced = plan.execute(ctx)
                counted = [s for s in stats if s.get("countOnly")]  # file groups left as they were
                stats = [s for s in stats if not s.get("countOnly")]
                stats = self._reconcile(table, inst, stats)
                images = change_images.take_from_stats(stats)
                for part in {s["partitionPath"] for s in stats}:
                    table.ensure_partition_metadata(part, inst.timestamp)
                extra = {"schema": schema_json, **{k: str(v) for k, v in extra_metadata.items()}}
                if choice.is_global and plan is not None:  # change reads match a key that changed partition
                    extra[INDEX_META_KEY] = choice.kind
                if ctx.change_images and images is not None:
                    extra[change_images.META_KEY] = json.dumps(images, separators=(",", ":"))
                md = _metadata(stats, OPERATION_TYPES[wo.operation], extra, replaced)
                if commit:
                    txn.complete(inst, md)
            except BaseException as e:
                hb.stop()
                try:
                    if tag is not None:  # cancelled tasks of the failed job may still be writing files
                        wait_for_tasks(self.spark, tag)
                    abort_write(table, table.reload().get(inst.timestamp) or inst, txn.options)
                except Exception:  # noqa: BLE001 - keep the original error; the next writer rolls back
                    log.exception("rollback of %s failed", inst.timestamp)
                else:
                    if created is not None:
                        _remove_unused_new_table(table, *created)
                raise _translate(e) from e
            finally:
                if plan is not None:
                    plan.release()
                if service is not None:
                    service.stop()
        summary = _summary(stats + counted, replaced)
        summary["engine"] = "driver" if local else "spark"  # which writer ran (small batches: the driver's)
        if not commit:  # written, not visible: the caller completes or aborts it (heartbeat keeps running)
            return PendingWrite(table, txn, inst, md, hb, summary)
        hb.stop()
        delete_markers(table.base_path, inst.timestamp)
        services = run_inline_services(table, wo.options, inst.timestamp)  # hoodie.compact.inline, clean, ...
        if services:
            summary["services"] = services
        return WriteResult(inst.timestamp, summary)

    # ------------------------------------------------------------------------------------------
    def _small_batch(self, df, spec: KeySpec, table: HoodieTable | None,
                     collected=_NOT_COLLECTED) -> pa.Table | None:
        """`df` as Arrow when it is small enough to write without Spark jobs (`hudilite.write.small.batch.*`)
        and its keys are ones the driver computes as Spark does; else None (the Spark write). `collected`:
        `_collect_small`'s answer when it was asked already."""
        if arrow_keygen(spec, spark_to_arrow(df.schema)) is None:
            return None
        return self._collect_small(df, table) if collected is _NOT_COLLECTED else collected

    def _collect_small(self, df, table: HoodieTable | None) -> pa.Table | None:
        max_rows = self.wo.get(o.SMALL_BATCH_ROWS)
        estimate = self.wo.get(o.SMALL_BATCH_ESTIMATE)
        if estimate == "auto":
            # an incremental writer's batches are alike: after a small one the input is collected with the
            # limit at once. The estimate costs a planning round trip, and it cannot see a filter's or a
            # join's selectivity, so it rules out small batches read from large sources.
            last = table.last_write_records() if table is not None else None
            estimate = "true" if last is None or last > max_rows else "false"
        return collect_small(df, max_rows, self.wo.get(o.SMALL_BATCH_BYTES), estimate=estimate == "true",
                             arrival=ARRIVAL_COL if self._newest_first() else None)

    def _newest_first(self) -> bool:
        """`hudilite.write.newest.per.key`: the input is reduced to each key's newest row before the write."""
        return bool(self.wo.record_key) and self.wo.operation != "delete" and bool(self.wo.get(o.NEWEST_PER_KEY))

    def _prepare_table(self, cols: list[str], data, table: HoodieTable | None):
        """Check the keys and partition fields of the data, and the table at the write's path (`table`, opened;
        None: there is none yet) or plan a new one; validate the schema against the data (`data`: its Arrow
        schema, or the Spark DataFrame)."""
        wo = self.wo
        for role, names in (("record key", wo.record_key), ("partition", wo.partition_by)):
            for n in names:
                if n not in cols and n.split(".")[0] in cols:
                    raise InvalidWriteError(
                        f"{role} field {n!r} is a nested field: {role} fields are top-level columns; select it "
                        f"as one (e.g. `{n} AS {n.split('.')[-1]}`)")
                if n not in cols:
                    raise InvalidWriteError(
                        f"{role} field {n!r} is not a column of the data (columns: {', '.join(cols)})")
        if table is not None:
            cfg = table.config
            cfg.validate_writable(table.base_path)
            stored_rk = cfg.record_key_fields
            if stored_rk and stored_rk != wo.record_key:
                raise InvalidWriteError(
                    f"record key {wo.record_key} does not match the table's record key {stored_rk}")
            stored_parts = cfg.partition_fields if cfg.is_partitioned else []
            if wo.partition_by and stored_parts != wo.partition_by:
                raise InvalidWriteError(
                    f"partition fields {wo.partition_by} do not match the table's {stored_parts}")
            wo.partition_by = stored_parts
            for n in wo.partition_by:
                if n not in cols:
                    raise InvalidWriteError(
                        f"partition field {n!r} of the table is not a column of the data (columns: {', '.join(cols)})")
            if wo.precombine_field and cfg.precombine_field and wo.precombine_field != cfg.precombine_field:
                raise InvalidWriteError(
                    f"precombine field {wo.precombine_field!r} does not match the table's {cfg.precombine_field!r}")
            if wo.precombine_given and not wo.precombine_field and cfg.precombine_field:
                raise InvalidWriteError(
                    f"precombine_field=None, but the table orders records by {cfg.precombine_field!r} (omit "
                    "precombine_field to write with the table's, or pass it)")
            if wo.table_type_given and wo.table_type != cfg.table_type:
                raise InvalidWriteError(
                    f"table_type {wo.table_type} does not match the table's {cfg.table_type} (a table's type is set "
                    "when it is created; omit table_type to write with the table's)")
            wo.precombine_field = wo.precombine_field or cfg.precombine_field
            wo.hive_style = cfg.hive_style
            wo.table_name = cfg.name
        if wo.precombine_field and wo.precombine_field not in cols and wo.operation != "delete":
            raise InvalidWriteError(
                f"precombine field {wo.precombine_field!r} is not a column of the data (columns: {', '.join(cols)})")
        try:
            incoming = data if isinstance(data, pa.Schema) else spark_to_arrow(data.schema)
            if table is not None:
                stored = table.timeline.schema_json() or table.config.create_schema
                if wo.operation == "delete":
                    data_schema = avro_to_arrow(stored) if stored else incoming
                elif stored:
                    table_arrow = avro_to_arrow(stored)
                    data_schema = evolve(table_arrow, incoming)
                    check_key_types(table_arrow, data_schema, wo.record_key, wo.partition_by)
                else:
                    data_schema = incoming
            else:
                data_schema = evolve(incoming, incoming)
            create_schema = avro_to_json(arrow_to_avro(data_schema, wo.table_name))
        except SchemaError as e:
            raise InvalidWriteError(str(e)) from None
        if wo.precombine_field and wo.precombine_field in data_schema.names:
            t = data_schema.field(wo.precombine_field).type
            if pa.types.is_nested(t) or pa.types.is_null(t):
                raise InvalidWriteError(
                    f"precombine field {wo.precombine_field!r} has type {t}: ordering values must be numbers, "
                    "strings, dates or timestamps (values that compare)")
        if IS_DELETED_FIELD in data_schema.names and not pa.types.is_boolean(data_schema.field(IS_DELETED_FIELD).type):
            raise InvalidWriteError(
                f"column {IS_DELETED_FIELD!r} (Hudi's delete marker) has type "
                f"{data_schema.field(IS_DELETED_FIELD).type}: it must be boolean (true deletes the record)")
        new_config = None
        if table is None:
            if not wo.get(o.ALLOW_EXISTING_FILES):
                check_no_foreign_data(wo.path)
            new_config = TableConfig.new(
                name=wo.table_name, table_type=wo.table_type, record_key_fields=wo.record_key,
                precombine_field=wo.precombine_field, partition_fields=wo.partition_by,
                hive_style=wo.hive_style, create_schema=create_schema,
                version=int(wo.get(o.WRITE_TABLE_VERSION)),
            )
        return table, data_schema, new_config

    def _prepare_rows(self, df, spec: KeySpec):
        from pyspark.sql import functions as F

        wo = self.wo
        if wo.operation == "delete":
            delete = F.lit(True)
        elif IS_DELETED_FIELD in df.columns:
            delete = F.coalesce(F.col(IS_DELETED_FIELD).cast("boolean"), F.lit(False))
        else:
            delete = F.lit(False)
        return df.select(
            *[F.col(f"`{c}`") for c in df.columns],
            record_key_expr(spec, df.schema).alias(KEY_COL),
            partition_path_expr(spec, df.schema).alias(PART_COL),
            delete.alias(DELETE_COL),
            F.monotonically_increasing_id().alias(SEQ_COL),
        )

    # ------------------------------------------------------------------------------------------
    def _bulk_insert(self, df, prepared, ctx: WriteContext, spec: KeySpec) -> list[dict]:
        from pyspark.sql import functions as F

        mode = self.wo.get(o.BULK_SORT_MODE)
        # unsorted: the key and partition path are computed in the Python worker where that gives the same
        # strings, so Spark converts and ships only the data columns - or nothing at all, see source_files.py
        keygen = arrow_keygen(spec, spark_to_arrow(prepared.schema)) if mode == "NONE" else None
        key_fields = list(self.wo.record_key)
        bindings = capture_bindings(ctx.base_path)

        def write_batches(batches):
            install_bindings(bindings)  # the table's storage options, in the executor's Python worker
            w = StreamingBaseFileWriter(ctx)

            def consume(b):
                t = pa.Table.from_batches([b])
                if keygen is not None:
                    t = keygen(t)
                _check_keys(t, key_fields)
                w.write(t)

            # reading the input overlaps with encoding/writing parquet, within a memory bound
            run_bounded([batches], consume, ctx.buffer_limit_bytes)
            return w.close()

        # the source files read directly: found in the JVM plan and run as RDD tasks, so classic sessions only
        # (Spark Connect writes the rows below, as any other source)
        if keygen is not None and IS_DELETED_FIELD not in df.columns and self.wo.get(o.BULK_SOURCE_FILES) \
                and not is_connect(self.spark):
            source = spark_to_arrow(df.schema)
            units = plain_parquet_units(df, source, default_parallelism(self.spark))
            if units:
                batch_rows = ctx.row_group_rows

                def file_task(it):
                    for s in write_batches(read_units(list(it), source, batch_rows)):
                        yield json.dumps(s)

                rdd = self.spark.sparkContext.parallelize(units, len(units))
                return [json.loads(s) for s in rdd.mapPartitions(file_task).collect()]

        rows = prepared.filter(~F.col(DELETE_COL))
        if keygen is not None:
            rows = rows.drop(KEY_COL, PART_COL, SEQ_COL, DELETE_COL)
        if mode == "GLOBAL_SORT":
            rows = rows.orderBy(PART_COL, KEY_COL)
        elif mode == "PARTITION_SORT":
            rows = rows.sortWithinPartitions(PART_COL, KEY_COL)

        def write_task(batches):
            for rb in stats_table(write_batches(batches)).to_batches():
                yield rb

        return collect_stats(rows.mapInArrow(write_task, stat_struct()))

    def _reconcile(self, table: HoodieTable, inst: Instant, stats: list[dict]) -> list[dict]:
        """Delete files that markers name but no write stat claims (failed or speculative task attempts), and
        their change images."""
        claimed = {s["path"] for s in stats}
        for part, name, _kind in list_markers(table.base_path, inst.timestamp):
            rel = f"{part}/{name}" if part else name
            if rel not in claimed:
                table.fs.delete(f"{table.partition_dir(part)}/{name}")
        change_images.remove_unclaimed(table.base_path, inst.timestamp, {s.get(change_images.STAT_IMAGES)
                                                                          for s in stats})
        return stats


# ---------------------------------------------------------------------------------------------
def _remove_unused_new_table(table: HoodieTable, base: str, dir_existed: bool) -> None:
    """After the failed (and rolled back) first write of a table: remove the table it created, under the table
    lock and only while its timeline is still empty (another writer that started on the new table meanwhile
    keeps it), so the path is as it was before the write."""
    meta = table.meta_path
    try:
        with Transaction(table, {}).lock:
            if table.reload().instants:
                return
            table.fs.delete(os.path.join(meta, PROPS_FILE))  # from here on the path holds no table
            for name in table.fs.list_entries(base)[0]:  # partition directories the write left (rollback empties them)
                d = os.path.join(base, name)
                if d != meta and not table.fs.listdir(d):
                    table.fs.rmdir(d)
        if not HoodieTable.exists(base):  # the lock file is gone with the lock; nobody created a table since
            table.fs.delete_tree(meta)
            if not dir_existed and not table.fs.listdir(base):
                table.fs.rmdir(base)
    except OSError:  # noqa: PERF203 - best effort: the failed write's error is what the caller needs
        log.warning("could not remove the new table at %s after its first write failed", base, exc_info=True)


def _marker_options(table: HoodieTable, wo: WriteOptions):
    """Marker settings for the executors; starts the driver's batched marker service when the marker type
    (`hoodie.write.markers.type`, by default TIMELINE_SERVER_BASED on object storage, DIRECT locally) is
    TIMELINE_SERVER_BASED and names no running one. Returns (options, service)."""
    opts = {m.key: wo.options[m.key] for m in _MARKER_OPTIONS if m.key in wo.options}
    opts[o.MARKERS_TYPE.key] = marker_type(table.base_path, opts)
    service = None
    if opts[o.MARKERS_TYPE.key] == TIMELINE_SERVER_BASED and not o.MARKERS_SERVICE_URL.get(opts):
        service = MarkerService.from_options(table.base_path, wo.options)
        opts[o.MARKERS_SERVICE_URL.key] = service.start()
    return opts, service


_MARKER_OPTIONS = (o.MARKERS_TYPE, o.MARKERS_SERVICE_URL, o.MARKERS_BATCH_INTERVAL_MS, o.MARKERS_NUM_THREADS)
ALLOW_FOREIGN_KEY = o.ALLOW_EXISTING_FILES.key


def check_no_foreign_data(path: str) -> None:
    """Refuse to create a table in a directory that already holds another format's data (a Delta `_delta_log`,
    Iceberg `metadata/*.metadata.json`, plain parquet / ORC / Avro files, Spark's `_SUCCESS`): a Hudi table on
    top would hide it from its own readers and never read it. Looks a few levels deep, stops at the first."""
    base = normalize_path(path)
    fs = storage_for(base)
    if not fs.isdir(base):
        return
    found = None
    if fs.isdir(os.path.join(base, "_delta_log")):
        found = "a Delta Lake table (_delta_log)"
    elif any(n.endswith(".metadata.json") for n in fs.listdir(os.path.join(base, "metadata"))):
        found = "an Iceberg table (metadata/*.metadata.json)"
    else:
        stack = [(base, 0)]
        while stack and not found:
            root, depth = stack.pop(0)
            try:
                dirs, files = fs.list_entries(root)
            except OSError:
                continue
            if depth < 3:
                stack[:0] = [(os.path.join(root, d), depth + 1) for d in sorted(dirs) if not d.startswith(".")]
            hit = next((f for f in files if f == "_SUCCESS" or f.endswith((".parquet", ".orc", ".avro"))), None)
            if hit:
                found = f"data files ({relative_to(os.path.join(root, hit), base)})"
    if found:
        raise InvalidWriteError(
            f"{base} already holds {found} and no Hudi table: refusing to create one on top (choose an empty "
            f"directory, or pass options={{'{ALLOW_FOREIGN_KEY}': 'true'}} to create it anyway)")



def _check_keys(batch: pa.RecordBatch, key_fields) -> None:
    keys = batch.column(batch.schema.get_field_index(KEY_COL))
    if keys.null_count:
        raise InvalidWriteError(
            f"{_INVALID_PREFIX}{keys.null_count} row(s) have a null or empty record key (record key field(s): "
            f"{', '.join(key_fields)})")


def _translate(e: BaseException) -> BaseException:
    if isinstance(e, HudiliteError):
        return e
    # the last one: a Python worker's traceback shows the raising source line (`raise ValueError(f"...")`)
    # before the exception's own message
    found = re.findall(re.escape(_INVALID_PREFIX) + r"(.*)", str(e))
    return InvalidWriteError(found[-1].strip()) if found else e


def _metadata(stats: list[dict], op_type: str, extra: dict | None, replaced: dict | None = None) -> dict:
    pts: dict[str, list[dict]] = {}
    for s in stats:
        pts.setdefault(s["partitionPath"], []).append(s)
    md = {"partitionToWriteStats": pts, "compacted": False, "extraMetadata": extra or {},
          "operationType": op_type}
    if replaced is not None and (replaced or op_type.startswith("INSERT_OVERWRITE")):
        md["partitionToReplaceFileIds"] = replaced
    return md


def _summary(stats: list[dict], replaced: dict) -> dict:
    return {
        "files": sum(1 for s in stats if s.get("path") or s.get("logFiles")),
        "inserted": sum(s.get("numInserts", 0) for s in stats),
        "updated": sum(s.get("numUpdateWrites", 0) for s in stats),
        "deleted": sum(s.get("numDeletes", 0) for s in stats),
        "ignored": sum(s.get("numIgnored", 0) for s in stats),
        "rows_written": sum(s.get("numWrites", 0) for s in stats),
        "bytes_written": sum(s.get("totalWriteBytes", 0) for s in stats),
        "replaced_file_groups": sum(len(v) for v in replaced.values()),
    }
