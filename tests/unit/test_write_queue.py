"""The bounded producer/consumer queue of the write path."""

from __future__ import annotations

import threading
import time
import traceback

import numpy as np
import pyarrow as pa
import pytest

from hudilite.writer.queue import BoundedExecutor, BoundedQueue, run_bounded


class Boom(RuntimeError):
    pass


def _queue_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("hl-write-queue")]


@pytest.fixture(autouse=True)
def no_thread_leaks():
    before = set(_queue_threads())
    yield
    deadline = time.monotonic() + 2
    while set(_queue_threads()) - before and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not (set(_queue_threads()) - before), "write-queue threads leaked"


def _batch(i: int, rows: int = 1000) -> pa.RecordBatch:
    return pa.record_batch({"id": pa.array(np.arange(i * rows, (i + 1) * rows, dtype=np.int64)),
                            "v": pa.array(np.full(rows, i, dtype=np.float64))})


def test_single_producer_keeps_order():
    out: list[int] = []
    stats = run_bounded([iter(range(5000))], out.append, memory_limit_bytes=1000, size_fn=lambda _: 10)
    assert out == list(range(5000))
    assert stats["capacity"] == 100 and stats["max_queued_items"] <= 100


def test_arrow_batches_in_order_through_iterator_interface():
    got = []
    with BoundedExecutor([(_batch(i) for i in range(200))], memory_limit_bytes=5 * _batch(0).nbytes) as items:
        for b in items:
            got.append(b.column(0)[0].as_py())
    assert got == [i * 1000 for i in range(200)]
    assert items.queue.capacity == 5


def test_several_producers_deliver_everything():
    def gen(p):
        for i in range(3000):
            yield (p, i)

    producers = [gen(p) for p in range(6)]
    out: list[tuple[int, int]] = []
    run_bounded(producers, out.append, memory_limit_bytes=64, size_fn=lambda _: 4, sample_every=4)
    assert sorted(out) == [(p, i) for p in range(6) for i in range(3000)]
    for p in range(6):  # each producer's own items stay in order
        assert [i for q, i in out if q == p] == list(range(3000))


def test_memory_bounded():
    """Queued bytes never exceed the limit plus one item; bytes alive outside producer/consumer hands never
    exceed the limit plus the item each of them holds."""
    limit = 1 << 20
    item = 100_000
    lock = threading.Lock()
    state = {"outstanding": 0, "max": 0}

    def produce():
        rng = np.random.default_rng(1)
        for _ in range(400):
            a = np.ones(item + int(rng.integers(-2000, 2000)), dtype=np.uint8)  # ~100 kB, varying a little
            with lock:
                state["outstanding"] += a.nbytes
                state["max"] = max(state["max"], state["outstanding"])
            yield a

    def consume(a):
        time.sleep(0.0002)  # slower than the producer: the queue fills up
        with lock:
            state["outstanding"] -= a.nbytes

    for sample_every in (1, 8):
        state.update(outstanding=0, max=0)
        ex = BoundedExecutor([produce()], memory_limit_bytes=limit, sample_every=sample_every)
        ex.run(consume)
        st = ex.stats
        assert state["outstanding"] == 0
        assert st["max_queued_items"] == st["capacity"] >= 9  # it did fill up
        if sample_every == 1:  # every size measured: the queue's own accounting is exact
            assert st["max_queued_bytes_est"] <= limit + item + 2000, st
        # queued + the item the producer holds while blocked + the item being consumed
        assert state["max"] <= limit + 2 * (item + 2000), state
        assert state["max"] >= limit - 2 * item  # and the bound was reached


