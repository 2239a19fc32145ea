"""CDC correctness: a stream of change events applied by an incremental upsert model over several `dbt run`s
equals a plain-Python reference, run after run — rows, and the inserted/updated/deleted counts each run
reports — and hudi-rs reads the model's table directory with the same rows.

The stream (deterministic, generated below) has inserts, updates and deletes, a version column (the
precombine field), duplicate events for a key inside a batch, exact duplicate rows, out-of-order late events
(a lower version than the stored row: ignored), late deletes, deletes of unknown keys, re-inserts after a
delete, and values with quotes, commas and backslashes. Two models apply it: one with dbt-hudilite's names
(`unique_key`, `precombine_field`), one with dbt-spark's Hudi spelling (`options: {primaryKey,
preCombineField}`) and a partitioned table.
"""

import csv
import io
import random

import pyarrow as pa
import pytest
from dbt.tests.util import run_dbt, run_dbt_and_capture

from hudilite.table import HoodieTable

from tests.functional.dbt.conftest import table_dir

BATCHES = 5
KEYS = 60


def generate_events(seed: int = 20240601):
    """Events per batch: (id, version, op, name, amount). Versions mostly grow per key; some events are late."""
    rnd = random.Random(seed)
    latest = {}  # highest version generated so far per key
    batches = []
    for b in range(1, BATCHES + 1):
        events, used = [], set()  # used: (key, version) in this batch - no ambiguous ties inside a batch
        for _ in range(45):
            k = rnd.randrange(1, KEYS + 1)
            top = latest.get(k, 0)
            r = rnd.random()
            if top and r < 0.15:
                version = rnd.randrange(0, top)  # late, out-of-order event (lower than what was generated)
            else:
                version = top + rnd.randrange(1, 4)
            if (k, version) in used:
                continue
            used.add((k, version))
            latest[k] = max(top, version)
            op = "i" if top == 0 else rnd.choice(["u", "u", "u", "d"])
            name = rnd.choice(["plain", "with, comma", "it's \"quoted\"", "back\\slash", "ünï"]) + f"-{k}-{version}"
            events.append((k, version, op, name, round(rnd.uniform(-1000, 1000), 2)))
        # duplicates inside the batch: the same event twice, and a second event for a key at a higher version
        events.append(events[3])
        k, v, _, _, _ = events[7]
        if (k, v + 1) not in used:
            events.append((k, v + 1, "u", f"second event in the batch-{k}", 1.5))
            latest[k] = max(latest[k], v + 1)
        # a delete of a key that never existed
        events.append((KEYS + 100 + b, 1, "d", "ghost", 0.0))
        rnd.shuffle(events)  # arrival order inside a batch means nothing; the version decides
        batches.append(events)
    return batches


def dedupe(batch):
    """The winning event per key in a batch: the highest version (the generator never gives two *different*
    events of a key the same version within a batch, so no tie-break is needed)."""
    winners = {}
    for e in batch:
        k, v = e[0], e[1]
        if k not in winners or v > winners[k][1]:
            winners[k] = e
        elif v == winners[k][1]:
            assert e == winners[k], "the generator must not produce ambiguous ties"
    return winners


class Reference:
    """Upsert semantics: per batch the highest version per key wins; it is applied when its version is >= the
    stored row's (ties: the newer write wins), else ignored; a winning 'd' deletes the stored row (hard
    delete: a later event with any version re-inserts the key)."""

    def __init__(self):
        self.state = {}
        self.ignored = 0  # late events (lower version than the stored row)
        self.reinserted = 0  # keys inserted again after a delete
        self.deleted_keys = set()

    def apply(self, batch):
        ins = upd = dele = 0
        for k, e in dedupe(batch).items():
            stored = self.state.get(k)
            if stored is not None and e[1] < stored[1]:
                self.ignored += 1
                continue
            if e[2] == "d":
                if stored is not None:
                    del self.state[k]
                    self.deleted_keys.add(k)
                    dele += 1
            else:
                if stored is None:
                    ins += 1
                    self.reinserted += k in self.deleted_keys
                else:
                    upd += 1
                self.state[k] = e
        return ins, upd, dele

    def rows(self):
        return sorted((k, e[1], e[3], e[4]) for k, e in self.state.items())


def events_csv(batches) -> str:
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(["id", "version", "op", "name", "amount", "batch"])
    for b, events in enumerate(batches, start=1):
        for k, v, op, name, amount in events:
            w.writerow([k, v, op, name, f"{amount:.2f}", b])
    return out.getvalue()


