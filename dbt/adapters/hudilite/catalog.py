"""The environment's catalog: where models live, their metastore entries, and publishing a commit to them.

The entry of a hudilite table is described in hudilite/metastore.py (a parquet table over a directory of
hard links to the latest snapshot's base files; a `hudilite` data source table for merge-on-read).
"""

from __future__ import annotations

import os
import shutil
import time
from typing import Any, Dict, List, Optional

from dbt.adapters.events.logging import AdapterLogger
from dbt_common.exceptions import DbtRuntimeError

import hudilite
from dbt.adapters.hudilite.model_config import ModelSpec
from dbt.adapters.hudilite.response import error_text
from dbt.adapters.hudilite.run_state import model_key
from hudilite import metastore as ms
from hudilite.metastore import CatalogEntry
from hudilite.storage import is_local, normalize_path, storage_for

logger = AdapterLogger("Hudilite")


class CatalogMixin:
    """The environment's catalog: table locations, entries, schemas, publishing a commit (HudiliteEnvironment)."""

    # ---- catalog ---------------------------------------------------------------------------
    def table_path(self, schema: str, identifier: str, spec: Optional[ModelSpec] = None) -> str:
        return self.model_path(schema, identifier, spec.location_root if spec is not None else None)

    def model_path(self, schema: str, identifier: str, location_root: Optional[str] = None) -> str:
        """Where the model `schema.identifier` is written: under its `location_root`, else the schema's path."""
        if location_root:
            root = location_root
            if not is_local(root):
                return normalize_path(f"{root.rstrip('/')}/{identifier}")
            if root.startswith("file://"):
                root = root[len("file://"):]
            if not os.path.isabs(root):
                root = self._join(self.warehouse, root)
                if not is_local(root):
                    return normalize_path(f"{root}/{identifier}")
            return os.path.normpath(os.path.join(root, identifier))
        return self._join(self.warehouse, schema, identifier)

    def schema_path(self, schema: str) -> str:
        return self._join(self.warehouse, schema)

    @staticmethod
    def _join(base: str, *parts: str) -> str:
        # os.path.join on a URI would be wrong on no platform we run, but normpath collapses its `//`
        return os.path.join(base, *parts) if is_local(base) else "/".join([base.rstrip("/"), *parts])

    def schema_location(self, schema: str) -> str:
        """The LOCATION of the schema in the catalog. The metastore creates and checks it through Hadoop's file
        systems, and pyspark's JVM has none for s3:// (no hadoop-aws): an object-store warehouse's schemas are
        catalog-only directories under the local metastore dir. Its tables' entries name their s3:// location
        and are read through the hudilite data source (hudilite/metastore.py), so the JVM never opens it."""
        if is_local(self.warehouse):
            return self.schema_path(schema)
        return os.path.join(self.metastore_dir, "schemas", f"{schema}.db")

    qualified = staticmethod(ms.qualified)

    def describe(self, schema: str, identifier: str) -> Optional[CatalogEntry]:
        return ms.describe(self.spark, schema, identifier)

    def upstream_path(self, schema: str, identifier: str) -> Optional[str]:
        """The table path of `schema.identifier` when it is a hudilite table, else None: as this invocation
        published it (a model read by the next ones), else from its entry."""
        known = self.known.path(model_key(schema, identifier))
        if known is not None:
            return known
        entry = self.describe(schema, identifier)
        return entry.table_path if entry is not None else None  # a path only on a hudilite table's entry

    def compile_entry(self, schema: str, identifier: str) -> Optional[CatalogEntry]:
        """The model's own entry while its SQL is compiled (its `hudilite.changes()` checkpoint), noted for its
        build (`build_entry`), which then asks the catalog no second time."""
        key = model_key(schema, identifier)
        entry = self.known.entry(key)
        if entry is self.known.UNKNOWN:
            entry = self.describe(schema, identifier)
            self.known.note_entry(key, entry)
        return entry

    def build_entry(self, schema: str, identifier: str) -> Optional[CatalogEntry]:
        """The model's entry at the start of its build: as its compilation described it when no statement has
        run since (`KnownEntries`), else described now."""
        entry = self.known.entry(model_key(schema, identifier), take=True)
        return self.describe(schema, identifier) if entry is self.known.UNKNOWN else entry

    def snapshot_stats(self, schema: str, identifier: str) -> Optional[Dict[str, Any]]:
        """Docs catalog statistics of a hudilite table: its latest snapshot's rows and bytes, from commit
        metadata and file sizes (no data read). Rows are left out where only a merge would count them."""
        entry = self.describe(schema, identifier)
        if entry is None or not entry.table_path:
            return None
        st = hudilite.Table.open(entry.table_path).stats()
        out: Dict[str, Any] = {}
        for key, label, value, what in (("rows", "Rows", st["rows"], "rows in the latest snapshot"),
                                        ("bytes", "Bytes", st["bytes"], "size of the latest snapshot's base files")):
            if value is not None:
                out.update({f"stats:{key}:label": label, f"stats:{key}:value": value,
                            f"stats:{key}:description": what, f"stats:{key}:include": True})
        return out

    def create_schema(self, schema: str) -> None:
        path = self.schema_location(schema)
        os.makedirs(path, exist_ok=True)
        self.sql(f"CREATE SCHEMA IF NOT EXISTS {ms.quote_ident(schema)} LOCATION {ms.sql_string(path)}")

    def drop_schema(self, schema: str) -> None:
        self.sql(f"DROP SCHEMA IF EXISTS {ms.quote_ident(schema)} CASCADE")
        path = self.schema_path(schema)
        if is_local(path):
            if os.path.isdir(path):  # hudilite tables are external to the metastore: remove their data too
                shutil.rmtree(path, ignore_errors=True)
        else:
            storage_for(path).delete_tree(path)
            shutil.rmtree(self.schema_location(schema), ignore_errors=True)

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
        if path and is_local(path):
            if os.path.isfile(os.path.join(path, ".hoodie", "hoodie.properties")):
                shutil.rmtree(path, ignore_errors=True)
        elif path and storage_for(path).exists(f"{path}/.hoodie/hoodie.properties"):
            storage_for(path).delete_tree(path)

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
        key = model_key(schema, identifier)
        self.known.published(key, None)  # while the entry changes
        what = ms.publish(self.spark, schema, identifier, path, visible, props, entry,
                          sql=lambda statement: self.sql(statement, entry_ddl=True))
        self.known.published(key, path)
        if self.parent_session is not None:
            # the caller's own session (a notebook running dbt) has its own relation cache, which may hold the
            # entry as it was before this commit
            try:
                self.parent_session.catalog.refreshTable(ms.qualified(schema, identifier))
            except Exception as e:  # noqa: BLE001 - a stale cache only: it expires by itself
                logger.debug(f"hudilite: refreshing {schema}.{identifier} in the running session failed: {e}")
        logger.debug(f"hudilite: published {schema}.{identifier} {what} in {time.perf_counter() - t0:.2f}s")
