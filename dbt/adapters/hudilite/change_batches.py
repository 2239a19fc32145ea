"""`microbatch_source: changes`: a microbatch model whose batches come from its upstreams' committed changes.

dbt-core picks a microbatch model's batches by the wall clock (`begin`, `lookback`, now), so an upstream row
that arrives late, with an event_time in a window already processed, is never read again. With
`microbatch_source: changes` the model keeps a consumer checkpoint (the core's `hudilite.checkpoints` entries,
the same ones `hudilite.changes()` models keep) for every upstream ref() that has an `event_time`, and each run
rebuilds exactly the event-time windows the upstream commits since that checkpoint touch (new images, deletes
and before images of updates: a row whose event_time moved touches both windows):

* dbt runs a microbatch model's first batch alone, before the others (dbt-core's MicrobatchModelRunner). That
  call plans the run: it fixes each upstream's position (the end of what this run consumes), reads the changes
  since the checkpoint and rebuilds each touched window `>= begin` in ascending order, one commit per window
  (the window replaced as any microbatch batch replaces it, with the same fingerprint idempotency). The last
  window's commit carries the new checkpoint, so the checkpoint advances atomically with it; a failure before
  it leaves the checkpoint where it was.
* dbt's own (wall-clock) batches still run as plain microbatch batches: a window whose rows did not change
  commits nothing. A run without new upstream commits therefore writes nothing.
* A failed window fails dbt's batch that ran it; `dbt retry` runs that batch again, which plans again from the
  unchanged checkpoint: the windows committed before the failure hold the same rows (nothing to commit), the
  failed one and those after it commit once.
* The first build (no table yet, or --full-refresh) is dbt's: every batch records the positions fixed by the
  first one, so the next run continues from there.
* `--event-time-start` / `--event-time-end` bound the run: only touched windows overlapping them are rebuilt
  and no commit moves the checkpoint (the changes to windows outside are not consumed), so the next unbounded
  run rebuilds those (the bounded ones, holding their rows already, commit nothing). A bounded first build
  records no checkpoint: the next run rebuilds every window the upstream has rows in.

A window's rows are the model's SQL with dbt's event-time filters of the upstream refs moved from dbt's batch
to that window: dbt renders them as `<column> >= '<batch start>' and <column> < '<batch end>'` (the
`BaseRelation` event-time filter), and only those literal pairs are replaced.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Set, Tuple

from dbt.artifacts.resources.types import BatchSize
from dbt.materializations.incremental.microbatch import MicrobatchBuilder
from dbt_common.exceptions import DbtRuntimeError
from pyspark.sql import functions as F

import hudilite
from hudilite import checkpoints

Window = Tuple[str, str]  # [start, end) as dbt renders it into the upstream filters


@dataclass(frozen=True)
class Upstream:
    """A ref() of the model whose rows dbt filters by event time: its table and event_time column."""

    name: str  # schema.identifier, for messages
    path: str
    event_time: str


@dataclass
class ChangePlan:
    """One invocation's plan for a changes-driven model, made by its first batch."""

    build: bool  # the first build (or --full-refresh): dbt's batches, each recording `ends`
    ends: Dict[str, Tuple[Optional[str], Optional[str]]] = field(default_factory=dict)  # path -> (position, id)
    upstreams: List[Upstream] = field(default_factory=list)


def resolve_upstreams(env, refs: Sequence[dict], where: str) -> List[Upstream]:
    """The model's upstreams that dbt filters by event time, as hudilite tables. Errors: none of its refs has
    an event_time (no window can be derived), or one that has is not a hudilite table (no change history)."""
    filtered = [r for r in refs if r.get("event_time")]
    if not filtered:
        names = ", ".join(f"{r.get('schema')}.{r.get('identifier')}" for r in refs) or "none"
        raise DbtRuntimeError(
            f"microbatch_source 'changes' of {where}: none of its upstream refs has an `event_time` config "
            f"(upstreams: {names}); set event_time on the upstream model whose commits drive the batches")
    out = []
    for r in filtered:
        name = f"{r['schema']}.{r['identifier']}"
        entry = env.describe(r["schema"], r["identifier"])
        if entry is None or not entry.table_path:
            raise DbtRuntimeError(
                f"microbatch_source 'changes' of {where}: upstream {name} is not a hudilite table (a view, a "
                "foreign table or not built yet), so it has no committed changes to drive the batches; build it "
                "as a hudilite table or use the default microbatch_source 'time'")
        out.append(Upstream(name, entry.table_path, str(r["event_time"])))
    return out


