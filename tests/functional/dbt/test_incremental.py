"""`incremental` models: upsert CDC (duplicates, late rows, deletes), append, insert_overwrite, delete+insert,
partial updates, incremental_predicates and on_schema_change — each batch is one commit."""

import csv
import io

import pyarrow as pa
import pytest
from dbt.tests.util import run_dbt, run_dbt_and_capture

import hudilite
from hudilite.table import HoodieTable
from tests.functional.dbt.conftest import table_dir

CHANGES_CSV = '''id,version,name,op,batch
1,1,alice,i,1
2,1,bob,i,1
3,1,carol,i,1
3,2,"carol, the 2nd",u,1
4,1,dave,i,1
1,3,"alice ""a""",u,2
2,5,bob,d,2
3,1,carol-late,u,2
5,1,eve,i,2
5,2,eve2,u,2
6,1,frank,d,2
2,6,bob-back,i,3
4,0,dave-late-delete,d,3
1,3,alice-tie,u,3
'''

CDC = """
{{ config(materialized='incremental', unique_key='id', precombine_field='version', delete_condition="op = 'd'") }}
select id, version, name, op from {{ ref('changes') }} where batch = {{ var('batch', 1) }}
"""

# dbt-spark's Hudi spelling of the same model: options.primaryKey / options.preCombineField
CDC_ALIASES = """
{{ config(materialized='incremental', incremental_strategy='merge',
          options={'primaryKey': 'id', 'preCombineField': 'version'}, delete_condition="op = 'd'") }}
select id, version, name, op from {{ ref('changes') }} where batch = {{ var('batch', 1) }}
"""

APPENDED = """
{{ config(materialized='incremental', incremental_strategy='append') }}
{% if var('batch', 1) == 1 %} select 1 as id, 'a' as name union all select 2, 'b'
{% else %} select 2 as id, 'b' as name union all select 3, 'c' {% endif %}
"""

OVERWRITTEN = """
{{ config(materialized='incremental', incremental_strategy='insert_overwrite', partition_by='dt') }}
{% if var('batch', 1) == 1 %}
select 1 as id, 'a' as name, '2024-01-01' as dt union all select 2, 'b', '2024-01-01'
union all select 3, 'c', '2024-01-02'
{% else %} select 4 as id, 'd' as name, '2024-01-02' as dt {% endif %}
"""

BATCH_DATA = """
{% if var('batch', 1) == 1 %}
select 1 as id, 'hello' as msg, 'blue' as color union all select 2, 'goodbye', 'red'
{% else %}
select 1 as id, 'hey' as msg, 'blue' as color union all select 2, 'yo', 'green'
union all select 3, 'anyway', 'purple'
{% endif %}
"""
EXCLUDE = "{{ config(materialized='incremental', unique_key='id', merge_exclude_columns=['msg']) }}" + BATCH_DATA
UPDATE_COLS = "{{ config(materialized='incremental', unique_key='id', merge_update_columns=['color']) }}" + BATCH_DATA
DELETE_INSERT = "{{ config(materialized='incremental', unique_key='id', incremental_strategy='delete+insert') }}" \
    + BATCH_DATA
PREDICATES = ("{{ config(materialized='incremental', unique_key='id', "
              "incremental_predicates=['DBT_INTERNAL_DEST.id != 2']) }}") + BATCH_DATA

APPEND_COLS = """
{{ config(materialized='incremental', unique_key='id', on_schema_change='append_new_columns') }}
{% if var('batch', 1) == 1 %} select 1 as id, 'a' as name union all select 2, 'b'
{% else %} select 2 as id, 'b2' as name, 20 as extra union all select 3, 'c', 30 {% endif %}
"""

SYNC_COLS = """
{{ config(materialized='incremental', unique_key='id', on_schema_change='sync_all_columns') }}
{% if var('batch', 1) == 1 %} select 1 as id, 'a' as name union all select 2, 'b'
{% else %} select 2 as id, 20 as extra union all select 3, 30 {% endif %}
"""

