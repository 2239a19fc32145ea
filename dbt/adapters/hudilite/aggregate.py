"""`materialized='aggregate'`: an aggregate table kept up to date from its detail table's changes.

The engine is the core's (`hudilite.aggregate`: supported SQL, the fold, the value multisets); here the dbt
glue: the detail is the model's `ref()`, its end is fixed when the model starts (the run's checkpoint), and
the rows are written and published like any model's (write-audit-publish, the catalog entry), with the
checkpoint, the query signature and the aggregate state in the commit's metadata.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, Dict

from dbt.adapters.events.logging import AdapterLogger
from dbt_common.exceptions import CompilationError, DbtRuntimeError
from pyspark.errors import PySparkException

import hudilite
from dbt.adapters.hudilite.audit import set_publish_options
from dbt.adapters.hudilite.model_config import ModelSpec
from dbt.adapters.hudilite.response import no_change, response
from dbt.adapters.hudilite.run_state import model_key, resume_position
from hudilite import aggregate
from hudilite.aggregate import GROUP_KEY, SIGNATURE_KEY

logger = AdapterLogger("Hudilite")


# dbt's `--empty` renders a ref() as this subquery (BaseRelation.render_limited)
_EMPTY_REF = re.compile(r"\(select \* from (\S+) where false limit 0\)(?:\s+_dbt_limit_subq_\w+)?", re.I)
# and a ref() of a model with `event_time` under `--sample` as this one (BaseRelation.render_event_time_filtered)
_WINDOW_REF = re.compile(r"\(select \* from (\S+) where ([^()]+?)\)(?:\s+_dbt_et_filter_subq_\w+)?", re.I)


def materialize_aggregate(env, schema: str, identifier: str, sql: str, cfg: Dict[str, Any]):
    """Build the aggregate model in full, or fold its detail's changes since its checkpoint into it. Under
    dbt's `--empty` (the detail rendered as an empty subquery): an existing aggregate is left as it is, a new
    one is built with its columns and no rows; neither records a checkpoint or aggregate state, so the next
    run computes from the detail as if the empty run had not been. Under `--sample` (the detail in a window of
    its event time): the aggregate of the window's rows."""
    empty = _EMPTY_REF.search(sql) is not None
    sql = _EMPTY_REF.sub(lambda m: m.group(1), sql)
    window = _WINDOW_REF.search(sql)
    sql = _WINDOW_REF.sub(lambda m: m.group(1), sql)
    try:
        q = aggregate.parse(sql)
    except aggregate.AggregateQueryError as e:
        raise CompilationError(f"materialized='aggregate': {e}") from None
    if window is not None:
        # the window is part of the query: its signature differs, so the aggregate is built from the window's
        # rows, and the next run without it (another signature again) rebuilds it from the whole detail
        q = dataclasses.replace(q, where=f"({q.where}) and ({window.group(2)})" if q.where else window.group(2))
    spec = ModelSpec.from_config(cfg)
    set_publish_options(env, schema, identifier, cfg)
    if spec.record_key:
        raise CompilationError("materialized='aggregate': the group keys are the table's key; do not set unique_key")
    if spec.partition_by and any(p not in [k.name for k in q.keys] for p in spec.partition_by):
        raise CompilationError(f"materialized='aggregate': partition_by {spec.partition_by} must name group keys")
    parts = q.relation_parts()
    d_schema = parts[-2] if len(parts) >= 2 else env.spark.catalog.currentDatabase()
    detail = env.upstream_path(d_schema, parts[-1])
    if detail is None:
        raise CompilationError(f"materialized='aggregate': {q.relation} is not a hudilite table (aggregate a "
                               "ref() to a hudilite model)")
    key = model_key(schema, identifier)
    state = env.run
    end, detail_id = state.fixed_position(key, detail)
    state.set_extra(key, {SIGNATURE_KEY: q.signature()})
    with env._table_lock(schema, identifier):
        entry = env.describe(schema, identifier)
        path = env.table_path(schema, identifier, spec)
        start = None
        if (entry is not None and entry.is_hudilite and not spec.full_refresh and hudilite.Table.exists(path)
                and aggregate.stored_signature(path) == q.signature()):
            start, rebuilt = resume_position(path, detail, detail_id)
            if rebuilt:  # the state folds changes of another table: recompute from the new snapshot
                logger.warning(f"hudilite: {q.relation} was rebuilt since the checkpoint of {schema}.{identifier}: "
                               "recomputing the aggregate from its snapshot")
        spec.record_key = [GROUP_KEY]
        if empty:
            state.take(key)  # no checkpoint, no signature: the next run starts from the detail's snapshot
            if entry is not None and entry.is_hudilite and hudilite.Table.exists(path):
                return no_change(path, "aggregate", "--empty: nothing read")
            return _full(env, q, schema, identifier, path, detail, end, spec, entry, empty=True)
        if start is None:
            return _full(env, q, schema, identifier, path, detail, end, spec, entry)
        return _incremental(env, q, schema, identifier, path, detail, start, end, spec, entry)


