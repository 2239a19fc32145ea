"""A writer that dies with SIGKILL at a chosen point of an upsert (run as a subprocess by test_crash.py).

    python crash_writer.py <kill point> <state dir>

It starts its interpreter, hooks and SparkSession first, then reads the job as one JSON line on stdin:
{"table": "<path>", "schema": "<DDL>", "rows": [[...], ...], "write": {kwargs of hudilite.write},
"delay": seconds}. So the test can start the next case's writer while it checks the current case, and hand it
the job when its table copy is ready: the JVM start-up (most of a case) overlaps the checks.

The kill takes down the whole writer at once: the driver, its JVM, and Spark's Python daemon and workers
(the daemon puts itself in its own process group, so a process-group kill is not enough). Every process of
the tree is SIGSTOPped first and then SIGKILLed, so no worker keeps writing files after "the crash".

Kill points run either in the driver (hooks installed directly) or inside Spark's Python workers. Workers are
separate processes started by the JVM, so the hooks get there through a generated `sitecustomize.py` on the
workers' PYTHONPATH: it installs an import hook that patches hudilite's modules right after a worker
imports them (nothing is imported in the daemon itself, which forks the workers).

Before killing, the hook writes `<state dir>/fired` (the point and a detail), so the test knows the kill
happened where intended. A write that completes writes `<state dir>/done` with the instant.
"""

from __future__ import annotations

import importlib.abc
import json
import os
import signal
import sys
import threading
import time

POINT_ENV = "HUDILITE_CRASH_POINT"
ROOT_ENV = "HUDILITE_CRASH_ROOT"
STATE_ENV = "HUDILITE_CRASH_STATE"

# point -> where it runs
DRIVER_POINTS = {
    "before_markers",   # <t>.commit.requested created, the marker directory not yet (DirectMarkers.init)
    "after_inflight",   # <t>.inflight written, no data file yet
    "before_commit",    # every data file and partition metadata written, Transaction.complete not entered
    "commit_link",      # inside complete, under the lock: commit body in its temp file, not linked in place
    "after_commit",     # <t>.commit in place; markers and heartbeat not yet deleted
    "random",           # a timer fires after job["delay"] seconds, wherever the write is
}
WORKER_POINTS = {
    "first_marker",     # executor: the first marker file exists, its data file not yet
    "torn_data_file",   # executor: one data file complete, the second half-written (truncated)
}
POINTS = DRIVER_POINTS | WORKER_POINTS


# ------------------------------------------------------------------------------------------------
# killing a process tree
def _ppid_map() -> dict[int, int]:
    out = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat", "rb") as f:
                stat = f.read().decode("ascii", "replace")
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        out[int(d)] = int(fields[1])
    return out


def descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for pid, ppid in _ppid_map().items():
        children.setdefault(ppid, []).append(pid)
    out, todo = [], [root]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def kill_tree(root: int) -> None:
    """SIGSTOP every process of the tree (repeating until no new process shows up), then SIGKILL them all.
    When the caller is part of the tree it kills itself last."""
    me = os.getpid()
    in_tree = me == root or _is_descendant(me, root)
    stopped: list[int] = []
    seen: set[int] = set()
    while True:
        new = [p for p in [root, *descendants(root)] if p not in seen and p != me]
        if not new:
            break
        for p in new:
            seen.add(p)
            try:
                os.kill(p, signal.SIGSTOP)
                stopped.append(p)
            except ProcessLookupError:
                pass
    for p in stopped:
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass
    if in_tree:
        os.kill(me, signal.SIGKILL)


def _is_descendant(pid: int, root: int) -> bool:
    pp = _ppid_map()
    while pid in pp and pid > 1:
        pid = pp[pid]
        if pid == root:
            return True
    return False


def _state(name: str) -> str:
    return os.path.join(os.environ[STATE_ENV], name)


def fire(detail: str = "") -> None:
    """Record that the kill point was reached, then kill the whole writer (including this process)."""
    with open(_state("fired"), "w") as f:
        f.write(json.dumps({"point": os.environ[POINT_ENV], "detail": detail, "pid": os.getpid(),
                            "time": time.time()}))
    kill_tree(int(os.environ[ROOT_ENV]))
    os.kill(os.getpid(), signal.SIGKILL)  # not reached


