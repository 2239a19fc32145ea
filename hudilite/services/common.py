"""Shared pieces of the table services: progress, scheduling and executing plans, merged base files,
write stats. (Reading the pending plans on the timeline: hudilite/timeline/plans.py.)"""

from __future__ import annotations

import logging
import os
import sys
import time

import pyarrow as pa

from hudilite.columns import META_FIELDS
from hudilite.file_group import base_file_name
from hudilite.markers import CREATE, delete_markers
from hudilite.options import BLOCK_ROWS, COMPRESSION, FSYNC, MAX_FILE_SIZE
from hudilite.reader.planner import ReadPlan, table_schema
from hudilite.schema import arrow_to_avro, avro_to_json, cast_table_to_schema
from hudilite.storage.local import storage_for
from hudilite.table import HoodieTable
from hudilite.timeline import INFLIGHT, REQUESTED, Instant, Timeline
from hudilite.timeline.avro_models import to_container
from hudilite.timeline.plans import read_requested

# through the module: crash-point runs (tests/functional/crash_writer.py) replace handle.write_parquet
from hudilite.writer import handle
from hudilite.writer.context import WriteContext
from hudilite.writer.handle import const_string
from hudilite.writer.rollback import files_of_instant
from hudilite.writer.transaction import Transaction

log = logging.getLogger(__name__)


# ---- tables --------------------------------------------------------------------------------------------
def open_table(table_or_path) -> HoodieTable:
    return table_or_path if isinstance(table_or_path, HoodieTable) else HoodieTable.open(table_or_path)




