"""The process-wide hudilite environment of a dbt process: the SparkSession, the warehouse, every write a model
makes (dbt-duckdb style: the adapter and its connections are thin handles on it).

Split by concern: session.py (SparkSession, SQL), catalog.py (entries, publishing), dml.py (SQL DML on
hudilite tables), materialize.py (models and seeds), strategies.py (incremental strategies), microbatch.py
(microbatch batches); run_state.py holds what the current dbt invocation remembers per model (checkpoints read,
publish options).
"""

from __future__ import annotations

import os
import threading
from typing import Optional

from dbt_common.exceptions import DbtRuntimeError

from dbt.adapters.hudilite.catalog import CatalogMixin
from dbt.adapters.hudilite.dml import DmlMixin
from dbt.adapters.hudilite.materialize import MaterializeMixin
from dbt.adapters.hudilite.microbatch import MicrobatchMixin
from dbt.adapters.hudilite.run_state import DeferredViews, KnownEntries, RunState
from dbt.adapters.hudilite.session import SessionMixin
from dbt.adapters.hudilite.strategies import StrategiesMixin
from hudilite.storage import bind_storage_options


class HudiliteEnvironment(SessionMixin, CatalogMixin, DmlMixin, MaterializeMixin, StrategiesMixin,
                          MicrobatchMixin):
    def __init__(self, credentials, warehouse: str, metastore_dir: Optional[str] = None) -> None:
        self.credentials = credentials
        self.warehouse = warehouse
        self.metastore_dir = metastore_dir or os.path.join(warehouse, ".metastore")
        if credentials.storage_options:
            # every table under the warehouse (and the Spark tasks that write or read them) reach the store
            # with the profile's options; the process-wide s3:// backend (AWS environment) serves the rest
            try:
                bind_storage_options(warehouse, credentials.storage_options)
            except ValueError as e:  # an unknown key: named, its value never shown
                raise DbtRuntimeError(f"hudilite profile: storage_options: {e}") from None
        self._spark = None
        self._lock = threading.RLock()
        self.catalog_kind = "not started"
        self.parent_session = None  # the process's running SparkSession this one was made from, if any
        self.run = RunState()  # this dbt invocation's per-model state (checkpoints read, publish options)
        self.known = KnownEntries()  # catalog facts this invocation has (no round trip to ask them again)
        self.deferred = DeferredViews()  # temporary views of change reads not created yet (Spark Connect)
