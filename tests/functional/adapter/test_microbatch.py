"""`incremental_strategy='microbatch'` on hudilite: dbt-tests-adapter's BaseMicrobatch, and one project for
late-arriving upstream rows, a failed batch retried with `dbt retry`, concurrent batches (partitioned by the
event-time grain: no conflicts; unpartitioned with unique_key: conflicts retried) and the idempotency of a
re-run batch (a window committed with the same rows commits nothing)."""

import json
import os

import pytest
from dbt.tests.adapter.incremental.test_incremental_microbatch import BaseMicrobatch
from dbt.tests.util import patch_microbatch_end_time, run_dbt, run_dbt_and_capture

import hudilite
from hudilite.ready import READY_KEY
from hudilite.table import HoodieTable


class TestMicrobatchHudilite(BaseMicrobatch):
    pass


_EVENTS = """
{{ config(materialized='table', event_time='event_time') }}
select cast(id as bigint) as id, cast(ts as timestamp) as event_time from values
  (1, '2020-01-01 03:00:00'), (2, '2020-01-02 03:00:00'), (3, '2020-01-03 03:00:00'),
  (4, '2020-01-04 03:00:00'), (5, '2020-01-05 03:00:00') as t(id, ts)
"""

# assert_true: a row with a negative id makes its batch fail (a bad upstream row, fixed before `dbt retry`)
_BODY = """
select id, event_time, to_date(event_time) as event_day from {{ ref('events') }}
where assert_true(id >= 0) is null
"""

_MB_PART = """
{{ config(materialized='incremental', incremental_strategy='microbatch', event_time='event_time',
          batch_size='day', begin=modules.datetime.datetime(2020, 1, 1), partition_by=['event_day'],
          concurrent_batches=true) }}
""" + _BODY

_MB_KEY = """
{{ config(materialized='incremental', incremental_strategy='microbatch', event_time='event_time',
          batch_size='day', begin=modules.datetime.datetime(2020, 1, 1), unique_key='id',
          concurrent_batches=true) }}
""" + _BODY

_WINDOW = ["--event-time-start", "2020-01-01", "--event-time-end", "2020-01-05"]


class TestMicrobatchLateRowsRetryConcurrent:
    @pytest.fixture(scope="class")
    def models(self):
        return {"events.sql": _EVENTS, "mb_part.sql": _MB_PART, "mb_key.sql": _MB_KEY}

    @staticmethod
    def _ids(project, name):
        return sorted(r[0] for r in project.run_sql(f"select id from {project.test_schema}.{name}", fetch="all"))

    @staticmethod
    def _commits(project, name):
        path = os.path.join(str(project.project_root), "warehouse", project.test_schema, name)
        return len(hudilite.Table.open(path).timeline.completed())

    def test_late_rows_retry_concurrent(self, project):
        schema = project.test_schema
        with patch_microbatch_end_time("2020-01-05 12:00:00"):
            _, log = run_dbt_and_capture(["--debug", "run"])
        # batches 2-4 of both models ran on the pool's threads, each one commit
        assert "is being run concurrently" in log
        for m in ("mb_part", "mb_key"):
            assert self._ids(project, m) == [1, 2, 3, 4, 5]
            assert self._commits(project, m) == 5

        # late upstream rows: one in the (already processed) window of 2020-01-02, and a bad row of 01-04
        project.run_sql(f"insert into {schema}.events values (6, timestamp '2020-01-02 05:00:00'), "
                        "(-1, timestamp '2020-01-04 01:00:00')")
        with patch_microbatch_end_time("2020-01-05 12:00:00"):
            results = run_dbt(["run", "--select", "mb_part", "mb_key", *_WINDOW], expect_pass=False)
        for r in results:
            assert [b[0].day for b in r.batch_results.failed] == [4], r.batch_results
        for m in ("mb_part", "mb_key"):
            assert self._ids(project, m) == [1, 2, 3, 4, 5, 6]  # the late row arrived; day 4 kept its rows
            # 01-01 and 01-02 replaced (the first build recorded no fingerprint; new rows), 01-03 unchanged
            # (same rows, only other windows since: no commit), 01-04 failed (rolled back / never written)
            assert self._commits(project, m) == 7

        # fix the upstream; dbt retry runs the failed batch only
        project.run_sql(f"delete from {schema}.events where id < 0")
        with patch_microbatch_end_time("2020-01-05 12:00:00"):
            results = run_dbt(["retry"])
        for r in results:  # (successful lists the original run's batches too: dbt carries them over)
            assert not r.batch_results.failed and 4 in [b[0].day for b in r.batch_results.successful]
        for m in ("mb_part", "mb_key"):
            assert self._ids(project, m) == [1, 2, 3, 4, 5, 6]
            # the fixed 01-04 window holds the rows run 1 committed for it (only other windows since): the
            # retried batch ran but committed nothing
            assert self._commits(project, m) == 7

        # the same windows again: every one was committed with these rows, nothing is committed
        with patch_microbatch_end_time("2020-01-05 12:00:00"):
            run_dbt(["run", "--select", "mb_part", "mb_key", *_WINDOW])
        for m in ("mb_part", "mb_key"):
            assert self._commits(project, m) == 7
            assert self._ids(project, m) == [1, 2, 3, 4, 5, 6]
        rows = project.run_sql(f"select event_day, count(*) from {schema}.mb_part group by 1 order by 1",
                               fetch="all")
        assert [r[1] for r in rows] == [1, 2, 1, 1, 1]


