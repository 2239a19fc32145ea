"""Merge-on-read and copy-on-write models side by side over three `dbt run`s of a change stream with
inserts, updates and deletes (issue 19 item 1): after every run each model equals a reference computed here
in plain Python from the seed rows, hudi-rs reads the same rows from the table directory, and a compaction
plus a clean of every merge-on-read table between runs changes nothing any model shows.

One project holds every variant (materialization/strategy x table type), so each batch is one `dbt run`."""

import pytest
from dbt.tests.util import run_dbt

from hudilite.services.clean import run_clean
from hudilite.services.compaction import compact
from hudilite.table import HoodieTable

from tests.functional.dbt.conftest import table_dir
from tests.functional.dbt.test_cdc import SCHEMA_YML, Reference, dedupe, events_csv, generate_events
from tests.hudi_rs import read_hudi_rs

RUNS = 3
TYPES = ("cow", "mor")

UPSERT = """{{{{ config(materialized='incremental', unique_key='id', precombine_field='version',
          delete_condition="op = 'd'", table_type='{tt}', partition_by='bucket'{extra}) }}}}
select id, version, name, amount, op, id % 3 as bucket from {{{{ ref('events') }}}} where batch = {{{{ var('batch') }}}}
"""
APPEND = """{{{{ config(materialized='incremental', incremental_strategy='append', table_type='{tt}') }}}}
select id, version from {{{{ ref('events') }}}} where batch = {{{{ var('batch') }}}}
"""
OVERWRITE = """{{{{ config(materialized='incremental', incremental_strategy='insert_overwrite', partition_by='bucket',
          table_type='{tt}') }}}}
select id, version, id % 4 as bucket from {{{{ ref('events') }}}} where batch = {{{{ var('batch') }}}}
"""
DELETE_INSERT = """{{{{ config(materialized='incremental', incremental_strategy='delete+insert', unique_key='id',
          table_type='{tt}') }}}}
select id, version from {{{{ ref('events') }}}} where batch = {{{{ var('batch') }}}}
"""
MERGE_COLUMNS = """{{{{ config(materialized='incremental', unique_key='id', merge_update_columns=['name'],
          table_type='{tt}') }}}}
select id, version, name from (
  select *, row_number() over (partition by id order by version desc) as rn
  from {{{{ ref('events') }}}} where batch = {{{{ var('batch') }}}}) where rn = 1
"""
MERGE_EXCLUDE = """{{{{ config(materialized='incremental', unique_key='id', merge_exclude_columns=['name'],
          table_type='{tt}') }}}}
select id, version, name, amount from (
  select *, row_number() over (partition by id order by version desc) as rn
  from {{{{ ref('events') }}}} where batch = {{{{ var('batch') }}}}) where rn = 1
"""
# stored rows with amount >= 500 (or null) are protected: batch rows with their keys are not applied
PREDICATES = """{{{{ config(materialized='incremental', unique_key='id', precombine_field='version',
          delete_condition="op = 'd'", incremental_predicates=["DBT_INTERNAL_DEST.amount < 500"],
          table_type='{tt}') }}}}
select id, version, name, amount, op from {{{{ ref('events') }}}} where batch = {{{{ var('batch') }}}}
"""
# stored rows with an odd version are not deleted: the batch row is inserted beside them
PREDICATES_DI = """{{{{ config(materialized='incremental', incremental_strategy='delete+insert', unique_key='id',
          incremental_predicates=["DBT_INTERNAL_DEST.version % 2 = 0"], table_type='{tt}') }}}}
select id, version from {{{{ ref('events') }}}} where batch = {{{{ var('batch') }}}}
"""
# the source gains a column in runs 2 and 3 (append_new_columns); gains one in run 2 and loses one in
# run 3 (sync_all_columns)
SCHEMA_CHANGE = """{{{{ config(materialized='incremental', unique_key='id', precombine_field='version',
          on_schema_change='{osc}', table_type='{tt}') }}}}
select {{{{ {cols!r}[var('batch', 1) - 1] }}}}, op = 'd' as _hoodie_is_deleted
from {{{{ ref('events') }}}} where batch = {{{{ var('batch') }}}}
"""
OSC_COLUMNS = {
    "append_new_columns": ["id, version, name", "id, version, name, amount",
                           "id, version, name, amount, id % 7 as lucky"],
    "sync_all_columns": ["id, version, name, amount", "id, version, name, amount, id % 7 as lucky",
                         "id, version, amount, id % 7 as lucky"],
}
TABLE = """{{{{ config(materialized='table', table_type='{tt}') }}}}
select id, version, name from {{{{ ref('upsert_mor') }}}} where version % 2 = 0
"""
CHANGES = """{{{{ config(materialized='incremental', unique_key='id', table_type='{tt}') }}}}
select id, version, name, amount, _change_op = 'D' as _hoodie_is_deleted
from {{{{ hudilite.changes(ref('upsert_mor')) }}}}
"""
AGGREGATE = """{{{{ config(materialized='aggregate', table_type='{tt}') }}}}
select bucket, count(*) as n, sum(version) as sv, max(amount) as top from {{{{ ref('upsert_mor') }}}} group by bucket
"""
SNAPSHOT = """{{% snapshot snap_{tt} %}}
{{{{ config(unique_key='id', strategy='check', check_cols=['version', 'name'], hard_deletes='invalidate',
          target_schema=schema, table_type='{tt}') }}}}
select id, version, name from {{{{ ref('upsert_mor') }}}}
{{% endsnapshot %}}
"""
# updated_at grows with the version: a new version of a row is a change, a re-inserted key too (new_record)
SNAPSHOT_TS = """{{% snapshot snap_ts_{tt} %}}
{{{{ config(unique_key='id', strategy='timestamp', updated_at='updated_at', hard_deletes='new_record',
          target_schema=schema, table_type='{tt}') }}}}
select id, version, name, timestamp_seconds(1700000000 + version * 60) as updated_at from {{{{ ref('upsert_mor') }}}}
{{% endsnapshot %}}
"""
MODEL_YML = """
version: 2
models:
""" + "".join(f"""  - name: upsert_wap_{tt}
    columns:
      - name: id
        data_tests: [unique, not_null]
""" for tt in TYPES)


