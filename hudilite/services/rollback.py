"""The rollback service: roll back failed writes, each as a rollback instant (`Transaction.rollback`; the
mechanics are in hudilite.writer.rollback)."""

from __future__ import annotations

from hudilite.table import HoodieTable
from hudilite.timeline import Instant
from hudilite.writer.transaction import Transaction

__all__ = ["abort_write", "rollback_failed_writes", "rollback_instant"]


def rollback_failed_writes(table: HoodieTable, *, lazy: bool = False, heartbeat_tolerance_ms: int | None = None,
                           options: dict | None = None) -> list[str]:
    """Roll back every pending write instant (eager: the caller knows no writer is running), or only those
    whose writer's heartbeat expired by the writer's own recorded tolerance (lazy: safe beside live writers;
    `heartbeat_tolerance_ms` only for heartbeats that record none, default 60 s x 2), under the table lock.
    Table-service plans (compaction, clustering) and prepared streaming commits are left alone: their owners
    finish them. Also removes what writers killed right after their commit left behind (markers, heartbeat,
    commit temp file). Returns the rolled-back instant times. `options`: the writers' (their lock provider)."""
    txn = Transaction(table, options or {})
    return txn.rollback_failed_writes(lazy=lazy, heartbeat_tolerance_ms=heartbeat_tolerance_ms)


def rollback_instant(table: HoodieTable, instant: Instant, options: dict | None = None) -> list[str]:
    """Roll back the one pending write `instant` (a rollback instant on the timeline, as Apache Hudi writes it),
    under the table lock; the caller decided it is a failed write. Returns the deleted data files."""
    txn = Transaction(table, options or {})
    with txn.lock:
        return txn.rollback(instant)


def abort_write(table: HoodieTable, instant: Instant, options: dict | None = None) -> list[str]:
    """Undo the caller's own failed or abandoned write `instant` under the table lock, leaving the table exactly as
    before it: no rollback instant (`Transaction.abort`). Returns the deleted data files."""
    txn = Transaction(table, options or {})
    with txn.lock:
        return txn.abort(instant)
