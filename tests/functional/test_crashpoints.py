"""Crash at every storage operation (bench/crashpoints.py): a process killed before (or half-way through) any
numbered storage operation of an operation under test leaves the before- or the after-snapshot (hudilite and
hudi-rs agree), the next write recovers and commits with every committed row exactly once, and after the next
clean nothing of the killed run is left.

By default a deterministic sample of crash points spread over every scenario (CI): 2 of each Spark scenario (an
application start per point; one of them in a task's worker), the rest over the driver-local ones; every crash
point with `HUDILITE_CRASHPOINTS=all` or the full run's HUDILITE_FULL=1 (or `python -m bench.crashpoints`, the
same run with a per-scenario table)."""

import os

import pytest

from bench import crashpoints
from tests import sampling

SAMPLE = int(os.environ.get("HUDILITE_CRASHPOINTS_SAMPLE", 104))
SEED = int(os.environ.get("HUDILITE_CRASHPOINTS_SEED", 24))
# one point per Spark scenario (inside a task's worker): each costs an application start
SPARK_SAMPLE = int(os.environ.get("HUDILITE_CRASHPOINTS_SPARK_SAMPLE", 1))


@pytest.mark.crashpoints
@pytest.mark.slow
def test_crash_points(tmp_path):
    everything = os.environ.get("HUDILITE_CRASHPOINTS", "").lower() == "all" or sampling.FULL
    names = list(crashpoints.SCENARIOS)
    res = crashpoints.run(names, sample=None if everything else SAMPLE, seed=SEED, root=str(tmp_path),
                          log=lambda *a: None, spark_sample=SPARK_SAMPLE)
    assert set(res["points"]) == set(names), "every scenario has crash points in the run"
    assert sum(res["points"].values()) >= (1000 if everything else 100)
    assert not res["failures"], "\n\n".join(f"{n} crash at {c}: {e}" for n, c, e in res["failures"])


def test_injector_numbers_every_mutating_operation_and_costs_nothing_uninstalled(tmp_path):
    from hudilite.storage import faults, storage_for

    fs = storage_for(str(tmp_path))
    assert type(fs).fault is None
    inj = faults.install(faults.CrashInjector())
    try:
        p = str(tmp_path / "a")
        fs.write_bytes(p, b"x")
        fs.put_if_absent(p + "2", b"y")
        fs.append_bytes(p + "3", [b"z"])
        fs.rename(p, p + "4")
        fs.delete(p + "4")
    finally:
        faults.install(None)
    assert [o for o, _p, _t in inj.ops] == ["write", "put_if_absent", "append", "rename", "delete"]
    assert faults.install_from_env({}) is None and type(fs).fault is None


def test_forked_children_exit_and_report_like_new_interpreters(tmp_path):
    """A driver-local scenario's children are forked from one preloaded server (bench.crashpoints.fork_server):
    the uncrashed run's numbered storage operations, a crash point's exit status and a failure's status and
    traceback are what a child started as `python -m bench.crashpoints --child` gives."""
    import json
    import shutil
    import subprocess
    import sys

    from hudilite.storage import faults

    template = str(tmp_path / "template")
    crashpoints.SCENARIOS["cow_upsert"].setup(template)
    forked = crashpoints._count_ops("cow_upsert", template, dry=True)
    server = crashpoints._FORK_SERVER["proc"]
    copy, log = str(tmp_path / "copy"), tmp_path / "ops.json"
    shutil.copytree(template, copy)
    env = {**os.environ, faults.LOG_ENV: str(log), "PYTHONPATH": crashpoints.ROOT}
    p = subprocess.run([sys.executable, "-m", "bench.crashpoints", "--child", "cow_upsert", copy], env=env,
                       cwd=crashpoints.ROOT, capture_output=True, text=True, timeout=300, start_new_session=True)
    assert p.returncode == 0, p.stderr
    # the same operations (their order varies run to run: a write's data files are written in parallel)
    assert len(forked) > 10 and sorted(o["op"] for o in forked) == sorted(o["op"] for o in json.loads(log.read_text()))

    before = crashpoints.read_own(template)
    crashed = crashpoints._child("cow_upsert", template, crash="3")
    assert crashed.returncode == faults.EXIT_CODE, crashed.stderr
    assert crashpoints.read_own(template) == before

    (tmp_path / "not-a-table").write_text("x")
    failed = crashpoints._child("cow_upsert", str(tmp_path / "not-a-table"))
    assert failed.returncode == 1 and "Traceback" in failed.stderr, failed.stderr
    assert crashpoints._FORK_SERVER["proc"] is server and server.poll() is None, "one server, reused"


