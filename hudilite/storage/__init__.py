"""Storage access: the file operations the table format needs (`Storage`), with put-if-absent."""

from hudilite.storage.base import Storage
from hudilite.storage.local import LocalStorage, storage_for

__all__ = ["LocalStorage", "Storage", "storage_for"]
