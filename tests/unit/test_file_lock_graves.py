"""Regression (crash points, issue 24): a process killed between renaming the lock file away and unlinking it
(release, or breaking a stale lock) left `table.lock.release.*` / `table.lock.broken.*` in `.hoodie/.locks`
forever; the next holder removes them."""

import os

from hudilite.lock.file_lock import FileLock


def test_next_acquire_removes_graves_of_killed_releasers(tmp_path):
    path = str(tmp_path / "table.lock")
    first = FileLock(path, lease_ms=60_000)
    first.acquire()
    os.rename(path, f"{path}.release.deadbeef")  # the releaser died right after its rename
    os.close(first._fd)
    first._held = False
    first._stop.set()
    first._local.release()
    open(f"{path}.broken.cafe", "wb").close()  # a breaker died likewise
    nxt = FileLock(path, lease_ms=60_000)
    nxt.acquire()
    try:
        assert sorted(os.listdir(tmp_path)) == ["table.lock"]
    finally:
        nxt.release()
    assert os.listdir(tmp_path) == []
