"""Crash safety: a writer killed with SIGKILL at any point of an upsert leaves the table at the old snapshot or
the new one, never a mix; the next writer rolls back what the dead one left and loses nothing committed.

Each case runs `crash_writer.py` in a subprocess (its own SparkSession, local[1]) against a copy of a
template table; the next case's subprocess is started while the current case is checked (its JVM start-up
overlaps the checks). The writer kills its whole process tree (driver, JVM, Python daemon and workers) at a
deterministic point, or after a random delay. The parent then checks, with the shared session and with
hudi-rs, what a reader sees; checks that the leftovers are what the kill point implies; runs a new write;
and checks that the leftovers of the dead write are gone and every committed row is still there.
"""

from __future__ import annotations

import glob
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import hudilite
from hudilite.table import HoodieTable
from tests.functional.crash_writer import kill_tree

pytestmark = pytest.mark.slow

HERE = os.path.dirname(os.path.abspath(__file__))
CRASH_WRITER = os.path.join(HERE, "crash_writer.py")
SCHEMA = "id long, part string, val long, note string, ver long"
COLS = ["id", "part", "val", "note", "ver"]
WRITE = {"record_key": "id", "precombine_field": "ver", "partition_by": ["part"]}
# the leftover checks name version-6 timeline files (.hoodie/<t>.commit, ...); the template pins it, and the
# crash writer's writes follow the table's version
TEMPLATE_OPTIONS = {"hoodie.write.table.version": "6"}
# the dead writer's lock lease: a kill inside the lock (commit_link) costs the next writer this long; its
# heartbeat tolerance (500 ms x 2): the next writer rolls the dead write back once it is that old (lazy rollback)
CHILD_OPTIONS = {"hoodie.write.lock.filesystem.expire.ms": "3000", "hoodie.client.heartbeat.interval_in_ms": "500",
                 "hoodie.client.heartbeat.tolerable.misses": "2"}
CHILD_TIMEOUT_S = 900  # the JVM start alone takes 5 s on an idle machine, much longer on a loaded one
TS_RE = re.compile(r"\d{17}")

# seconds from the start of hudilite.write to its commit, measured by the deterministic after_commit run;
# the random-delay cases draw their delay from [0, that]
_MEASURED_WRITE_S: list[float] = []
DEFAULT_RANDOM_SPAN_S = 15.0


# ------------------------------------------------------------------------------------------------
# data
def base_rows():
    return [(i, f"p{i % 3}", i, "base", 1) for i in range(240)]


def second_rows():
    return [(i, f"p{i % 3}", i * 10, "c2", 2) for i in range(0, 240, 4)]


def crash_rows():
    """What the killed writer upserts: updates in p0 and p1, inserts into p0 and into a new partition p3."""
    upd = [(i, f"p{i % 3}", i * 100, "crash", 3) for i in range(0, 240, 5) if i % 3 in (0, 1)]
    ins = [(1000 + i, "p3", i, "crash-new", 3) for i in range(20)]
    ins += [(2000 + 3 * i, "p0", i, "crash-new", 3) for i in range(10)]
    return upd + ins


def recovery_rows():
    """The next writer: updates in p1 and p2, inserts into a new partition p4."""
    upd = [(i, f"p{i % 3}", i * 1000, "recover", 4) for i in range(0, 240, 7) if i % 3 in (1, 2)]
    return upd + [(3000 + i, "p4", i, "recover-new", 4) for i in range(10)]


def apply_upsert(state: dict, rows) -> dict:
    out = dict(state)
    for r in rows:
        cur = out.get(r[0])
        if cur is None or r[4] >= cur[4]:
            out[r[0]] = tuple(r)
    return out


def as_rows(state: dict) -> list[tuple]:
    return sorted(state.values())


# ------------------------------------------------------------------------------------------------
# reading and inspecting
def snapshot(spark, path, **kw) -> list[tuple]:
    return sorted(tuple(r) for r in hudilite.read(spark, path, **kw).select(*COLS).collect())


def hudi_rs_snapshot(path) -> list[tuple]:
    from hudi import HudiTableBuilder

    table = HudiTableBuilder.from_base_uri(path).build()
    batches = table.read_snapshot() if hasattr(table, "read_snapshot") else table.read()
    if not batches:
        return []
    t = pa.Table.from_batches(batches).select(COLS)
    return sorted(tuple(r[c] for c in COLS) for r in t.to_pylist())


