"""Latency of dbt commands on the sample project, as an analytics engineer sees them (issue 23).

Each dbt command is a command-line subprocess (`python -m dbt.cli.main ...`), wall time included process and
Spark start. Per system and repeat, on a fresh warehouse: `dbt seed`; `dbt run` (batch 1: the first build of
the 4 models); `dbt run` (batch 2: one small batch of change events through the 4 models); `dbt test`.
Then, as the day goes on: `dbt run` batch 3 (not reported), `dbt run` batch 4 (`run #4`: the JVM has run
these plans a few times) and batch 4 again with the same `--vars` (`again`: dbt parses partially; every
changed var makes dbt parse the whole project, ~1.5 s here).
With `--steady N`, N more runs follow (batches 1-4 in turn, each a changed var: dbt parses in full): the steady
state of a project run many times an hour on a server whose JIT has compiled its plans (`steady`: medians
over those N runs and the repeats).
Reported: medians over the repeats of each command's wall time, of dbt's own time of the small-batch runs
(`(dbt)`: run_results.json's elapsed_time - session, cache, models; not process start, imports, parse) and of
their per-model execution times.

    hudilite-session   the sample project as shipped (embedded SparkSession, Hudi tables, incremental models)
    hudilite-session-cold  the same with the class archive off (HUDILITE_JVM_CLASS_CACHE=off): the cold start
                       before the archive (not in the default systems)
    hudilite-connect   the same against a warm local Spark Connect server (`hudilite server start`)
    dbt-spark          dbt-spark `method: session`, plain parquet tables: the same 4 models rebuilt as tables
                       from the events up to the batch (what a project without a table format does)
    dbt-duckdb         the same plain models on DuckDB, when dbt-duckdb is installed (else skipped, said so)

Session mode maps the driver JVM's class archive and the Connect server its own (`hudilite server start`'s):
a missing one is written first by one untimed command (`--no-warm` skips that and measures a cold cache).
The load average at the start and the end is reported: other work on the machine slows every system alike.

    python -m bench.dbt_latency --repeat 3 [--systems hudilite-session,hudilite-connect,dbt-spark] [--steady N]
        [--out F]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from hudilite import server
from hudilite.spark import class_cache

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "sample_project"
SYSTEMS = ("hudilite-session", "hudilite-connect", "dbt-spark", "dbt-duckdb")

# the sample's 4 models as plain tables: ODS = latest event per order up to the batch (deletes dropped)
PLAIN_MODELS = {
    "ods/ods_orders.sql": """
{{ config(materialized='table', FILE_FORMAT) }}
select order_id, customer_id, status, amount, order_date, created_at, changed_at, event_seq from (
  select *, row_number() over (partition by order_id order by event_seq desc) as rn
  from {{ ref('order_events') }} where batch <= {{ var('batch') }}
) e where rn = 1 and op <> 'd'
""",
    "dwd/dwd_orders.sql": """
{{ config(materialized='table', FILE_FORMAT) }}
select o.order_id, o.customer_id, c.customer_name, c.country, upper(o.status) as status, o.amount, o.order_date,
       date_trunc('hour', o.created_at) as order_hour, o.event_seq
from {{ ref('ods_orders') }} o left join {{ ref('customers') }} c on o.customer_id = c.customer_id
""",
    "ads/ads_orders_daily.sql": """
{{ config(materialized='table', FILE_FORMAT) }}
select order_date, country, count(*) as orders, sum(amount) as revenue, max(amount) as largest_order,
       count(distinct customer_id) as customers
from {{ ref('dwd_orders') }} where status <> 'PENDING' group by order_date, country
""",
    "ads/ads_orders_hourly.sql": """
{{ config(materialized='table', FILE_FORMAT) }}
select order_date, order_hour, status, count(*) as orders, sum(amount) as revenue, avg(amount) as avg_amount,
       min(amount) as min_amount, max(amount) as max_amount, count(distinct customer_id) as customers
