"""`microbatch_source: changes` (dbt/adapters/hudilite/change_batches.py): a microbatch model whose batches come
from its upstream's commits since its checkpoint. Beside the same model with dbt's wall-clock batches: a late
upstream row (an old event_time, committed after its window was processed) reaches the changes-driven model on
the next run and is missed by the wall-clock one; a run without upstream commits writes nothing; a failed
window is retried by `dbt retry` and commits once, the checkpoint advancing only with the last window; an update
that moves a row's event_time rebuilds its old and its new window; clear
errors for an upstream that is not a hudilite table and for upstreams without event_time."""

import os

import pytest
from dbt.tests.util import patch_microbatch_end_time, run_dbt, run_dbt_and_capture, write_file

import hudilite
from tests.functional.adapter.test_microbatch import _EVENTS  # the same upstream model

# assert_true: a negative id fails its batch (a bad upstream row, fixed before `dbt retry`)
_BODY = """
select id, event_time from {{ ref('events') }} where assert_true(id >= 0) is null
"""

_CONFIG = """
{{{{ config(materialized='incremental', incremental_strategy='microbatch', event_time='event_time',
          batch_size='day', begin=modules.datetime.datetime(2020, 1, 1){extra}) }}}}
"""

_MB_TIME = _CONFIG.format(extra="") + _BODY
_MB_CHANGES = _CONFIG.format(extra=", microbatch_source='changes'") + _BODY
_END = "2020-01-05 12:00:00"


class TestMicrobatchFromChanges:
    @pytest.fixture(scope="class")
    def models(self):
        return {"events.sql": _EVENTS, "mb_time.sql": _MB_TIME, "mb_changes.sql": _MB_CHANGES}

    @staticmethod
    def _path(project, name):
        return os.path.join(str(project.project_root), "warehouse", project.test_schema, name)

    @staticmethod
    def _ids(project, name):
        return sorted(r[0] for r in project.run_sql(f"select id from {project.test_schema}.{name}", fetch="all"))

    def _commits(self, project, name):
        return len(hudilite.Table.open(self._path(project, name)).timeline.completed())

    def _checkpoint(self, project):
        return hudilite.Table.open(self._path(project, "mb_changes")).consumed().positions

    def _events_position(self, project):
        return {self._path(project, "events"): hudilite.Table.open(self._path(project, "events")).position()[0]}

    def test_late_rows_from_changes(self, project):
        schema = project.test_schema
        with patch_microbatch_end_time(_END):
            run_dbt(["run"])
        for m in ("mb_time", "mb_changes"):
            assert self._ids(project, m) == [1, 2, 3, 4, 5]
            assert self._commits(project, m) == 5  # one commit per day 01-01 .. 01-05
        # the first build's batches recorded the upstream position the run started from
        assert self._checkpoint(project) == self._events_position(project)

        # a late row: event_time in the 01-02 window, processed by the first run
        project.run_sql(f"insert into {schema}.events values (6, timestamp '2020-01-02 05:00:00')")
        with patch_microbatch_end_time(_END):
            run_dbt(["run", "--select", "mb_time", "mb_changes"])
        # wall clock: dbt's batches are 01-04 and 01-05 (lookback 1), the late row is missed
        assert self._ids(project, "mb_time") == [1, 2, 3, 4, 5]
        assert self._commits(project, "mb_time") == 5
        # changes: the window it touches is rebuilt, one commit that also advances the checkpoint
        assert self._ids(project, "mb_changes") == [1, 2, 3, 4, 5, 6]
        assert self._commits(project, "mb_changes") == 6
        after_late = self._events_position(project)
        assert self._checkpoint(project) == after_late

        # no upstream commits: nothing is written
        with patch_microbatch_end_time(_END):
            run_dbt(["run", "--select", "mb_changes"])
        assert self._commits(project, "mb_changes") == 6
        assert self._checkpoint(project) == after_late

        # two late rows, one of them bad: 01-01 is rebuilt, 01-03 fails; the checkpoint stays
        project.run_sql(f"insert into {schema}.events values (7, timestamp '2020-01-01 07:00:00'), "
                        "(-1, timestamp '2020-01-03 05:00:00')")
        with patch_microbatch_end_time(_END):
            results = run_dbt(["run", "--select", "mb_changes"], expect_pass=False)
        # dbt's first batch (01-04) ran the windows and failed; dbt then skips (and counts as failed) the rest
        assert [b[0].day for b in results[0].batch_results.failed] == [4, 5]
        assert self._ids(project, "mb_changes") == [1, 2, 3, 4, 5, 6, 7]
        assert self._commits(project, "mb_changes") == 7
        assert self._checkpoint(project) == after_late

        # fix the upstream row; dbt retry rebuilds the failed window once (01-01 holds its rows already)
        project.run_sql(f"update {schema}.events set id = 8 where id = -1")
        with patch_microbatch_end_time(_END):
            results = run_dbt(["retry"])
        assert not results[0].batch_results.failed
        assert self._ids(project, "mb_changes") == [1, 2, 3, 4, 5, 6, 7, 8]
        assert self._commits(project, "mb_changes") == 8
        assert self._checkpoint(project) == self._events_position(project)
        rows = project.run_sql(f"select id, cast(event_time as string) from {schema}.mb_changes where id = 8",
                               fetch="all")
        assert [tuple(r) for r in rows] == [(8, "2020-01-03 05:00:00")]

        # an upstream update moves row 7 from the 01-01 window to 01-04: both windows are rebuilt (the before
        # image names the old one), two commits, and the run reports both windows' rows
        project.run_sql(f"update {schema}.events set event_time = timestamp '2020-01-04 06:00:00' where id = 7")
        with patch_microbatch_end_time(_END):
            run_dbt(["run", "--select", "mb_changes"])
        assert self._commits(project, "mb_changes") == 10
        rows = project.run_sql(f"select id, cast(event_time as string) from {schema}.mb_changes order by id",
                               fetch="all")
        assert [tuple(r) for r in rows] == [
            (1, "2020-01-01 03:00:00"), (2, "2020-01-02 03:00:00"), (3, "2020-01-03 03:00:00"),
            (4, "2020-01-04 03:00:00"), (5, "2020-01-05 03:00:00"), (6, "2020-01-02 05:00:00"),
            (7, "2020-01-04 06:00:00"), (8, "2020-01-03 05:00:00")]
        assert self._checkpoint(project) == self._events_position(project)


