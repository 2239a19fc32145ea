"""Per-model work of the sample project's `dbt run` over Spark Connect, counted (issue 23): the Spark Connect
round trips (ExecutePlan, AnalyzePlan, Config) and the CPU time of the dbt process's thread for each model,
and which engine wrote it. Counts and CPU time do not depend on the machine's load as wall times do.

dbt runs in this process (dbtRunner, `--threads 1`, so a model's round trips are its thread's), against a
`hudilite server` started on a fresh copy of the sample project: `dbt seed`, `dbt run` batch 1 (the first
build), `dbt run` batch 2 (a small batch of change events through the 4 models), then batches 3 and 4 (the
same work on a server that has run it before).

    python -m bench.dbt_model_work [--work DIR] [--out F] [--calls [--stacks]] [--later N]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

from bench.dbt_latency import _free_port, make_project, model_engines
from hudilite import server

_state = threading.local()
_counts: dict = collections.defaultdict(collections.Counter)
_calls: dict = collections.defaultdict(list)
_cpu: dict = collections.defaultdict(float)
_phase = [""]  # the dbt command running
_node: list = [None, None]  # the node running and its start (dbt runs with --threads 1)
_stacks = [False]  # --stacks: note the hudilite / adapter frames that issued each call


def _what(req) -> str:
    """A short name of an ExecutePlan request: the command or relation kind, and a SQL text's start."""
    plan = getattr(req, "plan", None)
    if plan is None:
        return "?"
    if plan.HasField("command"):
        kind = plan.command.WhichOneof("command_type")
        if kind == "sql_command":  # Spark 4 clients send the text as the command's input relation
            cmd = plan.command.sql_command
            return "sql: " + " ".join((cmd.sql or cmd.input.sql.query).split())[:90]
        return kind or "command"
    kind = plan.root.WhichOneof("rel_type")
    if kind == "sql":
        return "sql: " + " ".join(plan.root.sql.query.split())[:90]
    if kind == "catalog":
        return "catalog." + (plan.root.catalog.WhichOneof("cat_type") or "?")
    return kind or "relation"


def _record(rpc: str, detail: str, seconds: float) -> None:
    model, start = getattr(_state, "model", None), getattr(_state, "wall0", None)
    if model is None and threading.current_thread().name.startswith("hudilite-"):
        model, start = _node[0], _node[1]  # a helper thread of the running node's (one dbt thread)
        detail = f"{detail} [{threading.current_thread().name.split('_')[0]}]"
    model = model or "(outside models)"
    _counts[model][rpc] += 1
    inside = start is not None and model != "(outside models)"
    at = f"+{(time.perf_counter() - seconds - start) * 1000:6.0f}" if inside \
        else " " * 7
    line = f"{at} {seconds * 1000:7.1f} ms  {rpc} {detail}"
    if _stacks[0]:
        ours = [f"{Path(f.filename).name}:{f.lineno} {f.name}" for f in traceback.extract_stack()
                if "/hudilite/" in f.filename and "/bench/" not in f.filename]
        line += "  <- " + " < ".join(reversed(ours[-4:]))
    _calls[model].append(line)


def _timed(rpc: str, detail, call):
    """Run one RPC and record it with its wall time (an iterator's: until it is exhausted)."""
    t0 = time.perf_counter()
    try:
        out = call()
        if rpc == "ExecutePlan" and not isinstance(out, (tuple, list, type(None))):
            out = list(out)
        return out
    finally:
        _record(rpc, detail() if callable(detail) else detail, time.perf_counter() - t0)


def install() -> None:
    """Count the Connect client's RPCs (attributed to the node whose thread issues them: on_event)."""
    from pyspark.sql.connect.client import core

    c = core.SparkConnectClient
    orig_iter, orig_exec, orig_analyze, orig_config = (c._execute_and_fetch_as_iterator, c._execute, c._analyze,
                                                      c.config)

    def it(self, req, *a, **kw):
        return iter(_timed("ExecutePlan", _what(req), lambda: orig_iter(self, req, *a, **kw)))

    def ex(self, req, *a, **kw):
        return _timed("ExecutePlan", _what(req), lambda: orig_exec(self, req, *a, **kw))

    def an(self, method, **kw):
        return _timed("AnalyzePlan", method, lambda: orig_analyze(self, method, **kw))

    def cf(self, op, *a, **kw):
        return _timed("Config", op.WhichOneof("op_type") or "?", lambda: orig_config(self, op, *a, **kw))

    c._execute_and_fetch_as_iterator, c._execute, c._analyze, c.config = it, ex, an, cf


def on_event(e) -> None:
    """dbt's NodeStart / NodeFinished fire in the thread that runs the node (compile and materialization)."""
    name = e.info.name
    if name not in ("NodeStart", "NodeFinished"):
        return
    node = e.data.node_info.unique_id.split(".")[-1]
    if name == "NodeStart":
        _state.model, _state.t0, _state.wall0 = f"{_phase[0]}:{node}", time.thread_time(), time.perf_counter()
        _node[:] = [_state.model, _state.wall0]
    elif getattr(_state, "model", None):
        _cpu[_state.model] += time.thread_time() - _state.t0
        _calls[_state.model].append(f"+{(time.perf_counter() - _state.wall0) * 1000:6.0f} node finished")
        _state.model = None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--work", default=None)
    ap.add_argument("--out", default=None)
    ap.add_argument("--calls", action="store_true",
                    help="list every round trip of each model: its start (ms after the node's) and wall time")
    ap.add_argument("--stacks", action="store_true", help="with --calls: the hudilite frames that issued each")
    ap.add_argument("--later", type=int, default=0, metavar="N",
                    help="N more runs after batch 4 (batches 1-4 again, in turn): the steady state of a server "
                         "that a user has run the project on many times (its JIT has compiled the plans)")
    args = ap.parse_args(argv)
    _stacks[0] = args.stacks
    from dbt.cli.main import dbtRunner

    base = Path(args.work or tempfile.mkdtemp(prefix="dbt-model-work-"))
    port = _free_port()
    work = make_project("hudilite-connect", base / "connect", port)
    os.environ.setdefault("DBT_SEND_ANONYMOUS_USAGE_STATS", "false")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    server.start(str(work / "warehouse"), port=port, master="local[2]")
    results: dict = {"engines": {}}
    try:
        install()
        runner = dbtRunner(callbacks=[on_event])
        # batch 3 and 4 as bench.dbt_latency's later runs: the same plans once the server has run them a few times
        for phase, cmd in (("seed", ["seed"]), ("batch1", ["run", "--vars", "{batch: 1}"]),
                           ("batch2", ["run", "--vars", "{batch: 2}"]), ("batch3", ["run", "--vars", "{batch: 3}"]),
                           ("batch4", ["run", "--vars", "{batch: 4}"]),
                           *((f"later{i + 1}", ["run", "--vars", f"{{batch: {i % 4 + 1}}}"])
                             for i in range(args.later))):
            _phase[0] = phase
            res = runner.invoke([*cmd, "--threads", "1", "--project-dir", str(work), "--profiles-dir", str(work)])
            if not res.success:
                raise RuntimeError(f"dbt {' '.join(cmd)} failed: {res.exception}")
            if phase != "seed":
                results["engines"][phase] = model_engines(work)
    finally:
        server.stop(str(work / "warehouse"))
    results["round_trips"] = {m: dict(c) for m, c in _counts.items()}
    results["cpu_s"] = {m: round(v, 3) for m, v in _cpu.items()}
    if args.calls:
        results["calls"] = dict(_calls)
    text = json.dumps(results, indent=1)
    print(text)
    if args.out:
        Path(args.out).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