def _models():
    out = {}
    for tt in TYPES:
        out[f"upsert_{tt}.sql"] = UPSERT.format(tt=tt, extra="")
        out[f"upsert_wap_{tt}.sql"] = UPSERT.format(tt=tt, extra=", audit_before_publish=true, mark_ready=true")
        out[f"append_{tt}.sql"] = APPEND.format(tt=tt)
        out[f"overwrite_{tt}.sql"] = OVERWRITE.format(tt=tt)
        out[f"delete_insert_{tt}.sql"] = DELETE_INSERT.format(tt=tt)
        out[f"merge_columns_{tt}.sql"] = MERGE_COLUMNS.format(tt=tt)
        out[f"changes_{tt}.sql"] = CHANGES.format(tt=tt)
        out[f"aggregate_{tt}.sql"] = AGGREGATE.format(tt=tt)
        out[f"merge_exclude_{tt}.sql"] = MERGE_EXCLUDE.format(tt=tt)
        out[f"predicates_{tt}.sql"] = PREDICATES.format(tt=tt)
        out[f"predicates_di_{tt}.sql"] = PREDICATES_DI.format(tt=tt)
        for osc, cols in OSC_COLUMNS.items():
            out[f"osc_{osc.split('_')[0]}_{tt}.sql"] = SCHEMA_CHANGE.format(tt=tt, osc=osc, cols=cols)
        out[f"table_{tt}.sql"] = TABLE.format(tt=tt)
    out["schema.yml"] = MODEL_YML
    return out


def _value(e, col):
    """A model column's value for event e = (id, version, op, name, amount)."""
    return {"id": e[0], "version": e[1], "name": e[3], "amount": float(e[4]), "lucky": e[0] % 7}[col]


class SchemaChangeReference:
    """Upsert (Reference's rules) of rows whose columns change by run: a row holds the columns of the run that
    last wrote it; the table shows the columns on_schema_change leaves (a column nobody wrote reads null)."""

    def __init__(self, osc):
        self.osc, self.state, self.columns = osc, {}, []

    def apply(self, batch, b):
        cols = [c.split(" as ")[-1].strip() for c in OSC_COLUMNS[self.osc][b - 1].split(", ")]
        if self.osc == "sync_all_columns" or not self.columns:
            self.columns = cols
        else:
            self.columns += [c for c in cols if c not in self.columns]
        for k, e in dedupe(batch).items():
            stored = self.state.get(k)
            if stored is not None and e[1] < stored["version"]:
                continue
            if e[2] == "d":
                self.state.pop(k, None)
            else:
                self.state[k] = {c: _value(e, c) for c in cols}

    def rows(self):
        return sorted(tuple(r.get(c) for c in self.columns) for r in self.state.values())


