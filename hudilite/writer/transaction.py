"""Starting and completing instants under the table lock (optimistic concurrency control).

start:    lock -> newest instant on the timeline -> new time (> newest, >= now) -> lease verified ->
          `<t>.<action>.requested` created with put-if-absent, first heartbeat -> wait out the max clock skew ->
          lease verified again (else the instant is removed and LockLostError raised) -> unlock. Data files are
          then written without the lock.
complete: lock -> fresh timeline -> our instant must still be pending (not rolled back by someone) ->
          conflict check against everything completed since the writer's basis and against pending
          table-service plans and prepared commits (hudilite.writer.conflict) -> `validate` hook -> the lease
          verified (renewed: nobody can take the lock for a full lease from here) -> completion time ->
          `<t>.<action>` with put-if-absent, fenced by the lock's lease directory (`fenced`) -> unlock.
The completed file is the one atomic act that makes a write visible.

prepare (used by the streaming sink's async instants): the checks of `complete` under the lock, then the
full commit metadata, marked prepared, written to the inflight file. From then on the commit is guaranteed:
later writers treat the prepared instant's file groups like a pending plan (they abort on overlap), failed-
write rollback leaves it alone, and `complete_prepared` (or recovery after a crash) completes it.

Concurrency modes (`hoodie.write.concurrency.mode`):
- `optimistic_concurrency_control` (default): several writers. A pending instant is rolled back only when its
  writer's heartbeat expired by that writer's own recorded tolerance (lazy rollback, hudilite.timeline.heartbeat).
- `single_writer`: one writer at a time is expected. Pending instants found by the next writer are failed
  writes and are rolled back eagerly (a crashed write is cleaned up at once). Commits are still
  conflict-checked, and rollback runs under the lock, so an accidental second writer cannot corrupt the table:
  one of the two fails with a retryable CommitConflictError.
- `non_blocking_concurrency_control` (merge-on-read tables of version 8/9 only, `check_nbcc_table`): as OCC, but
  log appends to file groups that concurrent deltacommits also appended to do not conflict
  (`conflict.find_conflicts(nbcc=True)`); inserts of the same new key still do (`conflict.new_key_conflicts`).
"""

from __future__ import annotations

import errno
import json
import logging
import os
import time
from typing import Callable

from hudilite import auxfiles, change_images
from hudilite.config import MERGE_ON_READ
from hudilite.errors import CommitConflictError, CorruptTableError, InvalidWriteError
from hudilite.lock import LockLostError, lock_for
from hudilite.lock.base import check_lock_provider
from hudilite.options import (
    CONCURRENCY_MODE,
    FSYNC,
    INDEX_TYPE,
    LOCK_EXPIRE_MS,
    LOCK_WAIT_MS,
    MAX_CLOCK_SKEW_MS,
    WRITER_TAG,
)
from hudilite.storage.local import directories_of, storage_for
from hudilite.table import HoodieTable
from hudilite.timeline import COMMIT, COMPLETED, INFLIGHT, REQUESTED, ROLLBACK, WRITE_ACTIONS, Instant
from hudilite.timeline.avro_models import ROLLBACK_METADATA, ROLLBACK_PLAN, commit_metadata_bytes, to_container
from hudilite.timeline.heartbeat import (
    Heartbeat,
    heartbeat_expired,
    heartbeat_path,
    heartbeat_settings,
    read_heartbeat,
    write_heartbeat,
)
from hudilite.timeline.instant import CLUSTERING, COMPLETION_KEY, REPLACE_COMMIT
from hudilite.timeline.instant_time import next_instant_time, wait_for_skew
from hudilite.timeline.plans import read_requested
from hudilite.writer.conflict import (
    PREPARED_KEY,
    Footprint,
    conflict_error,
    find_conflicts,
    new_key_conflicts,
    pending_guard,
    prepared_metadata,
    read_basis,
)
from hudilite.writer.rollback import clean_completed_leftovers, execute_rollback, rollback_plan

log = logging.getLogger(__name__)

