"""The driver JVM's class data sharing archive: a JVM maps the classes an earlier one loaded (dumped at its
exit) instead of loading and verifying them again. Kept per pyspark install and JDK in a small cache of the
most recently used archives; used by every local session (`hudilite.spark.session.local_session` maps one
when present), dumped by the dbt adapter's embedded session (`hudilite.warehouse.open_session`) and the
`hudilite server` Connect server."""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil

from hudilite.spark.jvm import java_option

CLASS_CACHE_ENV = "HUDILITE_JVM_CLASS_CACHE"  # a directory for the driver JVM's class archive, or "off"
DUMP_WAIT_S = 600.0  # at most this long at exit for the first session's JVM to write the archive
# archives kept in the cache, the most recently used: each install of pyspark or JDK (each venv) has its own
# (~200-270 MB each, a driver's and a Connect server's per install), which nothing else would ever remove
KEEP_ARCHIVES = 4
QUIET = "-Xlog:cds*=off"  # archive mismatches are not worth a console line: the JVM just loads classes


def class_cache_key(main_class: str | None = None) -> str | None:
    """What a class archive is valid for: this pyspark's jars (where they are, their sizes and times) and this
    java (an archive of another JDK or class path is refused by the JVM; the key keeps one per combination
    instead of rewriting it), and
    for a JVM other than PySpark's driver its main class (a Connect server loads other classes)."""
    spec = importlib.util.find_spec("pyspark")  # found, not imported
    if spec is None or not spec.origin:
        return None
    jars = os.path.join(os.environ.get("SPARK_HOME") or os.path.dirname(spec.origin), "jars")
    java = os.path.join(os.environ["JAVA_HOME"], "bin", "java") if os.environ.get("JAVA_HOME") \
        else shutil.which("java")
    if not java or not os.path.isdir(jars):
        return None
    # the JVM maps a dynamic archive only for the class path it was dumped with - the same jar paths, sizes
    # and modification times - and silently loads classes as usual otherwise: a key of names and sizes alone
    # matched the archive of another install (another venv, a reinstall), which no session then used and
    # none rewrote
    h = hashlib.sha256(os.path.realpath(java).encode())
    h.update(os.path.realpath(jars).encode())
    for name in sorted(os.listdir(jars)):
        st = os.stat(os.path.join(jars, name))
        h.update(f"{name}:{st.st_size}:{st.st_mtime_ns}".encode())
    if main_class:
        h.update(f"main:{main_class}".encode())
    return h.hexdigest()[:16]


def class_cache_options(cache_dir: str | None = None, *, main_class: str | None = None,
                        owner: str | None = None) -> tuple[str, str | None, str | None]:
    """Java options that let the driver JVM map the classes of earlier sessions from a class data sharing
    archive (CDS, JDK 13+; Spark 4 needs 17) instead of loading and verifying some 10,000 Spark, Hive and
    DataNucleus classes again: the larger part of a session's start. Returns (options, dump, archive): with
    an archive in place the options map it; without one they make this session's JVM dump its classes to
    `dump` (a name of this process's) when it exits, and `finish_class_cache` moves that to `archive` once
    the JVM has exited. An archive the JVM cannot use (another JDK or class path) is ignored by it
    (`-Xshare:auto`, the default): classes then load as usual. `cache_dir`: default $HUDILITE_JVM_CLASS_CACHE,
    else ~/.cache/hudilite/jvm; "off" disables it. `main_class`: a JVM other than PySpark's driver (its own
    archive); `owner`: what names the dump, default this process's pid (a dump whose pid is gone is removed as
    an orphan; another owner removes its own stale dump itself)."""
    cache_dir, archive = _archive_path(cache_dir, main_class)
    if archive is None:
        return "", None, None
    if os.path.isfile(archive):
        _mark_used(archive)
        return _map_options(archive), None, None
    try:
        os.makedirs(cache_dir, exist_ok=True)
        _remove_orphan_dumps(cache_dir)
    except OSError:  # no writable cache: start as without one
        return "", None, None
    dump = archive[:-len(".jsa")] + f".{owner or os.getpid()}.jsa.part"
    return f"{java_option(f'-XX:ArchiveClassesAtExit={dump}')} {QUIET}", dump, archive


def map_options(cache_dir: str | None = None) -> str:
    """The Java options that map this install's driver archive if there is one, else none: for a session
    that does not write the archive itself (`local_session`: its JVM may be killed, or live for days)."""
    _cache_dir, archive = _archive_path(cache_dir, None)
    if archive is None or not os.path.isfile(archive):
        return ""
    _mark_used(archive)
    return _map_options(archive)


