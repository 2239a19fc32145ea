"""dbt-tests-adapter `query_comment` classes against `type: hudilite`."""

from dbt.tests.adapter.query_comment.test_query_comment import (
    BaseEmptyQueryComments,
    BaseMacroArgsQueryComments,
    BaseMacroInvalidQueryComments,
    BaseMacroQueryComments,
    BaseNullQueryComments,
    BaseQueryComments,
)


class TestQueryCommentsHudilite(BaseQueryComments):
    pass


class TestMacroQueryCommentsHudilite(BaseMacroQueryComments):
    pass


class TestMacroArgsQueryCommentsHudilite(BaseMacroArgsQueryComments):
    pass


class TestMacroInvalidQueryCommentsHudilite(BaseMacroInvalidQueryComments):
    pass


class TestNullQueryCommentsHudilite(BaseNullQueryComments):
    pass


class TestEmptyQueryCommentsHudilite(BaseEmptyQueryComments):
    pass
