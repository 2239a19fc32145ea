"""Crash at every storage operation of an operation under test, then check the table.

    python -m bench.crashpoints                       # every crash point of every scenario
    python -m bench.crashpoints --ops cow_upsert,clean
    python -m bench.crashpoints --sample 100 --seed 1 # a deterministic sample (the CI test's)

Per scenario: a starting table is built once (the template). The operation runs once on a copy, uncrashed, in a
child process with the crash injector counting (hudilite/storage/faults.py): N storage operations, and the
table after it is the oracle's after-state (the template's is the before-state). Then for every k in 1..N a
child runs the operation on a fresh copy of the template and dies (`os._exit`) before operation k - and, for an
operation that can be half done (a data file, a log append, the temp file of an atomic write), a second child
dies half-way through it (`k:torn`). The parent then checks the copy:

1. the snapshot (read by hudilite's own in-process reader and by hudi-rs) is exactly the before- or the
   after-state;
2. recovery - `hudilite rollback` (some scenarios) and the scenario's service re-run, then the next write (an
   Arrow upsert of new keys) - commits, and the snapshot is a state at least as new as the crashed one plus the
   new rows, every key once;
3. after the next clean no leftover remains: no pending instant, no marker directory, heartbeat, lock or temp
   file, every data file named by a completed instant's write stats, every change-image directory of a
   completed instant.

Spark scenarios (`spark_*`, `aggregate_refresh_spark`) run the operation in a local[2] Spark application: its
tasks' Python workers number their storage operations (data files, log appends, markers, change images) in
the driver's sequence (a shared counter file), and the process reaching the crash point kills the whole
application (driver, JVM, workers: faults.kill_session); each point starts Spark, so they are few files and a
sample takes `--spark-sample` points of each. Aggregate scenarios refresh an aggregate table (the table under
test) over a detail table beside it; their recovery is the next refresh (with value-multiset state, also one
after a further upstream commit), each equal to a recomputation from the detail snapshot, and no state file of
the aggregate is left that no completed commit names.

Children run two at a time; a driver-local scenario's child is forked from a server process that has imported
hudilite once (`fork_server`), a Spark scenario's is a new interpreter. Exit status 1 if any crash point failed.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import importlib
import json
import multiprocessing
import os
import random
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field

import pyarrow as pa

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PYCACHE = os.path.join(tempfile.gettempdir(), "hudilite-crashpoints-pycache")
COLS = ["id", "v", "dt", "name"]
QUERY_ID = "crashpoints-stream"
# short lock lease: a child killed while holding the table lock delays the recovery by at most this
# and a short heartbeat: the next write rolls a killed writer's instant back once it missed one beat
# Version 6 whatever the default: the scenarios cover the layout-1 mechanisms (and the upgrade scenarios need a
# version-6 table); the version-9 ones add V9_OPTIONS.
BASE_OPTIONS = {"hoodie.write.lock.filesystem.expire.ms": "1500", "hoodie.client.heartbeat.interval_in_ms": "300",
                "hoodie.client.heartbeat.tolerable.misses": "1", "hoodie.write.table.version": "6"}
HEARTBEAT_TOLERANCE_S = 0.35


PARTS = 7  # partitions of the tables: a write touches one file group (and its files and markers) per partition


def _rows(n0: int, n: int, version: int, parts: int = PARTS, tag: str = "r") -> pa.Table:
    ids = list(range(n0, n0 + n))
    return pa.table({
        "id": pa.array(ids, pa.int64()),
        "v": pa.array([version] * n, pa.int64()),
        "dt": pa.array([f"2024-01-0{1 + i % parts}" for i in ids], pa.string()),
        "name": pa.array([f"{tag}{i}-{version}" for i in ids], pa.string()),
    })


def _write(path: str, data: pa.Table, *, operation: str = "upsert", table_type: str | None = None,
           options: dict | None = None):
    """An Arrow write (the driver-local writer); `table_type` None: the existing table's."""
    import hudilite
    from hudilite.writer.options import UNSET

    return hudilite.write(data, path, record_key="id", precombine_field="v", partition_by=("dt",),
                          operation=operation, table_type=table_type or UNSET,
                          options={**BASE_OPTIONS, **(options or {})})


# ---- scenarios: setup (parent, once) and operation (child) ------------------------------------------------
@dataclass
class Scenario:
    name: str
    table_type: str
    setup: callable
    op: callable
    recover: str = "write"  # write | rollback | compaction | clustering | clean | archival | stream | upgrade
    options: dict = field(default_factory=dict)
    # the number of storage operations depends on timing (the marker service flushes its batches on a timer):
    # a crash point beyond a run's own count is not reached, and that run is checked as an uncrashed one
    timed_ops: bool = False
    # the child runs a local Spark application (session `SPARK`): its tasks' storage operations are numbered
    # with the driver's (a shared counter) and a crash kills the whole application (faults.kill_session)
    spark: bool = False
    # an aggregate table (`path`) over the detail table `detail` beside it (see AGGREGATES)
    aggregate: str | None = None


