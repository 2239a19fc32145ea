"""Prepared commits: the public transaction API of exactly-once writers such as the streaming sink.

A writer that must not lose a batch it acknowledged commits in two steps. `PreparedWriter.write(df, extra,
on_prepared=...)` writes the files, then *prepares* the commit under the table lock (the commit's conflict
check, then its full metadata in the inflight file, marked prepared) and hands the prepared instant to
`on_prepared` instead of completing it; `Completer.complete(instant)` completes it later, in instant order.
A prepared commit can no longer fail a conflict check (other writers lose against its file groups) and
failed-write rollback leaves it alone, so after a crash `recover(path, app_id)` completes it. Writes passed
`prepared=` plan on top of those prepared commits as if they had completed (they are guaranteed to).

Each commit carries the writer's app id and batch number (`APP_ID_KEY` / `BATCH_ID_KEY` in its
extraMetadata); `last_batch_id(path, app_id)` is the highest one committed or prepared: the batches a
restarted writer skips. The instants handed to `on_prepared` are opaque handles to pass back here.
"""

from __future__ import annotations

import logging

from hudilite import checkpoints
from hudilite.table import HoodieTable
from hudilite.timeline import COMPLETED, WRITE_ACTIONS, Instant, Timeline
from hudilite.writer.client import WriteClient
from hudilite.writer.conflict import prepared_metadata
from hudilite.writer.options import UNSET, resolve
from hudilite.writer.transaction import WRITER_TAG_KEY, Transaction

log = logging.getLogger(__name__)

APP_ID_KEY = "hudilite.streaming.query.id"  # the streaming sink's app id is its query id
BATCH_ID_KEY = "hudilite.streaming.batch.id"


def _app_commits(tl: Timeline, app_id: str) -> tuple[int | None, list[tuple[Instant, dict]]]:
    """(highest batch id committed by `app_id`, [(prepared instant, metadata)] of `app_id` in instant order)."""
    hit = checkpoints.newest(tl, APP_ID_KEY, app_id, WRITE_ACTIONS)
    last = int(hit[1][BATCH_ID_KEY]) if hit is not None else None
    prepared = []
    for inst in tl.pending(WRITE_ACTIONS):
        md = prepared_metadata(tl, inst)
        if md and (md.get("extraMetadata") or {}).get(APP_ID_KEY) == app_id:
            prepared.append((inst, md))
    return last, prepared


def recover(path: str, app_id: str | None = None, options: dict | None = None) -> list[str]:
    """Complete the prepared commits of `app_id` (of every writer when None) on the table at `path`, in
    instant order; returns the completed instant times."""
    table = HoodieTable.open(path)
    tl = table.reload()
    todo = []
    for inst in tl.pending(WRITE_ACTIONS):
        md = prepared_metadata(tl, inst)
        if md is not None and (app_id is None or (md.get("extraMetadata") or {}).get(APP_ID_KEY) == app_id):
            todo.append(inst)
    done = []
    txn = Transaction(table, options or {})
    for inst in sorted(todo, key=lambda i: i.timestamp):
        txn.complete_prepared(inst)
        done.append(inst.timestamp)
    if done:
        log.info("completed prepared streaming commits %s of %s", done, path)
    return done


def last_batch_id(path: str, app_id: str) -> int | None:
    """The highest batch id of `app_id` committed (or prepared: guaranteed to commit) on the table."""
    if not HoodieTable.exists(path):
        return None
    last, prepared = _app_commits(HoodieTable.open(path).reload(), app_id)
    ids = [int(md["extraMetadata"][BATCH_ID_KEY]) for _i, md in prepared]
    return max([x for x in [last, *ids] if x is not None], default=None)


class PreparedWriter:
    """Writes of one exactly-once writer to the table at `path` with this layout (checked here: a bad one
    raises InvalidWriteError before anything is written). `writer_tag` names the writer on its instants:
    one instance of it runs at a time, so an unprepared instant carrying the tag is a dead run's and is
    rolled back at once rather than after its heartbeat tolerance."""

    def __init__(self, path, *, record_key, precombine_field=UNSET, partition_by=(), operation="upsert",
                 table_type=UNSET, options: dict | None = None):
        self.path = path
        self.layout = dict(record_key=record_key, precombine_field=precombine_field, partition_by=partition_by,
                           operation=operation, table_type=table_type)
        self.options = dict(options or {})
        self._resolve(self.options)  # validate

    def _resolve(self, options: dict):
        lay = self.layout
        return resolve(self.path, lay["record_key"], lay["precombine_field"], lay["partition_by"], lay["operation"],
                       lay["table_type"], options)

    def resume(self, app_id: str) -> int | None:
        """A restarted writer's first step: complete `app_id`'s prepared commits (when the table exists), then
        return the highest batch id it committed: the batches to skip as replays."""
        if HoodieTable.exists(self.path):
            recover(self.path, app_id, self.options)
        return last_batch_id(self.path, app_id)

    def write(self, df, extra: dict, *, writer_tag: str, on_prepared=None, prepared=()):
        """Write Spark DataFrame `df` as one commit with `extra` metadata. Without `on_prepared` it completes
        and the instant time is returned; with it, the commit is prepared and `on_prepared(instant, metadata)`
        called (None returned). `prepared`: a callable returning [(instant, metadata)] of this writer's
        prepared commits not completed yet, which the write plans on top of."""
        wo = self._resolve({**self.options, WRITER_TAG_KEY: writer_tag})
        if on_prepared is None:
            return WriteClient(df.sparkSession, wo).run(df, extra)

        class _PreparingTransaction(Transaction):
            def complete(self, inst, metadata, validate=None, **kw):
                self.prepare(inst, metadata)
                on_prepared(inst, metadata)
                return None

        return WriteClient(df.sparkSession, wo, transaction_factory=_PreparingTransaction,
                           open_table=lambda path: _open_on_top(path, list(prepared()))).run(df, extra)


def _open_on_top(path, pending: list[tuple[Instant, dict]]) -> HoodieTable:
    """The table with `pending` prepared commits presented as completed (they are guaranteed to)."""
    table = HoodieTable.open(path)
    if not pending:
        return table
    tl = table.timeline
    have = {i.timestamp: i for i in tl.instants}
    overlay = []
    for inst, md in pending:
        cur = have.get(inst.timestamp)
        if cur is not None and cur.is_completed:
            continue
        overlay.append((inst, md))
    shown = {o.timestamp for o, _ in overlay}
    instants = [i for i in tl.instants if i.timestamp not in shown]
    instants += [Instant(o.timestamp, o.action, COMPLETED) for o, _ in overlay]
    ov = Timeline(tl.meta_dir, tl.layout, instants)
    for o, md in overlay:
        ov._meta_cache[(o.timestamp, COMPLETED)] = md
    table._timeline = ov
    return table


class Completer:
    """Completes prepared commits of the table at `path` (`complete(instant)`, idempotent), in the order given."""

    def __init__(self, path, options: dict | None = None):
        self._txn = Transaction(HoodieTable.open(path), dict(options or {}))

    def complete(self, instant) -> str:
        return self._txn.complete_prepared(instant)


def batch_of(metadata: dict) -> int:
    """The batch number a prepared commit's metadata records."""
    return int(metadata["extraMetadata"][BATCH_ID_KEY])


__all__ = ["APP_ID_KEY", "BATCH_ID_KEY", "UNSET", "Completer", "PreparedWriter", "batch_of", "last_batch_id",
           "recover"]
