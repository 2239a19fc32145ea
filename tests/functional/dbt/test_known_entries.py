"""What a dbt invocation already knows of catalog entries it does not ask the catalog again (over Spark Connect
each ask is a round trip): a consumer reads the path of an upstream the same run just published, a model's own
entry described while its `hudilite.changes()` was compiled serves its build, and an aggregate finds its detail
the way the consumer does. A statement in between (here a pre-hook that changes the model's entry) makes the
build describe the entry again."""

import pytest
from dbt.tests.util import run_dbt, run_dbt_and_capture

from hudilite import metastore as ms
from tests.functional.dbt.conftest import table_dir
from tests.functional.dbt.test_upstream_rebuild import DETAIL  # batch 1: ids 1-3; batch 2: 1 updated, 4 new

CONSUMER = """
{{ config(materialized='incremental', unique_key='id', pre_hook=var('hook', [])) }}
select id, g, amt, _change_op = 'D' as _hoodie_is_deleted from {{ hudilite.changes(ref('detail')) }}
"""
AGG = """
{{ config(materialized='aggregate') }}
select g, count(*) as n, sum(amt) as total from {{ ref('consumer') }} group by g
"""
EXPECTED = [(1, "a", 15), (2, "a", 20), (3, "b", 5), (4, "a", 30)]
SHOW_PATH = """
{% macro show_path(name) %}
  {% set rel = api.Relation.create(schema=target.schema, identifier=name) %}
  {% do log('PATH=' ~ adapter.hudilite_table_path(rel), info=True) %}
{% endmacro %}
"""


@pytest.fixture
def described(monkeypatch):
    """The entries the adapter describes (identifier -> times)."""
    seen: dict = {}
    real = ms.describe

    def counting(spark, schema, identifier):
        seen[identifier] = seen.get(identifier, 0) + 1
        return real(spark, schema, identifier)

    monkeypatch.setattr(ms, "describe", counting)
    return seen


class TestKnownEntries:
    @pytest.fixture(scope="class")
    def models(self):
        return {"detail.sql": DETAIL, "consumer.sql": CONSUMER, "agg.sql": AGG}

    @pytest.fixture(scope="class")
    def macros(self):
        return {"show_path.sql": SHOW_PATH}

    def test_a_run_asks_the_catalog_once_per_entry(self, project, described):
        s = project.test_schema
        rows = lambda q: sorted(tuple(r) for r in project.run_sql(q, fetch="all"))  # noqa: E731
        run_dbt(["run", "--threads", "1"])
        described.clear()
        run_dbt(["run", "--threads", "1", "--vars", "{batch: 2}"])
        assert rows(f"select id, g, amt from {s}.consumer") == EXPECTED
        assert rows(f"select g, n, total from {s}.agg") == [("a", 3, 65), ("b", 1, 5)]
        # detail: its build; consumer: its compilation (checkpoint), the build reuses it; agg: its build. The
        # consumer's read of detail and the aggregate's of consumer use the paths this run published.
        assert described == {"detail": 1, "consumer": 1, "agg": 1}

    def test_a_statement_between_compile_and_build_makes_the_build_ask_again(self, project, described):
        s = project.test_schema
        hook = f"alter table {s}.consumer set tblproperties ('hudilite.hook' = 'x')"
        run_dbt(["run", "--threads", "1", "--vars", f"{{batch: 2, hook: \"{hook}\"}}", "--select", "consumer"])
        assert described == {"consumer": 2, "detail": 1}  # compile, then the build after the hook
        # the build saw the hook's property: the adapter's publish drops `hudilite.*` keys it did not set
        props = dict(tuple(r) for r in project.run_sql(f"show tblproperties {s}.consumer", fetch="all"))
        assert "hudilite.hook" not in props and props.get("hudilite.path")
        assert sorted(tuple(r) for r in project.run_sql(f"select id, g, amt from {s}.consumer", fetch="all")) \
            == EXPECTED

    def test_the_table_path_macro_method_asks_the_catalog_in_a_new_invocation(self, project, described):
        # `adapter.hudilite_table_path` in a run-operation: nothing published in this invocation, so it describes
        for name, want in (("detail", table_dir(project, "detail")), ("nowhere", "None")):
            _, out = run_dbt_and_capture(["run-operation", "show_path", "--args", f"{{name: {name}}}"])
            assert f"PATH={want}" in out, out[-2000:]
        assert described == {"detail": 1, "nowhere": 1}