def _setup_commits(n_commits: int, table_type: str, options=None, size: int = 30, parts: int = PARTS):
    def setup(path):
        _write(path, _rows(0, size, 1, parts), operation="insert", table_type=table_type, options=options)
        for c in range(2, n_commits + 1):
            _write(path, _rows((c * 7) % size, size // 3, c, parts), table_type=table_type, options=options)
    return setup


def _op_upsert(table_type):
    def op(path):
        _write(path, pa.concat_tables([_rows(3, 12, 50), _rows(100, 6, 50)]), table_type=table_type)
    return op


def _op_delete(path):
    _write(path, _rows(5, 9, 60), operation="delete")


def _op_insert_overwrite(path):
    _write(path, _rows(200, 4, 70, parts=1), operation="insert_overwrite")


def _op_compaction(path):
    from hudilite.services.compaction import compact

    compact(path, {**BASE_OPTIONS}, force=True)


def _setup_compacted_mor(path):
    from hudilite.services.compaction import compact

    _setup_commits(3, "MERGE_ON_READ")(path)
    compact(path, {**BASE_OPTIONS}, force=True)
    _write(path, _rows(2, 10, 40))


def _op_clean(path):
    from hudilite.services.clean import run_clean

    run_clean(path, {**BASE_OPTIONS, "hoodie.cleaner.commits.retained": "1"})


CLUSTER_OPTIONS = {"hoodie.clustering.plan.strategy.sort.columns": "id"}


def _op_clustering(path):
    from hudilite.services.clustering import cluster

    cluster(path, {**BASE_OPTIONS, **CLUSTER_OPTIONS})


ARCHIVE_OPTIONS = {"hoodie.keep.min.commits": "2", "hoodie.keep.max.commits": "3",
                   "hoodie.cleaner.commits.retained": "1"}
V9_OPTIONS = {"hoodie.write.table.version": "9", "hoodie.timeline.compaction.batch.size": "2"}


def _setup_archival(path):
    _setup_commits(6, "COPY_ON_WRITE")(path)
    from hudilite.services.clean import run_clean

    run_clean(path, {**BASE_OPTIONS, **ARCHIVE_OPTIONS})


def _setup_archival_v9(path):
    """A version-9 table (timeline layout 2: archival writes the LSM history) archived three times one instant
    each (history compaction batch 2), so the crashed archival appends, compacts two levels and cleans."""
    _setup_commits(8, "COPY_ON_WRITE", V9_OPTIONS)(path)
    from hudilite.services.archival import archive

    for keep in ("7", "6", "5"):
        archive(path, {**BASE_OPTIONS, **ARCHIVE_OPTIONS, **V9_OPTIONS, "hoodie.keep.min.commits": keep,
                       "hoodie.keep.max.commits": keep})


def _op_archival(path):
    from hudilite.services.archival import archive

    archive(path, {**BASE_OPTIONS, **ARCHIVE_OPTIONS})


def _setup_archived(path):
    _setup_archival(path)
    _op_archival(path)


def _op_upgrade(path):
    from hudilite.services.upgrade import upgrade

    upgrade(path, options=dict(BASE_OPTIONS))


def _setup_failed_write(table_type):
    """A table with a failed write: a child upserting (a MERGE_ON_READ table: log appends) killed right before
    it completes the instant."""
    def setup(path):
        _setup_commits(2, table_type)(path)
        ops = _count_ops("_failed_write_" + table_type, path, dry=True)
        put = max(i for i, o in enumerate(ops, 1) if o["op"] == "put_if_absent")
        _child("_failed_write_" + table_type, path, f"{put}")
    return setup


def _cli_rollback(path: str) -> int:
    """`hudilite rollback --force` with the scenarios' short lock lease: a rollback killed holding the lock
    would otherwise keep the next writer waiting out the default lease (a minute)."""
    from hudilite.cli import main

    return main(["rollback", path, "--force", *[a for k, v in BASE_OPTIONS.items() for a in ("-o", f"{k}={v}")]])


def _op_rollback(path):
    if _cli_rollback(path) != 0:
        raise SystemExit(3)


def _op_stream_prepared(path):
    """The streaming sink's two steps: prepare the commit (validated, metadata in the inflight file), then
    complete it (what its committer thread does)."""
    from hudilite.streaming import BATCH_ID_KEY, QUERY_ID_KEY
    from hudilite.writer.client import WriteClient
    from hudilite.writer.options import resolve
    from hudilite.writer.transaction import WRITER_TAG_KEY, Transaction

    prepared = []

    class Preparing(Transaction):
        def complete(self, inst, metadata, validate=None, **kw):
            self.prepare(inst, metadata)
            prepared.append((self, inst))
            return None

    wo = resolve(path, "id", "v", ("dt",), "upsert", "MERGE_ON_READ",
                 {**BASE_OPTIONS, WRITER_TAG_KEY: f"stream:{QUERY_ID}"})
    WriteClient(None, wo, transaction_factory=Preparing).run(_rows(3, 12, 80),
                                                             {QUERY_ID_KEY: QUERY_ID, BATCH_ID_KEY: "7"})
    for txn, inst in prepared:
        txn.complete_prepared(inst)


# ---- Spark scenarios: a small local[2] application per crash point (its startup dominates: few files) ----
SPARK_PARTS = 2
SPARK: dict = {}  # the child's session, once started


def _spark_session(workdir: str):
    from hudilite.spark.jvm import java_property
    from hudilite.spark.session import DRIVER_JAVA_OPTIONS, local_session

    # Python workers forked by bench/crash_daemon.py install the injector; the JVM's temporary files (Spark's
    # scratch, the native libraries it unpacks: a killed JVM leaves them) go to the crash point's work
    # directory, which the parent removes; a JVM that lives for one operation: C1 alone compiles less than
    # tiered C1 + C2 (~1.5-2.5 s of a ~15 s application)
    jvm_tmp = os.path.join(workdir, "jvm-tmp")
    os.makedirs(jvm_tmp, exist_ok=True)
    return local_session("local[2]", app_name="crashpoints", conf={
        "spark.python.daemon.module": "bench.crash_daemon",
        "spark.sql.shuffle.partitions": "2",
        DRIVER_JAVA_OPTIONS: f"-XX:-UsePerfData -XX:TieredStopAtLevel=1 {java_property('java.io.tmpdir', jvm_tmp)}",
    })


def _spark_write(path: str, data: pa.Table, **kw):
    return _write(path, SPARK["session"].createDataFrame(data), **kw)


def _op_spark_upsert(path):
    _spark_write(path, pa.concat_tables([_rows(3, 6, 50, SPARK_PARTS), _rows(100, 3, 50, SPARK_PARTS)]))


# ---- aggregate refresh: the aggregate table (the table under test) over a detail table beside it ----------
# A refresh records the detail's path in its checkpoint: it is given relative ("detail", from the directory
# holding both), so that every copy of the template continues from its own checkpoint.
DETAIL = "detail"
AGGREGATES = {
    # a WHERE the driver-local fold does not translate (an expression): the refresh runs in Spark (change
    # read, fold, recomputed min/max, an upsert written by tasks)
    "spark": "select g, count(*) as n, count(x) as nx, sum(x) as s, avg(x) as a, min(x) as mn, max(x) as mx "
             "from `db`.`detail` d where d.y + 0 <> 3 group by g",
    # no WHERE, one upstream commit: folded on the driver, min/max/count(distinct) through the value
    # multisets saved beside the aggregate table (its state files, named by the commit)
    "state": "select g, count(*) as n, sum(x) as s, min(x) as mn, max(x) as mx, count(distinct y) as dy "
             "from `db`.`detail` group by g",
}
DETAIL_SCHEMA = pa.schema([("id", pa.int64()), ("g", pa.string()), ("x", pa.int64()), ("y", pa.int64()),
                           ("_hoodie_is_deleted", pa.bool_())])


def _aggregate_engine():
    """The aggregate maintenance engine and its state module."""
    from hudilite import aggregate
    from hudilite.aggregate import state as agg_state

    return aggregate, agg_state


def _detail_batch(step: int) -> pa.Table:
    """Detail rows of upstream commit `step`: 0 inserts 24 rows; later ones update (moving groups, nulling
    values) and delete some of them and insert new ones."""
    rows = []
    if step == 0:
        rows = [(i, "abc"[i % 3], None if i % 8 == 5 else i % 7, i % 5, False) for i in range(24)]
    else:
        for j, i in enumerate(range(step, 24, 4)):
            if j % 3 == 2:
                rows.append((i, "abc"[i % 3], None, None, True))  # a delete: only its key matters
            else:
                x = None if j % 4 == 1 else (i * step) % 9
                rows.append((i, "abcd"[(i + step) % 4], x, (i + step) % 5, False))
        rows += [(100 * step + k, "abd"[k % 3], k, k % 5, False) for k in range(3)]
    return pa.Table.from_pylist([dict(zip(DETAIL_SCHEMA.names, r)) for r in rows], schema=DETAIL_SCHEMA)


def _write_detail(table_dir: str, step: int) -> None:
    import hudilite

    hudilite.write(_detail_batch(step), os.path.join(table_dir, DETAIL), record_key="id",
                   options=dict(BASE_OPTIONS))


def _refresh(spark, kind: str, path: str):
    """Refresh the aggregate table at `path` from the detail beside it (from their directory)."""
    aggregate, _ = _aggregate_engine()
    path = os.path.abspath(path)
    # the Spark kind's upsert stays a Spark write (tasks write its files), small as its detail is
    opts = {**BASE_OPTIONS, "hudilite.write.small.batch.enabled": "false"} if kind == "spark" else dict(BASE_OPTIONS)
    with contextlib.chdir(os.path.dirname(path)):
        return aggregate.refresh(spark, aggregate.parse(AGGREGATES[kind]), DETAIL, path, options=opts)


def _parent_spark():
    """A Spark session of this (harness) process, started once: full builds and recovery refreshes."""
    if "parent" not in SPARK:
        from hudilite.spark.session import local_session

        SPARK["parent"] = local_session("local[2]", app_name="crashpoints-harness",
                                        conf={"spark.sql.shuffle.partitions": "2"})
    return SPARK["parent"]


def _setup_aggregate(kind: str):
    def setup(path):
        d = os.path.dirname(os.path.abspath(path))
        _write_detail(d, 0)
        _refresh(_parent_spark(), kind, path)  # the full build (Spark)
        _write_detail(d, 1)  # the upstream commit the refresh under test folds in
    return setup


def _op_aggregate(kind: str):
    def op(path):
        _refresh(SPARK.get("session"), kind, path)
    return op


def expected_aggregate(kind: str, detail_rows: list[dict]) -> list[tuple]:
    """The aggregate recomputed in plain Python from the detail snapshot: its visible columns, sorted."""
    groups: dict = {}
    for r in detail_rows:
        if kind == "spark" and (r["y"] is None or r["y"] == 3):  # where y <> 3 (null: not true)
            continue
        groups.setdefault(r["g"], []).append(r)
    out = []
    for g, rows in groups.items():
        xs = [r["x"] for r in rows if r["x"] is not None]
        mn, mx = (min(xs), max(xs)) if xs else (None, None)
        if kind == "spark":
            out.append((g, len(rows), len(xs), sum(xs) if xs else None, sum(xs) / len(xs) if xs else None, mn, mx))
        else:
            out.append((g, len(rows), sum(xs) if xs else None, mn, mx, len({r["y"] for r in rows} - {None})))
    return sorted(out, key=repr)


AGG_VISIBLE = {"spark": ["g", "n", "nx", "s", "a", "mn", "mx"], "state": ["g", "n", "s", "mn", "mx", "dy"]}


SCENARIOS = {s.name: s for s in [
    Scenario("cow_insert_new_table", "COPY_ON_WRITE", lambda p: os.makedirs(p),
             lambda p: _write(p, _rows(0, 20, 1), operation="insert")),
    Scenario("cow_upsert", "COPY_ON_WRITE", _setup_commits(2, "COPY_ON_WRITE"), _op_upsert("COPY_ON_WRITE")),
    Scenario("cow_delete", "COPY_ON_WRITE", _setup_commits(2, "COPY_ON_WRITE"), _op_delete),
    Scenario("cow_insert_overwrite", "COPY_ON_WRITE", _setup_commits(2, "COPY_ON_WRITE"), _op_insert_overwrite),
    Scenario("cow_bulk_insert", "COPY_ON_WRITE", _setup_commits(1, "COPY_ON_WRITE"),
             lambda p: _write(p, _rows(300, 15, 1), operation="bulk_insert")),
    Scenario("mor_delete", "MERGE_ON_READ", _setup_commits(2, "MERGE_ON_READ"), _op_delete),
    Scenario("mor_deltacommit_new_log", "MERGE_ON_READ", _setup_commits(1, "MERGE_ON_READ"),
             _op_upsert("MERGE_ON_READ")),
    Scenario("mor_deltacommit_existing_log", "MERGE_ON_READ", _setup_commits(3, "MERGE_ON_READ"),
             _op_upsert("MERGE_ON_READ"), recover="rollback"),
    Scenario("mor_insert_overwrite", "MERGE_ON_READ", _setup_commits(2, "MERGE_ON_READ"), _op_insert_overwrite),
    Scenario("cow_upsert_marker_service", "COPY_ON_WRITE", _setup_commits(2, "COPY_ON_WRITE"),
             lambda p: _write(p, pa.concat_tables([_rows(3, 12, 50), _rows(100, 6, 50)]),
                              options={"hoodie.write.markers.type": "TIMELINE_SERVER_BASED"}),
             timed_ops=True),
    Scenario("compaction", "MERGE_ON_READ", _setup_commits(3, "MERGE_ON_READ"), _op_compaction,
             recover="compaction"),
    Scenario("clean", "COPY_ON_WRITE", _setup_commits(4, "COPY_ON_WRITE"), _op_clean, recover="clean"),
    Scenario("clean_mor", "MERGE_ON_READ", _setup_compacted_mor, _op_clean, recover="clean"),
    Scenario("clustering", "COPY_ON_WRITE", _setup_commits(3, "COPY_ON_WRITE"), _op_clustering,
             recover="clustering"),
    Scenario("clustering_mor", "MERGE_ON_READ", _setup_commits(3, "MERGE_ON_READ"), _op_clustering,
             recover="clustering"),
    Scenario("archival", "COPY_ON_WRITE", _setup_archival, _op_archival),
    Scenario("archival_v9", "COPY_ON_WRITE", _setup_archival_v9, _op_archival, recover="archival"),
    Scenario("upgrade_cow", "COPY_ON_WRITE", _setup_commits(3, "COPY_ON_WRITE"), _op_upgrade, recover="upgrade"),
    Scenario("upgrade_mor", "MERGE_ON_READ", _setup_commits(3, "MERGE_ON_READ"), _op_upgrade, recover="upgrade"),
    Scenario("upgrade_archived", "COPY_ON_WRITE", _setup_archived, _op_upgrade, recover="upgrade"),
    Scenario("rollback_cow", "COPY_ON_WRITE", _setup_failed_write("COPY_ON_WRITE"), _op_rollback, timed_ops=True),
    Scenario("rollback_mor", "MERGE_ON_READ", _setup_failed_write("MERGE_ON_READ"), _op_rollback, timed_ops=True),
    Scenario("stream_prepared_commit", "MERGE_ON_READ", _setup_commits(2, "MERGE_ON_READ"), _op_stream_prepared,
             recover="stream"),
    Scenario("spark_cow_upsert", "COPY_ON_WRITE", _setup_commits(2, "COPY_ON_WRITE", size=12, parts=SPARK_PARTS),
             _op_spark_upsert, spark=True),
    Scenario("spark_mor_deltacommit", "MERGE_ON_READ",
             _setup_commits(2, "MERGE_ON_READ", size=12, parts=SPARK_PARTS), _op_spark_upsert, spark=True),
    Scenario("aggregate_refresh_spark", "COPY_ON_WRITE", _setup_aggregate("spark"), _op_aggregate("spark"),
             recover="aggregate", spark=True, aggregate="spark"),
    Scenario("aggregate_refresh_state", "COPY_ON_WRITE", _setup_aggregate("state"), _op_aggregate("state"),
             recover="aggregate", aggregate="state"),
]}
CHILD_OPS = {s.name: s.op for s in SCENARIOS.values()}
CHILD_OPS["_failed_write_COPY_ON_WRITE"] = _op_upsert("COPY_ON_WRITE")
CHILD_OPS["_failed_write_MERGE_ON_READ"] = _op_upsert("MERGE_ON_READ")


# ---- child processes --------------------------------------------------------------------------------------
def child_main(op: str, path: str) -> None:
    from hudilite.storage import faults

    sc = SCENARIOS.get(op)
    if sc is not None and sc.spark:
        if os.getsid(0) == os.getpid():  # a session of its own: a crash may kill all of it (faults.kill_session)
            os.environ[faults.SESSION_ENV] = str(os.getpid())
        SPARK["session"] = _spark_session(os.path.dirname(os.path.abspath(path)))
    inj = faults.install_from_env()
    CHILD_OPS[op](path)
    if inj is not None:
        inj.report()
    if "session" in SPARK:
        SPARK.pop("session").stop()


def _child(op: str, path: str, crash: str | None = None, log_path: str | None = None) -> subprocess.CompletedProcess:
    from hudilite.storage import faults

    point = {k: v for k, v in ((faults.CRASH_AT_ENV, crash), (faults.LOG_ENV, log_path)) if v is not None}
    sc = SCENARIOS.get(op)
    if sc is None or not sc.spark:
        return _forked_child(op, path, point)
    env = {k: v for k, v in os.environ.items()
           if k not in (faults.CRASH_AT_ENV, faults.LOG_ENV, faults.COUNTER_ENV, faults.SESSION_ENV,
                        "PYTHONDONTWRITEBYTECODE")}
    env["PYTHONPYCACHEPREFIX"] = PYCACHE  # many children: compile the modules once, outside the tree
    env.update(point)
    # one sequence for the driver and its tasks' workers, kept next to the table
    env[faults.COUNTER_ENV] = _counter_path(path)
    env["PYTHONPATH"] = os.pathsep.join([ROOT] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    return subprocess.run([sys.executable, "-m", "bench.crashpoints", "--child", op, path], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=600, start_new_session=True)


# A driver-local child is forked from a server that has imported what it needs: a fresh interpreter's imports
# (~1 s) were half of a crash point's time. A forked child is a new process (own pid and session, random state
# reseeded at fork) with the modules loaded and nothing else done, as PySpark's daemon forks its workers; Spark
# children still start from scratch (a JVM cannot be forked).
_FORK_SERVER: dict = {}
_PRELOAD = ["hudilite", "hudilite.table", "hudilite.aggregate", "hudilite.streaming", "hudilite.services.clean",
            "hudilite.services.compaction", "hudilite.services.clustering", "hudilite.services.archival",
            "hudilite.services.upgrade"]


def _forked_child(op: str, path: str, env: dict) -> subprocess.CompletedProcess:
    """`child_main(op, path)` in a process forked by this process's fork server, with `env` (the crash point
    or the counting log) set: the same exit status, output and storage operations as a child started with
    `python -m bench.crashpoints --child`."""
    server = _FORK_SERVER.get("proc")
    if server is None or server.poll() is not None:
        if server is None:
            atexit.register(_stop_fork_server)
        server = _FORK_SERVER["proc"] = subprocess.Popen(
            [sys.executable, "-c", "from bench.crashpoints import fork_server; fork_server()"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT,
            env={**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, *filter(None, [os.environ.get("PYTHONPATH")])])})
    fd, out = tempfile.mkstemp(prefix="crashchild-", suffix=".log")
    os.close(fd)
    try:
        server.stdin.write(json.dumps([op, path, env, out]) + "\n")
        server.stdin.flush()
        answer = server.stdout.readline()
        if not answer:
            raise RuntimeError(f"the crash-point fork server stopped (exit status {server.wait()}) running {op}")
        code = int(answer)
        with open(out, errors="replace") as f:
            text = f.read()
        return subprocess.CompletedProcess(["--child", op, path], code, text, text)
    finally:
        os.unlink(out)


def _stop_fork_server() -> None:
    server = _FORK_SERVER.pop("proc", None)
    if server is not None:
        server.stdin.close()  # its loop ends
        server.wait()
        server.stdout.close()


def fork_server() -> None:
    """Serve `_forked_child`: per request line [op, path, env, output file], fork a child and answer its exit
    status (negative: the signal that killed it; a child still running after 10 minutes is killed, like the
    subprocess timeout). Ends when the harness closes its stdin."""
    for m in _PRELOAD:
        importlib.import_module(m)
    for line in sys.stdin:
        op, path, env, out = json.loads(line)
        pid = os.fork()
        if pid == 0:
            _forked_main(op, path, env, out)
        done = os.pidfd_open(pid)
        if not select.select([done], [], [], 600)[0]:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
        os.close(done)
        print(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), flush=True)


def _forked_main(op: str, path: str, env: dict, out: str) -> None:
    from hudilite.storage import faults

    code = 1
    try:
        os.setsid()  # as start_new_session: the crash kills this process only
        fd = os.open(out, os.O_WRONLY | os.O_TRUNC)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)  # not the server's requests
        os.close(null)
        for k in (faults.CRASH_AT_ENV, faults.LOG_ENV, faults.COUNTER_ENV, faults.SESSION_ENV):
            os.environ.pop(k, None)
        os.environ.update(env)
        child_main(op, path)
        code = 0
    except BaseException:  # noqa: BLE001 - reported as the child's exit status and output, like a subprocess
        import traceback

        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)  # never back into the server's loop; no atexit handlers of the server's imports