from {{ ref('dwd_orders') }} group by order_date, order_hour, status
""",
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _profile(system: str, work: Path, port: int) -> dict:
    if system.startswith("hudilite"):
        out = {"type": "hudilite", "schema": "shop", "warehouse": str(work / "warehouse"), "master": "local[2]",
               "threads": 2}
        if system == "hudilite-connect":
            out.update(method="connect", host=f"sc://127.0.0.1:{port}")
    elif system == "dbt-spark":
        out = {"type": "spark", "method": "session", "schema": "shop", "host": "NA", "threads": 2,
               "server_side_parameters": {"spark.master": "local[2]", "spark.ui.enabled": "false",
                                          "spark.sql.warehouse.dir": str(work / "spark-warehouse")}}
    else:
        out = {"type": "duckdb", "path": str(work / "shop.duckdb"), "schema": "shop", "threads": 2}
    return {"hudilite_sample": {"target": "dev", "outputs": {"dev": out}}}


def make_project(system: str, work: Path, port: int) -> Path:
    if work.exists():
        shutil.rmtree(work)
    shutil.copytree(SAMPLE, work, ignore=shutil.ignore_patterns("warehouse", "target", "logs", "*.py"))
    (work / "profiles.yml").write_text(yaml.safe_dump(_profile(system, work, port)))
    if not system.startswith("hudilite"):
        shutil.rmtree(work / "models")
        for rel, sql in PLAIN_MODELS.items():
            (work / "models" / rel).parent.mkdir(parents=True, exist_ok=True)
            fmt = "file_format='parquet'" if system == "dbt-spark" else "tags=[]"
            (work / "models" / rel).write_text(sql.replace("FILE_FORMAT", fmt))
        # the generic tests of schema.yml hold for the plain tables too; the singular one compares ODS/DWD
        # dbt-spark's session cursor inlines seed values without escaping quotes (O'Brien is a syntax error):
        # the plain systems get the name with a typographic apostrophe (no count or sum changes)
        for csv in (work / "seeds").glob("*.csv"):
            csv.write_text(csv.read_text().replace("'", "\u2019"))
    return work


def dbt(work: Path, *args: str, env_extra: dict | None = None) -> float:
    cmd = [sys.executable, "-m", "dbt.cli.main", *args, "--project-dir", str(work), "--profiles-dir", str(work)]
    env = {**os.environ, "DBT_SEND_ANONYMOUS_USAGE_STATS": "false", "PYSPARK_PYTHON": sys.executable,
           **(env_extra or {})}
    t0 = time.perf_counter()
    p = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True)
    dt = time.perf_counter() - t0
    if p.returncode != 0:
        raise RuntimeError(f"dbt {' '.join(args)} failed in {work}:\n{p.stdout[-4000:]}\n{p.stderr[-2000:]}")
    return dt


def model_times(work: Path) -> dict[str, float]:
    res = json.loads((work / "target" / "run_results.json").read_text())
    return {r["unique_id"].split(".")[-1]: r["execution_time"] for r in res["results"]}


def run_elapsed(work: Path) -> float:
    """dbt's own time of the last run's execution (`elapsed_time` of run_results.json: opening the session,
    schemas and the relation cache, the models, closing; not the process start, imports or parse) - the
    "Finished running 4 ... models in X seconds" line."""
    return float(json.loads((work / "target" / "run_results.json").read_text())["elapsed_time"])


def model_engines(work: Path) -> dict[str, str | None]:
    """What wrote each model of the last run: `driver` (the small-batch path, no Spark write job) or `spark`."""
    res = json.loads((work / "target" / "run_results.json").read_text())
    return {r["unique_id"].split(".")[-1]: (r.get("adapter_response") or {}).get("engine") for r in res["results"]}


def run_system(system: str, base: Path, repeat: int, steady: int = 0) -> dict:
    port = _free_port()
    env = {class_cache.CLASS_CACHE_ENV: "off"} if system == "hudilite-session-cold" else None
    server_dir = None
    out: dict = {"seed": [], "run_first": [], "run_batch": [], "run_batch_dbt": [], "test": [], "models": [],
                 "run_later": [], "run_later_dbt": [], "models_later": [], "run_same": [], "run_same_dbt": [],
                 "run_steady": [], "run_steady_dbt": [], "models_steady": []}
    try:
        for i in range(repeat):
            work = make_project(system, base / f"{system}-{i}", port)
            if system == "hudilite-connect":  # warm: started before the measured commands, as a user would
                server_dir = str(work / "warehouse")
                server.start(server_dir, port=port, master="local[2]")
            out["seed"].append(dbt(work, "seed", env_extra=env))
            out["run_first"].append(dbt(work, "run", "--vars", "{batch: 1}", env_extra=env))
            out["run_batch"].append(dbt(work, "run", "--vars", "{batch: 2}", env_extra=env))
            out["models"].append(model_times(work))
            out["run_batch_dbt"].append(run_elapsed(work))
            engines = model_engines(work)
            out["test"].append(dbt(work, "test", "--vars", "{batch: 2}", env_extra=env))
            # later small batches, as the day goes on: batch 3, then batch 4 measured (the JVM has run these
            # plans a few times: its JIT has compiled more of them), then batch 4 again with the same --vars,
            # which dbt parses partially instead of in full (a changed var makes dbt parse everything again)
            dbt(work, "run", "--vars", "{batch: 3}", env_extra=env)
            out["run_later"].append(dbt(work, "run", "--vars", "{batch: 4}", env_extra=env))
            out["run_later_dbt"].append(run_elapsed(work))
            out["models_later"].append(model_times(work))
            out["run_same"].append(dbt(work, "run", "--vars", "{batch: 4}", env_extra=env))
            out["run_same_dbt"].append(run_elapsed(work))
            for k in range(steady):
                out["run_steady"].append(dbt(work, "run", "--vars", f"{{batch: {k % 4 + 1}}}", env_extra=env))
                out["run_steady_dbt"].append(run_elapsed(work))
                out["models_steady"].append(model_times(work))
            if server_dir:
                server.stop(server_dir)
                server_dir = None
    finally:
        if server_dir:
            server.stop(server_dir)
    per_model = ("models", "models_later", "models_steady")
    med: dict = {k: round(statistics.median(v), 2) for k, v in out.items() if k not in per_model and v}
    for key, runs in (("models_batch", out["models"]), ("models_later", out["models_later"]),
                      ("models_steady", out["models_steady"])):
        if runs:
            med[key] = {m: round(statistics.median(r[m] for r in runs), 2) for m in runs[0]}
    med["all"] = {k: [round(x, 2) for x in v] for k, v in out.items() if k not in per_model}
    med["engines_batch"] = engines
    return med


def archives() -> dict[str, bool]:
    """Whether the class archives session and Connect mode map are in place."""
    cache = os.environ.get(class_cache.CLASS_CACHE_ENV) or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "hudilite", "jvm")
    return {name: os.path.isfile(os.path.join(cache, f"{class_cache.class_cache_key(main)}.jsa"))
            for name, main in (("driver", None), ("server", server.SERVER_CLASS))}


def warm(base: Path, systems: list[str]) -> None:
    """Write a missing class archive by one untimed use: a `dbt seed` in session mode (its JVM dumps at exit),
    a server start and stop for Connect mode."""
    have = archives()
    if "hudilite-session" in systems and not have["driver"]:
        dbt(make_project("hudilite-session", base / "warm-session", 0), "seed")
    if "hudilite-connect" in systems and not have["server"]:
        work = make_project("hudilite-connect", base / "warm-connect", _free_port())
        server.start(str(work / "warehouse"), port=_free_port(), master="local[2]")
        server.stop(str(work / "warehouse"))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--systems", default=",".join(SYSTEMS))
    ap.add_argument("--work", default=None, help="scratch directory (default: a temporary one)")
    ap.add_argument("--no-warm", action="store_true", help="do not write missing class archives first")
    ap.add_argument("--out", default=None, help="write the results as JSON to this file")
    ap.add_argument("--steady", type=int, default=0, metavar="N",
                    help="N more runs per repeat after `again` (batches 1-4 in turn), reported as `steady`")
    args = ap.parse_args(argv)
    base = Path(args.work or tempfile.mkdtemp(prefix="dbt-latency-"))
    systems = args.systems.split(",")
    if not args.no_warm:
        warm(base, systems)
    load_start = os.getloadavg()
    results: dict = {"class_archives": archives()}
    for system in systems:
        if system == "dbt-duckdb" and importlib.util.find_spec("dbt.adapters.duckdb") is None:
            results[system] = {"skipped": "dbt-duckdb is not installed in this environment"}
        else:
            results[system] = run_system(system, base, args.repeat, args.steady)
        print(json.dumps({system: results[system]}), flush=True)
    load_end = os.getloadavg()
    results["load"] = {"start": [round(x, 2) for x in load_start], "end": [round(x, 2) for x in load_end],
                       "cores": os.cpu_count()}
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1))
    print(f"\ncores: {os.cpu_count()}, load average (1/5/15 min) at the start {results['load']['start']}, at the "
          f"end {results['load']['end']} (other work on the machine slows every system alike); class archives "
          f"in place: {results['class_archives']}")
    print(f"{'system':<18}{'seed':>8}{'run #1':>8}{'run #2':>8}{'(dbt)':>8}{'test':>8}{'run #4':>8}{'(dbt)':>8}"
          f"{'again':>8}{'(dbt)':>8}  small-batch run per model (s): #2; #4")
    for system in systems:
        r = results[system]
        if "skipped" in r:
            print(f"{system:<18}  skipped: {r['skipped']}")
            continue
        models = ", ".join(f"{m} {t}" for m, t in r["models_batch"].items())
        later = ", ".join(f"{m} {t}" for m, t in r["models_later"].items())
        print(f"{system:<18}{r['seed']:>8}{r['run_first']:>8}{r['run_batch']:>8}{r['run_batch_dbt']:>8}{r['test']:>8}"
              f"{r['run_later']:>8}{r['run_later_dbt']:>8}{r['run_same']:>8}{r['run_same_dbt']:>8}"
              f"  {models}; {later}")
    if args.steady:
        print(f"\nsteady state ({args.steady} runs per repeat after `again`), medians: wall s (dbt's own), per model s")
        for system in systems:
            r = results[system]
            if "skipped" not in r:
                steady = ", ".join(f"{m} {t}" for m, t in r["models_steady"].items())
                print(f"{system:<18}{r['run_steady']:>8} ({r['run_steady_dbt']})  {steady}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