def all_paths(root) -> list[str]:
    """Every file and directory under root, relative."""
    out = []
    for dirpath, dirs, files in os.walk(root):
        for n in dirs + files:
            out.append(os.path.relpath(os.path.join(dirpath, n), root))
    return sorted(out)


def instant_times(root) -> set[str]:
    # the first time in a name is its instant's: a version-9 completed instant file is <t>_<completion>.<action>
    return {m.group() for p in all_paths(root) if (m := TS_RE.search(os.path.basename(p)))}


def completed_times(path) -> set[str]:
    return {i.timestamp for i in HoodieTable.open(path).reload().completed()}


def markers_of(path, t) -> list[str]:
    d = os.path.join(path, ".hoodie", ".temp", t)
    return sorted(os.path.relpath(p, d) for p in glob.glob(os.path.join(d, "**", "*.marker.*"), recursive=True))


def data_files_of(path, t) -> list[str]:
    return sorted(p for p in glob.glob(os.path.join(path, "*", f"*_{t}.parquet")))


def readable(parquet_path) -> bool:
    try:
        pq.read_metadata(parquet_path)
        return True
    except Exception:  # noqa: BLE001 - a torn file
        return False


# ------------------------------------------------------------------------------------------------
# the template table and running the crash writer
@pytest.fixture(scope="module")
def template(spark, tmp_path_factory, writers):
    path = str(tmp_path_factory.mktemp("crash-template") / "tbl")
    c1 = hudilite.write(spark.createDataFrame(base_rows(), SCHEMA), path, operation="bulk_insert", **WRITE,
                        options=TEMPLATE_OPTIONS)
    c2 = hudilite.write(spark.createDataFrame(second_rows(), SCHEMA), path, **WRITE)
    state = apply_upsert(apply_upsert({}, base_rows()), second_rows())
    assert snapshot(spark, path) == as_rows(state)
    return {"path": path, "state": state, "instants": [c1, c2]}


