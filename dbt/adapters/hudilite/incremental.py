"""Exactly-once change consumption for dbt models: `{{ hudilite.changes(ref('x')) }}`, checkpoints, `as_of`.

A model that reads `hudilite.changes(ref('orders'))` gets the latest image of every upstream record committed
after the model's checkpoint and up to an END FIXED when the model starts (the upstream's newest completion
time at that moment), with a `_change_op` column ('I' / 'U' / 'D'; 'B' before images on request). The
checkpoint — upstream table path -> completion position consumed — is stored in the extraMetadata of the
commit that writes the model (`hudilite.checkpoints`, JSON), so output and checkpoint commit together:

* a failed run commits nothing, so the next run reads the same range again;
* a run never reads a commit twice or skips one: ranges are in completion order, so an upstream commit that
  was requested before the checkpoint but completed after it is in the next range;
* the first run, a `--full-refresh` and models that are rebuilt every run (`table`) read the full snapshot
  (as of the fixed end) and every row arrives as 'I'.

Explicit ranges (`begin=` / `end=`, instant times) and `hudilite.as_of(ref('x'), '<instant>')` never touch
checkpoints. Each call creates a session temporary view over the hudilite read and renders its name.
"""

from __future__ import annotations

import json
import threading
import uuid
from typing import Any, Dict, Optional, Tuple

from dbt_common.exceptions import CompilationError, DbtRuntimeError

CHECKPOINT_KEY = "hudilite.checkpoints"
CHECKPOINTED = ("incremental", "aggregate")
_NOT_PERSISTED = ("view", "ephemeral")
_AD_HOC = ("sql_operation", "sql", "analysis", "operation", "rpc")  # dbt resource types of one-off queries


def _invocation_id() -> str:
    try:
        from dbt_common.invocation import get_invocation_id

        return str(get_invocation_id())
    except Exception:  # noqa: BLE001
        return ""


class RunCheckpoints:
    """Per process: the ranges each model of the current dbt invocation reads (end fixed at first use), and
    extra commit metadata for the model's commit."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # model key -> (invocation, {upstream path: end}, {extra metadata})
        self._runs: Dict[str, Tuple[str, Dict[str, str], Dict[str, str]]] = {}

    def _current(self, model: str):
        inv = _invocation_id()
        cur = self._runs.get(model)
        if cur is None or cur[0] != inv:
            cur = self._runs[model] = (inv, {}, {})
        return cur

    def fixed_end(self, model: str, path: str, compute) -> Optional[str]:
        with self._lock:
            _, ends, _ = self._current(model)
            if path not in ends:
                ends[path] = compute()
            return ends[path]

    def set_extra(self, model: str, extra: Dict[str, str]) -> None:
        with self._lock:
            self._current(model)[2].update(extra)

    def take(self, model: str) -> Tuple[Dict[str, str], Dict[str, str]]:
        """(ends, extra metadata) of this invocation's run of `model`; removed from the state."""
        inv = _invocation_id()
        with self._lock:
            cur_inv, ends, extra = self._runs.pop(model, ("", {}, {}))
        if cur_inv != inv:
            return {}, {}
        return {p: e for p, e in ends.items() if e}, extra


_STATE_LOCK = threading.Lock()


def run_state(env) -> RunCheckpoints:
    """The env's RunCheckpoints (one per process-wide environment)."""
    with _STATE_LOCK:
        st = env.__dict__.get("_hudilite_checkpoints")
        if st is None:
            st = env.__dict__["_hudilite_checkpoints"] = RunCheckpoints()
        return st


def model_key(schema: str, identifier: str) -> str:
    return f"{schema}.{identifier}".lower()


def stored_checkpoints(path: Optional[str]) -> Dict[str, str]:
    """The checkpoints of the newest commit of the model's table that records them ({} if none)."""
    from hudilite.table import HoodieTable

    if not path or not HoodieTable.exists(path):
        return {}
    tl = HoodieTable.open(path).timeline
    for inst in reversed(tl.completed()):
        v = (tl.read_metadata(inst).get("extraMetadata") or {}).get(CHECKPOINT_KEY)
        if v:
            try:
                return dict(json.loads(v))
            except ValueError:
                raise DbtRuntimeError(f"hudilite: commit {inst.timestamp} of {path} has an unreadable "
                                      f"{CHECKPOINT_KEY}; run the model with --full-refresh") from None
    return {}


