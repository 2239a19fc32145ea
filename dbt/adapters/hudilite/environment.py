"""The process-wide hudilite environment: the SparkSession, the warehouse, and every write a model makes.

The adapter (impl.py) is thin and delegates here; macros reach these methods through `@available`
adapter methods. All writes go through the hudilite storage core (`hudilite.write`), one commit per model
run; after each commit the catalog entry is re-pointed at the new snapshot (see catalog.py).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import os
import re
import shutil
import threading
import uuid
from dataclasses import dataclass, replace
from typing import Any, Dict, List, Optional

from dbt.adapters.events.logging import AdapterLogger
from dbt.adapters.exceptions import FailedToConnectError
from dbt_common.exceptions import CompilationError, DbtRuntimeError

import hudilite
from dbt.adapters.hudilite import catalog as cat
from hudilite import replace as table_replace
from hudilite.table import HoodieTable
from hudilite.writer.options import UNSET

logger = AdapterLogger("Hudilite")

META_FIELDS = ("_hoodie_commit_time", "_hoodie_commit_seqno", "_hoodie_record_key", "_hoodie_partition_path",
               "_hoodie_file_name")
ROW_ID = "_hudilite_row_id"  # record key of tables without unique_key (the core needs a key column)
IS_DELETED = "_hoodie_is_deleted"
HIDDEN = set(META_FIELDS) | {ROW_ID, IS_DELETED}
STRATEGIES = ("upsert", "append", "insert_overwrite", "delete+insert")
STRATEGY_ALIASES = {"merge": "upsert", "insert": "append", "delete_insert": "delete+insert"}
SCHEMA_CHANGES = ("ignore", "fail", "append_new_columns", "sync_all_columns")

_process_lock = threading.RLock()
_process_session: Dict[str, Any] = {}  # the SparkSession hudilite built for this process, if any
_warehouse_locks: Dict[str, int] = {}  # lock file -> open descriptor holding its flock (for the process's life)
WAREHOUSE_LOCK = "hudilite.lock"  # in <warehouse>/.metastore


def is_hidden_column(name: str) -> bool:
    n = name.lower()
    return n in HIDDEN or n.startswith("_hoodie_") or n.startswith("_hudilite_")


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
        return cat.PROP_PATH in self.props

    @property
    def path(self) -> Optional[str]:
        return self.props.get(cat.PROP_PATH)


@dataclass
class ModelSpec:
    """A model's hudilite configuration, resolved from dbt config (dbt-spark Hudi names accepted)."""

    record_key: List[str]
    precombine_field: Optional[str]
    partition_by: List[str]
    table_type: str
    strategy: Optional[str]
    predicates: List[str]
    update_columns: Optional[List[str]]
    exclude_columns: Optional[List[str]]
    delete_condition: Optional[str]
    on_schema_change: str
    hoodie_options: Dict[str, str]
    table_props: Dict[str, str]
    location_root: Optional[str]
    full_refresh: bool = False

    @classmethod
    def from_config(cls, cfg: Dict[str, Any]) -> "ModelSpec":
        cfg = dict(cfg or {})
        options = dict(cfg.get("options") or {})
        tblprops = dict(cfg.get("tblproperties") or {})
        merged = {**{str(k): v for k, v in tblprops.items()}, **{str(k): v for k, v in options.items()}}
        hoodie = {k: str(v) for k, v in merged.items() if k.startswith("hoodie.")}
        props = {k: str(v) for k, v in merged.items()
                 if not k.startswith("hoodie.") and k not in ("primaryKey", "preCombineField", "type")}
        unique_key = _unique_names(_as_list(cfg.get("unique_key")))  # dbt accepts ['state', 'state']
        pk = _unique_names(_as_list(merged.get("primaryKey")))
        if pk and unique_key and [k.lower() for k in pk] != [k.lower() for k in unique_key]:
            raise DbtRuntimeError(f"unique_key {unique_key} and options.primaryKey {pk} must name the same columns")
        record_key = unique_key or pk or _as_list(hoodie.get("hoodie.datasource.write.recordkey.field"))
        pcf = cfg.get("precombine_field") or merged.get("preCombineField") or hoodie.get(
            "hoodie.datasource.write.precombine.field")
        if cfg.get("precombine_field") and merged.get("preCombineField") and \
                cfg["precombine_field"] != merged["preCombineField"]:
            raise DbtRuntimeError("precombine_field and options.preCombineField must name the same column")
        parts = _as_list(cfg.get("partition_by")) or _as_list(hoodie.get("hoodie.datasource.write.partitionpath.field"))
        tt = str(cfg.get("table_type") or merged.get("type") or hoodie.get("hoodie.datasource.write.table.type")
                 or "cow").lower()
        table_type = {"cow": "COPY_ON_WRITE", "copy_on_write": "COPY_ON_WRITE", "mor": "MERGE_ON_READ",
                      "merge_on_read": "MERGE_ON_READ"}.get(tt)
        if table_type is None:
            raise DbtRuntimeError(f"table_type {cfg.get('table_type')!r}: expected 'cow' or 'mor'")
        strategy = cfg.get("incremental_strategy")
        if strategy:
            strategy = STRATEGY_ALIASES.get(str(strategy).lower(), str(strategy).lower())
            if strategy not in STRATEGIES:
                raise DbtRuntimeError(
                    f"incremental_strategy {cfg.get('incremental_strategy')!r} is not supported by hudilite; "
                    f"expected one of: {', '.join(STRATEGIES)} (aliases: merge=upsert, insert=append)")
        osc = str(cfg.get("on_schema_change") or "ignore").lower()
        if osc not in SCHEMA_CHANGES:
            raise DbtRuntimeError(f"on_schema_change {osc!r}: expected one of {', '.join(SCHEMA_CHANGES)}")
        upd = cfg.get("merge_update_columns")
        exc = cfg.get("merge_exclude_columns")
        if upd and exc:
            raise DbtRuntimeError("merge_update_columns and merge_exclude_columns cannot both be set")
        preds = cfg.get("incremental_predicates") or []
        if isinstance(preds, str):
            preds = [preds]
        return cls(
            record_key=record_key, precombine_field=pcf or None, partition_by=parts, table_type=table_type,
            strategy=strategy, predicates=[str(p) for p in preds],
            update_columns=_as_list(upd) if upd else None, exclude_columns=_as_list(exc) if exc else None,
            delete_condition=cfg.get("delete_condition") or None, on_schema_change=osc,
            hoodie_options=hoodie, table_props=props, location_root=cfg.get("location_root"),
            full_refresh=bool(cfg.get("full_refresh")),
        )


