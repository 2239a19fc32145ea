"""Exclusive, crash-safe execution of a table-service plan (compaction, clustering).

Several executors may reach one pending plan: two writers with inline services, an inline service and
`hudilite compaction run` / `hudilite cluster` from cron. Only the holder of the plan's *claim* writes files:

- Claiming happens under the table lock, before any file is written: the claim record
  `.hoodie/.aux/service_claims/<instant>` (owner, attempt number, the owner's heartbeat tolerance) is written and
  the plan instant's heartbeat (`.hoodie/.heartbeat/<instant>`, timeline/heartbeat.py) starts beating.
- A claim is live while it is not released and its heartbeat is within the claimant's tolerance
  (`hoodie.client.heartbeat.interval_in_ms` x `hoodie.client.heartbeat.tolerable.misses`; the larger of the
  claimant's and the checker's). Another executor then skips the plan (`wait=False`, inline services) or waits
  until the plan completes or the claim dies (`wait=True`, the command line).
- A dead or released claim is taken over with the next attempt number; the new holder removes the previous
  attempt's files (markers) before it writes. Output file names carry the attempt number in their write token,
  so files of different attempts never share a name.
- The holder re-checks its claim before and after writing each file and, under the lock, before completing;
  an executor that lost its claim deletes only its own attempt's files and never touches the instant.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
import uuid

from hudilite import auxfiles
from hudilite.errors import HudiliteError
from hudilite.file_group import parse_base_file_name
from hudilite.lock import lock_for
from hudilite.markers import list_markers
from hudilite.options import FSYNC, HEARTBEAT_INTERVAL_MS, HEARTBEAT_MISSES
from hudilite.services.common import rollback_partial_attempt
from hudilite.storage.local import storage_for
from hudilite.table import HoodieTable
from hudilite.timeline.heartbeat import Heartbeat, heartbeat_expired, write_heartbeat

log = logging.getLogger(__name__)

COMPLETED = "completed"  # acquire(): the plan completed (by another executor, or before)
CLAIMED = "claimed"  # acquire(wait=False): a live executor holds the plan
MISSING = "missing"  # acquire(): no such pending plan


class ClaimLostError(HudiliteError):
    """This executor's claim on a service plan was taken over (its heartbeat expired); its attempt is void."""


def claim_path(base_path: str, instant: str) -> str:
    return auxfiles.path(base_path, auxfiles.SERVICE_CLAIMS, instant)


def read_claim(base_path: str, instant: str) -> dict | None:
    try:
        path = claim_path(base_path, instant)
        d = json.loads(storage_for(path).read_bytes(path) or b"null")
    except FileNotFoundError:
        return None
    except ValueError:  # torn by a crash mid-write (write_bytes is atomic, so only a foreign writer): dead
        return {"attempt": 0, "released": True}
    return d if isinstance(d, dict) else None


def _heartbeat_options(options: dict | None) -> tuple[int, int]:
    interval = HEARTBEAT_INTERVAL_MS.get(options)
    return interval, interval * HEARTBEAT_MISSES.get(options)


def check_options(options: dict | None) -> None:
    """Validate the options an executor uses (heartbeat, fsync of its output): InvalidWriteError."""
    _heartbeat_options(options)
    FSYNC.get(options)


def attempt_of_token(token: str) -> int | None:
    """The attempt number of a service output file's write token (`<i>-<j>-<attempt>`), else None."""
    parts = token.split("-")
    return int(parts[2]) if len(parts) == 3 and parts[2].isdigit() else None


