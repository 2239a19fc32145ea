"""Clustering: rewrite small file groups into well-sized ones, optionally sorted, as one replacecommit.

Schedule (`schedule_clustering`, under the table lock): per partition, the latest slices whose base file is
smaller than `hoodie.clustering.plan.strategy.small.file.limit` (default 300 MB; slices with log files count
with their log bytes), not in a pending compaction or clustering plan and not holding log blocks of in-flight
instants. A partition with at least two such slices (or one, when sort columns are given) becomes clustering
groups of at most `hoodie.clustering.plan.strategy.max.bytes.per.group` (2 GB) each, at most
`hoodie.clustering.plan.strategy.max.num.groups` (30) groups per plan. The plan is `<t>.replacecommit.requested`
holding an Avro `HoodieRequestedReplaceMetadata` (operationType CLUSTER, a `HoodieClusteringPlan` whose
strategy params carry the sort columns, `hoodie.clustering.plan.strategy.sort.columns`; its slices name their
files by full path, `file:/...` or the table's URI, as Apache Hudi's planner does, so Apache Hudi executes it).

Execute (`run_clustering`, every pending plan oldest first): each group's slices are read merged (base +
valid log blocks, reader/merge.py), concatenated, sorted by the sort columns (then record key) if given, and
written to ceil(bytes / `hoodie.clustering.plan.strategy.target.file.max.bytes` (1 GB)) new file groups with
fresh file ids; meta columns (commit time, seqno, key, partition) are preserved, `_hoodie_file_name` names the
new file. Completion: `<t>.replacecommit` (JSON, operationType CLUSTER) with the new files' write stats and
`partitionToReplaceFileIds` = the input groups, through `Transaction.complete` (conflict-checked).

Writers and a pending plan: the plan wins. A writer whose commit touches a file group of a pending clustering
plan (updates or deletes routed to it) fails with a retryable CommitConflictError naming the plan (its files
are rolled back); re-run it after the clustering completed, it then updates the new file groups. Inserts into
new file groups are never affected.
"""

from __future__ import annotations

import logging
import math
import time

import pyarrow as pa

from hudilite.errors import CommitConflictError, CorruptTableError, HudiliteError, InvalidWriteError
from hudilite.file_group import new_file_id
from hudilite.fs_view import FileSystemView
from hudilite.markers import delete_markers
from hudilite.options import (
    CLUSTER_GROUP_BYTES,
    CLUSTER_MAX_GROUPS,
    CLUSTER_PARALLELISM,
    CLUSTER_SMALL_FILE_LIMIT,
    CLUSTER_SORT_COLUMNS,
    CLUSTER_TARGET_FILE_BYTES,
)
from hudilite.reader.merge import KEY, SliceDesc, merge_slice
from hudilite.reader.planner import table_schema
from hudilite.services.claim import CLAIMED, COMPLETED, MISSING, acquire
from hudilite.services.claim import check_options as claim_options
from hudilite.services.common import (
    begin_execution,
    commit_metadata,
    default_parallelism,
    open_table,
    plan_file,
    run_parallel,
    run_pending,
    schedule_plan,
    write_base_file,
    write_stat,
)
from hudilite.services.compaction import log_instants
from hudilite.storage import hadoop_uri
from hudilite.table import HoodieTable
from hudilite.timeline import CLUSTERING, INFLIGHT, REPLACE_COMMIT, Instant, Timeline
from hudilite.timeline.avro_models import REQUESTED_REPLACE
from hudilite.timeline.plans import clustering_plan, pending_service_groups
from hudilite.writer.handle import sort_indices
from hudilite.writer.transaction import Transaction

log = logging.getLogger(__name__)

SORT_KEY = CLUSTER_SORT_COLUMNS.key
STRATEGY_CLASS = "org.apache.hudi.client.clustering.run.strategy.SparkSortAndSizeExecutionStrategy"


class ClusteringError(HudiliteError):
    """A clustering plan cannot be executed (the table is left as it was; the plan stays pending)."""


def check_options(options: dict | None) -> None:
    for opt in (CLUSTER_SMALL_FILE_LIMIT, CLUSTER_TARGET_FILE_BYTES, CLUSTER_GROUP_BYTES, CLUSTER_MAX_GROUPS,
                CLUSTER_PARALLELISM):
        opt.get(options)
    claim_options(options)


def _check_sort_columns(table: HoodieTable, cols: list[str]) -> None:
    names = table_schema(table).names
    bad = [c for c in cols if c not in names]
    if bad:
        raise InvalidWriteError(f"{SORT_KEY}: column(s) {', '.join(bad)} are not columns of the table "
                                f"(columns: {', '.join(names)})")


