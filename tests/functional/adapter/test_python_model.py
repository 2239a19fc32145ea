"""Python models (`def model(dbt, session)`) on `type: hudilite`: run in the dbt process on the adapter's
SparkSession (dbt/adapters/hudilite/python_model.py) and written through the same hudilite write path as SQL
models. dbt-tests-adapter 1.20's python_model classes, then hudilite's own checks: a table model on both table
types with the model's table properties, an incremental upsert with precombine (dbt.is_incremental, dbt.this,
dbt.config.get), pandas and pyarrow results, and a failing model that leaves its table unchanged."""

import os

import pytest
from dbt.tests.adapter.python_model.test_python_model import (
    BasePythonEmptyTests,
    BasePythonIncrementalTests,
    BasePythonMetaGetTests,
    BasePythonModelTests,
    BasePythonSampleTests,
)
from dbt.tests.adapter.python_model.test_spark import PANDAS_MODEL, PYSPARK_MODEL
from dbt.tests.util import run_dbt, run_dbt_and_capture, write_file

import hudilite


class TestPythonModelHudilite(BasePythonModelTests):
    pass


class TestPythonIncrementalHudilite(BasePythonIncrementalTests):
    pass


class TestPythonMetaGetHudilite(BasePythonMetaGetTests):
    pass


class TestPythonEmptyHudilite(BasePythonEmptyTests):
    pass


class TestPythonSampleHudilite(BasePythonSampleTests):
    pass


class TestPythonPandasAndPysparkHudilite:
    """dbt-spark's test_spark models (its PANDAS_ON_SPARK and KOALAS models are Databricks runtime packages)."""

    @pytest.fixture(scope="class")
    def models(self):
        return {"pandas_model.py": PANDAS_MODEL, "pyspark_model.py": PYSPARK_MODEL}

    def test_models(self, project):
        results = run_dbt(["run"])
        assert len(results) == 2
        for name in ("pandas_model", "pyspark_model"):
            rows = project.run_sql(f"select City, Latitude from {project.test_schema}.{name} order by City",
                                   fetch="all")
            assert [(r[0], round(r[1], 2)) for r in rows][:2] == [("Bogota", 4.6), ("Brasilia", -15.78)]
            assert hudilite.Table.exists(os.path.join(str(project.project_root), "warehouse",
                                                      project.test_schema, name))


_SOURCE = """
{{ config(materialized='table') }}
select * from values (1, 'a', 10), (2, 'b', 10), (3, 'c', 10) as t(id, name, version)
"""

_PY_TABLE = """
def model(dbt, session):
    dbt.config(materialized='table')
    df = dbt.ref('src')
    return df.withColumn('name_len', df.name.substr(1, 1))
"""

_PY_UPSERT = """
import pyspark.sql.functions as F

def model(dbt, session):
    dbt.config(materialized='incremental', unique_key='id', precombine_field='version',
               options={'hoodie.parquet.small.file.limit': '0'})
    df = dbt.ref('src')
    if dbt.is_incremental:
        seen = session.sql(f"select max(version) as v from {dbt.this}").collect()[0].v
        df = df.filter(F.col('version') > seen)
    return df.withColumn('source', F.lit(dbt.config.get('unique_key')))
"""

_PY_PANDAS = """
import pandas as pd

def model(dbt, session):
    dbt.config(materialized='table')
    src = dbt.ref('src').toPandas()
    return pd.DataFrame({'id': src['id'], 'twice': src['version'] * 2})
"""

_PY_ARROW = """
import pyarrow as pa

def model(dbt, session):
    dbt.config(materialized='table', unique_key='id')
    return pa.table({'id': pa.array([1, 2], pa.int64()), 'label': pa.array(['x', 'y'])})
"""

_PY_FAILING = """
def model(dbt, session):
    dbt.config(materialized='table')
    df = dbt.ref('src')
    if df.count() > 3:
        raise ValueError('bad input in the python model')
    return df
"""


