"""Stateful model test (issue 24): a hypothesis RuleBasedStateMachine drives one table (copy-on-write or
merge-on-read) through writes, table services, crashes and concurrent writers, beside a pure-Python oracle.

Rules: upsert batches (in-batch duplicates, late records, `_hoodie_is_deleted` rows), delete batches,
insert_overwrite, a write left pending then completed or aborted (rollback), a crashed write or service
(stopped at a random storage operation, see `crashing`), compaction schedule / run (MOR), clean, clustering,
archival, two writers interleaved through the lock in threads (conflicts allowed), clean / archival / lazy
rollback run in a thread while a writer's instant is inflight, a change read advancing a checkpoint, an
aggregate refresh.

Invariants after every step: the snapshot (read in this process: `plan_read` + `merge_slice`, no Spark) equals
the oracle, `_hoodie_commit_time` included; time travel to every retained completed write instant equals the
oracle replayed up to that instant; change reads between consecutive checkpoints partition the row images
(each image read once, none skipped); hudi-rs reads the same snapshot. The aggregate (a separate table
refreshed from this one) equals a recomputation from the oracle after each refresh.

Budget: HUDILITE_MODEL_EXAMPLES (default 6 per table type) x HUDILITE_MODEL_STEPS (default 12) steps,
derandomized (the same examples every run), and a fixed script calling every rule once (`SCRIPT`: the
examples alone never draw some of them, e.g. compaction or a change read that sees deletes). A longer run:
`HUDILITE_MODEL_EXAMPLES=500 pytest -m model_long`
(see README, Testing). A failure prints the shrunk steps and hypothesis' `@reproduce_failure` blob.

Approximation: a "crash" raises at the k-th mutating `LocalStorage` call (plus data-file writes through the
write handles) and the dying writer does no rollback and stops beating (heartbeat removed, as when its
process is gone); the child-process crash harness covers true process death.
"""

from __future__ import annotations

import os
from collections import Counter
import shutil
import tempfile
import threading
import time
from contextlib import contextmanager

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule, run_state_machine_as_test

import hudilite
from hudilite.errors import CommitConflictError, RangeUnavailableError
from hudilite.reader.merge import SliceDesc, merge_slice
from hudilite.reader.planner import plan_read
from hudilite.table import HoodieTable
from tests.sampling import FULL

EXAMPLES = int(os.environ.get("HUDILITE_MODEL_EXAMPLES", "6"))
STEPS = int(os.environ.get("HUDILITE_MODEL_STEPS", "12"))
SCHEMA = pa.schema([("id", pa.int64()), ("p", pa.string()), ("v", pa.int64()), ("x", pa.int64()),
                    ("_hoodie_is_deleted", pa.bool_())])
KEYS = 16
RAN: Counter = Counter()  # rule -> times run (this process)
# a lock left by a crashed step is broken once its lease ran out: 5 s, not the default minute of waiting
OPTS = {"hoodie.write.fsync": "false", "hoodie.client.heartbeat.interval_in_ms": "200",
        "hoodie.client.heartbeat.tolerable.misses": "2", "hoodie.write.lock.filesystem.expire.ms": "5000"}
OCC = {**OPTS, "hoodie.write.concurrency.mode": "optimistic_concurrency_control"}
SERVICE_OPTS = {"hoodie.cleaner.commits.retained": "3", "hoodie.keep.min.commits": "4",
                "hoodie.keep.max.commits": "5"}
# a writer beside a service: its heartbeat tolerates a loaded machine (a lazy rollback must see it alive)
LIVE = {**OPTS, "hoodie.client.heartbeat.tolerable.misses": "25"}
AGG_SQL = "select p, count(*) as n, count(x) as nx, sum(x) as s from `db`.`detail` group by p"


def part_of(k: int) -> str:
    return "a" if k % 2 == 0 else "b"


def arrow(rows) -> pa.Table:
    return pa.Table.from_pylist([{"id": k, "p": part_of(k), "v": v, "x": x, "_hoodie_is_deleted": d}
                                 for k, v, x, d in rows], schema=SCHEMA)


