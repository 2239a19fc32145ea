"""dbt-tests-adapter `incremental` classes against `type: hudilite` (upsert / delete+insert through the core)."""

from dbt.tests.adapter.incremental.test_incremental_merge_exclude_columns import BaseMergeExcludeColumns
from dbt.tests.adapter.incremental.test_incremental_on_schema_change import BaseIncrementalOnSchemaChange
from dbt.tests.adapter.incremental.test_incremental_predicates import BaseIncrementalPredicates
from dbt.tests.adapter.incremental.test_incremental_unique_id import BaseIncrementalUniqueKey


class TestIncrementalUniqueKeyHudilite(BaseIncrementalUniqueKey):
    pass


class TestMergeExcludeColumnsHudilite(BaseMergeExcludeColumns):
    pass


class TestIncrementalPredicatesDeleteInsertHudilite(BaseIncrementalPredicates):
    pass


class TestIncrementalOnSchemaChangeHudilite(BaseIncrementalOnSchemaChange):
    pass