def _counter_path(path: str) -> str:
    return os.path.join(os.path.dirname(os.path.abspath(path)), "crash-counter")


def _crashed(sc: Scenario, p: subprocess.CompletedProcess, path: str, crash: str) -> bool:
    """Whether the child stopped at its crash point: `os._exit(EXIT_CODE)`, or (a Spark application) killed
    with its whole session once the shared counter reached the point."""
    from hudilite.storage.faults import EXIT_CODE, read_counter

    if p.returncode == EXIT_CODE:
        return True
    return sc.spark and p.returncode == -signal.SIGKILL and \
        len(read_counter(_counter_path(path))) >= int(crash.split(":")[0])


def _count_ops(op: str, path: str, dry: bool = False) -> list[dict]:
    """Run `op` uncrashed, counting (on a copy when `dry`). Returns the numbered operations."""
    work = path
    tmp = None
    if dry:
        tmp = tempfile.mkdtemp(prefix="crashcount-")
        work = os.path.join(tmp, "t")
        shutil.copytree(path, work)
    fd, log_path = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    try:
        counter = _counter_path(work)
        if os.path.exists(counter):
            os.unlink(counter)
        p = _child(op, work, log_path=log_path)
        if os.path.exists(counter):
            os.unlink(counter)
        if p.returncode != 0:
            raise RuntimeError(f"uncrashed run of {op} failed:\n{p.stderr[-3000:]}")
        with open(log_path) as f:
            return json.load(f)
    finally:
        os.unlink(log_path)
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)


