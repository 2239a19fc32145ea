"""Rows of a SQL command read from Spark Connect's reply (hudilite/spark/results.py) are the rows and the schema
PySpark's own `collect()` and `schema` give for the same statement, with no further round trip; a query (not a
command) and a command with a time-typed column are left to PySpark."""

import json

import pytest

from tests.functional.connect.conftest import run_client

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")

CLIENT = r"""
import json, sys
from hudilite import server
from hudilite.spark.results import command_result
from pyspark.sql.connect.client.core import SparkConnectClient

spark = server.connect(sys.argv[1])
base = sys.argv[2]
calls = []
for name in ("_execute_and_fetch_as_iterator", "_analyze", "config"):
    orig = getattr(SparkConnectClient, name)
    def counted(*a, _orig=orig, _name=name, **k):
        calls.append(_name)
        return _orig(*a, **k)
    setattr(SparkConnectClient, name, counted)
out = {}
spark.sql(f"CREATE SCHEMA IF NOT EXISTS cr_test LOCATION '{base}/cr_test'")
spark.sql("CREATE TABLE IF NOT EXISTS cr_test.t (id bigint, name string, amount decimal(10,2), ts timestamp) "
          "USING parquet")
for sql in ("show databases", "show table extended in cr_test like '*'", "describe table extended cr_test.t",
            "show tables in cr_test", "show table extended in cr_test like 'nothing_here'",
            "select 1 as one, 'x' as s", "select current_timestamp() as now", "set spark.sql.ansi.enabled"):
    df = spark.sql(sql)
    calls.clear()
    held = command_result(df)
    trips = len(calls)
    if held is None:
        out[sql] = {"held": None, "trips": trips}
        continue
    out[sql] = {
        "trips": trips,
        "held": {"fields": [[n, t.simpleString(), bool(nl)] for n, t, nl in held.fields],
                 "rows": [[repr(v) for v in r] for r in held.rows], "names": [list(r.asDict()) for r in held.rows]},
        "spark": {"fields": [[f.name, f.dataType.simpleString()] for f in df.schema.fields],
                  "rows": [[repr(v) for v in r] for r in df.collect()],
                  "names": [list(r.asDict()) for r in df.collect()]},
    }
print("RESULT " + json.dumps(out))
"""


def test_command_rows_from_the_reply_equal_collect(connect_server, tmp_path):
    p = run_client(["-c", CLIENT, connect_server.url, str(tmp_path)])
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    out = json.loads(next(ln for ln in p.stdout.splitlines() if ln.startswith("RESULT "))[len("RESULT "):])
    held = {sql: r for sql, r in out.items() if r["held"] is not None}
    # dbt's catalog statements are commands whose rows come with the reply
    assert {"show databases", "show table extended in cr_test like '*'", "describe table extended cr_test.t",
            "show tables in cr_test", "show table extended in cr_test like 'nothing_here'"} <= set(held)
    for sql, r in held.items():
        assert r["trips"] == 0, sql  # read from the reply: no round trip
        assert [f[:2] for f in r["held"]["fields"]] == r["spark"]["fields"], sql
        assert r["held"]["rows"] == r["spark"]["rows"], sql
        assert r["held"]["names"] == r["spark"]["names"], sql
    assert any(row[0] == "'cr_test'" for row in held["show databases"]["held"]["rows"])
    assert held["show table extended in cr_test like 'nothing_here'"]["held"]["rows"] == []
    described = [row[0] for row in held["describe table extended cr_test.t"]["held"]["rows"]]
    assert described[:4] == ["'id'", "'name'", "'amount'", "'ts'"]
    # a query is not run by spark.sql: nothing is held, PySpark asks the server as before
    assert out["select 1 as one, 'x' as s"]["held"] is None
    assert out["select current_timestamp() as now"]["held"] is None
