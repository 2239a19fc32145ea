"""Lock provider interface and registry."""

from __future__ import annotations

import abc
import importlib
from typing import Callable


class LockProvider(abc.ABC):
    """A mutual-exclusion lock on one table, usable as a context manager."""

    @abc.abstractmethod
    def acquire(self) -> None: ...

    @abc.abstractmethod
    def release(self) -> None: ...

    def __enter__(self) -> "LockProvider":
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()


_PROVIDERS: dict[str, Callable[[str, dict], LockProvider]] = {}


def register_lock_provider(name: str, factory: Callable[[str, dict], LockProvider]) -> None:
    _PROVIDERS[name] = factory


def lock_for(base_path: str, options: dict | None = None) -> LockProvider:
    options = options or {}
    name = options.get("hoodie.write.lock.provider", "file")
    if name in _PROVIDERS:
        return _PROVIDERS[name](base_path, options)
    if "." in name:  # "package.module.Class"
        mod, _, cls = name.rpartition(".")
        return getattr(importlib.import_module(mod), cls)(base_path, options)
    raise ValueError(f"unknown lock provider {name!r} (hoodie.write.lock.provider)")
