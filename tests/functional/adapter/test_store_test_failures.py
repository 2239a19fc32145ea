"""dbt-tests-adapter `store_test_failures_tests` classes against `type: hudilite` (stored failures are hudilite
tables, or views with `store_failures_as: view`)."""

from dbt.tests.adapter.store_test_failures_tests.basic import (
    StoreTestFailuresAsExceptions,
    StoreTestFailuresAsGeneric,
    StoreTestFailuresAsInteractions,
    StoreTestFailuresAsProjectLevelEphemeral,
    StoreTestFailuresAsProjectLevelOff,
    StoreTestFailuresAsProjectLevelView,
)
from dbt.tests.adapter.store_test_failures_tests.test_store_test_failures import (
    BaseStoreTestFailures,
    BaseStoreTestFailuresLimit,
)


class TestStoreTestFailuresHudilite(BaseStoreTestFailures):
    pass


class TestStoreTestFailuresLimitHudilite(BaseStoreTestFailuresLimit):
    pass


class TestStoreTestFailuresAsInteractionsHudilite(StoreTestFailuresAsInteractions):
    pass


class TestStoreTestFailuresAsProjectLevelOffHudilite(StoreTestFailuresAsProjectLevelOff):
    pass


class TestStoreTestFailuresAsProjectLevelViewHudilite(StoreTestFailuresAsProjectLevelView):
    pass


class TestStoreTestFailuresAsProjectLevelEphemeralHudilite(StoreTestFailuresAsProjectLevelEphemeral):
    pass


class TestStoreTestFailuresAsGenericHudilite(StoreTestFailuresAsGeneric):
    pass


class TestStoreTestFailuresAsExceptionsHudilite(StoreTestFailuresAsExceptions):
    pass
