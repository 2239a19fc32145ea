"""A dbt project whose warehouse is `s3://` on a real S3 server (SeaweedFS, tests/s3/fixtures.py): an incremental
upsert model over two runs, a downstream incremental model of its `hudilite.changes()` (its checkpoint makes the
second run read only the second commit), and `dbt test`. The tables are objects in the bucket; nothing but the
catalog is under the project's local warehouse directory."""

import json
import os
import uuid

import pytest
from dbt.tests.util import run_dbt
from pyarrow import fs as pafs

import hudilite
from hudilite.reader.ranges import completion_map
from hudilite.table import HoodieTable

ORDERS = """
{{ config(materialized='incremental', unique_key='id', precombine_field='v') }}
{% set b = var('batch', 1) %}
select id, {{ b }} as v, concat('n', id, '-', {{ b }}) as name
from (select explode(sequence({{ b }} * 2 - 1, {{ b }} * 2 + 2)) as id)
"""

ORDER_CHANGES = """
{{ config(materialized='incremental', unique_key='id') }}
select id, v, name from {{ hudilite.changes(ref('orders')) }}
"""

SCHEMA_YML = """
version: 2
models:
  - name: orders
    columns:
      - name: id
        data_tests: [unique, not_null]
  - name: order_changes
    columns:
      - name: id
        data_tests: [unique, not_null]
"""


@pytest.fixture(scope="class")
def bucket(s3_server, s3_admin):
    name = f"dbt-{uuid.uuid4().hex[:16]}"
    s3_admin.create_dir(name)
    yield name
    s3_admin.delete_dir(name)


class TestS3Warehouse:
    @pytest.fixture(scope="class")
    def dbt_profile_target(self, bucket, s3_server):
        return {"type": "hudilite", "threads": 1, "master": "local[2]", "user": "dbt",
                "warehouse": f"s3://{bucket}/wh", "storage_options": s3_server.storage_options}

    @pytest.fixture(scope="class")
    def models(self):
        return {"orders.sql": ORDERS, "order_changes.sql": ORDER_CHANGES, "schema.yml": SCHEMA_YML}

    def test_incremental_changes_and_tests_on_s3(self, project, bucket, s3_admin, spark):
        s = project.test_schema
        for batch in (1, 2):
            results = run_dbt(["run", "--vars", f"{{batch: {batch}}}"])
            got = {r.node.name: r.adapter_response for r in results}
            assert got["orders"]["table_path"] == f"s3://{bucket}/wh/{s}/orders"
        # run 2 upserts ids 3..6: the downstream read only that commit's changes (2 updated, 2 new), not the
        # whole snapshot again
        assert (got["order_changes"]["rows_inserted"], got["order_changes"]["rows_updated"]) == (2, 2)
        want = [(1, 1, "n1-1"), (2, 1, "n2-1")] + [(i, 2, f"n{i}-2") for i in range(3, 7)]
        for name in ("orders", "order_changes"):
            rows = project.run_sql(f"select id, v, name from {s}.{name} order by id", fetch="all")
            assert [tuple(r) for r in rows] == want, name
        run_dbt(["test"])

        orders, changes = (f"s3://{bucket}/wh/{s}/{n}" for n in ("orders", "order_changes"))
        assert sorted((r["id"], r["v"]) for r in hudilite.read(spark, orders).collect()) == [(a, b) for a, b, _ in want]
        tl = HoodieTable.open(changes).timeline
        marks = json.loads(tl.read_metadata(tl.completed()[-1])["extraMetadata"]["hudilite.checkpoints"])
        assert marks == {orders: max(completion_map(HoodieTable.open(orders)).values())}  # its checkpoint

        keys = [i.path for i in s3_admin.get_file_info(pafs.FileSelector(f"{bucket}/wh", recursive=True))
                if i.type == pafs.FileType.File]
        for name in ("orders", "order_changes"):
            assert f"{bucket}/wh/{s}/{name}/.hoodie/hoodie.properties" in keys
            assert any(k.startswith(f"{bucket}/wh/{s}/{name}/") and k.endswith(".parquet") for k in keys)
        local = os.path.join(str(project.project_root), "warehouse")
        assert os.listdir(local) == [".metastore"]  # only the catalog (the metastore's schema directories)
        for root, _, files in os.walk(local):
            assert not [f for f in files if f.endswith(".parquet") or f == "hoodie.properties"], (root, files)