class Writers:
    """Crash writers of this module's cases, in the order the cases run: the next case's writer is started
    (interpreter, JVM, SparkSession: most of a case) as soon as the current one has died, so its start-up
    overlaps the current case's checks; it gets its job only when its case starts."""

    def __init__(self, plan: list[str], root):
        self.plan = plan   # kill points of the cases still to run, in order
        self.root = root
        self.n = 0
        self.warm = None   # (point, Popen, state dir, log path) of the next case's writer

    def _start(self, point):
        self.n += 1
        state = self.root / f"state-{self.n}-{point}"
        state.mkdir()
        log_path = self.root / f"crash-writer-{self.n}-{point}.log"
        env = dict(os.environ, PYSPARK_PYTHON=sys.executable)
        with open(log_path, "wb") as log:
            proc = subprocess.Popen([sys.executable, CRASH_WRITER, point, str(state)], stdin=subprocess.PIPE,
                                    stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        return point, proc, state, log_path

    def take(self, point):
        """The writer of this case: the one started ahead if it is this case's, else a new one."""
        if self.plan and self.plan[0] == point:
            self.plan.pop(0)
        warm, self.warm = self.warm, None
        if warm is not None and warm[0] == point:
            return warm
        self._stop(warm)
        return self._start(point)

    def start_next(self):
        if self.warm is None and self.plan:
            self.warm = self._start(self.plan[0])

    @staticmethod
    def _stop(writer):
        if writer is not None:
            kill_tree(writer[1].pid)
            writer[1].wait()

    def close(self):
        self._stop(self.warm)
        self.warm = None


@pytest.fixture(scope="module")
def writers(request, tmp_path_factory):
    plan = [item.callspec.params.get("point", "random") for item in request.session.items
            if item.module is request.module and hasattr(item, "callspec")]
    pool = Writers(plan, tmp_path_factory.mktemp("crash-writers"))
    pool.start_next()   # starts while the template table is built
    yield pool
    pool.close()


def run_crash_writer(writers, table, point, delay=0.0) -> dict:
    """Run the crash writer to its kill point; returns what happened (return code, fired/done records)."""
    point, proc, state, log_path = writers.take(point)
    job = {"table": table, "schema": SCHEMA, "rows": crash_rows(), "delay": delay,
           "write": {**WRITE, "options": CHILD_OPTIONS}}
    try:
        proc.stdin.write((json.dumps(job) + "\n").encode())
        proc.stdin.close()
    except BrokenPipeError:  # it died starting up: reported below with its log
        pass
    try:
        rc = proc.wait(timeout=CHILD_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        kill_tree(proc.pid)
        proc.wait()
        pytest.fail(f"crash writer at {point} did not finish in {CHILD_TIMEOUT_S} s; log: {log_path}")
    writers.start_next()

    def record(name):
        p = state / name
        return json.loads(p.read_text()) if p.exists() else None

    out = {"rc": rc, "fired": record("fired"), "done": record("done"), "log": str(log_path)}
    started = state / "started"
    out["started"] = float(started.read_text()) if started.exists() else None
    if out["fired"] is None and out["done"] is None:
        tail = log_path.read_text(errors="replace")[-3000:]
        pytest.fail(f"crash writer at {point} neither reached its kill point nor finished (rc={rc}):\n{tail}")
    if out["fired"] is not None:
        assert rc == -signal.SIGKILL, f"crash writer fired {point} but exited with {rc}"
    return out


def wait_for_heartbeat_expiry(path, t, timeout_s=60):
    from hudilite.timeline.heartbeat import read_heartbeat

    deadline = time.time() + timeout_s
    while (hb := read_heartbeat(path, t)) is not None and hb["age_ms"] <= hb["tolerance_ms"]:
        assert time.time() < deadline, f"the heartbeat of the dead writer's {t} keeps beating"
        time.sleep(0.1)


def check_scenario(path, point, t):
    """The leftovers of the dead writer are what its kill point implies (so the case tests what it says)."""
    hoodie = os.path.join(path, ".hoodie")
    has = lambda name: os.path.exists(os.path.join(hoodie, name))  # noqa: E731
    markers = markers_of(path, t)
    data = data_files_of(path, t)
    if point == "before_markers":
        assert has(f"{t}.commit.requested") and not has(f"{t}.inflight") and not has(f"{t}.commit")
        assert not os.path.exists(os.path.join(hoodie, ".temp", t)) and not data
    elif point == "after_inflight":
        assert has(f"{t}.inflight") and not has(f"{t}.commit") and not markers and not data
    elif point == "first_marker":
        assert has(f"{t}.inflight") and not has(f"{t}.commit")
        assert len(markers) == 1 and not data, (markers, data)
    elif point == "torn_data_file":
        assert has(f"{t}.inflight") and not has(f"{t}.commit")
        assert len(data) == 2 and len(markers) >= 2, (markers, data)
        assert sorted(readable(p) for p in data) == [False, True]
    elif point == "before_commit":
        assert has(f"{t}.inflight") and not has(f"{t}.commit")
        assert len(data) == len(markers) >= 3 and all(readable(p) for p in data), (markers, data)
        assert os.path.exists(os.path.join(path, "part=p3", ".hoodie_partition_metadata"))
    elif point == "commit_link":
        # the body is staged in the writer's lease directory (the fence), from where it is linked in place
        assert not has(f"{t}.commit") and glob.glob(os.path.join(hoodie, ".locks", "leases", "lease.*",
                                                                 f".{t}.commit.*.tmp"))
        assert os.path.exists(os.path.join(hoodie, ".locks", "table.lock"))  # died holding the lock
        assert len(data) == len(markers) >= 3
    elif point == "after_commit":
        assert has(f"{t}.commit") and markers and len(data) == len(markers)


def check_no_leftovers(path, t, committed: bool):
    """Nothing of instant `t` remains but, if it committed, its instant files and the files it committed."""
    allowed = set()
    if committed:
        allowed = {f".hoodie/{t}.commit", f".hoodie/{t}.commit.requested", f".hoodie/{t}.inflight"}
        with open(os.path.join(path, ".hoodie", f"{t}.commit")) as f:
            md = json.load(f)
        allowed |= {s["path"] for stats in md["partitionToWriteStats"].values() for s in stats}
        if (md.get("extraMetadata") or {}).get("hudilite.change.images"):  # the commit's change images
            allowed.add(f".hoodie/.aux/hudilite_changes/{t}")
    left = [p for p in all_paths(path) if t in os.path.basename(p) and p not in allowed]
    assert not left, f"leftovers of instant {t} (committed={committed}): {left}"
    if not committed:
        for meta in glob.glob(os.path.join(path, "**", ".hoodie_partition_metadata"), recursive=True):
            with open(meta) as f:
                assert f"commitTime={t}" not in f.read(), f"{meta} was created by the failed instant {t}"
    locks = os.path.join(path, ".hoodie", ".locks")
    assert not os.path.isdir(locks) or not os.listdir(locks), os.listdir(locks)
    assert not HoodieTable.open(path).reload().pending(), "pending instants remain"


def crash_case(spark, template, writers, tmp_path, point, delay=0.0) -> str:
    """Run one crash case end to end; returns "old" or "new" (what a reader saw after the crash)."""
    path = str(tmp_path / "tbl")
    shutil.copytree(template["path"], path)
    known = instant_times(path)
    old = as_rows(template["state"])
    new_state = apply_upsert(template["state"], crash_rows())
    new = as_rows(new_state)

    run = run_crash_writer(writers, path, point, delay)
    new_times = instant_times(path) - known
    assert len(new_times) <= 1, f"the crash writer left more than one instant: {sorted(new_times)}"
    t = next(iter(new_times), None)
    if run["fired"] is not None and point == "after_commit" and run["started"]:
        _MEASURED_WRITE_S.append(run["fired"]["time"] - run["started"])

    # 1. what readers see: exactly the old or the new snapshot, the new one iff the commit file exists
    committed = t is not None and t in completed_times(path)
    seen = snapshot(spark, path)
    assert seen in (old, new), f"{point}: the snapshot after the crash is neither the old nor the new one"
    assert (seen == new) == committed, f"{point}: snapshot={'new' if seen == new else 'old'}, committed={committed}"
    assert hudi_rs_snapshot(path) == seen, f"{point}: hudi-rs disagrees with hudilite after the crash"
    assert snapshot(spark, path, as_of=template["instants"][-1]) == old
    if point != "random":
        assert run["fired"] is not None, f"{point}: the write finished without reaching its kill point"
        assert t is not None, f"{point}: the writer died before creating its instant"
        check_scenario(path, point, t)
    if run["done"] is not None:
        assert committed and run["done"]["instant"] == t

    # 2. the next writer rolls the dead write back (or keeps it, if it committed) and writes; writers roll back
    # a dead writer's instant once its heartbeat is older than the dead writer's tolerance
    if t is not None and not committed:
        wait_for_heartbeat_expiry(path, t)
    before_recovery = new_state if committed else template["state"]
    rec = hudilite.write(spark.createDataFrame(recovery_rows(), SCHEMA), path, **WRITE)
    expected = as_rows(apply_upsert(before_recovery, recovery_rows()))
    assert snapshot(spark, path) == expected
    assert hudi_rs_snapshot(path) == expected
    # nothing committed is lost: every committed instant still reads as before
    assert snapshot(spark, path, as_of=template["instants"][-1]) == old
    if committed:
        assert snapshot(spark, path, as_of=t) == new
    assert rec not in known and rec != t
    if t is not None:
        check_no_leftovers(path, t, committed)
    # and the table keeps working: one more write on top
    hudilite.write(spark.createDataFrame([(1, "p1", -1, "after", 5)], SCHEMA), path, **WRITE)
    assert dict((r[0], r) for r in snapshot(spark, path))[1] == (1, "p1", -1, "after", 5)
    return "new" if committed else "old"


# ------------------------------------------------------------------------------------------------
DETERMINISTIC = [
    ("before_markers", "old"),
    ("first_marker", "old"),
    ("torn_data_file", "old"),
    ("before_commit", "old"),
    ("commit_link", "old"),
    ("after_commit", "new"),
]


@pytest.mark.parametrize("point,expected", DETERMINISTIC, ids=[p for p, _ in DETERMINISTIC])
def test_kill_at_point(spark, template, writers, tmp_path, point, expected):
    assert crash_case(spark, template, writers, tmp_path, point) == expected


@pytest.mark.parametrize("seed", [7, 1234])
def test_kill_after_random_delay(spark, template, writers, tmp_path, seed):
    span = max(_MEASURED_WRITE_S) if _MEASURED_WRITE_S else DEFAULT_RANDOM_SPAN_S
    delay = random.Random(seed).uniform(0, span)
    print(f"seed {seed}: killing after {delay:.2f} s of [0, {span:.2f}] s")
    t0 = time.time()
    outcome = crash_case(spark, template, writers, tmp_path, "random", delay)
    print(f"seed {seed}: outcome {outcome} ({time.time() - t0:.1f} s)")
