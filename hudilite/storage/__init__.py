"""Storage access: the file operations the table format needs (`Storage`), with put-if-absent, and the backends by
URI scheme (`register_storage`, `storage_for`)."""

from hudilite.storage.base import Storage, register_storage, registered_storage, scheme_of, unregister_storage
from hudilite.storage.local import LocalStorage, storage_for
from hudilite.storage.paths import canonical, is_local, normalize_path, relative_to

__all__ = ["LocalStorage", "Storage", "canonical", "is_local", "normalize_path", "register_storage",
           "registered_storage", "relative_to", "scheme_of", "storage_for", "unregister_storage"]
