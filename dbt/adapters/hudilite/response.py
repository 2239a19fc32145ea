"""What a hudilite model run or statement reports to dbt (run_results.json `adapter_response`), and error text."""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional

from dbt.adapters.contracts.connection import AdapterResponse


@dataclass
class HudiliteAdapterResponse(AdapterResponse):
    """What a model run reports (run_results.json `adapter_response`)."""

    rows_inserted: Optional[int] = None
    rows_updated: Optional[int] = None
    rows_deleted: Optional[int] = None
    commit_time: Optional[str] = None
    operation: Optional[str] = None
    strategy: Optional[str] = None
    table_path: Optional[str] = None
    files_written: Optional[int] = None
    replaced_file_groups: Optional[int] = None
    rows_removed: Optional[int] = None  # rows of the table a full build replaced
    engine: Optional[str] = None  # which writer ran: "driver" (a small batch, no Spark jobs) or "spark"


def response(op: str, result, path: str, strategy: Optional[str] = None, seed: bool = False,
              removed: Optional[int] = None):
    stats = dict(getattr(result, "stats", {}) or {})
    ins, upd, dele = (int(stats.get("inserted", 0)), int(stats.get("updated", 0)),
                      int(stats.get("deleted", 0)))
    code = op.upper()
    msg = f"{code} {ins} inserted, {upd} updated, {dele} deleted"
    if seed:
        msg = f"INSERT {ins}"
    if removed is not None:  # a full build over an existing table: its rows are gone too
        msg += f", {removed} removed"
    return HudiliteAdapterResponse(
        _message=msg, code=code, rows_affected=ins + upd + dele + (removed or 0), rows_inserted=ins,
        rows_updated=upd, rows_removed=removed,
        rows_deleted=dele, commit_time=str(result), operation=op, strategy=strategy, table_path=path,
        files_written=int(stats.get("files", 0)), replaced_file_groups=int(stats.get("replaced_file_groups", 0)),
        engine=stats.get("engine"),
    )



def combined(parts: List[HudiliteAdapterResponse], what: str) -> HudiliteAdapterResponse:
    """One response for several commits of one model run (the windows of a changes-driven microbatch)."""
    last = parts[-1]
    total = {k: sum(int(getattr(p, k) or 0) for p in parts)
             for k in ("rows_affected", "rows_inserted", "rows_updated", "rows_deleted", "files_written",
                       "replaced_file_groups")}
    return HudiliteAdapterResponse(
        _message=f"{what}: {total['rows_inserted']} inserted, {total['rows_updated']} updated, "
                 f"{total['rows_deleted']} deleted", code=last.code, commit_time=last.commit_time,
        operation=last.operation, strategy=last.strategy, table_path=last.table_path, **total)


def no_change(path: str, strategy: str, reason: str = "no upstream commits") -> HudiliteAdapterResponse:
    """An incremental run that found nothing new upstream (or read nothing: `--empty`): no commit."""
    return HudiliteAdapterResponse(_message=f"{strategy.upper()} up to date ({reason})", code="UPSERT",
                                   rows_affected=0, rows_inserted=0, rows_updated=0, rows_deleted=0,
                                   commit_time=None, operation="none", strategy=strategy, table_path=path,
                                   files_written=0, replaced_file_groups=0)


def error_text(exc: BaseException) -> str:
    text = str(exc)
    # py4j errors carry the whole Java stack: keep the first lines (the cause), not the frames
    lines = [ln for ln in text.splitlines() if not ln.lstrip().startswith("at ")]
    return "\n".join(lines[:20]).strip() or type(exc).__name__