class SnapshotReference:
    """dbt's snapshot semantics over the source rows of each run (id -> (version, name)): a changed or new key
    closes its current record and adds one; a key gone from the source is closed ('invalidate') or closed and
    followed by a current record marked deleted ('new_record'; a key coming back closes that one)."""

    def __init__(self, strategy, hard_deletes):
        self.strategy, self.hard_deletes = strategy, hard_deletes
        self.records = []  # dicts: id, version, name, current, deleted

    def _changed(self, cur, version, name):
        if self.strategy == "timestamp":  # dbt_valid_from (= the stored updated_at) < the source's updated_at
            return cur["version"] < version
        return (cur["version"], cur["name"]) != (version, name)

    def apply(self, source):
        current = {r["id"]: r for r in self.records if r["current"]}
        for k, (version, name) in source.items():
            cur = current.get(k)
            if cur is not None and not (self._changed(cur, version, name) or cur["deleted"]):
                continue
            if cur is not None:
                cur["current"] = False
            self.records.append({"id": k, "version": version, "name": name, "current": True, "deleted": False})
        for k, cur in current.items():
            if k in source or cur["deleted"]:
                continue
            cur["current"] = False
            if self.hard_deletes == "new_record":
                self.records.append({**cur, "current": True, "deleted": True})

    def rows(self):
        if self.hard_deletes == "new_record":
            return sorted((r["id"], r["version"], r["name"], r["current"], str(r["deleted"]))
                          for r in self.records)
        return sorted((r["id"], r["version"], r["name"], r["current"]) for r in self.records)


class Expected:
    """Every model's rows, computed from the events alone."""

    def __init__(self):
        self.upsert = Reference()
        self.append, self.overwrite, self.delete_insert, self.merge_columns = [], {}, [], {}
        self.merge_exclude, self.predicates, self.predicates_di = {}, {}, []
        self.osc = {osc: SchemaChangeReference(osc) for osc in OSC_COLUMNS}
        self.snap = SnapshotReference("check", "invalidate")
        self.snap_ts = SnapshotReference("timestamp", "new_record")

    def apply(self, batch, b):
        self.upsert.apply(batch)
        self.append += [(e[0], e[1]) for e in batch]
        rows = [(e[0], e[1], e[0] % 4) for e in batch]
        for bucket in {r[2] for r in rows}:
            self.overwrite[bucket] = [r for r in rows if r[2] == bucket]
        keys = {e[0] for e in batch}
        self.delete_insert = [r for r in self.delete_insert if r[0] not in keys] + [(e[0], e[1]) for e in batch]
        self.predicates_di = [r for r in self.predicates_di if r[0] not in keys or r[1] % 2 == 1] + \
            [(e[0], e[1]) for e in batch]
        for k, e in dedupe(batch).items():
            old = self.merge_columns.get(k)
            self.merge_columns[k] = (k, e[1], e[3]) if old is None else (k, old[1], e[3])
            old = self.merge_exclude.get(k)
            self.merge_exclude[k] = (k, e[1], e[3] if old is None else old[2], float(e[4]))
            stored = self.predicates.get(k)
            if stored is not None and (e[1] < stored[1] or not stored[3] < 500):
                continue  # a late event, or a protected stored row
            if e[2] == "d":
                self.predicates.pop(k, None)
            else:
                self.predicates[k] = (k, e[1], e[3], float(e[4]))
        for r in self.osc.values():
            r.apply(batch, b)
        source = {k: (v, n) for k, v, n, _ in self.upsert.rows()}
        self.snap.apply(source)
        self.snap_ts.apply(source)

    def models(self):
        """model -> (the select list to compare, the expected rows)."""
        up = [(k, v, n, float(a)) for k, v, n, a in self.upsert.rows()]
        groups = {}
        for k, v, n, a in up:
            g = groups.setdefault(k % 3, [0, 0, None])
            g[0] += 1
            g[1] += v
            g[2] = a if g[2] is None else max(g[2], a)
        out = {}
        for tt in TYPES:
            out[f"upsert_{tt}"] = ("id, version, name, cast(amount as double)", up)
            out[f"upsert_wap_{tt}"] = out[f"upsert_{tt}"]
            out[f"changes_{tt}"] = out[f"upsert_{tt}"]
            out[f"append_{tt}"] = ("id, version", sorted(self.append))
            out[f"overwrite_{tt}"] = ("id, version, bucket", sorted(r for rs in self.overwrite.values() for r in rs))
            out[f"delete_insert_{tt}"] = ("id, version", sorted(self.delete_insert))
            out[f"merge_columns_{tt}"] = ("id, version, name", sorted(self.merge_columns.values()))
            out[f"aggregate_{tt}"] = ("bucket, n, sv, cast(top as double)",
                                      sorted((b, g[0], g[1], g[2]) for b, g in groups.items()))
            out[f"merge_exclude_{tt}"] = ("id, version, name, cast(amount as double)",
                                          sorted(self.merge_exclude.values()))
            out[f"predicates_{tt}"] = ("id, version, name, cast(amount as double)", sorted(self.predicates.values()))
            out[f"predicates_di_{tt}"] = ("id, version", sorted(self.predicates_di))
            for osc, r in self.osc.items():
                cols = ", ".join(f"cast({c} as double)" if c == "amount" else c for c in r.columns)
                out[f"osc_{osc.split('_')[0]}_{tt}"] = (cols, r.rows())
            out[f"table_{tt}"] = ("id, version, name", sorted((k, v, n) for k, v, n, _ in up if v % 2 == 0))
            out[f"snap_{tt}"] = ("id, version, name, dbt_valid_to is null", self.snap.rows())
            out[f"snap_ts_{tt}"] = ("id, version, name, dbt_valid_to is null, dbt_is_deleted", self.snap_ts.rows())
        return out