IGNORE_COLS = """
{{ config(materialized='incremental', unique_key='id') }}
{% if var('batch', 1) == 1 %} select 1 as id, 'a' as name union all select 2, 'b'
{% else %} select 2 as id, 'b2' as name, 20 as extra union all select 3, 'c', 30 {% endif %}
"""

FAIL_COLS = """
{{ config(materialized='incremental', unique_key='id', on_schema_change='fail') }}
{% if var('batch', 1) == 1 %} select 1 as id, 'a' as name
{% else %} select 2 as id, 'b' as name, 20 as extra {% endif %}
"""


def reference(batches):
    """Upsert semantics: per batch the highest version per key wins; it replaces the stored row when its
    version is >= the stored one; an 'd' winner deletes."""
    state = {}
    for batch in batches:
        winners = {}
        for r in batch:
            if r["id"] not in winners or r["version"] >= winners[r["id"]]["version"]:
                winners[r["id"]] = r
        for k, r in winners.items():
            if k in state and r["version"] < state[k]["version"]:
                continue
            if r["op"] == "d":
                state.pop(k, None)
            else:
                state[k] = r
    return sorted((k, r["version"], r["name"]) for k, r in state.items())


def changes(batch):
    return [{"id": int(r["id"]), "version": int(r["version"]), "name": r["name"], "op": r["op"]}
            for r in csv.DictReader(io.StringIO(CHANGES_CSV)) if int(r["batch"]) == batch]


def rows(project, sql):
    return sorted(tuple(r) for r in project.run_sql(sql, fetch="all"))


