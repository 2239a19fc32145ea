"""What every write plan shares, whoever runs it (Spark tasks, or the driver for Arrow input): the committed
file slices the write builds on, the key-range index over their base files, the checks of the profile, the
sizing of inserts into small and new file groups, the merge of one file group, and the groups an overwrite
replaces.

The runners (`hudilite.spark.write.SparkPlanner`, `hudilite.writer.local.LocalPlanner`) tag rows with
file groups, count them per partition, route inserts to the buckets planned here and call `merge_group` once
per file group.
"""

from __future__ import annotations

from types import SimpleNamespace

import pyarrow as pa

from hudilite.errors import InvalidWriteError
from hudilite.file_group import new_file_id
from hudilite.index import RangeIndex
from hudilite.index.global_index import index_choice
from hudilite.keygen import integer_key_column, partition_path_problem
from hudilite.reader.planner import ReadPlan, table_schema
from hudilite.storage import is_local
from hudilite.table import HoodieTable
from hudilite.writer.context import WriteContext
from hudilite.writer.handle import merge_file_group
from hudilite.writer.log_handle import append_file_group
from hudilite.writer.options import WriteOptions

# A file group a write task targets: (partition, base file path or None for a new group, base instant).
# (partition, base file path, base instant, the slice's log files): the log files only where new log files are
# named by the writing instant (table version 8/9: the slice's logs cannot be listed by its base instant)
Target = tuple[str, "str | None", "str | None", "tuple[str, ...] | None"]


def check_partition_path(p: str | None, depth: int, url_encoded: bool = False, hive_style: bool = False) -> None:
    problem = partition_path_problem(p, depth, url_encoded, hive_style)
    if problem:
        raise InvalidWriteError(problem)