# ------------------------------------------------------------------------------------------------
# the oracle: state = {id: (v, x, commit_time)}
def apply(state: dict, kind: str, rows, t: str) -> None:
    if kind == "delete":
        for k, *_ in rows:
            state.pop(k, None)
        return
    if kind == "insert_overwrite":
        parts = {part_of(k) for k, *_ in rows}
        for k in [k for k in state if part_of(k) in parts]:
            del state[k]
        for k, v, x, _d in rows:
            state[k] = (v, x, t)
        return
    win: dict = {}
    for k, v, x, d in rows:  # in-batch duplicates: highest ordering value, ties: the later row
        if k not in win or v >= win[k][0]:
            win[k] = (v, x, d)
    for k, (v, x, d) in win.items():
        cur = state.get(k)
        if cur is not None and v < cur[0]:
            continue  # late record
        if d:
            state.pop(k, None)
        else:
            state[k] = (v, x, t)


def replay(commits, upto: str | None = None) -> dict:
    state: dict = {}
    for c in sorted(commits, key=lambda c: c["t"]):
        if upto is None or c["t"] <= upto:
            apply(state, c["kind"], c["rows"], c["t"])
    return state


# ------------------------------------------------------------------------------------------------
# reads without Spark
def local_rows(path: str, **kw) -> dict:
    plan = plan_read(path, **kw)
    spec = plan.merge_spec()
    out: dict = {}
    for sl in plan.slices:
        t = merge_slice(SliceDesc.of(sl), spec)
        for r in t.select(["id", "v", "x", "_hoodie_commit_time"]).to_pylist():
            assert r["id"] not in out, f"key {r['id']} read twice ({kw})"
            out[r["id"]] = (r["v"], r["x"], r["_hoodie_commit_time"])
    return out


def hudi_rs_rows(path: str) -> dict:
    from tests.hudi_rs import read_hudi_rs

    t = read_hudi_rs(path)
    if t is None:
        return {}
    rows = t.select(["id", "v", "x", "_hoodie_commit_time"]).to_pylist()
    out = {r["id"]: (r["v"], r["x"], r["_hoodie_commit_time"]) for r in rows}
    assert len(out) == len(rows), "hudi-rs read a key twice"
    return out


# ------------------------------------------------------------------------------------------------
# crashes: the k-th mutating storage operation raises, the writer does no cleanup
class Crash(BaseException):
    pass


MUTATING = ("write_bytes", "put_if_absent", "create_empty_if_absent", "delete", "delete_tree", "rename", "makedirs")


@contextmanager
def crashing(k: int):
    """Raise `Crash` at the k-th mutating storage call; the writer's own rollback is a no-op (it died)."""
    import pytest as _pytest  # noqa: F401

    from hudilite.storage.local import LocalStorage
    from hudilite.writer import client

    mp = _pytest.MonkeyPatch()
    count = {"n": 0}
    for name in MUTATING:
        orig = getattr(LocalStorage, name)

        def wrapped(self, *a, __orig=orig, **kw):
            count["n"] += 1
            if count["n"] == k:
                raise Crash(f"crashed at storage operation {k}")
            return __orig(self, *a, **kw)

        mp.setattr(LocalStorage, name, wrapped)
    mp.setattr(client, "abort_write", lambda *a, **kw: [])
    try:
        yield count
    finally:
        mp.undo()


# ------------------------------------------------------------------------------------------------
rows_st = st.lists(st.tuples(st.integers(0, KEYS - 1), st.integers(0, 4), st.integers(-50, 50),
                             st.sampled_from([False, False, False, True])), min_size=1, max_size=8)


