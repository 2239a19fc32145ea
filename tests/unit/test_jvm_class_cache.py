"""The driver JVM's class data sharing archive (hudilite.class_cache.class_cache_options / finish_class_cache):
dumped by the first session's JVM when it exits, moved into place only once that JVM has exited cleanly, and
mapped by the sessions after; the same for the Spark Connect server's JVM (its own archive), whose dump
`hudilite server stop` waits for."""

import json
import os
import subprocess
import sys
import time
from dataclasses import asdict

import pytest

from hudilite import server
from hudilite.spark import class_cache
from hudilite.spark.jvm import java_option, java_property

# stands in for the driver JVM: runs until its stdin closes (as PySpark's gateway JVM does), then writes
# its "archive" and exits with the given code
FAKE_JVM = """
import sys
sys.stdin.read()
open(sys.argv[1], "w").write("archive")
sys.exit(int(sys.argv[2]))
"""


def _key():
    key = class_cache.class_cache_key()
    if key is None:
        pytest.skip("no pyspark jars or java here")
    return key


def test_first_session_dumps_then_later_ones_map(tmp_path):
    key = _key()
    opts, dump, archive = class_cache.class_cache_options(str(tmp_path))
    assert dump == str(tmp_path / f"{key}.{os.getpid()}.jsa.part") and archive == str(tmp_path / f"{key}.jsa")
    assert opts.startswith(f"-XX:ArchiveClassesAtExit={dump} ")
    (tmp_path / f"{key}.jsa").write_bytes(b"archive")
    assert class_cache.class_cache_options(str(tmp_path)) == (
        f"-XX:SharedArchiveFile={archive} -Xlog:cds*=off", None, None)
    assert class_cache.class_cache_options("off") == ("", None, None)


@pytest.mark.parametrize("code", [0, 1])
def test_archive_is_moved_into_place_only_after_a_clean_exit(tmp_path, code):
    dump, archive = str(tmp_path / "k.1.jsa.part"), str(tmp_path / "k.jsa")
    jvm = subprocess.Popen([sys.executable, "-c", FAKE_JVM, dump, str(code)], stdin=subprocess.PIPE)
    assert class_cache.finish_class_cache(jvm, dump, archive, timeout=60) is (code == 0)
    assert jvm.returncode == code  # it was waited for: the archive was complete when moved
    assert os.listdir(tmp_path) == (["k.jsa"] if code == 0 else [])


def test_dumps_of_killed_processes_are_removed(tmp_path):
    key = _key()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    orphan = tmp_path / f"{key}.{dead.pid}.jsa.part"  # its process died before moving it into place
    live = tmp_path / f"{key}.{os.getpid()}.jsa.part"  # a live process's dump in progress
    zombie = subprocess.Popen([sys.executable, "-c", "pass"])  # exited, not reaped yet (as just after a kill)
    _wait_until_zombie(zombie.pid)
    unreaped = tmp_path / f"{key}.{zombie.pid}.jsa.part"
    for f in (orphan, live, unreaped):
        f.write_bytes(b"x")
    class_cache.class_cache_options(str(tmp_path))
    zombie.wait()
    assert not orphan.exists() and not unreaped.exists() and live.exists()


def _wait_until_zombie(pid: int) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with open(f"/proc/{pid}/stat") as f:
            if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                return
        time.sleep(0.05)
    raise AssertionError(f"process {pid} did not exit")


def test_process_alive_tells_a_zombie_from_a_running_process():
    assert class_cache.process_alive(os.getpid())
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    _wait_until_zombie(child.pid)
    assert not class_cache.process_alive(child.pid)
    child.wait()
    assert not class_cache.process_alive(child.pid)



