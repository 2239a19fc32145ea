"""Compaction of merge-on-read tables: schedule a plan, execute it into new base files.

Schedule (`schedule_compaction`), under the table lock (`Transaction.start` with a plan callback, so the
plan and the requested file are decided on one consistent timeline):
1. the trigger (`hoodie.compact.inline.trigger.strategy`):
   - NUM_COMMITS (default): at least `hoodie.compact.inline.max.delta.commits` (5) completed deltacommits
     since the last completed compaction;
   - NUM_COMMITS_AFTER_LAST_REQUEST: the same, counted since the last compaction plan (pending or done);
   - TIME_ELAPSED: at least `hoodie.compact.inline.max.delta.seconds` (3600) since the last compaction (or,
     without one, since the first deltacommit) - evaluated against the clock, so it fires on an idle table;
   - NUM_AND_TIME / NUM_OR_TIME: both / either;
   - LOG_SIZE (hudilite): some file group's logs hold at least `hoodie.compaction.logfile.size.threshold` bytes.
2. the file groups: the latest slice of every group that has log files, whose total log size is at least
   `hoodie.compaction.logfile.size.threshold` (default 0), that is not in a pending compaction or clustering
   plan, not replaced, and whose log blocks all belong to completed (or rolled-back) instants: a slice holding
   a block of an instant still in flight is left for a later plan.
3. `<t>.compaction.requested`: an Avro `HoodieCompactionPlan` (version 2) with one
   `HoodieCompactionOperation` per slice (base file name, log file names, base instant, metrics).
Nothing to compact: no instant is created.

Writers and a pending plan: a writer appends the logs of a group in a pending plan to a new slice whose base
instant is the compaction instant (`.<fileId>_<compactionInstant>.log.N_*`); readers merge the previous slice
with those logs until the compaction completes (fs_view attaches them there, since the compaction's base file
is not visible yet). A writer that planned against the previous slice before the plan appeared (its logs named
with the old base instant) is aborted at commit with a retryable CommitConflictError (writer/conflict.py):
its blocks would be missing from the compacted base file.

Execute (`run_compaction`): every pending plan, oldest first, each under its claim (services/claim.py: one
executor at a time, output names unique per attempt). Per plan: `<t>.compaction.inflight`, files of
a failed earlier attempt removed (markers), then every planned slice -> one new base file at the compaction
instant: base rows + log blocks merged as a snapshot read merges them (reader/merge.py: completed instants of
the whole timeline, archive included, rollback command blocks honoured). A slice whose logs hold no valid block
still gets its base file rewritten (its rows carried over); meta columns of carried rows are kept. Then
`<t>.commit` (JSON HoodieCommitMetadata, operationType COMPACT, compacted true) under the table lock.
"""

from __future__ import annotations

import logging
import os
import time

from hudilite.errors import CorruptTableError, HudiliteError, InvalidWriteError
from hudilite.fs_view import FileSystemView
from hudilite.log.blocks import CommandBlock, LogBlock
from hudilite.log.format import BlockType
from hudilite.log.reader import scan_log_file
from hudilite.markers import delete_markers
from hudilite.options import (
    COMPACT_LOG_SIZE,
    COMPACT_MAX_DELTA_COMMITS,
    COMPACT_MAX_DELTA_SECONDS,
    COMPACT_PARALLELISM,
    COMPACT_TRIGGER,
)
from hudilite.reader.merge import KEY, conform, log_records, merge_records, read_base, valid_blocks
from hudilite.services.claim import CLAIMED, COMPLETED, MISSING, acquire
from hudilite.services.claim import check_options as claim_options
from hudilite.services.common import (
    begin_execution,
    commit_metadata,
    default_parallelism,
    open_table,
    pending_plan,
    plan_file,
    run_parallel,
    run_pending,
    write_base_file,
    write_stat,
)
from hudilite.table import HoodieTable
from hudilite.timeline import COMMIT, COMPACTION, DELTA_COMMIT, INFLIGHT, Instant, Timeline
from hudilite.timeline.avro_models import COMPACTION_PLAN, to_container
from hudilite.timeline.instant_time import now_ms, parse_instant
from hudilite.timeline.plans import pending_service_groups
from hudilite.writer.transaction import Transaction

log = logging.getLogger(__name__)