def _unique_names(names: List[str]) -> List[str]:
    seen, out = set(), []
    for n in names:
        if n.lower() not in seen:
            seen.add(n.lower())
            out.append(n)
    return out


def _as_list(v) -> List[str]:
    if v is None or v == "":
        return []
    if isinstance(v, str):
        return [s.strip() for s in v.split(",") if s.strip()]
    return [str(s) for s in v]


class HudiliteEnvironment:
    def __init__(self, credentials, warehouse: str) -> None:
        self.credentials = credentials
        self.warehouse = warehouse
        self.metastore_dir = os.path.join(warehouse, ".metastore")
        self._spark = None
        self._lock = threading.RLock()
        self.catalog_kind = "not started"
        self.reused_session = False

    # ---- session ---------------------------------------------------------------------------
    @property
    def spark(self):
        if self._spark is None:
            with self._lock:
                if self._spark is None:
                    self._spark = self._open_session()
                    import hudilite

                    hudilite.register(self._spark)
        return self._spark

    def _open_session(self):
        from pyspark.sql import SparkSession

        with _process_lock:
            own = _process_session.get("spark")
            if own is not None and own._sc._jsc is not None:
                if _process_session.get("warehouse") != self.warehouse and \
                        _process_session.get("catalog") == "hive":
                    logger.warning(
                        f"hudilite: this process's SparkSession keeps its catalog in "
                        f"{_process_session.get('metastore')}; warehouse {self.warehouse} shares it")
                self.catalog_kind = _process_session.get("catalog", "hive")
                return own
            existing = SparkSession.getActiveSession() or getattr(SparkSession, "_instantiatedSession", None)
            if existing is not None and existing._sc._jsc is None:
                existing = None
            if existing is not None:
                if self.credentials.reuse_session == "never":
                    raise FailedToConnectError(
                        "hudilite: a SparkSession is already running in this process and the profile sets "
                        "reuse_session: never")
                # A process has one SparkContext: run on it, in a session of our own (own SQL conf and
                # temporary views), sharing its catalog.
                spark = existing.newSession()
                self.reused_session = True
                static = [k for k in self.credentials.spark_conf if _is_static_conf(k)]
                if static:
                    logger.warning(f"hudilite: reusing the running SparkSession; spark_conf {static} cannot "
                                   "change it and is ignored")
                self.catalog_kind = existing.conf.get("spark.sql.catalogImplementation", "in-memory")
                for k, v in self._runtime_conf().items():
                    spark.conf.set(k, v)
                logger.debug(f"hudilite: reusing the running SparkSession (catalog: {self.catalog_kind})")
                return spark
            spark = self._build_session()
            _process_session.update(spark=spark, warehouse=self.warehouse, catalog="hive",
                                    metastore=os.path.join(self.metastore_dir, "metastore_db"))
            self.catalog_kind = "hive"
            return spark

    def _runtime_conf(self) -> Dict[str, str]:
        conf = {"spark.sql.ansi.enabled": "false"}  # as dbt-spark: the Spark 3 semantics its macros expect
        conf.update({k: v for k, v in self.credentials.spark_conf.items() if not _is_static_conf(k)})
        return conf

    def _build_session(self):
        from hudilite.spark.session import local_session

        import warnings

        warnings.filterwarnings("ignore", message="PySpark does not yet fully support pandas")
        if self.credentials.master.startswith("local"):
            os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # no "resolves to a loopback address" noise
        os.makedirs(self.metastore_dir, exist_ok=True)
        db = os.path.join(self.metastore_dir, "metastore_db")
        _take_warehouse_lock(self.metastore_dir, self.warehouse)
        _check_metastore_lock(db, self.warehouse)  # a Spark process without hudilite holding the catalog
        java_opts = f"-Duser.timezone=UTC -Dderby.stream.error.file={os.path.join(self.metastore_dir, 'derby.log')}"
        if not self.credentials.show_spark_logs:
            java_opts += f" -Dlog4j2.configurationFile={_spark_log_config(self.metastore_dir)}"
        conf = {
            "spark.ui.showConsoleProgress": "false",
            "spark.sql.ansi.enabled": "false",
            "spark.driver.extraJavaOptions": java_opts,
        }
        user = dict(self.credentials.spark_conf)
        if "spark.driver.extraJavaOptions" in user:
            user["spark.driver.extraJavaOptions"] = java_opts + " " + user["spark.driver.extraJavaOptions"]
        conf.update(user)
        try:
            spark = local_session(self.credentials.master, app_name="dbt-hudilite", conf=conf,
                                  hive_dir=self.metastore_dir)
        except Exception as e:  # noqa: BLE001
            raise FailedToConnectError(f"hudilite: could not start Spark (master {self.credentials.master}): {e}")
        if not self.credentials.show_spark_logs:
            _quiet_query_errors(spark)
        try:
            spark.sql("show databases").collect()  # boots the metastore now: a locked catalog fails here
        except Exception as e:  # noqa: BLE001
            text = str(e)
            if "Another instance of Derby" in text or "XSDB6" in text:
                raise FailedToConnectError(_locked_message(db, self.warehouse)) from None
            _check_metastore_lock(db, self.warehouse)  # locked while we started: say so
            raise FailedToConnectError(f"hudilite: the catalog at {db} could not be opened: {text[:2000]}")
        return spark

    def describe_session(self) -> str:
        spark = self.spark
        return (f"Spark {spark.version}, master {spark.sparkContext.master}, warehouse {self.warehouse}, "
                f"catalog {self.catalog_kind}"
                + (f" (Derby metastore {os.path.join(self.metastore_dir, 'metastore_db')})"
                   if self.catalog_kind == "hive" and not self.reused_session else "")
                + (" [reused the process's SparkSession]" if self.reused_session else ""))

    # ---- SQL -------------------------------------------------------------------------------
    @contextlib.contextmanager
    def tagged(self, tag: Optional[str]):
        sc = self.spark.sparkContext
        if tag:
            try:
                sc.addJobTag(tag)
            except Exception:  # noqa: BLE001
                tag = None
        try:
            yield
        finally:
            if tag:
                try:
                    sc.removeJobTag(tag)
                except Exception:  # noqa: BLE001
                    pass

    def sql(self, sql: str, tag: Optional[str] = None):
        from pyspark.errors import PySparkException

        with self.tagged(tag):
            try:
                return self.spark.sql(sql)
            except PySparkException as e:
                raise DbtRuntimeError(str(e)) from None

    def collect(self, df, tag: Optional[str] = None):
        with self.tagged(tag):
            return df.collect()

    def cancel(self, tag: str) -> None:
        if self._spark is None:
            return
        try:
            self._spark.sparkContext.cancelJobsWithTag(tag)
        except Exception:  # noqa: BLE001
            pass

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
        return f"{cat.quote_ident(schema)}.{cat.quote_ident(identifier)}"

    def describe(self, schema: str, identifier: str) -> Optional[CatalogEntry]:
        from pyspark.errors import AnalysisException

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
        merged = cat.merged_entry_props(fields)
        if merged is not None:
            props = {**props, **merged}
        return CatalogEntry(schema, identifier, kind, props,
                            [f.name for f in fields if not is_hidden_column(f.name)], merged=merged is not None)

    def create_schema(self, schema: str) -> None:
        path = self.schema_path(schema)
        os.makedirs(path, exist_ok=True)
        self.sql(f"CREATE SCHEMA IF NOT EXISTS {cat.quote_ident(schema)} LOCATION {cat.sql_string(path)}")

    def drop_schema(self, schema: str) -> None:
        self.sql(f"DROP SCHEMA IF EXISTS {cat.quote_ident(schema)} CASCADE")
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
            from dbt.adapters.hudilite.connections import _error_text

            raise DbtRuntimeError(
                f"hudilite: the commit to {path} succeeded but the catalog entry {schema}.{identifier} could not "
                f"be updated (the next run retries): {type(e).__name__}: {_error_text(e)}") from None

    def _publish(self, schema: str, identifier: str, path: str, visible: List[str],
                 props: Dict[str, str], entry: Optional[CatalogEntry]) -> None:
        from hudilite.reader.planner import plan_read
        from hudilite.spark.schema import arrow_to_spark

        import time

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
        snap = cat.publish_snapshot(path, instant, plan.base_files)
        all_props = {**props, cat.PROP_PATH: path, cat.PROP_INSTANT: instant, cat.PROP_SNAPSHOT: snap}
        name = self.qualified(schema, identifier)
        spark = self.spark
        same_schema = False
        if entry is not None and entry.is_hudilite and entry.kind == "TABLE" and not entry.merged:
            current = [(f.name.lower(), f.dataType.simpleString()) for f in spark.table(name).schema.fields]
            same_schema = current == [(f.name.lower(), f.dataType.simpleString()) for f in cols]
        if same_schema:
            stale = [k for k in entry.props if k.startswith("hudilite.") and k not in all_props]
            if stale:
                self.sql(f"ALTER TABLE {name} UNSET TBLPROPERTIES IF EXISTS ({', '.join(cat.sql_string(k) for k in stale)})")
            self.sql(f"ALTER TABLE {name} SET TBLPROPERTIES ({cat.props_sql(all_props)})")
            self.sql(f"ALTER TABLE {name} SET LOCATION {cat.sql_string(snap)}")
        else:
            if entry is not None:
                self.sql(f"DROP {'VIEW' if entry.kind == 'VIEW' else 'TABLE'} IF EXISTS {name}")
            self.sql(f"CREATE TABLE {name} ({cat.columns_ddl(cols)}) USING parquet "
                     f"LOCATION {cat.sql_string(snap)} TBLPROPERTIES ({cat.props_sql(all_props)})")
        try:
            spark.catalog.refreshTable(name)
        except Exception:  # noqa: BLE001
            pass
        cat.prune_snapshots(path, snap)
        logger.debug(f"hudilite: published {schema}.{identifier} at {instant} ({len(plan.base_files)} files, "
                     f"{'moved' if same_schema else 'created'}) in {time.perf_counter() - t0:.2f}s")

    def _publish_merged(self, schema: str, identifier: str, path: str, cols, props: Dict[str, str],
                        entry: Optional[CatalogEntry]) -> None:
        """A merge-on-read table's entry reads the latest committed merged snapshot through the hudilite data
        source, so it only changes when the columns or properties do (catalog.py)."""
        all_props = {**props, cat.PROP_PATH: path}
        struct = cat.merged_entry_schema(path, cols, all_props)
        name = self.qualified(schema, identifier)
        if entry is not None and entry.merged and entry.kind == "TABLE":
            def shape(fields):  # column comments (persist_docs) are not part of what is published
                return [(f.name, f.dataType.simpleString(), f.metadata.get(cat.PATH_KEY),
                         f.metadata.get(cat.ENTRY_KEY)) for f in fields]

            if shape(self.spark.table(name).schema.fields) == shape(struct.fields):
                return
        if entry is not None:
            self.sql(f"DROP {'VIEW' if entry.kind == 'VIEW' else 'TABLE'} IF EXISTS {name}")
        # DDL has no syntax for field metadata: the catalog API stores the schema as given (EXTERNAL: dropping
        # the entry never deletes the table directory)
        self.spark.catalog.createTable(f"{schema}.{identifier}", source="hudilite", schema=struct, path=path)

    # ---- SQL DML on hudilite tables -----------------------------------------------------------
    def run_dml(self, sql: str, tag: Optional[str] = None):
        """UPDATE / DELETE / INSERT / TRUNCATE on a hudilite table as one hudilite commit; None when `sql`
        is not such a statement (it then goes to Spark)."""
        from dbt.adapters.hudilite import dml as dml_mod

        d = dml_mod.parse(sql)
        if d is None:
            return None
        schema = d.schema or self.spark.catalog.currentDatabase()
        entry = self.describe(schema, d.identifier)
        if d.kind == "ctas":  # CREATE TABLE ... AS SELECT: a hudilite table (dbt's `test` store_failures, hooks)
            if entry is not None and not d.replace:
                if d.if_not_exists:
                    from dbt.adapters.contracts.connection import AdapterResponse

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

    def _run_dml(self, d, schema: str, entry: CatalogEntry):
        import hudilite
        from hudilite.table import HoodieTable
        from pyspark.sql import functions as F

        path = entry.path
        cfg = HoodieTable.open(path).config
        current = hudilite.read(self.spark, path)
        data_cols = [c for c in current.columns if c not in META_FIELDS]
        types = {c: current.schema[c].dataType for c in data_cols}
        lower = {c.lower(): c for c in data_cols}
        if d.alias:
            current = current.alias(d.alias)
        cond = F.coalesce(F.expr(d.where).cast("boolean"), F.lit(False)) if d.where else F.lit(True)
        keyed = list(cfg.record_key_fields) != [ROW_ID]
        added: List[str] = []
        if d.kind == "add_columns":
            # the Hudi schema gets the nullable columns through an empty upsert commit (schema evolution), so
            # every reader (catalog, hudi-rs) sees them, null in the stored rows
            from pyspark.sql.types import CharType, DataType, StringType, StructField, StructType, VarcharType

            fields = list(current.select(*[F.col(f"`{c}`") for c in data_cols]).schema.fields)
            for name, typ in d.new_columns:
                if name.lower() in lower or is_hidden_column(name):
                    raise DbtRuntimeError(f"ALTER TABLE {schema}.{d.identifier} ADD COLUMNS: column {name!r} exists")
                dtype = DataType.fromDDL(typ)
                if isinstance(dtype, (CharType, VarcharType)):
                    dtype = StringType()
                fields.append(StructField(name, dtype, True))
                added.append(name)
            df, op = self.spark.createDataFrame([], StructType(fields)), "upsert"
        elif d.kind == "update":
            sets = {}
            for col, expr in d.assignments:
                if col.lower() not in lower or is_hidden_column(col):
                    raise DbtRuntimeError(f"UPDATE {schema}.{d.identifier}: no column {col!r}")
                sets[lower[col.lower()]] = expr
            keys = {k.lower() for k in cfg.record_key_fields}
            if keyed and keys & {c.lower() for c in sets}:
                raise DbtRuntimeError(f"UPDATE {schema}.{d.identifier}: the record key ({', '.join(cfg.record_key_fields)}) "
                                      "cannot be updated")
            df = current.filter(cond).select(*[
                (F.expr(sets[c]).cast(types[c]).alias(c) if c in sets else F.col(f"`{c}`")) for c in data_cols])
            op = "upsert"
        elif d.kind == "delete":
            df, op = current.filter(cond).select(*[F.col(f"`{c}`") for c in data_cols]), "delete"
        elif d.kind == "truncate":
            df = self.spark.createDataFrame([], current.select(*[F.col(f"`{c}`") for c in data_cols]).schema)
            op = "insert_overwrite_table"
        else:
            src = self.model_frame(d.query)
            target = d.columns or entry.columns
            if len(src.columns) != len(target):
                raise DbtRuntimeError(f"INSERT into {schema}.{d.identifier}: {len(src.columns)} values for "
                                      f"{len(target)} columns ({', '.join(target)})")
            missing = [c for c in target if c.lower() not in lower]
            if missing:
                raise DbtRuntimeError(f"INSERT into {schema}.{d.identifier}: no column(s) {missing}")
            df = src.select(*[F.col(f"`{s}`").cast(types[lower[t.lower()]]).alias(lower[t.lower()])
                              for s, t in zip(src.columns, target)])
            if not keyed:
                df = _with_row_id(df)
            op = "insert" if d.kind == "insert" else "insert_overwrite_table"
        parts = list(cfg.partition_fields) if cfg.is_partitioned else []
        try:
            result = hudilite.write(df, path, record_key=list(cfg.record_key_fields),
                                    precombine_field=cfg.precombine_field or None, partition_by=parts,
                                    operation=op, table_type=cfg.table_type,
                                    options={"hoodie.table.name": cfg.name, "hoodie.write.input.persist": "true"})
        except Exception as e:  # noqa: BLE001
            from dbt.adapters.hudilite.connections import _error_text

            raise DbtRuntimeError(f"hudilite {d.kind.upper()} on {schema}.{d.identifier} failed, the table is "
                                  f"unchanged: {type(e).__name__}: {_error_text(e)}") from None
        props = {k: v for k, v in entry.props.items() if not k.startswith(("hudilite.path", "hudilite.instant",
                                                                          "hudilite.snapshot", "transient_"))}
        props = {k: v for k, v in props.items() if not k.startswith("spark.sql.")}
        self.publish(schema, d.identifier, path, entry.columns + added, props, entry)
        return self._response(op, result, path)

    # ---- models ----------------------------------------------------------------------------
    def model_frame(self, sql: str):
        """The model's rows as a DataFrame, without the `_hoodie_*` meta columns (of any upstream table)."""
        sql = sql.strip()
        while sql.endswith(";"):
            sql = sql[:-1].rstrip()
        df = self.sql(sql)
        drop = [c for c in df.columns if c.lower() in META_FIELDS or c.lower() == ROW_ID]
        return df.drop(*drop) if drop else df

    def materialize(self, schema: str, identifier: str, sql: str, kind: str, cfg: Dict[str, Any]):
        import time

        t0 = time.perf_counter()
        try:
            return self._materialize(schema, identifier, sql, kind, cfg)
        finally:
            logger.debug(f"hudilite: {schema}.{identifier} materialized in {time.perf_counter() - t0:.2f}s")

    def _materialize(self, schema: str, identifier: str, sql: str, kind: str, cfg: Dict[str, Any]):
        spec = ModelSpec.from_config(cfg)
        with self._table_lock(schema, identifier):
            entry = self.describe(schema, identifier)
            path = self.table_path(schema, identifier, spec)
            if entry is not None and entry.path and os.path.normpath(entry.path) != path:
                logger.warning(f"hudilite: {schema}.{identifier} moves from {entry.path} to {path}")
            if kind == "incremental" and not spec.full_refresh:
                spec = self._rebuild_if_upstream_rebuilt(schema, identifier, spec)
            df = self.model_frame(sql)
            drop = [c for c in df.columns if c.lower() in {d.lower() for d in cfg.get("drop_columns") or ()}]
            if drop:
                df = df.drop(*drop)
            if cfg.get("cast_to_target") and entry is not None and entry.kind == "TABLE":
                # store assignment (as an INSERT/MERGE into the table would): values take the stored column
                # types. Snapshots need it: dbt's staging query mixes the source's types (e.g. a `date`
                # updated_at) with snapshot_get_time()'s timestamp.
                from pyspark.sql import functions as F

                stored = {f.name.lower(): f.dataType for f in self.spark.table(self.qualified(schema, identifier)).schema}
                df = df.select(*[F.col(f"`{c}`").cast(stored[c.lower()]).alias(c) if c.lower() in stored
                                 and df.schema[c].dataType != stored[c.lower()] else F.col(f"`{c}`")
                                 for c in df.columns])
            from hudilite.table import HoodieTable

            incremental = (kind == "incremental" and entry is not None and entry.is_hudilite
                           and entry.kind == "TABLE" and not spec.full_refresh
                           and os.path.normpath(entry.path or "") == path and HoodieTable.exists(path))
            if incremental:
                return self._incremental(schema, identifier, path, df, spec, entry)
            return self._build(schema, identifier, path, df, spec, entry)

    def _rebuild_if_upstream_rebuilt(self, schema: str, identifier: str, spec: ModelSpec) -> ModelSpec:
        """An incremental model whose checkpoint names another table than one of its upstreams now is (the
        upstream was rebuilt at its path) is rebuilt from its upstreams' snapshots, as --full-refresh would:
        the rebuilt upstream's timeline does not continue the checkpoint, and the full overwrite is one commit
        whose change read gives the model's own consumers the deletes and updates it implies. An `append`
        model cannot be recomputed from a snapshot (its rows are the history of what it consumed): it fails,
        naming --full-refresh."""
        from dbt.adapters.hudilite.incremental import model_key, rebuild_reads, run_state

        key = model_key(schema, identifier)
        if not run_state(self).rebuilding(key):
            return spec
        rebuilt = run_state(self).reads(key)[0]
        strategy = spec.strategy or ("upsert" if spec.record_key else "append")
        if strategy == "append":
            run_state(self).take(key)
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
        from pyspark.sql import functions as F
        from pyspark.sql.types import StringType, StructField, StructType

        spec = ModelSpec.from_config(cfg)
        spec.full_refresh = True
        with self._table_lock(schema, identifier):
            entry = self.describe(schema, identifier)
            path = self.table_path(schema, identifier, spec)
            names = [f"_c{i}" for i in range(len(columns))]
            raw = self.spark.createDataFrame([[_seed_text(v) for v in r] for r in rows],
                                             StructType([StructField(n, StringType()) for n in names]))
            df = raw.select(*[F.expr(f"CAST({cat.quote_ident(n)} AS {t})").alias(c)
                              for n, c, t in zip(names, columns, types)])
            return self._build(schema, identifier, path, df, spec, entry, seed=True)

    # ---- full builds -----------------------------------------------------------------------
    def _build(self, schema, identifier, path, df, spec: ModelSpec, entry, seed: bool = False):
        from hudilite.table import HoodieTable
        from pyspark.sql import functions as F

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
        deleted = None
        if spec.delete_condition:
            deleted = F.coalesce(F.expr(f"({spec.delete_condition})").cast("boolean"), F.lit(False))
        elif IS_DELETED in df.columns:
            deleted = F.coalesce(F.col(IS_DELETED).cast("boolean"), F.lit(False))
        if deleted is not None:
            if keyed:  # the newest event per key decides, deletes included
                df = _latest_per_key(df.withColumn(IS_DELETED, deleted), record_key, spec.precombine_field)
            else:
                df = df.filter(~deleted)
                if IS_DELETED in df.columns:
                    df = df.drop(IS_DELETED)
        visible = [c for c in df.columns if not is_hidden_column(c)]
        self._check_columns(df, spec, record_key)
        if not keyed:
            df = _with_row_id(df)
        options = self._options(spec, identifier)
        exists = HoodieTable.exists(path)
        removed = self._snapshot_rows(path) if exists else None  # the rows this build replaces
        if exists and self._compatible(path, spec, record_key, df):
            op = "insert_overwrite_table"
            result = self._write(df, path, record_key, spec, op, options, schema, identifier)
        elif exists:
            op = "bulk_insert" if not keyed else "insert"
            result = self._rebuild_beside(df, path, record_key, spec, op, options, schema, identifier)
        else:
            # keyed with a precombine_field (or delete_condition): change events, insert de-duplicates keys
            # (the highest precombine value wins); otherwise the model's rows are written as they are (dbt:
            # unique_key applies to merges, not to the first build)
            op = "insert" if keyed and (spec.precombine_field or deleted is not None) else "bulk_insert"
            result = self._write(df, path, record_key, spec, op, options, schema, identifier)
        self.publish(schema, identifier, path, visible, self._props(spec, record_key, keyed), entry)
        return self._response(op, result, path, seed=seed, removed=removed)

    def _snapshot_rows(self, path: str) -> Optional[int]:
        try:
            rows = HoodieTable.open(path).snapshot_stats()["rows"]
            if rows is None:  # merge-on-read slices with log files: only the merged read counts them
                rows = hudilite.read(self.spark, path).count()
            return rows
        except Exception as e:  # noqa: BLE001 - an unreadable table is replaced all the same (_compatible)
            logger.debug(f"hudilite: rows of {path} before its rebuild: {e}")
            return None

    def _rebuild_beside(self, df, path, record_key, spec, op, options, schema, identifier):
        """The new table cannot be a commit on the old one (record key, partitioning or an incompatible
        column type changed): write it beside the old table, then swap the directories (hudilite.replace: a
        crash at any point leaves the old or the new table at the path, never nothing). The new table has a
        new table id, so the checkpoints of its consumers no longer match it (they rebuild)."""
        logger.info(f"hudilite: {schema}.{identifier} changes its key, partitioning or column types: "
                    "rebuilding it beside the old table")
        with table_replace.staging_dir(path) as staging:
            result = self._write(df, staging, record_key, spec, op, options, schema, identifier)
            table_replace.swap(path, staging)
        return result

    def _compatible(self, path, spec: ModelSpec, record_key, df) -> bool:
        from hudilite.schema import SchemaError, avro_to_arrow, evolve
        from hudilite.spark.schema import spark_to_arrow
        from hudilite.table import HoodieTable

        try:
            table = HoodieTable.open(path)
        except Exception:  # noqa: BLE001 - unreadable: replace it
            return False
        cfg = table.config
        if cfg.table_type != spec.table_type:
            return False
        if list(cfg.record_key_fields) != list(record_key):
            return False
        stored_parts = list(cfg.partition_fields) if cfg.is_partitioned else []
        if stored_parts != list(spec.partition_by):
            return False
        if cfg.precombine_field:
            if spec.precombine_field and spec.precombine_field != cfg.precombine_field:
                return False
            if cfg.precombine_field not in df.columns:
                return False
        elif spec.precombine_field:
            return False
        try:
            stored = table.timeline.schema_json() or cfg.create_schema
            if stored:
                evolve(avro_to_arrow(stored), spark_to_arrow(df.schema))
        except (SchemaError, ValueError):
            return False
        return True

    # ---- incremental runs ------------------------------------------------------------------
    def _incremental(self, schema, identifier, path, df, spec: ModelSpec, entry: CatalogEntry):
        from hudilite.table import HoodieTable
        from pyspark.sql import functions as F

        cfg = HoodieTable.open(path).config
        stored_key = list(cfg.record_key_fields)
        keyed = stored_key != [ROW_ID]
        cols = {c.lower() for c in df.columns}
        missing = [k for k in spec.record_key if k.lower() not in cols]
        if missing:
            raise DbtRuntimeError(f"unique_key column(s) {', '.join(repr(k) for k in missing)} of {schema}.{identifier} "
                                  f"are not columns of the model (columns: {', '.join(df.columns)})")
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
            stored_parts = list(cfg.partition_fields) if cfg.is_partitioned else []
            if [p.lower() for p in stored_parts] != [p.lower() for p in spec.partition_by]:
                raise DbtRuntimeError(
                    f"partition_by of {schema}.{identifier} changed (table: {stored_parts}, model: "
                    f"{spec.partition_by}): run it with --full-refresh to rebuild the table")
        if IS_DELETED in df.columns and not spec.delete_condition:
            df = df.withColumn(IS_DELETED, F.coalesce(F.col(IS_DELETED).cast("boolean"), F.lit(False)))

        df, visible = self._schema_change(df, entry.columns, spec, record_key, cfg, schema, identifier)
        self._check_columns(df, spec, record_key if keyed else [])
        options = self._options(spec, identifier)
        if by_row_id:
            df = self._delete_insert(df, path, spec)
            op = "upsert"
        elif strategy in ("upsert", "delete+insert"):
            if spec.delete_condition:  # evaluated on the model's rows, before any stored value is joined in
                df = df.withColumn(IS_DELETED, F.coalesce(F.expr(f"({spec.delete_condition})").cast("boolean"),
                                                          F.lit(False)))
            if spec.predicates:
                df = self._protect(df, path, record_key, spec.predicates)
            if strategy == "upsert" and (spec.update_columns or spec.exclude_columns):
                df = self._partial(df, path, record_key, spec, cfg)
            if IS_DELETED in df.columns:
                df = _latest_per_key(df, record_key, spec.precombine_field or cfg.precombine_field)
            op = "upsert"
        else:
            if spec.delete_condition:
                df = df.filter(~F.coalesce(F.expr(f"({spec.delete_condition})").cast("boolean"), F.lit(False)))
            if IS_DELETED in df.columns:
                df = df.filter(~F.col(IS_DELETED)).drop(IS_DELETED)
            if not keyed:
                df = _with_row_id(df)
            op = "insert" if strategy == "append" else "insert_overwrite"
        result = self._write(df, path, record_key, spec, op, options, schema, identifier,
                             precombine=spec.precombine_field or cfg.precombine_field)
        self.publish(schema, identifier, path, visible, self._props(spec, record_key, keyed, cfg), entry)
        return self._response(op, result, path, strategy=strategy)

    def _delete_insert(self, df, path, spec: ModelSpec):
        """delete+insert on a row-id keyed table, as ONE upsert commit: the stored rows whose unique_key is in
        the batch (and that satisfy incremental_predicates) are deleted, every batch row is inserted (rows
        matching delete_condition only delete). dbt's semantics: keys compare with `=` (null keys never match),
        duplicate keys in the batch are all inserted, a protected stored row stays beside the new one."""
        from pyspark.sql import functions as F

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
        inserted = _with_row_id(batch.filter(~F.col("__hl_del")).select(*[F.col(f"`{c}`") for c in data]))
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
        import hudilite

        return hudilite.read(self.spark, path)

    def _protect(self, df, path, record_key, predicates):
        """incremental_predicates: stored rows that do not satisfy them are protected; incoming rows with
        their keys are dropped (a Hudi table holds one row per key, so they cannot be added beside them)."""
        from pyspark.sql import functions as F

        cond = " AND ".join(f"({p})" for p in predicates)
        target = self._target_frame(path).alias("DBT_INTERNAL_DEST")
        protected = target.filter(~F.coalesce(F.expr(cond), F.lit(False))).select(
            *[F.col(f"DBT_INTERNAL_DEST.`{k}`").alias(f"__hl_k{i}") for i, k in enumerate(record_key)])
        on = [df[f"`{k}`"].eqNullSafe(protected[f"__hl_k{i}"]) for i, k in enumerate(record_key)]
        return df.join(protected, on=on, how="left_anti")

    def _partial(self, df, path, record_key, spec: ModelSpec, cfg):
        """merge_update_columns / merge_exclude_columns: rows whose key is stored keep the stored values of
        the other columns; new rows are inserted whole (dbt's merge semantics), in one upsert commit."""
        from pyspark.sql import functions as F

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

    # ---- helpers ---------------------------------------------------------------------------
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
        opts.setdefault("hoodie.write.input.persist", "true")
        if spec.record_key:  # unique_key promises one row per key in the table: a key may change partition
            opts.setdefault("hoodie.index.type", "GLOBAL_BLOOM")
        opts.setdefault("hoodie.table.name", re.sub(r"\W", "_", identifier) if not identifier[:1].isdigit()
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
        parts = spec.partition_by or (list(cfg.partition_fields) if cfg is not None and cfg.is_partitioned else [])
        if parts:
            props["hudilite.partition_by"] = ",".join(parts)
        props["hudilite.table_type"] = spec.table_type
        return props

    def _write(self, df, path, record_key, spec: ModelSpec, op, options, schema, identifier, precombine=None):
        import time

        from dbt.adapters.hudilite.incremental import checkpoint_metadata, write_model

        t0 = time.perf_counter()
        # the upstream ranges this run consumed (hudilite.changes) commit together with its output
        extra = {"dbt.model": f"{schema}.{identifier}",
                 **checkpoint_metadata(self, schema, identifier, path, spec.full_refresh)}
        try:
            # write_model: hudilite.write, or audit_before_publish / mark_ready (write-audit-publish)
            result = write_model(self, schema, identifier, df, path, record_key=record_key,
                                  # no precombine_field configured: the table's (the core raises on None)
                                  precombine_field=precombine or spec.precombine_field or UNSET,
                                  partition_by=spec.partition_by, operation=op, table_type=spec.table_type,
                                  options=options, extra_metadata=extra)
            logger.debug(f"hudilite: {op} into {schema}.{identifier} took {time.perf_counter() - t0:.2f}s "
                         f"(commit {result})")
            return result
        except DbtRuntimeError:
            raise
        except Exception as e:  # noqa: BLE001
            from dbt.adapters.hudilite.connections import _error_text

            raise DbtRuntimeError(
                f"hudilite {op} into {schema}.{identifier} ({path}) failed, the table is unchanged: "
                f"{type(e).__name__}: {_error_text(e)}") from None

    @staticmethod
    def _response(op: str, result, path: str, strategy: Optional[str] = None, seed: bool = False,
                  removed: Optional[int] = None):
        from dbt.adapters.hudilite.impl import HudiliteAdapterResponse

        stats = dict(getattr(result, "stats", {}) or {})
        ins, upd, dele = (int(stats.get("inserted", 0)), int(stats.get("updated", 0)),
                          int(stats.get("deleted", 0)))
        code = op.upper()
        msg = f"{code} {ins} inserted, {upd} updated, {dele} deleted"
        if seed:
            msg = f"INSERT {ins}"
        if removed is not None:  # a full build over an existing table: its rows are gone too
            msg += f", {removed} removed"
        return HudiliteAdapterResponse(
            _message=msg, code=code, rows_affected=ins + upd + dele + (removed or 0), rows_inserted=ins,
            rows_updated=upd, rows_removed=removed,
            rows_deleted=dele, commit_time=str(result), operation=op, strategy=strategy, table_path=path,
            files_written=int(stats.get("files", 0)), replaced_file_groups=int(stats.get("replaced_file_groups", 0)),
        )

    _table_locks: Dict[str, threading.Lock] = {}
    _table_locks_guard = threading.Lock()

    @contextlib.contextmanager
    def _table_lock(self, schema: str, identifier: str):
        key = f"{schema}.{identifier}".lower()
        with self._table_locks_guard:
            lock = self._table_locks.setdefault(key, threading.Lock())
        with lock:
            yield


def _with_row_id(df):
    """A unique, increasing record key for tables without unique_key: `<UTC time>-<row id>` (increasing keys
    keep the core's range index from ever looking inside old files)."""
    from pyspark.sql import functions as F

    prefix = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%d%H%M%S%f") + "-" + uuid.uuid4().hex[:6]
    return df.withColumn(ROW_ID, F.concat(F.lit(prefix + "-"),
                                          F.lpad(F.monotonically_increasing_id().cast("string"), 20, "0")))


def _latest_per_key(df, record_key, precombine):
    """Keep each key's newest row (highest precombine value, then latest arrival), deletes included.

    Works around the core dropping a delete whose key is not stored yet *before* de-duplicating: a key
    inserted and deleted in the same batch would otherwise be inserted (reported to the core)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    seq, rn = "__hl_arrival", "__hl_rn"
    order = ([F.col(f"`{precombine}`").desc_nulls_last()] if precombine else []) + [F.col(seq).desc()]
    w = Window.partitionBy(*[F.col(f"`{k}`") for k in record_key]).orderBy(*order)
    return (df.withColumn(seq, F.monotonically_increasing_id()).withColumn(rn, F.row_number().over(w))
            .filter(F.col(rn) == 1).drop(seq, rn))


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


_STATIC_PREFIXES = ("spark.driver.", "spark.executor.", "spark.master", "spark.app.", "spark.jars",
                    "spark.sql.warehouse.dir", "spark.sql.catalogImplementation", "spark.hadoop.",
                    "spark.serializer", "spark.ui.", "spark.local.dir", "spark.sql.extensions")


def _is_static_conf(key: str) -> bool:
    return key.startswith(_STATIC_PREFIXES)


SPARK_LOG = "spark.log"  # in <warehouse>/.metastore: Spark's own log of the last session on the warehouse
_LOG4J2 = """# written by the hudilite dbt adapter: Spark's log goes to a file, not to the dbt console
rootLogger.level = warn
rootLogger.appenderRef.file.ref = file
appender.file.type = File
appender.file.name = file
appender.file.fileName = {log}
appender.file.append = false
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = %d{{yy/MM/dd HH:mm:ss}} %p %c{{1}}: %m%n%ex
"""


def _spark_log_config(metastore_dir: str) -> str:
    """A log4j2 configuration for the driver JVM that sends every log line to <metastore_dir>/spark.log. Spark's
    default one writes to stderr, which is dbt's console: a failing query logs its stack as JSON lines and
    Java frames there before dbt's own summary. Overwritten per session (the warehouse lock makes the session
    the only one on this warehouse)."""
    path = os.path.join(metastore_dir, "log4j2.properties")
    with open(path, "w") as f:
        f.write(_LOG4J2.format(log=os.path.join(metastore_dir, SPARK_LOG)))
    return path


def _quiet_query_errors(spark) -> None:
    """Spark 4 logs every failed query's whole stack as JSON (logger SQLQueryContextLogger); dbt reports the
    error itself, so keep that logger quiet."""
    try:
        jvm = spark.sparkContext._jvm
        jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(
            "SQLQueryContextLogger", jvm.org.apache.logging.log4j.Level.OFF)
    except Exception:  # noqa: BLE001
        pass


def _locked_message(db: str, warehouse: str) -> str:
    return (f"hudilite: the catalog of warehouse {warehouse} is locked by another process (Derby metastore "
            f"{db} is in use: another dbt or Spark process is running on this warehouse). Wait for it to "
            "finish, or give this run its own warehouse.")


def _take_warehouse_lock(metastore_dir: str, warehouse: str) -> None:
    """Take the warehouse's exclusive lock before starting a JVM, or fail at once: Derby admits one process
    per metastore, but its own lock file exists only once a JVM has booted it, so two processes starting
    together would both pass a check of it and one would die in the metastore boot. flock is atomic, and the
    kernel drops it when the process ends however it ends (no stale lock). Held for the life of the process:
    the session's catalog stays in use until the process exits."""
    lock = os.path.join(metastore_dir, WAREHOUSE_LOCK)
    with _process_lock:
        if lock in _warehouse_locks:
            return
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)  # not inherited by the JVM (PEP 446)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise FailedToConnectError(
                _locked_message(os.path.join(metastore_dir, "metastore_db"), warehouse)) from None
        _warehouse_locks[lock] = fd


def _check_metastore_lock(db: str, warehouse: str) -> None:
    """Fail fast (before starting a JVM) when another process has the embedded Derby metastore booted: a
    Spark process that is not hudilite's (a notebook, spark-sql on the warehouse) takes no warehouse lock."""
    lock = os.path.join(db, "dbex.lck")
    if not os.path.exists(lock):
        return
    try:
        fd = os.open(lock, os.O_RDWR)
    except OSError:
        return
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        raise FailedToConnectError(_locked_message(db, warehouse)) from None
    else:
        fcntl.lockf(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
