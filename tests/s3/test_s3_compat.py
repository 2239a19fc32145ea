"""The hudi-rs compatibility matrix on s3:// tables against the real S3 server: the local matrix's own cases
(tests/compat), built at an s3:// location. hudilite writes and reads through the tables' storage options
(Spark executors write straight to the store), hudi-rs reads the same tables through its own (object_store's
`aws_*` keys: endpoint, allow http, credentials, region), and both must equal the scenario's model — the same
answer the local matrix requires of local tables — for the snapshot, time travel at and between instants,
incremental windows, filtered reads, the timeline and the write statistics.

The merge-on-read sequence with services (a compaction scheduled before a write and executed after it,
clustering, inline compaction, clean and archival of nothing still needed) runs the same way.

By default one of the five write scenarios runs here (bulk_insert, upserts with deletes, insert_overwrite and
insert_overwrite_table replacecommits, plain partition paths: what tests/s3/test_spark_s3.py does not write)
and one log block format, to keep the file near a minute; HUDILITE_S3_LONG=1 runs all five and both formats.
"""

from __future__ import annotations

import os
import uuid

import pytest

pytest.importorskip("hudi")

from hudilite.storage import bind_storage_options  # noqa: E402
from hudilite.storage.base import unbind_storage  # noqa: E402
from tests.compat import test_hudi_rs_compat as matrix  # noqa: E402

# the matrix's tests, collected here again: they take the `built` fixture of this module (an s3:// table)
from tests.compat.test_hudi_rs_compat import (  # noqa: E402,F401
    test_incremental_consecutive_instants,
    test_incremental_from_beginning,
    test_incremental_other_bounds,
    test_latest_snapshot,
    test_schema_and_column_order,
    test_snapshot_with_filters,
    test_time_travel_between_instants_and_other_formats,
    test_time_travel_every_instant,
    test_timeline_matches,
    test_write_stats_match_model,
)
from tests.compat.test_mor_services_compat import run_mor_with_services  # noqa: E402

LONG = bool(os.environ.get("HUDILITE_S3_LONG"))
DEFAULT = ("insert_overwrite_plain_partitions",)
SCENARIOS = [s for s in matrix.SCENARIOS if LONG or s.name in DEFAULT]

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")


@pytest.fixture(scope="module")
def s3_base(s3_server, s3_admin):
    """A bucket for the module's tables; the driver binds nothing process-wide (each table has its options)."""
    bucket = f"compat-{uuid.uuid4().hex[:16]}"
    s3_admin.create_dir(bucket)
    yield f"s3://{bucket}"
    s3_admin.delete_dir(bucket)


@pytest.fixture(scope="module", params=SCENARIOS, ids=[s.name for s in SCENARIOS])
def built(request, spark, s3_server, s3_base):
    b = matrix.build(spark, s3_base, request.param, storage_options=s3_server.storage_options)
    assert b.path.startswith("s3://")
    yield b
    unbind_storage(b.path)


@pytest.mark.parametrize("block_format", ["avro", "parquet"] if LONG else ["parquet"])
def test_mor_with_services_on_s3(spark, s3_server, s3_base, block_format):
    path = f"{s3_base}/mor_services_{block_format}"
    bind_storage_options(path, s3_server.storage_options)  # the services called by path reach the table
    try:
        run_mor_with_services(spark, path, block_format, so=s3_server.storage_options)
    finally:
        unbind_storage(path)