TRIGGER_KEY, LOG_SIZE_KEY = COMPACT_TRIGGER.key, COMPACT_LOG_SIZE.key
TRIGGERS = COMPACT_TRIGGER.choices
_DATA_TYPES = (BlockType.AVRO_DATA, BlockType.PARQUET_DATA, BlockType.DELETE, BlockType.HFILE_DATA,
               BlockType.CDC_DATA)


class CompactionError(HudiliteError):
    """A compaction plan cannot be executed (the table is left as it was; the plan stays pending)."""


def check_options(options: dict | None) -> None:
    """Validate the compaction options (InvalidWriteError naming the bad one)."""
    for opt in (COMPACT_TRIGGER, COMPACT_MAX_DELTA_COMMITS, COMPACT_MAX_DELTA_SECONDS, COMPACT_LOG_SIZE,
                COMPACT_PARALLELISM):
        opt.get(options)
    claim_options(options)


# ---- scheduling ---------------------------------------------------------------------------------------
def _is_compaction_commit(tl: Timeline, inst: Instant) -> bool:
    if inst.action != COMMIT or not inst.is_completed:
        return False
    try:
        return str(tl.read_metadata(inst).get("operationType") or "").upper() == "COMPACT"
    except CorruptTableError:
        return False


def trigger_fires(tl: Timeline, options: dict | None, *, clock=now_ms) -> tuple[bool, str]:
    """Whether the table-level trigger fires now, and why (or why not)."""
    strategy = COMPACT_TRIGGER.get(options)
    max_commits = COMPACT_MAX_DELTA_COMMITS.get(options)
    max_seconds = COMPACT_MAX_DELTA_SECONDS.get(options)
    if strategy == "LOG_SIZE":
        return True, "log size (decided per file group)"
    completed = [i for i in tl.instants if _is_compaction_commit(tl, i)]
    last_done = completed[-1].timestamp if completed else None
    requested = [i.timestamp for i in tl.instants if i.action == COMPACTION] + [i.timestamp for i in completed]
    last_req = max(requested) if requested else None
    since = last_req if strategy == "NUM_COMMITS_AFTER_LAST_REQUEST" else last_done
    deltas = [i for i in tl.completed((DELTA_COMMIT,)) if since is None or i.timestamp > since]
    n_ok = len(deltas) >= max_commits
    first_delta = tl.completed((DELTA_COMMIT,))
    ref = last_done or (first_delta[0].timestamp if first_delta else None)
    elapsed = (clock() - parse_instant(ref)) / 1000 if ref else 0.0
    t_ok = ref is not None and elapsed >= max_seconds
    why = f"{len(deltas)} delta commit(s) since {since or 'the start'} (need {max_commits}), " \
          f"{elapsed:.1f}s since {ref or '-'} (need {max_seconds}s)"
    fires = {"NUM_COMMITS": n_ok, "NUM_COMMITS_AFTER_LAST_REQUEST": n_ok, "TIME_ELAPSED": t_ok,
             "NUM_AND_TIME": n_ok and t_ok, "NUM_OR_TIME": n_ok or t_ok}[strategy]
    return fires, f"{strategy}: {why}"


def log_instants(paths) -> tuple[set[str], set[str]]:
    """(instants of data/delete blocks, rollback targets) in the given log files."""
    data, rolled = set(), set()
    for p in paths:
        for b in scan_log_file(p):
            if not isinstance(b, LogBlock) or not b.instant_time:
                continue
            if isinstance(b, CommandBlock):
                if b.is_rollback and b.target_instant_time:
                    rolled.add(b.target_instant_time)
            elif b.block_type in _DATA_TYPES:
                data.add(b.instant_time)
    return data, rolled


