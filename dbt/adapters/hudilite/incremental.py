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

Beside each position the commit records the upstream's table id (`hudilite.checkpoint.tables`, path -> id):
a checkpoint is continued only on the table it was taken on. An upstream rebuilt at the same path (a
`--full-refresh` that changed its key or partitioning writes a new table) has a new id; the consumer is then
rebuilt from the new snapshot (see `rebuilt_upstreams`), never folded on top of what it holds.

Explicit ranges (`begin=` / `end=`, instant times) and `hudilite.as_of(ref('x'), '<instant>')` never touch
checkpoints. Each call creates a session temporary view over the hudilite read and renders its name.
"""

from __future__ import annotations

import json
import threading
import uuid
from typing import Any, Dict, List, Optional, Tuple

from dbt_common.exceptions import CompilationError, DbtRuntimeError

from hudilite.reader.changes import checkpoint, same_table

CHECKPOINT_KEY = "hudilite.checkpoints"
CHECKPOINT_TABLES_KEY = "hudilite.checkpoint.tables"  # upstream path -> table id the position was taken on
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
        # model key -> (invocation, {upstream path: (end, table id)}, {extra metadata})
        self._runs: Dict[str, Tuple[str, Dict[str, Tuple[Optional[str], Optional[str]]], Dict[str, str]]] = {}
        # model key -> (invocation, {rebuilt upstream paths}, {view name: (upstream path, end)})
        self._reads: Dict[str, Tuple[str, set, Dict[str, Tuple[str, Optional[str]]]]] = {}

    def _current(self, model: str):
        inv = _invocation_id()
        cur = self._runs.get(model)
        if cur is None or cur[0] != inv:
            cur = self._runs[model] = (inv, {}, {})
        return cur

    def _reads_of(self, model: str):
        inv = _invocation_id()
        cur = self._reads.get(model)
        if cur is None or cur[0] != inv:
            cur = self._reads[model] = (inv, set(), {})
        return cur

    def fixed_position(self, model: str, path: str) -> Tuple[Optional[str], Optional[str]]:
        """(end, table id) of `path` for this run of `model`: taken at the first use, the same afterwards."""
        with self._lock:
            _, ends, _ = self._current(model)
            if path not in ends:
                ends[path] = checkpoint(path)
            return ends[path]

    def fixed_end(self, model: str, path: str) -> Optional[str]:
        return self.fixed_position(model, path)[0]

    def set_extra(self, model: str, extra: Dict[str, str]) -> None:
        with self._lock:
            self._current(model)[2].update(extra)

    def note_read(self, model: str, view: str, path: str, end: Optional[str], rebuilt: bool) -> None:
        """A checkpointed change read of `model` (its view), and whether its upstream was rebuilt."""
        with self._lock:
            _, paths, views = self._reads_of(model)
            views[view] = (path, end)
            if rebuilt:
                paths.add(path)

    def rebuilding(self, model: str) -> bool:
        with self._lock:
            return bool(self._reads_of(model)[1])

    def reads(self, model: str) -> Tuple[List[str], Dict[str, Tuple[str, Optional[str]]]]:
        """(rebuilt upstream paths, {view: (path, end)}) of this invocation's run of `model`."""
        with self._lock:
            _, paths, views = self._reads_of(model)
            return sorted(paths), dict(views)

    def take(self, model: str) -> Tuple[Dict[str, Tuple[str, Optional[str]]], Dict[str, str]]:
        """({upstream path: (end, table id)}, extra metadata) of this invocation's run of `model`; removed from
        the state."""
        inv = _invocation_id()
        with self._lock:
            cur_inv, ends, extra = self._runs.pop(model, ("", {}, {}))
            self._reads.pop(model, None)
        if cur_inv != inv:
            return {}, {}
        return {p: e for p, e in ends.items() if e[0]}, extra


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


def stored_checkpoint(path: Optional[str]) -> Tuple[Dict[str, str], Dict[str, Optional[str]]]:
    """({upstream path: position}, {upstream path: table id}) of the newest commit of the model's table that
    records checkpoints ({}, {} if none). Commits written before table ids existed record no ids."""
    from hudilite.table import HoodieTable

    if not path or not HoodieTable.exists(path):
        return {}, {}
    tl = HoodieTable.open(path).timeline
    for inst in reversed(tl.completed()):
        extra = tl.read_metadata(inst).get("extraMetadata") or {}
        v = extra.get(CHECKPOINT_KEY)
        if v:
            try:
                return dict(json.loads(v)), dict(json.loads(extra.get(CHECKPOINT_TABLES_KEY) or "{}"))
            except ValueError:
                raise DbtRuntimeError(f"hudilite: commit {inst.timestamp} of {path} has an unreadable "
                                      f"{CHECKPOINT_KEY}; run the model with --full-refresh") from None
    return {}, {}