class TestIncrementalStrategies:
    @pytest.fixture(scope="class")
    def seeds(self):
        return {"changes.csv": CHANGES_CSV}

    @pytest.fixture(scope="class")
    def models(self):
        return {
            "cdc.sql": CDC, "cdc_aliases.sql": CDC_ALIASES, "appended.sql": APPENDED,
            "overwritten.sql": OVERWRITTEN, "exclude_cols.sql": EXCLUDE, "update_cols.sql": UPDATE_COLS,
            "delete_insert.sql": DELETE_INSERT, "predicates.sql": PREDICATES, "append_cols.sql": APPEND_COLS,
            "sync_cols.sql": SYNC_COLS, "ignore_cols.sql": IGNORE_COLS,
        }

    def test_batches(self, project, spark):
        s = project.test_schema
        run_dbt(["seed"])
        run_dbt(["run"])
        for m in ("cdc", "cdc_aliases"):
            assert rows(project, f"select id, version, name from {s}.{m}") == reference([changes(1)])
        # the process's own session (dbt runs in a session made from it) reads the model as well ...
        caller_reads = f"select id, version, name from {s}.cdc"
        assert sorted(tuple(r) for r in spark.sql(caller_reads).collect()) == reference([changes(1)])

        res = run_dbt(["run", "--vars", "{batch: 2}"])
        by = {r.node.name: r.adapter_response for r in res.results}
        assert by["cdc"]["operation"] == "upsert"
        assert (by["cdc"]["rows_inserted"], by["cdc"]["rows_updated"], by["cdc"]["rows_deleted"]) == (1, 1, 1)
        assert by["cdc"]["rows_affected"] == 3
        assert by["cdc"]["_message"] == "UPSERT 1 inserted, 1 updated, 1 deleted"
        for m in ("cdc", "cdc_aliases"):
            assert rows(project, f"select id, version, name from {s}.{m}") == reference([changes(1), changes(2)])
        # ... and the run's commit at once, not the snapshot it resolved before the run
        assert sorted(tuple(r) for r in spark.sql(caller_reads).collect()) == reference([changes(1), changes(2)])
        # each run of an incremental model is exactly one commit
        assert len(HoodieTable.open(table_dir(project, "cdc")).timeline.completed()) == 2

        assert by["appended"]["operation"] == "insert"
        assert rows(project, f"select id, name from {s}.appended") == [(1, "a"), (2, "b"), (2, "b"), (3, "c")]
        assert by["overwritten"]["operation"] == "insert_overwrite"
        assert rows(project, f"select id, name, dt from {s}.overwritten") == [
            (1, "a", "2024-01-01"), (2, "b", "2024-01-01"), (4, "d", "2024-01-02")]
        merged = [(1, "hello", "blue"), (2, "goodbye", "green"), (3, "anyway", "purple")]
        assert rows(project, f"select id, msg, color from {s}.exclude_cols") == merged
        assert rows(project, f"select id, msg, color from {s}.update_cols") == merged
        assert rows(project, f"select id, msg, color from {s}.delete_insert") == [
            (1, "hey", "blue"), (2, "yo", "green"), (3, "anyway", "purple")]
        # the stored row id=2 fails the predicate: it is protected, the batch's id=2 is not applied
        assert rows(project, f"select id, msg, color from {s}.predicates") == [
            (1, "hey", "blue"), (2, "goodbye", "red"), (3, "anyway", "purple")]
        assert rows(project, f"select id, name, extra from {s}.append_cols") == [
            (1, "a", None), (2, "b2", 20), (3, "c", 30)]
        assert rows(project, f"select * from {s}.sync_cols") == [
            (1, None), (2, 20), (3, 30)]
        assert rows(project, f"select * from {s}.ignore_cols") == [
            (1, "a"), (2, "b2"), (3, "c")]

        run_dbt(["run", "--vars", "{batch: 3}", "-s", "cdc", "cdc_aliases"])
        want = reference([changes(1), changes(2), changes(3)])
        for m in ("cdc", "cdc_aliases"):
            assert rows(project, f"select id, version, name from {s}.{m}") == want
        # the model's table is an ordinary Hudi table: hudi-rs reads the same rows
        from hudi import HudiTableBuilder

        batches = HudiTableBuilder.from_base_uri(table_dir(project, "cdc")).build().read()
        got = pa.Table.from_batches(batches).select(["id", "version", "name"]).to_pylist() if batches else []
        assert sorted((r["id"], r["version"], r["name"]) for r in got) == want

        # --full-refresh rebuilds from the model's current rows as one insert_overwrite_table commit
        res = run_dbt(["run", "--vars", "{batch: 2}", "-s", "cdc", "--full-refresh"])
        assert res.results[0].adapter_response["operation"] == "insert_overwrite_table"
        assert rows(project, f"select id, version, name from {s}.cdc") == reference([changes(2)])


class TestOnSchemaChangeFail:
    @pytest.fixture(scope="class")
    def models(self):
        return {"fail_cols.sql": FAIL_COLS}

    def test_fail(self, project):
        run_dbt(["run"])
        _, out = run_dbt_and_capture(["run", "--vars", "{batch: 2}"], expect_pass=False)
        assert "out of sync" in out
        assert rows(project, f"select id, name from {project.test_schema}.fail_cols") == [(1, "a")]


READD_COLS = """
{{ config(materialized='incremental', unique_key='id', on_schema_change='sync_all_columns') }}
{% set b = var('batch', 1) %}
select {{ b }} as id
{% if b == 1 %}, 'a1' as a{% elif b == 3 %}, 'a3' as a{% elif b == 4 %}, date '2024-01-01' as a{% endif %}
"""