class Claim:
    """The claim of one executor on one plan instant (see the module doc)."""

    def __init__(self, table: HoodieTable, instant: str, owner: str, attempt: int, heartbeat: Heartbeat,
                 options: dict | None):
        self.table, self.instant, self.owner, self.attempt = table, instant, owner, attempt
        self._heartbeat, self._options = heartbeat, options

    def token(self, i: int, j: int = 0) -> str:
        """A write token unique to this attempt (Hudi's `<partition>-<stage>-<attempt>` shape)."""
        return f"{i}-{j}-{self.attempt}"

    def held(self) -> bool:
        rec = read_claim(self.table.base_path, self.instant)
        return bool(rec) and rec.get("owner") == self.owner and not rec.get("released")

    def check(self) -> None:
        if not self.held():
            raise ClaimLostError(f"the claim on service plan {self.instant} (attempt {self.attempt}) was taken "
                                 "over by another executor: this attempt is abandoned")

    def release(self, *, done: bool) -> None:
        """Stop the heartbeat; a completed plan's claim record is deleted, a failed attempt's marked released
        (the next executor takes over at once instead of waiting for the heartbeat to expire)."""
        self._heartbeat.stop(delete=done)
        if done:
            self.table.fs.delete(claim_path(self.table.base_path, self.instant))
            return
        with lock_for(self.table.base_path, self._options):
            if self.held():
                rec = read_claim(self.table.base_path, self.instant) or {}
                self.table.fs.write_bytes(claim_path(self.table.base_path, self.instant),
                                          json.dumps({**rec, "released": True}).encode())

    def own_files(self) -> list[str]:
        """The data files this attempt may have written: the instant's markers whose base file name carries
        this attempt's token."""
        out = []
        for part, name, _kind in list_markers(self.table.base_path, self.instant):
            parsed = parse_base_file_name(name)
            if parsed and parsed[2] == self.instant and attempt_of_token(parsed[1]) == self.attempt:
                out.append(os.path.join(self.table.partition_dir(part), name))
        return out

    def completion_check(self, partitions, stats: list[dict]):
        """The `validate` hook of the plan's completion (runs under the table lock): the claim must still be
        ours, and base files named with the instant in the plan's partitions that the commit does not name (a
        zombie attempt's, written after its last check) are deleted - two base files of one group at one
        instant would make the table unreadable."""
        keep = {s["path"] for s in stats}

        def validate(table: HoodieTable) -> None:
            self.check()
            for part in sorted(set(partitions)):
                for entry in list(table.fs.scandir_files(table.partition_dir(part))):
                    parsed = parse_base_file_name(entry.name)
                    rel = f"{part}/{entry.name}" if part else entry.name
                    if parsed and parsed[2] == self.instant and rel not in keep:
                        table.fs.delete(entry.path)
        return validate

    def settle_failure(self, *, remove_partial: bool = False) -> None:
        """After a failed attempt: still the holder - remove its files (`remove_partial`; otherwise the next
        attempt does) and release the claim; no longer the holder - delete this attempt's files only."""
        try:
            if self.held():
                if remove_partial:
                    rollback_partial_attempt(self.table, self.instant)
                self.release(done=False)
            else:
                self.abandon()
        except Exception:  # noqa: BLE001 - keep the attempt's own error; the stopped heartbeat frees the plan
            self._heartbeat.stop(delete=False)
            log.warning("could not release the claim on %s", self.instant, exc_info=True)

    def abandon(self) -> None:
        """After losing the claim: delete this attempt's files only (the plan belongs to the new holder)."""
        self._heartbeat.stop(delete=False)
        for p in self.own_files():
            self.table.fs.delete(p)


def acquire(table: HoodieTable, instant: str, action: str, options: dict | None, *, wait: bool,
            poll_s: float | None = None):
    """Claim the pending `action` plan `instant`. Returns a `Claim`, or COMPLETED (the plan is complete),
    CLAIMED (a live executor holds it; only with `wait=False`) or MISSING (no such pending plan). With `wait`,
    polls until the plan completes or its claim dies or is released, then takes it over."""
    interval, tolerance = _heartbeat_options(options)
    poll = poll_s if poll_s is not None else min(1.0, interval / 2000)
    owner = f"{uuid.uuid4().hex}@{socket.gethostname()}:{os.getpid()}"
    while True:
        with lock_for(table.base_path, options) as lock:
            tl = table.reload()
            cur = tl.get(instant)
            if cur is not None and cur.is_completed:
                return COMPLETED
            if cur is None or cur.action != action:
                return MISSING
            rec = read_claim(table.base_path, instant)
            live = bool(rec) and not rec.get("released") and not heartbeat_expired(
                table.base_path, instant, max(tolerance, int(rec.get("tolerance_ms") or 0)))
            if not live:
                attempt = int((rec or {}).get("attempt") or 0) + 1
                table.fs.makedirs(os.path.dirname(claim_path(table.base_path, instant)))
                # claim records are written under the lock only: a temp file of one is a killed executor's
                table.fs.delete_stale_temps(claim_path(table.base_path, instant))
                table.fs.write_bytes(claim_path(table.base_path, instant), json.dumps(
                    {"owner": owner, "attempt": attempt, "tolerance_ms": tolerance, "since_ms": int(time.time() * 1000)}
                ).encode())
                misses = max(1, tolerance // interval)
                # a fresh record: the plan's heartbeat file may hold its scheduler's (or a dead claimant's)
                # settings, and checkers judge a heartbeat by the tolerance it records
                write_heartbeat(table.base_path, instant, interval, misses)
                hb = Heartbeat(table.base_path, instant, interval, misses)
                hb.start()  # beats once now, under the lock: nobody can judge the new claim dead
                lock.verify()
                if rec:
                    log.info("took over service plan %s from %s (attempt %d)", instant, rec.get("owner"), attempt)
                return Claim(table, instant, owner, attempt, hb, options)
        if not wait:
            log.info("service plan %s is being executed by %s: skipped", instant, rec.get("owner"))
            return CLAIMED
        time.sleep(poll)