# ---- reading and checking ---------------------------------------------------------------------------------
def _rows_of(t: pa.Table, cols) -> list[tuple]:
    if cols is None:  # every data column (an aggregate table's visible and state columns), values may be null
        cols = sorted(c for c in t.column_names if not c.startswith("_hoodie_"))
        return sorted(zip(*[t.column(c).to_pylist() for c in cols]), key=repr)
    return sorted(zip(*[t.column(c).to_pylist() for c in cols]))


def read_own(path: str, cols=COLS) -> list[tuple]:
    """The snapshot by hudilite's in-process reader (base files and merged log blocks, no Spark): the rows of
    `cols` (None: every data column), sorted."""
    from hudilite.reader.merge import SliceDesc, merge_slice
    from hudilite.reader.planner import plan_read
    from hudilite.table import HoodieTable

    if not HoodieTable.exists(path):
        return []
    plan = plan_read(path)
    spec = plan.merge_spec()
    parts = [merge_slice(SliceDesc.of(sl), spec) for sl in plan.slices]
    if not parts:
        return []
    return _rows_of(pa.concat_tables(parts, promote_options="default"), cols)


def read_rs(path: str, cols=COLS) -> list[tuple]:
    from hudilite.table import HoodieTable
    from tests.hudi_rs import read_hudi_rs

    if not HoodieTable.exists(path):
        return []
    t = read_hudi_rs(path)
    return _rows_of(t, cols) if t is not None else []


