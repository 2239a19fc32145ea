"""A SparkSession configured for hudilite (used by tests, the CLI and the dbt adapter's embedded default), and
the check that a session's Python workers can run hudilite."""

from __future__ import annotations

import contextlib
import os
import re
import socket
import sys
import threading
import time
import uuid
import weakref

from hudilite.errors import StorageAccessError, WorkerEnvironmentError
from hudilite.spark.class_cache import map_options
from hudilite.storage import storage_for

# SparkContext (Spark Connect: the session) -> the worker interpreters that passed. Keyed by the context, not
# the session object: PySpark wraps each streaming micro-batch in a new session object; a changed
# `spark.sql.execution.pyspark.python` is checked again.
_CHECKED: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_CHECKED_GUARD = threading.Lock()
SQL_WORKER_PYTHON = "spark.sql.execution.pyspark.python"
DRIVER_JAVA_OPTIONS = "spark.driver.extraJavaOptions"
EXECUTOR_JAVA_OPTIONS = "spark.executor.extraJavaOptions"
JAVA_OPTION_KEYS = (DRIVER_JAVA_OPTIONS, EXECUTOR_JAVA_OPTIONS)
# how long a session may keep reading a table's catalog entry as it resolved it (Spark's relation cache)
CATALOG_CACHE_TTL_S = 1


def merge_conf(base: dict, extra: dict | None) -> dict:
    """`base` with `extra`'s settings over it, except the JVMs' extra Java options: `extra`'s are appended to
    `base`'s (a caller's heap or GC flag must not drop hudilite's time zone, logging or class-archive flags;
    for a flag given twice the JVM takes the last, the caller's)."""
    out = dict(base)
    for k, v in (extra or {}).items():
        out[k] = f"{out[k]} {v}".strip() if k in JAVA_OPTION_KEYS and out.get(k) else v
    return out


def session_conf(conf: dict | None = None, hive_dir: str | None = None) -> dict:
    """The Spark settings of a hudilite session (`local_session`, and the `hudilite server` Connect server):
    Python workers run this interpreter (so they import hudilite); `conf` over them (`merge_conf`: extra Java
    options appended); with `hive_dir`, a persistent catalog in an embedded Derby metastore there."""
    out = merge_conf({
        "spark.ui.enabled": "false",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.shuffle.partitions": "4",
        "spark.sql.adaptive.enabled": "true",
        "spark.pyspark.python": sys.executable,
        # the hudilite data source prunes partitions in pushFilters, which PySpark refuses unless this is on
        "spark.sql.python.filterPushdown.enabled": "true",
        # a session caches the tables it has resolved, and a copy-on-write table's catalog entry is re-pointed
        # by each commit (hudilite.metastore): without an expiry, a session that read a table before another
        # session's commit (a Connect client beside a dbt run, a notebook beside dbtRunner) reads the old
        # snapshot until it refreshes, and fails once that snapshot's directory is pruned
        "spark.sql.metadataCacheTTLSeconds": str(CATALOG_CACHE_TTL_S),
        DRIVER_JAVA_OPTIONS: "-Duser.timezone=UTC",
        EXECUTOR_JAVA_OPTIONS: "-Duser.timezone=UTC",
    }, conf)
    if hive_dir:
        out.update({"spark.sql.warehouse.dir": os.path.join(hive_dir, "warehouse"),
                    "spark.hadoop.javax.jdo.option.ConnectionURL":
                        f"jdbc:derby:;databaseName={os.path.join(hive_dir, 'metastore_db')};create=true",
                    # Hive's default is a new /tmp/<session id>_resources per session, deleted only when the
                    # Hive session is closed, which Spark never does: one was left in /tmp by every dbt command.
                    # Embedded Derby admits one process per catalog, so its sessions can share one directory.
                    "spark.hadoop.hive.downloaded.resources.dir": os.path.join(hive_dir, "resources"),
                    "spark.sql.catalogImplementation": "hive"})
    return out


def local_session(master: str = "local[2]", *, app_name: str = "hudilite", conf: dict | None = None,
                  hive_dir: str | None = None):
    """Get or create a SparkSession whose Python workers run this interpreter (so they import hudilite). A new
    driver JVM maps the class archive of an earlier embedded session when there is one (hudilite.spark.
    class_cache: some seconds less to start); it never writes one itself."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    b = SparkSession.builder.master(master).appName(app_name)
    settings = session_conf(conf, hive_dir)
    java = settings.get(DRIVER_JAVA_OPTIONS, "")
    if "SharedArchiveFile" not in java and "ArchiveClassesAtExit" not in java:  # not chosen by the caller
        settings = merge_conf(settings, {DRIVER_JAVA_OPTIONS: map_options()})
    for k, v in settings.items():
        b = b.config(k, v)  # with hive_dir: catalogImplementation hive, what enableHiveSupport() sets
    spark = b.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def is_connect(spark) -> bool:
    """Whether `spark` is a Spark Connect session: no SparkContext, RDDs or JVM handles in this process; the
    classic-only optimisations take their fallback."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def query_frame(spark, query: str, views: dict | None = None):
    """The DataFrame of the query `query` (a SELECT). Under Spark Connect `spark.sql` sends the text at once
    (an ExecutePlan round trip whose reply, for a query, is the same unexecuted relation); the relation is
    built here instead and analysed on its first use. A classic session's `spark.sql`. `views`: name ->
    DataFrame, temporary views the query names; under Spark Connect the query carries their plans (the server
    defines them for the query's analysis only) instead of a round trip creating each."""
    if not is_connect(spark):
        for name, df in (views or {}).items():
            df.createOrReplaceTempView(name)
        return spark.sql(query)
    from pyspark.sql.connect.dataframe import DataFrame  # Connect's modules: loaded in Connect processes only
    from pyspark.sql.connect.plan import SQL, SubqueryAlias

    refs = [SubqueryAlias(df._plan, name) for name, df in (views or {}).items()]
    return DataFrame(SQL(query, [], {}, refs), spark)


