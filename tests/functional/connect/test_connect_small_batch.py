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


DERIVED = """
import json, sys
from pyspark.sql import Window, functions as F
from pyspark.sql.connect.client.core import SparkConnectClient
import hudilite
from hudilite import server

spark = server.connect(sys.argv[1])
base = sys.argv[2]
src = spark.sql(
    "select id, cast(id % 3 as int) as v, timestamp_seconds(1700000000 + id * 3601) as ts, "
    "cast(id as decimal(12, 3)) / 7 as amount, named_struct('a', id, 'b', concat('x', id)) as s, "
    "map('k', id) as m, array(id, id + 1) as arr, date_add(date'2024-01-01', cast(id % 2 as int)) as d "
    "from range(12)")
# a derived frame, as a model's with its delete flag and newest row per key: its schema is not known yet
w = Window.partitionBy("id").orderBy(F.col("v").desc())
frame = lambda: src.withColumn("rn", F.row_number().over(w)).filter("rn = 1").drop("rn")
small = {"hudilite.write.small.batch.enabled": "true"}
kw = dict(record_key="id", precombine_field="v", partition_by="d")
analyses = []
orig = SparkConnectClient._analyze
SparkConnectClient._analyze = lambda self, method, **k: analyses.append(method) or orig(self, method, **k)
fast = hudilite.write(frame(), f"{base}/fast", options=small, **kw)
fast_analyses = list(analyses)
del analyses[:]
again = hudilite.write(frame(), f"{base}/fast", options=small, **kw)  # the table's last write was small
again_analyses = list(analyses)
empty = hudilite.write(frame().filter("id < 0"), f"{base}/empty", options=small, **kw)
SparkConnectClient._analyze = orig
slow = hudilite.write(frame(), f"{base}/slow", **kw)
print("RESULT " + json.dumps({"engines": [fast.stats["engine"], empty.stats["engine"], slow.stats["engine"]],
                              "analyses": fast_analyses, "again": [again.stats["engine"], again_analyses]}))
"""


def test_a_small_write_over_connect_learns_its_schema_from_the_collect(spark, connect_server, tmp_path):
    """The small-batch collect's reply carries the frame's schema: a derived frame's write asks for no schema
    analysis of its own (the size estimate's explain only; none at all once the table's last write was small),
    and stores what the Spark write stores - nested,
    decimal, timestamp and date columns included; an empty batch too."""
    base = str(tmp_path)
    out = run_client(["-c", DERIVED, connect_server.url, base])
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    res = json.loads(next(ln for ln in out.stdout.splitlines() if ln.startswith("RESULT "))[len("RESULT "):])
    # a second batch into the same table: no size estimate (the table's last write was small), no analysis
    assert res == {"engines": ["driver", "driver", "spark"], "analyses": ["explain"], "again": ["driver", []]}

    def rows(path):
        df = hudilite.read(spark, path)
        return df.drop(*[c for c in df.columns if c.startswith("_hoodie_")]).orderBy("id").collect()

    fast, slow = rows(f"{base}/fast"), rows(f"{base}/slow")
    assert fast == slow and len(fast) == 12
    assert hudilite.read(spark, f"{base}/fast").schema == hudilite.read(spark, f"{base}/slow").schema
    assert rows(f"{base}/empty") == []
