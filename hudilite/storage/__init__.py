"""Storage access: the file operations the table format needs, with put-if-absent."""

from hudilite.storage.local import LocalStorage, storage_for

__all__ = ["LocalStorage", "storage_for"]
