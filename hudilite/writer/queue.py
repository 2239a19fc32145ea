"""A bounded, memory-limited producer/consumer queue for the write path.

Between reading records (or Arrow batches) and writing a file: one or several producer threads, each
draining an iterator into the queue, and one consumer in the calling thread. The queue holds at most
`capacity` items, with `capacity = max(1, memory_limit_bytes // avg_item_size)`; the average is taken over a
window of recent samples, one every `sample_every` items (size from `.nbytes` when the item has it - Arrow
tables/batches, numpy arrays - else from `size_fn`), so big items mean fewer queued items. Producers block
while the queue is full.

A failure anywhere stops every side promptly: producers blocked in `put` and a consumer blocked in `get`
wake up, producer threads end (their generators are closed), and the caller gets the ORIGINAL exception
object (same type; its traceback still holds the frames where it was raised).

    run_bounded([reader_a, reader_b], write_batch, memory_limit_bytes=256 << 20)

    with BoundedExecutor([reader], memory_limit_bytes=64 << 20) as items:
        for batch in items:
            writer.write_table(batch)
"""

from __future__ import annotations

import sys
import threading
from collections import deque
from typing import Any, Callable, Generic, Iterable, Iterator, Sequence, TypeVar

T = TypeVar("T")

DEFAULT_SAMPLE_EVERY = 8
DEFAULT_WINDOW = 16
DEFAULT_MAX_CAPACITY = 1 << 20


class _Aborted(Exception):
    """Internal: the queue was aborted; a producer blocked in put stops quietly."""


class _Cancelled(Exception):
    """Internal: the consumer left early without an error."""


def default_size(item: Any, size_fn: Callable[[Any], int] | None = None) -> int:
    nb = getattr(item, "nbytes", None)
    if nb is not None and not callable(nb):
        return int(nb)
    if size_fn is not None:
        return int(size_fn(item))
    return sys.getsizeof(item)