class Model(RuleBasedStateMachine):
    spark = None
    table_type = "COPY_ON_WRITE"

    def __init__(self):
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="hudilite-model-")
        self.path = os.path.join(self.dir, "t")
        self.agg = os.path.join(self.dir, "agg")
        self.commits: list[dict] = []  # committed data writes: t, kind, rows
        self.state: dict = {}
        self.checkpoints: list[str | None] = [None]
        self.read_images: dict = {}  # (id, commit time) -> change read that returned it
        self.created = False

    def teardown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    # ---------------------------------------------------------------- helpers
    def _write(self, rows, kind, options=OPTS, **kw):
        """The write's instant (or PendingWrite); None when it was refused with a retryable conflict because
        it touches file groups of a pending compaction / clustering plan (a crashed service left it), which
        is the documented behaviour: the table must then be as it was (the invariants check it)."""
        try:
            return hudilite.write(arrow(rows), self.path, record_key="id", precombine_field="v",
                                  partition_by=("p",), operation=kind, table_type=self.table_type,
                                  options=options, **kw)
        except CommitConflictError:
            if not self._pending_plans():
                raise
            RAN[f"{kind}: conflict with a pending service plan"] += 1
            return None

    def _pending_plans(self) -> list:
        if not HoodieTable.exists(self.path):
            return []
        return [i for i in self._table().reload().pending() if i.action in ("compaction", "replacecommit")]

    def _committed(self, t: str, kind: str, rows) -> None:
        self.commits.append({"t": str(t), "kind": kind, "rows": list(rows)})
        apply(self.state, kind, rows, str(t))
        self.created = True

    def _table(self):
        return HoodieTable.open(self.path)

    # ---------------------------------------------------------------- rules
    @rule(rows=rows_st)
    def upsert(self, rows):
        RAN['upsert'] += 1
        t = self._write(rows, "upsert")
        if t is not None:
            self._committed(t, "upsert", rows)

    @precondition(lambda self: self.created)
    @rule(keys=st.lists(st.integers(0, KEYS - 1), min_size=1, max_size=5, unique=True))
    def delete(self, keys):
        RAN['delete'] += 1
        rows = [(k, 0, 0, False) for k in keys]
        t = self._write(rows, "delete")
        if t is not None:
            self._committed(t, "delete", rows)

    @rule(rows=st.lists(st.tuples(st.integers(0, KEYS - 1), st.integers(0, 4), st.integers(-50, 50)),
                        min_size=1, max_size=5, unique_by=lambda r: r[0]))
    def insert_overwrite(self, rows):
        RAN['insert_overwrite'] += 1
        rows = [(k, v, x, False) for k, v, x in rows]
        t = self._write(rows, "insert_overwrite")
        if t is not None:
            self._committed(t, "insert_overwrite", rows)

    @rule(rows=rows_st, complete=st.booleans())
    def pending_write(self, rows, complete):
        """A write left pending (commit=False), then completed or aborted (rolled back)."""
        RAN['pending_write'] += 1
        pw = self._write(rows, "upsert", commit=False)
        if pw is None:
            return
        if complete:
            t = pw.complete()
            self._committed(t, "upsert", rows)
        else:
            pw.abort()
            self.created = True

    @rule(rows=rows_st, k=st.integers(1, 14), kind=st.sampled_from(["upsert", "delete", "insert_overwrite"]))
    def crashed_write(self, rows, k, kind):
        """A write that dies at its k-th storage operation (or finishes first)."""
        RAN['crashed_write'] += 1
        if kind != "upsert":  # delete / insert_overwrite batches: one row per key, no delete flags
            rows = [(key, v, x, False) for key, (v, x) in {r[0]: (r[1], r[2]) for r in rows}.items()]
        before = {i.timestamp for i in self._table().reload().instants} if HoodieTable.exists(self.path) else set()
        with crashing(k) as count:
            try:
                t = self._write(rows, kind)
            except Crash:
                t = None
            except CommitConflictError:
                if not self._pending_plans():
                    raise
                return  # refused before its commit (a pending plan's groups), rolled back by itself
        RAN["crashed_write: crashed" if t is None else "crashed_write: finished first"] += 1
        if t is not None:  # finished before its k-th operation
            self._committed(t, kind, rows)
            return
        if HoodieTable.exists(self.path):
            self.created = True
            tl = self._table().reload()
            done = [i for i in tl.completed() if i.timestamp not in before]
            if done:  # it crashed after its commit (cleanup): the write is in
                assert len(done) == 1, done
                RAN["crashed_write: crashed after its commit"] += 1
                self._committed(done[0].timestamp, kind, rows)

    @precondition(lambda self: self.created)
    @rule()
    def rollback_failed(self):
        """The dead writers' instants rolled back (what the next writer's lazy rollback does)."""
        RAN['rollback_failed'] += 1
        from hudilite.services.rollback import rollback_failed_writes

        rollback_failed_writes(self._table(), lazy=False)

    @precondition(lambda self: self.created and self.table_type == "MERGE_ON_READ")
    @rule(run=st.booleans(), crash=st.one_of(st.none(), st.integers(1, 12)))
    def compaction(self, run, crash):
        RAN['compaction'] += 1
        from hudilite.services.compaction import run_compaction, schedule_compaction

        with (crashing(crash) if crash else _nothing()):
            try:
                schedule_compaction(self.path, OPTS, force=True)
                if run:
                    run_compaction(self.path, OPTS)
            except Crash:
                RAN["compaction: crashed"] += 1

    @precondition(lambda self: self.created)
    @rule(crash=st.one_of(st.none(), st.integers(1, 12)))
    def clean(self, crash):
        RAN['clean'] += 1
        from hudilite.services.clean import run_clean

        with (crashing(crash) if crash else _nothing()):
            try:
                run_clean(self.path, {**OPTS, **SERVICE_OPTS})
            except Crash:
                RAN["clean: crashed"] += 1

    @precondition(lambda self: self.created)
    @rule(crash=st.one_of(st.none(), st.integers(1, 12)))
    def clustering(self, crash):
        RAN['clustering'] += 1
        from hudilite.services.clustering import cluster

        with (crashing(crash) if crash else _nothing()):
            try:
                cluster(self.path, OPTS)
            except Crash:
                RAN["clustering: crashed"] += 1

    @precondition(lambda self: self.created)
    @rule(crash=st.one_of(st.none(), st.integers(1, 12)))
    def archival(self, crash):
        RAN['archival'] += 1
        from hudilite.services.archival import archive

        with (crashing(crash) if crash else _nothing()):
            try:
                archive(self.path, {**OPTS, **SERVICE_OPTS})
            except Crash:
                RAN["archival: crashed"] += 1

    @precondition(lambda self: self.created)
    @rule(a=rows_st, b=rows_st)
    def two_writers(self, a, b):
        """Two writers in threads through the lock; B's new keys are offset so that inserts never race (both
        inserting one new key would make two file groups hold it: Apache Hudi's rule too)."""
        RAN['two_writers'] += 1
        existing = set(self.state)
        b = [(k if k in existing else k + KEYS, v, x, d) for k, v, x, d in b]
        a = [r for r in a if r[0] in existing or r[0] not in {k - KEYS for k, *_ in b}]
        results: dict = {}
        barrier = threading.Barrier(2)

        def go(name, rows):
            barrier.wait()
            try:
                results[name] = self._write(rows, "upsert", options=OCC)
            except CommitConflictError as e:
                results[name] = e
                RAN["two_writers: conflict"] += 1

        ths = [threading.Thread(target=go, args=(n, r)) for n, r in (("a", a), ("b", b))]
        for th in ths:
            th.start()
        for th in ths:
            th.join()
        ok = [(str(results[n]), r) for n, r in (("a", a), ("b", b)) if results[n] is not None and not isinstance(results[n], BaseException)]
        assert ok or self._pending_plans(), f"both writers failed: {results}"
        for t, rows in sorted(ok):
            self._committed(t, "upsert", rows)

    @precondition(lambda self: self.created)
    @rule(rows=rows_st, service=st.sampled_from(["clean", "archival", "rollback"]))
    def services_during_write(self, rows, service):
        """A table service in a thread while a writer (another thread) has its instant inflight: the writer
        pauses at its first data file (holding no lock) until the service is done, so the service always
        runs against the live write; the service must neither fail it nor remove what it reads, and the lazy
        rollback must leave the live writer's instant alone."""
        RAN['services_during_write'] += 1
        RAN[f"services_during_write: {service}"] += 1
        from hudilite.services.archival import archive
        from hudilite.services.clean import run_clean
        from hudilite.services.rollback import rollback_failed_writes

        service_fn = {"clean": lambda: run_clean(self.path, {**OPTS, **SERVICE_OPTS}),
                      "archival": lambda: archive(self.path, {**OPTS, **SERVICE_OPTS}),
                      "rollback": lambda: rollback_failed_writes(self._table(), lazy=True)}[service]
        results: dict = {}
        inflight, done = threading.Event(), threading.Event()
        service_thread: dict = {}

        def write():
            try:
                results["write"] = self._write(rows, "upsert", options=LIVE)
            except BaseException as e:  # noqa: BLE001 - re-raised below
                results["write"] = e
            finally:
                inflight.set()  # a write that wrote no data file (nothing to pause at): the service runs after

        def serve():
            service_thread["ident"] = threading.get_ident()
            inflight.wait(120)
            try:
                results["service"] = service_fn()
            except BaseException as e:  # noqa: BLE001 - re-raised below
                results["service"] = e
            finally:
                done.set()

        # the writer's data files may be written by its pool threads: any thread but the service's pauses
        with _pausing_first_data_write(lambda: threading.get_ident() != service_thread.get("ident"), inflight,
                                       done) as hit:
            ths = [threading.Thread(target=write), threading.Thread(target=serve)]
            for th in ths:
                th.start()
            for th in ths:
                th.join()
        RAN[f"services_during_write: {'beside the inflight write' if hit else 'after the write'}"] += 1
        for k in ("write", "service"):
            if isinstance(results.get(k), BaseException):
                raise results[k]
        if results["write"] is not None:
            self._committed(results["write"], "upsert", rows)

    @precondition(lambda self: self.created)
    @rule()
    def change_read(self):
        """Read the changes since the last checkpoint and advance it."""
        RAN['change_read'] += 1
        from hudilite.reader.changes import checkpoint

        begin = self.checkpoints[-1]
        end, _tid = checkpoint(self.path)
        if end is None or end == begin:
            return
        # checkpoint positions are completion times; `read(begin=, end=)` takes the timestamp of a completed
        # write for "its completion" and reads other values on v6 tables as instant-order positions (which
        # skips a commit overtaken by a later instant): pass the writes whose completions the positions are
        inv = {c: t for t, c in self._completions().items()}
        b_arg, e_arg = inv.get(begin, begin), inv.get(end, end)
        try:
            got = local_rows(self.path, begin=b_arg, end=e_arg) if begin else local_rows(self.path)
        except RangeUnavailableError:
            # only after clean / archival removed the range: rebuild from the snapshot
            RAN["change_read: range unavailable, rebuilt"] += 1
            self.checkpoints.append(end)
            self.read_images = {(k, r[2]): "rebuilt" for k, r in local_rows(self.path).items()}
            return
        RAN["change_read: rows read"] += len(got)
        for k, r in got.items():
            img = (k, r[2])
            assert img not in self.read_images, f"row image {img} read twice: ({begin}, {end}] and earlier"
            self.read_images[img] = (begin, end)
        # nothing skipped: every row image alive at `end` has been read by now
        cmap = self._completions()
        at_end = self._state_at_completion(end, cmap)
        want = {(k, r[2]) for k, r in at_end.items()}
        missing = want - set(self.read_images)
        assert not missing, f"row images never read by change reads up to {end}: {sorted(missing)}"
        self.checkpoints.append(end)
        if self.spark is not None:  # hudilite.changes (Spark): the same images, and the deletes
            at_begin = self._state_at_completion(begin, cmap) if begin else {}
            rows = hudilite.changes(self.spark, self.path, begin, end, completion_bounds=True).select(
                "id", "v", "x", "_hoodie_commit_time", "_change_op").collect()
            ups = {r["id"]: (r["v"], r["x"], r["_hoodie_commit_time"]) for r in rows if r["_change_op"] in "IU"}
            assert ups == got, "changes() I/U rows vs the incremental read: " + _diff(ups, got)
            ops = {r["id"]: r["_change_op"] for r in rows}
            assert len(ops) == len(rows), "changes(): a key twice"
            for k in ups:
                assert ops[k] == ("U" if k in at_begin else "I"), f"key {k}: {ops[k]} ({begin}, {end}]"
            dels = {k for k, op in ops.items() if op == "D"}
            gone = set(at_begin) - set(at_end)
            assert gone <= dels and not dels & set(at_end), (
                f"changes() deletes {sorted(dels)}, keys deleted in ({begin}, {end}]: {sorted(gone)}")
            RAN["change_read: deletes read"] += len(dels)

    @precondition(lambda self: self.created and self.spark is not None)
    @rule()
    def aggregate_refresh(self):
        RAN['aggregate_refresh'] += 1
        from hudilite.aggregate import parse, refresh

        try:
            refresh(self.spark, parse(AGG_SQL), self.path, self.agg)
        except RangeUnavailableError:
            # only after archival removed the range since its checkpoint: rebuilt in full (dbt: --full-refresh)
            RAN["aggregate_refresh: range unavailable, rebuilt"] += 1
            shutil.rmtree(self.agg)
            refresh(self.spark, parse(AGG_SQL), self.path, self.agg)
        want: dict = {}
        for k, (v, x, _t) in self.state.items():
            n, nx, s = want.get(part_of(k), (0, 0, None))
            want[part_of(k)] = (n + 1, nx + (x is not None), (s or 0) + x if x is not None else s)
        got = {r["p"]: (r["n"], r["nx"], r["s"]) for r in local_rows_agg(self.agg)}
        assert got == want

    # ---------------------------------------------------------------- invariants
    def _completions(self) -> dict:
        from hudilite.reader.ranges import completion_map

        return completion_map(self._table())

    def _state_at_completion(self, pos: str, cmap: dict) -> dict:
        return replay([c for c in self.commits if cmap.get(c["t"], c["t"]) <= pos])

    @invariant()
    def snapshot_equals_oracle(self):
        if not HoodieTable.exists(self.path) or not self.commits:
            return
        assert replay(self.commits) == self.state
        got = local_rows(self.path)
        assert got == self.state, _diff(got, self.state)

    @invariant()
    def time_travel_equals_history(self):
        if not self.commits or not HoodieTable.exists(self.path):
            return
        from hudilite.services.clean import last_clean

        tl = self._table().reload()
        lc = last_clean(tl)
        earliest = (lc or {}).get("earliestCommitToRetain") or ""
        ours = {c["t"] for c in self.commits}
        for inst in tl.completed():
            t = inst.timestamp
            if t in ours and t >= earliest:
                got = local_rows(self.path, as_of=t)
                want = replay(self.commits, t)
                assert got == want, f"as_of {t}: " + _diff(got, want)

    @invariant()
    def hudi_rs_agrees(self):
        if not self.commits or not HoodieTable.exists(self.path):
            return
        got = hudi_rs_rows(self.path)
        assert got == self.state, "hudi-rs: " + _diff(got, self.state)


