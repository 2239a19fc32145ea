"""File-based table lock with a lease, for a shared file system.

The lock is a file created with O_EXCL holding `{"owner", "lease_ms", "expires_ms"}`. Its holder keeps the
file descriptor open and renews the lease from a background thread by rewriting the content *through that
descriptor* (same length, so a reader sees the old or the new content), which also bumps the mtime. Renewing
through the descriptor means a holder can never write into a lock file that somebody else created after
breaking its lease: it only ever touches its own inode.

A holder that dies stops renewing; once `expires_ms` has passed (or, for unreadable content, mtime + lease)
another process may break the lock. The file also names the holder's process (`"process"`: the kernel's boot
id, the pid namespace, the pid and its start time): a taker on the same kernel and in the same pid namespace
sees at once whether that process still runs, and breaks the lock of one that is gone (killed, crashed)
without waiting for the lease. A holder on another machine or in another namespace is judged by its lease only.
Breaking is race-safe: the stale file is renamed to a unique name first, and only the process whose rename
captured the very file (same inode, same content) it judged stale deletes it; a capture of anything else is
put back.

A holder whose lease was broken anyway (it stalled for longer than the lease) notices: the renewer sees the
lock path no longer names its inode and marks the lock lost, and `verify()` raises `LockLostError`.

A renewal only counts if it landed before the lease it extends ran out (less a clock margin of a tenth of the
lease): a breaker judges staleness by the expiry it read, so once that passed, a breaker may be about to
capture the file even though the path still names our inode. By induction, while every renewal is in time the
on-disk expiry is always in the future, and no breaker can judge the lock stale. `verify()` renews
synchronously under that rule, so a holder that passed `verify()` keeps the lock for a full lease from then on
(the transaction calls it right before each act that needs the lock: creating an instant, rolling one back,
writing a completed instant); a holder that stalled past its lease fails `verify()` even if nobody broke the
lock yet.

The lease fence (`fence_root`, a directory on the table's file system). `verify()` cannot cover a stall that
happens after it returned, e.g. inside the put of a completed instant. So each holder, once it acquired the
lock, first *revokes* every other lease directory under `fence_root` (renames it to a unique name - no path
through it resolves any more - then unlinks the files it holds and removes it), then creates its own
`lease.<uuid>`. Acts that must not outlive the lease write their file into that directory and publish it by
`link()`/`rename()` from there (`fence_dir()`). The holder's publish and the next holder's revocation are
ordered by the file system: either the publish resolved the staged file and linked it first - then the
revoker, which reads the table only after revoking, sees the published file - or it fails with ENOENT (the
directory's name is gone, or the staged inode lost its last name: Linux refuses to link an inode with no
links, under the inode lock that unlink takes too). A stalled holder can therefore never publish after the
next holder started acting. Only holders create lease directories, and a holder's `verify()` after creating
its own fails if the lock was taken over meanwhile, so every publish (always preceded by a `verify()`) uses a
directory that the next holder will revoke.
"""

from __future__ import annotations

import json
import os
import time
import uuid

from hudilite.errors import HudiliteError
from hudilite.lock.base import LeasedLock, LockLostError, process_gone, process_identity, register_lock_provider
from hudilite.options import LOCK_EXPIRE_MINUTES, LOCK_EXPIRE_MS, LOCK_PATH, LOCK_RETRY_MS, LOCK_WAIT_MS
from hudilite.storage.local import local_storage
from hudilite.storage.paths import is_local

_FS = local_storage()  # the lock file and lease directories live on the local/shared file system