# write-audit-publish on microbatch models: every batch's (and every changes-driven window's) write is audited
# on its own pending instant and marks its own partition ready; a batch whose rows fail an audit publishes
# nothing, the others commit
_MB_AUDIT_CONFIG = """
{{{{ config(materialized='incremental', incremental_strategy='microbatch', event_time='event_time',
          batch_size='day', begin=modules.datetime.datetime(2020, 1, 1), partition_by=['event_day'],
          concurrent_batches=true, audit_before_publish=true, mark_ready=true{extra}) }}}}
select id, event_time, to_date(event_time) as event_day from {{{{ ref('events') }}}}
"""

_MB_AUDIT_YML = """
version: 2
models:
  - name: mb_audit
    columns:
      - name: id
        data_tests: [not_null, unique]
  - name: mb_audit_changes
    columns:
      - name: id
        data_tests: [not_null, unique]
"""


class TestMicrobatchAuditPublish:
    @pytest.fixture(scope="class")
    def models(self):
        return {"events.sql": _EVENTS, "mb_audit.sql": _MB_AUDIT_CONFIG.format(extra=""),
                "mb_audit_changes.sql": _MB_AUDIT_CONFIG.format(extra=", microbatch_source='changes'"),
                "schema.yml": _MB_AUDIT_YML}

    @staticmethod
    def _commits(project, name):
        """The extraMetadata of every completed commit of the model's table."""
        t = HoodieTable.open(os.path.join(str(project.project_root), "warehouse", project.test_schema, name))
        return [t.timeline.read_metadata(c)["extraMetadata"] for c in t.timeline.completed()]

    def test_every_batch_and_window_is_audited(self, project):
        schema = project.test_schema
        days = [[f"event_day=2020-01-0{d}"] for d in range(1, 6)]
        with patch_microbatch_end_time("2020-01-05 12:00:00"):
            _, log = run_dbt_and_capture(["--debug", "run"])
        assert "is being run concurrently" in log
        # one commit per batch (the changes-driven model: per window, 5 in one materialization), each audited
        # on its own and marking its own partition ready
        for m in ("mb_audit", "mb_audit_changes"):
            meta = self._commits(project, m)
            assert [x.get("hudilite.audited") for x in meta] == ["true"] * 5, m
            assert sorted(json.loads(x[READY_KEY]) for x in meta) == days, m

        # late rows in two windows: the changes-driven model rebuilds both, each commit audited
        project.run_sql(f"insert into {schema}.events values (6, timestamp '2020-01-02 05:00:00'), "
                        "(7, timestamp '2020-01-04 05:00:00')")
        with patch_microbatch_end_time("2020-01-05 12:00:00"):
            run_dbt(["run", "--select", "mb_audit_changes"])
        meta = self._commits(project, "mb_audit_changes")[5:]
        assert [x.get("hudilite.audited") for x in meta] == ["true"] * 2
        assert sorted(json.loads(x[READY_KEY]) for x in meta) == [days[1], days[3]]

        # a bad upstream row beside a good one in the window of 2020-01-03: that concurrent batch fails its
        # not_null audit and publishes nothing; the batches of 01-02 and 01-04 (new rows) and 01-01 (the first
        # build records no fingerprint) commit audited
        project.run_sql(f"insert into {schema}.events values (null, timestamp '2020-01-03 05:00:00'), "
                        "(8, timestamp '2020-01-03 06:00:00')")
        with patch_microbatch_end_time("2020-01-05 12:00:00"):
            results, log = run_dbt_and_capture(["run", "--select", "mb_audit", *_WINDOW], expect_pass=False)
        assert [b[0].day for b in results[0].batch_results.failed] == [3], results[0].batch_results
        assert "audit of" in log and "nothing was published" in log
        ids = sorted(r[0] for r in project.run_sql(f"select id from {schema}.mb_audit", fetch="all"))
        assert ids == [1, 2, 3, 4, 5, 6, 7]  # 01-03 kept its published rows: neither the null id nor 8
        meta = self._commits(project, "mb_audit")
        assert [x.get("hudilite.audited") for x in meta] == ["true"] * 8

        # the upstream fixed: dbt retry runs the failed batch only, audited, marking its partition ready
        project.run_sql(f"delete from {schema}.events where id is null")
        with patch_microbatch_end_time("2020-01-05 12:00:00"):
            run_dbt(["retry"])
        meta = self._commits(project, "mb_audit")
        assert len(meta) == 9 and meta[-1].get("hudilite.audited") == "true"
        assert json.loads(meta[-1][READY_KEY]) == days[2]
        res = run_dbt(["show", "--inline", "select id from {{ hudilite.read(ref('mb_audit'), ready_only=true) }} "
                       "order by id", "--limit", "100"])
        assert [r[0] for r in res.results[0].agate_table.rows] == [1, 2, 3, 4, 5, 6, 7, 8]
