"""dbt over Spark Connect (`method: connect`): seed, table, incremental upsert / append / delete+insert,
snapshot, a `hudilite.changes()` model, an `aggregate` model and two Python models (table, incremental
upsert), built twice by `dbt build` in subprocesses against the `hudilite server` of the warehouse; the same
project is built meanwhile in session mode, in this process (`reuse_session: auto` over the suite's classic
session), and every table's rows, read back from storage by the test's classic session, must equal between the
two modes and the expected values."""

import os
import textwrap

import pytest
from dbt.adapters.factory import reset_adapters
from dbt.cli.main import dbtRunner

import hudilite
from tests.functional.connect.conftest import run_client, start_client, write_project

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")

DBT = ["-c", "from dbt.cli.main import cli; cli()"]
SEED_1 = "id,name,ts\n1,a,1\n2,b,1\n3,c,1\n"
SEED_2 = "id,name,ts\n2,b2,2\n3,c,1\n4,d,2\n"  # 2 renamed, 1 gone from the source, 4 new

FILES = {
    "dbt_project.yml": """
        name: connect_proj
        version: "1.0"
        profile: connect_proj
        seeds:
          connect_proj:
            +column_types: {id: bigint, name: string, ts: bigint}
    """,
    "models/orders_t.sql": "{{ config(materialized='table') }} select id, name, ts from {{ ref('raw') }}",
    "models/orders_inc.sql": """
        {{ config(materialized='incremental', unique_key='id', precombine_field='ts') }}
        select id, name, ts from {{ ref('raw') }}
    """,
    "models/orders_changes.sql": """
        {{ config(materialized='incremental', unique_key='id') }}
        select id, name, _change_op from {{ hudilite.changes(ref('orders_inc')) }}
    """,
    "models/orders_app.sql": """
        {{ config(materialized='incremental', incremental_strategy='append') }}
        select id, name from {{ ref('raw') }}
    """,
    "models/orders_di.sql": """
        {{ config(materialized='incremental', incremental_strategy='delete+insert', unique_key='id') }}
        select id, name, ts from {{ ref('raw') }}
    """,
    # maintained from orders_inc's changes on run 2: row 2 moves from group ts=1 to ts=2
    "models/orders_agg.sql": """
        {{ config(materialized='aggregate') }}
        select ts, count(*) as n, sum(id) as ids from {{ ref('orders_inc') }} group by ts
    """,
    # Python models run in the dbt process on its session (a Connect session over Connect)
    "models/orders_py.py": """
        import pyspark.sql.functions as F

        def model(dbt, session):
            dbt.config(materialized='table')
            return dbt.ref('raw').withColumn('name', F.upper('name'))
    """,
    "models/orders_py_inc.py": """
        def model(dbt, session):
            dbt.config(materialized='incremental', unique_key='id', precombine_field='ts')
            df = dbt.ref('raw')
            if dbt.is_incremental:
                df = df.filter(df.ts > session.sql(f"select max(ts) as m from {dbt.this}").collect()[0].m - 1)
            return df
    """,
    "snapshots/snap.sql": """
        {% snapshot snap %}
        {{ config(target_schema=schema, unique_key='id', strategy='check', check_cols=['name']) }}
        select id, name from {{ ref('raw') }}
        {% endsnapshot %}
    """,
}


SCHEMA = {"connect": "shop", "session": "shop_session"}
# each table's columns compared, minus the snapshot's validity times (wall-clock)
TABLES = {"raw": ["id", "name", "ts"], "orders_t": ["id", "name", "ts"], "orders_inc": ["id", "name", "ts"],
          "orders_changes": ["id", "name", "_change_op"], "orders_app": ["id", "name"],
          "orders_di": ["id", "name", "ts"], "orders_agg": ["ts", "n", "ids"],
          "snap": ["id", "name", "dbt_valid_to is null as current"], "orders_py": ["id", "name", "ts"],
          "orders_py_inc": ["id", "name", "ts"]}


def _project(root, info, mode: str, warehouse: str) -> None:
    write_project(root, FILES)
    how = f"method: connect\n      host: {info.url}" if mode == "connect" else "reuse_session: auto"
    with open(os.path.join(root, "profiles.yml"), "w") as f:
        f.write(textwrap.dedent(f"""
            connect_proj:
              target: dev
              outputs:
                dev:
                  type: hudilite
                  schema: {SCHEMA[mode]}
                  warehouse: {warehouse}
                  threads: 1
        """) + f"      {how}\n")
    os.makedirs(os.path.join(root, "seeds"), exist_ok=True)


