"""Storage access: the file operations the table format needs (`Storage`), with put-if-absent."""

import importlib.util

from hudilite.storage.base import Storage
from hudilite.storage.local import LocalStorage, storage_for

if importlib.util.find_spec("obstore") is not None:  # S3 is the optional `s3` extra
    from hudilite.storage.s3 import register as _register_s3

    _register_s3()  # s3:// and s3a:// configured from the AWS environment; the client is made on first use

__all__ = ["LocalStorage", "Storage", "storage_for"]
