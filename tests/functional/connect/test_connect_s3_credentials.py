"""Under Spark Connect the client plans and commits, so it needs the object store's credentials itself: a
client with none, or with wrong ones, fails before any Spark job with StorageAccessError naming the table and
the client process, and nothing is written (the real S3 server of tests/s3)."""

import json

import pyarrow as pa
import pytest
from pyarrow import fs as pafs

import hudilite
from tests.functional.connect.conftest import run_client

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")

CLIENT = """
import json, os, sys
for k in [k for k in os.environ if k.startswith("AWS_")]:  # no credentials from the environment either
    del os.environ[k]
from pyspark.sql import SparkSession
import hudilite

spark = SparkSession.builder.remote(sys.argv[1]).getOrCreate()
table, new_table, opts = sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
df = spark.createDataFrame([(1, 9, "changed")], "id long, ts long, name string")
ops = {"write": lambda: hudilite.write(df, table, record_key="id", precombine_field="ts", storage_options=opts),
       "read": lambda: hudilite.read(spark, table, storage_options=opts).collect(),
       "create": lambda: hudilite.write(df, new_table, record_key="id", precombine_field="ts",
                                        storage_options=opts)}
out = {}
for name, op in ops.items():
    try:
        op()
        out[name] = "no error"
    except hudilite.StorageAccessError as e:
        out[name] = str(e)
    except Exception as e:
        out[name] = f"other error {type(e).__name__}: {e}"
print("RESULT " + json.dumps(out))
"""


def _objects(admin, bucket):
    infos = admin.get_file_info(pafs.FileSelector(bucket, recursive=True))
    return sorted((i.path, i.size) for i in infos if i.type == pafs.FileType.File)


@pytest.mark.parametrize("credentials", ["none", "invalid"])
def test_client_without_valid_s3_credentials_fails_clearly(connect_server, s3_server, s3_admin, s3_bucket,
                                                           credentials):
    table, new_table = f"s3://{s3_bucket}/lake/t", f"s3://{s3_bucket}/lake/new"
    good = s3_server.storage_options
    hudilite.write(pa.table({"id": [1, 2], "ts": [1, 1], "name": ["a", "b"]}), table, record_key="id",
                   precombine_field="ts", storage_options=good)  # Arrow: written by this process
    before = _objects(s3_admin, s3_bucket)
    opts = {k: v for k, v in good.items() if k not in ("access_key_id", "secret_access_key")}
    if credentials == "invalid":
        opts.update(access_key_id="not-a-key", secret_access_key="not-the-secret")
    opts.update(max_retries="1", retry_timeout_s="20")  # a refusal is final: no need to wait out the retries
    out = run_client(["-c", CLIENT, connect_server.url, table, new_table, json.dumps(opts)])
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    result = json.loads(next(ln for ln in out.stdout.splitlines() if ln.startswith("RESULT "))[len("RESULT "):])
    for op, msg in result.items():
        path = new_table if op == "create" else table
        assert msg.startswith(f"{path}: this process (pid "), (op, msg)
        assert "the Spark Connect client, cannot " + ("read" if op == "read" else "write to") in msg, (op, msg)
        assert "Nothing was read or written" in msg and "not-the-secret" not in msg, (op, msg)
    assert _objects(s3_admin, s3_bucket) == before
    rows = hudilite.Table.open(table, storage_options=good).to_arrow()
    assert sorted(rows.column("name").to_pylist()) == ["a", "b"]
