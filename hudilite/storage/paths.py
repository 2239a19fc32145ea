"""Table paths that may be URIs of an object store (`s3://bucket/prefix/t`) as well as local paths.

The one place a user's or Spark's path is turned into a table location (`normalize_path`), and the helpers that
relate paths under it. os.path.abspath/realpath/normpath/relpath must not see a URI: they treat `s3:` as a
relative directory and collapse the `//`. Joining, `dirname` and `basename` are plain string operations on `/`
and are safe on both.
"""

from __future__ import annotations

import os

from hudilite.storage.base import registered_storage, scheme_of


def is_local(path: str) -> bool:
    """Whether `path` is on the local/shared file system (a plain path or a `file:` URI)."""
    return scheme_of(path) in ("", "file")


def normalize_path(path: str) -> str:
    """The table location of `path`: an absolute local path for a plain path, `file:/x` (Spark's and Hadoop's form
    of a catalog LOCATION), `file:///x` or `file://localhost/x`; the URI itself, without a trailing `/`, for a
    scheme a backend is registered for (`register_storage`). Hadoop's `Path.toString()` does not percent-encode,
    so `%` in a path is taken literally."""
    path = os.fspath(path)
    scheme = scheme_of(path)
    if scheme == "file":
        rest = path[5:]
        if rest.startswith("//"):
            host, sep, tail = rest[2:].partition("/")
            if host not in ("", "localhost"):
                raise ValueError(f"unsupported location {path!r}: a file URI naming host {host!r} "
                                 "(only local/shared file systems are supported)")
            rest = sep + tail
        if not rest.startswith("/"):
            raise ValueError(f"unsupported location {path!r}: a file URI needs an absolute path")
        return os.path.abspath(rest)
    if scheme:
        if registered_storage(scheme) is None:
            raise ValueError(f"unsupported storage scheme in {path!r}: no storage backend is registered for "
                             f"{scheme}:// (local/shared file systems and registered backends are supported)")
        head, _, rest = path.partition("://")
        rest = "/".join(p for p in rest.split("/") if p not in ("", "."))
        return f"{scheme}://{rest}"
    return os.path.abspath(path)


def hadoop_uri(path: str) -> str:
    """`path` as Hadoop's `Path.toString()` spells a qualified path - what Apache Hudi writes where its metadata
    holds full paths: `file:/x` for a local path, an object store URI as it is."""
    return f"file:{normalize_path(path)}" if is_local(path) else path


def relative_to(path: str, base: str) -> str:
    """`path` relative to the directory `base`, with `/` separators ("" for `base` itself); ValueError when it is
    not under `base`."""
    if is_local(path) and is_local(base):
        rel = os.path.relpath(normalize_path(path), normalize_path(base))
        if rel == ".":
            return ""
        if rel == ".." or rel.startswith("../"):
            raise ValueError(f"{path!r} is not under {base!r}")
        return rel.replace(os.sep, "/")
    base = base.rstrip("/")
    if path == base:
        return ""
    if not path.startswith(base + "/"):
        raise ValueError(f"{path!r} is not under {base!r}")
    return path[len(base) + 1:]


def canonical(path: str) -> str:
    """A path to compare locations by: symlinks resolved on the local file system, the URI as it is elsewhere."""
    return os.path.realpath(path) if scheme_of(path) == "" else normalize_path(path)
