"""dbt-tests-adapter suite (dbt-tests-adapter 1.20, dbt-core 1.11) against `type: hudilite`.

Same session strategy and profile as tests/functional/dbt (tests/functional/dbt_fixtures.py): the whole adapter
suite runs in the suite's one JVM with no start-up per dbt invocation. Each test class gets its own project
directory and therefore its own warehouse (<project>/warehouse) and schema.
"""

from dbt.tests.fixtures.project import *  # noqa: F401,F403 - dbt's harness fixtures (project, adapter, ...)

from tests.functional.dbt_fixtures import _one_spark_session, dbt_profile_target, logs_dir  # noqa: F401
