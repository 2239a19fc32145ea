"""A subset of the core's compat suite (tests/compat/) over Spark Connect: the same tests, run by a pytest
subprocess whose `spark` fixture is a Connect session to the test session's `hudilite server`
(HUDILITE_TEST_CONNECT, tests/conftest.py). Chosen for coverage at small cost: a copy-on-write write sequence
(bulk_insert, upserts with in-batch duplicates, late records and deletes, a partition move, the delete
operation) checked against hudi-rs and a model on the snapshot, time travel at every instant and incremental
windows; and the merge-on-read sequence with compaction, clustering and clean (parquet log blocks), checked
the same way after every step."""

import pytest

from tests.functional.connect.conftest import run_tests_over_connect

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")

SUBSET = ["tests/compat/test_hudi_rs_compat.py", "tests/compat/test_mor_services_compat.py",
          "-k", "v6-hive_partitioned_simple_key or parquet"]
# the matrix tests of one COW scenario on version 6 (test_hudi_rs_compat: one `built` per scenario and version)
# + one MOR test
EXPECTED = 11


def test_compat_subset_over_connect(connect_server):
    pytest.importorskip("hudi")
    run_tests_over_connect(connect_server, SUBSET, rf"{EXPECTED} passed, \d+ deselected")


def test_wall_clock_timestamps_over_connect(connect_server):
    """tests/functional/test_timestamp_ntz.py over Connect: TIMESTAMP_NTZ values written and read by a client in
    another session time zone than the server's keep their type and wall clock; the filter literals too."""
    pytest.importorskip("hudi")
    run_tests_over_connect(connect_server, ["tests/functional/test_timestamp_ntz.py"], r"7 passed")