def default_parallelism(spark) -> int:
    """Spark's default parallelism (task counts are sized by it). Spark Connect cannot ask the SparkContext:
    `spark.default.parallelism` if set, else the cores of a `local[N]` master (`local[*]`: this machine's,
    the server being local), else the shuffle partitions; read once per session object."""
    if not is_connect(spark):
        return spark.sparkContext.defaultParallelism
    cached = getattr(spark, "_hudilite_parallelism", None)
    if cached:
        return cached
    n = _connect_parallelism(spark)
    try:
        spark._hudilite_parallelism = n
    except Exception:  # noqa: BLE001 - a session object without attributes: ask again next time
        pass
    return n


def _connect_parallelism(spark) -> int:
    explicit = spark.conf.get("spark.default.parallelism", None)
    if explicit:
        return max(1, int(explicit))
    m = re.fullmatch(r"local\[(\d+|\*)(?:,\s*\d+)?\]", spark.conf.get("spark.master", "") or "")
    if m:
        return (os.cpu_count() or 1) if m.group(1) == "*" else max(1, int(m.group(1)))
    return max(1, int(spark.conf.get("spark.sql.shuffle.partitions", "4") or 4))


@contextlib.contextmanager
def job_tag(spark, prefix: str = "hudilite-write"):
    """Tag the Spark jobs this thread starts inside the block (classic sessions; under Spark Connect the tag
    is not needed, see `wait_for_tasks`). Yields the tag."""
    tag = f"{prefix}-{uuid.uuid4().hex[:12]}"
    sc = None if is_connect(spark) else spark.sparkContext
    if sc is not None:
        sc.addJobTag(tag)
    try:
        yield tag
    finally:
        if sc is not None:
            sc.removeJobTag(tag)


def wait_for_tasks(spark, tag: str, timeout_s: float = 60.0) -> None:
    """After a failed job: wait until no task of the jobs tagged `tag` is still running. Spark fails the job
    at the first failed task and cancels the others asynchronously; a cancelled task's Python worker may
    still open a data file, so a rollback that ran at once would miss it and leave it behind. Classic
    sessions ask the status tracker; Spark Connect has none, so its client waits out Spark's own bound on
    a cancelled Python task (the monitor's 2 s poll plus `spark.python.task.killTimeout`)."""
    if is_connect(spark):
        time.sleep(2.0 + _seconds(spark.conf.get("spark.python.task.killTimeout", "2s")) + 1.0)
        return
    tracker = spark.sparkContext._jsc.sc().statusTracker()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        busy = False
        for job_id in tracker.getJobIdsForTag(tag):
            job = tracker.getJobInfo(job_id)
            if job.isEmpty():
                continue
            for stage_id in job.get().stageIds():
                stage = tracker.getStageInfo(stage_id)
                if not stage.isEmpty() and stage.get().numActiveTasks() > 0:
                    busy = True
        if not busy:
            return
        time.sleep(0.05)


def _seconds(value: str) -> float:
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|min)?\s*", str(value or ""))
    if not m:
        return 2.0
    n, unit = float(m.group(1)), m.group(2) or "s"
    return n / 1000 if unit == "ms" else n * 60 if unit in ("m", "min") else n


def task_frame(spark, rows: list, schema):
    """A DataFrame of `rows` with one input partition (task) per row. Classic: `parallelize` (no shuffle).
    Spark Connect has no RDDs: a local relation repartitioned round robin, one row per partition (one input
    partition dealt out in turn) at the cost of a shuffle."""
    if not is_connect(spark):
        return spark.createDataFrame(spark.sparkContext.parallelize(rows, len(rows)), schema)
    return spark.createDataFrame(rows, schema).repartition(len(rows))