def _snapshot(path: str, cols=COLS) -> list[tuple]:
    own, rs = read_own(path, cols), read_rs(path, cols)
    if own != rs:
        raise CheckFailed(f"hudilite and hudi-rs read different snapshots ({len(own)} vs {len(rs)} rows)")
    return own


def _cols(sc: Scenario):
    return None if sc.aggregate else COLS


class CheckFailed(AssertionError):
    pass


def _check_aggregate(sc: Scenario, path: str, when: str) -> None:
    """The aggregate table's visible columns equal a recomputation from the detail snapshot."""
    detail = os.path.join(os.path.dirname(path), DETAIL)
    rows = [dict(zip(("g", "id", "x", "y"), r)) for r in read_own(detail, ["g", "id", "x", "y"])]
    want = expected_aggregate(sc.aggregate, rows)
    got = sorted((tuple(r) for r in _visible(path, sc.aggregate)), key=repr)
    if not _same(got, want):
        raise CheckFailed(f"{when}: the aggregate ({len(got)} groups) is not the recomputation from the detail "
                          f"({len(want)} groups): {got} != {want}")


def _visible(path: str, kind: str) -> list[tuple]:
    from hudilite.reader.merge import SliceDesc, merge_slice
    from hudilite.reader.planner import plan_read

    plan = plan_read(path)
    spec = plan.merge_spec()
    t = pa.concat_tables([merge_slice(SliceDesc.of(sl), spec) for sl in plan.slices], promote_options="default")
    return list(zip(*[t.column(c).to_pylist() for c in AGG_VISIBLE[kind]]))