def _write_options(env, spec, identifier, detail) -> Dict[str, str]:
    """The model's write options, with the core's small-batch choice for a detail of few rows
    (`aggregate.write_options`)."""
    return aggregate.write_options(detail, env._options(spec, identifier))


def _full(env, q, schema, identifier, path, detail, end, spec, entry, empty: bool = False):
    df, visible = _spark_errors(lambda: aggregate.full_frame(env.spark, q, detail, end))
    options = _write_options(env, spec, identifier, detail)
    exists = hudilite.Table.exists(path)
    removed = env._snapshot_rows(path) if exists else None  # the rows this build replaces (as a table model's)
    if empty:
        df = df.limit(0)
    else:
        tz = aggregate.session_time_zone(env.spark)
        env.run.set_extra(model_key(schema, identifier), aggregate.full_state(q, detail, path, end, tz))
    if exists and env._compatible(path, spec, [GROUP_KEY], df):
        op = "insert_overwrite_table"
        result = env._write(df, path, [GROUP_KEY], spec, op, options, schema, identifier)
    elif exists:
        op = "insert"
        result = env._rebuild_beside(df, path, [GROUP_KEY], spec, op, options, schema, identifier)
    else:
        op = "insert"
        result = env._write(df, path, [GROUP_KEY], spec, op, options, schema, identifier)
    env.publish(schema, identifier, path, visible, env._props(spec, [GROUP_KEY], True), entry)
    return response(op, result, path, strategy="aggregate", removed=removed)


def _incremental(env, q, schema, identifier, path, detail, start, end, spec, entry):
    if end is None or start >= end:  # nothing committed upstream since the checkpoint
        env.run.take(model_key(schema, identifier))
        return no_change(path, "aggregate")
    try:
        local = aggregate.incremental_arrow(q, detail, path, start, end, aggregate.session_time_zone(env.spark))
        if local is not None:
            (df, visible, state_extra), release = local, []
            env.run.set_extra(model_key(schema, identifier), state_extra)
        else:
            df, visible, release = _spark_errors(
                lambda: aggregate.incremental_frame(env.spark, q, detail, path, start, end))
    except hudilite.RangeUnavailableError as e:
        raise DbtRuntimeError(f"aggregate {schema}.{identifier}: {e}") from None
    try:
        options = env._options(spec, identifier) if local is not None else \
            _write_options(env, spec, identifier, detail)
        result = env._write(df, path, [GROUP_KEY], spec, "upsert", options, schema, identifier)
    finally:
        for r in release:
            r.unpersist()
    env.publish(schema, identifier, path, visible, env._props(spec, [GROUP_KEY], True), entry)
    return response("upsert", result, path, strategy="aggregate")


def _spark_errors(fn):
    try:
        return fn()
    except PySparkException as e:
        raise DbtRuntimeError(f"materialized='aggregate': {e}") from None
