"""dbt-tests-adapter `utils.test_timestamps` against `type: hudilite`."""

import pytest
from dbt.tests.adapter.utils.test_timestamps import BaseCurrentTimestamps


class TestCurrentTimestampsHudilite(BaseCurrentTimestamps):
    # Spark has one timestamp type (session-time-zone based, `timestamp`), as in dbt-spark's override
    @pytest.fixture(scope="class")
    def expected_schema(self):
        return {
            "current_timestamp": "timestamp",
            "current_timestamp_in_utc_backcompat": "timestamp",
            "current_timestamp_backcompat": "timestamp",
        }

    # the SQL the spark__ implementations render (the base class expects Postgres' `now()` and `at time zone`):
    # checks that hudilite dispatches these macros to dbt-spark's
    @pytest.fixture(scope="class")
    def expected_sql(self):
        return """
        select current_timestamp() as current_timestamp,
               current_timestamp::timestamp as current_timestamp_in_utc_backcompat,
               current_timestamp::timestamp as current_timestamp_backcompat
        """
