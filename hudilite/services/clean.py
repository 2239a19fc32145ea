"""Clean: remove file slices outside the retention window (plan `<t>.clean.requested`, execute, `<t>.clean`).

Policies (`hoodie.cleaner.policy`):
- KEEP_LATEST_COMMITS (default; `hoodie.cleaner.commits.retained`, default 10): the earliest retained instant E
  is the N-th newest completed write instant (commit, deltacommit, replacecommit; compactions and clusterings
  included), or the oldest pending instant if that is older. Every read at a retained instant (time travel at
  any completed instant >= E, incremental ranges starting at or after E) still finds its slices: per file
  group, every slice whose base instant is >= E is kept, and so is the newest slice older than E (the one a
  read at E uses). Older slices (base file and their log files) are removed. File groups replaced by a
  replacecommit older than E (insert_overwrite, clustering) are removed whole: no retained read sees them.
- KEEP_LATEST_FILE_VERSIONS (`hoodie.cleaner.fileversions.retained`, default 3): per file group the newest N
  slices are kept, older ones removed; replaced file groups are removed once their replacecommit is older
  than every retained slice of the table's other groups would need - here: when the replacecommit is older
  than the oldest pending instant. Time travel is only guaranteed back to the oldest kept slice of each group.
Always kept, whatever the policy: the latest slice of every group, slices of pending compaction and
clustering plans, files of pending or failed instants (rollback removes those, not clean).

The plan is decided under the table lock on one timeline (`Transaction.start` with a plan callback) and
lists the absolute paths to delete (Avro `HoodieCleanerPlan`, version 2). Execution deletes exactly those
(paths outside the table are refused), is idempotent (a killed clean is re-executed by the next run: files
already gone count as deleted) and completes `<t>.clean` (Avro `HoodieCleanMetadata`) under the lock.
hudi-rs ignores clean instants; time travel before E then finds no slice for cleaned groups.
"""

from __future__ import annotations

import logging
import os
import time

from hudilite import auxfiles
from hudilite.errors import CorruptTableError, HudiliteError, InvalidWriteError
from hudilite.fs_view import FileSystemView
from hudilite.options import CLEANER_COMMITS_RETAINED, CLEANER_POLICY, CLEANER_VERSIONS_RETAINED
from hudilite.reader import overlay_cache
from hudilite.services.common import Progress, open_table, pending_plan, schedule_plan
from hudilite.storage import canonical, storage_for
from hudilite.table import HoodieTable
from hudilite.timeline import CLEAN, COMPLETED, INFLIGHT, REPLACE_COMMIT, ROLLBACK, WRITE_ACTIONS, Instant, Timeline
from hudilite.timeline.avro_models import CLEAN_METADATA, CLEANER_PLAN, from_container, to_container
from hudilite.timeline.heartbeat import heartbeat_path
from hudilite.timeline.plans import pending_service_groups, read_requested
from hudilite.writer.rollback import clean_completed_leftovers
from hudilite.writer.transaction import Transaction

log = logging.getLogger(__name__)

# the sweep of every auxiliary file kind clean owns (hudilite.auxfiles: `clean=True`); looked up at call time
_SWEEPS = {auxfiles.OVERLAYS: lambda base_path: overlay_cache.sweep(base_path)}
_SWEEP_NAMES = {auxfiles.OVERLAYS: "overlay"}

POLICIES = CLEANER_POLICY.choices
KEEP_LATEST_COMMITS, KEEP_LATEST_FILE_VERSIONS = POLICIES


class CleanError(HudiliteError):
    """A clean plan cannot be executed as planned (nothing outside the plan is touched)."""


def check_options(options: dict | None) -> None:
    for opt in (CLEANER_POLICY, CLEANER_COMMITS_RETAINED, CLEANER_VERSIONS_RETAINED):
        opt.get(options)


def earliest_retained(tl: Timeline, options: dict | None) -> Instant | None:
    """KEEP_LATEST_COMMITS: the earliest instant whose reads must keep working (None: keep everything)."""
    n = CLEANER_COMMITS_RETAINED.get(options)
    done = tl.completed(WRITE_ACTIONS)
    if len(done) <= n:
        return None
    e = done[-n]
    pending = [i for i in tl.pending() if i.action not in (CLEAN, ROLLBACK)]
    if pending and pending[0].timestamp < e.timestamp:
        return pending[0]
    return e


