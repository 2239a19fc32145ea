"""The outcome of a write: its result (`WriteResult`), or a write that is not committed yet
(`hudilite.write(..., commit=False)`): write-audit-publish.

The data files are written and reconciled, the instant is inflight (its heartbeat keeps running, so other
writers in multi-writer mode leave it alone), and nothing is visible to readers. Then exactly one of:

    pending.read(spark)          the table as it will look once committed (for audits), any number of times
    pending.complete(extra)      write the completed instant: the data becomes visible (returns a WriteResult)
    pending.abort()              roll the instant back from its markers: the table never showed the data

A process that dies while holding a PendingWrite leaves a pending instant: rolled back by the next writer.
"""

from __future__ import annotations

import json
import logging
import os
import threading

from hudilite.errors import HudiliteError
from hudilite.file_group import BaseFile, FileSlice, parse_base_file_name
from hudilite.markers import delete_markers
from hudilite.reader.planner import ReadPlan, table_schema
from hudilite.ready import READY_KEY, remember_ready
from hudilite.schema import avro_to_arrow, with_meta_fields_arrow
from hudilite.services.rollback import abort_write
from hudilite.spark.read import plan_to_dataframe

log = logging.getLogger(__name__)


class WriteResult(str):
    """The committed instant time (a str), with the write's statistics attached."""

    stats: dict

    def __new__(cls, instant: str, stats: dict):
        obj = super().__new__(cls, instant)
        obj.stats = stats
        return obj


class PendingWrite:
    def __init__(self, table, txn, inst, metadata: dict, heartbeat, stats: dict):
        self.table = table
        self.txn = txn
        self.instant = inst
        self.metadata = metadata
        self.heartbeat = heartbeat
        self.stats = stats
        self.state = "pending"
        self._lock = threading.Lock()

    @property
    def instant_time(self) -> str:
        return self.instant.timestamp

    @property
    def partitions(self) -> list[str]:
        """Partitions this write wrote (or replaced)."""
        parts = set(self.metadata.get("partitionToWriteStats") or {})
        parts |= set(self.metadata.get("partitionToReplaceFileIds") or {})
        return sorted(parts)

    def _check(self) -> None:
        if self.state != "pending":
            raise HudiliteError(f"write {self.instant_time} on {self.table.base_path} is already {self.state}")

    # ---- audit ------------------------------------------------------------------------------
    def plan(self):
        """A ReadPlan of the table as it would be with this write committed."""
        self._check()
        table = self.table
        table.reload()
        tl = table.timeline
        ts = self.instant_time
        schema_json = (self.metadata.get("extraMetadata") or {}).get("schema")
        schema = with_meta_fields_arrow(avro_to_arrow(schema_json)) if schema_json else table_schema(table)
        view = table.view()
        replaced = tl.replaced_file_ids()
        for part, fids in (self.metadata.get("partitionToReplaceFileIds") or {}).items():
            replaced |= {(part or "", f) for f in fids or []}
        parts = sorted(set(table.partitions()) | set(self.metadata.get("partitionToWriteStats") or {}))
        slices: dict[tuple[str, str], FileSlice] = {}
        for p in parts:
            for fid, fg in view.file_groups(p).items():
                if (p, fid) in replaced:
                    continue
                sl = fg.latest_slice()
                if sl is not None and (sl.base_file is not None or sl.log_files):
                    slices[(p, fid)] = sl
        for part, stats in (self.metadata.get("partitionToWriteStats") or {}).items():
            for s in stats or []:
                name = os.path.basename(s.get("path") or "")
                parsed = parse_base_file_name(name)
                if not parsed or parsed[2] != ts:
                    continue  # log files (merge-on-read): already in the view, their blocks count below
                full = os.path.join(table.partition_dir(part or ""), name)
                bf = BaseFile(part or "", parsed[0], parsed[1], ts, name, full, table.fs.size(full))
                slices[(part or "", parsed[0])] = FileSlice(part or "", parsed[0], ts, bf)
        visible = frozenset(tl.completed_write_times | {ts})
        return ReadPlan(table, schema, [s for _, s in sorted(slices.items())], "snapshot", visible=visible)

    def read(self, spark):
        """The table's rows as they will be once this write completes (committed data + this write)."""
        return plan_to_dataframe(spark, self.plan())

    # ---- publish / discard --------------------------------------------------------------------
    def complete(self, extra_metadata: dict | None = None, ready_partitions=None):
        """Commit: the write becomes visible. `extra_metadata` is added to the commit metadata;
        `ready_partitions` (True: every partition written) marks partitions ready in the same commit."""
        with self._lock:
            self._check()
            md = self.metadata
            extra = md.setdefault("extraMetadata", {})
            extra.update({k: str(v) for k, v in (extra_metadata or {}).items()})
            if ready_partitions:
                parts = self.partitions if ready_partitions is True else sorted(ready_partitions)
                extra[READY_KEY] = json.dumps(parts)
            try:
                self.txn.complete(self.instant, md)
            except BaseException:
                self._abort()
                raise
            self.state = "completed"
            self.heartbeat.stop()
            delete_markers(self.table.base_path, self.instant_time)
            if ready_partitions:
                remember_ready(self.table, json.loads(extra[READY_KEY]))
            return WriteResult(self.instant_time, self.stats)

    def abort(self) -> None:
        """Roll the write back from its markers; the table is as if it never happened."""
        with self._lock:
            if self.state != "pending":
                return
            self._abort()

    def _abort(self) -> None:
        self.heartbeat.stop()
        try:
            abort_write(self.table, self.table.reload().get(self.instant_time) or self.instant,
                             self.txn.options)
        finally:
            self.state = "aborted"

    def __repr__(self) -> str:
        return f"PendingWrite({self.table.base_path!r}, {self.instant_time}, {self.state})"


