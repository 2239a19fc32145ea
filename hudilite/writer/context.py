"""What an executor needs to write files of one instant (picklable, shipped with each task)."""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from hudilite.columns import META_FIELDS
from hudilite.markers import markers_for


@dataclass
class WriteContext:
    base_path: str
    instant: str
    table_name: str
    data_schema: pa.Schema  # table schema without meta columns
    precombine_field: str | None
    event_time: bool  # event-time ordering (precombine decides) vs commit-time (latest write wins)
    target_file_bytes: int = 120 * 1024 * 1024
    row_group_rows: int = 131072
    compression: str = "snappy"
    partial_update: bool = False  # columns missing from the batch keep stored values on update
    incoming_columns: tuple[str, ...] = ()
    delete_operation: bool = False  # the `delete` operation: deletes win whatever their ordering value
    marker_options: dict | None = None  # hoodie.write.markers.* (direct, or the driver's marker service URL)
    buffer_limit_bytes: int = 64 * 1024 * 1024  # bounded queue between reading batches and writing a file
    # a single record-key column of a signed integer type: records are matched on it (the record key is its
    # decimal string) instead of on the key strings
    int_key: str | None = None
    # copy-on-write merges also write the file group's change images (hudilite.change_images)
    change_images: bool = False
    # merge-on-read: (MergeSpec, rows schema, minimum log bytes) with which log appends write the merged-read
    # overlay entries of the slice states they make (hudilite/reader/overlay_cache.py), or None
    overlays: tuple | None = None
    # fsync every data file after closing it (hoodie.write.fsync; the directories are synced before the commit)
    fsync: bool = True
    # merge-on-read: the MergeSpec of the committed table the write builds on; log appends merge a slice's base
    # file and logs with it to find each key's current record (log_handle._merged_state)
    state_spec: object | None = None
    # the number of partition fields: a partition path of another depth or with a '.'/'..' level is refused
    partition_depth: int = 0
    # the table's partition paths are URL-encoded (an Apache Hudi table's urlencode) and hive-style: a value with
    # a character Hudi escapes is refused (keygen.partition_path_problem)
    url_encoded: bool = False
    hive_style: bool = False
    record_key: tuple[str, ...] = ()  # the record key fields, named when a row has none

    def null_key_message(self, nulls: int) -> str:
        fields = f" (record key field(s): {', '.join(self.record_key)})" if self.record_key else ""
        return f"{nulls} row(s) have a null or empty record key{fields}"

    def markers(self):
        return markers_for(self.base_path, self.instant, self.marker_options)

    @property
    def file_schema(self) -> pa.Schema:
        fields = [pa.field(m, pa.string()) for m in META_FIELDS] + list(self.data_schema)
        return pa.schema(fields)
