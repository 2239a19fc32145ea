"""dbt-tests-adapter `relations` classes against `type: hudilite`."""

from dbt.tests.adapter.relations.test_changing_relation_type import BaseChangeRelationTypeValidator
from dbt.tests.adapter.relations.test_dropping_schema_named import BaseDropSchemaNamed


class TestChangeRelationTypesHudilite(BaseChangeRelationTypeValidator):
    pass


class TestDropSchemaNamedHudilite(BaseDropSchemaNamed):
    pass
