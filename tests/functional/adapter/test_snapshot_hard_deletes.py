"""dbt-tests-adapter snapshot classes of dbt 1.9+ against `type: hudilite`: `hard_deletes='new_record'`
(timestamp and check strategies), `dbt_valid_to_current`, `snapshot_meta_column_names`, on copy-on-write and
merge-on-read snapshot tables.

Overrides, and why: the classes set up their source and expected tables with Postgres SQL through
`project.run_sql` (`create table t (c VARCHAR(50), ...)`, `x::text`, `null::timestamp`, three-part names with a
database, several statements in one string). `spark_sql` rewrites each statement into Spark SQL: a
`create table` with a column list becomes an empty hudilite table (`CREATE TABLE ... USING hudi AS SELECT`,
so the tests' UPDATE / DELETE / INSERT run as hudilite commits); casts and types are spelled the Spark way.
The snapshots' `{{target.database}}.{{target.schema}}.seed` loses the database (Spark has none).
"""

import re

import pytest
from dbt.tests.adapter.simple_snapshot import fixtures as sf
from dbt.tests.adapter.simple_snapshot import new_record_dbt_valid_to_current as vtc
from dbt.tests.adapter.simple_snapshot import new_record_timestamp_mode as nrt
from dbt.tests.adapter.simple_snapshot.new_record_check_mode import BaseSnapshotNewRecordCheckMode
from dbt.tests.adapter.simple_snapshot.new_record_dbt_valid_to_current import BaseSnapshotNewRecordDbtValidToCurrent
from dbt.tests.adapter.simple_snapshot.new_record_timestamp_mode import BaseSnapshotNewRecordTimestampMode
from dbt.tests.adapter.simple_snapshot.test_ephemeral_snapshot_hard_deletes import BaseSnapshotNewColumnWithDeletes
from dbt.tests.adapter.simple_snapshot.test_various_configs import (
    BaseSnapshotColumnNames,
    BaseSnapshotDbtValidToCurrent,
    BaseSnapshotMultiUniqueKey,
)

_TYPES = [(r"\bTIMESTAMP\s+WITHOUT\s+TIME\s+ZONE\b", "timestamp"), (r"\bVARCHAR\(\d+\)", "string"),
          (r"\bTEXT\b", "string"), (r"\bINTEGER\b", "int")]


def spark_sql(sql: str) -> list:
    """The Spark SQL statements of one Postgres-flavoured fixture string."""
    out = []
    # ({database} left in, or formatted with the project's database, which Spark has none of: None)
    for stmt in re.sub(r"\bNone\.(?=\w)", "", sql.replace("{database}.{schema}", "{schema}")).split(";"):
        stmt = "\n".join(line for line in stmt.splitlines() if not line.strip().startswith("--")).strip()
        if not stmt:
            continue
        stmt = stmt.replace("null::timestamp", "cast(null as timestamp)")
        stmt = re.sub(r"(\w+)::text", r"cast(\1 as string)", stmt)
        m = re.match(r"create table (\S+) \((.*)\)$", stmt, re.S | re.I)
        if m:
            body = m.group(2)
            for pat, rep in _TYPES:
                body = re.sub(pat, rep, body, flags=re.I)
            cols = [c.strip().split(None, 1) for c in body.split(",") if c.strip()]
            stmt = (f"create table {m.group(1)} using hudi as select "
                    + ", ".join(f"cast(null as {t}) as {n}" for n, t in cols) + " from (select 1) t where false")
        out.append(stmt)
    return out


def no_database(sql: str) -> str:
    return sql.replace("{{target.database}}.", "")


class SparkSql:
    @pytest.fixture(autouse=True)
    def _spark_sql(self, project, monkeypatch):
        run_sql = project.run_sql

        def translated(sql, fetch=None):
            result = None
            for stmt in spark_sql(sql):
                result = run_sql(stmt, fetch=fetch)
            return result

        monkeypatch.setattr(project, "run_sql", translated)


MOR = {"snapshots": {"+table_type": "mor"}}


class NewRecordTimestamp(SparkSql, BaseSnapshotNewRecordTimestampMode):
    @pytest.fixture(scope="class")
    def snapshots(self):
        return {"snapshot.sql": no_database(nrt._snapshot_actual_sql)}


class TestSnapshotNewRecordTimestampModeHudilite(NewRecordTimestamp):
    pass


class TestSnapshotNewRecordTimestampModeMorHudilite(NewRecordTimestamp):
    @pytest.fixture(scope="class")
    def project_config_update(self):
        return MOR


class TestSnapshotNewRecordCheckModeHudilite(SparkSql, BaseSnapshotNewRecordCheckMode):
    @pytest.fixture(scope="class")
    def snapshots(self):
        return {"snapshot.sql": no_database(nrt._snapshot_actual_sql)}


class NewRecordValidToCurrent(SparkSql, BaseSnapshotNewRecordDbtValidToCurrent):
    @pytest.fixture(scope="class")
    def snapshots(self):
        return {"snapshot.sql": no_database(vtc._snapshot_actual_sql)}


class TestSnapshotNewRecordDbtValidToCurrentHudilite(NewRecordValidToCurrent):
    pass


class TestSnapshotNewRecordDbtValidToCurrentMorHudilite(NewRecordValidToCurrent):
    @pytest.fixture(scope="class")
    def project_config_update(self):
        return MOR


class TestSnapshotColumnNamesHudilite(SparkSql, BaseSnapshotColumnNames):
    @pytest.fixture(scope="class")
    def snapshots(self):
        return {"snapshot.sql": no_database(sf.snapshot_actual_sql)}


class TestSnapshotColumnNamesMorHudilite(TestSnapshotColumnNamesHudilite):
    @pytest.fixture(scope="class")
    def project_config_update(self):
        return MOR


class TestSnapshotDbtValidToCurrentHudilite(SparkSql, BaseSnapshotDbtValidToCurrent):
    @pytest.fixture(scope="class")
    def snapshots(self):
        return {"snapshot.sql": no_database(sf.snapshot_actual_sql)}


class TestSnapshotMultiUniqueKeyHudilite(SparkSql, BaseSnapshotMultiUniqueKey):
    pass


class TestSnapshotNewColumnWithDeletesHudilite(SparkSql, BaseSnapshotNewColumnWithDeletes):
    @pytest.fixture(scope="class")
    def source_alter_sql(self):
        # a hudilite table's new column has no DEFAULT (refused, tests/functional/dbt/test_dml.py): the column,
        # then its value in the stored rows, as the class's DEFAULT gives them
        return ("alter table {database}.{schema}.src_customers add column dummy_column string;"
                "update {database}.{schema}.src_customers set dummy_column = 'dummy_value'")
