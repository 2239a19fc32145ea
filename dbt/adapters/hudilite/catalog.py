"""The environment's catalog: where models live, their metastore entries, and publishing a commit to them.

The entry of a hudilite table is described in hudilite/metastore.py (a parquet table over a directory of
hard links to the latest snapshot's base files; a `hudilite` data source table for merge-on-read).
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass
from typing import Any, Dict, List, Optional

from dbt.adapters.events.logging import AdapterLogger
from dbt_common.exceptions import DbtRuntimeError
from pyspark.errors import AnalysisException

from dbt.adapters.hudilite.model_config import ModelSpec, is_hidden_column
from dbt.adapters.hudilite.response import error_text
from hudilite import metastore as ms
from hudilite.reader.planner import plan_read
from hudilite.spark.schema import arrow_to_spark
from hudilite.table import HoodieTable

logger = AdapterLogger("Hudilite")


@dataclass
class CatalogEntry:
    schema: str
    identifier: str
    kind: str  # TABLE | VIEW
    props: Dict[str, str]
    columns: List[str]  # visible columns (meta columns removed)
    location: Optional[str] = None
    merged: bool = False  # a merge-on-read entry over the hudilite data source (catalog.py)

    @property
    def is_hudilite(self) -> bool:
        return ms.PROP_PATH in self.props

    @property
    def path(self) -> Optional[str]:
        return self.props.get(ms.PROP_PATH)



class CatalogMixin:
    """The environment's catalog: table locations, entries, schemas, publishing a commit (HudiliteEnvironment)."""

    # ---- catalog ---------------------------------------------------------------------------
    def table_path(self, schema: str, identifier: str, spec: Optional[ModelSpec] = None) -> str:
        if spec is not None and spec.location_root:
            root = spec.location_root
            if root.startswith("file://"):
                root = root[len("file://"):]
            if not os.path.isabs(root):
                root = os.path.join(self.warehouse, root)
            return os.path.normpath(os.path.join(root, identifier))
        return os.path.join(self.warehouse, schema, identifier)

    def schema_path(self, schema: str) -> str:
        return os.path.join(self.warehouse, schema)

    @staticmethod
    def qualified(schema: str, identifier: str) -> str:
        return f"{ms.quote_ident(schema)}.{ms.quote_ident(identifier)}"

    def describe(self, schema: str, identifier: str) -> Optional[CatalogEntry]:
        spark = self.spark
        name = self.qualified(schema, identifier)
        try:
            if not spark.catalog.tableExists(name):
                return None
            t = spark.catalog.getTable(name)
            props = {r[0]: r[1] for r in spark.sql(f"SHOW TBLPROPERTIES {name}").collect()}
            fields = spark.table(name).schema.fields
        except AnalysisException:
            return None
        kind = "VIEW" if (t.tableType or "").upper() == "VIEW" else "TABLE"
        merged = ms.merged_entry_props(fields)
        if merged is not None:
            props = {**props, **merged}
        return CatalogEntry(schema, identifier, kind, props,
                            [f.name for f in fields if not is_hidden_column(f.name)], merged=merged is not None)

    def snapshot_stats(self, schema: str, identifier: str) -> Optional[Dict[str, Any]]:
        """Docs catalog statistics of a hudilite table: its latest snapshot's rows and bytes, from commit
        metadata and file sizes (no data read). Rows are left out where only a merge would count them."""
        entry = self.describe(schema, identifier)
        if entry is None or not entry.path:
            return None
        st = HoodieTable.open(entry.path).snapshot_stats()
        out: Dict[str, Any] = {}
        for key, label, value, what in (("rows", "Rows", st["rows"], "rows in the latest snapshot"),
                                        ("bytes", "Bytes", st["bytes"], "size of the latest snapshot's base files")):
            if value is not None:
                out.update({f"stats:{key}:label": label, f"stats:{key}:value": value,
                            f"stats:{key}:description": what, f"stats:{key}:include": True})
        return out

    def create_schema(self, schema: str) -> None:
        path = self.schema_path(schema)
        os.makedirs(path, exist_ok=True)
        self.sql(f"CREATE SCHEMA IF NOT EXISTS {ms.quote_ident(schema)} LOCATION {ms.sql_string(path)}")

    def drop_schema(self, schema: str) -> None:
        self.sql(f"DROP SCHEMA IF EXISTS {ms.quote_ident(schema)} CASCADE")
        path = self.schema_path(schema)
        if os.path.isdir(path):  # hudilite tables are external to the metastore: remove their data too
            shutil.rmtree(path, ignore_errors=True)

    def drop_relation(self, schema: str, identifier: str, rel_type: Optional[str] = None) -> None:
        entry = self.describe(schema, identifier)
        name = self.qualified(schema, identifier)
        if entry is None:
            if rel_type == "view":
                self.sql(f"DROP VIEW IF EXISTS {name}")
            else:
                self.sql(f"DROP TABLE IF EXISTS {name}")
            return
        self.sql(f"DROP {'VIEW' if entry.kind == 'VIEW' else 'TABLE'} IF EXISTS {name}")
        path = entry.path
        if path and os.path.isfile(os.path.join(path, ".hoodie", "hoodie.properties")):
            shutil.rmtree(path, ignore_errors=True)

    def publish(self, schema: str, identifier: str, path: str, visible: List[str],
                props: Dict[str, str], entry: Optional[CatalogEntry]) -> None:
        """Point the catalog entry `schema.identifier` at the latest committed snapshot of `path`."""
        try:
            self._publish(schema, identifier, path, visible, props, entry)
        except DbtRuntimeError:
            raise
        except Exception as e:  # noqa: BLE001
            raise DbtRuntimeError(
                f"hudilite: the commit to {path} succeeded but the catalog entry {schema}.{identifier} could not "
                f"be updated (the next run retries): {type(e).__name__}: {error_text(e)}") from None

    def _publish(self, schema: str, identifier: str, path: str, visible: List[str],
                 props: Dict[str, str], entry: Optional[CatalogEntry]) -> None:
        t0 = time.perf_counter()
        plan = plan_read(path)
        fields = {f.name: f for f in arrow_to_spark(plan.schema).fields}
        lower = {k.lower(): v for k, v in fields.items()}
        cols = []  # the model's columns only: `_hoodie_*` meta columns stay in the files, out of `select *`
        for c in visible:
            f = fields.get(c) or lower.get(c.lower())
            if f is not None and not is_hidden_column(f.name):
                cols.append(f)
        instant = plan.as_of or ""
        if plan.table.config.table_type == "MERGE_ON_READ":
            self._publish_merged(schema, identifier, path, cols, props, entry)
            logger.debug(f"hudilite: published {schema}.{identifier} (merge-on-read) in "
                         f"{time.perf_counter() - t0:.2f}s")
            return
        snap = ms.publish_snapshot(path, instant, plan.base_files)
        all_props = {**props, ms.PROP_PATH: path, ms.PROP_INSTANT: instant, ms.PROP_SNAPSHOT: snap}
        name = self.qualified(schema, identifier)
        spark = self.spark
        same_schema = False
        if entry is not None and entry.is_hudilite and entry.kind == "TABLE" and not entry.merged:
            current = [(f.name.lower(), f.dataType.simpleString()) for f in spark.table(name).schema.fields]
            same_schema = current == [(f.name.lower(), f.dataType.simpleString()) for f in cols]
        if same_schema:
            stale = [k for k in entry.props if k.startswith("hudilite.") and k not in all_props]
            if stale:
                self.sql(f"ALTER TABLE {name} UNSET TBLPROPERTIES IF EXISTS ({', '.join(ms.sql_string(k) for k in stale)})")
            self.sql(f"ALTER TABLE {name} SET TBLPROPERTIES ({ms.props_sql(all_props)})")
            self.sql(f"ALTER TABLE {name} SET LOCATION {ms.sql_string(snap)}")
        else:
            if entry is not None:
                self.sql(f"DROP {'VIEW' if entry.kind == 'VIEW' else 'TABLE'} IF EXISTS {name}")
            self.sql(f"CREATE TABLE {name} ({ms.columns_ddl(cols)}) USING parquet "
                     f"LOCATION {ms.sql_string(snap)} TBLPROPERTIES ({ms.props_sql(all_props)})")
        try:
            spark.catalog.refreshTable(name)
        except Exception:  # noqa: BLE001
            pass
        ms.prune_snapshots(path, snap)
        logger.debug(f"hudilite: published {schema}.{identifier} at {instant} ({len(plan.base_files)} files, "
                     f"{'moved' if same_schema else 'created'}) in {time.perf_counter() - t0:.2f}s")

    def _publish_merged(self, schema: str, identifier: str, path: str, cols, props: Dict[str, str],
                        entry: Optional[CatalogEntry]) -> None:
        """A merge-on-read table's entry reads the latest committed merged snapshot through the hudilite data
        source, so it only changes when the columns or properties do (catalog.py)."""
        all_props = {**props, ms.PROP_PATH: path}
        struct = ms.merged_entry_schema(path, cols, all_props)
        name = self.qualified(schema, identifier)
        if entry is not None and entry.merged and entry.kind == "TABLE":
            def shape(fields):  # column comments (persist_docs) are not part of what is published
                return [(f.name, f.dataType.simpleString(), f.metadata.get(ms.PATH_KEY),
                         f.metadata.get(ms.ENTRY_KEY)) for f in fields]

            if shape(self.spark.table(name).schema.fields) == shape(struct.fields):
                return
        if entry is not None:
            self.sql(f"DROP {'VIEW' if entry.kind == 'VIEW' else 'TABLE'} IF EXISTS {name}")
        # DDL has no syntax for field metadata: the catalog API stores the schema as given (EXTERNAL: dropping
        # the entry never deletes the table directory)
        self.spark.catalog.createTable(f"{schema}.{identifier}", source="hudilite", schema=struct, path=path)