def test_capacity_adapts_to_item_size():
    small, big = 1_000, 100_000
    seen: list[tuple[int, int]] = []  # (item size, items queued when it was taken)
    q_ref: list[BoundedQueue] = []
    small_done = threading.Event()

    def produce():
        for i in range(400):
            if i == 200:
                small_done.wait(5)  # let the consumer drain the small items first
            yield np.zeros(small if i < 200 else big, dtype=np.uint8)

    def consume(a):
        q = q_ref[0]
        seen.append((a.nbytes, len(q._items)))
        if len(seen) == 200:
            small_done.set()
        if a.nbytes == big:
            time.sleep(0.0005)  # a slow writer: the queue fills up to its capacity

    ex = BoundedExecutor([produce()], memory_limit_bytes=1_000_000, sample_every=4, window=4)
    q_ref.append(ex.queue)
    ex.run(consume)
    hist = ex.queue.capacity_history
    assert hist[0] == 1000 and hist[-1] == 10  # small items: many allowed; big items: few
    assert all(a > b for a, b in zip(hist, hist[1:])), hist  # shrinks as big samples enter the window
    assert ex.queue.capacity == 10 and ex.queue.samples_taken == 100
    late_big = [n for size, n in seen[300:] if size == big]
    assert late_big and max(late_big) <= 10  # once adapted, never more than 10 big items queued
    assert max(n for _size, n in seen[300:]) >= 5  # ... and the slow writer did let it fill

    # an item bigger than the whole limit still flows, one at a time
    out = []
    st = run_bounded([(np.zeros(50_000, dtype=np.uint8) for _ in range(5))], out.append, memory_limit_bytes=10_000)
    assert len(out) == 5 and st["capacity"] == 1 and st["max_queued_items"] == 1


def _failing_producer(n_ok: int):
    for i in range(n_ok):
        yield i
    raise Boom("producer broke")


def test_producer_failure_propagates_promptly_and_stops_other_producers():
    cleaned = threading.Event()

    def endless():  # would block forever on the full queue if nobody woke it
        try:
            i = 0
            while True:
                yield i
                i += 1
        finally:
            cleaned.set()

    def slow_consume(_):
        time.sleep(0.001)

    t0 = time.monotonic()
    with pytest.raises(Boom, match="producer broke") as ei:
        run_bounded([endless(), _failing_producer(50)], slow_consume, memory_limit_bytes=40, size_fn=lambda _: 10)
    assert time.monotonic() - t0 < 2.0
    assert cleaned.is_set()  # the other producer's generator was closed
    tb = "".join(traceback.format_exception(ei.value))
    assert "_failing_producer" in tb  # the original traceback is kept
    assert ei.type is Boom


def test_producer_failure_wakes_blocked_consumer():
    gate = threading.Event()

    def stalled_then_fail():
        yield 1
        gate.wait(5)
        raise Boom("late failure")

    got = []
    t0 = time.monotonic()
    with pytest.raises(Boom):
        with BoundedExecutor([stalled_then_fail()], memory_limit_bytes=100, size_fn=lambda _: 1) as items:
            for x in items:
                got.append(x)
                threading.Timer(0.05, gate.set).start()  # consumer now blocks in get(); fail while it waits
    assert got == [1] and time.monotonic() - t0 < 2.0


def test_consumer_failure_stops_blocked_producers():
    closed = []

    def gen(p):
        try:
            for i in range(10**9):
                yield (p, i)
        finally:
            closed.append(p)

    def consume(item):
        if item[1] == 20:
            raise Boom("consumer broke")

    t0 = time.monotonic()
    with pytest.raises(Boom, match="consumer broke") as ei:
        run_bounded([gen(p) for p in range(4)], consume, memory_limit_bytes=16, size_fn=lambda _: 1)
    assert time.monotonic() - t0 < 2.0
    assert sorted(closed) == [0, 1, 2, 3]
    assert "consume" in "".join(traceback.format_tb(ei.value.__traceback__))


def test_consumer_failure_in_with_block_and_early_break():
    with pytest.raises(KeyError):
        with BoundedExecutor([iter(range(10**9))], memory_limit_bytes=8, size_fn=lambda _: 1) as items:
            for x in items:
                if x == 3:
                    raise KeyError("k")
    # leaving early without an error stops the producers too
    with BoundedExecutor([iter(range(10**9))], memory_limit_bytes=8, size_fn=lambda _: 1) as items:
        for x in items:
            if x == 3:
                break


def test_failure_in_iter_of_source_and_empty_producers():
    class BadIterable:
        def __iter__(self):
            raise Boom("cannot open source")

    with pytest.raises(Boom, match="cannot open"):
        run_bounded([BadIterable(), iter(range(10))], lambda _: None, memory_limit_bytes=100)
    out = []
    run_bounded([iter(()), iter(()), iter([7])], out.append, memory_limit_bytes=100)
    assert out == [7]
    with pytest.raises(ValueError):
        BoundedQueue(0)
