"""The temporary views of `hudilite.changes()` over Spark Connect: a model's query carries its view's plan (no
round trip creating the view on the server), any other statement that names the view (`dbt show` of the model)
creates it first, and a view re-pointed because its upstream was rebuilt is the one the model's query carries.
dbt runs in subprocesses against the suite's `hudilite server`; each records the views it creates on the
server (a wrapper around Connect's `createOrReplaceTempView`)."""

import json
import os
import textwrap

import pytest

import hudilite
from tests.functional.connect.conftest import run_client, write_project

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")

# dbt's CLI, with every temporary view the process creates on the server appended to $VIEW_LOG
DBT = ["-c", textwrap.dedent("""
    import os
    from pyspark.sql.connect.dataframe import DataFrame
    _create = DataFrame.createOrReplaceTempView
    def _logged(self, name):
        with open(os.environ["VIEW_LOG"], "a") as f:
            f.write(name + "\\n")
        return _create(self, name)
    DataFrame.createOrReplaceTempView = _logged
    from dbt.cli.main import cli
    cli()
""")]

FILES = {
    "dbt_project.yml": """
        name: change_views
        version: "1.0"
        profile: change_views
        seeds:
          change_views:
            +column_types: {id: bigint, name: string, ts: bigint}
    """,
    # the upstream's key comes from a var: changing it rebuilds the table beside the old one (a new table id)
    "models/up.sql": """
        {{ config(materialized='incremental', unique_key=var('up_key', 'id'), precombine_field='ts') }}
        select id, name, ts from {{ ref('raw') }}
    """,
    "models/chg.sql": """
        {{ config(materialized='incremental', unique_key='id') }}
        select id, name, _change_op from {{ hudilite.changes(ref('up')) }}
    """,
}


def _project(root: str, url: str, warehouse: str) -> None:
    profile = {"type": "hudilite", "schema": "change_views", "warehouse": warehouse, "threads": 1,
               "method": "connect", "host": url}
    write_project(root, {**FILES, "profiles.yml": json.dumps({"change_views": {"target": "dev",
                                                                               "outputs": {"dev": profile}}})})


def _dbt(root: str, log: str, *args: str):
    if os.path.exists(log):
        os.remove(log)
    p = run_client(DBT + [*args, "--project-dir", root, "--profiles-dir", root], env={"VIEW_LOG": log})
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-3000:]
    created = open(log).read().split() if os.path.exists(log) else []
    return p.stdout, [v for v in created if v.startswith("hudilite_changes_")]


def _seed(root: str, csv: str) -> None:
    os.makedirs(os.path.join(root, "seeds"), exist_ok=True)
    with open(os.path.join(root, "seeds", "raw.csv"), "w") as f:
        f.write(csv)


def _rows(spark, warehouse: str, name: str):
    df = hudilite.read(spark, os.path.join(warehouse, "change_views", name))
    return sorted(tuple(r) for r in df.selectExpr("id", "name", "_change_op").collect())


def test_change_views_over_connect(spark, connect_server, tmp_path):
    root, log, wh = str(tmp_path / "proj"), str(tmp_path / "views.log"), connect_server.warehouse
    _project(root, connect_server.url, wh)
    _seed(root, "id,name,ts\n1,a,1\n2,b,1\n")
    _dbt(root, log, "seed")
    _, created = _dbt(root, log, "run")
    assert created == []  # the model's query carried its change view
    assert _rows(spark, wh, "chg") == [(1, "a", "I"), (2, "b", "I")]

    _seed(root, "id,name,ts\n2,b2,2\n3,c,2\n")
    _dbt(root, log, "seed")
    _dbt(root, log, "run", "--select", "up")
    # `dbt show` runs the model's SQL as a statement: the view it names is created on the server first
    out, created = _dbt(root, log, "show", "--select", "chg", "--output", "json")
    assert len(created) == 1, out[-3000:]
    assert '"name": "b2"' in out and '"_change_op": "U"' in out and '"name": "a"' not in out, out[-3000:]
    _, created = _dbt(root, log, "run", "--select", "chg")
    assert created == []
    assert _rows(spark, wh, "chg") == [(1, "a", "I"), (2, "b2", "U"), (3, "c", "I")]

    # the upstream rebuilt with another key (a new table at its path): the consumer's change view is re-pointed
    # to the new snapshot, all rows 'I', and the model's query reads that one
    _dbt(root, log, "run", "--select", "up", "--full-refresh", "--vars", "{up_key: [id, name]}")
    _, created = _dbt(root, log, "run", "--select", "chg", "--vars", "{up_key: [id, name]}")
    assert _rows(spark, wh, "chg") == [(2, "b2", "I"), (3, "c", "I")]
    assert created == []
