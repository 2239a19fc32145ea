"""Column names of the format: Hudi's meta columns, and the internal columns hudilite's write pipeline adds to
the rows it carries (key generation, indexes, writers and readers all name them; none is stored except the meta
columns)."""

from __future__ import annotations

#: The five Hudi meta columns, in the order Hudi writes them.
META_FIELDS: tuple[str, ...] = (
    "_hoodie_commit_time",
    "_hoodie_commit_seqno",
    "_hoodie_record_key",
    "_hoodie_partition_path",
    "_hoodie_file_name",
)

# Internal columns added by the write pipeline; never stored.
KEY_COL = "_hoodie_record_key"
PART_COL = "_hoodie_partition_path"
DELETE_COL = "_hl_delete"
SEQ_COL = "_hl_seq"
FID_COL = "_hl_fid"
MOVED_COL = "_hl_moved"  # global index: the row is one side of a key changing partition
ARRIVAL_COL = "_hl_arrival"  # hudilite.write.newest.per.key: a collected row's arrival order in Spark
INTERNAL_COLS = (DELETE_COL, SEQ_COL, FID_COL, MOVED_COL, ARRIVAL_COL)
IS_DELETED_FIELD = "_hoodie_is_deleted"

#: The record key hudilite generates for tables written without one (the core needs a key column).
ROW_ID_FIELD = "_hudilite_row_id"


def is_system_column(name: str) -> bool:
    """A column hudilite or Hudi maintains (meta columns, row id, `_hoodie_is_deleted`), not user data."""
    n = name.lower()
    return n.startswith("_hoodie_") or n.startswith("_hudilite_")
