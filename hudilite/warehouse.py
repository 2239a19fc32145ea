"""A Spark warehouse on the local file system, used by one process at a time: its embedded Derby metastore
(under `<warehouse>/.metastore`) admits one JVM, so an flock on the warehouse makes a second process fail at
once instead of in the metastore boot; Spark's own log goes to a file there instead of the console.
"""

from __future__ import annotations

import atexit
import fcntl
import hashlib
import importlib.util
import logging
import os
import shutil
import threading
import warnings
from typing import Dict

from pyspark.logger import PySparkLogger

from hudilite.errors import HudiliteError
from hudilite.spark.session import is_connect, local_session

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


CLASS_CACHE_ENV = "HUDILITE_JVM_CLASS_CACHE"  # a directory for the driver JVM's class archive, or "off"
DUMP_WAIT_S = 600.0  # at most this long at exit for the first session's JVM to write the archive
# archives kept in the cache, the most recently used: each install of pyspark or JDK (each venv) has its own
# (~200-270 MB each, a driver's and a Connect server's per install), which nothing else would ever remove
KEEP_ARCHIVES = 4


def class_cache_key(main_class: str | None = None) -> str | None:
    """What a class archive is valid for: this pyspark's jars (where they are, their sizes and times) and this
    java (an archive of another JDK or class path is refused by the JVM; the key keeps one per combination
    instead of rewriting it), and
    for a JVM other than PySpark's driver its main class (a Connect server loads other classes)."""
    spec = importlib.util.find_spec("pyspark")  # found, not imported
    if spec is None or not spec.origin:
        return None
    jars = os.path.join(os.environ.get("SPARK_HOME") or os.path.dirname(spec.origin), "jars")
    java = os.path.join(os.environ["JAVA_HOME"], "bin", "java") if os.environ.get("JAVA_HOME") \
        else shutil.which("java")
    if not java or not os.path.isdir(jars):
        return None
    # the JVM maps a dynamic archive only for the class path it was dumped with - the same jar paths, sizes
    # and modification times - and silently loads classes as usual otherwise: a key of names and sizes alone
    # matched the archive of another install (another venv, a reinstall), which no session then used and
    # none rewrote
    h = hashlib.sha256(os.path.realpath(java).encode())
    h.update(os.path.realpath(jars).encode())
    for name in sorted(os.listdir(jars)):
        st = os.stat(os.path.join(jars, name))
        h.update(f"{name}:{st.st_size}:{st.st_mtime_ns}".encode())
    if main_class:
        h.update(f"main:{main_class}".encode())
    return h.hexdigest()[:16]


def class_cache_options(cache_dir: str | None = None, *, main_class: str | None = None,
                        owner: str | None = None) -> tuple[str, str | None, str | None]:
    """Java options that let the driver JVM map the classes of earlier sessions from a class data sharing
    archive (CDS, JDK 13+; Spark 4 needs 17) instead of loading and verifying some 10,000 Spark, Hive and
    DataNucleus classes again: the larger part of a session's start. Returns (options, dump, archive): with
    an archive in place the options map it; without one they make this session's JVM dump its classes to
    `dump` (a name of this process's) when it exits, and `finish_class_cache` moves that to `archive` once
    the JVM has exited. An archive the JVM cannot use (another JDK or class path) is ignored by it
    (`-Xshare:auto`, the default): classes then load as usual. `cache_dir`: default $HUDILITE_JVM_CLASS_CACHE,
    else ~/.cache/hudilite/jvm; "off" disables it. `main_class`: a JVM other than PySpark's driver (its own
    archive); `owner`: what names the dump, default this process's pid (a dump whose pid is gone is removed as
    an orphan; another owner removes its own stale dump itself)."""
    cache_dir = cache_dir or os.environ.get(CLASS_CACHE_ENV) or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "hudilite", "jvm")
    key = class_cache_key(main_class) if cache_dir != "off" else None
    if key is None:
        return "", None, None
    quiet = "-Xlog:cds*=off"  # archive mismatches are not worth a console line: the JVM just loads classes
    archive = os.path.join(cache_dir, f"{key}.jsa")
    if os.path.isfile(archive):
        _mark_used(archive)
        return f"-XX:SharedArchiveFile={archive} {quiet}", None, None
    try:
        os.makedirs(cache_dir, exist_ok=True)
        _remove_orphan_dumps(cache_dir)
    except OSError:  # no writable cache: start as without one
        return "", None, None
    dump = os.path.join(cache_dir, f"{key}.{owner or os.getpid()}.jsa.part")
    return f"-XX:ArchiveClassesAtExit={dump} {quiet}", dump, archive


