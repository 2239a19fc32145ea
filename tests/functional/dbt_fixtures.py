"""The fixtures both dbt suites (tests/functional/dbt, tests/functional/adapter) put next to dbt's harness
fixtures in their conftest.py.

Session strategy: a process has one SparkContext and the suite already has one (tests/conftest.py `spark`), so
it is started first and the adapter *reuses* it (`reuse_session: auto`, in a `newSession()` of its own: own
SQL conf and temp views, shared catalog). Every dbt invocation runs without JVM start-up; each test class gets
its own project directory and therefore its own warehouse (<project>/warehouse) and schema.
"""

import pytest


@pytest.fixture(scope="session", autouse=True)
def _one_spark_session(spark):
    """Start the suite's SparkSession before any dbt adapter opens: the adapter then reuses it."""
    yield spark


@pytest.fixture(scope="class")
def dbt_profile_target():
    # `user` is required by dbt's docs tests (BaseDocsGenerate: the catalog's owner); no warehouse: the default
    # <project dir>/warehouse is used.
    return {"type": "hudilite", "threads": 2, "master": "local[2]", "user": "dbt"}


@pytest.fixture(scope="class")
def logs_dir(tmp_path_factory, prefix):
    """dbt's harness writes logs under <rootdir>/logs; keep them out of the source tree."""
    return str(tmp_path_factory.mktemp("dbt-logs") / prefix)
