"""Storage with compare-and-swap: the conditional writes a lock on the store itself is built from.

Object stores offer no rename and no exclusive file creation; they offer conditional puts instead: create only if
absent (`If-None-Match: *`) and replace only if the object still has the version (ETag) the writer read
(`If-Match`). A backend with both implements `ConditionalStorage`, and the storage-based lock provider
(hudilite/lock/storage_lock.py) works on it whatever the backend.
"""

from __future__ import annotations

import abc

from hudilite.storage.base import Storage


class ConditionalStorage(Storage):
    @abc.abstractmethod
    def read_versioned(self, path: str) -> tuple[bytes, str]:
        """The object's content and its version tag (ETag); FileNotFoundError when absent."""

    @abc.abstractmethod
    def create_versioned(self, path: str, data: bytes) -> str | None:
        """Create `path` only if absent; the new version tag, or None when it existed."""

    @abc.abstractmethod
    def replace_if_match(self, path: str, data: bytes, version: str) -> str | None:
        """Replace `path` only if its version is still `version`; the new version tag, or None when it changed
        (or the object is gone)."""