def plan_clean(table: HoodieTable, tl: Timeline, options: dict | None) -> dict | None:
    """The HoodieCleanerPlan record for this timeline, or None when nothing is to be removed."""
    policy = CLEANER_POLICY.get(options)
    versions = CLEANER_VERSIONS_RETAINED.get(options)
    e_inst = earliest_retained(tl, options) if policy == KEEP_LATEST_COMMITS else None
    if policy == KEEP_LATEST_COMMITS and e_inst is None:
        return None
    e = e_inst.timestamp if e_inst is not None else None
    oldest_pending = next((i.timestamp for i in tl.pending() if i.action not in (CLEAN, ROLLBACK)), None)
    replace_bound = e if policy == KEEP_LATEST_COMMITS else oldest_pending
    replaced: dict[tuple[str, str], str] = {}
    for inst in tl.completed((REPLACE_COMMIT,)):
        for part, fids in (tl.read_metadata(inst).get("partitionToReplaceFileIds") or {}).items():
            for fid in fids or []:
                replaced[(part or "", fid)] = inst.timestamp
    protected = pending_service_groups(tl)
    protected_slices = set()
    for inst in tl.pending():
        plan = read_requested(tl, inst) if inst.action not in (CLEAN, ROLLBACK) else None
        for op in (plan or {}).get("operations") or []:  # compaction: the planned slice
            protected_slices.add((op.get("partitionPath") or "", op["fileId"], op.get("baseInstantTime")))
    view = FileSystemView(table.base_path, tl)
    to_delete: dict[str, list[dict]] = {}
    for part in table.partitions():
        for fid, fg in sorted(view.file_groups(part).items()):
            g = (part, fid)
            keys = sorted(fg.slices)
            r = replaced.get(g)
            if r is not None and g not in protected and (replace_bound is None or r < replace_bound):
                doomed = keys
            elif policy == KEEP_LATEST_COMMITS:
                older = [k for k in keys if k < e]
                doomed = older[:-1]  # the newest slice older than E serves reads at E
            else:
                doomed = keys[:-versions]
            for k in doomed:
                if (part, fid, k) in protected_slices:
                    continue
                sl = fg.slices[k]
                for path in sl.files:
                    to_delete.setdefault(part, []).append({"filePath": path, "isBootstrapBaseFile": False})
    if not to_delete:
        return None
    return {
        "earliestInstantToRetain": ({"timestamp": e, "action": e_inst.action, "state": e_inst.state}
                                    if e_inst is not None else None),
        "policy": policy,
        "filesToBeDeletedPerPartition": {},
        "version": 2,
        "filePathsToBeDeletedPerPartition": to_delete,
        "partitionsToBeDeleted": [],
    }


def schedule_clean(table_or_path, options: dict | None = None) -> str | None:
    """Plan a clean (`<t>.clean.requested`). Returns its instant, or None when nothing is to be removed."""
    check_options(options)
    return schedule_plan(open_table(table_or_path), options, CLEAN, CLEANER_PLAN, plan_clean)