class TestSyncAllColumnsReAdd:
    @pytest.fixture(scope="class")
    def models(self):
        return {"readd_cols.sql": READD_COLS}

    def test_a_removed_column_is_not_re_added_with_its_old_values(self, project):
        s = project.test_schema
        run_dbt(["run"])
        run_dbt(["run", "--vars", "{batch: 2}"])  # removes `a` from the table the model's readers see
        assert rows(project, f"select * from {s}.readd_cols") == [(1,), (2,)]
        for batch in (3, 4):  # the same type or another: the stored values of `a` would come back
            _, out = run_dbt_and_capture(["run", "--vars", f"{{batch: {batch}}}"], expect_pass=False)
            assert "were removed from the model earlier" in out and "--full-refresh" in out, out[-2000:]
            assert rows(project, f"select * from {s}.readd_cols") == [(1,), (2,)]
        run_dbt(["run", "--vars", "{batch: 3}", "--full-refresh"])
        assert rows(project, f"select id, a from {s}.readd_cols") == [(3, "a3")]


CASED_KEYS = """
{{ config(materialized='incremental', unique_key='Customer_ID', precombine_field='Version',
          partition_by='REGION', table_type=var('tt')) }}
{% set b = var('batch', 1) %}
select * from values
{% if b == 1 %} (1, 1, 'eu', 'a'), (1, 2, 'eu', 'a2'), (2, 1, 'us', 'b')
{% else %} (1, 3, 'eu', 'a3'), (2, 0, 'us', 'b-late'), (3, 1, 'us', 'c') {% endif %}
{% if b == 1 %} as t(customer_id, version, region, name) {% else %} as t(Customer_Id, VERSION, Region, NAME) {% endif %}
"""


class TestKeyNamesSpelledOtherwise:
    """unique_key, precombine_field and partition_by name SQL columns, case-insensitively; and a later run's
    columns spelled otherwise are the table's columns (before: the write refused `NAME` as differing only in
    letter case from the stored `name`)."""

    @pytest.fixture(scope="class")
    def models(self):
        return {"cased_cow.sql": CASED_KEYS, "cased_mor.sql": CASED_KEYS}

    def test_keys_in_another_case_than_the_columns(self, project):
        s = project.test_schema
        for batch in (1, 2):
            for tt in ("cow", "mor"):
                run_dbt(["run", "-s", f"cased_{tt}", "--vars", f"{{batch: {batch}, tt: {tt}}}"])
        for tt in ("cow", "mor"):
            got = rows(project, f"select customer_id, version, region, name from {s}.cased_{tt} order by 1")
            assert got == [(1, 3, "eu", "a3"), (2, 1, "us", "b"), (3, 1, "us", "c")], (tt, got)
            cfg = HoodieTable.open(table_dir(project, f"cased_{tt}")).config
            assert (cfg.record_key_fields, cfg.partition_fields, cfg.precombine_field) == \
                (["customer_id"], ["region"], "version")
            stored = [f for f in hudilite.Table.open(table_dir(project, f"cased_{tt}")).schema().names
                      if not f.startswith("_")]
            assert stored == ["customer_id", "version", "region", "name"], stored
            described = [r[0] for r in project.run_sql(f"describe {s}.cased_{tt}", fetch="all")][:4]
            assert described == ["customer_id", "version", "region", "name"], described


PARTIAL_NEW_COLUMN = """
{{ config(materialized='incremental', unique_key='id', on_schema_change='append_new_columns',
          table_type=var('tt'), **{var('partial'): var('cols')}) }}
{% if var('batch', 1) == 1 %}
select * from values (1, 'a', 'x'), (2, 'b', 'y') as t(id, name, color)
{% else %}
select * from values (1, 'a2', 'x2', 10, 100), (3, 'c', 'z', 30, 300) as t(id, name, color, tier, score)
{% endif %}
"""


