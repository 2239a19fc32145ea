"""scripts/warm_class_archive.py (run by scripts/setup.sh): a warm-up killed mid-way leaves its scratch warehouse;
the next one removes it, and leaves the scratch of a warm-up still running."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from hudilite.spark import class_cache

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
import warm_class_archive as warm  # noqa: E402


def test_scratch_of_a_killed_warm_up_is_removed_and_a_live_ones_kept(tmp_path):
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    dead = tmp_path / f"{warm.SCRATCH_PREFIX}{gone.pid}-abc123"
    (dead / ".metastore").mkdir(parents=True)
    (dead / ".metastore" / "derby.log").write_text("x")
    live = tmp_path / f"{warm.SCRATCH_PREFIX}{os.getpid()}-def456"
    live.mkdir()
    other = tmp_path / f"{warm.SCRATCH_PREFIX}notapid"
    other.mkdir()
    killed = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    killed.kill()  # not reaped yet: a zombie, as a warm-up killed a moment ago is
    deadline = time.monotonic() + 30
    while class_cache.process_alive(killed.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    unreaped = tmp_path / f"{warm.SCRATCH_PREFIX}{killed.pid}-ghi789"
    unreaped.mkdir()

    assert sorted(warm.remove_orphan_scratch(str(tmp_path))) == sorted([str(dead), str(unreaped)])
    killed.wait()
    assert not dead.exists() and not unreaped.exists()
    assert live.is_dir() and other.is_dir()
