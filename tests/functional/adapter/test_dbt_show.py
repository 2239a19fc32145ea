"""dbt-tests-adapter `dbt_show` classes against `type: hudilite`."""

from dbt.tests.adapter.dbt_show.test_dbt_show import (
    BaseShowDoesNotHandleDoubleLimit,
    BaseShowLimit,
    BaseShowSqlHeader,
)


class TestShowLimitHudilite(BaseShowLimit):
    pass


class TestShowSqlHeaderHudilite(BaseShowSqlHeader):
    pass


class TestShowDoesNotHandleDoubleLimitHudilite(BaseShowDoesNotHandleDoubleLimit):
    # the database's own parse error for `... limit 5 limit 7`, in Spark's wording (Postgres: `syntax error at
    # or near "limit"`)
    DATABASE_ERROR_MESSAGE = "Syntax error at or near 'limit'"