def _same(a: list, b: list) -> bool:
    if len(a) != len(b):
        return False
    for u, v in zip(a, b):
        for x, y in zip(u, v):
            if isinstance(x, float) or isinstance(y, float):
                if x is None or y is None or abs(x - y) > 1e-9:
                    return False
            elif x != y:
                return False
    return True


def _recover_aggregate(sc: Scenario, path: str) -> None:
    """The next refresh (folding what a crashed one did not commit: a checkpoint behind or ahead of the rows
    shows), then, with value-multiset state, one after a further upstream commit (the state saved by the
    recovered refresh is folded): each equals the recomputation."""
    spark = _parent_spark() if sc.spark else None  # the driver-local fold needs no Spark
    _refresh(spark, sc.aggregate, path)
    _check_aggregate(sc, path, "after the next refresh")
    if sc.spark:  # the Spark fold keeps no state beside the rows and the checkpoint: checked by now
        return
    _write_detail(os.path.dirname(path), 2)
    _refresh(spark, sc.aggregate, path)
    _check_aggregate(sc, path, "after a further upstream commit and refresh")


def _recover(sc: Scenario, path: str) -> None:
    from hudilite.table import HoodieTable

    if sc.recover == "aggregate":
        return _recover_aggregate(sc, path)

    if sc.recover == "rollback" and HoodieTable.exists(path):
        if _cli_rollback(path) != 0:
            raise CheckFailed("hudilite rollback failed")
    if sc.recover == "compaction":
        from hudilite.services.compaction import run_compaction

        run_compaction(path, dict(BASE_OPTIONS), wait=True)
    if sc.recover == "clustering":
        from hudilite.services.clustering import run_clustering

        run_clustering(path, {**BASE_OPTIONS, **CLUSTER_OPTIONS}, wait=True)
    if sc.recover == "upgrade":  # the next upgrade finishes (or, killed before its commit point, redoes) it
        from hudilite.services.upgrade import upgrade

        upgrade(path, options=dict(BASE_OPTIONS))
        if HoodieTable.open(path).config.version != 9:
            raise CheckFailed("the next upgrade did not leave a version-9 table")
    if sc.recover == "clean":
        from hudilite.services.clean import run_clean

        run_clean(path, {**BASE_OPTIONS, "hoodie.cleaner.commits.retained": "1"})
    if sc.recover == "archival":  # the next archival finishes the history's compaction and cleanup
        from hudilite.services.archival import archive

        archive(path, {**BASE_OPTIONS, **ARCHIVE_OPTIONS})
    if sc.recover == "stream" and HoodieTable.exists(path):
        from hudilite.streaming import recover

        recover(path, QUERY_ID, dict(BASE_OPTIONS))
    # the next write (a new table when the crashed one left none)
    _write(path, _rows(1000, 5, 99, tag="next"), table_type=sc.table_type)


NEXT_ROWS = sorted(zip(*[_rows(1000, 5, 99, tag="next").column(c).to_pylist() for c in COLS]))


