"""dbt-tests-adapter suite (dbt-tests-adapter 1.20, dbt-core 1.11) against `type: hudilite`.

Same session strategy as tests/functional/dbt/conftest.py: the suite's one SparkSession (tests/conftest.py
`spark`) is started first and the adapter reuses it (`reuse_session: auto`, in a `newSession()` of its own),
so the whole adapter suite runs in one JVM with no start-up per dbt invocation. Each test class gets its own
project directory and therefore its own warehouse (<project>/warehouse) and schema.
"""

import pytest
from dbt.tests.fixtures.project import *  # noqa: F401,F403 - dbt's harness fixtures (project, adapter, ...)


@pytest.fixture(scope="session", autouse=True)
def _one_spark_session(spark):
    """Start the suite's SparkSession before any dbt adapter opens: the adapter then reuses it."""
    yield spark


@pytest.fixture(scope="class")
def dbt_profile_target():
    # `user` is required by BaseDocsGenerate (the catalog's owner); no warehouse: <project dir>/warehouse.
    return {"type": "hudilite", "threads": 2, "master": "local[2]", "user": "dbt"}


@pytest.fixture(scope="class")
def logs_dir(tmp_path_factory, prefix):
    """dbt's harness writes logs under <rootdir>/logs; keep them out of the source tree."""
    return str(tmp_path_factory.mktemp("dbt-logs") / prefix)
