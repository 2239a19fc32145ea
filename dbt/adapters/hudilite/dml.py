"""SQL DML on hudilite tables in a dbt run (hooks, `run-operation`, dbt's test utilities).

A hudilite table's catalog entry is a parquet table over a snapshot directory, so Spark itself would either
refuse these statements or (INSERT) write stray parquet files that are not part of the Hudi table. The core's
`hudilite.sql_dml` recognises them and runs each as one hudilite commit; this module resolves the statement's
`schema.table` through the catalog, republishes the entry and maps errors to dbt's. CREATE TABLE ... AS SELECT
becomes a hudilite table model; anything else goes to Spark unchanged.
"""

from __future__ import annotations

from typing import Optional

from dbt.adapters.contracts.connection import AdapterResponse
from dbt_common.exceptions import DbtRuntimeError

from dbt.adapters.hudilite.catalog import CatalogEntry
from dbt.adapters.hudilite.response import error_text, response
from hudilite import sql_dml


class DmlMixin:
    """The environment's DML on hudilite tables (HudiliteEnvironment)."""

    # ---- SQL DML on hudilite tables -----------------------------------------------------------
    def run_dml(self, sql: str, tag: Optional[str] = None):
        """UPDATE / DELETE / INSERT / TRUNCATE on a hudilite table as one hudilite commit; None when `sql`
        is not such a statement (it then goes to Spark)."""
        d = sql_dml.parse(sql)
        if d is None:
            return None
        schema = d.schema or self.spark.catalog.currentDatabase()
        entry = self.describe(schema, d.identifier)
        if d.kind == "ctas":  # CREATE TABLE ... AS SELECT: a hudilite table (dbt's `test` store_failures, hooks)
            if entry is not None and not d.replace:
                if d.if_not_exists:
                    return AdapterResponse(_message="OK")
                return None  # Spark reports that the table exists
            if entry is not None and entry.kind == "VIEW":
                self.sql(f"DROP VIEW IF EXISTS {self.qualified(schema, d.identifier)}")
            with self.tagged(tag):
                return self.materialize(schema, d.identifier, d.query, "table",
                                        {"partition_by": d.partition_by, "full_refresh": True})
        if entry is None or not entry.is_hudilite or entry.kind != "TABLE":
            return None
        with self.tagged(tag), self._table_lock(schema, d.identifier):
            return self._run_dml(d, schema, entry)

    def _run_dml(self, d: sql_dml.Dml, schema: str, entry: CatalogEntry):
        path = entry.path
        # INSERT's query runs as a model's would (without upstream meta columns)
        src = self.model_frame(d.query) if d.kind in ("insert", "overwrite") else None
        try:
            out = sql_dml.execute(self.spark, d, path, f"{schema}.{d.identifier}", query_frame=src,
                                  columns=entry.columns)
        except sql_dml.DmlError as e:
            raise DbtRuntimeError(str(e)) from None
        except sql_dml.DmlWriteError as w:
            e = w.__cause__
            raise DbtRuntimeError(f"hudilite {d.kind.upper()} on {schema}.{d.identifier} failed, the table is "
                                  f"unchanged: {type(e).__name__}: {error_text(e)}") from None
        props = {k: v for k, v in entry.props.items() if not k.startswith(("hudilite.path", "hudilite.instant",
                                                                          "hudilite.snapshot", "transient_"))}
        props = {k: v for k, v in props.items() if not k.startswith("spark.sql.")}
        self.publish(schema, d.identifier, path, entry.columns + out.added_columns, props, entry)
        return response(out.operation, out.result, path)
