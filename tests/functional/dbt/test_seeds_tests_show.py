"""Seeds (quotes, commas, backslashes, types), `dbt test`, `dbt show`, `dbt docs generate`, persist_docs,
views/ephemeral models over hudilite tables, and `select *` of upstream tables (the `_hoodie_*` meta columns
stay in the files, never in `select *`)."""

import json
import os

import pytest
from dbt.tests.util import run_dbt, run_dbt_and_capture

TRICKY_CSV = '''id,txt,amount,day,flag
1,"hello, world",1.5,2024-01-01,true
2,"it's ""quoted""",2,2024-01-02,false
3,back\\slash and 'single',-3.25,2024-02-29,
4,,0,,true
5,"multi
line",10.125,2024-12-31,false
6,ünïcödé €,1e3,2024-06-01,true
'''

EMPTY_CSV = "id,name\n"

SCHEMA_YML = """
version: 2
seeds:
  - name: tricky
    config:
      column_types: {amount: "decimal(10,3)"}
    columns:
      - name: id
        data_tests: [unique, not_null]
models:
  - name: totals
    description: "Totals: it's documented"
    config:
      persist_docs: {relation: true, columns: true}
    columns:
      - name: id
        description: "the id, 'quoted'"
        data_tests:
          - unique
          - not_null
          - relationships: {arguments: {to: ref('tricky'), field: id}}
      - name: flag
        data_tests:
          - accepted_values: {arguments: {values: [true, false], quote: false}}
"""

TOTALS = """
{{ config(materialized='table') }}
select * from {{ ref('tricky') }} where id <= 4
"""

EPHEMERAL = """
{{ config(materialized='ephemeral') }}
select id, txt from {{ ref('totals') }}
"""

VIEW = """
{{ config(materialized='view') }}
select * from {{ ref('totals') }}
"""

# select * over a hudilite table, a view on it and an ephemeral model, unioned with a plain query
UNIONED = """
{{ config(materialized='table') }}
select * from {{ ref('tricky') }} where id = 1
union all
select 99 as id, 'plain' as txt, cast(9 as decimal(10,3)) as amount, date'2024-01-01' as day, true as flag
"""

DOWNSTREAM = """
{{ config(materialized='incremental', unique_key='id') }}
select t.*, e.txt as txt2 from {{ ref('totals_view') }} t join {{ ref('eph') }} e using (id)
"""

SINGULAR_OK = "select * from {{ ref('totals') }} where amount > 100"
SINGULAR_FAIL = "select * from {{ ref('totals') }} where id = 1"


def rows(project, sql):
    return sorted(tuple(r) for r in project.run_sql(sql, fetch="all"))


class TestSeedsTestsShow:
    @pytest.fixture(scope="class")
    def seeds(self):
        return {"tricky.csv": TRICKY_CSV, "empty.csv": EMPTY_CSV}

    @pytest.fixture(scope="class")
    def models(self):
        return {"schema.yml": SCHEMA_YML, "totals.sql": TOTALS, "eph.sql": EPHEMERAL,
                "totals_view.sql": VIEW, "downstream.sql": DOWNSTREAM, "unioned.sql": UNIONED}

    @pytest.fixture(scope="class")
    def tests(self):
        return {"amount_small.sql": SINGULAR_OK, "no_id_1.sql": SINGULAR_FAIL}

    def test_seed_run_test_show(self, project):
        s = project.test_schema
        res = run_dbt(["seed"])
        by = {r.node.name: r.adapter_response for r in res.results}
        assert by["tricky"]["rows_inserted"] == 6 and by["tricky"]["_message"] == "INSERT 6"
        assert by["empty"]["rows_inserted"] == 0
        got = {r[0]: tuple(r[1:]) for r in project.run_sql(
            f"select id, txt, cast(amount as string), cast(day as string), flag from {s}.tricky", fetch="all")}
        assert got[1] == ("hello, world", "1.500", "2024-01-01", True)
        assert got[2] == ('it\'s "quoted"', "2.000", "2024-01-02", False)
        assert got[3] == ("back\\slash and 'single'", "-3.250", "2024-02-29", None)
        assert got[4] == (None, "0.000", None, True)
        assert got[5][0] == "multi\nline" and got[5][1] == "10.125"
        assert got[6][0] == "ünïcödé €" and got[6][1] == "1000.000"
        assert project.run_sql(f"select count(*) from {s}.empty", fetch="one")[0] == 0
        # re-seeding replaces the rows (one insert_overwrite_table commit)
        res = run_dbt(["seed", "-s", "tricky"])
        assert res.results[0].adapter_response["operation"] == "insert_overwrite_table"
        assert project.run_sql(f"select count(*) from {s}.tricky", fetch="one")[0] == 6

        run_dbt(["run"])
        desc = {r[0]: (r[1], r[2]) for r in project.run_sql(f"describe table extended {s}.totals", fetch="all")}
        assert desc["id"][1] == "the id, 'quoted'" and desc["Comment"][0] == "Totals: it's documented"
        assert rows(project, f"select id, txt2 from {s}.downstream") == [
            (1, "hello, world"), (2, 'it\'s "quoted"'), (3, "back\\slash and 'single'"), (4, None)]
        cols = [c.name for c in project.adapter.get_columns_in_relation(
            project.adapter.get_relation(None, s, "downstream"))]
        assert cols == ["id", "txt", "amount", "day", "flag", "txt2"]
        run_dbt(["run", "-s", "downstream"])  # incremental run over select *
        assert rows(project, f"select id, txt from {s}.unioned") == [(1, "hello, world"), (99, "plain")]
        cur = project.run_sql(f"select * from {s}.tricky limit 1", fetch="all")
        assert list(cur[0].asDict()) == ["id", "txt", "amount", "day", "flag"]  # no _hoodie_* columns

        results = run_dbt(["test"], expect_pass=False)
        status = {r.node.name: str(r.status) for r in results.results}
        assert status.pop("no_id_1") == "fail"
        assert set(status.values()) == {"pass"}, status

        _, out = run_dbt_and_capture(["show", "--select", "eph", "--limit", "2"])
        assert "hello, world" in out
        _, out = run_dbt_and_capture(["show", "--inline", f"select txt from {{{{ ref('tricky') }}}} where id = 2"])
        assert 'it\'s "quoted"' in out

        # docs generate: the catalog lists the model's columns and types (meta columns hidden)
        run_dbt(["docs", "generate"])
        with open(os.path.join(str(project.project_root), "target", "catalog.json")) as f:
            catalog = json.load(f)
        node = catalog["nodes"][f"model.test.downstream"]
        assert [c for c in sorted(node["columns"], key=lambda c: node["columns"][c]["index"])] == [
            "id", "txt", "amount", "day", "flag", "txt2"]
        assert node["columns"]["amount"]["type"] == "decimal(10,3)"
        assert catalog["nodes"]["seed.test.tricky"]["metadata"]["type"] == "table"
