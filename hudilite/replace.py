"""Replace a table by a new one written beside it, crash-safely.

A rebuild that changes what no commit can (record key, partitioning, table type, an incompatible column
type) writes a new table (a fresh `hudilite.table.id`) in a staging directory next to the old one and then
swaps the directories. Two renames cannot be one atomic step, so the swap is a small roll-forward protocol;
every name lives in the table's parent directory:

1. `staging_dir(path)`: `.<name>.hudilite-rebuild-<token>`, written while the writer holds a flock on it. A
   staging directory nobody holds belongs to a writer that died before step 2: `swap` removes such orphans.
2. `swap` writes the intent `.<name>.hudilite-swap` (JSON: staging and old directory names; written to a temp
   file, fsync'ed, renamed, directory fsync'ed). From here on the new table is the outcome.
3. rename table -> `.<name>.hudilite-replaced-<token>`;  4. rename staging -> table;  5. fsync the parent,
   remove the old table;  6. remove the intent.

The whole swap holds a flock on the parent directory (released when the process dies; no lock files). `recover(path)`
takes it and, if an intent is present, completes steps 3-6 from whatever state a crash left (each step checks
what is already done). `HoodieTable.exists` / `open` call it, so the next reader or writer of the path
finishes a half-done swap before looking: the path holds the old table (crash before the intent) or the new
one (after), never nothing. flock is local-file-system (POSIX) semantics, like the rest of the swap.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import uuid

from hudilite.errors import CorruptTableError
from hudilite.storage.local import fsync_path, local_storage
from hudilite.storage.paths import is_local

_FS = local_storage()  # the swap is a local protocol: flock, directory renames, directory fsyncs


def _rmtree(path: str) -> None:
    """Remove a directory tree, best effort (what is left is an orphan the next swap removes)."""
    try:
        _FS.delete_tree(path)
    except OSError:
        pass

_REBUILD = ".hudilite-rebuild-"
_REPLACED = ".hudilite-replaced-"
_INTENT = ".hudilite-swap"


def _names(path: str) -> tuple[str, str]:
    parent, name = os.path.split(os.path.normpath(os.path.abspath(path)))
    return parent, name


def _intent_path(path: str) -> str:
    parent, name = _names(path)
    return os.path.join(parent, f".{name}{_INTENT}")



@contextlib.contextmanager
def _flock(directory: str, blocking: bool = True):
    """flock on a directory; yields whether it was taken (always True when blocking)."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)  # releases the flock


@contextlib.contextmanager
def staging_dir(path: str):
    """A fresh staging directory name beside `path`, flock'ed while the caller writes the new table into it.
    On an exception the staging directory is removed (the table at `path` is untouched)."""
    parent, name = _names(path)
    staging = os.path.join(parent, f".{name}{_REBUILD}{uuid.uuid4().hex[:12]}")
    _FS.makedirs(parent)
    with _flock(parent):  # orphans are removed under this lock: none sees the new dir before it is held
        _FS.mkdir(staging)
        fd = os.open(staging, os.O_RDONLY)
        fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        yield staging
    except BaseException:
        _rmtree(staging)
        raise
    finally:
        os.close(fd)


def swap(path: str, staging: str) -> None:
    """Make the complete table in `staging` the table at `path` (the old table is removed), crash-safely."""
    parent, name = _names(path)
    if os.path.dirname(os.path.abspath(staging)) != parent:
        raise ValueError(f"staging directory {staging} is not beside {path}")
    with _flock(parent):
        _finish(path)  # an earlier crashed swap of this path first
        _remove_orphans(path, keep=staging)
        intent = {"staging": os.path.basename(staging), "old": f".{name}{_REPLACED}{uuid.uuid4().hex[:12]}"}
        _FS.write_bytes(_intent_path(path), json.dumps(intent).encode())  # temp file + fsync + rename
        fsync_path(parent)
        _finish(path)


def recover(path: str) -> bool:
    """Complete a swap of `path` that a crash interrupted (no-op without one: one stat). True if it did."""
    if not is_local(path):  # swaps are made on local file systems only
        return False
    if not _FS.exists(_intent_path(path)):
        return False
    with _flock(_names(path)[0]):
        return _finish(path)


def _finish(path: str) -> bool:
    """Steps 3-6 under the swap lock, from the state on disk. True if an intent was found."""
    parent, name = _names(path)
    ipath = _intent_path(path)
    try:
        intent = json.loads(_FS.read_bytes(ipath))
        staging = os.path.join(parent, intent["staging"])
        old = os.path.join(parent, intent["old"])
    except FileNotFoundError:
        return False
    except (ValueError, KeyError, TypeError) as e:  # fsync'ed before the rename: should not happen
        raise CorruptTableError(f"{path}: the rebuild intent {ipath} is unreadable ({e}); the new table is in "
                                f"a {_REBUILD}* directory beside it") from None
    path = os.path.join(parent, name)
    if _FS.isdir(staging):
        if os.path.lexists(path):  # step 3 not done: the old table is still at the path
            _FS.rename_noreplace_dir(path, old)
        _FS.rename_noreplace_dir(staging, path)
        fsync_path(parent)
    _rmtree(old)
    _FS.delete(ipath)
    fsync_path(parent)
    return True


def _remove_orphans(path: str, keep: str) -> None:
    """Staging directories of `path` whose writer is gone (lock free) and old tables nothing refers to."""
    parent, name = _names(path)
    for entry in os.listdir(parent):
        full = os.path.join(parent, entry)
        if full == keep or not entry.startswith(f".{name}."):
            continue
        if entry.startswith(f".{name}{_REBUILD}"):
            with _flock(full, blocking=False) as free:
                if free:
                    _rmtree(full)
        elif entry.startswith(f".{name}{_REPLACED}") or entry.startswith(f".{name}{_INTENT}.tmp-"):
            _rmtree(full) if os.path.isdir(full) else _FS.delete(full)
        elif entry.startswith(f"..{name}{_INTENT}.") and entry.endswith(".tmp"):  # the intent's temp file
            _FS.delete(full)