def checkpoint_metadata(env, schema: str, identifier: str, path: str, full_refresh: bool) -> Dict[str, str]:
    """extraMetadata for the commit that writes the model: the checkpoints after this run."""
    ends, extra = run_state(env).take(model_key(schema, identifier))
    if not ends:
        return dict(extra)
    merged = {} if full_refresh else stored_checkpoints(path)
    merged.update(ends)
    return {**extra, CHECKPOINT_KEY: json.dumps(merged, sort_keys=True)}


def _upstream_path(env, relation) -> str:
    schema = relation.schema or env.spark.catalog.currentDatabase()
    entry = env.describe(schema, relation.identifier)
    if entry is None or not entry.is_hudilite:
        raise DbtRuntimeError(f"hudilite.changes/as_of: {schema}.{relation.identifier} is not a hudilite table "
                              "(build it first; views and foreign tables have no change history)")
    return entry.path


def _view(env, kind: str, df) -> str:
    """A temporary view of `df` under a name of its own. Never derived from the call's arguments: an open
    range (or the checkpointed end) means different rows for the same arguments as the upstream moves on, and
    the session is shared by dbt's threads, so a reused name would let one call's view replace another's
    between rendering a query and running it."""
    name = f"hudilite_{kind}_{uuid.uuid4().hex}"
    df.createOrReplaceTempView(name)
    return f"`{name}`"


def changes_relation(env, this, relation, begin=None, end=None, include_deletes=True, before_image=False,
                     materialized: Optional[str] = None, full_refresh: bool = False,
                     resource_type: Optional[str] = None) -> str:
    import hudilite
    from hudilite.reader.changes import latest_position

    mat = (materialized or "").lower()
    path = _upstream_path(env, relation)
    spark = env.spark
    if begin is not None or end is not None:  # an analyst's explicit range: no checkpoint
        try:
            df = hudilite.changes(spark, path, begin=begin, end=end, include_deletes=include_deletes,
                                  before_image=before_image)
        except hudilite.HudiliteError as e:
            raise DbtRuntimeError(f"hudilite.changes({relation}, begin={begin!r}, end={end!r}): {e}") from None
        return _view(env, "changes", df)
    if resource_type in _AD_HOC:  # dbt show --inline, an analysis, run-operation
        raise CompilationError("hudilite.changes() without begin=/end= in an ad-hoc query (dbt show --inline, "
                               "an analysis or operation): only a stored model keeps a checkpoint to read changes "
                               "since; pass begin= (and end=) for an explicit range")
    if mat in _NOT_PERSISTED:
        raise CompilationError(f"hudilite.changes() in {getattr(this, 'identifier', '?')}: a {mat} model is not "
                               "stored, so it cannot keep a checkpoint; use it in an incremental, aggregate or "
                               "table model (or pass begin=/end= for an explicit range)")
    key = model_key(this.schema, this.identifier)
    fixed = run_state(env).fixed_end(key, path, lambda: latest_position(path)) if mat in CHECKPOINTED \
        else latest_position(path)
    start = None
    if mat in CHECKPOINTED and not full_refresh:
        entry = env.describe(this.schema, this.identifier)
        if entry is not None and entry.is_hudilite:
            start = stored_checkpoints(entry.path).get(path)
    if fixed is None:  # the upstream has no commits yet: nothing to read
        df = hudilite.read(spark, path).limit(0)
        from pyspark.sql import functions as F

        df = df.withColumn("_change_op", F.lit("I"))
    elif start is not None and start >= fixed:
        df = hudilite.changes(spark, path, begin=fixed, end=fixed, completion_bounds=True)  # empty
    else:
        try:
            df = hudilite.changes(spark, path, begin=start, end=fixed, include_deletes=include_deletes,
                                  before_image=before_image, completion_bounds=True)
        except hudilite.RangeUnavailableError as e:
            raise DbtRuntimeError(f"hudilite.changes({relation}) for {this}: {e}") from None
    return _view(env, "changes", df)


def read_relation(env, relation, as_of=None, ready_only: bool = False) -> str:
    import hudilite

    path = _upstream_path(env, relation)
    df = hudilite.read(env.spark, path, as_of=as_of, ready_only=bool(ready_only))
    return _view(env, "read", df)


