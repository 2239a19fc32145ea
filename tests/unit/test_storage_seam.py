"""The storage seam (issue 20): every file operation of the core goes through `hudilite.storage`, so that a backend
registered for a URI scheme (an object store) serves whole tables.

`test_no_direct_file_access` parses every module of `hudilite/` outside `hudilite/storage/` and fails on a direct
file-system call that the allowlist below does not name. `test_table_lifecycle_on_memory_store` runs a table's
whole life on an in-memory backend (tests/unit/memstore.py) registered for `mem://`.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2] / "hudilite"

# (module, function or "*" for the whole module): why it may touch the local file system directly
ALLOWLIST = {
    ("hudilite.lock.file_lock", "*"): "the POSIX lock provider: O_EXCL lease files, links and fence directories",
    ("hudilite.replace", "*"): "a table swap: flock and directory renames on the local file system (URIs skip it)",
    ("hudilite.warehouse", "*"): "the local Spark warehouse and its Derby metastore lock",
    ("hudilite.metastore", "publish_snapshot"): "catalog snapshots are directories of hard links to data files",
    ("hudilite.metastore", "prune_snapshots"): "removes those link directories",
    ("hudilite.options", "main"): "rewrites docs/options.md of the source tree (a developer tool)",
    ("hudilite.reader.overlay_cache", "_usable"): "POSIX permission bits of a local .hoodie (URIs skip it)",
}

OS_FUNCS = {"listdir", "scandir", "remove", "unlink", "rename", "replace", "makedirs", "mkdir", "rmdir", "stat",
            "lstat", "walk", "open", "link", "symlink", "truncate", "utime", "access", "chmod", "removedirs",
            "fsync", "fstat"}
OS_PATH_FUNCS = {"exists", "isdir", "isfile", "islink", "getsize", "getmtime", "getctime", "realpath", "lexists"}
PARQUET_FUNCS = {"read_table", "ParquetFile", "read_metadata", "read_schema", "write_table", "ParquetWriter",
                 "ParquetDataset", "write_to_dataset"}
ARROW_FILE_FUNCS = {"OSFile", "memory_map", "input_stream", "output_stream", "create_memory_map"}
DATASET_FUNCS = {"dataset", "write_dataset"}
# streams, not paths: memory buffers and the files a Storage opens
STREAMS = {"BufferReader", "BufferOutputStream", "BytesIO", "py_buffer", "open_input", "create_data_file"}


def _aliases(tree: ast.Module) -> dict[str, str]:
    """Local name -> the module it names, for every import in the module (also the function-level ones)."""
    out: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                out[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module:
            for a in node.names:
                out[a.asname or a.name] = f"{node.module}.{a.name}"
    return out


def _dotted(node: ast.AST, aliases: dict[str, str]) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(aliases.get(node.id, node.id))
    return ".".join(reversed(parts))


def _is_stream_call(n: ast.AST) -> bool:
    return isinstance(n, ast.Call) and (getattr(n.func, "attr", None) or getattr(n.func, "id", None)) in STREAMS


def _stream_names(tree: ast.AST) -> set[str]:
    """Names (and dict keys) the module binds to a stream: a memory buffer or a Storage file
    (`fs.open_input(path)`, `fs.create_data_file(path)`)."""
    names = {t.id for n in ast.walk(tree) if isinstance(n, ast.Assign) and _is_stream_call(n.value)
             for t in n.targets if isinstance(t, ast.Name)}
    keys = {k.value for n in ast.walk(tree) if isinstance(n, ast.Dict) for k, v in zip(n.keys, n.values)
            if isinstance(k, ast.Constant) and isinstance(v, ast.Name) and v.id in names}
    return names | keys


def _is_stream(arg: ast.AST, streams: set[str]) -> bool:
    """A pyarrow call's source or sink that is a stream, not a path."""
    if _is_stream_call(arg):
        return True
    if isinstance(arg, ast.Name):
        return arg.id in streams
    return isinstance(arg, ast.Subscript) and isinstance(arg.slice, ast.Constant) and arg.slice.value in streams


