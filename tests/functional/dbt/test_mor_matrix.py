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
    out["schema.yml"] = MODEL_YML
    return out


class Expected:
    """Every model's rows, computed from the events alone."""

    def __init__(self):
        self.upsert = Reference()
        self.append, self.overwrite, self.delete_insert, self.merge_columns = [], {}, [], {}

    def apply(self, batch):
        self.upsert.apply(batch)
        self.append += [(e[0], e[1]) for e in batch]
        rows = [(e[0], e[1], e[0] % 4) for e in batch]
        for b in {r[2] for r in rows}:
            self.overwrite[b] = [r for r in rows if r[2] == b]
        keys = {e[0] for e in batch}
        self.delete_insert = [r for r in self.delete_insert if r[0] not in keys] + [(e[0], e[1]) for e in batch]
        for k, e in dedupe(batch).items():
            old = self.merge_columns.get(k)
            self.merge_columns[k] = (k, e[1], e[3]) if old is None else (k, old[1], e[3])

    def models(self):
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
            out[f"snap_{tt}"] = ("id, version, name", sorted((k, v, n) for k, v, n, _ in up))
        return out


def _visible(project, expected):
    s = project.test_schema
    got = {}
    for m, (cols, _) in expected.items():
        where = " where dbt_valid_to is null" if m.startswith("snap_") else ""
        got[m] = sorted(tuple(float(x) if hasattr(x, "as_tuple") else x for x in r)
                        for r in project.run_sql(f"select {cols} from {s}.{m}{where}", fetch="all"))
    return got


def _hudi_rs(project, m, cols):
    t = read_hudi_rs(table_dir(project, m))
    names = [c.split(" as ")[0].replace("cast(", "").strip() for c in cols.split(", ")]
    if t is None:
        return []
    rows = t.select(names).to_pylist()
    return sorted(tuple(float(r[n]) if n in ("amount", "top") and r[n] is not None else r[n] for n in names)
                  for r in rows)


class TestMergeOnReadMatrix:
    @pytest.fixture(scope="class")
    def seeds(self):
        return {"events.csv": events_csv(generate_events()[:RUNS]), "schema.yml": SCHEMA_YML}

    @pytest.fixture(scope="class")
    def models(self):
        return _models()

    @pytest.fixture(scope="class")
    def snapshots(self):
        return {f"snap_{tt}.sql": SNAPSHOT.format(tt=tt) for tt in TYPES}

    def test_every_run_matches_reference(self, project):
        exp = Expected()
        run_dbt(["seed"])
        for b, batch in enumerate(generate_events()[:RUNS], start=1):
            exp.apply(batch)
            run_dbt(["run", "--vars", f"{{batch: {b}}}"])
            run_dbt(["snapshot"])
            want = exp.models()
            got = _visible(project, want)
            for m, (_, rows) in want.items():
                assert got[m] == rows, (m, b)
            for tt in TYPES:  # the table directories are what the entries show
                for m in (f"upsert_{tt}", f"delete_insert_{tt}", f"merge_columns_{tt}", f"changes_{tt}"):
                    assert _hudi_rs(project, m, want[m][0]) == want[m][1], (m, b, "hudi-rs")
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