def plan_operations(table: HoodieTable, tl: Timeline, options: dict | None) -> tuple[list[dict], list[str]]:
    """The compaction operations for the current timeline (see the module doc), and the skipped groups with
    the reason."""
    threshold = COMPACT_LOG_SIZE.get(options)
    if COMPACT_TRIGGER.get(options) == "LOG_SIZE" and threshold <= 0:
        raise InvalidWriteError(f"{TRIGGER_KEY}=LOG_SIZE needs {LOG_SIZE_KEY} > 0 (bytes of log per file group)")
    pending = pending_service_groups(tl)
    pending_writes = {i.timestamp for i in tl.pending()}
    partitions, listing = table.listing()
    view = FileSystemView(table.base_path, tl, listing)
    ops, skipped = [], []
    for sl in view.latest_slices(partitions):
        if not sl.log_files:
            continue
        g = (sl.partition, sl.file_id)
        if g in pending:
            skipped.append(f"{sl.file_id}: in pending {pending[g][1]} plan {pending[g][0]}")
            continue
        size = sum(lf.size for lf in sl.log_files)
        if size < threshold:
            skipped.append(f"{sl.file_id}: {size} bytes of logs < {threshold}")
            continue
        data, rolled = log_instants([lf.path for lf in sl.log_files])
        inflight = sorted(t for t in data if t in pending_writes and t not in rolled)
        if inflight:
            skipped.append(f"{sl.file_id}: holds log blocks of in-flight instant(s) {', '.join(inflight)}")
            continue
        ops.append({
            "baseInstantTime": sl.base_instant,
            "deltaFilePaths": [os.path.basename(lf.path) for lf in sl.log_files],
            "dataFilePath": sl.base_file.name if sl.base_file is not None else None,
            "fileId": sl.file_id,
            "partitionPath": sl.partition,
            "metrics": {"TOTAL_LOG_FILES": float(len(sl.log_files)), "TOTAL_LOG_FILES_SIZE": float(size),
                        "TOTAL_IO_READ_MB": float(size + (sl.base_file.size if sl.base_file else 0)) / 2 ** 20,
                        "TOTAL_IO_WRITE_MB": float(sl.base_file.size if sl.base_file else size) / 2 ** 20,
                        "TOTAL_IO_MB": 0.0},
            "bootstrapFilePath": None,
        })
    return ops, skipped


def schedule_compaction(table_or_path, options: dict | None = None, *, force: bool = False,
                        clock=now_ms) -> str | None:
    """Schedule a compaction if the trigger fires (or `force`) and some file group qualifies. Returns the
    instant of the new plan, or None."""
    check_options(options)
    table = open_table(table_or_path)
    if table.config.table_type != "MERGE_ON_READ":
        raise InvalidWriteError(f"{table.base_path} is a {table.config.table_type} table: compaction applies to "
                                "MERGE_ON_READ tables only")
    outcome: dict = {}

    def plan(tl: Timeline, t: str):
        fires, why = (True, "forced") if force else trigger_fires(tl, options, clock=clock)
        outcome["why"] = why
        if not fires:
            return None
        ops, skipped = plan_operations(table, tl, options)
        outcome["skipped"] = skipped
        if not ops:
            return None
        outcome["ops"] = len(ops)
        return to_container(COMPACTION_PLAN, {
            "operations": ops, "extraMetadata": {"hudilite.trigger": why}, "version": 2, "strategy": None,
            "preserveHoodieMetadata": False, "missingSchedulePartitions": []})

    inst = Transaction(table, options).start(COMPACTION, plan=plan)
    if inst is None:
        log.info("no compaction scheduled for %s (%s; %s)", table.base_path, outcome.get("why"),
                 "; ".join(outcome.get("skipped", [])) or "no file group with logs")
        return None
    log.info("scheduled compaction %s of %d file group(s) (%s)", inst.timestamp, outcome["ops"], outcome["why"])
    table.reload()
    return inst.timestamp


# ---- execution ----------------------------------------------------------------------------------------
def pending_compactions(table: HoodieTable) -> list[Instant]:
    return [i for i in table.reload().pending((COMPACTION,))]


