"""Connections for `type: hudilite`: one SparkSession per dbt process, shared by every thread.

The session is opened on first use (the first statement of the first connection), not when dbt starts, so
`dbt parse`/`dbt compile --no-introspect` never start a JVM. Every dbt connection is a thin handle on the
process-wide :class:`HudiliteEnvironment` (dbt-duckdb style): SQL goes straight to `spark.sql`, writes go
through the hudilite core.
"""

from __future__ import annotations

import datetime as dt
import threading
import uuid
from contextlib import contextmanager
from decimal import Decimal
from typing import Any, Generator, List, Optional, Sequence, Tuple

from dbt.adapters.contracts.connection import AdapterResponse, Connection, ConnectionState
from dbt.adapters.events.logging import AdapterLogger
from dbt.adapters.spark.connections import SparkConnectionManager
from dbt_common.exceptions import DbtDatabaseError, DbtRuntimeError

from dbt.adapters.hudilite.credentials import HudiliteCredentials
from dbt.adapters.hudilite.environment import HudiliteEnvironment
from dbt.adapters.hudilite.response import error_text
from hudilite.spark.results import command_result

logger = AdapterLogger("Hudilite")


class HudiliteCursor:
    """A pyodbc-like cursor over `spark.sql` (what dbt's SQL connection manager expects)."""

    def __init__(self, env, tag: str) -> None:
        self.env = env
        self.tag = tag
        self._df = None
        self._rows: Optional[list] = None
        self._fields: Optional[list] = None  # (name, type, nullable) when known without asking Spark
        self.response = None

    # dbt calls these -------------------------------------------------------------------------
    def execute(self, sql: str, bindings: Optional[Sequence[Any]] = None) -> None:
        sql = sql.strip()
        while sql.endswith(";"):
            sql = sql[:-1].rstrip()
        if bindings:
            sql = sql % tuple(_sql_literal(b) for b in bindings)
        self._rows = None
        self._fields = None
        self._df = None
        # dbt's statements (hooks, `dbt show`, DML whose query the core runs) may name a deferred change view
        self.env.create_named_views(sql)
        self.response = self.env.run_dml(sql, tag=self.tag)  # DML on a hudilite table: one hudilite commit
        if self.response is None:
            self._df = self.env.sql(sql, tag=self.tag)
            # Spark Connect sent a command's rows (show, describe, create, ...) with its reply: keep them
            # instead of asking the server for the schema and the rows again (three round trips)
            held = command_result(self._df)
            if held is not None:
                self._fields, self._rows = held.fields, held.rows

    @property
    def description(self) -> List[Tuple[str, str, None, None, None, None, bool]]:
        if self._df is None:
            return []
        fields = self._fields if self._fields is not None else \
            [(f.name, f.dataType, f.nullable) for f in self._df.schema.fields]
        return [(name, dtype.simpleString(), None, None, None, None, nullable) for name, dtype, nullable in fields]

    def fetchall(self) -> Optional[list]:
        if self._rows is None and self._df is not None:
            self._rows = self.env.collect(self._df, tag=self.tag)
        return self._rows

    def fetchmany(self, size: int) -> Optional[list]:
        if self._rows is None and self._df is not None:
            return self.env.collect(self._df.limit(int(size)), tag=self.tag)
        return (self._rows or [])[:size]

    def fetchone(self):
        rows = self.fetchmany(1) if self._rows is None else self._rows
        return rows[0] if rows else None

    def close(self) -> None:
        self._df = None
        self._rows = None
        self._fields = None


def _sql_literal(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float, Decimal)):
        return repr(float(value)) if isinstance(value, float) else str(value)
    if isinstance(value, dt.datetime):
        return "'" + value.strftime("%Y-%m-%d %H:%M:%S.%f") + "'"
    if isinstance(value, dt.date):
        return "'" + value.isoformat() + "'"
    return "'" + str(value).replace("\\", "\\\\").replace("'", "\\'") + "'"


class HudiliteHandle:
    """The `connection.handle` of a dbt connection: cursors on the shared environment."""

    def __init__(self, env) -> None:
        self.env = env
        self.tag = f"dbt-hudilite-{uuid.uuid4().hex[:12]}"  # Spark job tag, for cancel
        self._cursor: Optional[HudiliteCursor] = None

    def cursor(self) -> HudiliteCursor:
        self._cursor = HudiliteCursor(self.env, self.tag)
        return self._cursor

    def cancel(self) -> None:
        self.env.cancel(self.tag)

    def close(self) -> None:
        if self._cursor is not None:
            self._cursor.close()

    def rollback(self, *args: Any, **kwargs: Any) -> None:
        pass


class HudiliteConnectionManager(SparkConnectionManager):
    TYPE = "hudilite"
    _env_lock = threading.Lock()
    _ENVS: dict = {}

    @classmethod
    def environment(cls, credentials: HudiliteCredentials, project_root: Optional[str]):
        """The process-wide environment for these credentials (the SparkSession inside it opens lazily)."""
        warehouse = credentials.resolve_warehouse(project_root)
        metastore_dir = credentials.resolve_metastore_dir(warehouse, project_root)
        key = (warehouse, metastore_dir, credentials.master, tuple(sorted(credentials.spark_conf.items())),
               repr(sorted(credentials.storage_options.items())), credentials.reuse_session, credentials.method,
               credentials.host)
        with cls._env_lock:
            env = cls._ENVS.get(key)
            if env is None:
                env = HudiliteEnvironment(credentials, warehouse, metastore_dir)
                cls._ENVS[key] = env
            return env

    @property
    def env(self):
        creds = self.profile.credentials
        return self.environment(creds, getattr(self.profile, "project_root", None))

    @classmethod
    def open(cls, connection: Connection) -> Connection:
        if connection.state == ConnectionState.OPEN:
            return connection
        raise DbtRuntimeError("HudiliteConnectionManager.open must be called on an instance")  # pragma: no cover

    # `open` is a classmethod in dbt's base class but needs the project root, which lives on the instance;
    # dbt calls it through the instance (`self.open(conn)`), so an instance attribute shadowing it works.
    def __init__(self, profile, mp_context) -> None:
        super().__init__(profile, mp_context)
        self.open = self._open_connection  # type: ignore[method-assign]

    def _open_connection(self, connection: Connection) -> Connection:
        if connection.state == ConnectionState.OPEN:
            return connection
        env = self.environment(connection.credentials, getattr(self.profile, "project_root", None))
        connection.handle = HudiliteHandle(env)
        connection.state = ConnectionState.OPEN
        return connection

    @contextmanager
    def exception_handler(self, sql: str) -> Generator[None, None, None]:
        try:
            yield
        except (DbtRuntimeError, DbtDatabaseError):
            raise
        except Exception as exc:  # noqa: BLE001
            logger.debug(f"Error while running:\n{sql}")
            logger.debug(str(exc))
            raise DbtRuntimeError(error_text(exc)) from exc

    def cancel(self, connection: Connection) -> None:
        if connection.handle is not None:
            connection.handle.cancel()

    @classmethod
    def get_response(cls, cursor: Any) -> AdapterResponse:
        return getattr(cursor, "response", None) or AdapterResponse(_message="OK")