_VIEW = """
{{ config(materialized='view', event_time='event_time') }}
select cast(1 as bigint) as id, timestamp '2020-01-01 03:00:00' as event_time
"""

_NO_EVENT_TIME = """
{{ config(materialized='table') }}
select cast(1 as bigint) as id, timestamp '2020-01-01 03:00:00' as event_time
"""


def _changes_model(upstream):
    return (_CONFIG.format(extra=", microbatch_source='changes'")
            + f"select id, event_time from {{{{ ref('{upstream}') }}}}")


class TestMicrobatchFromChangesErrors:
    @pytest.fixture(scope="class")
    def models(self):
        return {"up_view.sql": _VIEW, "up_plain.sql": _NO_EVENT_TIME,
                "mb_over_view.sql": _changes_model("up_view"), "mb_over_plain.sql": _changes_model("up_plain")}

    def test_errors(self, project):
        run_dbt(["run", "--select", "up_view", "up_plain"])
        with patch_microbatch_end_time("2020-01-02 12:00:00"):
            results, log = run_dbt_and_capture(["run", "--select", "mb_over_view", "mb_over_plain"],
                                               expect_pass=False)
        assert all(r.status == "error" for r in results)
        assert f"{project.test_schema}.up_view is not a hudilite table" in log, log
        assert "none of its upstream refs has an `event_time` config" in log, log
        for name in ("mb_over_view", "mb_over_plain"):  # nothing was written
            path = os.path.join(str(project.project_root), "warehouse", project.test_schema, name)
            assert not hudilite.Table.exists(path)


# the same events with row 5 gone and partitioned by id: a layout change, so the rebuild is a new table beside
# the old one (another table id) and the consumers' checkpoints no longer name it
_EVENTS_REBUILT = _EVENTS.replace("event_time='event_time'", "event_time='event_time', partition_by='id'").replace(
    ", (5, '2020-01-05 03:00:00')", "")
_MB_MOR = _CONFIG.format(extra=", microbatch_source='changes', table_type='mor'") + _BODY
_MB_KEYED = (_CONFIG.format(extra=", microbatch_source='changes', unique_key='id'")
             + "select id, event_time, 'v' || cast(id as string) as label from {{ ref('events') }}")


