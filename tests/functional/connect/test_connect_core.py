"""The core over Spark Connect: writes (insert, upsert, delete; copy-on-write and merge-on-read), snapshot,
time travel, incremental reads, change feeds, compaction and the streaming sink through a Connect session to
`hudilite server` give what the classic session gives on the same operations."""

import json

import pytest

from tests.functional.connect.conftest import start_client
from tests.functional.connect.ops import run_ops

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")


def test_core_operations_over_connect_equal_classic(spark, connect_server, tmp_path):
    client = start_client(["-m", "tests.functional.connect.ops", connect_server.url, str(tmp_path / "connect")])
    try:  # the classic run meanwhile
        classic = json.loads(json.dumps(run_ops(spark, str(tmp_path / "classic")), default=str))
        stdout, stderr = client.communicate(timeout=600)
    finally:
        client.kill()
        client.wait()
    assert client.returncode == 0, stdout[-3000:] + stderr[-3000:]
    line = next(ln for ln in stdout.splitlines() if ln.startswith("RESULT "))
    over_connect = json.loads(line[len("RESULT "):])
    assert over_connect == classic
    mor = over_connect["MERGE_ON_READ"]
    assert mor["compacted"] == 1 and mor["read_optimized"] == mor["after_compaction"] == mor["snapshot"]
    assert sorted(r[0] for r in mor["snapshot"]) == [1, 2, 3, 4, 5, 6, 8, 9, 10, 11]
    # the streaming sink runs pickled in the server's Python worker: a replayed batch adds no commit
    stream = over_connect["stream"]
    assert stream["rows"] == stream["direct"] == [[1, 11, 2], [2, 20, 1], [3, 30, 1]]
    assert (stream["commits"], stream["last_batch"], stream["direct_batch"]) == (2, 1, 0)
