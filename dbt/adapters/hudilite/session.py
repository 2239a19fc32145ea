"""The SparkSession of a dbt process on a warehouse: opened lazily, reused when one runs, locked per warehouse.

One JVM and one SparkContext per process; a session hudilite builds keeps its catalog in an embedded Derby
metastore under `<warehouse>/.metastore`, which admits one process: an flock on the warehouse makes a second
process fail at once instead of in the metastore boot. Spark's own log goes to a file there.
"""

from __future__ import annotations

import contextlib
import os
import threading
import weakref
from typing import Any, Dict, Optional

from dbt.adapters.events.logging import AdapterLogger
from dbt.adapters.exceptions import FailedToConnectError
from dbt_common.exceptions import DbtRuntimeError
from pyspark.errors import PySparkException
from pyspark.sql import SparkSession

import hudilite
from hudilite import server, warehouse
from hudilite.spark.session import is_connect, query_frame

logger = AdapterLogger("Hudilite")

BASE_CONF = {"spark.sql.ansi.enabled": "false"}  # as dbt-spark: the Spark 3 semantics its macros expect
# a Connect client's errors carry the server's Java stack (~80 lines of frames on the dbt console for a failing
# model's SQL); classic PySpark leaves it out unless spark.sql.pyspark.jvmStacktrace.enabled
CONNECT_QUIET_CONF = {"spark.sql.connect.serverStacktrace.enabled": "false"}

_process_lock = threading.RLock()
_process_session: Dict[str, Any] = {}  # the SparkSession hudilite built for this process, if any
# the sessions made from the process's running one -> that one: an earlier environment's session can be the
# active one later (PySpark makes a session active when it creates a DataFrame), and the session to refresh
# after a commit is still the caller's
_made_from: "weakref.WeakKeyDictionary[Any, Any]" = weakref.WeakKeyDictionary()



