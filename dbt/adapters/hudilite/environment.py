"""The process-wide hudilite environment of a dbt process: the SparkSession, the warehouse, every write a model
makes (dbt-duckdb style: the adapter and its connections are thin handles on it).

Split by concern: session.py (SparkSession, SQL), catalog.py (entries, publishing), dml.py (SQL DML on
hudilite tables), materialize.py (models and seeds), strategies.py (incremental strategies); run_state.py
holds what the current dbt invocation remembers per model (checkpoints read, publish options).
"""

from __future__ import annotations

import os
import threading

from dbt.adapters.hudilite.catalog import CatalogMixin
from dbt.adapters.hudilite.dml import DmlMixin
from dbt.adapters.hudilite.materialize import MaterializeMixin
from dbt.adapters.hudilite.run_state import RunState
from dbt.adapters.hudilite.session import SessionMixin
from dbt.adapters.hudilite.strategies import StrategiesMixin


class HudiliteEnvironment(SessionMixin, CatalogMixin, DmlMixin, MaterializeMixin, StrategiesMixin):
    def __init__(self, credentials, warehouse: str) -> None:
        self.credentials = credentials
        self.warehouse = warehouse
        self.metastore_dir = os.path.join(warehouse, ".metastore")
        self._spark = None
        self._lock = threading.RLock()
        self.catalog_kind = "not started"
        self.reused_session = False
        self.run = RunState()  # this dbt invocation's per-model state (checkpoints read, publish options)