def plan_clustering(table: HoodieTable, tl: Timeline, options: dict | None) -> dict | None:
    small = CLUSTER_SMALL_FILE_LIMIT.get(options)
    group_bytes = CLUSTER_GROUP_BYTES.get(options)
    target = CLUSTER_TARGET_FILE_BYTES.get(options)
    max_groups = CLUSTER_MAX_GROUPS.get(options)
    sort_cols = CLUSTER_SORT_COLUMNS.get(options)
    pending = pending_service_groups(tl)
    pending_writes = {i.timestamp for i in tl.pending()}
    partitions, listing = table.listing()
    view = FileSystemView(table.base_path, tl, listing)
    by_part: dict[str, list] = {}
    for sl in view.latest_slices(partitions):
        if (sl.partition, sl.file_id) in pending:
            continue
        size = (sl.base_file.size if sl.base_file else 0) + sum(lf.size for lf in sl.log_files)
        if size >= small:
            continue
        if sl.log_files:
            data, rolled = log_instants([lf.path for lf in sl.log_files])
            if any(t in pending_writes and t not in rolled for t in data):
                continue
        by_part.setdefault(sl.partition, []).append((size, sl))
    groups = []
    for part in sorted(by_part):
        cands = sorted(by_part[part], key=lambda x: (x[1].file_id,))
        if len(cands) < (1 if sort_cols else 2):
            continue
        cur, cur_bytes = [], 0
        for size, sl in cands:
            if cur and cur_bytes + size > group_bytes:
                groups.append((cur, cur_bytes))
                cur, cur_bytes = [], 0
            cur.append(sl)
            cur_bytes += size
        if cur:
            groups.append((cur, cur_bytes))
    groups = [(g, b) for g, b in groups if len(g) >= (1 if sort_cols else 2)][:max_groups]
    if not groups:
        return None
    input_groups = []
    for slices, nbytes in groups:
        input_groups.append({
            "slices": [{
                # full paths, as Apache Hudi's planner writes them (its executor opens them as they are)
                "dataFilePath": hadoop_uri(sl.base_file.path) if sl.base_file else None,
                "deltaFilePaths": [hadoop_uri(lf.path) for lf in sl.log_files],
                "fileId": sl.file_id, "partitionPath": sl.partition, "bootstrapFilePath": "", "version": 1,
            } for sl in slices],
            "metrics": {"TOTAL_FILE_SIZE": float(nbytes),
                        "TOTAL_LOG_FILES": float(sum(len(s.log_files) for s in slices))},
            "numOutputFileGroups": max(1, math.ceil(nbytes / target)),
            "extraMetadata": None, "version": 1,
        })
    return {
        "operationType": "CLUSTER",
        "clusteringPlan": {
            "inputGroups": input_groups,
            "strategy": {"strategyClassName": STRATEGY_CLASS,
                         "strategyParams": {SORT_KEY: ",".join(sort_cols)} if sort_cols else {}, "version": 1},
            "extraMetadata": {}, "version": 1, "preserveHoodieMetadata": True,
        },
        "extraMetadata": {}, "version": 1,
    }


def schedule_clustering(table_or_path, options: dict | None = None) -> str | None:
    """Schedule a clustering plan; returns its instant, or None when no partition has small file groups to
    combine."""
    check_options(options)
    table = open_table(table_or_path)
    _check_sort_columns(table, CLUSTER_SORT_COLUMNS.get(options))
    return schedule_plan(table, options, plan_action(table), REQUESTED_REPLACE, plan_clustering)


def plan_action(table: HoodieTable) -> str:
    """The action of a pending clustering: `clustering` on timeline layout 2 (versions 8/9, completing as a
    replacecommit), `replacecommit` on layout 1."""
    return CLUSTERING if table.config.layout_version >= 2 else REPLACE_COMMIT


def pending_clusterings(table: HoodieTable) -> list[Instant]:
    tl = table.reload()
    return [i for i in tl.pending((plan_action(table),)) if clustering_plan(tl, i) is not None]


def _cluster_group(table: HoodieTable, ctx, spec, group: dict, sort_cols: list[str], target: int, gi: int,
                   claim=None) -> list[dict]:
    parts = []
    in_bytes = 0
    for s in group.get("slices") or []:
        part = s.get("partitionPath") or ""
        pdir = table.partition_dir(part)
        base = plan_file(pdir, s["dataFilePath"]) if s.get("dataFilePath") else None
        logs = tuple(plan_file(pdir, n) for n in s.get("deltaFilePaths") or [])
        for p in ([base] if base else []) + list(logs):
            if not table.fs.exists(p):
                raise ClusteringError(f"clustering {ctx.instant}: planned file {p} is missing (file group "
                                      f"{s['fileId']}); the table is left as it was")
            in_bytes += table.fs.size(p)
        parts.append((part, merge_slice(SliceDesc(part, s["fileId"], base, logs), spec)))
    partitions = {p for p, _ in parts}
    if len(partitions) != 1:
        raise ClusteringError(f"clustering {ctx.instant}: group {gi} spans partitions {sorted(partitions)}")
    part = partitions.pop()
    rows = pa.concat_tables([t for _, t in parts]) if parts else None
    if rows is None or rows.num_rows == 0:
        return []
    if sort_cols:
        rows = rows.take(sort_indices(rows, [(c, "ascending") for c in sort_cols] + [(KEY, "ascending")], "at_end"))
    n_out = max(1, int(group.get("numOutputFileGroups") or 1), math.ceil(in_bytes / target))
    per = math.ceil(rows.num_rows / n_out)
    stats = []
    for k in range(n_out):
        chunk = rows.slice(k * per, per)
        if chunk.num_rows == 0:
            continue
        fid = new_file_id()
        rel, _p, size = write_base_file(ctx, part, fid, claim.token(gi, k) if claim else f"{gi}-{k}-0", chunk,
                                        claim)
        stats.append(write_stat(fid, rel, part, size, prev="null", writes=chunk.num_rows, inserts=chunk.num_rows))
    return stats


