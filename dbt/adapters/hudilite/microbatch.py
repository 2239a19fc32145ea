"""`incremental_strategy='microbatch'`: dbt-core drives the batches (event_time, batch_size, begin, lookback,
--event-time-start/-end, concurrent_batches, dbt retry); each batch arrives here with its window
[start, end) and becomes ONE hudilite upsert commit that replaces the window:

* stored rows whose `event_time` lies in the window are deleted, the batch's rows are written (a table
  without unique_key: every batch row under a new row id; with unique_key: the batch's rows are upserted with
  precombine, stored keys of the window that the batch lacks are deleted);
* the commit records the window and a fingerprint of the batch's rows (`hudilite.microbatch.*`
  extraMetadata). A batch whose window was last committed with the same rows, and nothing but other windows
  of the model committed since, commits nothing (a `dbt retry` of a batch whose commit succeeded but whose
  run failed afterwards commits once);
* batches run concurrently (`concurrent_batches`) under the core's optimistic concurrency: batches that touch
  different file groups (different partitions, e.g. a table partitioned by the event-time grain) never
  conflict; a conflicting batch (same file groups, e.g. an unpartitioned table) is retried on the new
  snapshot — the conflict rolled it back, so it still commits once.
"""

from __future__ import annotations

import random
import time
from typing import Dict, List, Optional, Tuple

from dbt.adapters.events.logging import AdapterLogger
from dbt_common.exceptions import DbtRuntimeError
from pyspark.sql import functions as F

import hudilite
from dbt.adapters.hudilite.model_config import IS_DELETED, ROW_ID, ModelSpec
from dbt.adapters.hudilite.response import HudiliteAdapterResponse, response
from dbt.adapters.hudilite.strategies import with_row_id
from hudilite.checkpoints import newest

logger = AdapterLogger("Hudilite")

WINDOW_KEY = "hudilite.microbatch.window"  # "<model>|<start>|<end>" of the batch a commit wrote
INPUT_KEY = "hudilite.microbatch.input"  # "<rows>:<hash sum>" of the batch's rows
CONFLICT_ATTEMPTS = 8


def window_id(schema: str, identifier: str, batch: Tuple[str, str]) -> str:
    return f"{schema}.{identifier}|{batch[0]}|{batch[1]}".lower()


def window_filter(event_time: str, batch: Tuple[Optional[str], Optional[str]]):
    """The window as dbt filters an upstream ref() (BaseRelation._render_event_time_filtered): the same
    string literals, so a stored row is in the window exactly when dbt would have selected it upstream. A bound
    may be None (open), as under `--sample`."""
    col = f"`{event_time}`"
    start, end = batch
    return F.expr(" and ".join([*([f"{col} >= '{start}'"] if start else []), *([f"{col} < '{end}'"] if end else [])])
                  or "true")


def fingerprint(df) -> str:
    """Row count and an order-independent sum of row hashes: equal batches give equal fingerprints."""
    cols = [F.col(f"`{c}`") for c in df.columns]
    row = df.select(F.count(F.lit(1)).alias("n"),
                    F.sum(F.xxhash64(*cols).cast("decimal(38,0)")).alias("h")).collect()[0]
    return f"{row['n']}:{row['h'] or 0}"


