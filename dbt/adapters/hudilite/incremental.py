"""Exactly-once change consumption for dbt models: `{{ hudilite.changes(ref('x')) }}`, checkpoints, `as_of`.

A model that reads `hudilite.changes(ref('orders'))` gets the latest image of every upstream record committed
after the model's checkpoint and up to an END FIXED when the model starts (the upstream's newest completion
time at that moment), with a `_change_op` column ('I' / 'U' / 'D'; 'B' before images on request). The
checkpoint — upstream table path -> completion position consumed — is stored in the extraMetadata of the
commit that writes the model (`hudilite.checkpoints`, JSON; see hudilite/checkpoints.py), so output and
checkpoint commit together:

* a failed run commits nothing, so the next run reads the same range again;
* a run never reads a commit twice or skips one: ranges are in completion order, so an upstream commit that
  was requested before the checkpoint but completed after it is in the next range;
* the first run, a `--full-refresh` and models that are rebuilt every run (`table`) read the full snapshot
  (as of the fixed end) and every row arrives as 'I'.

Beside each position the commit records the upstream's table id (`hudilite.checkpoint.tables`, path -> id):
a checkpoint is continued only on the table it was taken on. An upstream rebuilt at the same path (a
`--full-refresh` that changed its key or partitioning writes a new table) has a new id; the consumer is then
rebuilt from the new snapshot (see `rebuilt_upstreams`), never folded on top of what it holds.

Explicit ranges (`begin=` / `end=`, instant times) and `hudilite.as_of(ref('x'), '<instant>')` never touch
checkpoints. Each call defines a session temporary view over the hudilite read and renders its name
(`env.temp_view`: under Spark Connect the model's query carries the view instead of a round trip creating it).
"""

from __future__ import annotations

import uuid
from typing import List, Optional

from dbt_common.exceptions import CompilationError, DbtRuntimeError
from pyspark.sql import functions as F

import hudilite
from dbt.adapters.hudilite.microbatch import window_filter
from dbt.adapters.hudilite.run_state import model_key, resume_position
from hudilite.storage import normalize_path

CHECKPOINTED = ("incremental", "aggregate")
_NOT_PERSISTED = ("view", "ephemeral")
_AD_HOC = ("sql_operation", "sql", "analysis", "operation", "rpc")  # dbt resource types of one-off queries


def _upstream_path(env, relation) -> str:
    schema = relation.schema or env.spark.catalog.currentDatabase()
    path = env.upstream_path(schema, relation.identifier)
    if path is None:
        raise DbtRuntimeError(f"hudilite.changes/as_of: {schema}.{relation.identifier} is not a hudilite table "
                              "(build it first; views and foreign tables have no change history)")
    return path


def _view(env, kind: str, df) -> str:
    """A temporary view of `df` under a name of its own. Never derived from the call's arguments: an open
    range (or the checkpointed end) means different rows for the same arguments as the upstream moves on, and
    the session is shared by dbt's threads, so a reused name would let one call's view replace another's
    between rendering a query and running it."""
    name = f"hudilite_{kind}_{uuid.uuid4().hex}"
    env.temp_view(name, df)
    return f"`{name}`"


