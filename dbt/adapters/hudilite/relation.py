from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from dbt.adapters.spark.relation import SparkRelation


@dataclass(frozen=True, eq=False, repr=False)
class HudiliteRelation(SparkRelation):
    """A Spark relation; `is_hudilite` marks catalog tables that front a hudilite (Hudi) table."""

    is_hudilite: Optional[bool] = None
    table_path: Optional[str] = None