def leftovers(path: str) -> list[str]:
    """Files of the table nothing refers to: see the module doc, point 3."""
    from hudilite.change_images import DIR as IMAGES_DIR
    from hudilite.table import HoodieTable

    table = HoodieTable.open(path)
    tl = table.reload()
    bad = [f"pending instant {i.timestamp} {i.action} {i.state}" for i in tl.pending()]
    referenced = set()
    completed = set()
    for inst in tl.instants:
        if not inst.is_completed:
            continue
        completed.add(inst.timestamp)
        try:
            md = tl.read_metadata(inst)
        except Exception:  # noqa: BLE001 - clean / rollback metadata (avro): names no data files
            continue
        for stats in (md.get("partitionToWriteStats") or {}).values():
            for s in stats or []:
                if s.get("path"):
                    referenced.add(s["path"])
    archived = set(tl.archived.completed_write_times)
    meta = os.path.join(path, ".hoodie")
    for root, dirs, files in os.walk(path):
        rel_root = os.path.relpath(root, path)
        for f in files:
            rel = os.path.normpath(os.path.join(rel_root, f))
            if f.endswith(".tmp") or ".tmp-" in f or ".release." in f or ".broken." in f:
                bad.append(f"temp file {rel}")
            elif root == meta or rel.startswith(os.path.join(".hoodie", "archived")):
                continue
            elif rel.startswith(os.path.join(".hoodie", ".temp")):
                bad.append(f"marker {rel}")
            elif rel.startswith(os.path.join(".hoodie", ".heartbeat")):
                bad.append(f"heartbeat {rel}")
            elif rel.startswith(os.path.join(".hoodie", ".locks")):
                bad.append(f"lock file {rel}")
            elif rel.startswith(IMAGES_DIR):
                inst = rel[len(IMAGES_DIR) + 1:].split(os.sep)[0]
                if inst not in completed:
                    bad.append(f"change images of {inst} (not a completed instant): {rel}")
            elif rel.startswith(".hoodie"):
                continue
            elif f == ".hoodie_partition_metadata":
                continue
            elif rel not in referenced:
                ts = f.rsplit("_", 1)[-1].split(".")[0] if f.endswith(".parquet") else None
                if ts is None or ts not in archived:
                    bad.append(f"data file {rel} not in a completed instant's write stats")
        for d in dirs:
            rel = os.path.normpath(os.path.join(rel_root, d))
            if os.path.dirname(rel) in (os.path.join(".hoodie", ".temp"), os.path.join(".hoodie", ".heartbeat")):
                bad.append(f"directory {rel}")
            elif os.path.dirname(rel) == os.path.join(".hoodie", ".locks", "leases"):
                bad.append(f"lease directory {rel}")
    return bad


def _final_leftovers(sc: Scenario, path: str) -> str | None:
    from hudilite.services.clean import run_clean

    run_clean(path, dict(BASE_OPTIONS))
    bad = leftovers(path) + (aggregate_state_leftovers(path) if sc.aggregate else [])
    if bad:
        return "leftovers after recovery and clean: " + "; ".join(bad[:5])
    return None


def aggregate_state_leftovers(path: str) -> list[str]:
    """Aggregate state files (value multisets) no completed commit of the aggregate table names."""
    from hudilite.table import HoodieTable

    _, agg_state = _aggregate_engine()
    tl = HoodieTable.open(path).reload()
    named = set()
    for inst in tl.instants:
        if not inst.is_completed:
            continue
        try:
            raw = (tl.read_metadata(inst).get("extraMetadata") or {}).get(agg_state.STATE_KEY)
        except Exception:  # noqa: BLE001 - clean / rollback metadata (avro)
            continue
        if raw:
            named |= {os.path.basename(str(f)) for f in json.loads(raw).get("files", {}).values()}
    d = os.path.join(path, agg_state.DIR)
    return [f"aggregate state {f} not named by a completed commit" for f in sorted(os.listdir(d)) if f not in named] \
        if os.path.isdir(d) else []


@dataclass
class Oracle:
    before: list
    after: list


def check_point(sc: Scenario, template: str, oracle: Oracle, crash: str, workdir: str) -> str | None:
    """Run one crash point; None if every check passed, else what failed."""
    path = os.path.join(workdir, "t")
    shutil.rmtree(workdir, ignore_errors=True)
    os.makedirs(workdir)
    shutil.copytree(template, path, symlinks=True)
    if sc.aggregate:
        shutil.copytree(os.path.join(os.path.dirname(template), DETAIL), os.path.join(workdir, DETAIL), symlinks=True)
    try:
        p = _child(sc.name, path, crash)
        if not _crashed(sc, p, path, crash) and not (p.returncode == 0 and sc.timed_ops):
            return f"child exited {p.returncode} instead of crashing: {p.stderr[-2000:]}"
        state = _snapshot(path, _cols(sc))
        if p.returncode == 0 and state != oracle.after:
            return "the run was not crashed (fewer storage operations this time) but is not the after-state"
        if state == oracle.after:
            was = "after"
        elif state == oracle.before:
            was = "before"
        else:
            return f"snapshot after the crash is neither the before- nor the after-state ({len(state)} rows)"
        hb = os.path.join(path, ".hoodie", ".heartbeat")
        if os.path.isdir(hb) and os.listdir(hb):
            time.sleep(HEARTBEAT_TOLERANCE_S)  # until the killed writer's heartbeat expired (lazy rollback)
        _recover(sc, path)
        if sc.aggregate:
            _snapshot(path, None)  # hudi-rs agrees
            return _final_leftovers(sc, path)
        state2 = _snapshot(path)
        ok = [sorted(s + NEXT_ROWS) for s in ([oracle.after] if was == "after" else [oracle.before, oracle.after])]
        if state2 not in ok:
            keys = [r[0] for r in state2]
            dup = len(keys) != len(set(keys))
            return (f"after recovery (crashed state: {was}) the snapshot is not that state plus the new rows "
                    f"({len(state2)} rows{', duplicate keys' if dup else ''})")
        return _final_leftovers(sc, path)
    except Exception as e:  # noqa: BLE001 - reported per crash point
        import traceback

        return f"{type(e).__name__}: {e}\n{traceback.format_exc()[-1500:]}"
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


# ---- driving ----------------------------------------------------------------------------------------------
_STATE: dict = {}


def _prepare(name: str, root: str) -> tuple[str, Oracle, list[str], list[dict]]:
    """Template, oracle, the crash points and the numbered storage operations of one scenario."""
    sc = SCENARIOS[name]
    template = os.path.join(root, name, "template")
    os.makedirs(os.path.dirname(template), exist_ok=True)
    sc.setup(template)
    before = _snapshot(template, _cols(sc)) if os.path.exists(os.path.join(template, ".hoodie")) else []
    count_dir = os.path.join(root, name, "count")
    shutil.copytree(template, count_dir, symlinks=True)
    ops = _count_ops(name, count_dir)
    outside = [o["path"] for o in ops if not os.path.abspath(o["path"]).startswith(count_dir + os.sep)]
    # the detail beside an aggregate table is shared by the counting run: it must stay read-only
    if sc.aggregate and outside:
        raise RuntimeError(f"{name}: storage operations outside the table under test: {outside[:3]}")
    after = _snapshot(count_dir, _cols(sc))
    shutil.rmtree(count_dir)
    points = []
    for k, o in enumerate(ops, 1):
        points.append(str(k))
        if o["tearable"]:
            points.append(f"{k}:torn")
    return template, Oracle(before, after), points, ops