class TestPartialUpdateOfANewColumn:
    """merge_update_columns / merge_exclude_columns with a column the run adds: dbt adds it (null in the stored
    rows), then updates only the chosen columns, so a stored row keeps null in a new column it does not update;
    new rows are inserted whole. (Before, stored rows took the batch's values of every new column.)"""

    @pytest.fixture(scope="class")
    def models(self):
        return {f"partial_{kind}_{tt}.sql": PARTIAL_NEW_COLUMN for kind in ("upd", "exc") for tt in ("cow", "mor")}

    def test_stored_rows_keep_null_in_a_new_column_they_do_not_update(self, project):
        s = project.test_schema
        configs = {"upd": "{partial: merge_update_columns, cols: [name, tier]}",
                   "exc": "{partial: merge_exclude_columns, cols: [color, score]}"}
        for batch in (1, 2):
            for kind, cfg in configs.items():
                for tt in ("cow", "mor"):
                    run_dbt(["run", "-s", f"partial_{kind}_{tt}",
                             "--vars", cfg[:-1] + f", batch: {batch}, tt: {tt}}}"])
        for tt in ("cow", "mor"):
            # id 1 stored: name and tier updated, color kept, score (new, not updated) null; id 3 new: whole
            expected = [(1, "a2", "x", 10, None), (2, "b", "y", None, None), (3, "c", "z", 30, 300)]
            for kind in configs:
                got = rows(project, f"select id, name, color, tier, score from {s}.partial_{kind}_{tt}")
                assert got == expected, (kind, tt, got)


RESPELLED = """
{{ config(materialized='incremental', unique_key='id', table_type=var('tt')) }}
select {{ var('batch') }} as id, 7 as {{ var('col') }}
"""


class TestColumnRespelled:
    """A rebuild whose model spells a column otherwise stores the new spelling, and the catalog entry shows it
    (before: the entry kept the old one, and the next incremental run took that spelling for the table's and
    failed); incremental runs then write the column in any spelling."""

    @pytest.fixture(scope="class")
    def models(self):
        return {f"respelled_{tt}.sql": RESPELLED for tt in ("cow", "mor")}

    def test_the_entry_follows_a_rebuild_and_increments_take_its_spelling(self, project):
        s = project.test_schema
        for tt in ("cow", "mor"):
            name = f"respelled_{tt}"
            for args, col, batch in ((["--full-refresh"], "Amount", 1), (["--full-refresh"], "amount", 1),
                                     ([], "AMOUNT", 2)):
                run_dbt(["run", "-s", name, *args, "--vars", f"{{tt: {tt}, batch: {batch}, col: {col}}}"])
            described = [r[0] for r in project.run_sql(f"describe {s}.{name}", fetch="all")][:2]
            assert described == ["id", "amount"], (tt, described)
            stored = [f for f in hudilite.Table.open(table_dir(project, name)).schema().names
                      if not f.startswith("_")]
            assert stored == ["id", "amount"], (tt, stored)
            assert rows(project, f"select id, amount from {s}.{name}") == [(1, 7), (2, 7)], tt


WIDENED = """
{{ config(materialized='incremental', unique_key='id', partition_by=['region'], table_type=var('tt'),
          on_schema_change='sync_all_columns') }}
{% if var('batch') == 1 %}
select 1 as id, 'a' as region, cast(9007199254740993 as bigint) as amount, named_struct('n', 7L) as detail
union all select 2, 'b', cast(20 as bigint), named_struct('n', 8L)
{% else %}
select 1 as id, 'a' as region, 1.5d as amount, named_struct('n', 2.5d) as detail
{% endif %}
"""


