"""What one dbt invocation remembers per model between rendering its SQL and committing it.

Per model of the current invocation: the upstream ranges its `hudilite.changes` calls read (end fixed at first
use), extra commit metadata for its commit (aggregate state), the views it read (re-pointed when an upstream
was rebuilt), and its write-audit-publish options. Held by the process-wide environment; entries of an earlier
invocation (a long-lived process running dbt again) are ignored.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Dict, List, Optional, Tuple

from dbt_common.exceptions import DbtRuntimeError
from dbt_common.invocation import get_invocation_id

from hudilite import checkpoints


def model_key(schema: str, identifier: str) -> str:
    return f"{schema}.{identifier}".lower()


def resume_position(model_path: str, upstream: str, table_id: Optional[str]) -> Tuple[Optional[str], bool]:
    """hudilite.checkpoints.resume_position, an unreadable checkpoint reported to dbt."""
    try:
        return checkpoints.resume_position(model_path, upstream, table_id)
    except checkpoints.CheckpointError as e:
        raise DbtRuntimeError(f"hudilite: {e}; run the model with --full-refresh") from None


def _invocation_id() -> str:
    try:
        return str(get_invocation_id())
    except Exception:  # noqa: BLE001
        return ""


class RunState:
    """Per process: the ranges each model of the current dbt invocation reads (end fixed at first use), and
    extra commit metadata for the model's commit."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # model key -> (invocation, {upstream path: (end, table id)}, {extra metadata})
        self._runs: Dict[str, Tuple[str, Dict[str, Tuple[Optional[str], Optional[str]]], Dict[str, str]]] = {}
        # model key -> (invocation, {rebuilt upstream paths}, {view name: (upstream path, end)})
        self._reads: Dict[str, Tuple[str, set, Dict[str, Tuple[str, Optional[str]]]]] = {}
        # model key -> (invocation, audit_before_publish, mark_ready, the model's generic tests)
        self._publish: Dict[str, Tuple[str, bool, bool, list]] = {}
        # model key -> (invocation, plan): a changes-driven microbatch model's plan (change_batches.py)
        self._plans: Dict[str, Tuple[str, Any]] = {}

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
                ends[path] = checkpoints.position(path)
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

    def commit_metadata(self, model: str, path: str, full_refresh: bool) -> Dict[str, str]:
        """extraMetadata for the commit that writes `model` at `path`: its checkpoints after this run (merged
        over those stored in the table unless it is rebuilt) and its extra entries; taken from the state."""
        ends, extra = self.take(model)
        if not ends:
            return dict(extra)
        try:
            return {**extra, **checkpoints.entries(ends, None if full_refresh else path)}
        except checkpoints.CheckpointError as e:
            raise DbtRuntimeError(f"hudilite: {e}; run the model with --full-refresh") from None

    def batch_plan(self, model: str, make: Callable[[], Any]) -> Tuple[bool, Any]:
        """(first, plan) for a microbatch batch of `model`: the first batch of this invocation makes the plan
        (dbt runs that batch alone, before the others), later ones get the same plan."""
        inv = _invocation_id()
        with self._lock:
            cur = self._plans.get(model)
            if cur is not None and cur[0] == inv:
                return False, cur[1]
        plan = make()  # catalog and timeline reads: not under the lock every model's batches share
        with self._lock:
            cur = self._plans.get(model)
            if cur is not None and cur[0] == inv:
                return False, cur[1]
            self._plans[model] = (inv, plan)
            return True, plan

    def set_publish(self, model: str, audit: bool, ready: bool, tests: list) -> None:
        """The model's `audit_before_publish` / `mark_ready` configs (and generic tests) for its write."""
        with self._lock:
            self._publish[model] = (_invocation_id(), audit, ready, list(tests))

    def publish(self, model: str) -> Tuple[bool, bool, list]:
        """The settings for EVERY write of the model in this invocation: not taken by the first one, as a
        microbatch model writes once per batch (concurrently, from dbt's threads) or per changed window."""
        with self._lock:
            inv, audit, ready, tests = self._publish.get(model, ("", False, False, []))
        return (audit, ready, list(tests)) if inv == _invocation_id() else (False, False, [])


_UNKNOWN = object()


class KnownEntries:
    """Catalog facts this dbt invocation already has, so it need not ask the catalog again (each ask is a round
    trip to a Spark Connect server): the table paths of the models it published, and a model's own entry as
    its `hudilite.changes()` described it while the model was compiled, for the model's build right after.
    They hold until the process runs another SQL statement through the adapter (a hook or a macro may alter or
    drop any entry; the DDL of a publish changes only the entry published, which is noted anew), and only
    within the invocation. Another process changing an entry meanwhile goes unseen, as it would between a
    describe and the write after it."""

    UNKNOWN = _UNKNOWN

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._inv = ""
        self._paths: Dict[str, str] = {}
        self._entries: Dict[str, Any] = {}

    def _scoped(self) -> None:  # under the lock
        inv = _invocation_id()
        if inv != self._inv:
            self._inv, self._paths, self._entries = inv, {}, {}

    def forget(self) -> None:
        with self._lock:
            self._paths.clear()
            self._entries.clear()

    def published(self, model: str, path: Optional[str]) -> None:
        """`model`'s entry now names the table at `path` (None: it is being changed); an entry of it noted
        before is gone."""
        with self._lock:
            self._scoped()
            self._entries.pop(model, None)
            if path is None:
                self._paths.pop(model, None)
            else:
                self._paths[model] = path

    def path(self, model: str) -> Optional[str]:
        """The table path this invocation published `model` at (None: not known)."""
        with self._lock:
            self._scoped()
            return self._paths.get(model)

    def note_entry(self, model: str, entry: Any) -> None:
        with self._lock:
            self._scoped()
            self._entries[model] = entry

    def entry(self, model: str, take: bool = False) -> Any:
        """The noted entry of `model` (None: it has none), or `UNKNOWN`; `take`: removed as well."""
        with self._lock:
            self._scoped()
            return self._entries.pop(model, _UNKNOWN) if take else self._entries.get(model, _UNKNOWN)


class DeferredViews:
    """The temporary views this invocation's change reads (`hudilite.changes()`, `hudilite.as_of()`) defined
    but did not create yet, on a Spark Connect session: creating one is a round trip of its own, and the model
    whose SQL names it sends its query anyway, so the query carries the view's plan (`query_frame`'s `views`).
    A view is created on the server only when another statement names it (a hook, `dbt show`, a DML's query).
    Names are unique per call (incremental._view), so a later invocation never names an earlier one's."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._inv = ""
        self._views: Dict[str, Any] = {}

    def put(self, name: str, df: Any) -> None:
        with self._lock:
            inv = _invocation_id()
            if inv != self._inv:  # an earlier invocation's views: nothing names them any more
                self._inv, self._views = inv, {}
            self._views[name] = df

    def named_in(self, sql: str) -> Dict[str, Any]:
        """The deferred views `sql` names (as their name appears in it)."""
        with self._lock:
            return {n: df for n, df in self._views.items() if n in sql}

    def created(self, name: str, df: Any) -> None:
        """The view `name` was created on the server as `df`: no longer deferred (unless redefined since)."""
        with self._lock:
            if self._views.get(name) is df:
                del self._views[name]