class BoundedQueue(Generic[T]):
    """The queue itself: thread-safe, count-bounded with a capacity derived from sampled item sizes."""

    def __init__(self, memory_limit_bytes: int, *, size_fn: Callable[[Any], int] | None = None,
                 sample_every: int = DEFAULT_SAMPLE_EVERY, window: int = DEFAULT_WINDOW,
                 max_capacity: int = DEFAULT_MAX_CAPACITY, producers: int = 1):
        if memory_limit_bytes <= 0:
            raise ValueError("memory_limit_bytes must be > 0")
        if sample_every < 1 or window < 1 or max_capacity < 1:
            raise ValueError("sample_every, window and max_capacity must be >= 1")
        self.memory_limit_bytes = int(memory_limit_bytes)
        self.size_fn = size_fn
        self.sample_every = sample_every
        self.max_capacity = max_capacity
        self._lock = threading.Lock()
        self._not_full = threading.Condition(self._lock)
        self._not_empty = threading.Condition(self._lock)
        self._items: deque[tuple[T, int]] = deque()
        self._samples: deque[int] = deque(maxlen=window)
        self._sample_sum = 0
        self._seen = 0
        self._open_producers = producers
        self._error: BaseException | None = None
        self._aborted = False
        self.capacity = 1  # until the first (always sampled) item is measured
        # statistics
        self.queued_bytes = 0  # estimate: measured size for sampled items, the running average for others
        self.max_queued_items = 0
        self.max_queued_bytes = 0
        self.samples_taken = 0
        self.capacity_history: list[int] = []

    # ------------------------------------------------------------------ sizes
    @property
    def avg_item_size(self) -> float:
        return self._sample_sum / len(self._samples) if self._samples else 0.0

    def _record_sample(self, size: int) -> None:  # lock held
        if len(self._samples) == self._samples.maxlen:
            self._sample_sum -= self._samples[0]
        self._samples.append(size)
        self._sample_sum += size
        self.samples_taken += 1
        avg = max(1.0, self._sample_sum / len(self._samples))
        cap = max(1, min(self.max_capacity, int(self.memory_limit_bytes // avg)))
        if cap != self.capacity:
            if cap > self.capacity:
                self._not_full.notify_all()
            self.capacity = cap
            self.capacity_history.append(cap)
        elif not self.capacity_history:
            self.capacity_history.append(cap)

    # ------------------------------------------------------------------ producer side
    def put(self, item: T) -> None:
        """Block while full; raises `_Aborted` (internal) if the queue was aborted."""
        with self._lock:
            if self._aborted:
                raise _Aborted()
            idx = self._seen
            self._seen += 1
        size = default_size(item, self.size_fn) if idx % self.sample_every == 0 else -1
        with self._lock:
            if size >= 0:
                self._record_sample(size)
            else:
                size = int(self.avg_item_size)
            while not self._aborted and len(self._items) >= self.capacity:
                self._not_full.wait()
            if self._aborted:
                raise _Aborted()
            self._items.append((item, size))
            self.queued_bytes += size
            self.max_queued_items = max(self.max_queued_items, len(self._items))
            self.max_queued_bytes = max(self.max_queued_bytes, self.queued_bytes)
            self._not_empty.notify()

    def producer_done(self) -> None:
        with self._lock:
            self._open_producers -= 1
            if self._open_producers <= 0:
                self._not_empty.notify_all()

    # ------------------------------------------------------------------ consumer side
    _END = object()

    def get(self) -> T:
        """Next item; `BoundedQueue._END` once every producer finished and the queue is drained. Raises the
        original error as soon as any side failed (queued items are dropped)."""
        with self._lock:
            while not self._items and not self._aborted and self._open_producers > 0:
                self._not_empty.wait()
            if self._aborted:
                assert self._error is not None
                raise self._error
            if not self._items:
                return self._END  # type: ignore[return-value]
            item, size = self._items.popleft()
            self.queued_bytes -= size
            self._not_full.notify()
            return item

    # ------------------------------------------------------------------ failure
    def abort(self, error: BaseException) -> bool:
        """Stop every side; the first error wins. Returns True if this call set the error."""
        with self._lock:
            first = self._error is None
            if first:
                self._error = error
            self._aborted = True
            self._items.clear()
            self.queued_bytes = 0
            self._not_full.notify_all()
            self._not_empty.notify_all()
            return first

    @property
    def error(self) -> BaseException | None:
        return self._error


class BoundedExecutor(Generic[T]):
    """Runs producer threads over `producers` (iterables) into a `BoundedQueue`; the consumer is the caller,
    either `run(consume_fn)` or iterating the executor inside a `with` block."""

    def __init__(self, producers: Sequence[Iterable[T]], memory_limit_bytes: int, *,
                 size_fn: Callable[[Any], int] | None = None, sample_every: int = DEFAULT_SAMPLE_EVERY,
                 window: int = DEFAULT_WINDOW, max_capacity: int = DEFAULT_MAX_CAPACITY,
                 name: str = "hl-write-queue"):
        self.producers = list(producers)
        if not self.producers:
            raise ValueError("at least one producer is needed")
        self.queue: BoundedQueue[T] = BoundedQueue(memory_limit_bytes, size_fn=size_fn, sample_every=sample_every,
                                                   window=window, max_capacity=max_capacity,
                                                   producers=len(self.producers))
        self.name = name
        self._threads: list[threading.Thread] = []
        self._started = False
        self._closed = False

    # ------------------------------------------------------------------ producers
    def _produce(self, i: int, source: Iterable[T]) -> None:
        it: Iterator[T] | None = None
        try:
            it = iter(source)
            for item in it:
                self.queue.put(item)
        except _Aborted:
            pass
        except BaseException as e:  # noqa: BLE001 - handed to the consumer side
            if hasattr(e, "add_note"):
                e.add_note(f"(raised in write-queue producer thread {self.name}-producer-{i})")
            self.queue.abort(e)
        finally:
            close = getattr(it, "close", None)
            if close is not None:
                try:
                    close()  # run the generator's finally blocks in its own thread
                except Exception:  # noqa: BLE001
                    pass
            self.queue.producer_done()

    def start(self) -> "BoundedExecutor[T]":
        if self._started:
            return self
        self._started = True
        for i, src in enumerate(self.producers):
            t = threading.Thread(target=self._produce, args=(i, src), name=f"{self.name}-producer-{i}", daemon=True)
            self._threads.append(t)
            t.start()
        return self

    def _join(self) -> None:
        for t in self._threads:
            t.join()

    def close(self, error: BaseException | None = None) -> None:
        """Stop the producers (if still running) and wait for their threads."""
        if self._closed:
            return
        self._closed = True
        if any(t.is_alive() for t in self._threads):
            self.queue.abort(error if error is not None else _Cancelled())
        self._join()

    # ------------------------------------------------------------------ consumer
    def __iter__(self) -> Iterator[T]:
        self.start()
        q = self.queue
        try:
            while True:
                item = q.get()  # raises the original error of a failed producer
                if item is BoundedQueue._END:
                    return
                yield item
        except GeneratorExit:
            self.close()
            raise
        except BaseException as e:
            self.close(e)
            raise
        else:
            self.close()

    def run(self, consume: Callable[[T], Any]) -> None:
        """Consume every item in the calling thread; re-raise the first failure of any side."""
        self.start()
        try:
            for item in self:
                consume(item)
        except BaseException as e:
            self.queue.abort(e)
            self.close(e)
            raise
        self.close()

    def __enter__(self) -> "BoundedExecutor[T]":
        return self.start()

    def __exit__(self, exc_type, exc, tb) -> bool:
        self.close(exc)
        return False

    # ------------------------------------------------------------------ stats
    @property
    def stats(self) -> dict:
        q = self.queue
        return {"capacity": q.capacity, "avg_item_size": q.avg_item_size, "max_queued_items": q.max_queued_items,
                "max_queued_bytes_est": q.max_queued_bytes, "samples_taken": q.samples_taken,
                "memory_limit_bytes": q.memory_limit_bytes}


def run_bounded(producers: Sequence[Iterable[T]], consume: Callable[[T], Any], memory_limit_bytes: int,
                **kw: Any) -> dict:
    """Run `producers` (iterables, one thread each) into `consume` (called in this thread) through a bounded
    queue of at most ~`memory_limit_bytes`. Returns the queue statistics."""
    ex: BoundedExecutor[T] = BoundedExecutor(producers, memory_limit_bytes, **kw)
    ex.run(consume)
    return ex.stats
