"""Optimistic concurrency control: which commits conflict with a write about to complete.

A writer (or a table service) reads the table at some point, its *basis*: the set of completed instants its
plan was built on. Under the table lock, just before it writes its completed instant, it checks

1. every write instant (commit, deltacommit, replacecommit - compaction and clustering complete as those)
   that completed but is not in the basis, i.e. that the writer did not see: if it touched one of the
   writer's file groups (a write stat's fileId, or a fileId in partitionToReplaceFileIds), the writer would
   overwrite or resurrect what that commit did, so the writer aborts;
2. every pending table-service plan not in the basis - a compaction plan (`.compaction.requested`), a
   clustering plan (`.replacecommit.requested` holding a clustering plan, `.clustering.requested` in
   layout 2) - and every *prepared* write (a streaming batch whose commit is guaranteed, see
   `Transaction.prepare`): if it covers one of the writer's file groups, the writer aborts; the plan wins.

Writes into new file groups never overlap anything (their fileIds are fresh), so concurrent inserts, and
writers on disjoint partitions or file groups, all commit.

Non-blocking concurrency control (`nbcc=True`, merge-on-read on timeline layout 2 only): a log append to a
group that an unseen deltacommit also only appended logs to is no conflict - each log file is named by its own
deltacommit and the merge orders records by the ordering field. What remains a conflict: replaced groups
(clustering, overwrites), pending plans and prepared commits as above, and `new_key_conflicts`: two writes that
inserted the same new key into new file groups of their own (there is no bucket index mapping a key to a fixed
group, so only one of them may commit; its retry finds the key and updates it).

Reusable by table services:

    from hudilite.writer.conflict import Footprint, read_basis, check_conflicts
    basis = read_basis(table)                      # before planning, from the timeline the plan is built on
    ...                                            # plan + write files
    fp = Footprint.from_metadata(commit_metadata)  # or Footprint.of([(partition, file_id), ...])
    with lock: check_conflicts(table.reload(), instant, fp, basis)   # raises CommitConflictError

`Transaction.complete` does exactly this for every write.
"""

from __future__ import annotations

import io
import json
import os
from dataclasses import dataclass, field
from typing import Iterable

from hudilite.errors import CommitConflictError
from hudilite.log.format import try_parse_log_file_name
from hudilite.storage import storage_for
from hudilite.storage.local import read_nonblank
from hudilite.timeline import (
    CLUSTERING,
    COMPACTION,
    DELTA_COMMIT,
    INFLIGHT,
    REPLACE_COMMIT,
    REQUESTED,
    WRITE_ACTIONS,
    Instant,
)
from hudilite.timeline.timeline import Timeline

PREPARED_KEY = "hudilite.commit.prepared"
FileGroupId = tuple  # (partition path, file id)


@dataclass(frozen=True)
class Footprint:
    """The file groups a commit (or plan) touches: `written` (groups with write stats: new base or log
    files) and `replaced` (groups a replacecommit hides)."""

    written: frozenset = field(default_factory=frozenset)
    replaced: frozenset = field(default_factory=frozenset)
    # merge-on-read log appends: group -> the base instants its new log files are named with (services/compaction)
    log_bases: tuple = ()

    @property
    def all(self) -> frozenset:
        return self.written | self.replaced

    def appends_from(self, group, instant: str) -> bool:
        """Whether this write touched `group` only by appending log files to the slice of `instant` or a later
        one: it cannot conflict with a compaction at `instant`, which reads the slices before it."""
        bases = dict(self.log_bases).get(group)
        return bool(bases) and min(bases) >= instant

    def appends_only(self, group) -> bool:
        """Whether this write touched `group` only by writing log files. On timeline layout 2 such logs are
        named by the write's own instant and join the slice their completion time falls in: one completed
        after a compaction was planned starts the compaction's slice, so it never conflicts with it."""
        return bool(dict(self.log_bases).get(group))

    def __bool__(self) -> bool:
        return bool(self.written or self.replaced)

    @classmethod
    def of(cls, written: Iterable[FileGroupId] = (), replaced: Iterable[FileGroupId] = ()) -> "Footprint":
        return cls(frozenset((p or "", f) for p, f in written), frozenset((p or "", f) for p, f in replaced))

    @classmethod
    def from_metadata(cls, md: dict | None) -> "Footprint":
        """From commit metadata (HoodieCommitMetadata / HoodieReplaceCommitMetadata shape)."""
        md = md or {}
        written, replaced = set(), set()
        bases: dict = {}
        for part, stats in (md.get("partitionToWriteStats") or {}).items():
            for s in stats or []:
                fid = (s or {}).get("fileId")
                if fid:
                    g = (s.get("partitionPath", part) or part or "", fid)
                    written.add(g)
                    logs = [try_parse_log_file_name(n) for n in (s.get("logFiles") or [])]
                    if logs and all(logs):
                        bases.setdefault(g, set()).update(n.instant for n in logs)
                    else:
                        bases[g] = {""}  # a base file (or an unknown stat): overlaps any compaction
        for part, fids in (md.get("partitionToReplaceFileIds") or {}).items():
            for fid in fids or []:
                replaced.add((part or "", fid))
        log_bases = tuple((g, frozenset(b)) for g, b in bases.items() if "" not in b)
        return cls(frozenset(written), frozenset(replaced), log_bases)


