"""The driver JVM's class data sharing archive (hudilite.warehouse.class_cache_options / finish_class_cache):
dumped by the first session's JVM when it exits, moved into place only once that JVM has exited cleanly, and
mapped by the sessions after."""

import os
import subprocess
import sys

import pytest

from hudilite import warehouse

# stands in for the driver JVM: runs until its stdin closes (as PySpark's gateway JVM does), then writes
# its "archive" and exits with the given code
FAKE_JVM = """
import sys
sys.stdin.read()
open(sys.argv[1], "w").write("archive")
sys.exit(int(sys.argv[2]))
"""


def _key():
    key = warehouse.class_cache_key()
    if key is None:
        pytest.skip("no pyspark jars or java here")
    return key


def test_first_session_dumps_then_later_ones_map(tmp_path):
    key = _key()
    opts, dump, archive = warehouse.class_cache_options(str(tmp_path))
    assert dump == str(tmp_path / f"{key}.{os.getpid()}.jsa.part") and archive == str(tmp_path / f"{key}.jsa")
    assert opts.startswith(f"-XX:ArchiveClassesAtExit={dump} ")
    (tmp_path / f"{key}.jsa").write_bytes(b"archive")
    assert warehouse.class_cache_options(str(tmp_path)) == (
        f"-XX:SharedArchiveFile={archive} -Xlog:cds*=off", None, None)
    assert warehouse.class_cache_options("off") == ("", None, None)


@pytest.mark.parametrize("code", [0, 1])
def test_archive_is_moved_into_place_only_after_a_clean_exit(tmp_path, code):
    dump, archive = str(tmp_path / "k.1.jsa.part"), str(tmp_path / "k.jsa")
    jvm = subprocess.Popen([sys.executable, "-c", FAKE_JVM, dump, str(code)], stdin=subprocess.PIPE)
    assert warehouse.finish_class_cache(jvm, dump, archive, timeout=60) is (code == 0)
    assert jvm.returncode == code  # it was waited for: the archive was complete when moved
    assert os.listdir(tmp_path) == (["k.jsa"] if code == 0 else [])


def test_dumps_of_killed_processes_are_removed(tmp_path):
    key = _key()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    orphan = tmp_path / f"{key}.{dead.pid}.jsa.part"  # its process died before moving it into place
    live = tmp_path / f"{key}.{os.getpid()}.jsa.part"  # a live process's dump in progress
    orphan.write_bytes(b"x")
    live.write_bytes(b"x")
    warehouse.class_cache_options(str(tmp_path))
    assert not orphan.exists() and live.exists()