_EXPIRES_DIGITS = 15  # space-padded, so every renewal writes the same number of bytes


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class FileLock(LeasedLock):
    def __init__(self, path: str, *, lease_ms: int = 60_000, timeout_ms: int = 600_000, retry_ms: int = 20,
                 fence_root: str | None = None):
        if lease_ms <= 0:
            raise ValueError(f"lock lease must be positive, got {lease_ms} ms")
        super().__init__(path, timeout_ms=timeout_ms, retry_ms=retry_ms, renew_s=max(lease_ms / 3000, 0.02),
                         thread_name="hudilite-lock-lease")
        self.fence_root = fence_root
        self._lease_dir: str | None = None
        self.lease_ms = int(lease_ms)
        self._fd: int | None = None
        self._ino: tuple[int, int] | None = None
        self._expires_ms = 0  # the expiry our file holds (the last renewal that counted)
        self.margin_ms = self.lease_ms // 10  # tolerated clock difference between holder and breakers
        self.process = ""  # the holding process (`process_identity`), named when the lock file is created

    # ---- content ---------------------------------------------------------------------------
    def _content(self, expires_ms: int) -> bytes:
        exp = str(expires_ms).rjust(_EXPIRES_DIGITS)  # JSON whitespace, not leading zeros
        return (f'{{"owner": "{self.owner}", "process": {json.dumps(self.process)}, "lease_ms": {self.lease_ms}, '
                f'"expires_ms": {exp}}}').encode()

    @staticmethod
    def read_state(path: str, lease_ms: int = 60_000) -> dict | None:
        """The lock file's content and stat as {"owner", "process", "expires_ms", "ino", "raw"}; None if there is
        no lock. `expires_ms` falls back to mtime + lease for content that cannot be parsed (a creator that died
        between creating and writing the file)."""
        try:
            with open(path, "rb") as f:
                raw = f.read()
                st = os.fstat(f.fileno())
        except FileNotFoundError:
            return None
        owner, process, expires = None, None, None
        try:
            d = json.loads(raw)
            owner, process = d.get("owner"), d.get("process")
            expires = int(d["expires_ms"])
        except (ValueError, KeyError, TypeError, AttributeError):
            expires = int(st.st_mtime * 1000) + lease_ms
        return {"owner": owner, "process": process if isinstance(process, str) else None, "expires_ms": expires,
                "ino": (st.st_dev, st.st_ino), "raw": raw}

    # ---- acquiring -------------------------------------------------------------------------
    def _try_create(self) -> bool:
        self.process = process_identity()  # at the take, not at construction: the object may cross a fork
        exp = _now_ms() + self.lease_ms
        try:
            try:
                fd = _FS.create_exclusive(self.path, self._content(exp), fsync=True)
            except FileNotFoundError:  # the lock's directory does not exist yet (the table's first lock)
                _FS.makedirs(os.path.dirname(self.path) or ".")
                fd = _FS.create_exclusive(self.path, self._content(exp), fsync=True)
        except FileExistsError:
            return False
        st = os.fstat(fd)
        self._fd, self._ino, self._expires_ms = fd, (st.st_dev, st.st_ino), exp
        return True

    def _break_if_expired(self) -> None:
        """Break the lock if its lease ran out or its holder process is gone (`process_gone`)."""
        state = self.read_state(self.path, self.lease_ms)
        if state is None or (_now_ms() <= state["expires_ms"] and not process_gone(state["process"])):
            return
        grave = f"{self.path}.broken.{uuid.uuid4().hex}"
        try:
            _FS.rename(self.path, grave)
        except FileNotFoundError:
            return
        try:
            with open(grave, "rb") as f:
                captured = f.read()
                st = os.fstat(f.fileno())
        except FileNotFoundError:
            return
        if (st.st_dev, st.st_ino) == state["ino"] and captured == state["raw"]:
            _FS.delete(grave)  # the stale lock we judged: gone
        else:  # we captured a lock taken or renewed meanwhile: put it back
            try:
                _FS.link(grave, self.path)
            except FileExistsError:
                pass
            _FS.delete(grave)

    def _try_take(self) -> bool:
        if self._try_create():
            return True
        self._break_if_expired()
        return False

    def _after_take(self) -> None:
        self._sweep_graves()
        self._lease_dir = None
        if self.fence_root is not None:
            try:
                self._lease_dir = self._open_lease()
            except BaseException:
                self._release_file()  # took the lock file, could not fence: give it back
                raise

    def _holder(self) -> str:
        holder = self.read_state(self.path)
        return f" (held by {holder['owner']}, lease until {holder['expires_ms']})" if holder else ""

    def _sweep_graves(self) -> None:
        """Remove the renamed-away lock files (`<lock>.release.*`, `<lock>.broken.*`) of releasers and breakers
        that died before unlinking them (they were left forever). Runs holding the lock, so no grave can be put
        back any more (its link() to the lock path fails while the path is ours); a live releaser or breaker
        whose grave vanishes treats it as gone (FileNotFoundError), which it is."""
        d, name = os.path.split(self.path)
        for n in _FS.listdir(d or "."):
            if n.startswith(f"{name}.release.") or n.startswith(f"{name}.broken."):
                _FS.delete(os.path.join(d, n))

    # ---- the lease fence -------------------------------------------------------------------
    def _open_lease(self) -> str:
        """Revoke every other holder's lease directory, then create ours (we hold the lock file)."""
        _FS.makedirs(self.fence_root)
        try:
            names = os.listdir(self.fence_root)
        except FileNotFoundError:  # removed (empty) by a former holder's release just now
            names = []
        for name in names:
            if name.startswith("lease."):
                self._revoke(os.path.join(self.fence_root, name))
            elif name.startswith(".revoked."):  # a revoker died half-way: finish its work
                self._clear(os.path.join(self.fence_root, name))
        d = os.path.join(self.fence_root, f"lease.{uuid.uuid4().hex}")
        for _ in range(10):
            try:
                _FS.mkdir(d)
                return d
            except FileNotFoundError:  # a former holder's release removed the (then empty) root just now
                _FS.makedirs(self.fence_root)
        _FS.mkdir(d)
        return d

    def _revoke(self, lease_dir: str) -> bool:
        grave = os.path.join(self.fence_root, f".revoked.{uuid.uuid4().hex}")
        try:
            _FS.rename(lease_dir, grave)  # from here on no path through the lease directory resolves
        except FileNotFoundError:
            return False  # released (or revoked) meanwhile
        self._clear(grave)
        return True

    @staticmethod
    def _clear(d: str) -> None:
        """Unlink what `d` holds and remove it. Until the rmdir succeeds (a stalled holder may still create a file
        in it - through a stale NFS client cache, even by the old path), repeat: once `d` is gone, every file
        ever staged in it has lost its last name and cannot be linked anywhere."""
        for _ in range(100):
            try:
                names = os.listdir(d)
            except FileNotFoundError:
                return
            for n in names:
                # a link() that resolved this file before the rename either finished before this unlink, or fails
                _FS.delete(os.path.join(d, n))
            try:
                _FS.rmdir(d)
                return
            except FileNotFoundError:
                return
            except OSError:  # not empty: created meanwhile
                continue
        # (the next holder's acquire clears what is left; the name no longer resolves, so it is inert locally)

    def fence_dir(self) -> str | None:
        """This holder's lease directory (see the module doc); None without a `fence_root` or when not held."""
        return self._lease_dir if self._held else None

    # ---- holding ---------------------------------------------------------------------------
    def _still_mine(self) -> bool:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return False
        return (st.st_dev, st.st_ino) == self._ino

    def _lost_error(self, why: str) -> LockLostError:
        self._lost = True
        return LockLostError(f"table lock {self.path} was lost: {why} (this process stalled for longer than the "
                             f"lease of {self.lease_ms} ms)")

    def _renew_once(self) -> int:
        with self._renew_guard:
            if self._lost:
                raise self._lost_error("its lease ran out before it was renewed")
            if not self._still_mine():
                raise self._lost_error("its lease expired and another process broke it")
            exp = _now_ms() + self.lease_ms
            try:
                _FS.renew_in_place(self._fd, self._content(exp))
            except OSError as e:
                raise self._lost_error(f"renewing the lease failed ({e})") from None
            if _now_ms() >= self._expires_ms - self.margin_ms:
                raise self._lost_error("its lease ran out before it was renewed")
            if not self._still_mine():
                raise self._lost_error("its lease expired and another process broke it")
            self._expires_ms = exp
            return exp

    def _give_back(self) -> None:
        try:
            if self._lease_dir is not None:
                lease_dir, self._lease_dir = self._lease_dir, None
                # before the lock file goes: nothing is published through it any more
                if self._revoke(lease_dir):  # (not revoked by a new holder: we still hold the lock)
                    try:
                        _FS.rmdir(self.fence_root)  # leave no working directory behind (only if empty)
                    except OSError:
                        pass
        finally:
            self._release_file()

    def _release_file(self) -> None:
        try:
            if self._still_mine():
                # rename first, then check the inode we captured, so a lock taken over in between survives
                grave = f"{self.path}.release.{uuid.uuid4().hex}"
                try:
                    _FS.rename(self.path, grave)
                    st = os.stat(grave)
                    if (st.st_dev, st.st_ino) == self._ino:
                        _FS.delete(grave)
                    else:
                        try:
                            _FS.link(grave, self.path)
                        except FileExistsError:
                            pass
                        _FS.delete(grave)
                except FileNotFoundError:
                    pass
        finally:
            if self._fd is not None:
                os.close(self._fd)
            self._fd, self._ino = None, None