def local_rows_agg(path: str) -> list[dict]:
    plan = plan_read(path)
    spec = plan.merge_spec()
    out = []
    for sl in plan.slices:
        out += merge_slice(SliceDesc.of(sl), spec).select(["p", "n", "nx", "s"]).to_pylist()
    return out


@contextmanager
def _nothing():
    yield None


DATA_WRITES = ("write_parquet", "create_data_file", "append_bytes", "open_append_fd")


@contextmanager
def _pausing_first_data_write(is_writer, inflight: threading.Event, done: threading.Event):
    """The first data-file write (base file or log append) of a thread `is_writer` accepts sets `inflight`
    and waits for `done` before it goes on. Yields a list that is non-empty once that happened."""
    from hudilite.storage.local import LocalStorage

    mp = pytest.MonkeyPatch()
    hit: list = []
    for name in DATA_WRITES:
        orig = getattr(LocalStorage, name)

        def wrapped(self, *a, __orig=orig, **kw):
            if not hit and is_writer():
                hit.append(True)
                inflight.set()
                assert done.wait(120), "the service did not finish"
            return __orig(self, *a, **kw)

        mp.setattr(LocalStorage, name, wrapped)
    try:
        yield hit
    finally:
        mp.undo()


def _diff(got: dict, want: dict) -> str:
    keys = sorted(set(got) | set(want))
    return "; ".join(f"{k}: got {got.get(k)} want {want.get(k)}" for k in keys if got.get(k) != want.get(k))


