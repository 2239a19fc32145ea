"""SQL DML on hudilite tables (hooks, run-operation, dbt's test utilities): UPDATE, DELETE, INSERT INTO /
OVERWRITE and TRUNCATE run as one hudilite commit each, never as stray parquet files."""

import pytest
from dbt.tests.util import run_dbt

from hudilite.table import HoodieTable
from tests.functional.dbt.conftest import table_dir

KEYED = """
{{ config(materialized='table', unique_key='id', post_hook="update {{ this }} set name = upper(name) where id = 1") }}
select 1 as id, 'a' as name, 10 as score union all select 2, 'b', 20 union all select 3, 'c', 30
"""

KEYLESS = """
{{ config(materialized='table') }}
select 1 as id, 'a' as name union all select 2, 'b'
"""


def rows(project, sql):
    return sorted(tuple(r) for r in project.run_sql(sql, fetch="all"))


class TestDml:
    @pytest.fixture(scope="class")
    def models(self):
        return {"keyed.sql": KEYED, "keyless.sql": KEYLESS}

    def test_dml(self, project):
        s = project.test_schema
        run_dbt(["run"])
        # the post-hook's UPDATE ran as a commit
        assert rows(project, f"select id, name, score from {s}.keyed") == [(1, "A", 10), (2, "b", 20), (3, "c", 30)]
        assert [i.action for i in HoodieTable.open(table_dir(project, "keyed")).timeline.completed()] == [
            "commit", "commit"]
        project.run_sql(f"update {s}.keyed set score = score + 1, name = concat(name, '!') where id >= 2")
        project.run_sql(f"delete from {s}.keyed where name = 'c!'")
        project.run_sql(f"insert into {s}.keyed values (4, 'd', 40)")
        project.run_sql(f"insert into {s}.keyed (name, id, score) select 'e', 5, 50")
        assert rows(project, f"select id, name, score from {s}.keyed") == [
            (1, "A", 10), (2, "b!", 21), (4, "d", 40), (5, "e", 50)]
        with pytest.raises(Exception, match="record key"):
            project.run_sql(f"update {s}.keyed set id = 7 where id = 1")

        project.run_sql(f"insert into {s}.keyless select 2, 'b'")  # no key: an append, duplicates kept
        assert rows(project, f"select id, name from {s}.keyless") == [(1, "a"), (2, "b"), (2, "b")]
        project.run_sql(f"update {s}.keyless set name = 'x' where id = 2")
        assert rows(project, f"select id, name from {s}.keyless") == [(1, "a"), (2, "x"), (2, "x")]
        project.run_sql(f"insert overwrite {s}.keyless values (7, 'q')")
        assert rows(project, f"select id, name from {s}.keyless") == [(7, "q")]
        project.run_sql(f"truncate table {s}.keyless")
        assert rows(project, f"select id, name from {s}.keyless") == []
        # every statement was a Hudi commit (never a parquet file written beside the table)
        actions = [i.action for i in HoodieTable.open(table_dir(project, "keyless")).timeline.completed()]
        assert actions == ["commit", "commit", "commit", "replacecommit", "replacecommit"]

    def test_add_columns(self, project):
        """ALTER TABLE ADD COLUMNS evolves the Hudi schema (null in the stored rows) and the column stays through
        later commits; a definition the table cannot take (a DEFAULT, NOT NULL) is refused, the table and its
        entry unchanged (before: Spark took a DEFAULT into the copy-on-write entry alone, and the next commit's
        entry dropped the column)."""
        s = project.test_schema
        run_dbt(["run", "-s", "keyless"])
        project.run_sql(f"alter table {s}.keyless add columns (note string comment 'a note')")
        for bad in ("d string default 'v'", "n int not null"):
            with pytest.raises(Exception, match=r"a hudilite table's new column is nullable, comes last and has no "
                                                r"default"):
                project.run_sql(f"alter table {s}.keyless add column {bad}")
        project.run_sql(f"update {s}.keyless set note = 'x' where id = 2")
        assert rows(project, f"select * from {s}.keyless") == [(1, "a", None), (2, "b", "x")]
        cols = [r[0] for r in project.run_sql(f"describe {s}.keyless", fetch="all")]
        assert cols[:3] == ["id", "name", "note"] and "d" not in cols and "n" not in cols
