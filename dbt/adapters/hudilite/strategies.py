"""Incremental strategies' dbt semantics over a hudilite upsert: incremental_predicates, merge_update_columns /
merge_exclude_columns, delete+insert on tables without a record key, on_schema_change; and the row id of
tables without unique_key. Each turns the model's rows into the rows of ONE hudilite commit.
"""

from __future__ import annotations

from typing import List

from dbt.adapters.events.logging import AdapterLogger
from dbt_common.exceptions import CompilationError, DbtRuntimeError
from pyspark.sql import functions as F

import hudilite
from dbt.adapters.hudilite.model_config import IS_DELETED, ROW_ID, ModelSpec, is_hidden_column
from hudilite import sql_merge

logger = AdapterLogger("Hudilite")


class StrategiesMixin:
    """The environment's incremental strategies (HudiliteEnvironment)."""

    def _delete_insert(self, df, path, spec: ModelSpec):
        """delete+insert on a row-id keyed table, as ONE upsert commit (hudilite.sql_merge.delete_insert);
        rows matching delete_condition (or flagged `_hoodie_is_deleted`) only delete."""
        flag = spec.deletes(df.columns)
        if flag is None:
            flag = F.lit(False)
        batch = df.withColumn("__hl_del", flag)
        if IS_DELETED in batch.columns:
            batch = batch.drop(IS_DELETED)
        return sql_merge.delete_insert(batch, "__hl_del", self._target_frame(path), spec.record_key,
                                       spec.predicates, ROW_ID, IS_DELETED)

    def _schema_change(self, df, target: List[str], spec: ModelSpec, record_key, cfg, schema, identifier,
                       stored_names: List[str]):
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
        # sync_all_columns removed these from the catalog only (below): their old values are still stored, and
        # would read again as the re-added column's
        kept = {c.lower() for c in stored_names if not is_hidden_column(c)}
        back = [c for c in added if c.lower() in kept]
        if back:
            raise DbtRuntimeError(
                f"{schema}.{identifier}: column(s) {back} were removed from the model earlier "
                "(on_schema_change='sync_all_columns'), but the table still stores their old values, which "
                "would read again as the new column's: run it with --full-refresh to rebuild the table, or give "
                "the column another name")
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
        """incremental_predicates: stored rows that do not satisfy them are protected."""
        return sql_merge.protect(df, self._target_frame(path), record_key, predicates)

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
        return sql_merge.keep_stored(df, self._target_frame(path), record_key, keep_stored)


def with_row_id(df):
    """A unique, increasing record key for tables without unique_key."""
    return sql_merge.with_row_id(df, ROW_ID)