def _lease_ms(options: dict) -> int:
    """`hoodie.write.lock.filesystem.expire.ms` (hudilite), else Apache Hudi's
    `hoodie.write.lock.filesystem.expire` (minutes), else 60 s."""
    if LOCK_EXPIRE_MS.get(options) is not None:
        return LOCK_EXPIRE_MS.get(options)
    minutes = LOCK_EXPIRE_MINUTES.get(options)
    if minutes is not None:
        if minutes > 0:  # Hudi's 0 means "never expires"; a lease that never expires is not offered
            return int(minutes * 60_000)
    return 60_000


def _file_lock_factory(base_path: str, options: dict) -> FileLock:
    if not is_local(base_path):  # its leases are published by link() under the table: POSIX only
        raise HudiliteError(f"{base_path}: the file system lock provider needs a local or shared file system; "
                            "set hoodie.write.lock.provider to a provider for this storage")
    path = LOCK_PATH.get(options)
    if path and os.path.isdir(path):  # Hudi: a folder for the lock file
        path = os.path.join(path, "table.lock")
    return FileLock(
        path or os.path.join(base_path, ".hoodie", ".locks", "table.lock"),
        # under the table, whatever the lock path: staged files are published by link(), within one file system
        fence_root=os.path.join(base_path, ".hoodie", ".locks", "leases"),
        lease_ms=_lease_ms(options),
        timeout_ms=LOCK_WAIT_MS.get(options), retry_ms=LOCK_RETRY_MS.get(options),
    )


register_lock_provider("file", _file_lock_factory,
                       aliases=("filesystem", "org.apache.hudi.client.transaction.lock.FileSystemBasedLockProvider"))
