"""dbt-tests-adapter `constraints` classes against `type: hudilite`, plus enforcement on both table types.

An enforced contract checks the model's column names and types before anything is written (dbt's
get_assert_columns_equivalent); `not_null` constraints are checked on the model's rows before the commit, so a
violating batch fails naming the column and the table (its files and timeline) stays as it was. check /
primary_key / foreign_key / unique constraints are recorded as `hudilite.constraints.<name>` table properties.

Not run here: the `RuntimeDdlEnforcement` / `ConstraintQuotedColumn` / `ModelConstraintsRuntimeEnforcement` classes
compare the generated CREATE TABLE DDL with a warehouse's; hudilite writes through the core and emits no DDL
(dbt-spark skips them for its session profile too). The `ContractSqlHeader` classes set a Postgres session
setting (`set session time zone`, `current_setting`), which Spark SQL has not. `ViewConstraintsColumnsEqual`: views
are dbt-spark's materialization, unchanged.
"""

import os

import pytest
from dbt.tests.adapter.constraints import fixtures as cf
from dbt.tests.adapter.constraints.test_constraints import (
    BaseConstraintsRollback,
    BaseIncrementalConstraintsColumnsEqual,
    BaseIncrementalConstraintsRollback,
    BaseIncrementalForeignKeyConstraint,
    BaseTableConstraintsColumnsEqual,
)
from dbt.tests.util import run_dbt, run_dbt_and_capture, write_file

from hudilite.table import HoodieTable
from tests.functional.dbt.conftest import table_dir

# Spark has no type named `text`
constraints_yml = cf.model_schema_yml.replace("text", "string")


class HudiliteTypes:
    # the type names Spark's schema gives (simpleString), as dbt's mismatch table shows them
    @pytest.fixture
    def string_type(self):
        return "string"

    @pytest.fixture
    def int_type(self):
        return "int"

    @pytest.fixture
    def data_types(self, int_type, string_type):
        # Spark types instead of Postgres'; three (each costs two dbt runs) that cover the mismatch messages
        return [
            ["1", "int", int_type],
            ["'1'", "string", string_type],
            ["cast('2019-01-01' as date)", "date", "date"],
        ]


class TestTableConstraintsColumnsEqualHudilite(HudiliteTypes, BaseTableConstraintsColumnsEqual):
    @pytest.fixture(scope="class")
    def models(self):
        return {"my_model_wrong_order.sql": cf.my_model_wrong_order_sql,
                "my_model_wrong_name.sql": cf.my_model_wrong_name_sql,
                "constraints_schema.yml": constraints_yml}


class TestIncrementalConstraintsColumnsEqualHudilite(HudiliteTypes, BaseIncrementalConstraintsColumnsEqual):
    @pytest.fixture(scope="class")
    def models(self):
        return {"my_model_wrong_order.sql": cf.my_model_incremental_wrong_order_sql,
                "my_model_wrong_name.sql": cf.my_model_incremental_wrong_name_sql,
                "constraints_schema.yml": constraints_yml}


class HudiliteRollback:
    # hudilite's own message (the check runs before the commit) instead of Postgres'
    @pytest.fixture(scope="class")
    def expected_error_messages(self):
        return ["NOT NULL constraint violated", "column 'id' is null in 1 row(s)", "the table is unchanged"]


class TestTableConstraintsRollbackHudilite(HudiliteRollback, BaseConstraintsRollback):
    @pytest.fixture(scope="class")
    def models(self):
        return {"my_model.sql": cf.my_model_sql, "constraints_schema.yml": constraints_yml}


class TestIncrementalConstraintsRollbackHudilite(HudiliteRollback, BaseIncrementalConstraintsRollback):
    @pytest.fixture(scope="class")
    def models(self):
        return {"my_model.sql": cf.my_incremental_model_sql, "constraints_schema.yml": constraints_yml}


class TestIncrementalForeignKeyConstraintHudilite(BaseIncrementalForeignKeyConstraint):
    pass


# ---- not_null on write, on both table types; recorded constraints ----------------------------------------------
EVENTS = """
{{{{ config(materialized='{materialized}', table_type='{table_type}', unique_key='id',
            delete_condition="op = 'd'", on_schema_change='fail') }}}}
select * from values
{{% if var('bad', 0) %}} (3, cast(null as string), 'u'), (4, 'dora', 'u')
{{% else %}} (1, 'ann', 'u'), (2, cast(null as string), 'd') {{% endif %}}
as t(id, name, op)
"""

SCHEMA_YML = """
version: 2
models:
""" + "".join(f"""
  - name: {name}
    config:
      contract: {{enforced: true}}
    constraints:
      - type: check
        name: id_positive
        expression: id > 0
    columns:
      - name: id
        data_type: int
        constraints: [{{type: not_null}}, {{type: primary_key}}]
      - name: name
        data_type: string
        constraints: [{{type: not_null}}]
      - name: op
        data_type: string
""" for name in ("cow_table", "mor_table", "cow_incremental", "mor_incremental"))


def files(path):
    """Every file of the table directory (data, timeline), with its size."""
    out = {}
    for root, _dirs, names in os.walk(path):
        for n in names:
            p = os.path.join(root, n)
            out[os.path.relpath(p, path)] = os.path.getsize(p)
    return out


class TestNotNullOnWriteHudilite:
    @pytest.fixture(scope="class")
    def models(self):
        out = {"schema.yml": SCHEMA_YML}
        for tt in ("cow", "mor"):
            for m in ("table", "incremental"):
                out[f"{tt}_{m}.sql"] = EVENTS.format(materialized=m, table_type=tt)
        return out

    def test_not_null_enforced_and_constraints_recorded(self, project):
        s = project.test_schema
        # the delete event's null name is not stored, so it is not a violation
        _, out = run_dbt_and_capture(["run"])
        # dbt's warning for each recorded constraint (a check and a primary key per model), none for not_null
        assert out.count("The constraint type check is not enforced by hudilite") == 4, out
        assert out.count("The constraint type primary_key is not enforced by hudilite") == 4, out
        assert "type not_null is not enforced" not in out
        names = ["cow_table", "mor_table", "cow_incremental", "mor_incremental"]
        before = {}
        env = project.adapter.connections.env
        for n in names:
            assert project.run_sql(f"select id, name from {s}.{n}", fetch="all") == [(1, "ann")]
            path = table_dir(project, n)
            before[n] = (files(path), [i.timestamp for i in HoodieTable.open(path).timeline.completed()])
            props = env.describe(s, n).props
            assert props["hudilite.constraints.id_positive"] == "check (id > 0)"
            assert props["hudilite.constraints.primary_key_id"] == "primary key (id)"

        res, out = run_dbt_and_capture(["run", "--vars", "{bad: 1}"], expect_pass=False)
        assert all(r.status == "error" for r in res.results)
        for r in res.results:
            assert "NOT NULL constraint violated" in r.message and "column 'name' is null in 1 row(s)" in r.message
        for n in names:
            path = table_dir(project, n)
            assert (files(path), [i.timestamp for i in HoodieTable.open(path).timeline.completed()]) == before[n]
            assert project.run_sql(f"select id, name from {s}.{n}", fetch="all") == [(1, "ann")]
        write_file(EVENTS.format(materialized="incremental", table_type="mor").replace(
            "cast(null as string), 'u'", "'cora', 'u'"), "models", "mor_incremental.sql")
        run_dbt(["run", "--vars", "{bad: 1}", "-s", "mor_incremental"])
        assert sorted(project.run_sql(f"select id, name from {s}.mor_incremental", fetch="all")) == [
            (1, "ann"), (3, "cora"), (4, "dora")]
