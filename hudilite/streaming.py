"""Spark Structured Streaming sink: one commit per micro-batch, exactly once, with async instants.

    q = (df.writeStream.foreachBatch(hudilite.streaming.sink("/data/events", record_key="id",
                                                            precombine_field="ts", partition_by=("dt",)))
         .option("checkpointLocation", "/chk/events").start())
    # or
    q = hudilite.streaming.write_stream(df, "/data/events", checkpointLocation="/chk/events",
                                        record_key="id", precombine_field="ts")

Exactly once. Every commit records the streaming query id and the batch id in its extraMetadata
(`hudilite.streaming.query.id`, `hudilite.streaming.batch.id`). Spark replays a batch it did not mark done;
the sink finds the batch id already committed (or prepared) for that query and skips it.

Async instants (default). A batch writes its files, then *prepares* its commit under the table lock (the
conflict check of the commit, then the full metadata in the inflight file, marked prepared) and returns to
Spark; a committer thread completes the commits in instant order while Spark already runs the next batch,
which takes its own instant and writes its files meanwhile. The next batch plans on top of the prepared
one (the planner sees the prepared commit as if it had completed), so upserts of keys written by the
previous batch find them. A prepared commit can no longer fail a conflict check: other writers lose
against its file groups, and failed-write rollback leaves it alone. So once Spark marks a batch done its
commit is guaranteed; if the process dies first, the restarted sink (or `recover(path)`) completes the
prepared commits in instant order before writing anything. A batch that died before it prepared is rolled
back (its files from markers) and replayed by Spark. Nothing is lost, nothing is applied twice.

`async_instants=False` (blocking instants): each batch completes its commit before returning.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import queue
import threading
import weakref

from hudilite.errors import CommitConflictError, HudiliteError, InvalidWriteError
from hudilite.options import STREAMING_CONFLICT_RETRIES
from hudilite.prepared import APP_ID_KEY as QUERY_ID_KEY
from hudilite.prepared import BATCH_ID_KEY, UNSET, Completer, PreparedWriter, batch_of, last_batch_id, recover
from hudilite.storage import storage_for

log = logging.getLogger(__name__)

CONFLICT_RETRIES_KEY = STREAMING_CONFLICT_RETRIES.key


class StreamingSinkError(HudiliteError):
    """The sink's committer failed to complete a prepared commit; the query must be restarted (the prepared
    commits are completed on restart)."""


# ---------------------------------------------------------------------------------------------
class StreamingSink:
    """A `foreachBatch` function: `df.writeStream.foreachBatch(StreamingSink(path, record_key=...))`.

    One object per streaming query (it keeps the query's pending commits). `query_id` identifies the
    stream across restarts; by default the Spark query id (stable for a checkpoint location)."""

    def __init__(self, path, *, record_key, precombine_field=UNSET, partition_by=(), operation="upsert",
                 table_type=UNSET, options=None, query_id: str | None = None,
                 async_instants: bool = True, checkpoint_location: str | None = None):
        if operation not in ("upsert", "insert", "bulk_insert", "delete"):
            raise InvalidWriteError(f"streaming sink operation {operation!r}: expected upsert, insert, bulk_insert "
                                    "or delete (an overwrite per micro-batch is not a stream)")
        self.path = path
        self.options = {str(k): str(v) for k, v in (options or {}).items()}
        self._writer = PreparedWriter(path, record_key=record_key, precombine_field=precombine_field,
                                      partition_by=partition_by, operation=operation, table_type=table_type,
                                      options=self.options)  # validates the layout
        self.query_id = query_id
        self.checkpoint_location = checkpoint_location
        self.async_instants = async_instants
        self.conflict_retries = STREAMING_CONFLICT_RETRIES.get(self.options)
        self._start()

    def _start(self) -> None:
        """The state of one run of the query in this process."""
        self._recovered = False
        self._last_batch: int | None = None
        self._outstanding: list[tuple[object, dict]] = []  # prepared, not completed, in instant order
        self._guard = threading.Condition()
        self._queue: queue.Queue = queue.Queue()
        self._committer: threading.Thread | None = None
        self._error: BaseException | None = None
        self.skipped: list[int] = []  # batch ids recognised as replays (for tests and logs)
        self.committed: list[tuple[int, str]] = []  # (batch id, instant) completed by this object
        _LIVE.add(self)

    # Spark Connect pickles the foreachBatch function and calls it in the server's Python worker, which the
    # server stops with the query: a commit left prepared there would stay invisible until the query's next
    # run recovered it, so a shipped sink completes each batch's commit before returning
    _SETTINGS = ("path", "options", "_writer", "query_id", "checkpoint_location", "async_instants",
                 "conflict_retries")

    def __getstate__(self) -> dict:
        return {k: self.__dict__[k] for k in self._SETTINGS}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state, async_instants=False)
        self._start()

    # ---- the foreachBatch function -------------------------------------------------------------
    def __call__(self, df, batch_id) -> None:
        batch_id = int(batch_id)
        qid = self._resolve_query_id(df)
        self._raise_committer_error()
        if not self._recovered:
            self._last_batch = self._writer.resume(qid)
            self._recovered = True
        if self._last_batch is not None and batch_id <= self._last_batch:
            log.info("batch %s of query %s is already committed on %s: skipped (replay)", batch_id, qid, self.path)
            self.skipped.append(batch_id)
            return
        extra = {QUERY_ID_KEY: qid, BATCH_ID_KEY: str(batch_id)}
        attempt = 0
        while True:
            try:
                result = self._write(df, extra)
                break
            except CommitConflictError:
                attempt += 1
                if attempt > self.conflict_retries:
                    raise
                log.warning("batch %s of %s conflicted with another writer; retrying (%d/%d)", batch_id,
                            self.path, attempt, self.conflict_retries)
                self._wait_outstanding(0)
        self._last_batch = batch_id
        if not self.async_instants:
            self.committed.append((batch_id, str(result)))

    def _write(self, df, extra: dict):
        # the tag: Spark runs one instance of a query at a time, so an unprepared instant carrying it is a
        # dead run's and is rolled back at once (not after its heartbeat tolerance)
        tag = f"stream:{self.query_id}"
        if not self.async_instants:
            return self._writer.write(df, extra, writer_tag=tag)
        self._wait_outstanding(1)  # at most one commit completing while this batch writes
        # the next batch plans on top of this sink's prepared commits, as if completed (they are guaranteed to)
        return self._writer.write(df, extra, writer_tag=tag, on_prepared=self._enqueue, prepared=self._pending)

    def _pending(self) -> list:
        with self._guard:
            return list(self._outstanding)

    # ---- the committer -------------------------------------------------------------------------
    def _enqueue(self, inst, metadata: dict) -> None:
        with self._guard:
            self._outstanding.append((inst, metadata))
        if self._committer is None or not self._committer.is_alive():
            self._committer = threading.Thread(target=self._commit_loop, name="hudilite-stream-committer",
                                               daemon=True)
            self._committer.start()
        self._queue.put(inst)

    def _commit_loop(self) -> None:
        txn = Completer(self.path, self.options)
        while True:
            inst = self._queue.get()
            if inst is None:
                return
            try:
                if self._error is None:
                    self._complete(txn, inst)
            except BaseException as e:  # noqa: BLE001 - surfaced on the next batch / flush
                log.exception("completing prepared streaming commit %s failed", inst.timestamp)
                with self._guard:
                    self._error = e
                    self._guard.notify_all()

    def _complete(self, txn: Completer, inst) -> None:
        txn.complete(inst)
        with self._guard:
            _i, md = self._outstanding.pop(0)
            assert _i.timestamp == inst.timestamp, "commits complete in instant order"
            self.committed.append((batch_of(md), inst.timestamp))
            self._guard.notify_all()

    def _wait_outstanding(self, limit: int) -> None:
        with self._guard:
            while len(self._outstanding) > limit and self._error is None:
                self._guard.wait(0.5)
        self._raise_committer_error()

    def _raise_committer_error(self) -> None:
        if self._error is not None:
            raise StreamingSinkError(
                f"completing a prepared commit on {self.path} failed: {self._error!r}. Restart the query: the "
                "prepared commits are completed on restart (or call hudilite.streaming.recover)") from self._error

    def flush(self) -> None:
        """Wait until every prepared commit of this sink completed (raises the committer's error)."""
        self._wait_outstanding(0)

    def close(self) -> None:
        """Flush and stop the committer thread."""
        try:
            self.flush()
        finally:
            if self._committer is not None and self._committer.is_alive():
                self._queue.put(None)
                self._committer.join()

    # ---- the query id --------------------------------------------------------------------------
    def _resolve_query_id(self, df) -> str:
        if self.query_id:
            return self.query_id
        qid = None
        if self.checkpoint_location:
            meta = os.path.join(_local(self.checkpoint_location), "metadata")
            try:
                qid = json.loads(storage_for(meta).read_bytes(meta)).get("id")
            except (FileNotFoundError, ValueError):
                qid = None
        if not qid:
            try:
                qid = df.sparkSession.sparkContext.getLocalProperty("sql.streaming.queryId")
            except Exception:  # noqa: BLE001 - not available (e.g. Spark Connect)
                qid = None
        if not qid:
            raise InvalidWriteError(
                "the streaming sink cannot tell which query it serves: pass query_id=... (a name that stays the "
                "same across restarts of the query) or use hudilite.streaming.write_stream(checkpointLocation=...)")
        self.query_id = str(qid)
        return self.query_id


_LIVE: "weakref.WeakSet[StreamingSink]" = weakref.WeakSet()
__all__ = ["QUERY_ID_KEY", "BATCH_ID_KEY", "StreamingSink", "StreamingSinkError", "sink", "write_stream", "recover",
           "last_batch_id"]


@atexit.register
def _flush_at_exit() -> None:
    """A script that ends right after its query stops still completes the last prepared commit."""
    for s in list(_LIVE):
        try:
            s.close()
        except Exception:  # noqa: BLE001 - the prepared commit is completed by the next run or recover()
            log.warning("could not complete the prepared commits of %s at exit", s.path, exc_info=True)


def _local(p: str) -> str:
    return p[len("file://"):] if p.startswith("file://") else p


def sink(path, **kwargs) -> StreamingSink:
    """A foreachBatch function writing each micro-batch as one commit (see StreamingSink)."""
    return StreamingSink(path, **kwargs)


def write_stream(df, path, *, checkpointLocation: str, trigger: dict | None = None, query_name: str | None = None,
                 **kwargs):
    """Start a streaming query writing `df` to the table at `path` (one commit per micro-batch). `trigger`:
    keyword arguments of `DataStreamWriter.trigger` (e.g. {"processingTime": "10 seconds"},
    {"availableNow": True}). Returns the StreamingQuery; `query.hudilite_sink` is the sink. Over Spark
    Connect the server's Python worker runs a copy of it, completing each batch's commit before the batch ends:
    this one's `flush`/`close` then have nothing to wait for, and its `committed`/`skipped` stay empty."""
    s = StreamingSink(path, checkpoint_location=checkpointLocation, **kwargs)
    w = df.writeStream.foreachBatch(s).option("checkpointLocation", checkpointLocation)
    if query_name:
        w = w.queryName(query_name)
    if trigger:
        w = w.trigger(**trigger)
    q = w.start()
    q.hudilite_sink = s
    return q