def _build_both(roots, seed: str) -> None:
    """`dbt build` of both projects: over Connect in a subprocess, in session mode here meanwhile."""
    for root in roots.values():
        with open(os.path.join(root, "seeds", "raw.csv"), "w") as f:
            f.write(seed)
    args = ["build", "--project-dir", roots["connect"], "--profiles-dir", roots["connect"]]
    client = start_client(DBT + args)
    try:
        res = dbtRunner().invoke(["build", "--project-dir", roots["session"], "--profiles-dir", roots["session"]])
        stdout, stderr = client.communicate(timeout=600)
    finally:
        # dbt keeps the invocation's adapter registered, and dbt's test harness registers its own only when
        # none is (a later harness test in this process would run on this project's profile)
        reset_adapters()
        client.kill()
        client.wait()
    assert client.returncode == 0, stdout[-4000:] + stderr[-3000:]
    # the first build probes entries that do not exist yet: no failed query's stack on dbt's console
    assert "JVM stacktrace" not in stdout + stderr and "QueryContextLogger" not in stdout + stderr, stderr[-3000:]
    assert res.success, res.exception


def _tables(spark, warehouses, mode: str) -> dict:
    out = {}
    for name, cols in TABLES.items():
        df = hudilite.read(spark, os.path.join(warehouses[mode], SCHEMA[mode], name))
        out[name] = sorted(tuple(r) for r in df.selectExpr(*cols).collect())
    return out


def _same_in_both(spark, warehouses) -> dict:
    over_connect = _tables(spark, warehouses, "connect")
    assert over_connect == _tables(spark, warehouses, "session")
    return over_connect


def test_dbt_models_over_connect(spark, connect_server, tmp_path):
    info = connect_server
    roots = {m: str(tmp_path / m) for m in SCHEMA}
    warehouses = {"connect": info.warehouse, "session": str(tmp_path / "session-warehouse")}
    for mode in SCHEMA:
        _project(roots[mode], info, mode, warehouses[mode])
    _build_both(roots, SEED_1)
    t = _same_in_both(spark, warehouses)
    assert t["orders_changes"] == [(1, "a", "I"), (2, "b", "I"), (3, "c", "I")]
    assert t["orders_agg"] == [(1, 3, 6)]
    assert t["orders_py"] == [(1, "A", 1), (2, "B", 1), (3, "C", 1)]
    _build_both(roots, SEED_2)
    t = _same_in_both(spark, warehouses)
    assert t["raw"] == t["orders_t"] == [(2, "b2", 2), (3, "c", 1), (4, "d", 2)]
    # upserted: 1 stays (an upsert deletes nothing), 2 updated, 4 inserted
    assert t["orders_inc"] == [(1, "a", 1), (2, "b2", 2), (3, "c", 1), (4, "d", 2)]
    # run 2 read the feed from its checkpoint: only run 2's commit was upserted (2 and 3 written again - 3 with
    # the same values, still an update - and 4 inserted); 1, untouched since run 1, keeps its insert
    assert t["orders_changes"] == [(1, "a", "I"), (2, "b2", "U"), (3, "c", "U"), (4, "d", "I")]
    assert t["orders_app"] == [(1, "a"), (2, "b"), (2, "b2"), (3, "c"), (3, "c"), (4, "d")]
    # the batch's keys deleted, then its rows inserted: 1 (not in the batch) stays
    assert t["orders_di"] == [(1, "a", 1), (2, "b2", 2), (3, "c", 1), (4, "d", 2)]
    assert t["orders_agg"] == [(1, 2, 4), (2, 2, 6)]
    assert t["orders_py"] == [(2, "B2", 2), (3, "C", 1), (4, "D", 2)]
    assert t["orders_py_inc"] == t["orders_inc"]  # the incremental Python model upserted as the SQL one did
    # 1 absent from the source: kept current
    assert t["snap"] == [(1, "a", True), (2, "b", False), (2, "b2", True), (3, "c", True), (4, "d", True)]
    # a model whose SQL fails: dbt reports Spark's error, not the server's Java stack (~80 frames before)
    with open(os.path.join(roots["connect"], "models", "broken.sql"), "w") as f:
        f.write("select no_such_column from values (1) as t(a)")
    out = run_client(DBT + ["run", "-s", "broken", "--project-dir", roots["connect"], "--profiles-dir",
                            roots["connect"]])
    assert out.returncode == 1, out.stdout[-3000:] + out.stderr[-3000:]
    assert "UNRESOLVED_COLUMN" in out.stdout, out.stdout[-3000:]
    assert "JVM stacktrace" not in out.stdout + out.stderr and "\tat org.apache" not in out.stdout + out.stderr, \
        out.stdout[-3000:]