def positions(upstreams: Sequence[Upstream]) -> Dict[str, Tuple[Optional[str], Optional[str]]]:
    """Each upstream's newest completion position and table id now: the end of what this run consumes."""
    return {u.path: checkpoints.position(u.path) for u in upstreams}


def checkpoint_metadata(ends, model_path: Optional[str]) -> Dict[str, str]:
    """The commit's checkpoint entries (merged over the model's stored ones; None: a rebuild)."""
    try:
        return checkpoints.entries(ends, model_path)
    except checkpoints.CheckpointError as e:
        raise DbtRuntimeError(f"hudilite: {e}; run the model with --full-refresh") from None


def touched_windows(spark, model_path: str, plan: ChangePlan, batch_size: str, tz,
                    model_event_time: str) -> Set[dt.datetime]:
    """Starts of the `batch_size` windows the upstream commits since the model's checkpoint touch. No stored
    checkpoint for an upstream (the model was built before it opted in) or an upstream rebuilt since (another
    table id: its timeline does not continue the checkpoint): every window the upstream has rows in, and every
    window the model has rows in - a window whose rows the rebuilt upstream no longer has is rebuilt empty."""
    size = BatchSize(batch_size)
    try:
        stored = checkpoints.read(model_path)
    except checkpoints.CheckpointError as e:
        raise DbtRuntimeError(f"hudilite: {e}; run the model with --full-refresh") from None
    starts: Set[dt.datetime] = set()
    whole = False
    for up in plan.upstreams:
        end, table_id = plan.ends[up.path]
        if end is None:
            continue  # no commits upstream
        begin, _rebuilt = stored.resume(up.path, table_id)
        if begin is not None and begin >= end:
            continue
        whole = whole or begin is None
        try:
            df = hudilite.changes(spark, up.path, begin=begin, end=end, include_deletes=True, before_image=True,
                                  completion_bounds=True, table_id=table_id)
        except hudilite.HudiliteError as e:
            raise DbtRuntimeError(f"microbatch_source 'changes': reading the changes of {up.name}: {e}") from None
        starts |= _window_starts(df, up.event_time, up.name, size, tz)
    if whole:
        starts |= _window_starts(hudilite.read(spark, model_path), model_event_time, "the model", size, tz)
    return starts


def _window_starts(df, event_time: str, name: str, size: BatchSize, tz) -> Set[dt.datetime]:
    cols = {c.lower(): c for c in df.columns}
    col = cols.get(event_time.lower())
    if col is None:
        raise DbtRuntimeError(f"microbatch_source 'changes': event_time {event_time!r} of {name} is not "
                              f"a column of the table (columns: {', '.join(df.columns)})")
    # epoch hours (time-zone independent); every batch size is whole UTC hours
    hours = (df.select(F.floor(F.col(f"`{col}`").cast("timestamp").cast("long") / 3600).alias("h"))
             .where(F.col("h").isNotNull()).distinct().collect())
    out = set()
    for row in hours:
        ts = dt.datetime.fromtimestamp(int(row["h"]) * 3600, tz=dt.timezone.utc)
        out.add(MicrobatchBuilder.truncate_timestamp(ts, size).astimezone(tz))
    return out


def in_bounds(start: dt.datetime, batch_size: str, lower: Optional[dt.datetime],
              upper: Optional[dt.datetime]) -> bool:
    """Whether the window starting at `start` overlaps [lower, upper) (`--event-time-start/-end`; None: open)."""
    end = MicrobatchBuilder.offset_timestamp(start, BatchSize(batch_size), 1)
    return (lower is None or end > lower) and (upper is None or start < upper)


def window_of(start: dt.datetime, batch_size: str) -> Window:
    end = MicrobatchBuilder.offset_timestamp(start, BatchSize(batch_size), 1).astimezone(start.tzinfo)
    return str(start), str(end)


def parse_bound(text: str) -> dt.datetime:
    value = dt.datetime.fromisoformat(str(text))
    return value if value.tzinfo else value.replace(tzinfo=dt.timezone.utc)


def window_sql(sql: str, batch: Window, window: Window, where: str) -> str:
    """The model's compiled SQL with dbt's event-time filters moved from `batch` to `window`."""
    if window == batch:
        return sql
    pattern = re.compile(r">= '" + re.escape(batch[0]) + r"' and (\S+) < '" + re.escape(batch[1]) + "'")
    out, n = pattern.subn(lambda m: f">= '{window[0]}' and {m.group(1)} < '{window[1]}'", sql)
    if n == 0:
        raise DbtRuntimeError(
            f"microbatch_source 'changes' of {where}: the compiled SQL has no upstream ref() filtered to the batch "
            f"[{batch[0]}, {batch[1]}) (dbt filters a ref() only when the upstream has an `event_time`)")
    return out