def _mark_used(archive: str) -> None:
    """Record a use of `archive` in its modification time: the cache keeps the most recently used ones."""
    try:
        os.utime(archive)
    except OSError:  # another user's archive: mapped all the same, just not marked
        pass


def prune_class_cache(cache_dir: str, keep: int = KEEP_ARCHIVES) -> list[str]:
    """Remove all but the `keep` most recently used archives of `cache_dir` (dumps in progress are not
    archives). A JVM that has one mapped keeps its mapping; a session about to map a removed one starts
    without it (`-Xshare:auto`) and dumps it again. Returns the removed paths."""
    try:
        names = [n for n in os.listdir(cache_dir) if n.endswith(".jsa")]
    except OSError:
        return []
    aged = []
    for n in names:
        p = os.path.join(cache_dir, n)
        try:
            aged.append((os.stat(p).st_mtime_ns, p))
        except OSError:  # removed meanwhile
            pass
    removed = []
    for _t, p in sorted(aged, reverse=True)[max(keep, 1):]:
        try:
            os.remove(p)
            removed.append(p)
        except OSError:  # another user's, or removed meanwhile
            pass
    return removed


def _remove_orphan_dumps(cache_dir: str) -> None:
    """Dumps of processes that died without finishing them (killed: no exit handler ran) are never moved into
    place; remove them (a JVM still writing one keeps writing to the unlinked file, harmlessly)."""
    for name in os.listdir(cache_dir):
        parts = name.split(".")
        if len(parts) == 4 and parts[2:] == ["jsa", "part"] and parts[1].isdigit():
            try:
                os.kill(int(parts[1]), 0)
            except ProcessLookupError:
                os.remove(os.path.join(cache_dir, name))
            except PermissionError:  # another user's live process
                pass


def finish_class_cache(jvm, dump: str, archive: str, timeout: float = DUMP_WAIT_S, accumulators=None) -> bool:
    """At this process's exit: end the driver JVM (`jvm`: its Popen, PySpark's gateway process) by closing
    its stdin as PySpark's own exit does, wait for it to write its class archive, and move that into place.
    Waiting keeps the process - and so the warehouse - busy until the JVM is gone: a next dbt command on the
    warehouse does not find the metastore still held by the dumping JVM. A JVM that does not finish in time
    or fails leaves no archive (the next session dumps again). `accumulators`: the session's PySpark
    accumulator server (see `_end_accumulator_updates`)."""
    _end_accumulator_updates(accumulators)
    try:
        if jvm.stdin is not None:
            jvm.stdin.close()
        clean = jvm.wait(timeout=timeout) == 0
    except Exception:  # noqa: BLE001 - the archive is an optimisation: never fail the process's exit for it
        clean = False
    return install_class_archive(dump, archive, clean)


def _end_accumulator_updates(server) -> None:
    """The JVM is ended here while this interpreter still runs, unlike at PySpark's own exit: the JVM's
    connection to PySpark's accumulator server (made by any job with Python workers) then reads end of file,
    which the server printed as an EOFError traceback on every session that dumped its classes. That end is
    expected: stop taking updates and keep it quiet."""
    if server is None:
        return
    server.server_shutdown = True  # the handler's poll loop ends at its next turn
    server.handle_error = lambda request, client_address: None


def install_class_archive(dump: str, archive: str, clean: bool) -> bool:
    """Once the dumping JVM is gone: move its dump into place if it exited cleanly (`clean`), else remove it
    (a JVM killed while writing leaves a partial file). Whether the archive is now in place."""
    try:
        ok = clean and os.path.isfile(dump)
        if ok:
            os.replace(dump, archive)
            _mark_used(archive)  # newest: kept by the pruning below
            prune_class_cache(os.path.dirname(archive))
        return ok
    except OSError:
        return False
    finally:
        if os.path.exists(dump):
            try:
                os.remove(dump)
            except OSError:
                pass


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
    java_opts = f"-Duser.timezone=UTC -Dderby.stream.error.file={os.path.join(metastore_dir, 'derby.log')}"
    cds, dump, archive = class_cache_options()
    if cds:
        java_opts += " " + cds
    if not show_spark_logs:
        java_opts += f" -Dlog4j2.configurationFile={spark_log_config(metastore_dir)}"
    conf = {
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.ansi.enabled": "false",
        "spark.driver.extraJavaOptions": java_opts,
    }
    user = dict(spark_conf)
    if "spark.driver.extraJavaOptions" in user:
        user["spark.driver.extraJavaOptions"] = java_opts + " " + user["spark.driver.extraJavaOptions"]
    conf.update(user)
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
