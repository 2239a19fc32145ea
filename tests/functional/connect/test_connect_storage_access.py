"""Under Spark Connect the driver-side work of a read or write runs in the client: a client that cannot reach
the table storage the server reaches (here: the table under a directory the client process may not enter)
fails before any Spark job with StorageAccessError naming the client process and the path, and the table is
unchanged. As root, permissions bind only a process without CAP_DAC_OVERRIDE / CAP_DAC_READ_SEARCH: the client
then runs through `setpriv` with those capabilities dropped."""

import json
import os
import shutil

import pytest

import hudilite
from tests.functional.connect.conftest import run_client

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")

CLIENT = """
import json, sys
from pyspark.sql import SparkSession
import hudilite

spark = SparkSession.builder.remote(sys.argv[1]).getOrCreate()
table, new_table = sys.argv[2], sys.argv[3]
df = spark.createDataFrame([(1, 9, "changed")], "id long, ts long, name string")
ops = {"write": lambda: hudilite.write(df, table, record_key="id", precombine_field="ts"),
       "read": lambda: hudilite.read(spark, table).collect(),
       "changes": lambda: hudilite.changes(spark, table).collect(),
       "create": lambda: hudilite.write(df, new_table, record_key="id", precombine_field="ts")}
out = {}
for name, op in ops.items():
    try:
        op()
        out[name] = "no error"
    except hudilite.StorageAccessError as e:
        out[name] = str(e)
print("RESULT " + json.dumps(out))
"""

DROP_DAC = ["setpriv", "--inh-caps=-dac_override,-dac_read_search",
            "--bounding-set=-dac_override,-dac_read_search"]


def _timeline(path):
    return sorted(os.listdir(os.path.join(path, ".hoodie")))


def test_client_without_storage_access_fails_clearly(spark, connect_server, tmp_path):
    prefix = []
    if os.geteuid() == 0:
        if not shutil.which("setpriv"):
            pytest.skip("root without setpriv: permissions cannot deny the client access")
        prefix = DROP_DAC
    locked = tmp_path / "locked"
    table, new_table = str(locked / "t"), str(locked / "new")
    hudilite.write(spark.createDataFrame([(1, 1, "a"), (2, 1, "b")], "id long, ts long, name string"), table,
                   record_key="id", precombine_field="ts")
    before = (_timeline(table), sorted(tuple(r) for r in hudilite.read(spark, table).select("id", "name").collect()))
    os.chmod(locked, 0)  # as root the server keeps its access; either way the client fails before any job
    try:
        out = run_client(["-c", CLIENT, connect_server.url, table, new_table], prefix=prefix)
    finally:
        os.chmod(locked, 0o755)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    result = json.loads(next(ln for ln in out.stdout.splitlines() if ln.startswith("RESULT "))[len("RESULT "):])
    assert set(result) == {"write", "read", "changes", "create"}
    for op, msg in result.items():
        path = new_table if op == "create" else table
        assert msg.startswith(f"{path}: this process (pid "), (op, msg)
        assert "the Spark Connect client, cannot " + ("read" if op in ("read", "changes") else "write to") in msg
        assert "PermissionError" in msg and "Nothing was read or written" in msg, (op, msg)
    after = (_timeline(table), sorted(tuple(r) for r in hudilite.read(spark, table).select("id", "name").collect()))
    assert after == before
    assert not os.path.exists(new_table)
