"""Direct markers vs the batched marker service, for a write of N data files.

    python -m bench.markers                      # N=5000, 4 processes x 8 threads of "executor tasks"
    python -m bench.markers --n 20000 --procs 8 --threads 16 --intervals 20,5

Each executor task creates one marker per data file it would write, as `hudilite.writer.handle` does.
Direct markers: every create is mkdir(partition) + open(O_CREAT) + fsync + close, in the executor.
Service: every create is one HTTP request; the driver-side service appends batches to MARKERS<i> files.
File-system operations are counted by wrapping os.open/os.mkdir/os.fsync/os.write in the process that does
them (executors for direct markers, the driver for the service); files created are counted on disk
afterwards. Latency is per marker, measured in the executor around `create()`.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import resource
import shutil
import statistics
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor

INSTANT = "20240101000000000"


class FsCounter:
    """Counts os-level file operations in this process (thread-safe enough: counters under the GIL)."""

    def __init__(self, thread_prefix: str | None = None):
        self.c = {"open_creat": 0, "mkdir": 0, "fsync": 0, "write": 0}
        self.thread_prefix = thread_prefix  # count only calls made by these threads (the service's)
        self._orig = {}

    def install(self):
        import os as _os

        def wrap(name, key, pred=None):
            orig = getattr(_os, name)
            self._orig[name] = orig

            def f(*a, **kw):
                if self.thread_prefix and not threading.current_thread().name.startswith(self.thread_prefix):
                    return orig(*a, **kw)
                if pred is None or pred(*a, **kw):
                    self.c[key] += 1
                return orig(*a, **kw)
            setattr(_os, name, f)

        wrap("open", "open_creat", lambda path, flags, *a, **kw: bool(flags & os.O_CREAT))
        wrap("mkdir", "mkdir")
        wrap("fsync", "fsync")
        wrap("write", "write")
        return self

    def uninstall(self):
        for k, v in self._orig.items():
            setattr(os, k, v)
        self._orig = {}


def _tasks(n: int, parts: int) -> list[tuple[str, str]]:
    return [(f"dt=2024-01-{i % parts + 1:02d}", f"{i:08d}-fg_0-{i}-{i}_{INSTANT}.parquet") for i in range(n)]


def _executor(mode: str, url: str | None, base: str, tasks: list[tuple[str, str]], threads: int):
    """One executor process: `threads` concurrent tasks creating markers; returns latencies and fs counts."""
    from hudilite.markers import CREATE, DirectMarkers, ServiceMarkers

    counter = FsCounter().install()
    markers = DirectMarkers(base, INSTANT) if mode == "direct" else ServiceMarkers(url, base, INSTANT)
    lat: list[float] = []

    def run(chunk):
        out = []
        for part, name in chunk:
            t = time.perf_counter()
            markers.create(part, name, CREATE)
            out.append(time.perf_counter() - t)
        return out

    chunks = [tasks[i::threads] for i in range(threads)]
    cpu0 = time.process_time()
    t0 = time.time()
    with ThreadPoolExecutor(threads) as ex:
        for r in ex.map(run, chunks):
            lat.extend(r)
    t1 = time.time()
    counter.uninstall()
    return lat, counter.c, t0, t1, time.process_time() - cpu0


def _files_under(root: str) -> tuple[int, int]:
    files = dirs = 0
    for _dp, ds, fs in os.walk(root):
        files += len(fs)
        dirs += len(ds)
    return files, dirs


def run_mode(mode: str, n: int, procs: int, threads: int, parts: int, interval_ms: float, workers: int,
             work: str) -> dict:
    from hudilite.markers import DirectMarkers, MarkerService, list_markers, marker_dir

    base = os.path.join(work, f"tbl_{mode}_{interval_ms}")
    shutil.rmtree(base, ignore_errors=True)
    tasks = _tasks(n, parts)
    ctx = mp.get_context("spawn")
    driver = FsCounter(thread_prefix="hl-marker")
    svc = None
    if mode == "direct":
        DirectMarkers(base, INSTANT).init()
        url = None
    else:
        driver.install()
        svc = MarkerService(base, batch_interval_ms=interval_ms, num_threads=workers)
        url = svc.start()
    try:
        with ctx.Pool(procs) as pool:
            pool.map(abs, range(procs))  # warm the processes up: spawn/import time is not marker time
            ru0 = resource.getrusage(resource.RUSAGE_SELF)
            res = pool.starmap(_executor, [(mode, url, base, tasks[p::procs], threads) for p in range(procs)])
            ru1 = resource.getrusage(resource.RUSAGE_SELF)
    finally:
        if svc is not None:
            stats = svc.stats.snapshot()
            svc.stop()
            driver.uninstall()
    lat = sorted(x for r in res for x in r[0])
    fs = {k: sum(r[1][k] for r in res) + driver.c[k] for k in driver.c}
    wall = max(r[3] for r in res) - min(r[2] for r in res)
    files, dirs = _files_under(marker_dir(base, INSTANT))
    found = len(list_markers(base, INSTANT))
    assert found == n, f"{mode}: {found} markers listed, expected {n}"
    out = {
        "mode": mode if mode == "direct" else f"service {interval_ms:g}ms/{workers}thr",
        "markers": n, "files": files, "dirs": dirs, **fs,
        "median_ms": 1000 * lat[len(lat) // 2], "p99_ms": 1000 * lat[min(len(lat) - 1, int(len(lat) * 0.99))],
        "mean_ms": 1000 * statistics.fmean(lat),
        "driver_cpu_ms": 1000 * ((ru1.ru_utime + ru1.ru_stime) - (ru0.ru_utime + ru0.ru_stime)),
        "exec_cpu_ms": 1000 * sum(r[4] for r in res), "wall_s": wall, "markers_per_s": n / wall,
    }
    if svc is not None:
        out["batches"] = stats.get("batches", 0)
        out["max_batch"] = stats.get("max_batch", 0)
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=5000, help="data files (markers) in the write")
    ap.add_argument("--procs", type=int, default=4, help="executor processes")
    ap.add_argument("--threads", type=int, default=8, help="concurrent tasks per executor process")
    ap.add_argument("--parts", type=int, default=30, help="partitions the files spread over")
    ap.add_argument("--intervals", default="20,5", help="service batch intervals (ms) to run, comma separated")
    ap.add_argument("--workers", type=int, default=4, help="service worker threads (MARKERS files)")
    ap.add_argument("--work-dir", default=None)
    a = ap.parse_args(argv)
    work = a.work_dir or tempfile.mkdtemp(prefix="hl-bench-markers-")
    rows = [run_mode("direct", a.n, a.procs, a.threads, a.parts, 0, a.workers, work)]
    for iv in [float(x) for x in a.intervals.split(",") if x.strip()]:
        rows.append(run_mode("service", a.n, a.procs, a.threads, a.parts, iv, a.workers, work))
    if not a.work_dir:
        shutil.rmtree(work, ignore_errors=True)
    fs_type = "?"
    try:
        st = os.stat(work if a.work_dir else tempfile.gettempdir())
        with open("/proc/self/mountinfo") as f:
            for line in f:
                parts = line.split()
                if os.stat(parts[4]).st_dev == st.st_dev:
                    fs_type = parts[parts.index("-") + 1]
    except Exception:  # noqa: BLE001
        pass
    print(f"\nmarkers for a write of {a.n} files over {a.parts} partitions; {a.procs} executor processes x "
          f"{a.threads} tasks; file system {fs_type}\n")
    cols = [("mode", "{:<22}"), ("files", "{:>6}"), ("dirs", "{:>5}"), ("open_creat", "{:>10}"),
            ("mkdir", "{:>6}"), ("fsync", "{:>6}"), ("write", "{:>6}"), ("median_ms", "{:>9.2f}"),
            ("p99_ms", "{:>8.2f}"), ("wall_s", "{:>7.2f}"), ("markers_per_s", "{:>13.0f}"),
            ("driver_cpu_ms", "{:>13.0f}"), ("exec_cpu_ms", "{:>11.0f}")]
    print("  ".join(f"{c:>{len(f.format(rows[0][c]))}}" if c != "mode" else f"{c:<22}" for c, f in cols))
    for r in rows:
        print("  ".join(f.format(r[c]) for c, f in cols))
    for r in rows[1:]:
        print(f"{r['mode']}: {r['batches']} batches, largest {r['max_batch']} markers")
    print("\nfiles/dirs: on disk under .hoodie/.temp/<instant>/ afterwards; open_creat/mkdir/fsync/write: calls"
          " made (executors for direct, the driver for the service); driver/exec_cpu_ms: CPU time of the driver process"
          " (the service) and of all executor processes during the marker phase")


if __name__ == "__main__":
    main()
