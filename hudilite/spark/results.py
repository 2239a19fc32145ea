"""Rows of a SQL command that a Spark Connect server already returned, read in the client.

Over Spark Connect `spark.sql(...)` runs a command (SHOW, DESCRIBE, CREATE, ALTER, DROP, ...) at once and sends
its rows back in the reply, as an Arrow stream inside the DataFrame's plan. PySpark's `df.schema` and
`df.collect()` on that DataFrame still ask the server again: an AnalyzePlan for the schema, a Config read and an
ExecutePlan that ships the rows to the server and back for the rows - three round trips for data the client
holds. `command_result(df)` reads them from the reply instead. It covers what dbt's catalog statements return
(strings, booleans, numbers); any other plan or type gives None and the caller asks the server as before.
"""

from __future__ import annotations

from typing import Any, List, NamedTuple, Optional

import pyarrow as pa
from pyspark.sql import Row
from pyspark.sql.pandas.types import from_arrow_type
from pyspark.sql.types import DataType

from hudilite.spark.session import is_connect


class CommandResult(NamedTuple):
    fields: List[tuple]  # (name, Spark DataType, nullable) per column
    rows: List[Any]      # pyspark Rows, as collect() gives them


def _plain(t: pa.DataType) -> bool:
    # types whose Python value from Arrow is the one collect() gives (no time zones, no nested rows)
    return (pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_boolean(t)
            or pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_null(t))


def command_result(df) -> Optional[CommandResult]:
    """The rows of a Connect command's DataFrame as sent in the command's reply, or None (not Connect, not a
    command result held in the client, or a column type outside the plain ones)."""
    if df is None or not is_connect(df.sparkSession):
        return None
    # PySpark keeps the reply's relation as the DataFrame's plan (a CachedRelation over the proto): read it
    # where it is, as PySpark itself would send it back.
    rel = getattr(getattr(df, "_plan", None), "_plan", None)
    if rel is None or not hasattr(rel, "HasField") or not rel.HasField("local_relation"):
        return None
    local = rel.local_relation
    if not local.HasField("data"):
        return None
    table = pa.ipc.open_stream(pa.py_buffer(local.data)).read_all()
    if not all(_plain(f.type) for f in table.schema):
        return None
    fields = []
    for f in table.schema:
        dtype: DataType = from_arrow_type(f.type)
        fields.append((f.name, dtype, f.nullable))
    names = [f.name for f in table.schema]
    cols = [c.to_pylist() for c in table.columns]
    row = Row(*names)
    return CommandResult(fields, [row(*vals) for vals in zip(*cols)])