def _visible(project, expected):
    s = project.test_schema
    got = {}
    for m, (cols, _) in expected.items():
        got[m] = sorted(tuple(float(x) if hasattr(x, "as_tuple") else x for x in r)
                        for r in project.run_sql(f"select {cols} from {s}.{m}", fetch="all"))
    return got


def _hudi_rs(project, m, cols):
    """The rows hudi-rs reads from the model's table directory, as the select list `cols` shows them."""
    t = read_hudi_rs(table_dir(project, m))
    if t is None:
        return []
    getters = []
    for c in cols.split(", "):
        if c.startswith("cast("):
            name = c[len("cast("):].split(" as ")[0]
            getters.append(lambda r, n=name: None if r[n] is None else float(r[n]))
        elif c.endswith(" is null"):
            getters.append(lambda r, n=c[:-len(" is null")]: r[n] is None)
        else:
            getters.append(lambda r, n=c: r[n])
    return sorted(tuple(g(r) for g in getters) for r in t.to_pylist())


class TestMergeOnReadMatrix:
    @pytest.fixture(scope="class")
    def seeds(self):
        return {"events.csv": events_csv(generate_events()[:RUNS]), "schema.yml": SCHEMA_YML}

    @pytest.fixture(scope="class")
    def models(self):
        return _models()

    @pytest.fixture(scope="class")
    def snapshots(self):
        return {**{f"snap_{tt}.sql": SNAPSHOT.format(tt=tt) for tt in TYPES},
                **{f"snap_ts_{tt}.sql": SNAPSHOT_TS.format(tt=tt) for tt in TYPES}}

    def test_every_run_matches_reference(self, project):
        exp = Expected()
        run_dbt(["seed"])
        for b, batch in enumerate(generate_events()[:RUNS], start=1):
            exp.apply(batch, b)
            run_dbt(["run", "--vars", f"{{batch: {b}}}"])
            run_dbt(["snapshot"])
            want = exp.models()
            got = _visible(project, want)
            for m, (_, rows) in want.items():
                assert got[m] == rows, (m, b)
            for tt in TYPES:  # a column the source gained is shown, one it lost (sync) is not
                for osc, r in exp.osc.items():
                    m = f"osc_{osc.split('_')[0]}_{tt}"
                    shown = [c[0] for c in project.run_sql(f"describe {project.test_schema}.{m}", fetch="all")]
                    assert [c for c in shown if c and not c.startswith("#")] == r.columns, (m, b)
            for m, (cols, rows) in want.items():  # the table directories hold what the entries show
                assert _hudi_rs(project, m, cols) == rows, (m, b, "hudi-rs")
            for tt in TYPES:
                assert HoodieTable.open(table_dir(project, f"upsert_{tt}")).config.table_type == \
                    ("MERGE_ON_READ" if tt == "mor" else "COPY_ON_WRITE")
            if b > 1:  # later runs wrote log files: the MOR entries really merge
                assert any(s.log_files for s in HoodieTable.open(table_dir(project, "upsert_mor")).view()
                           .latest_slices(HoodieTable.open(table_dir(project, "upsert_mor")).partitions()))
            run_dbt(["test"])
            # table services between runs change nothing a model shows
            for m in want:
                if m.endswith("_mor"):
                    compact(table_dir(project, m), force=True)
                    run_clean(table_dir(project, m), {"hoodie.cleaner.commits.retained": "1"})
            assert _visible(project, want) == got, b
        # the stream exercised what the models claim to handle
        assert exp.predicates != {k: (k, e[1], e[3], float(e[4])) for k, e in exp.upsert.state.items()}
        assert any(r[1] % 2 for r in exp.predicates_di) and len({r[0] for r in exp.predicates_di}) < \
            len(exp.predicates_di)
        assert any(r["deleted"] for r in exp.snap_ts.records) and any(
            not r["current"] for r in exp.snap.records if r["id"] not in exp.upsert.state)
