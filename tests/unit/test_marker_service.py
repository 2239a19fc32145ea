"""The batched marker service (timeline-server-based markers) and its executor client."""

from __future__ import annotations

import glob
import multiprocessing as mp
import os
import pickle
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest

from hudilite.markers import (
    DirectMarkers, MarkerExistsError, MarkerService, MarkerServiceError, ServiceMarkers, delete_markers,
    list_markers, marker_dir, markers_for,
)
from hudilite.markers.service import OPT_BATCH_INTERVAL_MS, OPT_NUM_THREADS

INSTANT = "20240101000000000"


def _marker_lines(base: str, instant: str = INSTANT) -> list[str]:
    out: list[str] = []
    for p in sorted(glob.glob(os.path.join(marker_dir(base, instant), "MARKERS[0-9]*"))):
        with open(p) as f:
            out.extend(line.rstrip("\n") for line in f if line.strip())
    return out


def _threads_now() -> set[str]:
    return {t.name for t in threading.enumerate() if t.name.startswith("hl-marker")}


@pytest.fixture
def base(tmp_path):
    return str(tmp_path / "tbl")


def test_marker_durable_before_answer(base, monkeypatch):
    """Every create returns only after a fsync of a MARKERS file whose content already held its line."""
    real_fsync = os.fsync
    durable: set[str] = set()
    lock = threading.Lock()

    def spy_fsync(fd):
        real_fsync(fd)
        target = os.readlink(f"/proc/self/fd/{fd}")
        if os.path.basename(target).startswith("MARKERS") and not target.endswith(".type"):
            with open(target) as f:
                lines = {ln.rstrip("\n") for ln in f}
            with lock:
                durable.update(lines)

    monkeypatch.setattr(os, "fsync", spy_fsync)
    with MarkerService(base, batch_interval_ms=5, num_threads=2) as svc:
        m = svc.markers(INSTANT)
        for i in range(25):
            line = m.create(f"dt=2024-01-{i % 3 + 1:02d}", f"f{i}_0-1-2_{INSTANT}.parquet", "CREATE")
            with lock:
                assert line in durable, f"{line} answered before it was fsynced"
            assert line in _marker_lines(base)  # and it is on disk right away
        st = svc.stats.snapshot()
    assert st["created"] == 25 and st["writes"] == st["batches"] == 25
    with open(os.path.join(marker_dir(base, INSTANT), "MARKERS.type")) as f:
        assert f.read() == "TIMELINE_SERVER_BASED"
    assert sorted(list_markers(base, INSTANT)) == sorted(
        (f"dt=2024-01-{i % 3 + 1:02d}", f"f{i}_0-1-2_{INSTANT}.parquet", "CREATE") for i in range(25))


def test_duplicates_rejected(base):
    with MarkerService(base, batch_interval_ms=5) as svc:
        m = svc.markers(INSTANT)
        m.create("p", "a.parquet", "CREATE")
        with pytest.raises(MarkerExistsError, match="already exists"):
            m.create("p", "a.parquet", "CREATE")
        assert m.try_create("p", "a.parquet", "CREATE") is False
        assert m.try_create("p", "a.parquet", "MERGE") is True  # another type is another marker
        assert m.try_create("", "top.parquet", "CREATE") is True  # non-partitioned table
        # many concurrent attempts at one marker: exactly one wins
        with ThreadPoolExecutor(16) as ex:
            wins = list(ex.map(lambda _: m.try_create("p", "b.parquet", "APPEND"), range(64)))
        assert wins.count(True) == 1
        # the same marker under another instant is independent
        assert svc.markers("20240101000000001").try_create("p", "a.parquet", "CREATE") is True
        assert svc.stats.snapshot()["duplicates"] == 2 + 63
    assert Counter(_marker_lines(base)) == Counter(
        ["p/a.parquet.marker.CREATE", "p/a.parquet.marker.MERGE", "top.parquet.marker.CREATE",
         "p/b.parquet.marker.APPEND"])
    assert ("", "top.parquet", "CREATE") in list_markers(base, INSTANT)