def _compact_slice(table: HoodieTable, ctx, spec, op: dict, token: str, claim=None) -> dict:
    import pyarrow as pa

    part = op.get("partitionPath") or ""
    pdir = table.partition_dir(part)
    base_path = plan_file(pdir, op["dataFilePath"]) if op.get("dataFilePath") else None
    log_paths = [plan_file(pdir, n) for n in op.get("deltaFilePaths") or []]
    for p in ([base_path] if base_path else []) + log_paths:
        if not table.fs.exists(p):
            raise CompactionError(f"compaction {ctx.instant}: planned file {p} is missing (file group "
                                  f"{op['fileId']}); the table is left as it was")
    base = read_base(base_path, spec) if base_path else conform(pa.table({}), spec.schema).slice(0, 0)
    blocks = valid_blocks(log_paths, spec)
    data, events = log_records(blocks, spec) if blocks else (None, None)
    if events is None:
        merged = base
    elif not spec.keyed:
        merged = pa.concat_tables([base, data]) if data.num_rows else base
    else:
        merged = merge_records(base, data, events, spec)
    import pyarrow.compute as pc

    n_log = len(events[0]) if events is not None else 0
    updated, kept_base = 0, min(base.num_rows, merged.num_rows)
    if events is not None and base.num_rows and spec.keyed:
        updated = int(pc.sum(pc.is_in(base.column(KEY), value_set=events[0])).as_py() or 0)
        kept_base = int(pc.sum(pc.is_in(merged.column(KEY), value_set=base.column(KEY).combine_chunks())
                               ).as_py() or 0)
    rel, _path, size = write_base_file(ctx, part, op["fileId"], token, merged, claim)
    log_size = sum(table.fs.size(p) for p in log_paths)
    return write_stat(
        op["fileId"], rel, part, size, prev=op.get("baseInstantTime") or "null", writes=merged.num_rows,
        updates=updated, deletes=base.num_rows - kept_base, inserts=merged.num_rows - kept_base,
        totalLogRecords=n_log, totalLogFilesCompacted=len(log_paths), totalLogSizeCompacted=log_size,
        totalUpdatedRecordsCompacted=n_log, totalLogBlocks=len(blocks),
        prevBaseFile=op.get("dataFilePath"), baseFile=None, logFiles=None, logVersion=None, logOffset=None)


def execute_compaction(table: HoodieTable, instant: Instant, options: dict | None = None, *,
                       progress: bool = False, wait: bool = False) -> str | None:
    """Execute one pending compaction plan under its claim (services/claim.py); returns its instant time once
    completed. Another executor holding the plan: None (skipped), or with `wait` the instant once that executor
    completed it (or its claim died and this one took over and completed it)."""
    claim = acquire(table, instant.timestamp, COMPACTION, options, wait=wait)
    if claim == COMPLETED:
        return instant.timestamp
    if claim == CLAIMED:
        return None
    if claim == MISSING:
        pending_plan(table, instant, COMPACTION, CompactionError)  # raises, naming the instant
    try:
        tl, cur, plan = pending_plan(table, instant, COMPACTION, CompactionError)
        ops = list(plan.get("operations") or [])
        t0 = time.monotonic()
        spec, ctx = begin_execution(table, tl, cur, options)
        par = COMPACT_PARALLELISM.get(options) or default_parallelism()
        stats = run_parallel(lambda iop: _compact_slice(table, ctx, spec, iop[1], claim.token(iop[0]), claim=claim),
                             list(enumerate(ops)), par, f"compaction {cur.timestamp}", progress)
        md = commit_metadata(stats, "COMPACT", table, compacted=True)
        md["extraMetadata"]["hudilite.compaction.millis"] = str(int((time.monotonic() - t0) * 1000))
        Transaction(table, options).complete(
            Instant(cur.timestamp, COMPACTION, INFLIGHT), md, check_conflicts=False,
            validate=claim.completion_check([op.get("partitionPath") or "" for op in ops], stats))
    except BaseException:
        claim.settle_failure()
        raise
    claim.release(done=True)
    delete_markers(table.base_path, cur.timestamp)
    log.info("completed compaction %s: %d file group(s)", cur.timestamp, len(stats))
    return cur.timestamp


def run_compaction(table_or_path, options: dict | None = None, *, instant: str | None = None,
                   progress: bool = False, wait: bool = False) -> list[str]:
    """Execute every pending compaction plan, oldest first (or only `instant`). Returns the completed instants.
    A plan another executor is executing is skipped (inline compaction), or with `wait` (the command line)
    waited for. A plan that fails stays pending (its partial files are invisible and removed by the next
    attempt); the error is raised after the plans before it completed."""
    check_options(options)
    table = open_table(table_or_path)
    return run_pending(table, pending_compactions(table), instant, "compaction", CompactionError,
                       execute_compaction, options, progress, wait)


def compact(table_or_path, options: dict | None = None, *, progress: bool = False, force: bool = False
            ) -> list[str]:
    """Schedule (if the trigger fires) and run every pending plan. Returns the completed instants."""
    table = open_table(table_or_path)
    schedule_compaction(table, options, force=force)
    return run_compaction(table, options, progress=progress)
