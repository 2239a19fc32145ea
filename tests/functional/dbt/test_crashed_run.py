"""A dbt run after a crashed run: the dead writer's pending instant (files written, never committed, heartbeat
still fresh) neither blocks the next run nor shows up in the model; once its heartbeat is older than its
tolerance, the next run rolls it back."""

import glob
import multiprocessing as mp
import os
import signal
import time

import pyarrow as pa
import pytest
from dbt.tests.util import run_dbt

from hudilite.table import HoodieTable
from hudilite.timeline.heartbeat import heartbeat_path
from tests.functional.dbt.conftest import table_dir

MODEL = """
{{ config(materialized='incremental', unique_key='id') }}
{% if var('batch', 1) == 1 %} select 1 as id, 'a' as name union all select 2, 'b'
{% else %} select 2 as id, 'b2' as name union all select 3, 'c' {% endif %}
"""


def _crashing_run(path: str, ready: str) -> None:
    """A run that wrote its files and died before committing (the write stays pending, heartbeat beating)."""
    import hudilite

    p = hudilite.write(pa.table({"id": pa.array([2, 9], pa.int32()), "name": ["crash", "crash"]}), path,
                       record_key="id", commit=False)
    with open(ready, "w") as f:
        f.write(p.instant_time)
    time.sleep(600)


class TestRunAfterCrash:
    @pytest.fixture(scope="class")
    def models(self):
        return {"orders.sql": MODEL}

    def test_next_run_is_not_blocked_and_cleans_up_later(self, project, tmp_path):
        s = project.test_schema
        run_dbt(["run"])
        path = table_dir(project, "orders")
        ready = str(tmp_path / "ready")
        child = mp.get_context("spawn").Process(target=_crashing_run, args=(path, ready), daemon=True)
        child.start()
        deadline = time.time() + 300
        while not os.path.exists(ready):
            assert time.time() < deadline and child.is_alive(), "the crashing run did not get to write"
            time.sleep(0.05)
        time.sleep(0.05)
        dead = open(ready).read()
        os.kill(child.pid, signal.SIGKILL)
        child.join(10)
        dead_files = glob.glob(os.path.join(path, "**", f"*_{dead}.parquet"), recursive=True)
        assert dead_files

        # right after the crash: the next run commits; the dead write is ignored, not rolled back yet (its
        # heartbeat is within its tolerance, 60 s x 2), and nothing of it is visible
        run_dbt(["run", "--vars", "{batch: 2}"])
        want = [(1, "a"), (2, "b2"), (3, "c")]
        assert sorted(tuple(r) for r in project.run_sql(f"select id, name from {s}.orders", fetch="all")) == want
        tl = HoodieTable.open(path).reload()
        assert [i.timestamp for i in tl.pending()] == [dead] and len(tl.completed()) == 2

        # two minutes later (the heartbeat aged by hand): the next run rolls the dead write back
        old = time.time() - 121
        os.utime(heartbeat_path(path, dead), (old, old))
        run_dbt(["run", "--vars", "{batch: 2}"])
        assert sorted(tuple(r) for r in project.run_sql(f"select id, name from {s}.orders", fetch="all")) == want
        tl = HoodieTable.open(path).reload()
        assert not tl.pending() and len(tl.completed()) == 3
        assert not any(os.path.exists(f) for f in dead_files)
        assert not os.path.exists(heartbeat_path(path, dead))