def test_idempotent_retry_with_same_token(base):
    with MarkerService(base, batch_interval_ms=5) as svc:
        m = svc.markers(INSTANT)
        body = {"instant": INSTANT, "partition": "p", "file": "x.parquet", "type": "CREATE", "token": "t1"}
        assert m._call("POST", "/v1/markers/create", body)["created"] is True
        assert m._call("POST", "/v1/markers/create", body)["created"] is True  # lost answer, retried
        assert m._call("POST", "/v1/markers/create", {**body, "token": "t2"})["created"] is False


def test_lazy_reload_after_restart(base):
    DirectMarkers(base, INSTANT).create("p", "direct.parquet", "CREATE")  # a direct marker of the same instant
    with MarkerService(base, batch_interval_ms=5) as svc:
        m = svc.markers(INSTANT)
        m.create("p", "a.parquet", "CREATE")
        m.create("q", "b.parquet", "MERGE")
    # a service killed mid-write leaves a torn last line (never acknowledged)
    with open(os.path.join(marker_dir(base, INSTANT), "MARKERS0"), "a") as f:
        f.write("p/torn.parq")

    with MarkerService(base, batch_interval_ms=5) as svc2:
        assert svc2.stats.snapshot().get("instants_loaded", 0) == 0  # nothing read before the first request
        m2 = svc2.markers(INSTANT)
        with pytest.raises(MarkerExistsError):
            m2.create("p", "a.parquet", "CREATE")
        st = svc2.stats.snapshot()
        assert st["instants_loaded"] == 1 and st["markers_loaded"] == 3 and st["torn_tails_repaired"] == 1
        assert m2.try_create("p", "direct.parquet", "CREATE") is False
        assert m2.try_create("q", "b.parquet", "MERGE") is False
        m2.create("p", "torn.parquet", "CREATE")
        m2.create("p", "c.parquet", "CREATE")
        assert sorted(m2.list()) == sorted([("p", "direct.parquet", "CREATE"), ("p", "a.parquet", "CREATE"),
                                            ("q", "b.parquet", "MERGE"), ("p", "torn.parquet", "CREATE"),
                                            ("p", "c.parquet", "CREATE")])
        assert svc2.stats.snapshot()["instants_loaded"] == 1  # loaded once
    lines = _marker_lines(base)
    assert "p/torn.parq" not in lines and all(".marker." in ln for ln in lines)
    assert Counter(lines) == Counter(["p/a.parquet.marker.CREATE", "q/b.parquet.marker.MERGE",
                                      "p/torn.parquet.marker.CREATE", "p/c.parquet.marker.CREATE"])
    assert len(list_markers(base, INSTANT)) == 5


def test_concurrent_creates_exactly_once(base):
    n_threads, per_thread, workers = 64, 50, 4
    before = _threads_now()
    with MarkerService(base, batch_interval_ms=5, num_threads=workers) as svc:
        url = svc.url

        def run(t: int) -> list[bool]:
            m = ServiceMarkers(url, base, INSTANT)
            out = []
            for i in range(per_thread):
                out.append(m.try_create(f"dt={i % 7}", f"fg{t}-{i}_0-1-{t}_{INSTANT}.parquet", "CREATE"))
                if i % 10 == 0:  # a duplicate attempt now and then
                    out.append(not m.try_create(f"dt={i % 7}", f"fg{t}-{i}_0-1-{t}_{INSTANT}.parquet", "CREATE"))
            return out

        with ThreadPoolExecutor(n_threads) as ex:
            results = [r for rs in ex.map(run, range(n_threads)) for r in rs]
        assert all(results)
        listed = svc.markers(INSTANT).list()
        st = svc.stats.snapshot()
    total = n_threads * per_thread
    lines = _marker_lines(base)
    assert len(lines) == total and len(set(lines)) == total
    assert len(list_markers(base, INSTANT)) == total
    assert len(listed) == total
    files = glob.glob(os.path.join(marker_dir(base, INSTANT), "MARKERS[0-9]*"))
    assert 1 <= len(files) <= workers
    assert st["batches"] < total / 4, st  # batching happened
    assert st["writes"] <= st["batches"]
    assert _threads_now() <= before  # service threads ended on stop
    deadline = time.monotonic() + 5  # and the per-connection HTTP threads (keep-alive sockets were shut down)
    while any("process_request_thread" in t.name for t in threading.enumerate()) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not any("process_request_thread" in t.name for t in threading.enumerate())