def execute_clustering(table: HoodieTable, instant: Instant, options: dict | None = None, *,
                       progress: bool = False, wait: bool = False) -> str | None:
    """Execute one pending clustering plan under its claim (services/claim.py); returns its instant once
    completed. Another executor holding the plan: None (skipped), or with `wait` the instant once that executor
    completed it (or its claim died and this one took over and completed it)."""
    claim = acquire(table, instant.timestamp, plan_action(table), options, wait=wait)
    if claim == COMPLETED:
        return instant.timestamp
    if claim == CLAIMED:
        return None
    tl = table.reload()
    cur = tl.get(instant.timestamp)
    plan = clustering_plan(tl, cur) if cur is not None else None
    if claim == MISSING or cur is None or cur.is_completed or plan is None:
        if not isinstance(claim, str):
            claim.release(done=False)
        raise ClusteringError(f"{instant.timestamp} is not a pending clustering of {table.base_path}")
    groups = list(plan.get("inputGroups") or [])
    sort_cols = CLUSTER_SORT_COLUMNS.get((plan.get("strategy") or {}).get("strategyParams"))
    target = CLUSTER_TARGET_FILE_BYTES.get(options)
    t0 = time.monotonic()
    try:
        spec, ctx = begin_execution(table, tl, cur, options)
        par = CLUSTER_PARALLELISM.get(options) or default_parallelism()
        per_group = run_parallel(
            lambda ig: _cluster_group(table, ctx, spec, ig[1], sort_cols, target, ig[0], claim=claim),
            list(enumerate(groups)), par, f"clustering {cur.timestamp}", progress)
        stats = [s for g in per_group for s in g]
        replaced: dict[str, list[str]] = {}
        for g in groups:
            for s in g.get("slices") or []:
                replaced.setdefault(s.get("partitionPath") or "", []).append(s["fileId"])
        md = commit_metadata(stats, "CLUSTER", table, replaced=replaced)
        md["extraMetadata"]["hudilite.clustering.millis"] = str(int((time.monotonic() - t0) * 1000))
        Transaction(table, options).complete(Instant(cur.timestamp, cur.action, INFLIGHT), md,
                                             validate=claim.completion_check(replaced, stats))
    except CommitConflictError as e:  # a write touched an input group after the plan: the plan is stale
        txn = Transaction(table, options)
        with txn.lock:
            held = claim.held()
            now = table.reload().get(cur.timestamp)
            if held and now is not None and not now.is_completed:
                txn.rollback(now)
        if not held:
            claim.abandon()
            raise
        claim.release(done=True)
        raise ClusteringError(f"clustering {cur.timestamp} was abandoned (its plan is removed; schedule a new "
                              f"one): {e}") from e
    except BaseException:
        claim.settle_failure(remove_partial=True)
        raise
    claim.release(done=True)
    delete_markers(table.base_path, cur.timestamp)
    log.info("completed clustering %s: %d group(s) -> %d file group(s)", cur.timestamp, len(groups), len(stats))
    return cur.timestamp


def run_clustering(table_or_path, options: dict | None = None, *, instant: str | None = None,
                   progress: bool = False, wait: bool = False) -> list[str]:
    """Execute every pending clustering plan, oldest first (or only `instant`). A plan another executor is
    executing is skipped (inline clustering), or with `wait` (the command line) waited for."""
    check_options(options)
    table = open_table(table_or_path)
    return run_pending(table, pending_clusterings(table), instant, "clustering", ClusteringError,
                       execute_clustering, options, progress, wait)


def cluster(table_or_path, options: dict | None = None, *, progress: bool = False) -> list[str]:
    """Schedule a plan (if any partition qualifies) and run every pending one."""
    table = open_table(table_or_path)
    schedule_clustering(table, options)
    return run_clustering(table, options, progress=progress)


__all__ = ["schedule_clustering", "run_clustering", "cluster", "plan_clustering", "ClusteringError",
           "CorruptTableError"]
