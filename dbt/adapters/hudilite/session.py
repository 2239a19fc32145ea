"""The SparkSession of a dbt process on a warehouse: opened lazily, reused when one runs, locked per warehouse.

One JVM and one SparkContext per process; a session hudilite builds keeps its catalog in an embedded Derby
metastore under `<warehouse>/.metastore`, which admits one process: an flock on the warehouse makes a second
process fail at once instead of in the metastore boot. Spark's own log goes to a file there.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
import warnings
from typing import Any, Dict, Optional

from dbt.adapters.events.logging import AdapterLogger
from dbt.adapters.exceptions import FailedToConnectError
from dbt_common.exceptions import DbtRuntimeError
from pyspark.errors import PySparkException
from pyspark.sql import SparkSession

import hudilite
from hudilite.spark.session import local_session

logger = AdapterLogger("Hudilite")

_process_lock = threading.RLock()
_process_session: Dict[str, Any] = {}  # the SparkSession hudilite built for this process, if any
_warehouse_locks: Dict[str, int] = {}  # lock file -> open descriptor holding its flock (for the process's life)
WAREHOUSE_LOCK = "hudilite.lock"  # in <warehouse>/.metastore



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