def model_config_flag(cfg: Dict[str, Any], name: str) -> bool:
    v = cfg.get(name)
    return str(v).lower() in ("true", "1", "yes") if isinstance(v, str) else bool(v)


# ---- write-audit-publish, partition readiness ------------------------------------------------------------
_AUDITED = ("not_null", "unique", "accepted_values", "relationships")


def set_publish_options(env, schema: str, identifier: str, cfg: Dict[str, Any]) -> None:
    """Remember the model's `audit_before_publish` / `mark_ready` configs (and its generic tests) for its
    write in this invocation."""
    audit = model_config_flag(cfg, "audit_before_publish")
    ready = model_config_flag(cfg, "mark_ready")
    with run_state(env)._lock:
        run_state(env).__dict__.setdefault("_publish", {})[model_key(schema, identifier)] = (
            _invocation_id(), audit, ready, list(cfg.get("audit_tests") or []))


def _publish_options(env, schema: str, identifier: str):
    st = run_state(env)
    with st._lock:
        inv, audit, ready, tests = st.__dict__.get("_publish", {}).pop(model_key(schema, identifier),
                                                                        ("", False, False, []))
    return (audit, ready, tests) if inv == _invocation_id() else (False, False, [])


def write_model(env, schema: str, identifier: str, df, path: str, **kw):
    """hudilite.write for a model's commit. With `audit_before_publish` the data is written as a pending
    (inflight) instant, the model's generic tests run against it, and it is committed only if they pass (else
    rolled back from its markers). With `mark_ready` the commit marks the partitions it wrote ready."""
    import hudilite

    audit, ready, tests = _publish_options(env, schema, identifier)
    if not audit and not ready:
        return hudilite.write(df, path, **kw)
    pending = hudilite.write(df, path, commit=False, **kw)
    try:
        failures = run_audits(env, pending, schema, tests) if audit else []
    except BaseException:
        pending.abort()
        raise
    if failures:
        pending.abort()
        raise DbtRuntimeError(
            f"hudilite: audit of {schema}.{identifier} failed, nothing was published (the write "
            f"{pending.instant_time} was rolled back; readers never saw it): " + "; ".join(failures))
    return pending.complete({"hudilite.audited": "true"} if audit else None, ready_partitions=True if ready else None)


def run_audits(env, pending, schema: str, tests) -> list:
    """Run the model's generic tests (not_null, unique, accepted_values, relationships) against the pending
    write's data. Returns the failures (severity error); warnings are logged."""
    from pyspark.sql import functions as F

    from dbt.adapters.hudilite.environment import logger

    data = pending.read(env.spark)
    failures = []
    for t in tests:
        name = str(t.get("name") or "")
        kw = dict(t.get("kwargs") or {})
        col = kw.get("column_name")
        df = data.filter(F.expr(t["where"])) if t.get("where") else data
        if name not in _AUDITED or not col:
            logger.warning(f"hudilite: test {t.get('unique_id') or name} cannot run before publish (only "
                           f"{', '.join(_AUDITED)} can); it runs after the commit with dbt test")
            continue
        c = F.expr(str(col))
        if name == "not_null":
            n = df.filter(c.isNull()).count()
        elif name == "unique":
            n = df.filter(c.isNotNull()).groupBy(c.alias("v")).count().filter(F.col("count") > 1).count()
        elif name == "accepted_values":
            n = df.filter(c.isNotNull() & ~c.isin(list(kw.get("values") or []))).count()
        else:
            import re

            m = re.search(r"ref\(\s*['\"]([^'\"]+)['\"]\s*\)", str(kw.get("to") or ""))
            if not m:
                logger.warning(f"hudilite: relationships test with to={kw.get('to')!r} cannot run before publish")
                continue
            parent = env.spark.table(f"{schema}.{m.group(1)}").select(F.expr(str(kw.get("field"))).alias("__p"))
            n = df.filter(c.isNotNull()).join(parent, c == F.col("__p"), "left_anti").count()
        if n:
            msg = f"{t.get('unique_id') or name} ({name} on {col}): {n} failing row(s)"
            if str(t.get("severity") or "error").lower() == "warn":
                logger.warning(f"hudilite: audit warning: {msg}")
            else:
                failures.append(msg)
    return failures