class _PythonModels:
    table_type = "cow"

    @pytest.fixture(scope="class")
    def models(self):
        return {"src.sql": _SOURCE, "py_table.py": _PY_TABLE, "py_upsert.py": _PY_UPSERT,
                "py_pandas.py": _PY_PANDAS, "py_arrow.py": _PY_ARROW, "py_failing.py": _PY_FAILING}

    @pytest.fixture(scope="class")
    def project_config_update(self):
        return {"models": {"+table_type": self.table_type}}

    @staticmethod
    def _path(project, name):
        return os.path.join(str(project.project_root), "warehouse", project.test_schema, name)

    def _rows(self, project, name, cols):
        return sorted(tuple(r) for r in project.run_sql(f"select {cols} from {project.test_schema}.{name}",
                                                        fetch="all"))

    def test_python_models(self, project):
        results = run_dbt(["run"])
        assert len(results) == 6
        want_type = {"cow": "COPY_ON_WRITE", "mor": "MERGE_ON_READ"}[self.table_type]
        for name in ("py_table", "py_upsert", "py_pandas", "py_arrow", "py_failing"):
            assert hudilite.Table.open(self._path(project, name)).info().table_type == want_type, name
        assert self._rows(project, "py_table", "id, name, name_len") == [(1, "a", "a"), (2, "b", "b"),
                                                                        (3, "c", "c")]
        assert self._rows(project, "py_pandas", "id, twice") == [(1, 20), (2, 20), (3, 20)]
        assert self._rows(project, "py_arrow", "id, label") == [(1, "x"), (2, "y")]
        assert self._rows(project, "py_upsert", "id, name, version, source") == [
            (1, "a", 10, "id"), (2, "b", 10, "id"), (3, "c", 10, "id")]
        upsert = hudilite.Table.open(self._path(project, "py_upsert"))
        layout = upsert.layout()
        assert list(layout.record_key) == ["id"] and layout.precombine_field == "version"
        commits = len(upsert.timeline.completed())

        # the upstream gets an update of key 2 and a new key 4: the incremental Python model upserts them
        write_file(_SOURCE.replace("(2, 'b', 10)", "(2, 'B', 11)").replace(
            "(3, 'c', 10)", "(3, 'c', 10), (4, 'd', 11)"), project.project_root, "models", "src.sql")
        run_dbt(["run", "-s", "src", "py_upsert"])
        assert self._rows(project, "py_upsert", "id, name, version") == [
            (1, "a", 10), (2, "B", 11), (3, "c", 10), (4, "d", 11)]
        assert len(upsert.timeline.completed()) == commits + 1  # one upsert commit

        # a failing model: the run fails with the user's traceback, its table keeps its rows and commits
        # (py_failing raises once src has more than 3 rows)
        failing = hudilite.Table.open(self._path(project, "py_failing"))
        before = (len(failing.timeline.completed()), self._rows(project, "py_failing", "id, name"))
        _, out = run_dbt_and_capture(["run", "-s", "py_failing"], expect_pass=False)
        assert "ValueError: bad input in the python model" in out
        assert "in model" in out and "raise ValueError" in out  # the traceback names the model's own line
        assert (len(failing.timeline.completed()), self._rows(project, "py_failing", "id, name")) == before


class TestPythonModelsCowHudilite(_PythonModels):
    table_type = "cow"


class TestPythonModelsMorHudilite(_PythonModels):
    table_type = "mor"


_PY_MICROBATCH = """
def model(dbt, session):
    dbt.config(materialized='incremental', incremental_strategy='microbatch', event_time='event_time',
               batch_size='day', begin='2020-01-01')
    return dbt.ref('events')
"""

_EVENTS = """
{{ config(materialized='table', event_time='event_time') }}
select 1 as id, timestamp '2020-01-01 01:00:00' as event_time
"""


class TestPythonMicrobatchRefusedHudilite:
    @pytest.fixture(scope="class")
    def models(self):
        return {"events.sql": _EVENTS, "py_mb.py": _PY_MICROBATCH}

    def test_refused(self, project):
        run_dbt(["run", "-s", "events"])
        _, out = run_dbt_and_capture(["run", "-s", "py_mb", "--event-time-start", "2020-01-01",
                                      "--event-time-end", "2020-01-02"], expect_pass=False)
        assert "not supported for Python models" in out, out
        assert not hudilite.Table.exists(os.path.join(str(project.project_root), "warehouse",
                                                      project.test_schema, "py_mb"))