# ---- bases ----------------------------------------------------------------------------------
def read_basis(table_or_timeline) -> frozenset:
    """The basis of a plan built on this timeline: the times of its completed write instants (plus
    prepared instants an overlay timeline presents as completed). `None` table -> empty basis."""
    if table_or_timeline is None:
        return frozenset()
    tl = table_or_timeline if isinstance(table_or_timeline, Timeline) else table_or_timeline.timeline
    return frozenset(i.timestamp for i in tl.completed(WRITE_ACTIONS))


def _unseen(tl: Timeline, inst: Instant, basis) -> bool:
    """Whether a completed instant is not part of the basis. A str basis is a completion time: instants that
    completed after it are unseen (for callers that kept no instant set, e.g. after a restart)."""
    if isinstance(basis, str):
        return tl.completion_time(inst) > basis
    return inst.timestamp not in basis


# ---- pending plans --------------------------------------------------------------------------
def _read(path: str) -> dict | None:
    """A plan or inflight file as a dict (Avro container or JSON); None when absent, blank or unreadable."""
    data = read_nonblank(path)
    if data is None:
        return None
    if data[:4] == b"Obj\x01":
        import fastavro

        try:
            recs = list(fastavro.reader(io.BytesIO(data)))
        except Exception:  # noqa: BLE001 - an unreadable plan covers nothing we can name
            return None
        return recs[0] if recs else None
    try:
        v = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None
    return v if isinstance(v, dict) else None


def _plan_groups(obj) -> set:
    """(partitionPath, fileId) of every record in a plan that names both (HoodieCompactionOperation,
    HoodieSliceInfo of a clustering plan, or write stats)."""
    out, todo = set(), [obj]
    while todo:
        o = todo.pop()
        if isinstance(o, dict):
            fid = o.get("fileId")
            if isinstance(fid, str) and fid and "partitionPath" in o:
                out.add((o.get("partitionPath") or "", fid))
            todo.extend(v for v in o.values() if isinstance(v, (dict, list)))
        elif isinstance(o, list):
            todo.extend(v for v in o if isinstance(v, (dict, list)))
    return out


def _is_clustering_plan(d: dict) -> bool:
    if "clusteringPlan" in d and d["clusteringPlan"]:
        return True
    return str(d.get("operationType") or "").upper() in ("CLUSTER", "CLUSTERING")


def pending_guard(tl: Timeline, inst: Instant) -> tuple[str, Footprint] | None:
    """For a pending instant that protects file groups - a compaction or clustering plan, or a prepared
    write - (kind, footprint); else None (an ordinary pending write protects nothing)."""
    if inst.is_completed:
        return None
    if inst.action == COMPACTION:
        d = _read(os.path.join(tl.meta_dir, inst.with_state(REQUESTED).file_name(tl.layout)))
        return "pending compaction plan", Footprint.of(_plan_groups(d or {}))
    if inst.action in (CLUSTERING, REPLACE_COMMIT):
        d = _read(os.path.join(tl.meta_dir, inst.with_state(REQUESTED).file_name(tl.layout)))
        if inst.action == CLUSTERING or (d and _is_clustering_plan(d)):
            return "pending clustering plan", Footprint.of(_plan_groups(d or {}))
    if inst.action in WRITE_ACTIONS and inst.state == INFLIGHT:
        md = prepared_metadata(tl, inst)
        if md is not None:
            return "prepared commit", Footprint.from_metadata(md)
    return None


def prepared_metadata(tl: Timeline, inst: Instant) -> dict | None:
    """The full commit metadata of a prepared (validated, guaranteed-to-complete) pending write, else None."""
    if inst.is_completed or inst.action not in WRITE_ACTIONS:
        return None
    d = _read(os.path.join(tl.meta_dir, inst.with_state(INFLIGHT).file_name(tl.layout)))
    if d and str((d.get("extraMetadata") or {}).get(PREPARED_KEY, "")).lower() == "true":
        return d
    return None


# ---- the check ------------------------------------------------------------------------------
@dataclass
class Conflict:
    instant: str
    kind: str  # "commit", "replacecommit", "pending compaction plan", ...
    file_groups: list

    def describe(self) -> str:
        groups = ", ".join(f"{p}/{f}" if p else f for p, f in self.file_groups[:8])
        more = f" and {len(self.file_groups) - 8} more" if len(self.file_groups) > 8 else ""
        return f"{self.kind} {self.instant} (file groups {groups}{more})"


