"""`refresh`: bring an aggregate table up to date with its detail table, from PySpark (no dbt needed).

Full when the aggregate has no checkpoint for the detail (or was built for another query, or the detail was
rebuilt since), else the detail's changes since the checkpoint folded in: on the driver when the range and the
query allow it (`local.py`), else in Spark (`spark.py`). The rows, the checkpoint (`hudilite.checkpoints`) and
the value multisets (`state.py`) commit together, so re-running the same range is idempotent.
"""

from __future__ import annotations

from typing import Dict, Optional

from pyspark.errors import PySparkException

from hudilite import checkpoints
from hudilite.aggregate import local
from hudilite.aggregate.query import GROUP_KEY, SIGNATURE_KEY, AggregateQuery
from hudilite.aggregate.spark import full_frame, incremental_frame
from hudilite.api import Table
from hudilite.options import INPUT_PERSIST, SMALL_BATCH, SMALL_BATCH_ESTIMATE, SMALL_BATCH_ROWS
from hudilite.table import HoodieTable


def stored_signature(path: str) -> Optional[str]:
    """The query signature the aggregate table at `path` was last built or refreshed for (None: none)."""
    return (checkpoints.newest_metadata(path, SIGNATURE_KEY) or {}).get(SIGNATURE_KEY)


def write_options(detail: str, options: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    """The aggregate table's write options: `options`, and for a detail of few rows (its snapshot's row count
    from commit metadata, at most `hudilite.write.small.batch.max.rows`) the driver-local writer without the
    plan's size estimate, unless `options` turn small batches off or choose the estimate. A detail of few rows
    has few groups; the frames join (state, stored groups, recomputed values) and Spark estimates a join at the
    product of its sides' sizes, which would rule out batches of a few rows, and each Spark write job costs
    seconds against milliseconds for the rows themselves. A wrong guess costs one evaluation limited to
    `max.rows` + 1 rows, then the Spark write."""
    opts = dict(options or {})
    if SMALL_BATCH_ESTIMATE.key in opts or (SMALL_BATCH.key in opts and not SMALL_BATCH.get(opts)):
        return opts
    rows = Table(detail).stats()["rows"]
    if rows is not None and rows <= SMALL_BATCH_ROWS.get(opts):
        opts[SMALL_BATCH.key], opts[SMALL_BATCH_ESTIMATE.key] = "true", "false"
    return opts


def session_time_zone(spark) -> Optional[str]:
    """The session time zone Spark writes timestamp group keys in (None without a session or when the session
    does not answer: a driver-local fold then leaves timestamp keys to Spark)."""
    if spark is None:
        return None
    try:
        return spark.conf.get("spark.sql.session.timeZone")
    except PySparkException:
        return None


def refresh(spark, q: AggregateQuery, detail: str, agg_path: str, options: Optional[Dict[str, str]] = None):
    """Bring the aggregate table at `agg_path` up to date with `detail` (`q`: `parse(sql)`): full when it has
    no checkpoint for `detail` (or another signature), else incremental. `options`: hoodie.* write options.
    Returns the commit (None: nothing new upstream). The dbt materialization runs the same engine."""
    end, detail_id = checkpoints.position(detail)
    start = None
    if HoodieTable.exists(agg_path) and stored_signature(agg_path) == q.signature():
        start, _rebuilt = checkpoints.resume_position(agg_path, detail, detail_id)  # rebuilt detail: recompute in full
    extra = {SIGNATURE_KEY: q.signature(), **checkpoints.entries({detail: (end, detail_id)})}
    opts = {INPUT_PERSIST.key: "true", **(options or {})}
    if start is None:
        df, _ = full_frame(spark, q, detail, end)
        opts = write_options(detail, opts)
        op = "insert_overwrite_table" if HoodieTable.exists(agg_path) else "insert"
        extra.update(local.full_state(q, detail, agg_path, end, session_time_zone(spark)))
        return Table(agg_path, record_key=GROUP_KEY).write(df, op, options=opts, extra_metadata=extra)
    if end is None or start >= end:
        return None
    arrow = local.incremental_arrow(q, detail, agg_path, start, end, session_time_zone(spark))
    if arrow is not None:
        return Table(agg_path, record_key=GROUP_KEY).write(arrow[0], "upsert", options=opts,
                              extra_metadata={**extra, **arrow[2]})
    df, _, release = incremental_frame(spark, q, detail, agg_path, start, end)
    opts = write_options(detail, opts)
    try:
        return Table(agg_path, record_key=GROUP_KEY).write(df, "upsert", options=opts,
                              extra_metadata=extra)
    finally:
        for r in release:
            r.unpersist()