def _violation(call: ast.Call, aliases: dict[str, str], streams: set[str]) -> str | None:
    if isinstance(call.func, ast.Name) and call.func.id == "open" and "open" not in aliases:
        return "open()"
    name = _dotted(call.func, aliases)
    if name is None:
        return None
    mod, _, fn = name.rpartition(".")
    if (mod == "os" and fn in OS_FUNCS) or (mod in ("os.path", "posixpath") and fn in OS_PATH_FUNCS) \
            or mod == "shutil" or (mod == "glob" and fn in ("glob", "iglob")) \
            or (mod == "pyarrow" and fn in ARROW_FILE_FUNCS) or (mod == "pyarrow.dataset" and fn in DATASET_FUNCS) \
            or mod in ("pathlib", "pathlib.Path") or name in ("pathlib.Path", "pathlib.PurePath"):
        return f"{name}()"
    if mod == "pyarrow.parquet" and fn in PARQUET_FUNCS:
        args = list(call.args)
        where = args[1] if fn in ("write_table", "write_to_dataset") and len(args) > 1 else (args[0] if args else None)
        if where is not None and _is_stream(where, streams):
            return None
        return f"{name}()"
    return None


def direct_file_calls() -> list[tuple[str, str, int, str]]:
    """(module, function, line, call) of every direct file-system call outside hudilite/storage/."""
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT.parent)
        if rel.parts[:2] == ("hudilite", "storage"):
            continue
        module = ".".join(rel.with_suffix("").parts).removesuffix(".__init__")
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        aliases, streams = _aliases(tree), _stream_names(tree)

        def visit(node, scope):
            for child in ast.iter_child_nodes(node):
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    visit(child, scope or child.name)  # nested functions belong to their outer one
                    continue
                if isinstance(child, ast.Call):
                    what = _violation(child, aliases, streams)
                    if what:
                        found.append((module, scope or "<module>", child.lineno, what))
                visit(child, scope)

        visit(tree, None)
    return found


def test_no_direct_file_access():
    bad = [f"{m}:{line} in {fn}: {what}" for m, fn, line, what in direct_file_calls()
           if (m, fn) not in ALLOWLIST and (m, "*") not in ALLOWLIST]
    assert not bad, ("direct file-system calls outside hudilite/storage (use storage_for(path) or add a Storage "
                     "method; a local-only exception goes in ALLOWLIST with its reason):\n" + "\n".join(bad))


def test_allowlist_entries_are_used():
    """An entry whose module no longer makes the call is removed, so the list stays the short list of real
    exceptions."""
    used = {(m, fn) for m, fn, _, _ in direct_file_calls()} | {(m, "*") for m, _, _, _ in direct_file_calls()}
    assert not set(ALLOWLIST) - used


@pytest.mark.parametrize("src", [
    "open('x')", "import os\nos.listdir('x')", "import os\nos.path.exists('x')", "import shutil\nshutil.rmtree('x')",
    "import pyarrow.parquet as pq\npq.read_table('x')", "from pyarrow import parquet\nparquet.ParquetFile(p)",
    "import glob\nglob.glob('*')", "import pyarrow.dataset as pads\npads.dataset('x')",
    "from os import path\npath.isfile('x')",
])
def test_checker_catches(src):
    tree = ast.parse(src)
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)]
    assert any(_violation(c, _aliases(tree), _stream_names(tree)) for c in calls)


@pytest.mark.parametrize("src", [
    "import pyarrow as pa, pyarrow.parquet as pq\npq.ParquetFile(pa.BufferReader(b))",
    "import io, pyarrow.parquet as pq\ndef f(t):\n    sink = io.BytesIO()\n    pq.write_table(t, sink)",
    "import pyarrow.parquet as pq\nsink = fs.create_data_file(p)\nst = {'sink': sink}\npq.ParquetWriter(st['sink'], s)",
    "fs.open_input(p)", "import os\nos.path.join('a', 'b')",
])
def test_checker_passes(src):
    tree = ast.parse(src)
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)]
    assert not any(_violation(c, _aliases(tree), _stream_names(tree)) for c in calls)
