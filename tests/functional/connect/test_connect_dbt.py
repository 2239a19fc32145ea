"""dbt over Spark Connect (`method: connect`): seed, table, incremental upsert, snapshot and a
`hudilite.changes()` model, built twice by `dbt build` in subprocesses against the `hudilite server` of the
warehouse; the tables' contents are read back from storage by the test's classic session."""

import os
import textwrap

import pytest

import hudilite
from tests.functional.connect.conftest import run_client

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
    "snapshots/snap.sql": """
        {% snapshot snap %}
        {{ config(target_schema=schema, unique_key='id', strategy='check', check_cols=['name']) }}
        select id, name from {{ ref('raw') }}
        {% endsnapshot %}
    """,
}


def _project(root, info) -> None:
    for name, text in FILES.items():
        path = os.path.join(root, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(textwrap.dedent(text).strip() + "\n")
    with open(os.path.join(root, "profiles.yml"), "w") as f:
        f.write(textwrap.dedent(f"""
            connect_proj:
              target: dev
              outputs:
                dev:
                  type: hudilite
                  method: connect
                  host: {info.url}
                  schema: shop
                  warehouse: {info.warehouse}
                  threads: 1
        """))
    os.makedirs(os.path.join(root, "seeds"), exist_ok=True)


def _build(root, seed: str) -> str:
    with open(os.path.join(root, "seeds", "raw.csv"), "w") as f:
        f.write(seed)
    out = run_client(DBT + ["build", "--project-dir", root, "--profiles-dir", root], cwd=root)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-3000:]
    return out.stdout


def _table(spark, info, name, cols):
    df = hudilite.read(spark, os.path.join(info.warehouse, "shop", name))
    return sorted(tuple(r) for r in df.select(*cols).collect())


def test_dbt_models_over_connect(spark, connect_server, tmp_path):
    info, root = connect_server, str(tmp_path / "proj")
    _project(root, info)
    _build(root, SEED_1)
    assert _table(spark, info, "orders_changes", ["id", "name", "_change_op"]) == [
        (1, "a", "I"), (2, "b", "I"), (3, "c", "I")]
    _build(root, SEED_2)
    assert _table(spark, info, "raw", ["id", "name"]) == [(2, "b2"), (3, "c"), (4, "d")]
    assert _table(spark, info, "orders_t", ["id", "name"]) == [(2, "b2"), (3, "c"), (4, "d")]
    # upserted: 1 stays (an upsert deletes nothing), 2 updated, 4 inserted
    assert _table(spark, info, "orders_inc", ["id", "name"]) == [(1, "a"), (2, "b2"), (3, "c"), (4, "d")]
    # run 2 read the feed from its checkpoint: only run 2's commit was upserted (2 and 3 written again - 3 with
    # the same values, still an update - and 4 inserted); 1, untouched since run 1, keeps its insert
    assert _table(spark, info, "orders_changes", ["id", "name", "_change_op"]) == [
        (1, "a", "I"), (2, "b2", "U"), (3, "c", "U"), (4, "d", "I")]
    snap = _table(spark, info, "snap", ["id", "name", "dbt_valid_to"])
    assert [(i, n) for i, n, _ in snap] == [(1, "a"), (2, "b"), (2, "b2"), (3, "c"), (4, "d")]
    assert [n for _, n, to in snap if to is None] == ["a", "b2", "c", "d"]  # 1 absent from the source: kept
