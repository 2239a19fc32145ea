"""Storage access: the file operations the table format needs (`Storage`), with put-if-absent, and the backends by
URI scheme (`register_storage`, `storage_for`)."""

import importlib.util

from hudilite.storage.base import (
    Storage,
    bind_storage_options,
    capture_all_bindings,
    capture_bindings,
    install_bindings,
    register_storage,
    registered_storage,
    scheme_of,
    unregister_storage,
)
from hudilite.storage.local import LocalStorage, storage_for
from hudilite.storage.paths import canonical, hadoop_uri, is_local, normalize_path, relative_to

if importlib.util.find_spec("obstore") is not None:  # S3 is the optional `s3` extra
    from hudilite.storage.s3 import register as _register_s3

    _register_s3()  # s3:// and s3a:// configured from the AWS environment; the client is made on first use

__all__ = ["LocalStorage", "Storage", "bind_storage_options", "canonical", "capture_all_bindings", "capture_bindings",
           "hadoop_uri", "install_bindings", "is_local", "normalize_path",
           "register_storage", "registered_storage", "relative_to", "scheme_of", "storage_for", "unregister_storage"]