_SESSION_CHILD = """
import os, subprocess, sys, time
from hudilite.storage import faults, storage_for
if sys.argv[2] == "named":
    os.environ[faults.SESSION_ENV] = str(os.getpid())
sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
open(sys.argv[1] + "/sleeper", "w").write(str(sleeper.pid))
faults.install_from_env()
fs = storage_for(sys.argv[1])
for i in range(4):
    fs.write_bytes(sys.argv[1] + f"/f{i}", b"x")
"""


@pytest.mark.parametrize("named", [True, False])
def test_shared_counter_numbers_processes_in_one_sequence_and_kills_the_session(tmp_path, named):
    """With a counter file, operations of several processes (here: an injector of this process, then a child's)
    share one numbering; the crash point kills every process of the child's session when the session is
    named (a Spark application: driver, JVM, workers), only the crashing process otherwise."""
    import signal
    import subprocess
    import sys
    import time

    from hudilite.storage import faults, storage_for

    counter = str(tmp_path / "counter")
    here = faults.CrashInjector(counter_path=counter)
    faults.install(here)
    try:
        storage_for(str(tmp_path)).write_bytes(str(tmp_path / "mine"), b"x")
    finally:
        faults.install(None)
    env = {**os.environ, faults.COUNTER_ENV: counter, faults.CRASH_AT_ENV: "3"}
    env.pop(faults.SESSION_ENV, None)
    p = subprocess.run([sys.executable, "-c", _SESSION_CHILD, str(tmp_path), "named" if named else "-"], env=env,
                       start_new_session=True, capture_output=True, text=True, timeout=120)
    assert p.returncode == (-signal.SIGKILL if named else faults.EXIT_CODE), p.stderr
    ops = faults.read_counter(counter)
    assert [os.path.basename(o["path"]) for o in ops] == ["mine", "f0", "f1"]  # 3: the crash point, not done
    assert sorted(os.listdir(tmp_path)) == ["counter", "f0", "mine", "sleeper"]
    sleeper = int((tmp_path / "sleeper").read_text())
    deadline = time.time() + 5
    alive = True
    while alive and time.time() < deadline:
        try:  # a zombie (not reaped: its parent died) counts as dead
            with open(f"/proc/{sleeper}/stat") as f:
                alive = f.read().rsplit(")", 1)[1].split()[0] != "Z"
        except FileNotFoundError:
            alive = False
        if alive:
            time.sleep(0.1)
    if not named:
        assert alive, "only the crashing process stops outside a named session"
        os.kill(sleeper, signal.SIGKILL)
    else:
        assert not alive, "the session's other processes are killed too"