def execute_clean(table: HoodieTable, instant: Instant, options: dict | None = None, *,
                  progress: bool = False) -> dict:
    """Execute a pending clean plan; returns its HoodieCleanMetadata record."""
    t0 = time.monotonic()
    tl, cur, plan = pending_plan(table, instant, CLEAN, CleanError, CorruptTableError)
    base = canonical(table.base_path)
    per_part = plan.get("filePathsToBeDeletedPerPartition") or {}
    if not per_part and plan.get("filesToBeDeletedPerPartition"):  # version 1 plans: file names
        per_part = {p: [{"filePath": os.path.join(table.partition_dir(p), n)} for n in names]
                    for p, names in plan["filesToBeDeletedPerPartition"].items()}
    paths = []
    for part, infos in per_part.items():
        for info in infos or []:
            p = info.get("filePath") or ""
            if p.startswith("file:"):
                p = p[5:]
            real = canonical(p)
            if not real.startswith(base + "/") or real.startswith(f"{base}/.hoodie/"):
                raise CleanError(f"clean {cur.timestamp}: planned path {p!r} is outside the table's data "
                                 f"directories; nothing deleted")
            paths.append((part, p))
    if cur.state != INFLIGHT:
        requested = os.path.join(tl.meta_dir, cur.with_state("REQUESTED").file_name(tl.layout))
        table.fs.write_bytes(tl.instant_path(cur.with_state(INFLIGHT)), table.fs.read_bytes(requested))
    bar = Progress(len(paths), f"clean {cur.timestamp}", progress)
    results: dict[str, dict] = {}
    for part, p in paths:
        r = results.setdefault(part, {"partitionPath": part, "policy": plan.get("policy") or "",
                                      "deletePathPatterns": [], "successDeleteFiles": [], "failedDeleteFiles": [],
                                      "isPartitionDeleted": False})
        name = os.path.basename(p)
        r["deletePathPatterns"].append(name)
        try:
            table.fs.delete(p)
            r["successDeleteFiles"].append(name)
        except OSError as e:
            log.warning("clean %s could not delete %s: %s", cur.timestamp, p, e)
            r["failedDeleteFiles"].append(name)
        bar.update()
    bar.close()
    for kind in auxfiles.KINDS:  # auxiliary files of removed slices go with them; they never fail the clean
        if kind.clean:
            try:
                _SWEEPS[kind](table.base_path)
            except OSError as e:
                log.warning("clean %s could not remove %s files: %s", cur.timestamp, _SWEEP_NAMES[kind], e)
    eir = plan.get("earliestInstantToRetain") or {}
    last = tl.latest_completed()
    md = {
        "policy": plan.get("policy") or "", "startCleanTime": cur.timestamp,
        "timeTakenInMillis": int((time.monotonic() - t0) * 1000),
        "totalFilesDeleted": sum(len(r["successDeleteFiles"]) for r in results.values()),
        "earliestCommitToRetain": eir.get("timestamp") or "",
        "lastCompletedCommitTimestamp": last.timestamp if last else "",
        "partitionMetadata": results, "version": 2, "bootstrapPartitionMetadata": {},
    }
    txn = Transaction(table, options)
    with txn.lock:
        tl2 = table.reload()
        now = tl2.get(cur.timestamp)
        if now is None or now.is_completed:
            raise CleanError(f"clean {cur.timestamp} was completed or removed by another process")
        txn.lock.verify()
        body = to_container(CLEAN_METADATA, md)
        done = cur.with_state(COMPLETED)
        if tl2.layout >= 2:  # the completed file is named with its completion time
            done = Instant(cur.timestamp, cur.action, COMPLETED, txn.next_completion_time(tl2))
            txn.record_completion_time(done.completion)
        if not txn.fenced(cur, lambda stage: table.fs.put_if_absent(tl2.instant_path(done), body, stage_dir=stage)):
            raise CleanError(f"clean {cur.timestamp} was completed by another process")
    table.reload()
    log.info("clean %s removed %d file(s)", cur.timestamp, md["totalFilesDeleted"])
    return md


def run_clean(table_or_path, options: dict | None = None, *, progress: bool = False,
              schedule: bool = True) -> list[str]:
    """Finish pending cleans (oldest first), then plan and execute a new one (`schedule`). Returns the
    completed clean instants."""
    check_options(options)
    table = open_table(table_or_path)
    # marker directories and heartbeats of completed instants (a writer killed after its commit, before its own
    # cleanup) go with the next clean too, not only with the next write: a table may get none (an aggregate
    # whose refresh found nothing new). The lock only when there are some: a clean that fails (bad options, a
    # damaged table) or has nothing to do leaves the storage untouched
    if _completed_leftovers(table):
        with Transaction(table, options).lock:
            table.reload()
            clean_completed_leftovers(table)
    done = []
    for inst in table.reload().pending((CLEAN,)):
        execute_clean(table, inst, options, progress=progress)
        done.append(inst.timestamp)
    if schedule:
        t = schedule_clean(table, options)
        if t is not None:
            execute_clean(table, table.reload().get(t), options, progress=progress)
            done.append(t)
    return done


def _completed_leftovers(table: HoodieTable) -> bool:
    completed = {i.timestamp for i in table.reload().instants if i.is_completed}
    hb_dir = os.path.dirname(heartbeat_path(table.base_path, "x"))
    return any(t in completed for t in table.fs.listdir(table.temp_path)) or \
        any(t in completed for t in table.fs.listdir(hb_dir))


def last_clean(tl: Timeline) -> dict | None:
    """The HoodieCleanMetadata of the newest completed clean (None without one)."""
    for inst in reversed(tl.completed((CLEAN,))):
        path = tl.instant_path(inst)
        try:
            return from_container(storage_for(path).read_bytes(path))
        except Exception as e:  # noqa: BLE001
            raise CorruptTableError(f"cannot parse clean metadata {path}: {e}") from e
    return None


__all__ = ["schedule_clean", "execute_clean", "run_clean", "plan_clean", "earliest_retained", "last_clean",
           "CleanError", "InvalidWriteError"]