def test_a_server_jvm_has_its_own_archive_and_a_dump_named_by_its_owner(tmp_path):
    key = _key()
    skey = class_cache.class_cache_key("org.example.Server")
    assert skey not in (None, key) and skey == class_cache.class_cache_key("org.example.Server")
    (tmp_path / f"{key}.jsa").write_bytes(b"the driver's archive")  # not the server's: it dumps its own
    opts, dump, archive = class_cache.class_cache_options(str(tmp_path), main_class="org.example.Server",
                                                       owner="server-15002")
    assert (dump, archive) == (str(tmp_path / f"{skey}.server-15002.jsa.part"), str(tmp_path / f"{skey}.jsa"))
    assert opts.startswith(f"-XX:ArchiveClassesAtExit={dump} ")
    # a dump named by an owner other than a pid is that owner's to clean up, never another process's orphan
    (tmp_path / f"{skey}.server-15002.jsa.part").write_bytes(b"x")
    class_cache.class_cache_options(str(tmp_path))
    assert (tmp_path / f"{skey}.server-15002.jsa.part").exists()


# stands in for the server JVM: on SIGTERM it writes its "archive" (slowly, as a loaded JVM does) and exits;
# with "ignore" it has begun a dump, ignores SIGTERM and must be killed
FAKE_SERVER = """
import signal, sys, time
def term(*_):
    time.sleep(1.5)
    open(sys.argv[1], "w").write("archive")
    sys.exit(143)
signal.signal(signal.SIGTERM, signal.SIG_IGN if sys.argv[2] == "ignore" else term)
if sys.argv[2] == "ignore":
    open(sys.argv[1], "w").write("partial")
print("up", flush=True)
while True:
    time.sleep(1)
"""


@pytest.mark.parametrize("behaviour", ["dump", "ignore"])
def test_server_stop_waits_for_the_dump_and_installs_it_after_a_clean_exit(tmp_path, behaviour):
    wh, cache = tmp_path / "wh", tmp_path / "cache"
    os.makedirs(server.metastore_dir(str(wh)))
    cache.mkdir()
    dump, archive = str(cache / "k.server-1.jsa.part"), str(cache / "k.jsa")
    proc = subprocess.Popen([sys.executable, "-c", FAKE_SERVER, dump, behaviour], stdout=subprocess.PIPE,
                            start_new_session=True, text=True)
    assert proc.stdout.readline() == "up\n"  # its SIGTERM handler is in place
    info = server.ServerInfo(pid=proc.pid, host="127.0.0.1", port=1, warehouse=str(wh), log="", python="",
                             class_dump=dump, class_archive=archive)
    with open(os.path.join(server.metastore_dir(str(wh)), server.STATE_FILE), "w") as f:
        json.dump(asdict(info), f)
    t0 = time.monotonic()
    # the plain stop timeout (0.5 s) is shorter than the dump: a stop that did not wait for it would kill it
    assert server.stop(str(wh), timeout=0.5, dump_timeout=1.0 if behaviour == "ignore" else 60) == info
    proc.stdout.close()
    assert not os.path.exists(f"/proc/{proc.pid}")  # gone and reaped by stop (which took its exit status)
    if behaviour == "dump":
        assert time.monotonic() - t0 >= 1.5 and os.listdir(cache) == ["k.jsa"]
        assert open(archive).read() == "archive"
    else:
        assert os.listdir(cache) == []  # killed: its partial dump is removed, not installed
    assert server.read_state(str(wh)) is None


@pytest.mark.parametrize("clean", [True, False])
def test_install_class_archive(tmp_path, clean):
    dump, archive = tmp_path / "k.x.jsa.part", tmp_path / "k.jsa"
    dump.write_bytes(b"archive")
    assert class_cache.install_class_archive(str(dump), str(archive), clean) is clean
    assert os.listdir(tmp_path) == (["k.jsa"] if clean else [])
    assert class_cache.install_class_archive(str(dump), str(archive), True) is False  # no dump: nothing moved


def test_another_install_of_the_same_jars_has_its_own_key(tmp_path, monkeypatch):
    """The JVM maps an archive only for the class path it was dumped with: the same jars installed elsewhere
    (another venv) or rewritten (a reinstall) must not find the first install's archive under their key."""
    key = _key()
    jars = tmp_path / "spark" / "jars"
    jars.mkdir(parents=True)
    (jars / "a.jar").write_bytes(b"jar")
    monkeypatch.setenv("SPARK_HOME", str(tmp_path / "spark"))
    here = class_cache.class_cache_key()
    assert here not in (None, key) and class_cache.class_cache_key() == here
    other = tmp_path / "other" / "jars"
    other.mkdir(parents=True)
    (other / "a.jar").write_bytes(b"jar")
    os.utime(other / "a.jar", ns=(os.stat(jars / "a.jar").st_atime_ns, os.stat(jars / "a.jar").st_mtime_ns))
    monkeypatch.setenv("SPARK_HOME", str(tmp_path / "other"))
    assert class_cache.class_cache_key() != here  # same names, sizes and times, another place
    monkeypatch.setenv("SPARK_HOME", str(tmp_path / "spark"))
    os.utime(jars / "a.jar", ns=(1_000_000_000, 1_000_000_000))
    assert class_cache.class_cache_key() != here  # rewritten in place