def stored_checkpoints(path: Optional[str]) -> Dict[str, str]:
    """The checkpoint positions of the newest commit of the model's table that records them ({} if none)."""
    return stored_checkpoint(path)[0]


def resume_position(model_path: Optional[str], upstream: str, current_id: Optional[str]) -> Tuple[Optional[str], bool]:
    """(position to continue from, rebuilt): the model's checkpoint for `upstream` if it was taken on the
    table now there (id `current_id`); (None, True) when the upstream is another table than the checkpoint's
    (rebuilt or recreated at that path: the consumer must be rebuilt from its snapshot); (None, False) when
    the model has no checkpoint for it."""
    positions, ids = stored_checkpoint(model_path)
    start = positions.get(upstream)
    if start is None:
        return None, False
    if not same_table(ids.get(upstream), start, current_id):
        return None, True
    return start, False


def checkpoint_metadata(env, schema: str, identifier: str, path: str, full_refresh: bool) -> Dict[str, str]:
    """extraMetadata for the commit that writes the model: the checkpoints after this run."""
    ends, extra = run_state(env).take(model_key(schema, identifier))
    if not ends:
        return dict(extra)
    return {**extra, **checkpoint_entries(ends, None if full_refresh else path)}


def checkpoint_entries(ends: Dict[str, Tuple[str, Optional[str]]], previous: Optional[str] = None) -> Dict[str, str]:
    """The checkpoint keys of a commit consuming `ends` ({upstream path: (end, table id)}), merged over those of
    the newest checkpoint-carrying commit of the table at `previous` (None: a rebuild, no earlier entries)."""
    positions, ids = stored_checkpoint(previous) if previous else ({}, {})
    for p, (end, tid) in ends.items():
        positions[p] = end
        ids[p] = tid
    ids = {p: t for p, t in ids.items() if t is not None and p in positions}
    return {CHECKPOINT_KEY: json.dumps(positions, sort_keys=True), CHECKPOINT_TABLES_KEY: json.dumps(ids, sort_keys=True)}


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
    state = run_state(env)
    if mat in CHECKPOINTED:
        fixed, table_id = state.fixed_position(key, path)
    else:
        fixed, table_id = latest_position(path), None
    start = None
    rebuilt = False
    if mat in CHECKPOINTED and not full_refresh:
        entry = env.describe(this.schema, this.identifier)
        if entry is not None and entry.is_hudilite:
            start, rebuilt = resume_position(entry.path, path, table_id)
            if state.rebuilding(key):  # another upstream of this model was rebuilt: the model is rebuilt
                start = None
    if fixed is None:  # the upstream has no commits yet: nothing to read
        df = hudilite.read(spark, path).limit(0)
        from pyspark.sql import functions as F

        df = df.withColumn("_change_op", F.lit("I"))
    elif start is not None and start >= fixed:
        df = hudilite.changes(spark, path, begin=fixed, end=fixed, completion_bounds=True)  # empty
    else:
        try:
            df = hudilite.changes(spark, path, begin=start, end=fixed, include_deletes=include_deletes,
                                  before_image=before_image, completion_bounds=True, table_id=table_id)
        except hudilite.RangeUnavailableError as e:
            raise DbtRuntimeError(f"hudilite.changes({relation}) for {this}: {e}") from None
    view = _view(env, "changes", df)
    if mat in CHECKPOINTED:
        state.note_read(key, view.strip("`"), path, fixed, rebuilt)
    return view


def rebuild_reads(env, schema: str, identifier: str) -> List[str]:
    """The upstreams of `schema.identifier` that were rebuilt since its checkpoint (empty: none). When there
    are any, every checkpointed change read of the model in this run is re-pointed to the full snapshot as
    of its fixed end (all rows 'I'), so the model can be rebuilt from its upstreams as a --full-refresh would:
    a range of a rebuilt upstream cannot be folded on top of what the model holds."""
    import hudilite

    key = model_key(schema, identifier)
    rebuilt, views = run_state(env).reads(key)
    if not rebuilt:
        return []
    for name, (path, end) in views.items():
        if end is None:
            continue  # an empty upstream: the view is empty either way
        hudilite.changes(env.spark, path, end=end, completion_bounds=True).createOrReplaceTempView(name)
    return rebuilt


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
