"""Small batches over Spark Connect: a Connect client's small write is collected as Arrow in the client and
written by the driver-local writer (`engine` driver, no Spark write job), and gives the same tables (snapshot,
commit statistics, change reads) as the same batches written through Spark jobs from the same client."""

import json

import pytest

import hudilite
from hudilite.spark.changes import changes
from hudilite.table import HoodieTable
from tests.functional.connect.conftest import run_client

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")

COLS = ["id", "version", "dt", "name"]
STAT_KEYS = ("partitionPath", "numInserts", "numUpdateWrites", "numDeletes", "numWrites")

CLIENT = """
import json, random, sys
from pyspark.sql import SparkSession
import hudilite

spark = SparkSession.builder.remote(sys.argv[1]).getOrCreate()
base = sys.argv[2]
rng = random.Random(23)
engines = {}
for tt in ("COPY_ON_WRITE", "MERGE_ON_READ"):
    for i, (op, n) in enumerate([("upsert", 30), ("upsert", 30), ("insert", 10), ("delete", 6)]):
        rows = [(k, i * 10 + rng.randrange(20), f"2024-01-0{1 + k % 2}", f"n{rng.randrange(1000)}",
                 rng.random() < 0.15) for k in (rng.randrange(40) for _ in range(n))]
        df = spark.createDataFrame(rows, "id long, version long, dt string, name string, _hoodie_is_deleted boolean")
        if op == "delete":
            df = df.select("id", "dt")
        kw = dict(record_key="id", precombine_field="version", partition_by="dt", table_type=tt, operation=op)
        fast = hudilite.write(df, f"{base}/{tt}/fast", options={"hudilite.write.small.batch.enabled": "true"}, **kw)
        slow = hudilite.write(df, f"{base}/{tt}/slow", **kw)
        engines[f"{tt} {i}"] = [fast.stats.pop("engine"), slow.stats.pop("engine"),
                                {**fast.stats, "bytes_written": 0} == {**slow.stats, "bytes_written": 0}]
print("RESULT " + json.dumps(engines))
"""


def _rows(spark, path):
    return sorted(tuple(r) for r in hudilite.read(spark, path).select(*COLS).collect())


def _stats(path):
    """Per commit: action, operation and the write statistics that do not name files."""
    tl = HoodieTable.open(path).timeline
    out = []
    for inst in tl.completed():
        md = tl.read_metadata(inst)
        out.append((inst.action, md.get("operationType"),
                    sorted(tuple(s.get(k) for k in STAT_KEYS)
                           for ss in md["partitionToWriteStats"].values() for s in ss)))
    return out


def _changes(spark, path):
    ts = [i.timestamp for i in HoodieTable.open(path).timeline.completed()]
    return sorted(tuple(r) for r in changes(spark, path, begin=ts[0], end=ts[-1])
                  .select(*COLS, "_change_op").collect())


def test_small_writes_over_connect_take_the_driver_path(spark, connect_server, tmp_path):
    base = str(tmp_path)
    out = run_client(["-c", CLIENT, connect_server.url, base])
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    engines = json.loads(next(ln for ln in out.stdout.splitlines() if ln.startswith("RESULT "))[len("RESULT "):])
    assert len(engines) == 8
    for step, (fast, slow, same_stats) in engines.items():
        assert (fast, slow, same_stats) == ("driver", "spark", True), step
    for tt in ("COPY_ON_WRITE", "MERGE_ON_READ"):
        fast, slow = f"{base}/{tt}/fast", f"{base}/{tt}/slow"
        assert _rows(spark, fast) == _rows(spark, slow) and _rows(spark, fast)
        assert _stats(fast) == _stats(slow)
        assert _changes(spark, fast) == _changes(spark, slow)