def _settings(examples: int, derandomize: bool = True):
    return settings(max_examples=examples, stateful_step_count=STEPS, deadline=None, derandomize=derandomize,
                    suppress_health_check=list(HealthCheck), report_multiple_bugs=False, print_blob=True,
                    database=None)


def _run(spark, table_type, examples, derandomize):
    machine = type(f"Model_{table_type}", (Model,), {"spark": spark, "table_type": table_type})
    RAN.clear()
    t0 = time.time()
    run_state_machine_as_test(machine, settings=_settings(examples, derandomize))
    print(f"\nmodel {table_type}: {examples} examples x <= {STEPS} steps in {time.time() - t0:.0f}s; rules run: "
          + ", ".join(f"{k} {v}" for k, v in sorted(RAN.items())))


@pytest.mark.slow
@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_model(spark, table_type):
    """The CI budget: the same derandomized examples every run."""
    _run(spark, table_type, EXAMPLES, derandomize=True)


@pytest.mark.model_long
@pytest.mark.slow
@pytest.mark.skipif(not (os.environ.get("HUDILITE_MODEL_LONG") or FULL),
                    reason="the long run: HUDILITE_MODEL_LONG=1 (or the full run's HUDILITE_FULL=1)")
@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_model_long(spark, table_type):
    """New random examples each run (HUDILITE_MODEL_EXAMPLES, default 500 here); a failure prints the shrunk
    steps and the `@reproduce_failure` blob (and pytest's --hypothesis-seed reruns the same search)."""
    _run(spark, table_type, int(os.environ.get("HUDILITE_MODEL_EXAMPLES", "500")), derandomize=False)


