"""`dbt run` wall time: hudilite's incremental upsert vs dbt-spark's plain-parquet insert_overwrite.

The same change workload (shared/docs/bench-workload.md, staged by bench/data.py) as two dbt projects:

    hudilite    type: hudilite; incremental, unique_key=id, precombine_field=version, partition_by=dt,
                deletes through `_hoodie_is_deleted` (op = 'D')
    dbt_spark   type: spark, method: session (dbt-spark); incremental_strategy=insert_overwrite,
                file_format=parquet, partition_by=dt: the model re-selects the touched partitions of
                `{{ this }}`, unions the batch, keeps the highest version per id and drops deletes; dbt-spark
                overwrites those partitions (what dbt-spark users do without a table format)

Each `dbt run` is a subprocess (wall time as the user sees it, JVM start included), on the same Spark settings
as the workload (`local[2]`, 8g driver, 8 shuffle partitions, AQE, UTC). Steps: first build from the base
rows, then one incremental run with the batch. Both final tables are checked against the staged
expected.json (count, sum(version), bit_xor(id)).

    python -m bench.dbt_run --n 1000000 --b 100000 --repeat 3
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench import data as bdata

COLS = bdata.COLUMNS  # id, version, dt, ... (11 columns)
SPARK_CONF = {
    "spark.driver.memory": "8g",
    "spark.sql.shuffle.partitions": "8",
    "spark.sql.adaptive.enabled": "true",
    "spark.sql.session.timeZone": "UTC",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
}

HUDILITE_MODEL = """
{{ config(materialized='incremental', unique_key='id', precombine_field='version', partition_by=['dt']) }}
select COLS{% if is_incremental() %}, op = 'D' as _hoodie_is_deleted{% endif %}
from parquet.`{{ var('src') }}`
"""

DBT_SPARK_MODEL = """
{{ config(materialized='incremental', incremental_strategy='insert_overwrite', partition_by=['dt'],
          file_format='parquet') }}
{% if is_incremental() %}
with batch as (select COLS, op from parquet.`{{ var('src') }}`),
old as (select COLS, 'S' as op from {{ this }} where dt in (select distinct dt from batch)),
ranked as (
    select *, row_number() over (partition by id order by version desc) as _rn
    from (select * from old union all select * from batch) u
)
select COLS from ranked where _rn = 1 and op <> 'D'
{% else %}
select COLS from parquet.`{{ var('src') }}`
{% endif %}
"""


def _profile(system: str, work: Path) -> dict:
    if system == "hudilite":
        out = {"type": "hudilite", "schema": "bench", "warehouse": str(work / "warehouse"), "master": "local[2]",
               "spark_conf": SPARK_CONF, "threads": 1}
    else:
        out = {"type": "spark", "method": "session", "schema": "bench", "host": "NA", "threads": 1,
               "server_side_parameters": {"spark.master": "local[2]", **SPARK_CONF,
                                          "spark.sql.warehouse.dir": str(work / "spark-warehouse")}}
    return {"bench": {"target": "dev", "outputs": {"dev": out}}}


def make_project(system: str, work: Path) -> Path:
    import yaml

    if work.exists():
        shutil.rmtree(work)
    (work / "models").mkdir(parents=True)
    (work / "dbt_project.yml").write_text(yaml.safe_dump(
        {"name": "bench_" + system, "version": "1.0", "profile": "bench", "config-version": 2}))
    (work / "profiles.yml").write_text(yaml.safe_dump(_profile(system, work)))
    sql = HUDILITE_MODEL if system == "hudilite" else DBT_SPARK_MODEL
    (work / "models" / "events.sql").write_text(sql.replace("COLS", ", ".join(COLS)))
    return work


def dbt_run(work: Path, src: str) -> float:
    cmd = [sys.executable, "-m", "dbt.cli.main", "run", "--project-dir", str(work), "--profiles-dir", str(work),
           "--vars", json.dumps({"src": src})]
    env = {**os.environ, "DBT_SEND_ANONYMOUS_USAGE_STATS": "false"}
    t0 = time.perf_counter()
    p = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True)
    dt = time.perf_counter() - t0
    if p.returncode != 0:
        raise RuntimeError(f"dbt run failed in {work}:\n{p.stdout[-4000:]}\n{p.stderr[-2000:]}")
    return dt


def check(system: str, work: Path, expected: dict) -> bool:
    """count / sum(version) / bit_xor(id) of the final table, read with DuckDB (hudilite: through hudi-rs's
    file listing of the latest snapshot; dbt-spark: the parquet directory)."""
    import duckdb

    con = duckdb.connect()
    if system == "hudilite":
        from hudi import HudiTableBuilder

        t = HudiTableBuilder.from_base_uri(str(work / "warehouse" / "bench" / "events")).build()
        import pyarrow as pa

        tbl = pa.Table.from_batches(t.read())  # noqa: F841 - read by DuckDB below
        row = con.sql("select count(*), sum(version), bit_xor(id) from tbl").fetchall()[0]
    else:
        files = str(work / "spark-warehouse" / "bench.db" / "events" / "**" / "*.parquet")
        row = con.sql(f"select count(*), sum(version), bit_xor(id) from read_parquet('{files}')").fetchall()[0]
    want = expected["final"]
    got = {"count": row[0], "sum_version": int(row[1]), "xor_id": int(row[2])}
    ok = got == {k: want[k] for k in got}
    print(f"    check {system}: {'ok' if ok else f'MISMATCH got {got} want {want}'}", flush=True)
    return ok


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=1_000_000)
    p.add_argument("--b", type=int, default=100_000)
    p.add_argument("--mode", choices=("uniform", "recent"), default="uniform")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--systems", default="hudilite,dbt_spark")
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    wl = bdata.Workload(args.n, args.b, args.mode, bdata.DEFAULT_SEED)
    expected = bdata.stage(wl)
    stage = expected["paths"]["work_dir"]
    base, batch = expected["paths"]["base"], expected["paths"]["batch"]
    systems = args.systems.split(",")
    times: dict[str, dict[str, list[float]]] = {s: {"first": [], "incremental": []} for s in systems}
    ok = True
    for rep in range(args.repeat):
        for system in systems:  # interleaved: machine noise hits both systems alike
            work = make_project(system, Path(stage) / "dbt" / system)
            first = dbt_run(work, base)
            inc = dbt_run(work, batch)
            times[system]["first"].append(first)
            times[system]["incremental"].append(inc)
            print(f"  {system:<10} rep {rep}: first build {first:7.2f} s   incremental {inc:7.2f} s", flush=True)
            ok &= check(system, work, expected)
    med = {s: {k: statistics.median(v) for k, v in d.items()} for s, d in times.items()}
    print(f"==== medians (N={args.n}, B={args.b}, {args.mode}, repeat {args.repeat})")
    for s, d in med.items():
        print(f"  {s:<10} first build {d['first']:7.2f} s   incremental {d['incremental']:7.2f} s")
    if "hudilite" in med and "dbt_spark" in med:
        for k in ("first", "incremental"):
            print(f"  ratio {k:<12} hudilite / dbt-spark insert_overwrite = "
                  f"{med['hudilite'][k] / med['dbt_spark'][k]:.2f}x")
    out = Path(args.out) if args.out else Path(stage) / "dbt_results.json"
    out.write_text(json.dumps({"workload": vars(args), "times": times, "medians": med, "checks_ok": ok}, indent=1))
    print(f"==== checks: {'ok' if ok else 'FAILED'}; raw timings in {out}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