def test_a_process_that_escaped_the_kill_stops_at_its_next_operation(tmp_path):
    """A process of the crashed application that the session kill missed (a worker forked after the session was
    enumerated, or one that left it) waits on the counter lock; once it gets it, the crash point has passed: it
    stops instead of acting after the crash (the full run's aggregate_refresh_spark point 28 found a marker
    written after the recovery's rollback)."""
    import subprocess
    import sys

    from hudilite.storage import faults

    counter = tmp_path / "counter"
    counter.write_text("".join('{"op": "write", "path": "p%d"}\n' % i for i in range(3)))  # crashed at 3
    env = {**os.environ, faults.COUNTER_ENV: str(counter), faults.CRASH_AT_ENV: "3"}
    env.pop(faults.SESSION_ENV, None)
    child = ("import sys\nfrom hudilite.storage import faults, storage_for\nfaults.install_from_env()\n"
             "storage_for(sys.argv[1]).write_bytes(sys.argv[1] + '/late', b'x')\n")
    p = subprocess.run([sys.executable, "-c", child, str(tmp_path)], env=env, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == faults.EXIT_CODE, p.stderr
    assert len(faults.read_counter(str(counter))) == 3
    assert not (tmp_path / "late").exists()


def test_clean_removes_markers_of_a_write_killed_after_its_commit(tmp_path):
    """A writer killed after its commit, before deleting its markers (aggregate_refresh_spark points 28-29: the
    kill during the lock release), leaves `.hoodie/.temp/<instant>`; the next refresh found nothing new and wrote
    nothing, so the next clean must remove it."""
    from bench.crashpoints import BASE_OPTIONS, _rows, _write
    from hudilite.services.clean import run_clean
    from hudilite.table import HoodieTable

    path = str(tmp_path / "t")
    _write(path, _rows(0, 5, 1), operation="insert", table_type="COPY_ON_WRITE")
    t = HoodieTable.open(path).timeline.latest_completed().timestamp
    markers = os.path.join(path, ".hoodie", ".temp", t)
    os.makedirs(markers)
    for name in ("MARKERS.type", f"f-0_0-1-1_{t}.parquet.marker.MERGE"):
        open(os.path.join(markers, name), "w").close()
    run_clean(path, dict(BASE_OPTIONS))
    assert not os.path.exists(markers)


# ---- regressions: bugs the crash points found (each names its crash point by what the operation does there) ----
@pytest.mark.slow
def test_archival_killed_after_deleting_instant_files_leaves_no_change_images(tmp_path):
    """archive() deleted the archived instants' files before their change images: killed in between, the
    images stayed forever (nothing removes images of an instant no longer on the active timeline)."""
    deletes = []

    def third_instant(op, p):
        """Before deleting the third archived instant's first file: the second (an upsert, which wrote change
        images; the first is the table's insert, which wrote none) is off the active timeline then."""
        if op != "delete" or os.path.basename(os.path.dirname(p)) != ".hoodie":
            return False
        deletes.append(p)
        return len(deletes) == 7  # requested, inflight, completed of each instant

    crash, err = crashpoints.run_point("archival", str(tmp_path), third_instant)
    assert err is None, f"crash at {crash}: {err}"


@pytest.mark.slow
def test_torn_last_completion_time_temp_file_is_removed(tmp_path):
    """A writer killed while writing `.hoodie/.aux/last_completion_time` (temp file written, not renamed) left
    the temp file forever; the next completion removes it."""
    crash, err = crashpoints.run_point(
        "compaction", str(tmp_path), lambda op, p: op == "write" and p.endswith("last_completion_time"), torn=True)
    assert err is None, f"crash at {crash}: {err}"


@pytest.mark.slow
def test_lock_release_killed_after_its_rename_leaves_no_grave(tmp_path):
    crash, err = crashpoints.run_point("cow_upsert", str(tmp_path), lambda op, p: op == "delete" and ".release." in p)
    assert err is None, f"crash at {crash}: {err}"


@pytest.mark.slow
def test_torn_partition_metadata_of_a_new_partition_is_removed_by_rollback(tmp_path):
    """A write killed while writing a new partition's `.hoodie_partition_metadata` (temp file written, not
    linked) left the temp file, and so the partition directory, after its rollback."""
    crash, err = crashpoints.run_point(
        "cow_insert_new_table", str(tmp_path),
        lambda op, p: op == "put_if_absent" and p.endswith(".hoodie_partition_metadata"), torn=True)
    assert err is None, f"crash at {crash}: {err}"


@pytest.mark.slow
def test_torn_service_claim_temp_file_is_removed_by_the_next_claim(tmp_path):
    """An executor killed while writing its claim record on a clustering plan (temp file written, not renamed)
    left the temp file in `.hoodie/.aux/service_claims` forever; the next claim of the plan removes it."""
    crash, err = crashpoints.run_point(
        "clustering", str(tmp_path), lambda op, p: op == "write" and "service_claims" in p, torn=True)
    assert err is None, f"crash at {crash}: {err}"


@pytest.mark.slow
def test_torn_table_properties_of_a_new_table_are_removed_by_the_next_creator(tmp_path):
    """The first write killed while writing `hoodie.properties` (temp file written, not linked) left the temp
    file in `.hoodie` forever; the write that creates the table next removes it."""
    crash, err = crashpoints.run_point(
        "cow_insert_new_table", str(tmp_path), lambda op, p: op == "put_if_absent" and p.endswith("hoodie.properties"),
        torn=True)
    assert err is None, f"crash at {crash}: {err}"


@pytest.mark.slow
def test_torn_service_plan_temp_file_is_removed_by_the_next_write(tmp_path):
    """A clean scheduler killed while writing its plan (`<instant>.clean.requested`: temp file written, not
    linked) left the temp file in `.hoodie` forever: the instant never reached the timeline, and only temp files
    of completed or rolled-back instants were removed. Same for compaction and clustering plans."""
    crash, err = crashpoints.run_point(
        "clean", str(tmp_path), lambda op, p: op == "put_if_absent" and p.endswith(".clean.requested"), torn=True)
    assert err is None, f"crash at {crash}: {err}"


def test_upgrade_killed_in_its_compaction_leaves_no_layout1_temp_file(tmp_path):
    # a torn put of the compaction's inflight file (layout 1): after the upgrade nothing writes that instant
    # again, so the upgrade itself removes the temp file
    crash, err = crashpoints.run_point("upgrade_mor", str(tmp_path),
                                       lambda op, p: p.endswith(".compaction.inflight"), torn=True)
    assert err is None, f"{crash}: {err}"