# every rule once, in an order where each does something (compaction of logs, deletes a change read sees,
# crashes, services beside a live write): the derandomized examples alone never draw some of them
SCRIPT = [
    ("upsert", dict(rows=[(0, 1, 5, False), (1, 1, 6, False), (2, 2, 7, False), (3, 1, None, False),
                          (2, 1, 9, False), (4, 3, 1, False)])),
    ("change_read", {}),
    ("upsert", dict(rows=[(0, 2, 8, False), (1, 0, 1, False), (5, 1, 2, False), (3, 2, 4, True)])),
    ("delete", dict(keys=[2, 4])),
    ("change_read", {}),  # sees the deletes
    ("aggregate_refresh", {}),
    ("compaction", dict(run=True, crash=None)),
    ("insert_overwrite", dict(rows=[(6, 1, 3)])),
    ("pending_write", dict(rows=[(7, 1, 1, False)], complete=True)),
    ("pending_write", dict(rows=[(8, 1, 1, False)], complete=False)),
    ("crashed_write", dict(rows=[(9, 1, 1, False), (0, 3, 2, False)], k=6, kind="upsert")),
    ("rollback_failed", {}),
    ("compaction", dict(run=False, crash=3)),
    ("clustering", dict(crash=None)),
    ("services_during_write", dict(rows=[(10, 1, 1, False), (0, 4, 3, False)], service="rollback")),
    ("clean", dict(crash=None)),
    ("services_during_write", dict(rows=[(11, 1, 1, False), (1, 4, 3, False)], service="clean")),
    ("two_writers", dict(a=[(0, 4, 5, False)], b=[(12, 1, 1, False)])),
    ("archival", dict(crash=None)),
    ("services_during_write", dict(rows=[(13, 1, 1, False), (5, 4, 3, False)], service="archival")),
    ("delete", dict(keys=[0, 13])),
]


