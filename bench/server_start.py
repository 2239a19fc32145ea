"""Start time of `hudilite server start` (spark-submit of the Connect server, its JVM, the SparkContext, the Derby
metastore boot: until the server answers a catalog query) without and with the server JVM's class data sharing
archive, in alternating runs on a fresh warehouse each (issue 23). Besides the wall time, the server JVM's
CPU time (user + system, /proc/PID/stat) up to that point: on a machine shared with other work the wall time
mostly measures the load, the CPU time the work the JVM did.

The archive is the one `hudilite server start` keeps in the class cache ($HUDILITE_JVM_CLASS_CACHE, default
~/.cache/hudilite/jvm); a missing one is written first by one server start and stop (not timed). "without"
runs with the cache off (`HUDILITE_JVM_CLASS_CACHE=off`): the JVM loads and verifies its classes as usual.

    python -m bench.server_start --repeat 3
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import sys
import tempfile
import time

from hudilite import server
from hudilite.spark import class_cache


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process `pid` (its threads included), in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start_stop(base: str, name: str, cache: str) -> tuple[float, dict]:
    """One server start on a fresh warehouse, timed, then its stop (not timed); (seconds, what it used and
    the JVM's CPU seconds)."""
    os.environ[class_cache.CLASS_CACHE_ENV] = cache
    wh = os.path.join(base, name)
    t0 = time.perf_counter()
    info = server.start(wh, port=_free_port(), master="local[2]", timeout=1800)  # a loaded machine
    dt = time.perf_counter() - t0
    archive = os.path.join(cache, f"{class_cache.class_cache_key(server.SERVER_CLASS)}.jsa")
    try:
        with open(f"/proc/{info.pid}/maps") as f:
            maps = f.read()
        used = {"dumps": bool(info.class_dump), "maps_archive": archive in maps,
                "jvm_cpu_s": round(cpu_seconds(info.pid), 2)}
    finally:
        server.stop(wh)
    return dt, used


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--work", default=None, help="scratch directory (default: a temporary one)")
    args = ap.parse_args(argv)
    base = args.work or tempfile.mkdtemp(prefix="server-start-")
    cache = os.environ.get(class_cache.CLASS_CACHE_ENV) or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "hudilite", "jvm")
    load0 = os.getloadavg()
    _, used = start_stop(base, "prepare", cache)  # writes the archive if missing; mapped otherwise
    print(json.dumps({"prepare": used}), flush=True)
    times: dict[str, list[float]] = {"without": [], "with": []}
    cpu: dict[str, list[float]] = {"without": [], "with": []}
    for i in range(args.repeat):
        for mode in ("without", "with"):
            dt, used = start_stop(base, f"{mode}-{i}", "off" if mode == "without" else cache)
            times[mode].append(dt)
            cpu[mode].append(used["jvm_cpu_s"])
            print(json.dumps({"run": i, "mode": mode, "seconds": round(dt, 2), **used}), flush=True)
    med = {k: statistics.median(v) for k, v in times.items()}
    pairs = [w / o for o, w in zip(times["without"], times["with"])]
    cmed = {k: statistics.median(v) for k, v in cpu.items()}
    print(json.dumps({"median_without_s": round(med["without"], 2), "median_with_s": round(med["with"], 2),
                      "ratio_of_medians": round(med["with"] / med["without"], 2),
                      "pairwise_ratios": [round(r, 2) for r in pairs],
                      "median_jvm_cpu_without_s": round(cmed["without"], 2),
                      "median_jvm_cpu_with_s": round(cmed["with"], 2),
                      "jvm_cpu_ratio_of_medians": round(cmed["with"] / cmed["without"], 2),
                      "load_before": [round(x, 1) for x in load0],
                      "load_after": [round(x, 1) for x in os.getloadavg()]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
