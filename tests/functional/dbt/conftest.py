"""dbt functional tests for `type: hudilite`, run in-process with dbt's test harness.

Session strategy: a process has one SparkContext and the suite already has one (tests/conftest.py `spark`),
so these tests request it first and the adapter *reuses* it (`reuse_session: auto`, in a `newSession()` of
its own: own SQL conf and temp views, shared catalog). That keeps every dbt invocation here free of JVM
start-up; the catalog is then the plain session's in-memory catalog, which lives as long as the process, so
tables persist across the dbt invocations of a test. The embedded default itself — Hive catalog in a Derby
metastore per warehouse, persistence across processes, the locked-catalog error — is tested in
`test_embedded_catalog.py` with dbt in subprocesses.
"""

import os

from dbt.tests.fixtures.project import *  # noqa: F401,F403 - dbt's harness fixtures (project, adapter, ...)

from tests.functional.dbt_fixtures import _one_spark_session, dbt_profile_target, logs_dir  # noqa: F401


def table_dir(project, identifier: str) -> str:
    return os.path.join(str(project.project_root), "warehouse", project.test_schema, identifier)
