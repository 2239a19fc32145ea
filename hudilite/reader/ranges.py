"""Change ranges: a `(begin, end]` of a table's timeline resolved in COMPLETION order, and the file slices
visible at its ends (see hudilite.reader.changes for the bounds' meaning). Engine-free; the read planner and the
change reads both build on it."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from hudilite.errors import InvalidReadError, RangeUnavailableError
from hudilite.file_group import FileSlice
from hudilite.table import HoodieTable
from hudilite.timeline import REPLACE_COMMIT
from hudilite.timeline.instant_time import normalize_instant_arg

EPOCH = "00000000000000000"

def _bound(value) -> str:
    try:
        return normalize_instant_arg(value)
    except ValueError as e:
        raise InvalidReadError(str(e)) from None

@dataclass
class ChangeRange:
    """A resolved `(begin, end]` range in completion order."""

    table: HoodieTable
    begin: str | None  # completion position (exclusive); None = from the beginning of the table
    end: str  # completion position (inclusive)
    completion: dict[str, str]  # completed write instant time -> completion time
    in_range: list = field(default_factory=list)  # Instants, in completion order
    archived_times: frozenset = frozenset()  # the in-range instants read from the LSM history (v8/v9)

    def visible(self, pos: str | None) -> frozenset:
        """Completed write instants whose completion is at or before `pos`."""
        if pos is None:
            return frozenset()
        return frozenset(t for t, c in self.completion.items() if c <= pos)

    @property
    def instant_times(self) -> list[str]:
        return [i.timestamp for i in self.in_range]

    def metadata(self, inst) -> dict:
        """Commit metadata of an in-range instant: its timeline file, or its LSM history record when archived."""
        if inst.timestamp not in self.archived_times:
            return self.table.timeline.read_metadata(inst)
        md = self.table.timeline.archived.completed_metadata(inst.timestamp)
        if md is None:
            raise RangeUnavailableError(
                f"{self.table.base_path}: the change range ({self.begin}, {self.end}] holds the archived instant "
                f"{inst.timestamp}, whose commit metadata the timeline history does not hold (unreadable), so its "
                "files are unknown. Rebuild the consumer from the current snapshot (dbt: --full-refresh).")
        return md

def history_in_ranges(table: HoodieTable) -> bool:
    """v8/v9 ranges reach into the LSM history: it keeps every archived instant with its completion time and
    commit metadata (the files each write made), as Apache Hudi 1.x reads them. The v6 archive is not read for
    ranges (ranges into it are refused, see check_not_archived)."""
    return table.config.layout_version >= 2


def completion_map(table: HoodieTable) -> dict[str, str]:
    """Completed write instant -> completion time: the active timeline, and on v8/v9 the LSM history too."""
    tl = table.timeline
    out = dict(tl.archived.completion_times) if history_in_ranges(table) else {}
    out.update({i.timestamp: tl.completion_time(i) for i in tl.completed()})
    return out

def _position(table: HoodieTable, cmap: dict[str, str], value, completion_bounds: bool) -> str:
    v = _bound(value)
    if completion_bounds:
        return v
    if v in cmap:
        return cmap[v]
    if table.config.layout_version >= 2:
        return v  # v8/v9: bounds that are not instants are completion times
    floor = max((t for t in cmap if t <= v), default=None)
    return cmap[floor] if floor is not None else v

def resolve_range(table: HoodieTable, begin=None, end=None, *, completion_bounds: bool = False) -> ChangeRange:
    cmap = completion_map(table)
    b = _position(table, cmap, begin, completion_bounds) if begin is not None else None
    if end is not None:
        e = _position(table, cmap, end, completion_bounds)
    else:
        e = max(cmap.values(), default=b or EPOCH)
    tl = table.timeline
    lo = b if b is not None else ""
    writes = tl.completed()
    archived_times: frozenset = frozenset()
    if history_in_ranges(table):
        active = {i.timestamp for i in writes}
        old = [i for i in tl.archived.instants if i.timestamp in cmap and i.timestamp not in active]
        archived_times = frozenset(i.timestamp for i in old)
        writes = old + writes
    in_range = sorted((i for i in writes if lo < cmap[i.timestamp] <= e),
                      key=lambda i: (cmap[i.timestamp], i.timestamp))
    rng = ChangeRange(table, b, e, cmap, in_range, archived_times & {i.timestamp for i in in_range})
    check_not_archived(rng)
    return rng

def archived(table: HoodieTable) -> bool:
    """Whether instants were archived off the active timeline (archive files exist)."""
    meta = table.meta_path
    for d in (os.path.join(meta, table.config.archive_folder),
              os.path.join(meta, "timeline", "history")):
        if any(not e.name.endswith(".crc") for e in table.fs.scandir_files(d)):
            return True
    return False

def check_not_archived(rng: ChangeRange) -> None:
    if rng.begin is None:
        return
    if history_in_ranges(rng.table):
        # archived instants are in the range (read from the history); only an unreadable history is refused
        if not rng.table.timeline.archived and archived(rng.table) and (
                not rng.completion or rng.begin < min(rng.completion.values())):
            raise RangeUnavailableError(
                f"{rng.table.base_path}: the change range starts at {rng.begin}, before the oldest instant still "
                "on the active timeline, and the timeline history cannot be read. Rebuild the consumer from the "
                "current snapshot (dbt: run the model with --full-refresh).")
        return
    # an archived write that completed after `begin` belongs to the range, but its detail left the timeline
    arch = rng.table.timeline.archived
    late = [t for t, c in arch.completion_times.items() if c > rng.begin and t not in arch.service_times]
    if late:
        raise RangeUnavailableError(
            f"{rng.table.base_path}: the change range starts at {rng.begin}, but the archived write instant "
            f"{min(late)} completed after it; archived instants cannot be read as changes. Rebuild the consumer "
            "from the current snapshot (dbt: run the model with --full-refresh).")
    if not rng.completion:
        return
    oldest = min(rng.completion.values())
    if rng.begin < oldest and archived(rng.table):
        raise RangeUnavailableError(
            f"{rng.table.base_path}: the change range starts at {rng.begin}, before the oldest instant still on "
            f"the active timeline (completed {oldest}); older instants were archived and their file slices may be "
            "cleaned, so the changes cannot be read completely. Rebuild the consumer from the current snapshot "
            "(dbt: run the model with --full-refresh).")

def unavailable(rng: ChangeRange, what: str) -> RangeUnavailableError:
    return RangeUnavailableError(
        f"{rng.table.base_path}: the change range ({rng.begin}, {rng.end}] needs {what}, which no longer exists "
        "(cleaned away); the changes cannot be read completely. Rebuild the consumer from the current snapshot "
        "(dbt: run the model with --full-refresh).")

# ---- file slices as of a completion position ------------------------------------------------------------
def replaced_upto(rng: ChangeRange, pos: str | None) -> set[tuple[str, str]]:
    tl = rng.table.timeline
    out: set[tuple[str, str]] = set()
    if pos is None:
        return out
    replaces = [(i, tl.read_metadata) for i in tl.completed((REPLACE_COMMIT,))]
    if history_in_ranges(rng.table):
        arch = tl.archived
        replaces += [(i, lambda i: arch.completed_metadata(i.timestamp) or {}) for i in arch.instants
                     if i.is_completed and i.action == REPLACE_COMMIT and i.timestamp not in tl.all_times]
    for inst, read in replaces:
        if rng.completion.get(inst.timestamp, inst.timestamp) > pos:
            continue
        for part, fids in (read(inst).get("partitionToReplaceFileIds") or {}).items():
            for fid in fids or []:
                out.add((part or "", fid))
    return out

def slice_at(table: HoodieTable, fg, visible: frozenset) -> FileSlice | None:
    """The latest slice of file group `fg` whose base instant completed within `visible` (or was archived)."""
    tl = table.timeline
    first = tl.first_write_time
    # slices older than the active timeline count as committed, except on v8/v9 where `visible` holds the
    # history's instants (by completion): only slices older than anything recorded count then
    known = tl.known_times if history_in_ranges(table) else tl.all_times
    keys = sorted(k for k in fg.slices
                  if k in visible or (first is not None and k < first and k not in known))
    for k in reversed(keys):
        sl = fg.slices[k]
        if sl.base_file is not None or sl.log_files:
            # a compaction that completed after this position was pending at it: the logs of its slice (written
            # after it was scheduled) were read with this slice then (services/compaction.py)
            later = [lf for k2 in sorted(fg.slices) if k2 > k and k2 not in visible for lf in fg.slices[k2].log_files]
            if later:
                sl = FileSlice(sl.partition, sl.file_id, sl.base_instant, sl.base_file, list(sl.log_files) + later)
            return sl
    return None

def slices_at(table: HoodieTable, groups, visible: frozenset, replaced: set | None = None, view=None,
              partitions=None) -> dict[tuple[str, str], FileSlice]:
    """(partition, fileId) -> slice as of the completion position whose instants are `visible`; `groups` None
    means every file group (of `partitions`, default all). Replaced groups are left out."""
    view = view or table.view()
    replaced = replaced or set()
    if groups is None:
        parts = table.partitions() if partitions is None else partitions
        wanted = None
    else:
        parts = sorted({p for p, _ in groups})
        wanted = set(groups)
    out: dict[tuple[str, str], FileSlice] = {}
    for part in parts:
        for fid, fg in sorted(view.file_groups(part).items()):
            if (wanted is not None and (part, fid) not in wanted) or (part, fid) in replaced:
                continue
            sl = slice_at(table, fg, visible)
            if sl is not None:
                out[(part, fid)] = sl
    return out

# ---- what the range touched -----------------------------------------------------------------------------
@dataclass
class Touched:
    groups: set  # (partition, fileId) written in range
    replaced: set  # replaced by replacecommits in range
    last_path: dict  # group -> file name the last in-range write produced
    first_prev: dict  # group -> prevCommit of the first in-range write
    deletes: set  # groups whose in-range writes may have deleted records
    updates: set  # groups whose in-range writes may have updated records

def touched(rng: ChangeRange) -> Touched:
    t = Touched(set(), set(), {}, {}, set(), set())
    for inst in rng.in_range:
        md = rng.metadata(inst)
        for part, stats in (md.get("partitionToWriteStats") or {}).items():
            for s in stats or []:
                fid = s.get("fileId")
                if not fid:
                    continue
                g = (part or "", fid)
                t.groups.add(g)
                if s.get("path"):
                    t.last_path[g] = os.path.basename(s["path"])
                if g not in t.first_prev:
                    t.first_prev[g] = s.get("prevCommit")
                if s.get("numDeletes") is None or int(s.get("numDeletes") or 0) > 0:
                    t.deletes.add(g)
                if s.get("numUpdateWrites") is None or int(s.get("numUpdateWrites") or 0) > 0:
                    t.updates.add(g)
        if inst.action == REPLACE_COMMIT:
            for part, fids in (md.get("partitionToReplaceFileIds") or {}).items():
                for fid in fids or []:
                    t.replaced.add((part or "", fid))
    return t

def check_after(rng: ChangeRange, t: Touched, slices: dict) -> None:
    """Every group the range wrote (and that is not replaced by its end) is readable as the range left it."""
    for g, name in t.last_path.items():
        if g in t.replaced:
            continue
        sl = slices.get(g)
        if sl is None or name not in {os.path.basename(f) for f in sl.files}:
            raise unavailable(rng, f"file {g[0] + '/' if g[0] else ''}{name} (written by the range)")

def check_before(rng: ChangeRange, t: Touched, before: dict) -> None:
    """Every group the range changed is readable as it was at `begin`."""
    for g in sorted(t.groups | t.replaced):
        prev = t.first_prev.get(g)
        if g not in t.first_prev:  # replaced only: it existed before
            if g not in before:
                raise unavailable(rng, f"the file slice of group {g[1]} as of the range's begin")
            continue
        if prev in (None, "", "null"):
            continue  # a new file group
        if rng.begin is not None and rng.completion.get(prev, prev) > rng.begin:
            continue  # based on a slice written inside the range (concurrent or MOR): nothing older needed
        sl = before.get(g)
        if sl is None or sl.base_instant != prev:
            raise unavailable(rng, f"the file slice {prev} of group {g[1]} (the state as of the range's begin)")

def check_incremental(rng: ChangeRange, slices: dict, t: Touched | None = None) -> None:
    """For plain incremental reads: the files the range wrote are still there."""
    check_after(rng, t or touched(rng), slices)
