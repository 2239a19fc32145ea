"""`dbt clone` of a hudilite table: a new, independent hudilite table holding the source's latest snapshot.

Why a copy and not a table whose first commit references the source's files: Hudi has no reference counting
across tables. The source's cleaner deletes the file slices its own retention no longer needs, a rollback
deletes a failed commit's files, and a rebuild beside the old table (Table.replacing) swaps the whole
directory away; any of them would leave the clone's timeline naming files that are gone. Hard links would
survive those on a local disk, but not on an object store, and would need the core to rewrite a timeline for
another table. So the clone is one commit of the source's rows (a `table` model's build; merge-on-read: the
merged rows) with the source's layout — table type, record key, precombine field, partitioning, delete+insert keying and
recorded constraints — a table with its own id that the source's services never touch.
"""

from __future__ import annotations

from typing import Any, Dict

from dbt_common.exceptions import DbtRuntimeError

import hudilite
from dbt.adapters.hudilite.model_config import ROW_ID

CONSTRAINT_PROP = "hudilite.constraints."


def clone_table(env, schema: str, identifier: str, source_schema: str, source_identifier: str):
    """Write the source table's latest snapshot as the table `schema.identifier` (a build, or a rebuild of an
    existing clone as one commit); returns the adapter response."""
    entry = env.describe(source_schema, source_identifier)
    if entry is None or not entry.table_path:
        raise DbtRuntimeError(f"dbt clone: {source_schema}.{source_identifier} is not a hudilite table")
    layout = hudilite.Table.open(entry.table_path).layout()
    keyed = layout.record_key != [ROW_ID]
    unique_key = entry.props.get("hudilite.unique_key") or None  # a delete+insert table keyed by the row id
    cfg: Dict[str, Any] = {
        "unique_key": layout.record_key if keyed else unique_key,
        "incremental_strategy": "delete+insert" if unique_key and not keyed else None,
        "precombine_field": layout.precombine_field,
        "partition_by": layout.partition_by or None,
        "table_type": "mor" if layout.table_type == "MERGE_ON_READ" else "cow",
        "constraints": {k[len(CONSTRAINT_PROP):]: v for k, v in entry.props.items() if k.startswith(CONSTRAINT_PROP)},
        "full_refresh": True,
    }
    sql = f"select * from {env.qualified(source_schema, source_identifier)}"
    return env.materialize(schema, identifier, sql, "table", cfg)