# ---- progress ------------------------------------------------------------------------------------------
class Progress:
    """A progress bar for long service work: tqdm if installed, else a simple line on stderr. Silent unless
    enabled (the CLI enables it)."""

    def __init__(self, total: int, desc: str, enabled: bool = False):
        self.total, self.desc, self.enabled, self.n = total, desc, enabled and total > 0, 0
        self._bar = None
        self._last = 0.0
        if self.enabled:
            try:
                from tqdm import tqdm  # noqa: PLC0415 - optional dependency

                self._bar = tqdm(total=total, desc=desc, unit="fg", file=sys.stderr)
            except ImportError:
                self._bar = None
                self._print(force=True)

    def _print(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last < 0.2 and self.n < self.total:
            return
        self._last = now
        width = 30
        done = int(width * self.n / max(self.total, 1))
        sys.stderr.write(f"\r{self.desc}: [{'#' * done}{'.' * (width - done)}] {self.n}/{self.total}")
        if self.n >= self.total:
            sys.stderr.write("\n")
        sys.stderr.flush()

    def update(self, k: int = 1) -> None:
        self.n += k
        if not self.enabled:
            return
        if self._bar is not None:
            self._bar.update(k)
        else:
            self._print()

    def close(self) -> None:
        if self.enabled and self._bar is not None:
            self._bar.close()
        elif self.enabled and self.n < self.total:
            sys.stderr.write("\n")


# ---- scheduling and executing plans --------------------------------------------------------------------
def schedule_plan(table: HoodieTable, options: dict | None, action: str, avro_schema, make_plan) -> str | None:
    """Start a `action` instant whose requested file is the plan `make_plan(table, tl, options)` (a record of
    `avro_schema`), decided under the table lock on one timeline. Returns the instant, or None when
    `make_plan` returns None (nothing to do: no instant)."""
    def plan(tl: Timeline, t: str):
        rec = make_plan(table, tl, options)
        return None if rec is None else to_container(avro_schema, rec)

    inst = Transaction(table, options).start(action, plan=plan)
    table.reload()
    return inst.timestamp if inst is not None else None


def pending_plan(table: HoodieTable, instant: Instant, action: str, error: type[Exception],
                 empty_error: type[Exception] | None = None) -> tuple[Timeline, Instant, dict]:
    """(reloaded timeline, the instant on it, its plan) of the pending `action` plan `instant`. Raises `error`
    when the instant is not a pending `action`, `empty_error` (default `error`) when its plan file is empty or
    missing."""
    tl = table.reload()
    cur = tl.get(instant.timestamp)
    if cur is None or cur.action != action or cur.is_completed:
        raise error(f"{instant.timestamp} is not a pending {action} of {table.base_path}")
    plan = read_requested(tl, cur)
    if plan is None:
        raise (empty_error or error)(f"{action} {cur.timestamp}: the plan file is empty or missing")
    return tl, cur, plan


def begin_execution(table: HoodieTable, tl: Timeline, cur: Instant, options: dict | None):
    """Start (or restart) executing the pending plan `cur` that writes new base files - only ever by the holder
    of the plan's claim (services/claim.py): its inflight file, the files of an earlier failed attempt removed,
    the MergeSpec of the slices as of the plan's instant and a write context with its markers. Returns
    (spec, ctx)."""
    if cur.state == REQUESTED:
        table.fs.write_bytes(tl.instant_path(cur.with_state(INFLIGHT)), b"")
    rollback_partial_attempt(table, cur.timestamp)
    spec = merge_spec(table, as_of=cur.timestamp)
    ctx = write_context(table, cur.timestamp, spec, options)
    ctx.markers().init()
    return spec, ctx


def run_pending(table: HoodieTable, pending: list[Instant], instant: str | None, kind: str,
                error: type[Exception], execute, options: dict | None, progress: bool, wait: bool = False
                ) -> list[str]:
    """`execute(table, plan, options, progress=..., wait=...)` for every pending plan, oldest first, or only
    for `instant` (`error` when it is not one of them). Returns the plans that are complete when it returns
    (a plan another executor holds is skipped, or with `wait` waited for); the first error is raised after
    the plans before it completed."""
    if instant is not None:
        pending = [i for i in pending if i.timestamp == instant]
        if not pending:
            raise error(f"no pending {kind} {instant} on {table.base_path}")
    done = [execute(table, i, options, progress=progress, wait=wait)
            for i in sorted(pending, key=lambda i: i.timestamp)]
    return [t for t in done if t is not None]


# ---- reading and writing file slices -------------------------------------------------------------------
def plan_file(pdir: str, ref: str) -> str:
    """The path of a file a service plan names, in its partition's directory `pdir`: compaction plans hold file
    names, clustering plans (Apache Hudi's and ours) full paths (`file:/...` or the table's URI, as the planner
    saw it; older hudilite plans: names); the file is in its partition's directory either way."""
    return os.path.join(pdir, ref.rsplit("/", 1)[-1])


def merge_spec(table: HoodieTable, as_of: str | None = None):
    """The MergeSpec of a table service: the read planner's (`ReadPlan.merge_spec`) for a snapshot at `as_of` -
    log blocks count iff their instant is a completed write of the whole timeline (archive included), not
    rolled back, and (with `as_of`) not newer than it. The timeline is the table's current one (services reload
    it before they execute a plan)."""
    return ReadPlan(table, table_schema(table), [], "snapshot", as_of=as_of).merge_spec()


def write_context(table: HoodieTable, instant: str, spec, options: dict | None):
    data_schema = pa.schema([f for f in spec.schema if f.name not in META_FIELDS])
    return WriteContext(
        base_path=table.base_path, instant=instant, table_name=table.config.name, data_schema=data_schema,
        precombine_field=table.config.precombine_field, event_time=bool(table.config.precombine_field),
        target_file_bytes=MAX_FILE_SIZE.get(options), row_group_rows=BLOCK_ROWS.get(options),
        compression=COMPRESSION.get(options).lower(), fsync=FSYNC.get(options),
    )


def write_base_file(ctx, partition: str, fid: str, token: str, rows: pa.Table, claim=None
                    ) -> tuple[str, str, int]:
    """Write `rows` (table schema, meta fields included and kept) as the base file of file group `fid` at the
    context's instant, marker first. `_hoodie_file_name` becomes the new file name. With the executor's
    `claim` (services/claim.py), the claim is checked before the file is started and after it is written (a
    file written by an executor that lost its claim is deleted again: it would be a second base file of the
    group at the instant). Returns (relative path, absolute path, size)."""
    name = base_file_name(fid, token, ctx.instant)
    out = cast_table_to_schema(rows, ctx.file_schema)
    i = out.schema.get_field_index("_hoodie_file_name")
    out = out.set_column(i, ctx.file_schema.field(i), const_string(name, out.num_rows))
    d = os.path.join(ctx.base_path, partition) if partition else ctx.base_path
    fs = storage_for(d)
    fs.makedirs(d)
    if claim is not None:
        claim.check()
    ctx.markers().create(partition, name, CREATE)
    path = os.path.join(d, name)
    size = handle.write_parquet(path, out, ctx)
    if claim is not None and not claim.held():
        fs.delete(path)
        claim.check()
    rel = f"{partition}/{name}" if partition else name
    return rel, path, size


def write_stat(fid: str, rel: str, partition: str, size: int, *, prev: str, writes: int, inserts: int = 0,
               updates: int = 0, deletes: int = 0, **extra) -> dict:
    st = {
        "fileId": fid, "path": rel, "prevCommit": prev, "partitionPath": partition,
        "numWrites": writes, "numDeletes": deletes, "numUpdateWrites": updates, "numInserts": inserts,
        "totalWriteBytes": size, "totalWriteErrors": 0, "fileSizeInBytes": size, "tempPath": None,
        "minEventTime": None, "maxEventTime": None, "totalLogRecords": 0, "totalLogFilesCompacted": 0,
        "totalLogSizeCompacted": 0, "totalUpdatedRecordsCompacted": 0, "totalLogBlocks": 0,
        "totalCorruptLogBlock": 0, "totalRollbackBlocks": 0, "numIgnored": 0,
    }
    st.update(extra)
    return st


def commit_metadata(stats: list[dict], op_type: str, table: HoodieTable, *, compacted: bool = False,
                    replaced: dict | None = None) -> dict:
    pts: dict[str, list[dict]] = {}
    for s in stats:
        pts.setdefault(s["partitionPath"], []).append(s)
    schema_json = table.timeline.schema_json()
    if not schema_json:
        data = pa.schema([f for f in table_schema(table) if f.name not in META_FIELDS])
        schema_json = avro_to_json(arrow_to_avro(data, table.config.name))
    md = {"partitionToWriteStats": pts, "compacted": compacted, "extraMetadata": {"schema": schema_json},
          "operationType": op_type}
    if replaced is not None:
        md["partitionToReplaceFileIds"] = replaced
    return md


def rollback_partial_attempt(table: HoodieTable, instant: str) -> list[str]:
    """Delete the data files a previous, failed execution of a service instant left (from its markers), so
    the plan can be executed again from scratch. Returns the deleted files."""
    cur = table.reload().get(instant)
    if cur is not None and cur.is_completed:  # it failed after its commit: its files are the table's now
        log.warning("%s completed before its executor failed: its files stay", instant)
        return []
    deleted = []
    for p in files_of_instant(table, instant):
        if table.fs.delete(p):
            deleted.append(p)
    delete_markers(table.base_path, instant)
    if deleted:
        log.info("removed %d file(s) of an earlier attempt of %s", len(deleted), instant)
    return deleted


def run_parallel(fn, items, parallelism: int, desc: str, progress: bool = False) -> list:
    """fn(item) for every item on a thread pool (pyarrow releases the GIL for decoding/encoding), results in
    item order, with a progress bar (`Progress`, shown when `progress`); the first error is raised after the
    running tasks finish."""
    from concurrent.futures import ThreadPoolExecutor

    bar = Progress(len(items), desc, progress)
    try:
        if parallelism <= 1 or len(items) <= 1:
            out = []
            for it in items:
                out.append(fn(it))
                bar.update()
            return out
        with ThreadPoolExecutor(max_workers=parallelism) as ex:
            futs = [ex.submit(fn, it) for it in items]
            out = []
            for f in futs:
                out.append(f.result())
                bar.update()
        return out
    finally:
        bar.close()


def default_parallelism() -> int:
    return max(1, min(4, os.cpu_count() or 1))
