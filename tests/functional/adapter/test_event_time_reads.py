"""dbt filters a ref() of a model with `event_time` to a time window: each batch of a microbatch model, and every
ref under `--sample`. `hudilite.read(ref(...))` and `hudilite.changes(ref(...))` read the same window (before: the
whole upstream, so every batch of a microbatch model wrote every upstream row, once per batch), and an aggregate
model aggregates the window (before: it failed, "FROM must name one table"). A checkpointed
`hudilite.changes()` in a microbatch model is refused (before: the first batch consumed the changes, so the other
batches read none)."""

import pytest
from dbt.tests.util import patch_microbatch_end_time, run_dbt, run_dbt_and_capture

from tests.functional.adapter.test_microbatch import _EVENTS  # ids 1..5 on 2020-01-01 .. 2020-01-05, 03:00

_MB = """
{{{{ config(materialized='incremental', incremental_strategy='microbatch', event_time='event_time',
          batch_size='day', begin=modules.datetime.datetime(2020, 1, 1){extra}) }}}}
select id, event_time from {{{{ {read} }}}}
"""

_SAMPLED = """
{{ config(materialized='table') }}
select id from {{ hudilite.read(ref('events')) }}
"""

_SAMPLED_CHANGES = """
{{ config(materialized='incremental', unique_key='id') }}
select id, event_time, _change_op from {{ hudilite.changes(ref('events')) }}
"""


_SAMPLED_AGGREGATE = """
{{ config(materialized='aggregate') }}
select id, count(*) as n from {{ ref('events') }} where id < 5 group by id
"""


class TestEventTimeWindows:
    @pytest.fixture(scope="class")
    def models(self):
        return {
            "events.sql": _EVENTS,
            "mb_read.sql": _MB.format(extra="", read="hudilite.read(ref('events'))"),
            "mb_read_keyed.sql": _MB.format(extra=", unique_key='id'", read="hudilite.read(ref('events'))"),
            "mb_changes.sql": _MB.format(extra=", unique_key='id'", read="hudilite.changes(ref('events'))"),
            "mb_range.sql": _MB.format(extra=", unique_key='id'",
                                       read="hudilite.changes(ref('events'), begin='0')"),
            "sampled.sql": _SAMPLED,
            "sampled_changes.sql": _SAMPLED_CHANGES,
            "sampled_aggregate.sql": _SAMPLED_AGGREGATE,
        }

    @staticmethod
    def _ids(project, name):
        return sorted(r[0] for r in project.run_sql(f"select id from {project.test_schema}.{name}", fetch="all"))

    def test_reads_take_the_window(self, project):
        run_dbt(["run", "-s", "events"])
        with patch_microbatch_end_time("2020-01-05 12:00:00"):
            run_dbt(["run", "-s", "mb_read", "mb_read_keyed", "mb_range"])
            # (dbt logs a batch's error at debug level only; its summary says ERROR)
            _, log = run_dbt_and_capture(["--debug", "run", "-s", "mb_changes"], expect_pass=False)
        for m in ("mb_read", "mb_read_keyed", "mb_range"):
            assert self._ids(project, m) == [1, 2, 3, 4, 5], m
        assert "a checkpoint cannot span them" in log and "microbatch_source='changes'" in log
        # --sample: rows of the window only, and (the sample being what was read) the change read's checkpoint
        sample = "{'start': '2020-01-02', 'end': '2020-01-04'}"
        sampled = ["sampled", "sampled_changes", "sampled_aggregate"]
        run_dbt(["run", "-s", *sampled, "--sample", sample])
        for m in sampled:
            assert self._ids(project, m) == [2, 3], m
        # the aggregate of the window is not folded on: the next run without a sample builds it from all rows
        run_dbt(["run", "-s", *sampled])
        assert self._ids(project, "sampled") == [1, 2, 3, 4, 5]
        assert self._ids(project, "sampled_changes") == [2, 3]  # nothing new upstream since the sampled run
        assert self._ids(project, "sampled_aggregate") == [1, 2, 3, 4]
