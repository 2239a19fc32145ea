"""A hudilite table registered outside dbt (`CREATE TABLE ... USING hudilite LOCATION`, written by an ingestion
job through `hudilite.write`) as a dbt source: `hudilite.changes(source(...))` reads each of its commits
exactly once across runs, an aggregate over it folds its changes, a view of it is still no hudilite table,
and `dbt docs generate` gives the source its table's statistics."""

import json
import os

import pyarrow as pa
import pytest
from dbt.tests.util import run_dbt, run_dbt_and_capture

import hudilite

SOURCES = """
version: 2
sources:
  - name: raw
    schema: "{{ target.schema }}"
    tables:
      - name: events
"""

# append: every change row consumed is a row here, so a commit read twice shows
CONSUMED = """
{{ config(materialized='incremental') }}
select id, v, _change_op from {{ hudilite.changes(source('raw', 'events')) }}
"""

PER_V = """
{{ config(materialized='aggregate') }}
select v, count(*) as n from {{ source('raw', 'events') }} group by v
"""

EVENTS_VIEW = """
{{ config(materialized='view') }}
select * from {{ source('raw', 'events') }} where v > 1
"""

OF_VIEW = """
{{ config(materialized='incremental') }}
select id from {{ hudilite.changes(ref('events_view')) }}
"""


def _ingest(path, ids, v):
    rows = pa.table({"id": pa.array(ids, pa.int64()), "v": pa.array([v] * len(ids), pa.int64())})
    hudilite.write(rows, path, record_key="id", precombine_field="v")


class TestHudiliteTableAsSource:
    @pytest.fixture(scope="class")
    def models(self):
        return {"sources.yml": SOURCES, "consumed.sql": CONSUMED, "per_v.sql": PER_V,
                "events_view.sql": EVENTS_VIEW, "of_view.sql": OF_VIEW}

    def test_changes_and_aggregates_of_a_source(self, project):
        s = project.test_schema
        path = os.path.join(str(project.project_root), "ingested", "events")
        _ingest(path, [1, 2, 3], 1)
        project.run_sql(f"create table {s}.events using hudilite location '{path}'")

        def rows(name, cols):
            return sorted(tuple(r) for r in project.run_sql(f"select {cols} from {s}.{name}", fetch="all"))

        models = ["consumed", "per_v", "events_view"]
        run_dbt(["run", "--select", *models])
        assert rows("consumed", "id, v, _change_op") == [(1, 1, "I"), (2, 1, "I"), (3, 1, "I")]
        assert rows("per_v", "v, n") == [(1, 3)]

        _ingest(path, [3, 4], 2)  # an update and an insert
        run_dbt(["run", "--select", *models])
        assert rows("consumed", "id, v, _change_op") == [(1, 1, "I"), (2, 1, "I"), (3, 1, "I"), (3, 2, "U"),
                                                          (4, 2, "I")]
        assert rows("per_v", "v, n") == [(1, 2), (2, 2)]

        run_dbt(["run", "--select", *models])  # no new commit: nothing is read again
        assert len(rows("consumed", "id")) == 5
        assert rows("per_v", "v, n") == [(1, 2), (2, 2)]
        assert sorted(hudilite.Table.open(path).to_arrow(["id"]).column("id").to_pylist()) == [1, 2, 3, 4]

        results, log = run_dbt_and_capture(["run", "--select", "of_view"], expect_pass=False)
        assert results[0].status == "error"
        assert f"{s}.events_view is not a hudilite table" in log, log

        run_dbt(["docs", "generate", "--no-compile"])  # of_view cannot compile; the source: its table's stats
        with open(os.path.join(str(project.project_root), "target", "catalog.json")) as f:
            stats = json.load(f)["sources"]["source.test.raw.events"]["stats"]
        assert stats["rows"]["value"] == 4 and stats["bytes"]["value"] > 0, stats