class MicrobatchMixin:
    """The environment's microbatch batches (HudiliteEnvironment)."""

    def _microbatch_check(self, df, spec: ModelSpec, schema: str, identifier: str) -> None:
        if not spec.event_time or spec.batch is None:
            raise DbtRuntimeError(
                f"incremental_strategy 'microbatch' of {schema}.{identifier} needs `event_time` and a batch "
                "from dbt-core (a microbatch model runs through dbt run / build, which sets the batch window)")
        if spec.event_time.lower() not in {c.lower() for c in df.columns}:
            raise DbtRuntimeError(f"event_time column {spec.event_time!r} is not a column of the model "
                                  f"{schema}.{identifier} (columns: {', '.join(df.columns)})")

    def _microbatch(self, schema, identifier, path, df, spec: ModelSpec, record_key: List[str], keyed: bool,
                    options, visible: List[str], props, extra: Optional[Dict[str, str]] = None,
                    force: bool = False) -> HudiliteAdapterResponse:
        """`extra`: more commit metadata (a checkpoint); `force`: commit even when the window holds these rows
        (the commit carries that metadata)."""
        batch = spec.batch
        assert batch is not None and spec.event_time
        wid = window_id(schema, identifier, batch)
        df = df.persist()  # evaluated once: the fingerprint and the write see the same rows
        try:
            fp = fingerprint(df)
            done = None if force else self._window_committed(path, wid, fp)
            if done is not None:
                logger.info(f"hudilite: {schema}.{identifier} batch {batch[0]} .. {batch[1]} was committed with "
                            f"the same rows by {done}: nothing to commit")
                self._publish_latest(schema, identifier, path, visible, props)
                return HudiliteAdapterResponse(
                    _message=f"MICROBATCH up to date (window committed by {done})", code="UPSERT",
                    rows_affected=0, rows_inserted=0, rows_updated=0, rows_deleted=0, commit_time=done,
                    operation="none", strategy="microbatch", table_path=path, files_written=0,
                    replaced_file_groups=0)
            extra = {**(extra or {}), WINDOW_KEY: wid, INPUT_KEY: fp}
            for attempt in range(1, CONFLICT_ATTEMPTS + 1):
                rows = self._replace_window(df, path, spec, record_key, keyed)
                try:
                    result = self._write(rows, path, record_key, spec, "upsert", options, schema, identifier,
                                         precombine=spec.precombine_field or hudilite.Table.open(path)
                                         .layout().precombine_field,
                                         extra_metadata=extra, raise_conflicts=attempt < CONFLICT_ATTEMPTS)
                    break
                except hudilite.CommitConflictError as e:  # rolled back: redo it on the new snapshot
                    logger.info(f"hudilite: {schema}.{identifier} batch {batch[0]}: {e}; retrying "
                                f"({attempt}/{CONFLICT_ATTEMPTS})")
                    time.sleep(random.uniform(0.05, 0.3) * attempt)
        finally:
            df.unpersist()
        self._publish_latest(schema, identifier, path, visible, props)
        return response("upsert", result, path, strategy="microbatch")

    def _replace_window(self, df, path, spec: ModelSpec, record_key: List[str], keyed: bool):
        """The upsert rows that replace the window: deletes of the stored rows in it (all of them on a row-id
        table; those whose key the batch lacks on a keyed table) and the batch's rows."""
        assert spec.batch is not None and spec.event_time
        target = self._target_frame(path)
        tcols = {c.lower(): c for c in target.columns}
        stored = target.filter(window_filter(tcols[spec.event_time.lower()], spec.batch))
        data = [c for c in df.columns if c != IS_DELETED]
        if keyed:
            on = [stored[f"`{tcols[k.lower()]}`"] == df[f"`{k}`"] for k in record_key]
            stored = stored.join(df.select(*[F.col(f"`{k}`") for k in record_key]), on=on, how="left_anti")
        gone = stored.select(
            *([F.col(f"`{ROW_ID}`")] if not keyed else []),
            *[F.col(f"`{tcols[c.lower()]}`").cast(df.schema[c].dataType).alias(c) if c.lower() in tcols
              else F.lit(None).cast(df.schema[c].dataType).alias(c) for c in data],
            F.lit(True).alias(IS_DELETED))
        new = df if IS_DELETED in df.columns else df.withColumn(IS_DELETED, F.lit(False))
        if not keyed:
            new = with_row_id(new)
        return gone.unionByName(new.select(*gone.columns))

    def _window_committed(self, path: str, wid: str, fp: str) -> Optional[str]:
        """The instant that committed this window with these rows, if the table still holds exactly that: no
        commit but the model's other windows came after it. None otherwise (the window is replaced)."""
        timeline = hudilite.Table.open(path).timeline
        hit = newest(timeline, WINDOW_KEY, wid)
        if hit is None or hit[1].get(INPUT_KEY) != fp:
            return None
        inst, _ = hit
        model = wid.split("|", 1)[0]
        done = inst.completion or inst.timestamp
        for later in timeline.completed():  # in completion order: a commit started earlier may complete later
            if later == inst or (later.completion or later.timestamp) <= done:
                continue
            other = (timeline.read_metadata(later).get("extraMetadata") or {}).get(WINDOW_KEY) or ""
            if not other.startswith(model + "|") or other == wid:
                return None
        return inst.timestamp

    def _publish_latest(self, schema, identifier, path, visible, props) -> None:
        """Batches of one model commit concurrently; the catalog entry is re-pointed under the model's lock,
        always at the latest committed snapshot, so a batch that publishes last never goes back in time."""
        with self._table_lock(schema, identifier):
            self.publish(schema, identifier, path, visible, props, self.describe(schema, identifier))


def window_metadata(spec: ModelSpec, schema: str, identifier: str) -> dict:
    """extraMetadata of a microbatch model's first (full) build: the window it wrote."""
    if spec.strategy != "microbatch" or spec.batch is None:
        return {}
    return {WINDOW_KEY: window_id(schema, identifier, spec.batch)}