def _count(name: str) -> int:
    """A counter shared by all processes of the writer: returns 1, 2, 3, ... on successive calls."""
    n = 1
    while True:
        try:
            fd = os.open(_state(f"{name}.{n}"), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            os.close(fd)
            return n
        except FileExistsError:
            n += 1


# ------------------------------------------------------------------------------------------------
# hooks
def _patch_markers(mod) -> None:
    point = os.environ.get(POINT_ENV)
    if point != "first_marker":
        return
    cls = mod.DirectMarkers
    orig = cls.create

    def create(self, partition, file_name, kind):
        path = orig(self, partition, file_name, kind)
        fire(path)
        return path

    cls.create = create


def _patch_handle(mod) -> None:
    if os.environ.get(POINT_ENV) != "torn_data_file":
        return
    orig = mod.write_parquet

    def write_parquet(path, table, ctx, **kw):
        n = _count("data_file")
        size = orig(path, table, ctx, **kw)
        if n >= 2:
            with open(path, "r+b") as f:  # what a crash in the middle of writing leaves behind
                f.truncate(size // 2)
            fire(f"{path} truncated to {size // 2} of {size} bytes")
        return size

    mod.write_parquet = write_parquet


_WORKER_PATCHES = {"hudilite.markers.direct": _patch_markers, "hudilite.writer.handle": _patch_handle}


class _PatchingLoader(importlib.abc.Loader):
    def __init__(self, loader, patch):
        self.loader = loader
        self.patch = patch

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        self.loader.exec_module(module)
        self.patch(module)


class _PostImportPatcher(importlib.abc.MetaPathFinder):
    """Patches a module right after it is imported (used in Spark's Python workers)."""

    def find_spec(self, fullname, path, target=None):
        patch = _WORKER_PATCHES.get(fullname)
        if patch is None:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _PatchingLoader(spec.loader, patch)
                return spec
        return None


def install_worker_hooks() -> None:
    """Called from the generated sitecustomize in every Python process the JVM starts."""
    if os.environ.get(POINT_ENV) not in WORKER_POINTS:
        return
    for name, patch in _WORKER_PATCHES.items():
        if name in sys.modules:
            patch(sys.modules[name])
    if not any(isinstance(f, _PostImportPatcher) for f in sys.meta_path):
        sys.meta_path.insert(0, _PostImportPatcher())


def install_driver_hooks(point: str) -> None:
    from hudilite.markers.direct import DirectMarkers
    from hudilite.writer.transaction import Transaction

    if point == "before_markers":
        orig_init = DirectMarkers.init

        def init(self):
            fire(f"instant {self.instant}")
            return orig_init(self)

        DirectMarkers.init = init
    elif point == "after_inflight":
        orig_inflight = Transaction.mark_inflight

        def mark_inflight(self, inst, metadata):
            r = orig_inflight(self, inst, metadata)
            fire(f"instant {inst.timestamp}")
            return r

        Transaction.mark_inflight = mark_inflight
    elif point == "before_commit":
        orig_complete = Transaction.complete

        def complete(self, inst, metadata, validate=None):
            fire(f"instant {inst.timestamp}")
            return orig_complete(self, inst, metadata, validate)

        Transaction.complete = complete
    elif point == "after_commit":
        orig_complete = Transaction.complete

        def complete(self, inst, metadata, validate=None):
            r = orig_complete(self, inst, metadata, validate)
            fire(f"instant {inst.timestamp}")
            return r

        Transaction.complete = complete
    elif point == "commit_link":
        orig_link = os.link

        def link(src, dst, *a, **kw):
            if str(dst).endswith(".commit") and os.path.basename(os.path.dirname(str(dst))) == ".hoodie":
                fire(f"{src} -> {dst}")
            return orig_link(src, dst, *a, **kw)

        os.link = link


_SITECUSTOMIZE = """\
import os, sys
if os.environ.get({point_env!r}):
    sys.path.insert(0, {here!r})
    import crash_writer
    crash_writer.install_worker_hooks()
"""


def main(argv: list[str]) -> int:
    point, state = argv
    if point not in POINTS:
        raise SystemExit(f"unknown kill point {point!r}; expected one of {sorted(POINTS)}")
    os.environ[POINT_ENV] = point
    os.environ[ROOT_ENV] = str(os.getpid())
    os.environ[STATE_ENV] = state
    site = os.path.join(state, "site")
    os.makedirs(site, exist_ok=True)
    with open(os.path.join(site, "sitecustomize.py"), "w") as f:
        f.write(_SITECUSTOMIZE.format(point_env=POINT_ENV, here=os.path.dirname(os.path.abspath(__file__))))
    # inherited by the JVM and from it by Spark's Python daemon and workers
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [site, os.environ.get("PYTHONPATH")]))

    import hudilite
    from hudilite.spark.jvm import java_property
    from hudilite.spark.session import DRIVER_JAVA_OPTIONS, local_session

    install_driver_hooks(point)
    # a JVM that lives for one small write: C1 alone compiles less than tiered C1 + C2 (~1.5-2.5 s of ~15 s);
    # its temporary files (Spark's scratch, native libraries it unpacks) in the test's state directory: a
    # killed JVM cannot remove them, and in /tmp they would outlive the test
    jvm_tmp = os.path.join(state, "jvm-tmp")
    os.makedirs(jvm_tmp, exist_ok=True)
    java = f"-XX:TieredStopAtLevel=1 {java_property('java.io.tmpdir', jvm_tmp)}"
    spark = local_session("local[1]", app_name=f"crash-writer-{point}", conf={DRIVER_JAVA_OPTIONS: java})
    line = sys.stdin.readline()
    if not line:  # the test ended without handing this writer a job
        spark.stop()
        return 0
    job = json.loads(line)
    table = job["table"]
    df = spark.createDataFrame([tuple(r) for r in job["rows"]], job["schema"])
    timer = None
    if point == "random":
        timer = threading.Timer(float(job["delay"]), fire, args=(f"after {job['delay']:.3f} s",))
        timer.daemon = True
    with open(_state("started"), "w") as f:
        f.write(str(time.time()))
    if timer is not None:
        timer.start()
    instant = hudilite.write(df, table, **job["write"])
    with open(_state("done"), "w") as f:
        f.write(json.dumps({"instant": str(instant), "time": time.time()}))
    if timer is not None:
        timer.cancel()
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