class SessionMixin:
    """The environment's session and SQL (HudiliteEnvironment)."""

    # ---- session ---------------------------------------------------------------------------
    @property
    def spark(self):
        if self._spark is None:
            with self._lock:
                if self._spark is None:
                    self._spark = self._open_session()

                    hudilite.register(self._spark)
        return self._spark

    def _open_session(self):
        if self.credentials.method == "connect":
            return self._connect_session()
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
                self.parent_session = _made_from.get(existing, existing)
                _made_from[spark] = self.parent_session
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

    def _connect_session(self):
        """A Spark Connect session to the profile's `host`: the server owns the catalog (and its lock), this
        process plans and commits the writes, the server's Python workers write the files."""
        c = self.credentials
        try:
            # dbt-spark's setting goes with the session's creation (no round trip of its own); PySpark sends
            # those ignoring failures, so the profile's own settings are set one by one below, where a bad one
            # fails with Spark's error
            conf = BASE_CONF if c.show_spark_logs else {**BASE_CONF, **CONNECT_QUIET_CONF}
            local = None if "://" in self.warehouse else self.warehouse  # for the start command in errors
            spark = server.connect(c.host, token=c.token, use_ssl=c.use_ssl, conf=conf, warehouse=local)
        except hudilite.HudiliteError as e:  # no server answers there
            raise FailedToConnectError(f"hudilite: {e}") from None
        except Exception as e:  # noqa: BLE001 - a bad URL, TLS or token: Spark Connect's own message
            raise FailedToConnectError(server.redact_url(
                f"hudilite: could not connect to the Spark Connect server {c.host}: {e}")) from None
        static = [k for k in c.spark_conf if _is_static_conf(k)]
        if static:
            logger.warning(f"hudilite: method connect: spark_conf {static} are the server's settings and are "
                           "ignored here")
        for k, v in self._runtime_conf().items():
            if BASE_CONF.get(k) != v:
                spark.conf.set(k, v)
        if not c.show_spark_logs:  # PySpark's client logs each failed query's stack: dbt reports the error
            warehouse.quiet_query_errors(spark)
        # the catalog kind is the server's; asked for when described (dbt debug), not on every start
        self.catalog_kind = None
        return spark

    def _runtime_conf(self) -> Dict[str, str]:
        conf = dict(BASE_CONF)
        conf.update({k: v for k, v in self.credentials.spark_conf.items() if not _is_static_conf(k)})
        return conf

    def _build_session(self):
        try:
            return warehouse.open_session(self.credentials.master, self.warehouse, self.metastore_dir,
                                          self.credentials.spark_conf, app_name="dbt-hudilite",
                                          show_spark_logs=self.credentials.show_spark_logs)
        except hudilite.HudiliteError as e:  # the warehouse is locked, or Spark or its catalog did not start
            raise FailedToConnectError(str(e) + self._served_hint(e)) from None

    def _served_hint(self, e: Exception) -> str:
        """For a warehouse locked by its own `hudilite server`: the profile that uses it instead."""
        running = server.read_state(self.warehouse) if isinstance(e, warehouse.WarehouseLockedError) else None
        if running is None or not server.answers(running.host, running.port):
            return ""
        return (f" It is held by this warehouse's Spark Connect server (pid {running.pid}, {running.url}): set "
                f"`method: connect` and `host: {running.url}` in the profile to run there, or stop the server "
                f"(hudilite server stop --warehouse {self.warehouse}).")

    def describe_session(self) -> str:
        spark = self.spark
        if is_connect(spark):
            if self.catalog_kind is None:
                self.catalog_kind = spark.conf.get("spark.sql.catalogImplementation", "in-memory")
            return (f"Spark {spark.version} over Spark Connect {self.credentials.host}, warehouse {self.warehouse}, "
                    f"catalog {self.catalog_kind} (the server's)")
        return (f"Spark {spark.version}, master {spark.sparkContext.master}, warehouse {self.warehouse}, "
                f"catalog {self.catalog_kind}"
                + (f" (Derby metastore {os.path.join(self.metastore_dir, 'metastore_db')})"
                   if self.catalog_kind == "hive" and self.parent_session is None else "")
                + (" [reused the process's SparkSession]" if self.parent_session is not None else ""))

    # ---- SQL -------------------------------------------------------------------------------
    @contextlib.contextmanager
    def tagged(self, tag: Optional[str]):
        # Spark Connect tags the session's operations (per thread), classic the SparkContext's jobs
        sc = self.spark if is_connect(self.spark) else self.spark.sparkContext
        add, remove = ("addTag", "removeTag") if sc is self.spark else ("addJobTag", "removeJobTag")
        if tag:
            try:
                getattr(sc, add)(tag)
            except Exception:  # noqa: BLE001
                tag = None
        try:
            yield
        finally:
            if tag:
                try:
                    getattr(sc, remove)(tag)
                except Exception:  # noqa: BLE001
                    pass

    def sql(self, sql: str, tag: Optional[str] = None, entry_ddl: bool = False):
        """Run a statement. `entry_ddl`: the adapter's own DDL of the entry it publishes, which changes no
        other entry; any other statement may change any, so the catalog facts the invocation holds go."""
        if not entry_ddl:
            self.known.forget()
        with self.tagged(tag), _dbt_errors():
            return self.spark.sql(sql)

    def temp_view(self, name: str, df) -> None:
        """`df` as the session's temporary view `name`; on a Spark Connect session created only once a statement
        other than a model's query names it (`DeferredViews`)."""
        if is_connect(self.spark):
            self.deferred.put(name, df)
        else:
            df.createOrReplaceTempView(name)

    def create_named_views(self, sql: str) -> None:
        """Create the deferred temporary views the statement `sql` names, before it runs."""
        for name, df in self.deferred.named_in(sql).items():
            with _dbt_errors():
                df.createOrReplaceTempView(name)
            self.deferred.created(name, df)

    def query(self, sql: str):
        """The frame of a model's query, analysed (its columns known), errors as `sql`'s: a Spark Connect
        session sends the query once, for its analysis, with the deferred views it names
        (hudilite.spark.session.query_frame)."""
        with _dbt_errors():
            df = query_frame(self.spark, sql, self.deferred.named_in(sql))
            df.columns  # noqa: B018 - the analysis, where a bad query fails
            return df

    def collect(self, df, tag: Optional[str] = None):
        with self.tagged(tag):
            return df.collect()

    def cancel(self, tag: str) -> None:
        if self._spark is None:
            return
        try:
            if is_connect(self._spark):
                self._spark.interruptTag(tag)
            else:
                self._spark.sparkContext.cancelJobsWithTag(tag)
        except Exception:  # noqa: BLE001
            pass


_STATIC_PREFIXES = ("spark.driver.", "spark.executor.", "spark.master", "spark.app.", "spark.jars",
                    "spark.sql.warehouse.dir", "spark.sql.catalogImplementation", "spark.hadoop.",
                    "spark.serializer", "spark.ui.", "spark.local.dir", "spark.sql.extensions")


def _is_static_conf(key: str) -> bool:
    return key.startswith(_STATIC_PREFIXES)


@contextlib.contextmanager
def _dbt_errors():
    """Spark's errors in a statement or analysis as dbt's (the message without PySpark's traceback)."""
    try:
        yield
    except PySparkException as e:
        raise DbtRuntimeError(str(e)) from None
