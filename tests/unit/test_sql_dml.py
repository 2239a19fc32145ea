"""hudilite.sql_dml: the statements it recognises, and each run as one commit on a table path."""

import pytest

import hudilite
from hudilite import sql_dml
from hudilite.sql_dml import parse
from hudilite.table import HoodieTable


def test_parse_recognises_each_statement():
    d = parse("/* dbt */ -- note\nUPDATE `s`.t AS x SET a = 1, x.b = f(2, 3) WHERE c = 'a,b';")
    assert (d.kind, d.schema, d.identifier, d.alias, d.where) == ("update", "s", "t", "x", "c = 'a,b'")
    assert d.assignments == [("a", "1"), ("b", "f(2, 3)")]
    d = parse("delete from t")
    assert (d.kind, d.schema, d.identifier, d.where) == ("delete", None, "t", None)
    d = parse("insert overwrite table s.t (a, `b c`) select 1, 2")
    assert (d.kind, d.columns, d.query) == ("overwrite", ["a", "b c"], "select 1, 2")
    assert parse("insert into s.t values (1)").kind == "insert"
    assert parse("truncate table s.t").kind == "truncate"
    d = parse("create or replace table if not exists s.t using hudi partitioned by (p) as select 1")
    assert (d.kind, d.replace, d.if_not_exists, d.partition_by) == ("ctas", True, True, ["p"])
    d = parse("alter table s.t add columns (n int comment 'x, y', m decimal(10, 2) default null)")
    assert (d.kind, d.new_columns) == ("add_columns", [("n", "int"), ("m", "decimal(10, 2)")])
    assert d.refused is None
    # a default, NOT NULL or a position: refused on a hudilite table (run_dml leaves other tables to Spark)
    d = parse("alter table s.t add column c string default 'v'")
    assert (d.kind, d.refused) == ("add_columns", "c string default 'v'")
    assert parse("alter table s.t add columns (a int, n int not null)").refused == "n int not null"


@pytest.mark.parametrize("sql", [
    "select 1",
    "create table s.t using parquet as select 1",  # another format: Spark's own CTAS
    "update s.t set a",
])
def test_parse_leaves_other_statements_to_spark(sql):
    assert parse(sql) is None


def test_split_top_level_ignores_nested_and_quoted_separators():
    assert sql_dml.split_top_level("a, f(b, c), 'd,e', `f,g`") == ["a", "f(b, c)", "'d,e'", "`f,g`"]


def test_execute_runs_each_statement_as_one_commit(spark, tmp_path):
    path = str(tmp_path / "t")
    df = spark.createDataFrame([(1, "a", 10), (2, "b", 20), (3, "c", 30)], "id int, s string, v int")
    hudilite.write(df, path, record_key=["id"], operation="insert")

    def run(sql, **kw):
        return sql_dml.execute(spark, parse(sql), path, "s.t", **kw)

    def rows():
        return sorted(tuple(r) for r in hudilite.read(spark, path).select(
            *[c for c in hudilite.read(spark, path).columns if not c.startswith("_hoodie_")]).collect())

    commits = lambda: len(HoodieTable.open(path).timeline.completed())  # noqa: E731
    n = commits()
    assert run("update s.t set v = v + 1 where id >= 2").operation == "upsert"
    assert rows() == [(1, "a", 10), (2, "b", 21), (3, "c", 31)] and commits() == n + 1
    assert run("delete from s.t where s = 'a'").operation == "delete"
    assert rows() == [(2, "b", 21), (3, "c", 31)]
    run("insert into s.t (id, v, s) select 4, 40, 'd'")
    assert rows() == [(2, "b", 21), (3, "c", 31), (4, "d", 40)]
    assert run("alter table s.t add columns (n bigint)").added_columns == ["n"]
    assert rows() == [(2, "b", 21, None), (3, "c", 31, None), (4, "d", 40, None)]
    run("truncate table s.t")
    assert rows() == [] and commits() == n + 5


def test_execute_refuses_statements_that_do_not_fit_before_writing(spark, tmp_path):
    path = str(tmp_path / "t")
    hudilite.write(spark.createDataFrame([(1, "a")], "id int, s string"), path, record_key=["id"],
                   operation="insert")
    before = HoodieTable.open(path).timeline.completed()
    for sql, text in [("update s.t set id = 2", "record key"), ("update s.t set zz = 1", "no column"),
                      ("update s.t set _hoodie_record_key = 'x'", "no column"),
                      ("insert into s.t select 1", "1 values for 2 columns"),
                      ("insert into s.t (id, zz) select 1, 2", r"no column\(s\) \[.zz.\]"),
                      ("alter table s.t add columns (S int)", "exists")]:
        with pytest.raises(sql_dml.DmlError, match=text):
            sql_dml.execute(spark, parse(sql), path, "s.t")
    assert HoodieTable.open(path).timeline.completed() == before