CONCURRENCY_MODE_KEY = CONCURRENCY_MODE.key
SINGLE_WRITER = "single_writer"
OCC = "optimistic_concurrency_control"
NBCC = "non_blocking_concurrency_control"
# set by the streaming sink (its query id): recorded in the heartbeat, so a restarted query rolls back the
# unprepared instants of its own dead run at once instead of waiting for their heartbeats to expire
WRITER_TAG_KEY = WRITER_TAG.key
_MODE_ALIASES = {"single_writer": SINGLE_WRITER, "optimistic_concurrency_control": OCC, "occ": OCC,
                 NBCC: NBCC, "nbcc": NBCC}


def concurrency_mode(options: dict | None) -> str:
    v = CONCURRENCY_MODE.get(options).strip().lower()
    if v not in _MODE_ALIASES:
        raise InvalidWriteError(f"{CONCURRENCY_MODE_KEY}={v!r}: expected single_writer, "
                                "optimistic_concurrency_control or non_blocking_concurrency_control")
    return _MODE_ALIASES[v]


def check_nbcc_table(options: dict | None, table_type: str, version: int) -> None:
    """Non-blocking concurrency control needs merge-on-read (concurrent updates become log files merged at read
    time) and table version 8/9 (log files named by the writing deltacommit, sliced by completion time; on
    version 6 two writers would append to the same log file names). Raises InvalidWriteError otherwise."""
    if concurrency_mode(options) != NBCC:
        return
    if table_type != MERGE_ON_READ or version < 8:
        raise InvalidWriteError(
            f"{CONCURRENCY_MODE_KEY}={NBCC} needs a MERGE_ON_READ table of version 8 or 9; this table is "
            f"{table_type} version {version}: write with optimistic_concurrency_control (the default)"
            + (", or upgrade the table to version 9 (hudilite upgrade)" if table_type == MERGE_ON_READ else ""))


def check_concurrency_options(options: dict | None) -> None:
    """Reject bad concurrency/lock options before anything is written (InvalidWriteError)."""
    concurrency_mode(options)
    heartbeat_settings(options)
    try:
        check_lock_provider(options)
    except ValueError as e:
        raise InvalidWriteError(str(e)) from None
    for opt in (FSYNC, LOCK_EXPIRE_MS, LOCK_WAIT_MS, MAX_CLOCK_SKEW_MS):
        opt.get(options)


def _aux_last_completion(table: HoodieTable) -> str:
    return auxfiles.path(table.base_path, auxfiles.LAST_COMPLETION)