class TestColumnWidenedToDouble:
    """A bigint column widened to double while another partition's files keep the bigint: `ref()` and plain SQL
    read the catalog entry with every row, the untouched one as Java converts 2**53 + 1 (before: the copy-on-write
    entry, a parquet table over the linked base files, failed in Spark's scan, which reads no long as double)."""

    @pytest.fixture(scope="class")
    def models(self):
        return {f"widened_{tt}.sql": WIDENED for tt in ("cow", "mor")}

    def test_the_entry_reads_the_files_written_before_the_widening(self, project):
        s = project.test_schema
        for tt in ("cow", "mor"):
            name = f"widened_{tt}"
            for batch in (1, 2):
                run_dbt(["run", "-s", name, "--vars", f"{{tt: {tt}, batch: {batch}}}"])
            got = rows(project, f"select id, amount, detail.n from {s}.{name}")
            assert got == [(1, 1.5, 2.5), (2, 20.0, 8.0)], (tt, got)
            types = {r[0]: r[1] for r in project.run_sql(f"describe {s}.{name}", fetch="all")}
            assert (types["amount"], types["detail"]) == ("double", "struct<n:double>"), (tt, types)
            # a copy-on-write table whose files all hold the double again is a parquet entry once more
            run_dbt(["run", "-s", name, "--vars", f"{{tt: {tt}, batch: 1}}"])
            assert rows(project, f"select id, amount, detail.n from {s}.{name}") == [
                (1, float(2**53), 7.0), (2, 20.0, 8.0)], tt


RELAID = """
{{ config(materialized='incremental', **var('cfg')) }}
select {{ var('batch') }} as id, 'r{{ var('batch') }}' as region
"""


class TestLayoutChangeNeedsFullRefresh:
    """A stored table's key, partitioning and type are set when it is built: an incremental run whose config
    changes one of them fails naming it and asking for --full-refresh, the table unchanged (before: a changed
    table_type failed with the core's advice to omit table_type), and --full-refresh rebuilds it so."""

    @pytest.fixture(scope="class")
    def models(self):
        return {"relaid.sql": RELAID}

    def test_changes_refused_then_rebuilt(self, project):
        s = project.test_schema
        run_dbt(["run", "--vars", "{cfg: {unique_key: id}, batch: 1}"])
        for cfg, what in (("{unique_key: [id, region]}", "unique_key"),
                          ("{unique_key: id, partition_by: [region]}", "partition_by"),
                          ("{unique_key: id, table_type: mor}", "table_type")):
            _, out = run_dbt_and_capture(["run", "--vars", f"{{cfg: {cfg}, batch: 2}}"], expect_pass=False)
            assert f"{what} of {s}.relaid changed" in out and "--full-refresh" in out, (what, out[-2000:])
            assert rows(project, f"select id, region from {s}.relaid") == [(1, "r1")], what
        run_dbt(["run", "--full-refresh", "--vars", "{cfg: {unique_key: id, table_type: mor}, batch: 2}"])
        assert hudilite.Table.open(table_dir(project, "relaid")).layout().table_type == "MERGE_ON_READ"
        run_dbt(["run", "--vars", "{cfg: {unique_key: id, table_type: mor}, batch: 3}"])
        assert rows(project, f"select id, region from {s}.relaid") == [(2, "r2"), (3, "r3")]


BAD_DELETE = """
{{ config(materialized='incremental', unique_key='id', delete_condition=var('cond')) }}
select {{ var('batch') }} as id, 'a' as op
"""


class TestBadDeleteCondition:
    """A delete_condition that does not resolve on the model's columns fails naming the config and the model,
    on the first build and on an incremental run, the table unchanged (before: Spark's bare analysis error)."""

    @pytest.fixture(scope="class")
    def models(self):
        return {"bad_delete.sql": BAD_DELETE}

    def test_named(self, project):
        s = project.test_schema
        _, out = run_dbt_and_capture(["run", "--vars", "{cond: nope = 1, batch: 1}"], expect_pass=False)
        assert f"delete_condition 'nope = 1' of {s}.bad_delete" in out and "UNRESOLVED_COLUMN" in out
        run_dbt(["run", "--vars", "{cond: op = 'd', batch: 1}"])
        _, out = run_dbt_and_capture(["run", "--vars", "{cond: 'op = = 1', batch: 2}"], expect_pass=False)
        assert f"delete_condition 'op = = 1' of {s}.bad_delete" in out
        assert rows(project, f"select id, op from {s}.bad_delete") == [(1, "a")]