SCHEMA_YML = """
version: 2
seeds:
  - name: events
    config:
      column_types: {id: int, version: int, op: string, name: string, amount: "decimal(10,2)", batch: int}
"""

CDC_MODEL = """
{{ config(materialized='incremental', unique_key='id', precombine_field='version',
          delete_condition="op = 'd'") }}
select id, version, name,
       {% if var('fail', 0) %}cast(raise_error('boom: this batch cannot be written') as decimal(10,2)){% else %}amount{% endif %} as amount,
       op
from {{ ref('events') }} where batch = {{ var('batch') }}
"""

# dbt-spark's Hudi names (options.primaryKey / options.preCombineField), incremental_strategy 'merge', and a
# partitioned table (the partition is a function of the key, so a key never moves between partitions)
CDC_SPARK_NAMES = """
{{ config(materialized='incremental', incremental_strategy='merge', partition_by='bucket',
          options={'primaryKey': 'id', 'preCombineField': 'version'}, delete_condition="op = 'd'") }}
select id, version, name, amount, op, concat('b', cast(id % 3 as string)) as bucket
from {{ ref('events') }} where batch = {{ var('batch') }}
"""


def hudi_rs_rows(path):
    from hudi import HudiTableBuilder

    batches = HudiTableBuilder.from_base_uri(path).build().read()
    if not batches:
        return []
    t = pa.Table.from_batches(batches)
    return sorted((r["id"], r["version"], r["name"], float(r["amount"]))
                  for r in t.select(["id", "version", "name", "amount"]).to_pylist())


class TestCdcStream:
    @pytest.fixture(scope="class")
    def seeds(self):
        return {"events.csv": events_csv(generate_events()), "schema.yml": SCHEMA_YML}

    @pytest.fixture(scope="class")
    def models(self):
        return {"cdc.sql": CDC_MODEL, "cdc_spark_names.sql": CDC_SPARK_NAMES}

    def test_stream_matches_reference(self, project):
        s = project.test_schema
        batches = generate_events()
        run_dbt(["seed"])
        ref = Reference()
        for b, batch in enumerate(batches, start=1):
            expected_counts = ref.apply(batch)
            res = run_dbt(["run", "--vars", f"{{batch: {b}}}"])
            assert len(res.results) == 2
            for r in res.results:
                resp = r.adapter_response
                got = (resp["rows_inserted"], resp["rows_updated"], resp["rows_deleted"])
                if b == 1:  # first build: the de-duplicated, non-deleted events are inserted
                    assert resp["operation"] == "insert", r.node.name
                    assert got == (expected_counts[0], 0, 0), (r.node.name, b)
                else:
                    assert resp["operation"] == "upsert", r.node.name
                    assert got == expected_counts, (r.node.name, b)
                    assert resp["rows_affected"] == sum(expected_counts)
            want = ref.rows()
            assert len(want) > 10  # the stream keeps a meaningful table alive
            for m in ("cdc", "cdc_spark_names"):
                got = sorted((r[0], r[1], r[2], float(r[3])) for r in project.run_sql(
                    f"select id, version, name, amount from {s}.{m}", fetch="all"))
                assert got == [(k, v, n, float(a)) for k, v, n, a in want], (m, b)
        # the stream exercised what it claims to: late events ignored, deletes applied, deleted keys re-inserted
        assert ref.ignored > 0 and ref.deleted_keys and ref.reinserted > 0, (ref.ignored, ref.reinserted)

        # a batch that fails while it is written: the command fails with the cause, the table is as it was
        path = table_dir(project, "cdc")
        before = [i.timestamp for i in HoodieTable.open(path).timeline.completed()]
        _, out = run_dbt_and_capture(["run", "-s", "cdc", "--vars", "{batch: 1, fail: 1}"], expect_pass=False)
        assert "boom: this batch cannot be written" in out
        assert [i.timestamp for i in HoodieTable.open(path).timeline.completed()] == before
        got = sorted((r[0], r[1], r[2], float(r[3])) for r in project.run_sql(
            f"select id, version, name, amount from {s}.cdc", fetch="all"))
        want = [(k, v, n, float(a)) for k, v, n, a in ref.rows()]
        assert got == want

        # the table directory is an ordinary Hudi table: hudi-rs reads exactly the same rows
        for m in ("cdc", "cdc_spark_names"):
            assert hudi_rs_rows(table_dir(project, m)) == want, m
