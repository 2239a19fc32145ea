"""One dbt command in this process, counted (issue 23): Spark Connect RPCs by kind (ExecutePlan, AnalyzePlan,
Config), py4j calls and Spark jobs of a classic session, and the CPU time of the process - all of it and the
part inside `adapter.hudilite_changes` (compiling `{{ hudilite.changes(ref(...)) }}`). Counts and CPU time hold
under load, where wall times do not.

    python -m bench.dbt_round_trips OUT.json run -s dwd_orders --project-dir P --profiles-dir P
"""

from __future__ import annotations

import json
import resource
import sys
import threading
import time
from collections import Counter

import py4j.clientserver as py4j_cs
from dbt.cli.main import dbtRunner

from dbt.adapters.hudilite import impl

COUNTS: Counter = Counter()
_INSIDE = threading.local()
COMPILES: list = []


def _bump(kind: str) -> None:
    COUNTS[kind] += 1
    if getattr(_INSIDE, "on", False):
        COUNTS["changes:" + kind] += 1


def _count(cls, name: str, kind: str) -> None:
    orig = getattr(cls, name)

    def counted(self, *a, **k):
        _bump(kind)
        return orig(self, *a, **k)

    setattr(cls, name, counted)


def _jobs():
    """Jobs started so far by the classic session of this process (None under Connect: no SparkContext)."""
    from pyspark.sql import SparkSession

    s = SparkSession.getActiveSession()
    jsc = getattr(s, "_jsc", None) if s is not None else None
    if jsc is None:
        return None
    on, _INSIDE.on = getattr(_INSIDE, "on", False), False  # this py4j call is ours, not the adapter's
    try:
        return jsc.sc().dagScheduler().nextJobId().get()
    finally:
        _INSIDE.on = on


def _instrument() -> None:
    try:
        from pyspark.sql.connect.client.core import SparkConnectClient
    except ImportError:  # no Connect client installed: classic sessions only
        pass
    else:
        for name, kind in (("_execute_and_fetch_as_iterator", "ExecutePlan"), ("_analyze", "AnalyzePlan"),
                           ("config", "Config")):
            _count(SparkConnectClient, name, kind)
    _count(py4j_cs.ClientServerConnection, "send_command", "py4j")
    changes_relation = impl.changes_relation

    def counted(*a, **k):
        t0, c0, j0 = time.perf_counter(), time.thread_time(), _jobs()
        _INSIDE.on = True
        try:
            return changes_relation(*a, **k)
        finally:
            _INSIDE.on = False
            j1 = _jobs()
            COMPILES.append({"wall_s": time.perf_counter() - t0, "thread_cpu_s": time.thread_time() - c0,
                             "jobs": None if j0 is None or j1 is None else j1 - j0})

    impl.changes_relation = counted


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    out, args = argv[0], argv[1:]
    _instrument()
    t0 = time.perf_counter()
    res = dbtRunner().invoke(args)
    ru = resource.getrusage(resource.RUSAGE_SELF)
    jobs = _jobs()
    report = {
        "ok": res.success, "invoke_wall_s": time.perf_counter() - t0, "cpu_user_s": ru.ru_utime,
        "cpu_sys_s": ru.ru_stime, "counts": dict(COUNTS), "hudilite_changes": COMPILES,
        "jobs": jobs,  # a fresh process: every job of its classic session (None under Connect)
        "models": [{"name": r.node.name, "execution_time": r.execution_time,
                    "engine": (r.adapter_response or {}).get("engine")} for r in getattr(res.result, "results", [])]
        if res.success else str(res.exception)}
    with open(out, "w") as f:
        json.dump(report, f, indent=1)
    print(json.dumps(report, indent=1))
    return 0 if res.success else 1


if __name__ == "__main__":
    sys.exit(main())