def test_cache_keeps_the_most_recently_used_archives(tmp_path):
    """Every install (venv, pyspark or JDK upgrade) dumps its own ~200-270 MB archive: installing one prunes the
    cache to the KEEP_ARCHIVES most recently used, a use counting as mapping one; dumps in progress stay."""
    key = _key()
    old = []
    for i in range(class_cache.KEEP_ARCHIVES + 2):
        a = tmp_path / f"old{i}.jsa"
        a.write_bytes(b"a")
        os.chmod(a, 0o444)  # as the JVM leaves them
        os.utime(a, (1_000_000 + i, 1_000_000 + i))
        old.append(a)
    mine = tmp_path / f"{key}.jsa"
    mine.write_bytes(b"a")
    os.utime(mine, (999_000, 999_000))  # the oldest of all, until it is used
    live = tmp_path / f"other.{os.getpid()}.jsa.part"
    live.write_bytes(b"x")
    assert class_cache.class_cache_options(str(tmp_path))[0].startswith(f"-XX:SharedArchiveFile={mine} ")
    dump = tmp_path / "new.1.jsa.part"
    dump.write_bytes(b"archive")
    assert class_cache.install_class_archive(str(dump), str(tmp_path / "new.jsa"), True)
    kept = sorted(os.listdir(tmp_path))
    newest_old = [a.name for a in old[-(class_cache.KEEP_ARCHIVES - 2):]]
    assert kept == sorted(["new.jsa", mine.name, live.name] + newest_old)
    assert class_cache.prune_class_cache(str(tmp_path / "absent")) == []


def test_map_options_name_this_installs_archive_only_when_there_is_one(tmp_path, monkeypatch):
    """What `local_session` adds to a new driver JVM: the archive to map, never a dump (its JVM may be killed
    or live for days); nothing when there is no archive or the cache is off."""
    key = _key()
    assert class_cache.map_options(str(tmp_path)) == "" and os.listdir(tmp_path) == []
    archive = tmp_path / f"{key}.jsa"
    archive.write_bytes(b"archive")
    os.utime(archive, (1_000_000, 1_000_000))
    assert class_cache.map_options(str(tmp_path)) == f"-XX:SharedArchiveFile={archive} -Xlog:cds*=off"
    assert os.stat(archive).st_mtime > 1_000_000  # marked used
    monkeypatch.setenv(class_cache.CLASS_CACHE_ENV, "off")
    assert class_cache.map_options() == ""


def test_java_options_naming_paths_with_spaces_or_quotes_are_one_argument():
    """Spark's launcher splits extra Java options at whitespace and reads quotes and backslashes as a shell
    does: an option naming a path with a space is quoted, one without stays as it is."""
    assert java_option("-XX:SharedArchiveFile=/cache/a.jsa") == "-XX:SharedArchiveFile=/cache/a.jsa"
    assert java_property("derby.stream.error.file", "/My Projects/wh/derby.log") == \
        '"-Dderby.stream.error.file=/My Projects/wh/derby.log"'
    assert java_property("x", 'a"b\\c d') == '"-Dx=a\\"b\\\\c d"'
    assert java_property("x", "it's") == '"-Dx=it\'s"'


def test_class_archive_options_in_a_cache_path_with_a_space_are_quoted(tmp_path):
    opts, dump, _archive = class_cache.class_cache_options(str(tmp_path / "jvm cache"))
    if dump is None:
        pytest.skip("no pyspark jars or java here")
    assert opts.startswith(java_option(f"-XX:ArchiveClassesAtExit={dump}") + " ") and opts.startswith('"')
