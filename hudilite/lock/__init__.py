"""Pluggable table locks. `lock_for(base_path, options)` picks the provider named by
`hoodie.write.lock.provider` (default: the file-based lock, which works across processes and machines
sharing a file system; `in_process` for threads of one process)."""

from hudilite.lock.base import (
                                InProcessLock,
                                LockLostError,
                                LockProvider,
                                check_lock_provider,
                                lock_for,
                                register_lock_provider,
)
from hudilite.lock.file_lock import FileLock
from hudilite.lock.storage_lock import StorageLock

__all__ = ["LockProvider", "FileLock", "InProcessLock", "StorageLock", "LockLostError", "lock_for",
           "register_lock_provider", "check_lock_provider"]
