"""Incremental strategies' dbt semantics over a hudilite upsert: incremental_predicates, merge_update_columns /
merge_exclude_columns, delete+insert on tables without a record key, on_schema_change; and the row id of
tables without unique_key. Each turns the model's rows into the rows of ONE hudilite commit.
"""

from __future__ import annotations

import datetime as dt
import uuid
from typing import List

from dbt.adapters.events.logging import AdapterLogger
from dbt_common.exceptions import CompilationError, DbtRuntimeError
from pyspark.sql import Window
from pyspark.sql import functions as F

import hudilite
from dbt.adapters.hudilite.model_config import IS_DELETED, ROW_ID, ModelSpec, is_hidden_column

logger = AdapterLogger("Hudilite")


class StrategiesMixin:
    """The environment's incremental strategies (HudiliteEnvironment)."""

    def _delete_insert(self, df, path, spec: ModelSpec):
        """delete+insert on a row-id keyed table, as ONE upsert commit: the stored rows whose unique_key is in
        the batch (and that satisfy incremental_predicates) are deleted, every batch row is inserted (rows
        matching delete_condition only delete). dbt's semantics: keys compare with `=` (null keys never match),
        duplicate keys in the batch are all inserted, a protected stored row stays beside the new one."""
        flag = (F.coalesce(F.expr(f"({spec.delete_condition})").cast("boolean"), F.lit(False))
                if spec.delete_condition else
                F.coalesce(F.col(IS_DELETED).cast("boolean"), F.lit(False)) if IS_DELETED in df.columns
                else F.lit(False))
        batch = df.withColumn("__hl_del", flag)
        if IS_DELETED in batch.columns:
            batch = batch.drop(IS_DELETED)
        target = self._target_frame(path)
        tcols = {c.lower(): c for c in target.columns}
        keys = batch.select(*[F.col(f"`{k}`").alias(f"__hl_k{i}") for i, k in enumerate(spec.record_key)]).distinct()
        dest = target.alias("DBT_INTERNAL_DEST")
        if spec.predicates:
            dest = dest.filter(F.coalesce(F.expr(" AND ".join(f"({p})" for p in spec.predicates)), F.lit(False)))
        on = [F.col(f"DBT_INTERNAL_DEST.`{tcols[k.lower()]}`") == keys[f"__hl_k{i}"]
              for i, k in enumerate(spec.record_key)]
        data = [c for c in batch.columns if c != "__hl_del"]
        stored = [c for c in data if c.lower() in tcols]
        deleted = dest.join(keys, on=on, how="left_semi").select(
            F.col(f"DBT_INTERNAL_DEST.`{ROW_ID}`").alias(ROW_ID),
            *[F.col(f"DBT_INTERNAL_DEST.`{tcols[c.lower()]}`").cast(batch.schema[c].dataType).alias(c)
              for c in stored],
            *[F.lit(None).cast(batch.schema[c].dataType).alias(c) for c in data if c not in stored],
            F.lit(True).alias(IS_DELETED))
        inserted = with_row_id(batch.filter(~F.col("__hl_del")).select(*[F.col(f"`{c}`") for c in data]))
        inserted = inserted.withColumn(IS_DELETED, F.lit(False))
        return deleted.unionByName(inserted.select(*deleted.columns))

    def _schema_change(self, df, target: List[str], spec: ModelSpec, record_key, cfg, schema, identifier):
        incoming = [c for c in df.columns if not is_hidden_column(c)]
        t_lower = {c.lower() for c in target}
        i_lower = {c.lower() for c in incoming}
        added = [c for c in incoming if c.lower() not in t_lower]
        removed = [c for c in target if c.lower() not in i_lower]
        osc = spec.on_schema_change
        if not added and not removed:
            return df, target
        required = {c.lower() for c in list(record_key) + list(spec.partition_by)
                    + [spec.precombine_field or cfg.precombine_field or ""] if c}
        if osc == "fail":
            raise CompilationError(
                f"The source and target schemas on this incremental model ({schema}.{identifier}) are out of "
                f"sync! New columns in the model: {added or 'none'}; columns missing from the model: "
                f"{removed or 'none'}. Set on_schema_change to append_new_columns or sync_all_columns, or run "
                "with --full-refresh.")
        if osc == "ignore":
            keep = [c for c in df.columns if c.lower() in t_lower or c.lower() in required or c == IS_DELETED]
            return df.select(*[f"`{c}`" for c in keep]), target
        if osc == "append_new_columns":
            logger.info(f"hudilite: {schema}.{identifier}: adding columns {added}")
            return df, target + added
        # sync_all_columns: the table (catalog) gets the model's columns; removed ones stay in the Hudi
        # schema (nullable) but leave the catalog.
        logger.info(f"hudilite: {schema}.{identifier}: adding columns {added}, removing {removed}")
        return df, [c for c in target if c.lower() in i_lower] + added

    def _target_frame(self, path):
        return hudilite.read(self.spark, path)

    def _protect(self, df, path, record_key, predicates):
        """incremental_predicates: stored rows that do not satisfy them are protected; incoming rows with
        their keys are dropped (a Hudi table holds one row per key, so they cannot be added beside them)."""
        cond = " AND ".join(f"({p})" for p in predicates)
        target = self._target_frame(path).alias("DBT_INTERNAL_DEST")
        protected = target.filter(~F.coalesce(F.expr(cond), F.lit(False))).select(
            *[F.col(f"DBT_INTERNAL_DEST.`{k}`").alias(f"__hl_k{i}") for i, k in enumerate(record_key)])
        on = [df[f"`{k}`"].eqNullSafe(protected[f"__hl_k{i}"]) for i, k in enumerate(record_key)]
        return df.join(protected, on=on, how="left_anti")

    def _partial(self, df, path, record_key, spec: ModelSpec, cfg):
        """merge_update_columns / merge_exclude_columns: rows whose key is stored keep the stored values of
        the other columns; new rows are inserted whole (dbt's merge semantics), in one upsert commit."""
        cols = [c for c in df.columns if not is_hidden_column(c)]
        lower = {c.lower(): c for c in cols}
        fixed = {c.lower() for c in list(record_key) + list(spec.partition_by)}
        pcf = spec.precombine_field or cfg.precombine_field
        if spec.update_columns is not None:
            upd = {c.lower() for c in spec.update_columns}
            missing = [c for c in spec.update_columns if c.lower() not in lower]
            if missing:
                raise DbtRuntimeError(f"merge_update_columns {missing} are not columns of the model")
            keep_stored = [c for c in cols if c.lower() not in upd and c.lower() not in fixed
                           and (not pcf or c.lower() != pcf.lower())]
        else:
            exc = {c.lower() for c in spec.exclude_columns}
            keep_stored = [c for c in cols if c.lower() in exc and c.lower() not in fixed]
        target = self._target_frame(path)
        tcols = {c.lower(): c for c in target.columns}
        keep_stored = [c for c in keep_stored if c.lower() in tcols]
        if not keep_stored:
            return df
        t = target.select(*[F.col(f"`{tcols[k.lower()]}`").alias(f"__hl_k{i}") for i, k in enumerate(record_key)],
                          *[F.col(f"`{tcols[c.lower()]}`").alias(f"__hl_v{j}") for j, c in enumerate(keep_stored)],
                          F.lit(True).alias("__hl_matched"))
        on = [df[f"`{k}`"].eqNullSafe(t[f"__hl_k{i}"]) for i, k in enumerate(record_key)]
        j = df.join(t, on=on, how="left")
        out = []
        idx = {c: n for n, c in enumerate(keep_stored)}
        for c in df.columns:
            if c in idx:
                out.append(F.when(F.col("__hl_matched"), F.col(f"__hl_v{idx[c]}").cast(df.schema[c].dataType))
                           .otherwise(F.col(f"`{c}`")).alias(c))
            else:
                out.append(df[f"`{c}`"])
        return j.select(*out)


def with_row_id(df):
    """A unique, increasing record key for tables without unique_key: `<UTC time>-<row id>` (increasing keys
    keep the core's range index from ever looking inside old files)."""

    prefix = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%d%H%M%S%f") + "-" + uuid.uuid4().hex[:6]
    return df.withColumn(ROW_ID, F.concat(F.lit(prefix + "-"),
                                          F.lpad(F.monotonically_increasing_id().cast("string"), 20, "0")))


def latest_per_key(df, record_key, precombine):
    """Keep each key's newest row (highest precombine value, then latest arrival), deletes included.

    Works around the core dropping a delete whose key is not stored yet *before* de-duplicating: a key
    inserted and deleted in the same batch would otherwise be inserted (reported to the core)."""
    seq, rn = "__hl_arrival", "__hl_rn"
    order = ([F.col(f"`{precombine}`").desc_nulls_last()] if precombine else []) + [F.col(seq).desc()]
    w = Window.partitionBy(*[F.col(f"`{k}`") for k in record_key]).orderBy(*order)
    return (df.withColumn(seq, F.monotonically_increasing_id()).withColumn(rn, F.row_number().over(w))
            .filter(F.col(rn) == 1).drop(seq, rn))