@pytest.mark.slow
@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_model_every_rule(spark, table_type):
    """The state machine's rules, each at least once, in a fixed script (invariants after every step); the
    script must name every rule of the machine."""
    from hypothesis.stateful import RULE_MARKER

    rules = {name for name in dir(Model) if getattr(getattr(Model, name), RULE_MARKER, None) is not None}
    timings: Counter = Counter()
    assert rules == {name for name, _ in SCRIPT}, "a rule the script does not run (or a stale one)"
    machine = type(f"Model_{table_type}", (Model,), {"spark": spark, "table_type": table_type})()
    invariants = [machine.snapshot_equals_oracle, machine.time_travel_equals_history, machine.hudi_rs_agrees]
    RAN.clear()
    try:
        for name, kw in SCRIPT:
            if name == "compaction" and table_type != "MERGE_ON_READ":
                continue
            t0 = time.time()
            getattr(machine, name)(**kw)
            for check in invariants:
                check()
            timings[name] += time.time() - t0
    finally:
        machine.teardown()
    print(f"\nmodel script {table_type}: {sum(timings.values()):.0f}s; "
          + ", ".join(f"{k} {v:.1f}s" for k, v in timings.most_common()))
    ran = {k for k, v in RAN.items() if v}
    assert {name for name, _ in SCRIPT} - ran <= ({"compaction"} if table_type == "COPY_ON_WRITE" else set())
    assert RAN["change_read: deletes read"] > 0, "a change read saw the deletes"
    assert RAN["services_during_write: beside the inflight write"] == 3, dict(RAN)


# ------------------------------------------------------------------------------------------------
# regressions: the shrunk examples of bugs the model found, as plain tests
@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_late_ordered_delete_with_ordering_value_zero_changes_nothing(tmp_path, table_type):
    """Shrunk from the model (MOR): key 7 stored with v=2, then a `_hoodie_is_deleted` row of it with v=0 (a late
    delete). It must lose (v 0 < 2). The MOR writer logged it as an ordered delete of value 0, which readers
    (ours, Apache Hudi's) take for a natural delete (0 is the "no ordering value" sentinel): the key vanished
    on our reads while hudi-rs kept it. Late deletes are now not written, as late updates."""
    path = str(tmp_path / "t")
    first = hudilite.write(arrow([(0, 0, -41, False)]), path, record_key="id", precombine_field="v",
                           partition_by=("p",), table_type=table_type, options=OPTS)
    second = hudilite.write(arrow([(7, 2, -1, False), (0, 0, 48, False)]), path, record_key="id",
                            precombine_field="v", partition_by=("p",), options=OPTS)
    third = hudilite.write(arrow([(0, 0, 0, False), (7, 0, 2, True)]), path, record_key="id",
                           precombine_field="v", partition_by=("p",), options=OPTS)
    want = {0: (0, 0, str(third)), 7: (2, -1, str(second))}
    assert local_rows(path) == want
    assert hudi_rs_rows(path) == want
    assert local_rows(path, as_of=str(first)) == {0: (0, -41, str(first))}