# The owner rule (key -> file group) for exact key lookups: merge-on-read keeps a key whose merged state (base +
# logs) is deleted in its base file until compaction, and a re-insert of it takes the insert path (a new file
# group, log_handle.append_file_group). So a key may sit in several base files of a partition: the NEWEST base
# file owns it (the delete came after the older base file, the re-insert after the delete); the others hold it
# only in a state their logs deleted. Both planners tag keys by this rule.
class PlannerBase:
    def __init__(self, wo: WriteOptions, table: HoodieTable | None, data_schema: pa.Schema):
        self.wo = wo
        self.table = table
        self.data_schema = data_schema
        self.counts: dict[str, dict] = {}  # partition -> n, null_keys, null_pc, inserts
        self.index = RangeIndex(None)
        self.slices = []
        self.log_bases: dict = {}  # merge-on-read: groups of pending compaction plans -> their instant
        self.mor = False  # merge-on-read table: updates/deletes of existing groups go to log files
        self.block_format = None
        self.choice = index_choice(wo.options)  # partition-scoped or global (hudilite/index/global_index.py)

    @property
    def global_lookup(self) -> bool:
        """Keys are looked up in every partition before the partition-scoped tagging (not for overwrites)."""
        return self.choice.is_global and not self.overwrite and bool(self.slices) and bool(self.wo.partition_by)

    def merge_spec(self):
        """How slices with log files merge (the global lookup reads their merged keys); None without such slices."""
        if not any(s.log_files for s in self.slices):
            return None
        return ReadPlan(self.table, table_schema(self.table), [], "snapshot").merge_spec()

    def dedup_settings(self) -> SimpleNamespace:
        """What `handle.dedup_latest` reads of a WriteContext, for collapsing the batch by key before the global
        lookup (the write's context does not exist yet)."""
        wo = self.wo
        return SimpleNamespace(int_key=integer_key_column(wo.record_key, self.data_schema),
                               event_time=bool(wo.precombine_field), precombine_field=wo.precombine_field)

    @property
    def overwrite(self) -> bool:
        return self.wo.operation.startswith("insert_overwrite")

    def batch_scope(self, batch_partitions) -> set[str] | None:
        """The partitions whose file groups a write of a batch with rows in `batch_partitions` needs, or None: all
        of them. Only on object stores, where each file group's footer read costs requests: a partition-scoped
        index matches keys within their own partition, so the others' groups play no part - except through a
        global index, an overwrite of the whole table, and the average record size that sizes new files (from the
        batch's partitions there; locally from all, as before)."""
        if self.table is None or is_local(self.table.base_path):
            return None
        if self.choice.is_global or self.wo.operation not in ("insert", "upsert", "delete", "insert_overwrite"):
            return None
        return set(batch_partitions)

    def load_slices(self, scope: set[str] | None = None) -> None:
        """The latest committed slices (of the partitions in `scope`, default all) and the key-range index over
        their base files."""
        if self.table is not None and self.table.timeline.completed():
            partitions, view = self.table.listed_view()
            if scope is not None:
                partitions = [p for p in partitions if p in scope]
            self.slices = view.latest_slices(partitions)
            # from the same timeline as the slices (the transaction reloads the table later): logs of a group
            # in a pending compaction plan start the slice of the compaction instant
            self.log_bases = view.log_base_instants()
            self.index = RangeIndex.build(self.slices, self.wo.record_key, self.data_schema)

    def check_profile(self, rows: list[dict]) -> None:
        """Keep the per-partition counts; bad input (null keys or ordering values, a partition value with '/')
        raises before anything is written."""
        wo = self.wo
        self.counts = {r["part"]: r for r in rows}
        null_keys = sum(r["null_keys"] for r in rows)
        if null_keys:
            raise InvalidWriteError(
                f"{null_keys} row(s) have a null or empty record key (record key field(s): {', '.join(wo.record_key)})")
        null_pcs = sum(r["null_pc"] for r in rows)
        if null_pcs:
            raise InvalidWriteError(f"{null_pcs} row(s) have a null precombine field {wo.precombine_field!r}")
        depth = len(wo.partition_by)
        encoded = self.table is not None and self.table.config.url_encode
        for p in self.counts:
            check_partition_path(p, depth, encoded, wo.hive_style)

    def insert_buckets(self):
        """Per partition: [(file id, rows)] for inserts: small existing groups first, then new groups sized to
        the target file size (from the table's average record size, or the configured estimate); and the new
        groups {file id: partition}."""
        wo = self.wo
        ranges = [] if self.overwrite else self.index.files()
        sized = [r for r in ranges if r.rows > 0 and r.size > 0]
        avg = (sum(r.size for r in sized) / sum(r.rows for r in sized)) if sized else wo.record_size_estimate
        avg = max(avg, 1.0)
        target_rows = max(int(wo.target_file_bytes / avg), 1)
        by_part: dict[str, list[tuple[str, int]]] = {}
        new_groups: dict[str, str] = {}
        for part, c in self.counts.items():
            n = int(c["inserts"] or 0)
            if n <= 0:
                continue
            buckets: list[tuple[str, int]] = []
            if not self.overwrite and not self.mor:  # merge-on-read: inserts go to new base files
                for r in self.index.by_partition.get(part, []):
                    if r.path and 0 < r.size < wo.small_file_bytes and n > 0:
                        cap = max(int((wo.target_file_bytes - r.size) / avg), 0)
                        if cap:
                            take = min(cap, n)
                            buckets.append((r.file_id, take))
                            n -= take
            while n > 0:
                take = min(target_rows, n)
                fid = new_file_id()
                new_groups[fid] = part
                buckets.append((fid, take))
                n -= take
            by_part[part] = buckets
        return by_part, new_groups

    def targets(self, new_groups: dict[str, str]) -> dict[str, Target]:
        """file id -> what its write task merges into: new groups, and (unless overwriting) every latest slice
        with a base file (merge-on-read: named after the pending compaction's instant where there is one)."""
        lookup: dict[str, Target] = {fid: (part, None, None, None) for fid, part in new_groups.items()}
        if not self.overwrite:
            by_instant = self.mor and self.table is not None and self.table.config.layout_version >= 2
            # layout 1: logs behind a pending compaction are named with its instant (they start its slice);
            # layout 2 names logs by the writing deltacommit, and completion time decides their slice
            log_base = self.log_bases if self.mor and not by_instant else {}
            for sl in self.slices:
                if sl.base_file is not None:
                    lookup[sl.file_id] = (sl.partition, sl.base_file.path,
                                          log_base.get((sl.partition, sl.file_id), sl.base_instant),
                                          tuple(lf.path for lf in sl.log_files) if by_instant else None)
        return lookup

    def replaced(self) -> dict[str, list[str]]:
        """Overwrites: partition -> the file groups the write replaces (those of the batch's partitions, or all)."""
        out: dict[str, list[str]] = {}
        if self.overwrite:
            parts = set(self.counts) if self.wo.operation == "insert_overwrite" else None
            for sl in self.slices:
                if parts is None or sl.partition in parts:
                    out.setdefault(sl.partition, []).append(sl.file_id)
        return out


def merge_group(ctx: WriteContext, target: Target, fid: str, rows: pa.Table, mor: bool,
                block_format: str | None) -> list[dict]:
    """Write one file group's rows of this write: a copy-on-write merge into a new base file, or (merge-on-read,
    group with a base file) a log file appended to its slice. Returns the write stats."""
    part, old_path, old_instant, slice_logs = target
    if mor and old_path is not None:
        return append_file_group(ctx, part, fid, old_path, old_instant, rows, block_format, slice_logs)
    stat = merge_file_group(ctx, part, fid, old_path, old_instant, rows)
    return [stat] if stat else []
