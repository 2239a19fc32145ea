"""A Spark warehouse on the local file system, used by one process at a time: its embedded Derby metastore
(under `<warehouse>/.metastore`) admits one JVM, so an flock on the warehouse makes a second process fail at
once instead of in the metastore boot; Spark's own log goes to a file there instead of the console.
"""

from __future__ import annotations

import atexit
import fcntl
import logging
import os
import threading
import warnings
from typing import Dict

from pyspark.logger import PySparkLogger

from hudilite.errors import HudiliteError
from hudilite.spark.class_cache import class_cache_options, finish_class_cache
from hudilite.spark.jvm import java_property
from hudilite.spark.session import DRIVER_JAVA_OPTIONS, is_connect, local_session, merge_conf

_process_lock = threading.RLock()
_warehouse_locks: Dict[str, int] = {}  # lock file -> open descriptor holding its flock (for the process's life)
WAREHOUSE_LOCK = "hudilite.lock"  # in <warehouse>/.metastore


class WarehouseLockedError(HudiliteError):
    """Another process has the warehouse's catalog (a dbt run, a notebook, spark-sql)."""


class SessionStartError(HudiliteError):
    """Spark or the warehouse's catalog could not be started."""


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


def spark_log_config(metastore_dir: str) -> str:
    """A log4j2 configuration for the driver JVM that sends every log line to <metastore_dir>/spark.log. Spark's
    default one writes to stderr, which is dbt's console: a failing query logs its stack as JSON lines and
    Java frames there before dbt's own summary. Overwritten per session (the warehouse lock makes the session
    the only one on this warehouse)."""
    path = os.path.join(metastore_dir, "log4j2.properties")  # the local warehouse: no table storage
    with open(path, "w") as f:
        f.write(_LOG4J2.format(log=os.path.join(metastore_dir, SPARK_LOG)))
    return path


def quiet_query_errors(spark) -> None:
    """Spark 4 logs every failed query's whole stack as JSON twice: the JVM's logger SQLQueryContextLogger
    (classic sessions) and PySpark's Python loggers of the same names, which the client process writes to
    stderr for a classic or a Spark Connect session alike. dbt reports the error itself, so keep them quiet
    (the Python ones are per process: this process is dbt's)."""
    for name in ("SQLQueryContextLogger", "DataFrameQueryContextLogger"):
        PySparkLogger.getLogger(name).setLevel(logging.CRITICAL)
    if is_connect(spark):
        return
    try:
        jvm = spark.sparkContext._jvm
        jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(
            "SQLQueryContextLogger", jvm.org.apache.logging.log4j.Level.OFF)
    except Exception:  # noqa: BLE001
        pass


def locked_message(db: str, warehouse: str) -> str:
    return (f"hudilite: the catalog of warehouse {warehouse} is locked by another process (Derby metastore "
            f"{db} is in use: another dbt or Spark process is running on this warehouse). Wait for it to "
            "finish, or give this run its own warehouse.")


def take_warehouse_lock(metastore_dir: str, warehouse: str) -> None:
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
            raise WarehouseLockedError(
                locked_message(os.path.join(metastore_dir, "metastore_db"), warehouse)) from None
        _warehouse_locks[lock] = fd


def check_metastore_lock(db: str, warehouse: str) -> None:
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
        raise WarehouseLockedError(locked_message(db, warehouse)) from None
    else:
        fcntl.lockf(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def open_session(master: str, warehouse: str, metastore_dir: str, spark_conf: dict, *, show_spark_logs: bool,
                 app_name: str):
    """A new SparkSession on `warehouse`, its catalog an embedded Derby metastore in `metastore_dir`, holding the
    warehouse lock; Spark's log goes to a file there unless `show_spark_logs`. `spark_conf` is applied over
    hudilite's settings (extra Java options appended). The metastore is booted here, so a catalog another
    process holds fails now: WarehouseLockedError; SessionStartError when Spark or the catalog cannot start."""
    warnings.filterwarnings("ignore", message="PySpark does not yet fully support pandas")
    if master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # no "resolves to a loopback address" noise
    os.makedirs(metastore_dir, exist_ok=True)
    db = os.path.join(metastore_dir, "metastore_db")
    take_warehouse_lock(metastore_dir, warehouse)
    check_metastore_lock(db, warehouse)  # a Spark process without hudilite on the catalog
    java_opts = java_property("derby.stream.error.file", os.path.join(metastore_dir, "derby.log"))
    cds, dump, archive = class_cache_options()
    if cds:
        java_opts += " " + cds
    if not show_spark_logs:
        java_opts += " " + java_property("log4j2.configurationFile", spark_log_config(metastore_dir))
    conf = merge_conf({"spark.ui.showConsoleProgress": "false", "spark.sql.ansi.enabled": "false",
                       DRIVER_JAVA_OPTIONS: java_opts}, spark_conf)
    try:
        spark = local_session(master, app_name=app_name, conf=conf, hive_dir=metastore_dir)
    except Exception as e:  # noqa: BLE001
        raise SessionStartError(f"hudilite: could not start Spark (master {master}): {e}") from e
    if dump and archive:
        jvm = getattr(getattr(spark.sparkContext, "_gateway", None), "proc", None)  # the spark-submit'd JVM
        if jvm is not None:
            atexit.register(finish_class_cache, jvm, dump, archive,
                            accumulators=getattr(spark.sparkContext, "_accumulatorServer", None))
    if not show_spark_logs:
        quiet_query_errors(spark)
    try:
        spark.sql("show databases").collect()  # boots the metastore now: a locked catalog fails here
    except Exception as e:  # noqa: BLE001
        text = str(e)
        if "Another instance of Derby" in text or "XSDB6" in text:
            raise WarehouseLockedError(locked_message(db, warehouse)) from None
        check_metastore_lock(db, warehouse)  # locked while we started: say so
        raise SessionStartError(f"hudilite: the catalog at {db} could not be opened: {text[:2000]}") from None
    return spark
