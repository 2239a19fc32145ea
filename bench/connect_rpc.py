"""The cost of one Spark Connect query round trip with and without reattachable executions (issue 23).

A reattachable execution (PySpark's default) is followed by a ReleaseExecute call that lets the server drop
the buffered reply; `hudilite.server.connect` turns it off for a server on the loopback interface. One client
of a fresh `hudilite server` runs four small queries (a constant, `tableExists`, `SHOW TBLPROPERTIES`, a
count of a 3-row table) in both modes, interleaved round by round so both meet the same load and the same
JIT state; the first rounds are warm-up.

    python -m bench.connect_rpc [--rounds 30]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time

from bench.server_start import _free_port
from hudilite import server

WARMUP = 5


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=30)
    args = ap.parse_args(argv)
    wh = tempfile.mkdtemp(prefix="connect-rpc-")
    info = server.start(wh, port=_free_port(), master="local[2]")
    times: dict[str, dict[str, list[float]]] = {"reattachable": {}, "plain": {}}
    try:
        spark = server.connect(info.url)
        spark.sql("create database if not exists rpc")
        spark.range(3).write.saveAsTable("rpc.t")
        ops = {"select 1": lambda: spark.sql("select 1").collect(),
               "tableExists": lambda: spark.catalog.tableExists("rpc.t"),
               "SHOW TBLPROPERTIES": lambda: spark.sql("show tblproperties rpc.t").collect(),
               "count(*)": lambda: spark.sql("select count(*) from rpc.t").collect()}
        for r in range(WARMUP + args.rounds):
            for mode in times:
                if mode == "plain":
                    spark.client.disable_reattachable_execute()
                else:
                    spark.client.enable_reattachable_execute()
                for name, op in ops.items():
                    t0 = time.perf_counter()
                    op()
                    if r >= WARMUP:
                        times[mode].setdefault(name, []).append((time.perf_counter() - t0) * 1000)
    finally:
        server.stop(wh)
    out = {mode: {name: round(statistics.median(v), 1) for name, v in ops_.items()} for mode, ops_ in times.items()}
    print(json.dumps({"median_ms": out, "rounds": args.rounds}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