def changes_relation(env, this, relation, begin=None, end=None, include_deletes=True, before_image=False,
                     materialized: Optional[str] = None, full_refresh: bool = False,
                     resource_type: Optional[str] = None, location_root: Optional[str] = None,
                     strategy: Optional[str] = None) -> str:
    mat = (materialized or "").lower()
    path = _upstream_path(env, relation)
    spark = env.spark
    if _empty_mode(relation):  # `--empty`: no rows, and no checkpoint moves (nothing was consumed)
        return _view(env, "changes", _no_changes(spark, path))
    if begin is not None or end is not None:  # an analyst's explicit range: no checkpoint
        try:
            df = hudilite.changes(spark, path, begin=begin, end=end, include_deletes=include_deletes,
                                  before_image=before_image)
        except hudilite.HudiliteError as e:
            raise DbtRuntimeError(f"hudilite.changes({relation}, begin={begin!r}, end={end!r}): {e}") from None
        return _view(env, "changes", _in_event_time_window(df, relation))
    if resource_type in _AD_HOC:  # dbt show --inline, an analysis, run-operation
        raise CompilationError("hudilite.changes() without begin=/end= in an ad-hoc query (dbt show --inline, "
                               "an analysis or operation): only a stored model keeps a checkpoint to read changes "
                               "since; pass begin= (and end=) for an explicit range")
    if (strategy or "").lower() == "microbatch":
        raise CompilationError(f"hudilite.changes() in {getattr(this, 'identifier', '?')}: dbt runs a microbatch "
                               "model as batches of event time, each its own commit, and a checkpoint cannot span "
                               "them (a failed batch would lose its changes); select from ref() with "
                               "microbatch_source='changes' (batches from the upstream's changes since the "
                               "checkpoint), or pass begin=/end= for an explicit range")
    if mat in _NOT_PERSISTED:
        raise CompilationError(f"hudilite.changes() in {getattr(this, 'identifier', '?')}: a {mat} model is not "
                               "stored, so it cannot keep a checkpoint; use it in an incremental, aggregate or "
                               "table model (or pass begin=/end= for an explicit range)")
    key = model_key(this.schema, this.identifier)
    state = env.run
    if mat in CHECKPOINTED:
        fixed, table_id = state.fixed_position(key, path)
    else:
        fixed, table_id = hudilite.Table.open(path).latest_position(), None
    start = None
    rebuilt = False
    if mat in CHECKPOINTED and not full_refresh:
        entry = env.compile_entry(this.schema, this.identifier)
        model_path = entry.path if entry is not None else None
        # the checkpoint of the table the model is written to: a model that moves (a new location_root) is
        # built at its new path (materialize.py), so it reads the full snapshot
        if model_path is not None and normalize_path(model_path) == env.model_path(this.schema, this.identifier,
                                                                                   location_root):
            start, rebuilt = resume_position(model_path, path, table_id)
            if state.rebuilding(key):  # another upstream of this model was rebuilt: the model is rebuilt
                start = None
    if fixed is None:  # the upstream has no commits yet: nothing to read
        df = _no_changes(spark, path)
    elif start is not None and start >= fixed:
        df = hudilite.changes(spark, path, begin=fixed, end=fixed, completion_bounds=True)  # empty
    else:
        try:
            df = hudilite.changes(spark, path, begin=start, end=fixed, include_deletes=include_deletes,
                                  before_image=before_image, completion_bounds=True, table_id=table_id)
        except hudilite.RangeUnavailableError as e:
            raise DbtRuntimeError(f"hudilite.changes({relation}) for {this}: {e}") from None
    view = _view(env, "changes", _in_event_time_window(df, relation))
    if mat in CHECKPOINTED:
        state.note_read(key, view.strip("`"), path, fixed, rebuilt)
    return view


def rebuild_reads(env, schema: str, identifier: str) -> List[str]:
    """The upstreams of `schema.identifier` that were rebuilt since its checkpoint (empty: none). When there
    are any, every checkpointed change read of the model in this run is re-pointed to the full snapshot as
    of its fixed end (all rows 'I'), so the model can be rebuilt from its upstreams as a --full-refresh would:
    a range of a rebuilt upstream cannot be folded on top of what the model holds."""
    key = model_key(schema, identifier)
    rebuilt, views = env.run.reads(key)
    if not rebuilt:
        return []
    for name, (path, end) in views.items():
        if end is None:
            continue  # an empty upstream: the view is empty either way
        env.temp_view(name, hudilite.changes(env.spark, path, end=end, completion_bounds=True))
    return rebuilt


def _empty_mode(relation) -> bool:
    """dbt's `--empty` limits every ref() and source() to zero rows (Relation.limit 0): the relation these macros
    read from must give none either."""
    return getattr(relation, "limit", None) == 0


def _in_event_time_window(df, relation):
    """`df` in the time window dbt puts on this ref() of a model with `event_time` (each batch of a microbatch
    model, every ref under `--sample`), as dbt filters the ref itself; `df` when there is none."""
    f = getattr(relation, "event_time_filter", None)
    if f is None or not (f.start or f.end):
        return df
    return df.filter(window_filter(f.field_name, (f.start, f.end)))


def _no_changes(spark, path: str):
    return hudilite.read(spark, path).limit(0).withColumn("_change_op", F.lit("I"))


def read_relation(env, relation, as_of=None, ready_only: bool = False) -> str:
    path = _upstream_path(env, relation)
    df = hudilite.read(env.spark, path, as_of=as_of, ready_only=bool(ready_only))
    if _empty_mode(relation):
        df = df.limit(0)
    return _view(env, "read", _in_event_time_window(df, relation))