def find_conflicts(tl: Timeline, instant: str, footprint: Footprint, basis, *, nbcc: bool = False) -> list[Conflict]:
    """Conflicts of a write at `instant` touching `footprint`, built on `basis` (a set of completed instant
    times, or a completion time), against timeline `tl` (load it under the table lock). `nbcc`: log appends
    to groups an unseen deltacommit also only appended to do not conflict (see the module doc)."""
    if not footprint:
        return []
    ours = footprint.all
    out = []
    for inst in tl.instants:
        if inst.timestamp == instant:
            continue
        seen = not isinstance(basis, str) and inst.timestamp in basis
        op = ""
        if inst.is_completed:
            if inst.action not in WRITE_ACTIONS or seen or not _unseen(tl, inst, basis):
                continue
            md = tl.read_metadata(inst)
            theirs = Footprint.from_metadata(md)
            kind = inst.action
            op = str(md.get("operationType") or "")
            if op in ("COMPACT", "CLUSTER"):
                kind = f"{inst.action} ({op.lower()})"
        else:
            if seen:
                continue
            guard = pending_guard(tl, inst)
            if guard is None:
                continue
            kind, theirs = guard
        both = ours & theirs.all
        if both and (inst.action == COMPACTION or op == "COMPACT"):  # logs of the compaction's new slice
            both = {g for g in both if not (footprint.appends_only(g) if tl.layout >= 2
                                            else footprint.appends_from(g, inst.timestamp))}
        if both and nbcc and inst.is_completed and inst.action == DELTA_COMMIT and op != "COMPACT":
            both = {g for g in both if not (footprint.appends_only(g) and theirs.appends_only(g))}
        if both:
            out.append(Conflict(inst.timestamp, kind, sorted(both)))
    return out


def new_key_conflicts(tl: Timeline, base_path: str, instant: str, metadata: dict, basis, *,
                      by_partition: bool = True) -> list[Conflict]:
    """Under non-blocking concurrency control: unseen completed writes that inserted one of the keys this write
    inserts into new file groups (each writer created a group of its own for a key it did not find, so both
    committing would duplicate it). Keys are compared with their partition path, or alone (`by_partition=False`)
    for a global index. Reads the record keys of the new base files of both sides."""
    ours = _new_keys(base_path, metadata, by_partition)
    if not ours:
        return []
    out = []
    for inst in tl.completed(WRITE_ACTIONS):
        if inst.timestamp == instant or not _unseen(tl, inst, basis):
            continue
        md = tl.read_metadata(inst)
        if str(md.get("operationType") or "") in ("COMPACT", "CLUSTER"):
            continue  # rewrites existing records: no new keys
        theirs = _new_keys(base_path, md, by_partition, with_groups=True)
        both = sorted({g for k, g in theirs if k in ours})
        if both:
            out.append(Conflict(inst.timestamp, f"{inst.action} inserting the same new keys", both))
    return out


def _new_base_files(metadata: dict):
    for part, stats in (metadata.get("partitionToWriteStats") or {}).items():
        for s in stats or []:
            path = (s or {}).get("path") or ""
            if s.get("prevCommit") in (None, "", "null") and s.get("numInserts") and not s.get("logFiles") \
                    and path.endswith(".parquet"):
                yield (s.get("partitionPath", part) or part or ""), s["fileId"], path


def _new_keys(base_path: str, metadata: dict, by_partition: bool, *, with_groups: bool = False):
    """The record keys in the new base files a commit's metadata names: a set of keys, or ((key, group)) pairs
    with `with_groups` (a key is (partition, record key), or the record key alone)."""
    out: list = []
    for part, fid, rel in _new_base_files(metadata):
        path = f"{base_path.rstrip('/')}/{rel}"
        keys = storage_for(path).read_parquet(path, columns=["_hoodie_record_key"]).column(0).to_pylist()
        out.extend(((part, k) if by_partition else k, (part, fid)) for k in keys)
    return out if with_groups else {k for k, _ in out}


def check_conflicts(table_or_timeline, instant: str, footprint: Footprint, basis) -> None:
    """Raise CommitConflictError if the write at `instant` conflicts (see `find_conflicts`). Call it under
    the table lock with a freshly loaded timeline. The error is retryable: the caller rolls its files back,
    re-reads the table and tries again."""
    tl = table_or_timeline if isinstance(table_or_timeline, Timeline) else table_or_timeline.reload()
    conflicts = find_conflicts(tl, instant, footprint, basis)
    if conflicts:
        raise conflict_error(instant, conflicts)


def conflict_error(instant: str, conflicts: list[Conflict]) -> CommitConflictError:
    what = "; ".join(c.describe() for c in conflicts)
    e = CommitConflictError(
        f"write conflict: instant {instant} touches file groups that {what} changed since this write read the "
        "table. The write was aborted and its files are rolled back; it is retryable (re-run the write).")
    e.instant = instant
    e.conflicts = conflicts
    e.conflicting_instants = [c.instant for c in conflicts]
    e.file_groups = sorted({g for c in conflicts for g in c.file_groups})
    return e