def run_point(name: str, root: str, match, *, torn: bool = False) -> tuple[str, str | None]:
    """Check one crash point of scenario `name`: before (or with `torn` half-way through) its first storage
    operation for which `match(op, path)` is true (regression tests name a point by what it does, not by its
    number). Returns (the crash point, None or what failed)."""
    template, oracle, _points, ops = _prepare(name, root)
    k = next(i for i, o in enumerate(ops, 1) if match(o["op"], o["path"]))
    crash = f"{k}:torn" if torn else str(k)
    return crash, check_point(SCENARIOS[name], template, oracle, crash, os.path.join(root, name, "point"))


def _run_one(args) -> tuple[str, str, str | None, float]:
    name, template, oracle, crash, workdir = args
    t0 = time.monotonic()
    err = check_point(SCENARIOS[name], template, oracle, crash, workdir)
    return name, crash, err, time.monotonic() - t0


def _sample(names, tasks, ops, sample: int, seed: int, spark_sample: int) -> list:
    """A deterministic sample of `sample` crash points: `spark_sample` of each Spark scenario (a point in a
    task's worker, torn when it can be, and one of the driver: a Spark point costs an application start), the
    rest spread evenly over the other scenarios, then drawn from all of theirs."""
    rng = random.Random(seed)
    per = {n: [t for t in tasks if t[0] == n] for n in names}
    chosen = []
    for n in [n for n in names if SCENARIOS[n].spark]:
        driver = ops[n][0]["pid"]
        by_worker = [t for t in per[n] if ops[n][int(t[3].split(":")[0]) - 1]["pid"] != driver]
        first = [t for t in by_worker if t[3].endswith(":torn")] or by_worker
        picks = [rng.choice(first)] if first else []
        rest = [t for t in per[n] if t not in picks]
        chosen += picks + rng.sample(rest, max(0, min(len(rest), spark_sample - len(picks))))
    plain = [n for n in names if not SCENARIOS[n].spark]
    left = sample - len(chosen)
    if plain and left > 0:
        quota = max(1, left // len(plain))
        picked = []
        for n in plain:
            picked += rng.sample(per[n], min(quota, len(per[n])))
        rest = [t for n in plain for t in per[n] if t not in picked]
        picked += rng.sample(rest, max(0, min(len(rest), left - len(picked))))
        chosen += picked
    return chosen


def run(names: list[str], sample: int | None = None, seed: int = 0, workers: int = 2, root: str | None = None,
        log=print, spark_sample: int = 2) -> dict:
    """Run the crash points of the scenarios `names` (all, or a deterministic sample of `sample` spread over
    the scenarios, `spark_sample` of them per Spark scenario: see `_sample`). Returns {"points": {scenario: n},
    "failures": [(scenario, crash, message)], "seconds"}."""
    t0 = time.monotonic()
    own_root = root is None
    root = root or tempfile.mkdtemp(prefix="crashpoints-")
    try:
        # spawn: the parent has hudi-rs's runtime threads running (a fork would copy their locks, held); one
        # pool for both phases: a worker that built an aggregate template keeps its Spark for the recoveries
        with ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn")) as pool:
            return _run_pooled(pool, names, sample, seed, root, log, spark_sample, t0)
    finally:
        if own_root:
            shutil.rmtree(root, ignore_errors=True)


def _run_pooled(pool, names, sample, seed, root, log, spark_sample, t0) -> dict:
    prepared = dict(zip(names, pool.map(_prepare, names, [root] * len(names))))
    for n in names:
        log(f"{n}: {len(prepared[n][2])} crash points")
    tasks = []
    for n, (template, oracle, points, _ops) in prepared.items():
        tasks += [(n, template, oracle, c) for c in points]
    if sample is not None and sample < len(tasks):
        tasks = _sample(names, tasks, {n: prepared[n][3] for n in names}, sample, seed, spark_sample)
    else:  # round robin over the scenarios: an interrupted run has covered every one of them
        per = [[t for t in tasks if t[0] == n] for n in names]
        tasks = [t for i in range(max(map(len, per), default=0)) for p in per if i < len(p) for t in [p[i]]]
    counts: dict[str, int] = {}
    failures = []
    work = [(n, tpl, orc, c, os.path.join(root, n, f"w{i}")) for i, (n, tpl, orc, c) in enumerate(tasks)]
    for i, (name, crash, err, secs) in enumerate(pool.map(_run_one, work), 1):
        counts[name] = counts.get(name, 0) + 1
        if i % 50 == 0:
            log(f"{i}/{len(work)} crash points checked, {len(failures)} failed, "
                f"{time.monotonic() - t0:.0f} s")
        if err:
            failures.append((name, crash, err))
            log(f"FAIL {name} crash at {crash}: {err}")
    return {"points": counts, "failures": failures, "seconds": time.monotonic() - t0}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.crashpoints", description=__doc__.split("\n\n")[0])
    ap.add_argument("--ops", help="comma-separated scenarios (default: all): " + ", ".join(SCENARIOS))
    ap.add_argument("--sample", type=int, help="run a deterministic sample of this many crash points")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--spark-sample", type=int, default=2, help="crash points per Spark scenario in a sample")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--child", nargs=2, metavar=("OP", "PATH"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        child_main(*args.child)
        return 0
    names = args.ops.split(",") if args.ops else list(SCENARIOS)
    res = run(names, args.sample, args.seed, args.workers, spark_sample=args.spark_sample)
    total = sum(res["points"].values())
    for n in names:
        print(f"  {n:32s} {res['points'].get(n, 0):5d}")
    print(f"{total} crash points, {len(res['failures'])} failed, {res['seconds']:.0f} s")
    return 1 if res["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
