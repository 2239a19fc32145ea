"""What a dbt command pays before its first model (issue 23), measured in what a loaded machine does not skew:
CPU time and counts of Spark Connect round trips, not only wall time.

    python -m bench.dbt_start imports [--repeat 5]      CPU time of the adapter's import on top of dbt's own
    python -m bench.dbt_start parse [--repeat 3]        CPU and wall of `dbt parse`: full, partial, `--vars` changed;
                                                        hudilite's sample project and the dbt-duckdb plain one
    python -m bench.dbt_start parse-env [--repeat 3]    `dbt parse` after an env_var the model reads changed
    python -m bench.dbt_start rpcs                      Spark Connect round trips of `dbt run` (batch 1, then 2)
                                                        against a local server, before the first model and after
    python -m bench.dbt_start cold [--repeat 3]         session mode through dbt (`dbt debug`, `dbt run -s` of
                                                        the first model): class archive off / on, alternating

Every dbt command is a subprocess (`python -m dbt.cli.main`); CPU time is the child's user + system time
(`RUSAGE_CHILDREN`, which includes the JVM only when its parent reaped it). Round trips are counted in the
client: the dbt child runs with the pyspark Connect client's ExecutePlan, AnalyzePlan and Config calls wrapped
(`_child` below), each one recorded with the SQL statement its thread was running and whether dbt had started
its first model (dbt's NodeStart event).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

from dbt.cli.main import dbtRunner
from pyspark.sql.connect.client.core import SparkConnectClient

import hudilite
from bench.dbt_latency import make_project
from dbt.adapters.hudilite.connections import HudiliteCursor
from dbt.adapters.hudilite.environment import HudiliteEnvironment
from hudilite import server
from hudilite.spark import class_cache

IMPORT_PROBE = """
import resource, sys
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF); return r.ru_utime + r.ru_stime
import dbt.cli.main, dbt.adapters.spark  # what dbt and dbt-spark cost on their own
c = cpu()
import dbt.adapters.hudilite
print(cpu() - c, len(sys.modules))
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def adopt_orphans() -> None:
    """Make this process the reaper of its descendants' orphans (Linux): PySpark does not wait for its driver
    JVM at exit, so without this the JVM's CPU time would be nobody's child time."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(36, 1, 0, 0, 0) != 0:  # PR_SET_CHILD_SUBREAPER
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")


def reap_orphans() -> None:
    """Wait for every orphan adopted so far (the exited dbt's JVM), so that its CPU time is counted."""
    while True:
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            return


def run(cmd: list[str], cwd: Path | None = None, env_extra: dict | None = None,
        reap: bool = False) -> tuple[float, float, str]:
    """(wall s until the child exits, CPU s of the child and its reaped children, stdout). `reap`: wait for
    orphans the child left (see adopt_orphans) before reading the CPU time."""
    env = {**os.environ, "DBT_SEND_ANONYMOUS_USAGE_STATS": "false", "PYSPARK_PYTHON": sys.executable,
           **(env_extra or {})}
    c0, t0 = _children_cpu(), time.perf_counter()
    p = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if reap:
        reap_orphans()
    cpu = _children_cpu() - c0
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{p.stdout[-4000:]}\n{p.stderr[-2000:]}")
    return wall, cpu, p.stdout


def dbt(work: Path, *args: str, env_extra: dict | None = None, child: bool = False,
        reap: bool = False) -> tuple[float, float, str]:
    head = [sys.executable, "-m", "bench.dbt_start", "_child"] if child else [sys.executable, "-m", "dbt.cli.main"]
    return run([*head, *args, "--project-dir", str(work), "--profiles-dir", str(work)], cwd=Path.cwd(),
               env_extra=env_extra, reap=reap)


def imports(repeat: int) -> dict:
    cpu, mods = [], []
    for _ in range(repeat):
        _, _, out = run([sys.executable, "-c", IMPORT_PROBE])
        c, n = out.split()
        cpu.append(float(c))
        mods.append(int(n))
    return {"adapter_import_cpu_s": [round(c, 3) for c in cpu], "median": round(statistics.median(cpu), 3),
            "modules_after": mods[0]}


def parse(base: Path, repeat: int, env_only: bool = False) -> dict:
    out: dict = {}
    for system in ("hudilite-session",) if env_only else ("hudilite-session", "dbt-duckdb"):
        res: dict = {"full": [], "partial": [], "vars_changed": []}
        for i in range(0 if env_only else repeat):
            work = make_project(system, base / f"parse-{system}-{i}", 0)
            res["full"].append(dbt(work, "parse", "--no-partial-parse")[:2])
            dbt(work, "parse", "--vars", "{batch: 1}")  # writes the partial-parse state for these vars
            res["partial"].append(dbt(work, "parse", "--vars", "{batch: 1}")[:2])
            res["vars_changed"].append(dbt(work, "parse", "--vars", "{batch: 2}")[:2])
        if system == "hudilite-session":
            # the alternative the docs suggest: the batch from an environment variable (a copy of the project;
            # the benchmark's own workload keeps --vars): dbt re-parses only the files that read the variable
            res["env_changed"] = []
            for i in range(repeat):
                work = make_project(system, base / f"parse-env-{i}", 0)
                ods = work / "models" / "ods" / "ods_orders.sql"
                ods.write_text(ods.read_text().replace("{{ var('batch') }}", "{{ env_var('SAMPLE_BATCH') }}"))
                dbt(work, "parse", env_extra={"SAMPLE_BATCH": "1"})
                res["env_changed"].append(dbt(work, "parse", env_extra={"SAMPLE_BATCH": "2"})[:2])
        out[system] = {k: {"wall": round(statistics.median(w for w, _ in v), 2),
                           "cpu": round(statistics.median(c for _, c in v), 2),
                           "all": [[round(w, 2), round(c, 2)] for w, c in v]} for k, v in res.items() if v}
    return out


def rpcs(base: Path) -> dict:
    port = free_port()
    work = make_project("hudilite-connect", base / "rpcs", port)
    server.start(str(work / "warehouse"), port=port, master="local[2]")
    try:
        dbt(work, "seed")
        out = {}
        for name, batch in (("run_batch1", 1), ("run_batch2", 2)):
            _, _, stdout = dbt(work, "run", "--vars", f"{{batch: {batch}}}", child=True)
            out[name] = json.loads(stdout.strip().splitlines()[-1])
        return out
    finally:
        server.stop(str(work / "warehouse"))


def cold(base: Path, repeat: int, runs: bool) -> dict:
    """Session mode through dbt, class archive off (`HUDILITE_JVM_CLASS_CACHE=off`: the start before the
    archive) and on (the archive written first by one untimed command), alternating."""
    adopt_orphans()
    work = make_project("hudilite-session", base / "cold", 0)
    dbt(work, "seed", reap=True)  # the tables, and the driver archive if there was none (its JVM dumps at exit)
    res: dict = {"off": {"debug": [], "run1": []}, "on": {"debug": [], "run1": []}}
    for _ in range(repeat):
        for mode, env in (("off", {class_cache.CLASS_CACHE_ENV: "off"}), ("on", None)):
            res[mode]["debug"].append(dbt(work, "debug", env_extra=env, reap=True)[:2])
            if runs:
                res[mode]["run1"].append(dbt(work, "run", "-s", "ods_orders", "--vars", "{batch: 1}",
                                             env_extra=env, reap=True)[:2])
    return {mode: {k: {"wall": round(statistics.median(w for w, _ in v), 2),
                       "cpu": round(statistics.median(c for _, c in v), 2),
                       "all": [[round(w, 2), round(c, 2)] for w, c in v]} for k, v in r.items() if v}
            for mode, r in res.items()}


def _child(argv: list[str]) -> int:
    """Run dbt in this process with the Connect client's calls counted; print the counts as JSON."""
    state = {"models_started": False}
    current = threading.local()
    calls: list = []
    lock = threading.Lock()

    def wrap(cls, name, kind):
        orig = getattr(cls, name)

        def counted(*a, **k):
            with lock:
                calls.append((kind, "models" if state["models_started"] else "before_first_model",
                              getattr(current, "sql", None) or "(no dbt statement yet)"))
            return orig(*a, **k)
        setattr(cls, name, counted)

    wrap(SparkConnectClient, "_execute_and_fetch_as_iterator", "ExecutePlan")
    wrap(SparkConnectClient, "_analyze", "AnalyzePlan")
    wrap(SparkConnectClient, "config", "Config")
    orig_execute = HudiliteCursor.execute
    orig_open = HudiliteEnvironment._open_session

    def execute(self, sql, bindings=None):
        # the statement (dbt's query comment left out) until the thread's next one: its description and
        # fetch come after execute returns
        text = sql.strip()
        if text.startswith("/*") and "*/" in text:
            text = text[text.index("*/") + 2:]
        current.sql = " ".join(text.split())[:60]
        return orig_execute(self, sql, bindings)

    def labelled(fn, label):
        # round trips made inside `fn` are counted under `label` (they belong to no dbt statement)
        def run(*args, **kwargs):
            saved, current.sql = getattr(current, "sql", None), label
            try:
                return fn(*args, **kwargs)
            finally:
                current.sql = saved
        return run

    HudiliteCursor.execute = execute
    HudiliteEnvironment._open_session = labelled(orig_open, "(opening the session)")
    hudilite.register = labelled(hudilite.register, "(registering the data source)")

    def on_event(ev):
        if ev.info.name == "NodeStart":
            state["models_started"] = True

    c0 = resource.getrusage(resource.RUSAGE_SELF)
    res = dbtRunner(callbacks=[on_event]).invoke(argv)
    c1 = resource.getrusage(resource.RUSAGE_SELF)
    phases = Counter(p for _, p, _ in calls)
    before = Counter(f"{k}: {s}" for k, p, s in calls if p == "before_first_model")
    print(json.dumps({"success": res.success, "cpu_s": round(c1.ru_utime + c1.ru_stime - c0.ru_utime - c0.ru_stime, 2),
                      "round_trips": dict(phases), "by_kind": dict(Counter(k for k, _, _ in calls)),
                      "before_first_model": dict(before)}))
    return 0 if res.success else 1


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "_child":
        return _child(argv[1:])
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("what", choices=("imports", "parse", "parse-env", "rpcs", "cold"))
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--with-run", action="store_true", help="cold: also `dbt run -s ods_orders` per mode")
    ap.add_argument("--work", default=None, help="scratch directory (default: a temporary one)")
    args = ap.parse_args(argv)
    base = Path(args.work or tempfile.mkdtemp(prefix="dbt-start-"))
    load = os.getloadavg()
    if args.what == "imports":
        out = imports(args.repeat)
    elif args.what in ("parse", "parse-env"):
        out = parse(base, args.repeat, env_only=args.what == "parse-env")
    elif args.what == "rpcs":
        out = rpcs(base)
    else:
        out = cold(base, args.repeat, args.with_run)
    out["load"] = {"start": [round(x, 2) for x in load], "end": [round(x, 2) for x in os.getloadavg()]}
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