def _proc_create(args):
    markers, proc, n = args
    made = 0
    for i in range(n):
        markers.create(f"dt={i % 5}", f"p{proc}-{i}.parquet", "CREATE")
        made += 1
    dup = markers.try_create("dt=0", "shared.parquet", "CREATE")  # every process races for one marker
    return os.getpid(), made, dup


def test_requests_from_other_processes(base):
    with MarkerService(base, batch_interval_ms=5) as svc:
        m = svc.markers(INSTANT)
        assert pickle.loads(pickle.dumps(m)).url == svc.url
        ctx = mp.get_context("spawn")
        with ctx.Pool(4) as pool:
            res = pool.map(_proc_create, [(m, p, 100) for p in range(4)])
    assert len({pid for pid, _, _ in res} | {os.getpid()}) == 5
    assert sum(made for _, made, _ in res) == 400
    assert [dup for _, _, dup in res].count(True) == 1
    assert len(list_markers(base, INSTANT)) == 401
    assert len(set(_marker_lines(base))) == len(_marker_lines(base)) == 401


def test_delete_and_factory_and_errors(base):
    assert isinstance(markers_for(base, INSTANT, {}), DirectMarkers)
    assert isinstance(markers_for(base, INSTANT, {"hoodie.write.markers.type": "TIMELINE_SERVER_BASED"}),
                      DirectMarkers)  # no URL: fall back to direct markers
    svc = MarkerService.from_options(base, {OPT_BATCH_INTERVAL_MS: "2", OPT_NUM_THREADS: "2"})
    assert svc.batch_interval == 0.002 and svc.num_threads == 2
    with svc:
        m = markers_for(base, INSTANT, {"hoodie.write.markers.type": "timeline_server_based",
                                        "hoodie.write.markers.service.url": svc.url})
        assert isinstance(m, ServiceMarkers)
        m.init()
        assert os.path.exists(os.path.join(marker_dir(base, INSTANT), "MARKERS.type"))
        m.create("p", "a.parquet", "CREATE")
        m.delete()
        assert not os.path.exists(marker_dir(base, INSTANT))
        m.create("p", "a.parquet", "CREATE")  # a fresh set after delete
        assert m.list() == [("p", "a.parquet", "CREATE")]
        with pytest.raises(MarkerServiceError, match="serves"):
            ServiceMarkers(svc.url, base + "_other", INSTANT).create("p", "a.parquet", "CREATE")
        with pytest.raises(MarkerServiceError, match="400"):
            m.create("p", "a/b.parquet", "CREATE")
        with pytest.raises(MarkerServiceError, match="400"):
            m.create("p", "a.parquet", "BOGUS")
        url = svc.url
    # the service is gone: the client retries, then fails clearly
    with pytest.raises(MarkerServiceError, match="unreachable"):
        ServiceMarkers(url, base, INSTANT, retries=2).create("p", "z.parquet", "CREATE")
    delete_markers(base, INSTANT)


def test_direct_type_file_taken_over_when_empty(base):
    DirectMarkers(base, INSTANT).init()  # the driver prepared the instant for direct markers
    with MarkerService(base, batch_interval_ms=2) as svc:
        svc.markers(INSTANT).create("p", "a.parquet", "CREATE")
    with open(os.path.join(marker_dir(base, INSTANT), "MARKERS.type")) as f:
        assert f.read() == "TIMELINE_SERVER_BASED"
