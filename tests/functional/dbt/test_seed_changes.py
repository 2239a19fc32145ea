"""A model that consumes a seed's changes by a business key (`hudilite.changes(ref('seed'))`, the change ops as
Hudi's delete marker) equals the seed after every re-seed. A seed is rebuilt under new row ids each time, so
each of its rows arrives as a 'D' of its old id and an 'I' of its new one; change reads list deletes first
(hudilite.reader.changes), so the new row wins (before, the consumer lost a row whenever its 'I' came first)."""

import os

import pytest
from dbt.tests.util import run_dbt

CUSTOMERS = 'cid,name,country\nc1,"Doe, Jane",US\nc2,Jürgen,DE\nc3,,FR\nc4,New Co,IT\nc5,Ada,UK\nc6,Bo,SE\n'

CONSUMER = """
{{{{ config(materialized='incremental', unique_key='cid'{extra}) }}}}
select cid, name, country, _change_op = 'D' as _hoodie_is_deleted from {{{{ hudilite.changes(ref('customers')) }}}}
"""

SEEDS_YML = """
seeds:
  - name: customers
    config:
      column_types: {cid: string}
"""


class TestSeedChangeConsumer:
    @pytest.fixture(scope="class")
    def seeds(self):
        return {"customers.csv": CUSTOMERS, "schema.yml": SEEDS_YML}

    @pytest.fixture(scope="class")
    def models(self):
        return {"cust_cdc.sql": CONSUMER.format(extra=""),
                "cust_cdc_mor.sql": CONSUMER.format(extra=", table_type='mor'")}

    def test_consumer_equals_the_seed_after_each_reseed(self, project):
        s = project.test_schema
        csv_path = os.path.join(str(project.project_root), "seeds", "customers.csv")
        lines = CUSTOMERS.splitlines()
        # rounds: the seed as it is, one value edited, a row removed and one added, nothing changed
        rounds = [lines, lines[:4] + ["c4,New Co3,IT"] + lines[5:],
                  lines[:2] + lines[3:4] + ["c4,New Co3,IT"] + lines[5:] + ["c7,Cy,NO"]]
        rounds.append(rounds[-1])
        for i, rows in enumerate(rounds):
            with open(csv_path, "w", encoding="utf-8") as f:
                f.write("\n".join(rows) + "\n")
            run_dbt(["seed"])
            run_dbt(["run"])
            want = sorted(tuple(r) for r in project.run_sql(
                f"select cid, name, country from {s}.customers", fetch="all"))
            assert len(want) == len(rows) - 1
            for model in ("cust_cdc", "cust_cdc_mor"):
                got = sorted(tuple(r) for r in project.run_sql(
                    f"select cid, name, country from {s}.{model}", fetch="all"))
                assert got == want, (i, model)