class TestMicrobatchFromChangesVariants:
    """Changes-driven windows on a merge-on-read model and on a model with unique_key (each window upserted with
    its stored keys that the window lost deleted); an upstream rebuilt in place (--full-refresh: one
    insert_overwrite_table commit) and beside (a layout change: another table) - the windows it changes are
    rebuilt, rows it dropped leave the model, nothing is counted twice; --event-time-start/-end bound the
    windows rebuilt and keep the checkpoint, so the next unbounded run rebuilds the windows outside."""

    @pytest.fixture(scope="class")
    def models(self):
        return {"events.sql": _EVENTS, "mb_mor.sql": _MB_MOR, "mb_keyed.sql": _MB_KEYED}

    _path = staticmethod(TestMicrobatchFromChanges._path)
    _commits = TestMicrobatchFromChanges._commits

    def _rows(self, project, name, cols="id, cast(event_time as string)"):
        return sorted(tuple(r) for r in project.run_sql(f"select {cols} from {project.test_schema}.{name}",
                                                        fetch="all"))

    def _checkpoint(self, project, name):
        return hudilite.Table.open(self._path(project, name)).consumed().positions

    def _events_position(self, project):
        return {self._path(project, "events"): hudilite.Table.open(self._path(project, "events")).position()[0]}

    def _run(self, project, *extra, expect_pass=True):
        with patch_microbatch_end_time(_END):
            return run_dbt(["run", "--select", "mb_mor", "mb_keyed", *extra], expect_pass=expect_pass)

    def _both(self, project):
        mor, keyed = self._rows(project, "mb_mor"), self._rows(project, "mb_keyed")
        assert mor == keyed, (mor, keyed)
        assert self._rows(project, "mb_keyed", "id, label") == sorted((r[0], f"v{r[0]}") for r in keyed)
        return keyed

    def test_variants(self, project):
        schema = project.test_schema
        base = [(1, "2020-01-01 03:00:00"), (2, "2020-01-02 03:00:00"), (3, "2020-01-03 03:00:00"),
                (4, "2020-01-04 03:00:00"), (5, "2020-01-05 03:00:00")]
        with patch_microbatch_end_time(_END):
            run_dbt(["run"])
        assert self._both(project) == base
        assert hudilite.Table.open(self._path(project, "mb_mor")).info().table_type == "MERGE_ON_READ"
        assert list(hudilite.Table.open(self._path(project, "mb_keyed")).layout().record_key) == ["id"]
        commits = {m: self._commits(project, m) for m in ("mb_mor", "mb_keyed")}

        # a late row in 01-02 and row 3 moved within its window: only 01-02 and 01-03 are rebuilt (upserted)
        project.run_sql(f"insert into {schema}.events values (6, timestamp '2020-01-02 05:00:00')")
        project.run_sql(f"update {schema}.events set event_time = timestamp '2020-01-03 04:00:00' where id = 3")
        self._run(project)
        want = sorted(base[:2] + [(3, "2020-01-03 04:00:00")] + base[3:] + [(6, "2020-01-02 05:00:00")])
        assert self._both(project) == want
        for m in commits:
            assert self._commits(project, m) == commits[m] + 2, m  # one commit per touched window
            assert self._checkpoint(project, m) == self._events_position(project)
        commits = {m: self._commits(project, m) for m in commits}

        # --event-time-start/-end: a late row in 01-01 and one in 01-04; only 01-04 is in the bounds
        project.run_sql(f"insert into {schema}.events values (7, timestamp '2020-01-01 06:00:00'), "
                        "(8, timestamp '2020-01-04 06:00:00')")
        before = self._checkpoint(project, "mb_mor")
        self._run(project, "--event-time-start", "2020-01-04", "--event-time-end", "2020-01-05")
        want_bounded = sorted(want + [(8, "2020-01-04 06:00:00")])
        assert self._both(project) == want_bounded
        for m in commits:
            assert self._checkpoint(project, m) == before, m  # 01-01 not rebuilt: the checkpoint stays
        # the next unbounded run rebuilds 01-01 (01-04 already holds its rows) and advances the checkpoint
        self._run(project)
        want = sorted(want_bounded + [(7, "2020-01-01 06:00:00")])
        assert self._both(project) == want
        for m in commits:
            assert self._checkpoint(project, m) == self._events_position(project)
        commits = {m: self._commits(project, m) for m in commits}

        # the upstream rebuilt in place (--full-refresh of a table model: one insert_overwrite_table commit, the
        # same table): back to its SQL's rows; the late rows and the move are gone from every window
        run_dbt(["run", "--select", "events", "--full-refresh"])
        self._run(project)
        assert self._both(project) == base
        for m in commits:
            assert self._checkpoint(project, m) == self._events_position(project)

        # the upstream rebuilt beside (another table id): row 5 is gone, its window 01-05 empties
        write_file(_EVENTS_REBUILT, project.project_root, "models", "events.sql")
        run_dbt(["run", "--select", "events"])
        self._run(project)
        assert self._both(project) == base[:4]
        for m in commits:
            assert self._checkpoint(project, m) == self._events_position(project)
        # and a run without upstream commits writes nothing
        commits = {m: self._commits(project, m) for m in commits}
        self._run(project)
        assert {m: self._commits(project, m) for m in commits} == commits
