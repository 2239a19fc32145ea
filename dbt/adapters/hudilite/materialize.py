"""Models, seeds and snapshots as hudilite commits: a full build (or a rebuild beside the old table when the key,
partitioning or column types change), or an incremental run with its strategy; then the catalog entry is
re-pointed at the new snapshot. One commit per model run, carrying the checkpoints the run consumed.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import re
import threading
import time
from dataclasses import replace
from typing import Any, Callable, Dict, List, Optional

from dbt.adapters.events.logging import AdapterLogger
from dbt_common.exceptions import DbtRuntimeError
from pyspark.errors import AnalysisException, ParseException
from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructField, StructType

import hudilite
from dbt.adapters.hudilite.audit import write_model
from dbt.adapters.hudilite.catalog import CatalogEntry
from dbt.adapters.hudilite.change_batches import (
    ChangePlan,
    checkpoint_metadata,
    in_bounds,
    parse_bound,
    positions,
    resolve_upstreams,
    touched_windows,
    window_of,
    window_sql,
)
from dbt.adapters.hudilite.incremental import rebuild_reads
from dbt.adapters.hudilite.microbatch import window_metadata
from dbt.adapters.hudilite.model_config import IS_DELETED, META_FIELDS, ROW_ID, ModelSpec, is_hidden_column
from dbt.adapters.hudilite.python_model import call_model, to_spark_frame
from dbt.adapters.hudilite.response import combined, error_text, response
from dbt.adapters.hudilite.run_state import model_key
from dbt.adapters.hudilite.strategies import with_row_id
from hudilite import metastore as ms
from hudilite import options as o
from hudilite.spark.session import is_connect
from hudilite.storage import normalize_path

logger = AdapterLogger("Hudilite")


class MaterializeMixin:
    """The environment's model builds (HudiliteEnvironment)."""

    # ---- models ----------------------------------------------------------------------------
    def model_frame(self, sql: str):
        """The model's rows as a DataFrame, without the `_hoodie_*` meta columns (of any upstream table)."""
        sql = sql.strip()
        while sql.endswith(";"):
            sql = sql[:-1].rstrip()
        return visible_frame(self.query(sql))

    def python_ref_frame(self, name: str):
        """`dbt.ref()` / `dbt.source()` of a Python model: the relation's rows without hudilite's hidden columns
        (what `select *` of a SQL model keeps)."""
        return visible_frame(self.spark.table(name))

    def materialize(self, schema: str, identifier: str, sql: Optional[str], kind: str, cfg: Dict[str, Any],
                    python: Optional[Callable[[], Any]] = None):
        """`python`: a Python model's `lambda: model(dbt, session)` (python_model.py) instead of `sql`."""
        t0 = time.perf_counter()
        try:
            return self._materialize(schema, identifier, sql, kind, cfg, python)
        finally:
            logger.debug(f"hudilite: {schema}.{identifier} materialized in {time.perf_counter() - t0:.2f}s")

    def _materialize(self, schema: str, identifier: str, sql: Optional[str], kind: str, cfg: Dict[str, Any],
                     python: Optional[Callable[[], Any]] = None):
        spec = ModelSpec.from_config(cfg)
        if python is not None:
            if kind == "incremental" and spec.strategy == "microbatch":
                # dbt renders a Python model's refs unfiltered (build_ref_function), so a batch would not see
                # its window: refuse rather than write every row into every batch
                raise DbtRuntimeError(
                    f"{schema}.{identifier}: incremental_strategy 'microbatch' is not supported for Python models "
                    "(dbt does not filter a Python model's refs by event time); use a SQL model, or 'upsert' / "
                    "'append' / 'insert_overwrite' with dbt.is_incremental")
            return self._materialize_one(schema, identifier, "", kind, cfg, spec, python=python)
        if kind == "incremental" and spec.strategy == "microbatch" and spec.microbatch_source == "changes":
            return self._change_batches(schema, identifier, sql, kind, cfg, spec)
        return self._materialize_one(schema, identifier, sql, kind, cfg, spec)

    def _change_batches(self, schema: str, identifier: str, sql: str, kind: str, cfg: Dict[str, Any],
                        spec: ModelSpec):
        """A batch of a `microbatch_source: changes` model (change_batches.py): the invocation's first batch
        rebuilds the windows the upstream commits since the checkpoint touch, the last of them carrying the
        new checkpoint; dbt's other batches are plain microbatch batches."""
        where = f"{schema}.{identifier}"
        if spec.batch is None or not spec.batch_size:
            raise DbtRuntimeError(f"microbatch_source 'changes' of {where} needs a batch from dbt-core (batch_size, "
                                  "and a run through dbt run / build)")
        path = self.table_path(schema, identifier, spec)

        def make() -> ChangePlan:
            upstreams = resolve_upstreams(self, spec.upstreams, where)
            build = spec.full_refresh or not hudilite.Table.exists(path)
            return ChangePlan(build=build, ends=positions(upstreams), upstreams=upstreams)

        first, plan = self.run.batch_plan(model_key(schema, identifier), make)
        lower, upper = spec.event_time_bounds
        bounded = lower is not None or upper is not None
        if plan.build:  # dbt's batches build the table; each records where the next run continues
            # (a bounded build records nothing: the next run rebuilds every window the upstream has rows in)
            extra = None if bounded else checkpoint_metadata(plan.ends, None if spec.full_refresh else path)
            return self._materialize_one(schema, identifier, sql, kind, cfg, spec, extra=extra)
        if not first:
            return self._materialize_one(schema, identifier, sql, kind, cfg, spec)
        batch = spec.batch
        tz = parse_bound(batch[0]).tzinfo
        begin = parse_bound(spec.begin) if spec.begin else None
        starts = sorted(s for s in touched_windows(self.spark, path, plan, spec.batch_size, tz, spec.event_time or "")
                        if (begin is None or s >= begin) and in_bounds(s, spec.batch_size, lower, upper))
        windows = [window_of(s, spec.batch_size) for s in starts]
        parts = []
        if batch not in windows:  # dbt's own batch first, as a plain microbatch batch
            parts.append(self._materialize_one(schema, identifier, sql, kind, cfg, spec))
        if not windows:
            return parts[0]
        logger.info(f"hudilite: {where}: upstream commits since the checkpoint touch "
                    f"{len(windows)} window(s){' within --event-time-start/-end' if bounded else ''}: "
                    f"{', '.join(w[0] for w in windows)}")
        for i, window in enumerate(windows):
            # the last window carries the checkpoint, unless the run is bounded (windows outside are not done)
            final = i == len(windows) - 1 and not bounded
            parts.append(self._materialize_one(
                schema, identifier, window_sql(sql, batch, window, where), kind, cfg, replace(spec, batch=window),
                extra=checkpoint_metadata(plan.ends, path) if final else None, force=final))
        return combined(parts, f"MICROBATCH {len(windows)} window(s) from upstream changes")

    def _materialize_one(self, schema: str, identifier: str, sql: str, kind: str, cfg: Dict[str, Any],
                         spec: ModelSpec, extra: Optional[Dict[str, str]] = None, force: bool = False,
                         python: Optional[Callable[[], Any]] = None):
        # a microbatch model's batches may run concurrently (concurrent_batches): they are not serialised
        # here but by the core's optimistic concurrency; only their catalog publish takes the lock
        batch_run = kind == "incremental" and spec.strategy == "microbatch" and not spec.full_refresh
        with contextlib.nullcontext() if batch_run else self._table_lock(schema, identifier):
            entry = self.build_entry(schema, identifier)
            path = self.table_path(schema, identifier, spec)
            if entry is not None and entry.path and normalize_path(entry.path) != path:
                logger.warning(f"hudilite: {schema}.{identifier} moves from {entry.path} to {path}")
            if kind == "incremental" and not spec.full_refresh:
                spec = self._rebuild_if_upstream_rebuilt(schema, identifier, spec)
            if python is not None:  # the user's model() runs here, inside the lock, before anything is written
                where = f"{schema}.{identifier}"
                df = visible_frame(to_spark_frame(call_model(python, where), self.spark, where))
            else:
                df = self.model_frame(sql)
            drop = [c for c in df.columns if c.lower() in {d.lower() for d in cfg.get("drop_columns") or ()}]
            if drop:
                df = df.drop(*drop)
            spec = spec.spelled_as(df.columns)
            if cfg.get("cast_to_target") and entry is not None and entry.kind == "TABLE":
                # store assignment (as an INSERT/MERGE into the table would): values take the stored column
                # types. Snapshots need it: dbt's staging query mixes the source's types (e.g. a `date`
                # updated_at) with snapshot_get_time()'s timestamp.

                target = self.spark.table(self.qualified(schema, identifier))
                stored = {f.name.lower(): f.dataType for f in target.schema}
                df = df.select(*[F.col(f"`{c}`").cast(stored[c.lower()]).alias(c) if c.lower() in stored
                                 and df.schema[c].dataType != stored[c.lower()] else F.col(f"`{c}`")
                                 for c in df.columns])

            if spec.not_null:
                self._check_not_null(df, spec, schema, identifier)
            incremental = (kind == "incremental" and entry is not None and entry.is_hudilite
                           and entry.kind == "TABLE" and not spec.full_refresh
                           and normalize_path(entry.path or "") == path and hudilite.Table.exists(path))
            if incremental:
                return self._incremental(schema, identifier, path, df, spec, entry, extra=extra, force=force)
            return self._build(schema, identifier, path, df, spec, entry, extra=extra)

    def _rebuild_if_upstream_rebuilt(self, schema: str, identifier: str, spec: ModelSpec) -> ModelSpec:
        """An incremental model whose checkpoint names another table than one of its upstreams now is (the
        upstream was rebuilt at its path) is rebuilt from its upstreams' snapshots, as --full-refresh would:
        the rebuilt upstream's timeline does not continue the checkpoint, and the full overwrite is one commit
        whose change read gives the model's own consumers the deletes and updates it implies. An `append`
        model cannot be recomputed from a snapshot (its rows are the history of what it consumed): it fails,
        naming --full-refresh."""
        key = model_key(schema, identifier)
        if not self.run.rebuilding(key):
            return spec
        rebuilt = self.run.reads(key)[0]
        strategy = spec.strategy or ("upsert" if spec.record_key else "append")
        if strategy == "append":
            self.run.take(key)
            raise DbtRuntimeError(
                f"hudilite: upstream {', '.join(rebuilt)} of {schema}.{identifier} was rebuilt (it is another table "
                "than the model's checkpoint names), and an append model cannot be recomputed from the new "
                "snapshot: run it with --full-refresh to rebuild it")
        rebuild_reads(self, schema, identifier)
        logger.warning(f"hudilite: upstream {', '.join(rebuilt)} of {schema}.{identifier} was rebuilt since the "
                       "model's checkpoint: rebuilding the model from the new snapshot")
        return replace(spec, full_refresh=True)

    def load_seed(self, schema: str, identifier: str, columns: List[str], types: List[str], rows: List[list],
                  cfg: Dict[str, Any]):
        spec = ModelSpec.from_config(cfg)
        spec.full_refresh = True
        with self._table_lock(schema, identifier):
            entry = self.describe(schema, identifier)
            path = self.table_path(schema, identifier, spec)
            names = [f"_c{i}" for i in range(len(columns))]
            raw = self.spark.createDataFrame([[_seed_text(v) for v in r] for r in rows],
                                             StructType([StructField(n, StringType()) for n in names]))
            df = raw.select(*[F.expr(f"CAST({ms.quote_ident(n)} AS {t})").alias(c)
                              for n, c, t in zip(names, columns, types)])
            return self._build(schema, identifier, path, df, spec.spelled_as(columns), entry, seed=True)

    # ---- full builds -----------------------------------------------------------------------
    def _build(self, schema, identifier, path, df, spec: ModelSpec, entry, seed: bool = False,
               extra: Optional[Dict[str, str]] = None):
        self._check_delete_condition(df, spec, schema, identifier)
        missing = [k for k in spec.record_key if k.lower() not in {c.lower() for c in df.columns}]
        if missing and not seed:
            # dbt applies unique_key on merges only ("unique keys are not applied on first run"): the first
            # build succeeds, the next incremental run fails naming the column
            logger.warning(f"hudilite: unique_key column(s) {missing} of {schema}.{identifier} are not columns of "
                           "the model: the table is built without a record key; incremental runs will fail")
        # delete+insert keeps every row the model produces (dbt's semantics: several rows may share a key, and
        # incremental_predicates can keep a stored row beside a new one with its key): such tables are keyed
        # by the hidden row id; the adapter resolves unique_key itself (see _delete_insert)
        keyed = bool(spec.record_key) and not missing and spec.strategy != "delete+insert"
        record_key = spec.record_key if keyed else [ROW_ID]
        deleted = spec.deletes(df.columns)
        newest = deleted is not None and keyed  # the newest event per key decides, deletes included
        if deleted is not None:
            if keyed:
                df = df.withColumn(IS_DELETED, deleted)
            else:
                df = df.filter(~deleted)
                if IS_DELETED in df.columns:
                    df = df.drop(IS_DELETED)
        visible = [c for c in df.columns if not is_hidden_column(c)]
        self._check_columns(df, spec, record_key)
        if spec.strategy == "microbatch":
            self._microbatch_check(df, spec, schema, identifier)
        if not keyed:
            df = with_row_id(df)
        options = self._options(spec, identifier)
        if newest:
            options[o.NEWEST_PER_KEY.key] = "true"
        exists = hudilite.Table.exists(path)
        removed = self._snapshot_rows(path) if exists else None  # the rows this build replaces
        if exists and self._compatible(path, spec, record_key, df):
            op = "insert_overwrite_table"
            result = self._write(df, path, record_key, spec, op, options, schema, identifier, extra_metadata=extra)
        elif exists:
            op = "bulk_insert" if not keyed else "insert"
            result = self._rebuild_beside(df, path, record_key, spec, op, options, schema, identifier, extra)
        else:
            # keyed with a precombine_field (or delete_condition): change events, insert de-duplicates keys
            # (the highest precombine value wins); otherwise the model's rows are written as they are (dbt:
            # unique_key applies to merges, not to the first build)
            op = "insert" if keyed and (spec.precombine_field or deleted is not None) else "bulk_insert"
            result = self._write(df, path, record_key, spec, op, options, schema, identifier, extra_metadata=extra)
        self.publish(schema, identifier, path, visible, self._props(spec, record_key, keyed), entry)
        return response(op, result, path, seed=seed, removed=removed)

    def _snapshot_rows(self, path: str) -> Optional[int]:
        try:
            return hudilite.Table.open(path).row_count(self.spark)
        except Exception as e:  # noqa: BLE001 - an unreadable table is replaced all the same (_compatible)
            logger.debug(f"hudilite: rows of {path} before its rebuild: {e}")
            return None

    def _rebuild_beside(self, df, path, record_key, spec, op, options, schema, identifier, extra=None):
        """The new table cannot be a commit on the old one (key, partitioning or a column type changed): it
        is written beside it and swapped in (Table.replacing); its consumers' checkpoints no longer match."""
        logger.info(f"hudilite: {schema}.{identifier} changes its key, partitioning or column types: "
                    "rebuilding it beside the old table")
        with hudilite.Table(path).replacing() as staging:
            return self._write(df, staging, record_key, spec, op, options, schema, identifier, extra_metadata=extra)

    def _compatible(self, path, spec: ModelSpec, record_key, df) -> bool:
        try:
            table = hudilite.Table.open(path)
        except Exception:  # noqa: BLE001 - unreadable: replace it
            return False
        return table.accepts(df, table_type=spec.table_type, record_key=record_key, partition_by=spec.partition_by,
                             precombine_field=spec.precombine_field)

    # ---- incremental runs ------------------------------------------------------------------
    def _incremental(self, schema, identifier, path, df, spec: ModelSpec, entry: CatalogEntry,
                     extra: Optional[Dict[str, str]] = None, force: bool = False):
        table = hudilite.Table.open(path)
        cfg = table.layout()
        stored = table.schema()  # the table's field names, as Hudi stores them (case-sensitive)
        stored_names = list(stored.names) if stored is not None else []
        df, renamed = self._stored_spelling(df, stored_names)
        if renamed:
            spec = spec.spelled_as(df.columns)
        self._check_delete_condition(df, spec, schema, identifier)
        stored_key = list(cfg.record_key)
        keyed = stored_key != [ROW_ID]
        cols = {c.lower() for c in df.columns}
        missing = [k for k in spec.record_key if k.lower() not in cols]
        if missing:
            raise DbtRuntimeError(f"unique_key column(s) {', '.join(repr(k) for k in missing)} of "
                                  f"{schema}.{identifier} are not columns of the model "
                                  f"(columns: {', '.join(df.columns)})")
        # delete+insert on a table keyed by the row id: unique_key is resolved here (_delete_insert)
        by_row_id = not keyed and spec.strategy == "delete+insert" and bool(spec.record_key)
        if spec.record_key and not by_row_id and \
                [k.lower() for k in spec.record_key] != [k.lower() for k in stored_key]:
            raise DbtRuntimeError(
                f"unique_key of {schema}.{identifier} changed (table: {stored_key if keyed else 'none'}, "
                f"model: {spec.record_key}): run it with --full-refresh to rebuild the table")
        record_key = stored_key
        strategy = spec.strategy or ("upsert" if keyed else "append")
        if strategy in ("upsert", "delete+insert") and not keyed and not by_row_id:
            raise DbtRuntimeError(
                f"incremental_strategy '{strategy}' needs a unique_key (the table {schema}.{identifier} has "
                "none): set unique_key and run with --full-refresh, or use 'append' / 'insert_overwrite'")
        if spec.partition_by:
            stored_parts = cfg.partition_by
            if [p.lower() for p in stored_parts] != [p.lower() for p in spec.partition_by]:
                raise DbtRuntimeError(
                    f"partition_by of {schema}.{identifier} changed (table: {stored_parts}, model: "
                    f"{spec.partition_by}): run it with --full-refresh to rebuild the table")
        if spec.table_type != cfg.table_type:  # (the model's default is copy-on-write)
            raise DbtRuntimeError(
                f"table_type of {schema}.{identifier} changed (table: {cfg.table_type}, model: {spec.table_type}): "
                "run it with --full-refresh to rebuild the table")
        df, visible = self._schema_change(df, entry.columns, spec, record_key, cfg, schema, identifier,
                                          stored_names)
        self._check_columns(df, spec, record_key if keyed else [])
        # read on the frame analysed above: a derived frame's columns are analysed anew (a Spark Connect round
        # trip each), and the frames below keep or add the flag column without being listed again
        flagged = IS_DELETED in df.columns
        if flagged and not spec.delete_condition:  # same columns, the flag's nulls as False
            df = df.withColumn(IS_DELETED, spec.deletes(df.columns))
        options = self._options(spec, identifier)
        if strategy == "microbatch":
            self._microbatch_check(df, spec, schema, identifier)
            if spec.delete_condition:  # delete events: their window is replaced without them
                df = df.filter(~spec.deletes())
            if flagged:
                df = df.filter(~F.col(IS_DELETED)).drop(IS_DELETED)
            return self._microbatch(schema, identifier, path, df, spec, record_key, keyed, options, visible,
                                    self._props(spec, record_key, keyed, cfg), extra=extra, force=force)
        if by_row_id:
            df = self._delete_insert(df, path, spec)
            op = "upsert"
        elif strategy in ("upsert", "delete+insert"):
            if spec.delete_condition:  # evaluated on the model's rows, before any stored value is joined in
                df = df.withColumn(IS_DELETED, spec.deletes())
                flagged = True
            partial = strategy == "upsert" and bool(spec.update_columns or spec.exclude_columns)
            if spec.predicates:
                df = self._protect(df, path, record_key, spec.predicates)
            if partial:
                df = self._partial(df, path, record_key, spec, cfg)
            if spec.predicates or partial:  # joined with stored rows: the flag is whatever the join kept
                flagged = IS_DELETED in df.columns
            if flagged:  # the newest event per key decides, deletes included
                options[o.NEWEST_PER_KEY.key] = "true"
            op = "upsert"
        else:
            if spec.delete_condition:
                df = df.filter(~spec.deletes())
            if flagged:
                df = df.filter(~F.col(IS_DELETED)).drop(IS_DELETED)
            if not keyed:
                df = with_row_id(df)
            op = "insert" if strategy == "append" else "insert_overwrite"
        result = self._write(df, path, record_key, spec, op, options, schema, identifier,
                             precombine=spec.precombine_field or cfg.precombine_field)
        self.publish(schema, identifier, path, visible, self._props(spec, record_key, keyed, cfg), entry)
        return response(op, result, path, strategy=strategy)


    # ---- helpers ---------------------------------------------------------------------------
    def _stored_spelling(self, df, stored_names: List[str]):
        """(df, renamed): the model's columns spelled as the table stores them (its Hudi schema's
        `stored_names`, not the catalog entry, which an older publish may have left in another spelling): Spark
        SQL names are case-insensitive, so `amount` in a model is the table's `Amount`, while Hudi's field names
        are not (the write would refuse a column that differs only in letter case). A case-sensitive session
        (spark.sql.caseSensitive) keeps the model's spelling: there they are two columns."""
        spelling = {c.lower(): c for c in stored_names if not is_hidden_column(c)}
        renames = {c: spelling[c.lower()] for c in df.columns
                   if spelling.get(c.lower(), c) != c and not is_hidden_column(c)}
        if not renames or str(self.spark.conf.get("spark.sql.caseSensitive", "false")).lower() == "true":
            return df, False
        return df.withColumnsRenamed(renames), True

    def _check_not_null(self, df, spec: ModelSpec, schema: str, identifier: str) -> None:
        """An enforced contract's not_null constraints, checked on the model's rows before anything is written
        (one Spark job), so a violating batch leaves the table as it was. Rows the write deletes
        (delete_condition, `_hoodie_is_deleted`) are not stored and are not checked."""
        cols = {c.lower(): c for c in df.columns}
        missing = [c for c in spec.not_null if c.lower() not in cols]
        if missing:  # the contract's column check (get_assert_columns_equivalent) normally reports this first
            raise DbtRuntimeError(f"not_null constraint of {schema}.{identifier}: column(s) {missing} are not "
                                  f"columns of the model (columns: {', '.join(df.columns)})")
        deleted = spec.deletes(df.columns)
        rows = df if deleted is None else df.filter(~deleted)
        names = [cols[c.lower()] for c in spec.not_null]
        counts = rows.agg(*[F.count(F.when(F.col(f"`{n}`").isNull(), 1)).alias(f"_c{i}")
                            for i, n in enumerate(names)]).collect()[0]
        bad = [(n, counts[i]) for i, n in enumerate(names) if counts[i]]
        if bad:
            raise DbtRuntimeError(
                f"hudilite: NOT NULL constraint violated in {schema}.{identifier}: "
                + ", ".join(f"column {n!r} is null in {k} row(s)" for n, k in bad)
                + " of the model's result; nothing was written, the table is unchanged")

    def _check_delete_condition(self, df, spec: ModelSpec, schema: str, identifier: str) -> None:
        """A delete_condition that does not analyse on the model's columns fails naming it: a classic session
        analyses it here, without a job (over Spark Connect the write reports it, the table unchanged)."""
        if not spec.delete_condition or is_connect(self.spark):
            return
        try:
            df.select(spec.deletes())
        except (AnalysisException, ParseException) as e:
            raise DbtRuntimeError(f"delete_condition {spec.delete_condition!r} of {schema}.{identifier}: "
                                  f"{error_text(e)}") from None

    def _check_columns(self, df, spec: ModelSpec, record_key) -> None:
        cols = {c.lower() for c in df.columns}
        for role, names in (("unique_key", record_key if record_key != [ROW_ID] else []),
                            ("partition_by", spec.partition_by),
                            ("precombine_field", [spec.precombine_field] if spec.precombine_field else [])):
            for n in names:
                if n.lower() not in cols:
                    raise DbtRuntimeError(
                        f"{role} column {n!r} is not a column of the model (columns: {', '.join(df.columns)})")

    def _options(self, spec: ModelSpec, identifier: str) -> Dict[str, str]:
        opts = dict(spec.hoodie_options)
        # The core evaluates its input twice unless told to persist it; model SQL is often non-deterministic
        # (current_timestamp() in snapshots' dbt_scd_id, uuid(), rand(), our row ids), and two different
        # evaluations lose or duplicate rows. Persist by default; `options: {hoodie.write.input.persist: false}`
        # opts out for deterministic, cheap models.
        opts.setdefault(o.INPUT_PERSIST.key, "true")
        # a model's batch is usually small: written by the driver-local writer, no Spark jobs (the core's
        # default is off); `options: {hudilite.write.small.batch.enabled: false}` opts a model out
        opts.setdefault(o.SMALL_BATCH.key, "true")
        if spec.record_key:  # unique_key promises one row per key in the table: a key may change partition
            opts.setdefault(o.INDEX_TYPE.key, "GLOBAL_BLOOM")
        opts.setdefault(o.TABLE_NAME.key, re.sub(r"\W", "_", identifier) if not identifier[:1].isdigit()
                        else "_" + re.sub(r"\W", "_", identifier))
        return opts

    def _props(self, spec: ModelSpec, record_key, keyed: bool, cfg=None) -> Dict[str, str]:
        props = dict(spec.table_props)
        props["hudilite.record_key"] = ",".join(record_key) if keyed else ""
        if spec.record_key and not keyed:
            props["hudilite.unique_key"] = ",".join(spec.record_key)
        pcf = spec.precombine_field or (cfg.precombine_field if cfg is not None else None)
        if pcf:
            props["hudilite.precombine_field"] = pcf
        parts = spec.partition_by or (cfg.partition_by if cfg is not None else [])
        if parts:
            props["hudilite.partition_by"] = ",".join(parts)
        props["hudilite.table_type"] = spec.table_type
        return props

    def _write(self, df, path, record_key, spec: ModelSpec, op, options, schema, identifier, precombine=None,
               extra_metadata: Optional[Dict[str, str]] = None, raise_conflicts: bool = False):
        """One commit. `raise_conflicts`: a CommitConflictError (retryable, rolled back) is raised as it is,
        for a caller that retries the write."""
        t0 = time.perf_counter()
        # the upstream ranges this run consumed (hudilite.changes) commit together with its output
        extra = {"dbt.model": f"{schema}.{identifier}",
                 **self.run.commit_metadata(model_key(schema, identifier), path, spec.full_refresh),
                 **window_metadata(spec, schema, identifier), **(extra_metadata or {})}
        try:
            # write_model: hudilite.write, or audit_before_publish / mark_ready (write-audit-publish)
            result = write_model(self, schema, identifier, df, path, record_key=record_key,
                                  # no precombine_field configured: the table's (the core raises on None)
                                  precombine_field=precombine or spec.precombine_field or hudilite.UNSET,
                                  partition_by=spec.partition_by, operation=op, table_type=spec.table_type,
                                  options=options, extra_metadata=extra)
            logger.debug(f"hudilite: {op} into {schema}.{identifier} took {time.perf_counter() - t0:.2f}s "
                         f"(commit {result})")
            return result
        except DbtRuntimeError:
            raise
        except Exception as e:  # noqa: BLE001
            if raise_conflicts and isinstance(e, hudilite.CommitConflictError):
                raise
            raise DbtRuntimeError(
                f"hudilite {op} into {schema}.{identifier} ({path}) failed, the table is unchanged: "
                f"{type(e).__name__}: {error_text(e)}") from None

    _table_locks: Dict[str, threading.Lock] = {}
    _table_locks_guard = threading.Lock()

    @contextlib.contextmanager
    def _table_lock(self, schema: str, identifier: str):
        key = f"{schema}.{identifier}".lower()
        with self._table_locks_guard:
            lock = self._table_locks.setdefault(key, threading.Lock())
        with lock:
            yield



def visible_frame(df):
    """`df` without the `_hoodie_*` meta columns and the hidden row id (of any upstream hudilite table)."""
    drop = [c for c in df.columns if c.lower() in META_FIELDS or c.lower() == ROW_ID]
    return df.drop(*drop) if drop else df


def _seed_text(v) -> Optional[str]:
    if v is None:
        return None
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, dt.datetime):
        return v.isoformat(sep=" ")
    if isinstance(v, dt.date):
        return v.isoformat()
    return str(v)