@pytest.mark.parametrize("service", ["clustering", "compaction"])
def test_a_service_failing_after_its_commit_keeps_its_files(tmp_path, monkeypatch, service):
    """Shrunk from the model (MOR): a clustering that raised after its replacecommit was completed (the
    completion-time hint write failed) removed its new base file as a failed attempt's leftover, so the completed
    replacecommit named a deleted file and its keys vanished (ours and hudi-rs). Now the hint is written before
    the commit, nothing after the put fails the call, and a failed attempt never removes a completed instant's
    files."""
    from hudilite.services.clustering import cluster
    from hudilite.services.compaction import run_compaction, schedule_compaction
    from hudilite.writer.transaction import Transaction

    path = str(tmp_path / "t")
    for rows in ([(15, 0, -7, False), (0, 0, 33, False)], [(12, 4, 22, False), (15, 1, 5, False)]):
        hudilite.write(arrow(rows), path, record_key="id", precombine_field="v", partition_by=("p",),
                       table_type="MERGE_ON_READ", options=OPTS)
    want = local_rows(path)
    assert want.keys() == {0, 12, 15}
    if service == "compaction":
        assert schedule_compaction(path, OPTS, force=True)
    real = Transaction.complete

    def complete_then_fail(self, *a, **kw):
        real(self, *a, **kw)
        raise OSError("failure after the commit")

    monkeypatch.setattr(Transaction, "complete", complete_then_fail)
    with pytest.raises(Exception, match="failure after the commit"):
        cluster(path, OPTS) if service == "clustering" else run_compaction(path, OPTS)
    monkeypatch.undo()
    tl = HoodieTable.open(path).reload()
    assert tl.completed()[-1].action == ("replacecommit" if service == "clustering" else "commit")
    assert {k: v[:2] for k, v in local_rows(path).items()} == {k: v[:2] for k, v in want.items()}
    assert {k: v[:2] for k, v in hudi_rs_rows(path).items()} == {k: v[:2] for k, v in want.items()}


def test_completion_hint_is_written_before_the_commit(tmp_path, monkeypatch):
    """A process dying right after the completed instant's put must not leave the completion-time hint behind it:
    the hint is a lower bound for later completion times (clock skew between writers)."""
    from hudilite.storage.local import LocalStorage

    path = str(tmp_path / "t")
    hudilite.write(arrow([(1, 0, 1, False)]), path, record_key="id", precombine_field="v", partition_by=("p",),
                   options=OPTS)
    order = []
    real_put, real_write = LocalStorage.put_if_absent, LocalStorage.write_bytes
    monkeypatch.setattr(LocalStorage, "put_if_absent",
                        lambda self, p, *a, **kw: (order.append(("put", os.path.basename(p))),
                                                   real_put(self, p, *a, **kw))[1])
    monkeypatch.setattr(LocalStorage, "write_bytes",
                        lambda self, p, *a, **kw: (order.append(("write", os.path.basename(p))),
                                                   real_write(self, p, *a, **kw))[1])
    t = hudilite.write(arrow([(2, 0, 1, False)]), path, record_key="id", precombine_field="v", partition_by=("p",),
                       options=OPTS)
    hint = order.index(("write", "last_completion_time"))
    # the completed instant: <t>.commit (version 6) or <t>_<completion>.commit (8/9)
    [commit] = [n for n, (op, name) in enumerate(order)
                if op == "put" and name.startswith(str(t)) and name.endswith(".commit")]
    assert hint < commit, order


def test_incremental_read_from_a_checkpoint_with_completion_bounds(tmp_path):
    """Found by the model: a checkpoint is a completion time, and on a version-6 table a bare time passed as
    `begin` is read as an instant position (the newest instant requested at or before it, by its completion),
    which skips a write requested before the checkpoint that completed after it. `completion_bounds=True`
    (read, plan_read, the data source's `completion_bounds` option) reads positions as completion times."""
    from hudilite.reader.changes import checkpoint

    path = str(tmp_path / "t")

    def pending(k):
        return hudilite.write(arrow([(k, 1, k, False)]), path, record_key="id", precombine_field="v",
                              partition_by=("p",), options=opts, commit=False)

    opts = {**OPTS, "hoodie.parquet.small.file.limit": "0"}  # each insert a new file group: no conflicts
    hudilite.write(arrow([(0, 1, 0, False)]), path, record_key="id", precombine_field="v", partition_by=("p",),
                   options=opts)
    x, b, d = pending(2), pending(4), pending(6)  # requested in this order
    b.complete()
    pos, _ = checkpoint(path)
    x.complete()  # requested before the checkpoint, completed after it
    d.complete()
    got = local_rows(path, begin=pos, completion_bounds=True)
    assert {k: v[:2] for k, v in got.items()} == {2: (1, 2), 6: (1, 6)}