def _map_options(archive: str) -> str:
    return f"{java_option(f'-XX:SharedArchiveFile={archive}')} {QUIET}"


def _archive_path(cache_dir: str | None, main_class: str | None) -> tuple[str, str | None]:
    """The cache directory and the archive this install's JVM (`main_class`: see class_cache_key) would map;
    no archive when the cache is off or the key cannot be known."""
    cache_dir = cache_dir or os.environ.get(CLASS_CACHE_ENV) or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "hudilite", "jvm")
    key = class_cache_key(main_class) if cache_dir != "off" else None
    return cache_dir, (os.path.join(cache_dir, f"{key}.jsa") if key else None)


def _mark_used(archive: str) -> None:
    """Record a use of `archive` in its modification time: the cache keeps the most recently used ones."""
    try:
        os.utime(archive)
    except OSError:  # another user's archive: mapped all the same, just not marked
        pass


def prune_class_cache(cache_dir: str, keep: int = KEEP_ARCHIVES) -> list[str]:
    """Remove all but the `keep` most recently used archives of `cache_dir` (dumps in progress are not
    archives). A JVM that has one mapped keeps its mapping; a session about to map a removed one starts
    without it (`-Xshare:auto`) and dumps it again. Returns the removed paths."""
    try:
        names = [n for n in os.listdir(cache_dir) if n.endswith(".jsa")]
    except OSError:
        return []
    aged = []
    for n in names:
        p = os.path.join(cache_dir, n)
        try:
            aged.append((os.stat(p).st_mtime_ns, p))
        except OSError:  # removed meanwhile
            pass
    removed = []
    for _t, p in sorted(aged, reverse=True)[max(keep, 1):]:
        try:
            os.remove(p)
            removed.append(p)
        except OSError:  # another user's, or removed meanwhile
            pass
    return removed


def _remove_orphan_dumps(cache_dir: str) -> None:
    """Dumps of processes that died without finishing them (killed: no exit handler ran) are never moved into
    place; remove them (a JVM still writing one keeps writing to the unlinked file, harmlessly)."""
    for name in os.listdir(cache_dir):
        parts = name.split(".")
        if len(parts) == 4 and parts[2:] == ["jsa", "part"] and parts[1].isdigit():
            if not process_alive(int(parts[1])):
                os.remove(os.path.join(cache_dir, name))


def process_alive(pid: int) -> bool:
    """Is process `pid` running (another user's counts)? A zombie (exited, its parent has not reaped it yet:
    briefly, after a kill) is not."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:  # no procfs (macOS)
        return True


def finish_class_cache(jvm, dump: str, archive: str, timeout: float = DUMP_WAIT_S, accumulators=None) -> bool:
    """At this process's exit: end the driver JVM (`jvm`: its Popen, PySpark's gateway process) by closing
    its stdin as PySpark's own exit does, wait for it to write its class archive, and move that into place.
    Waiting keeps the process - and so the warehouse - busy until the JVM is gone: a next dbt command on the
    warehouse does not find the metastore still held by the dumping JVM. A JVM that does not finish in time
    or fails leaves no archive (the next session dumps again). `accumulators`: the session's PySpark
    accumulator server (see `_end_accumulator_updates`)."""
    _end_accumulator_updates(accumulators)
    try:
        if jvm.stdin is not None:
            jvm.stdin.close()
        clean = jvm.wait(timeout=timeout) == 0
    except Exception:  # noqa: BLE001 - the archive is an optimisation: never fail the process's exit for it
        clean = False
    return install_class_archive(dump, archive, clean)


def _end_accumulator_updates(server) -> None:
    """The JVM is ended here while this interpreter still runs, unlike at PySpark's own exit: the JVM's
    connection to PySpark's accumulator server (made by any job with Python workers) then reads end of file,
    which the server printed as an EOFError traceback on every session that dumped its classes. That end is
    expected: stop taking updates and keep it quiet."""
    if server is None:
        return
    server.server_shutdown = True  # the handler's poll loop ends at its next turn
    server.handle_error = lambda request, client_address: None


def install_class_archive(dump: str, archive: str, clean: bool) -> bool:
    """Once the dumping JVM is gone: move its dump into place if it exited cleanly (`clean`), else remove it
    (a JVM killed while writing leaves a partial file). Whether the archive is now in place."""
    try:
        ok = clean and os.path.isfile(dump)
        if ok:
            os.replace(dump, archive)
            _mark_used(archive)  # newest: kept by the pruning below
            prune_class_cache(os.path.dirname(archive))
        return ok
    except OSError:
        return False
    finally:
        if os.path.exists(dump):
            try:
                os.remove(dump)
            except OSError:
                pass