class Transaction:
    """One writer's view of the instant protocol. Use one object per concurrent writer (thread/process)."""

    def __init__(self, table: HoodieTable, options: dict | None = None):
        self.table = table
        self.options = options or {}
        self.lock = lock_for(table.base_path, self.options)
        self.max_skew_ms = MAX_CLOCK_SKEW_MS.get(self.options)
        self.heartbeat_interval_ms, self.heartbeat_misses = heartbeat_settings(self.options)
        self.tag = WRITER_TAG.get(self.options) or None
        self._bases: dict[str, object] = {}  # instant -> basis (set of instant times, or a completion time)
        self.nbcc = concurrency_mode(self.options) == NBCC

    # ---- failed writes ---------------------------------------------------------------------
    @property
    def heartbeat_tolerance_ms(self) -> int:
        return self.heartbeat_interval_ms * self.heartbeat_misses

    def rollback_failed_writes(self, *, lazy: bool | None = None, heartbeat_tolerance_ms: int | None = None,
                               ) -> list[str]:
        """Roll back pending write instants of failed writers, under the lock (so a writer cannot complete
        an instant while it is being rolled back). `lazy` (default: any mode but single_writer) rolls back
        only instants whose heartbeat expired, judged by the tolerance each writer recorded in its heartbeat
        (`heartbeat_tolerance_ms`, default this writer's, only for heartbeats that record none), plus
        unprepared instants tagged with this writer's own tag (a restarted streaming query's dead run).
        Prepared commits and table-service plans are never rolled back here. Returns the rolled-back instant
        times."""
        if lazy is None:
            lazy = concurrency_mode(self.options) != SINGLE_WRITER
        if heartbeat_tolerance_ms is None:
            heartbeat_tolerance_ms = self.heartbeat_tolerance_ms
        with self.lock:
            done = self.finish_pending_rollbacks()
            tl = self.table.reload()
            for inst in tl.pending(WRITE_ACTIONS):
                if pending_guard(tl, inst) is not None:
                    continue  # a plan (its service retries it) or a prepared commit (completed, not undone)
                if lazy and not self._own_dead_run(inst.timestamp) and not heartbeat_expired(
                        self.table.base_path, inst.timestamp, heartbeat_tolerance_ms):
                    continue
                self.rollback(inst)
                done.append(inst.timestamp)
            clean_completed_leftovers(self.table)
        return done

    # ---- rollback instants -----------------------------------------------------------------
    def rollback(self, inst: Instant) -> list[str]:
        """Roll back the pending write `inst` as Apache Hudi does, with the lock held by the caller: a new
        instant `<t>.rollback.requested` (the plan), `.inflight`, the execution, then the completed rollback
        (HoodieRollbackMetadata). A pending rollback of `inst` left by a killed process is finished instead.
        Returns the deleted data files."""
        if inst.is_completed:
            raise ValueError(f"instant {inst.timestamp} is completed; rollback of completed commits is a restore")
        tl = self.table.reload()
        resumed = next(((rb, plan) for rb, plan in self._pending_rollbacks(tl)
                        if plan["instantToRollback"]["commitTime"] == inst.timestamp), None)
        if resumed is not None:
            return self._finish_rollback(*resumed)
        if tl.get(inst.timestamp) is None:
            # rolled back already (by another process): only what its writer may have written since goes, and
            # no second rollback instant is written for it
            return self.abort(inst)
        self.lock.verify()  # a holder that stalled past its lease must not delete anybody's files
        plan = rollback_plan(self.table, inst)
        body = to_container(ROLLBACK_PLAN, plan)
        last = max(filter(None, [tl.last_instant_time(), self._last_completion()]), default=None)
        while True:
            t = next_instant_time(last)
            rb = Instant(t, ROLLBACK, REQUESTED)
            if self.table.fs.put_if_absent(tl.instant_path(rb), body):
                break
            last = t  # somebody holds this time (lock bypassed): take the next one
        wait_for_skew(t, self.max_skew_ms)
        return self._finish_rollback(rb, plan)

    def abort(self, inst: Instant) -> list[str]:
        """Undo this writer's OWN failed or abandoned write `inst`, with the lock held by the caller: its files,
        markers and instant files go and no rollback instant is written, so the table is exactly as it was
        before the write (a rejected input leaves no trace). A failed write of somebody else is `rollback`'s.
        Killed half-way, the pending instant stays and the next rollback of failed writes finishes it (with a
        rollback instant). Returns the deleted data files."""
        if inst.is_completed:
            raise ValueError(f"instant {inst.timestamp} is completed; rollback of completed commits is a restore")
        self.lock.verify()  # a holder that stalled past its lease must not delete anybody's files
        tl = self.table.reload()
        # command blocks of a v6 log appended to are stamped with a time after every instant, as a rollback's
        return execute_rollback(self.table, rollback_plan(self.table, inst),
                                next_instant_time(tl.last_instant_time()))[0]

    def finish_pending_rollbacks(self) -> list[str]:
        """Re-execute the rollbacks a killed process left pending (for the same instants, as Hudi does), with
        the lock held. Returns the instants they roll back."""
        done = []
        for rb, plan in self._pending_rollbacks(self.table.reload()):
            self._finish_rollback(rb, plan)
            done.append(plan["instantToRollback"]["commitTime"])
        return done

    def _pending_rollbacks(self, tl) -> list[tuple[Instant, dict]]:
        out = []
        for rb in tl.pending((ROLLBACK,)):
            plan = read_requested(tl, rb)
            if not plan or not plan.get("instantToRollback"):
                raise CorruptTableError(f"pending rollback {rb.timestamp} of {self.table.base_path} has no plan "
                                        "naming the instant it rolls back")
            out.append((rb, plan))
        return out

    def _finish_rollback(self, rb: Instant, plan: dict) -> list[str]:
        fs, tl = self.table.fs, self.table.timeline
        self.lock.verify()
        fs.create_empty_if_absent(tl.instant_path(rb.with_state(INFLIGHT)))
        deleted, metadata = execute_rollback(self.table, plan, rb.timestamp)
        tl = self.table.reload()
        done = rb.with_state(COMPLETED)
        self.lock.verify()
        if tl.layout >= 2:  # the completed file is named with its completion time
            done = Instant(rb.timestamp, ROLLBACK, COMPLETED, self.next_completion_time(tl))
            self.record_completion_time(done.completion)
        body = to_container(ROLLBACK_METADATA, metadata)
        self.fenced(rb, lambda stage: fs.put_if_absent(tl.instant_path(done), body, stage_dir=stage))
        self.table.reload()
        return deleted

    def _own_dead_run(self, instant: str) -> bool:
        if not self.tag:
            return False
        hb = read_heartbeat(self.table.base_path, instant)
        return hb is not None and hb["tag"] == self.tag

    def heartbeat(self, inst: Instant) -> Heartbeat:
        """A started heartbeat for `inst`, beating at this writer's interval (the one `start` recorded)."""
        hb = Heartbeat(self.table.base_path, inst.timestamp, self.heartbeat_interval_ms, self.heartbeat_misses)
        hb.start()
        return hb

    # ---- starting --------------------------------------------------------------------------
    def start(self, action: str = COMMIT, basis=None, plan: Callable | None = None) -> Instant | None:
        """Take a new instant. `basis`: what the writer's plan was built on (`read_basis(table)` taken before
        planning); default: the timeline at this moment. `plan(timeline, instant_time) -> bytes | None` (table
        services): called under the lock with the fresh timeline; its bytes become the requested file's content
        (a compaction/clean/clustering plan), None means nothing to do: no instant is created, None returned."""
        fs = self.table.fs
        with self.lock:
            tl = self.table.reload()
            # an upgrade (which refuses while writes are pending) switched the table after this writer opened it:
            # its instant would land in the old timeline layout, invisible to readers
            if self.table.stored_version() != self.table.config.version:
                raise CommitConflictError(f"{self.table.base_path} was upgraded to table version "
                                          f"{self.table.stored_version()} after this write opened it; retry the write")
            last = max(filter(None, [tl.last_instant_time(), self._last_completion()]), default=None)
            while True:
                t = next_instant_time(last)
                inst = Instant(t, action, REQUESTED)
                if plan is not None:
                    content = plan(tl, t)
                    if content is None:
                        return None
                    self.lock.verify()
                    if fs.put_if_absent(tl.instant_path(inst), content):
                        break
                else:
                    self.lock.verify()
                    if fs.create_empty_if_absent(tl.instant_path(inst)):
                        break
                last = t  # somebody holds this time (lock bypassed): take the next one
            # before the lock is released: a lazy rollback by another writer must never find this instant
            # without a heartbeat (a missing heartbeat counts as expired)
            write_heartbeat(self.table.base_path, t, self.heartbeat_interval_ms, self.heartbeat_misses, self.tag)
            wait_for_skew(t, self.max_skew_ms)
            try:  # nobody else held the lock while we waited, so no one took a smaller time meanwhile
                self.lock.verify()
            except LockLostError:
                fs.delete(tl.instant_path(inst))
                fs.delete(heartbeat_path(self.table.base_path, t))
                raise
            self._bases[t] = frozenset(basis) if basis is not None and not isinstance(basis, str) else (
                basis if basis is not None else read_basis(tl))
        return inst

    def mark_inflight(self, inst: Instant, metadata: dict) -> Instant:
        infl = inst.with_state(INFLIGHT)
        tl = self.table.timeline
        # (layout 2: a HoodieCommitMetadata for every action, as Java writes inflight files)
        self.table.fs.write_bytes(tl.instant_path(infl), self.metadata_bytes(inst, metadata, inflight=True))
        return infl

    def metadata_bytes(self, inst: Instant, metadata: dict, *, inflight: bool = False) -> bytes:
        """A write instant's metadata as its timeline layout stores it (JSON on 1, Avro on 2)."""
        layout = self.table.config.layout_version
        if layout < 2:
            return json.dumps(metadata, indent=None if inflight else 2).encode("utf-8")
        replace = inst.action in (REPLACE_COMMIT, CLUSTERING) and not inflight
        return commit_metadata_bytes(metadata, replace, layout)

    def _last_completion(self) -> str | None:
        p = _aux_last_completion(self.table)
        try:
            v = self.table.fs.read_bytes(p).decode().strip()
            return v if v.isdigit() and len(v) == 17 else None
        except FileNotFoundError:
            return None

    def basis_of(self, inst: Instant):
        """The basis recorded at start; for an instant this object did not start (e.g. after a restart), the
        instant time as a completion-time bound (commits that completed after it was requested)."""
        return self._bases.get(inst.timestamp, inst.timestamp)

    # ---- validating ------------------------------------------------------------------------
    def _validate(self, tl, inst: Instant, metadata: dict, check_conflicts: bool) -> None:
        cur = tl.get(inst.timestamp)
        if cur is None or cur.action != inst.action:
            raise CommitConflictError(
                f"instant {inst.timestamp} ({inst.action}) is no longer on the timeline: another writer rolled it "
                f"back as a failed write (its heartbeat was older than its tolerance - this writer stalled - or a "
                f"writer in {CONCURRENCY_MODE_KEY}={SINGLE_WRITER} mode, which rolls back every pending instant, "
                f"or `hudilite rollback --force` ran). Retryable.")
        if cur.is_completed:
            raise CommitConflictError(
                f"instant {inst.timestamp} was already completed by another writer (put-if-absent failed)")
        if check_conflicts:
            basis = self.basis_of(inst)
            nbcc = self.nbcc and inst.action in WRITE_ACTIONS and tl.layout >= 2
            conflicts = find_conflicts(tl, inst.timestamp, Footprint.from_metadata(metadata), basis, nbcc=nbcc)
            if nbcc:
                scoped = not INDEX_TYPE.get(self.options).upper().startswith("GLOBAL")
                conflicts += new_key_conflicts(tl, self.table.base_path, inst.timestamp, metadata, basis,
                                               by_partition=scoped)
            if conflicts:
                raise conflict_error(inst.timestamp, conflicts)

    def sync_written(self, inst: Instant, metadata: dict) -> None:
        """fsync (once each) the directories holding the files `metadata` names, before a completed instant can
        name them: their writers fsynced the files themselves after closing them (hoodie.write.fsync). Runs
        outside the lock."""
        if not FSYNC.get(self.options):
            return
        rels = [s["path"] for ss in (metadata.get("partitionToWriteStats") or {}).values() for s in ss or []
                if s.get("path")]
        images = os.path.join(change_images.DIR, inst.timestamp)
        # a commit whose groups wrote no image (every row ignored, say) still names the option, not a directory
        if (metadata.get("extraMetadata") or {}).get(change_images.META_KEY) and \
                self.table.fs.isdir(os.path.join(self.table.base_path, images)):
            rels.append(os.path.join(images, "-"))
        self.table.fs.fsync_dirs(directories_of(self.table.base_path, rels))

    def prepare(self, inst: Instant, metadata: dict, *, check_conflicts: bool = True) -> None:
        """Validate under the lock, then record the full metadata as prepared in the inflight file: the
        commit can no longer conflict and will be completed (by `complete_prepared`, or by recovery)."""
        self.sync_written(inst, metadata)
        with self.lock:
            tl = self.table.reload()
            self._validate(tl, inst, metadata, check_conflicts)
            self.lock.verify()
            md = dict(metadata)
            md["extraMetadata"] = {**(metadata.get("extraMetadata") or {}), PREPARED_KEY: "true"}
            body = self.metadata_bytes(inst, md)
            # fenced: a holder that stalls here while the next one rolls the instant back must not bring the
            # inflight file back as a prepared commit (recovery would complete it over deleted files)
            self.fenced(inst, lambda stage: self.table.fs.write_bytes(
                tl.instant_path(inst.with_state(INFLIGHT)), body, stage_dir=stage))
        self.table.reload()

    def fenced(self, inst: Instant, publish: Callable[[str | None], object]):
        """Run `publish(stage_dir)` - a put-if-absent or atomic replace of a timeline file of `inst` that stages
        its temp file in `stage_dir` - with the lock's lease directory (`LockProvider.fence_dir()`, None for
        providers without one). A holder whose lease was taken over, its directory revoked by the next holder
        before that one acted, gets LockLostError and has published nothing."""
        stage = self.lock.fence_dir()
        try:
            return publish(stage)
        except OSError as e:
            if stage is None or e.errno not in (errno.ENOENT, errno.ESTALE) or storage_for(stage).isdir(stage):
                raise
            raise LockLostError(
                f"instant {inst.timestamp} was not committed: the table lock's lease was taken over by another "
                f"writer while this one stalled (longer than the lease) before its commit file was written. "
                f"Nothing of it was published; retry the write.") from None

    # ---- completing ------------------------------------------------------------------------
    def complete(self, inst: Instant, metadata: dict, validate: Callable[[HoodieTable], None] | None = None,
                 *, check_conflicts: bool = True) -> str:
        """Write the completed instant file after the conflict check (raises CommitConflictError, retryable).
        `validate` runs under the lock on a fresh timeline and may raise too. Returns the completion time."""
        self.sync_written(inst, metadata)
        with self.lock:
            tl = self.table.reload()
            self._validate(tl, inst, metadata, check_conflicts)
            if validate is not None:
                validate(self.table)
            return self._write_completed(tl, inst, metadata)

    def complete_prepared(self, inst: Instant) -> str:
        """Complete a prepared instant from its inflight metadata (no conflict check: done at prepare).
        Idempotent: an instant completed already returns its completion time."""
        with self.lock:
            tl = self.table.reload()
            cur = tl.get(inst.timestamp)
            if cur is not None and cur.is_completed:
                return tl.completion_time(cur)
            md = prepared_metadata(tl, cur) if cur is not None else None
            if md is None:
                raise CommitConflictError(f"instant {inst.timestamp} is not a prepared commit (state: "
                                          f"{cur.state if cur else 'gone'})")
            extra = dict(md.get("extraMetadata") or {})
            extra.pop(PREPARED_KEY, None)
            md["extraMetadata"] = extra
            return self._write_completed(tl, cur, md)

    def next_completion_time(self, tl) -> str:
        """A completion time for an instant completed now, under the lock: greater than every instant and
        completion time on `tl` and than the last completion this table recorded (strictly increasing across
        writers)."""
        last = max(filter(None, [tl.last_instant_time(), self._last_completion()]), default=None)
        return next_instant_time(last)

    def record_completion_time(self, completion: str) -> None:
        """The lower bound for later completion times, written before the instant file that uses it (a
        process dying right after that put must not leave a later completion time free to be taken again)."""
        fs = self.table.fs
        fs.delete_stale_temps(_aux_last_completion(self.table))  # of writers killed in this write (under the lock)
        fs.write_bytes(_aux_last_completion(self.table), completion.encode())

    def _write_completed(self, tl, inst: Instant, metadata: dict) -> str:
        fs = self.table.fs
        completion = self.next_completion_time(tl)
        extra = metadata.setdefault("extraMetadata", {})
        extra.pop(PREPARED_KEY, None)
        extra[COMPLETION_KEY] = completion  # layout 2 names it in the file name too
        done = Instant(inst.timestamp, inst.action, COMPLETED, completion if tl.layout >= 2 else None)
        body = self.metadata_bytes(inst, metadata)
        # Renews the lease right before the put: a holder that stalled past its lease fails here. A stall after
        # it (inside the put) is fenced: the file is published from the lease directory, which the next holder
        # revokes before it acts (see fenced).
        held_until = self.lock.verify()
        # The hint first: a lower bound for later completion times must never lag behind a completed instant (a
        # process dying right after the put), and a hint ahead of a commit that then fails is harmless.
        self.record_completion_time(completion)
        if not self.fenced(inst, lambda stage: fs.put_if_absent(tl.instant_path(done), body, stage_dir=stage)):
            raise CommitConflictError(
                f"instant {inst.timestamp} was already completed by another writer (put-if-absent failed)")
        if held_until is not None and self.lock.fence_dir() is None and time.time() * 1000 >= held_until:
            # a provider with a lease but no fence: the commit may have raced the next holder
            log.error("instant %s was completed after the table lock's lease ran out (the process stalled for "
                      "longer than the lease inside the commit); check the table with `hudilite timeline`",
                      inst.timestamp)
        # Committed: nothing after the put may fail the call (the caller would undo files a completed instant names).
        try:
            fs.delete(heartbeat_path(self.table.base_path, inst.timestamp))  # a writer's Heartbeat.stop() does too
        except OSError:
            log.warning("could not delete the heartbeat of completed instant %s", inst.timestamp, exc_info=True)
        self._bases.pop(inst.timestamp, None)
        self.table.reload()
        return completion
