"""dbt-tests-adapter `basic` classes against `type: hudilite` (every table, incremental, seed and snapshot is
a hudilite table)."""

import pytest
from dbt.tests.adapter.basic import expected_catalog
from dbt.tests.util import AnyInteger
from dbt.tests.adapter.basic.test_adapter_methods import BaseAdapterMethod
from dbt.tests.adapter.basic.test_base import BaseSimpleMaterializations
from dbt.tests.adapter.basic.test_docs_generate import BaseDocsGenerate
from dbt.tests.adapter.basic.test_empty import BaseEmpty
from dbt.tests.adapter.basic.test_ephemeral import BaseEphemeral
from dbt.tests.adapter.basic.test_generic_tests import BaseGenericTests
from dbt.tests.adapter.basic.test_incremental import BaseIncremental, BaseIncrementalNotSchemaChange
from dbt.tests.adapter.basic.test_singular_tests import BaseSingularTests
from dbt.tests.adapter.basic.test_singular_tests_ephemeral import BaseSingularTestsEphemeral
from dbt.tests.adapter.basic.test_snapshot_check_cols import BaseSnapshotCheckCols
from dbt.tests.adapter.basic.test_snapshot_timestamp import BaseSnapshotTimestamp
from dbt.tests.adapter.basic.test_table_materialization import BaseTableMaterialization
from dbt.tests.adapter.basic.test_validate_connection import BaseValidateConnection


def _snapshot_stats(rows: int) -> dict:
    """The docs catalog statistics of a hudilite table holding `rows` rows (its size varies with the writer)."""
    return {
        "has_stats": {"id": "has_stats", "label": "Has Stats?", "value": True,
                      "description": "Indicates whether there are statistics for this table", "include": False},
        "rows": {"id": "rows", "label": "Rows", "value": rows, "description": "rows in the latest snapshot",
                 "include": True},
        "bytes": {"id": "bytes", "label": "Bytes", "value": AnyInteger(),
                  "description": "size of the latest snapshot's base files", "include": True},
    }


class TestSimpleMaterializationsHudilite(BaseSimpleMaterializations):
    pass


class TestSingularTestsHudilite(BaseSingularTests):
    pass


class TestSingularTestsEphemeralHudilite(BaseSingularTestsEphemeral):
    pass


class TestEmptyHudilite(BaseEmpty):
    pass


class TestEphemeralHudilite(BaseEphemeral):
    pass


class TestIncrementalHudilite(BaseIncremental):
    pass


class TestIncrementalNotSchemaChangeHudilite(BaseIncrementalNotSchemaChange):
    pass


class TestGenericTestsHudilite(BaseGenericTests):
    pass


class TestSnapshotCheckColsHudilite(BaseSnapshotCheckCols):
    pass


class TestSnapshotTimestampHudilite(BaseSnapshotTimestamp):
    pass


class TestBaseAdapterMethodHudilite(BaseAdapterMethod):
    pass


class TestValidateConnectionHudilite(BaseValidateConnection):
    pass


class TestTableMaterializationHudilite(BaseTableMaterialization):
    pass


class TestDocsGenerateHudilite(BaseDocsGenerate):
    @pytest.fixture(scope="class")
    def expected_catalog(self, project, profile_user):
        # Spark's vocabulary for the same catalog: Spark type names — the seed's integer column is `bigint`
        # (dbt-spark's convert_integer_type), text is `string`, timestamps `timestamp` — and relation types
        # as Spark reports them (table/view, not information_schema's BASE TABLE/VIEW). Views have no statistics;
        # the seed (a hudilite table) has its snapshot's rows and bytes from commit metadata.
        # The owner is the profile's `user` (Spark's in-memory catalog records none).
        return expected_catalog.base_expected_catalog(
            project,
            role=profile_user,
            id_type="bigint",
            text_type="string",
            time_type="timestamp",
            view_type="view",
            table_type="table",
            model_stats=expected_catalog.no_stats(),
            seed_stats=_snapshot_stats(rows=1),
        )
