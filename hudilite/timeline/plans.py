"""The plans of pending table services on the timeline: requested plan files (compaction / clustering / clean)
and the file groups pending compaction and clustering plans hold. Below the services so that the file system
view (`FileSystemView.log_base_instants`) and the services read them the same way."""

from __future__ import annotations

import os

from hudilite.errors import CorruptTableError
from hudilite.storage.local import read_nonblank
from hudilite.timeline.avro_models import from_container
from hudilite.timeline.instant import CLUSTERING, COMPACTION, REPLACE_COMMIT, REQUESTED, Instant
from hudilite.timeline.timeline import Timeline


def read_requested(tl: Timeline, inst: Instant) -> dict | None:
    """The Avro record of a requested plan file (compaction / clustering / clean), None if empty or absent."""
    path = os.path.join(tl.meta_dir, inst.with_state(REQUESTED).file_name(tl.layout))
    data = read_nonblank(path)
    if data is None:
        return None
    try:
        return from_container(data)
    except Exception as e:  # noqa: BLE001 - name the file
        raise CorruptTableError(f"cannot parse the plan {path}: {e}") from e


def clustering_plan(tl: Timeline, inst: Instant) -> dict | None:
    """The clustering plan of a pending replacecommit (layout 1) / clustering (layout 2) instant, else None."""
    if inst.is_completed or inst.action not in (REPLACE_COMMIT, CLUSTERING):
        return None
    d = read_requested(tl, inst)
    if not d:
        return None
    plan = d.get("clusteringPlan")
    if plan is None and str(d.get("operationType") or "").upper() != "CLUSTER":
        return None
    return plan or {}


def pending_service_groups(tl: Timeline) -> dict[tuple[str, str], tuple[str, str]]:
    """(partition, fileId) -> (instant, 'compaction' | 'clustering') for file groups in pending plans."""
    out: dict[tuple[str, str], tuple[str, str]] = {}
    for inst in tl.pending():
        if inst.action == COMPACTION:
            plan = read_requested(tl, inst) or {}
            for op in plan.get("operations") or []:
                out[(op.get("partitionPath") or "", op["fileId"])] = (inst.timestamp, "compaction")
        else:
            for g in (clustering_plan(tl, inst) or {}).get("inputGroups") or []:
                for s in g.get("slices") or []:
                    out[(s.get("partitionPath") or "", s["fileId"])] = (inst.timestamp, "clustering")
    return out


def pending_compaction_instants(tl: Timeline) -> dict[tuple[str, str], str]:
    """(partition, fileId) -> instant of the pending compaction plan that holds the group."""
    return {g: t for g, (t, kind) in pending_service_groups(tl).items() if kind == "compaction"}