def check_client_storage(spark, base_path: str, *, write: bool) -> None:
    """Raise StorageAccessError, before any Spark job, when this process cannot reach the table storage at
    `base_path` while `spark` is a Spark Connect session. Under Connect the driver-side work of a read or
    write (the timeline, planning, markers, the commit) runs here, in the client, and only its tasks run in
    the server, so a path or credentials only the server has would otherwise fail half-way (or read as "no
    table"). Classic sessions: nothing to check, this process is the driver anyway."""
    if not is_connect(spark):
        return
    hoodie = base_path.rstrip("/") + "/.hoodie"
    try:
        storage_for(base_path).check_access(hoodie, write=write)
    except Exception as e:  # noqa: BLE001 - any failure to reach the store (OS error, S3 credentials, ...)
        what = "write to" if write else "read"
        raise StorageAccessError(
            f"{base_path}: this process ({_process()}), the Spark Connect client, cannot {what} the table "
            f"storage ({type(e).__name__}: {e}). Under Spark Connect the planning and the commit of a write, "
            "and the planning of a read, run in the client; only their tasks run in the Spark Connect server. "
            "The client needs the same access to the table storage as the server, under the same path: the "
            "same file system or a shared mount, readable and writable by the client's user; for s3:// tables "
            "the storage options or AWS credentials in the client (it ships them to the server's workers). "
            "Nothing was read or written.") from None


def _process() -> str:
    try:
        import pwd

        user = pwd.getpwuid(os.geteuid()).pw_name
    except (ImportError, KeyError):  # no pwd module (Windows), or a uid without an entry
        user = os.environ.get("USER", "?")
    return f"pid {os.getpid()}, user {user}, host {socket.gethostname()}"


def active_session():
    """This thread's active SparkSession, or None (also without pyspark): never starts one."""
    try:
        from pyspark.sql import SparkSession  # pyspark: optional for the driver-local (Arrow) path
    except ImportError:
        return None
    return SparkSession.getActiveSession()


def _worker_python(spark) -> str:
    """The interpreter the session's Python workers are configured to run (for messages and the cache key)."""
    v = spark.conf.get(SQL_WORKER_PYTHON, None)
    if v:
        return v
    try:  # classic PySpark: fixed when the SparkContext was created (PYSPARK_PYTHON)
        return spark.sparkContext.pythonExec
    except Exception:  # noqa: BLE001 - Spark Connect has no SparkContext here
        return os.environ.get("PYSPARK_PYTHON", "python3")


def check_workers(spark) -> None:
    """Raise WorkerEnvironmentError unless the session's Python workers can import hudilite and pyarrow.

    Runs one tiny Spark job (a Python UDF shipped by value, so it runs without hudilite on the worker and
    reports what the worker cannot import; a worker that cannot start at all - no interpreter, or no pyarrow,
    which Spark 4's workers import themselves - fails the job, and its cause is reported) the first time;
    the result is cached per SparkContext and worker interpreter. Without it, a misconfigured session fails
    deep inside a write's first task with a ModuleNotFoundError wrapped in a JVM stack trace."""
    configured = _worker_python(spark)
    try:
        owner = spark.sparkContext
    except Exception:  # noqa: BLE001 - Spark Connect
        owner = spark
    with _CHECKED_GUARD:
        if configured in _CHECKED.get(owner, ()):
            return
    from pyspark.sql import functions as F  # pyspark: optional for the driver-local (Arrow) path

    def probe():  # nested: cloudpickle ships it by value, so the worker needs no hudilite to run it
        import sys as _sys

        problems = []
        for mod in ("pyarrow", "hudilite"):
            try:
                __import__(mod)
            except Exception as e:  # noqa: BLE001 - reported to the driver
                problems.append(f"{mod}: {type(e).__name__}: {e}")
        return _sys.executable + "\n" + "\n".join(problems)

    fix = ("Point the workers at an interpreter that has hudilite installed (the driver runs "
           f"{sys.executable}): set PYSPARK_PYTHON before the session is created, or spark.pyspark.python / "
           f"{SQL_WORKER_PYTHON} in its config, or install hudilite (with pyarrow) on the workers. Nothing was "
           "read or written.")
    if is_connect(spark):  # the workers are the Connect server's: only its start configures them
        fix = ("Spark Connect: the server's workers need an interpreter with hudilite installed: start a local "
               "server with `hudilite server start --warehouse DIR` from such an environment, or set "
               f"spark.pyspark.python / {SQL_WORKER_PYTHON} in the server's config. Nothing was read or written.")
    try:
        out = spark.range(1).select(F.udf(probe, "string")().alias("p")).collect()[0][0]
    except Exception as e:  # noqa: BLE001 - the workers' interpreter could not even run the probe
        raise WorkerEnvironmentError(
            f"the Spark session's Python workers ({configured}) cannot run hudilite: {_cause(e)[:500]}. "
            + fix) from None
    executable, _, problems = out.partition("\n")
    if problems:
        raise WorkerEnvironmentError(
            f"the Spark session's Python workers run {executable}, which cannot import what hudilite needs "
            f"({problems.replace(chr(10), '; ')}). " + fix)
    with _CHECKED_GUARD:
        _CHECKED.setdefault(owner, set()).add(configured)


_CAUSES = (r"\b(ModuleNotFoundError|ImportError): .*", r"Cannot run program .*", r"\b\w+(Error|Exception): .*")


def _cause(e: Exception) -> str:
    """The line of a failed job's (Python or JVM) error that says what is wrong with the workers."""
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    for pattern in _CAUSES:
        for ln in lines:
            m = re.search(pattern, ln)
            if m:
                return m.group(0)
    return lines[0] if lines else type(e).__name__
