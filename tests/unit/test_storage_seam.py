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
    ("hudilite.lock.base", "_read_text"): "a lock holder's process in /proc (whether it still runs), not storage",
    ("hudilite.replace", "*"): "a table swap: flock and directory renames on the local file system (URIs skip it)",
    ("hudilite.warehouse", "*"): "the local Spark warehouse and its Derby metastore lock",
    ("hudilite.spark.class_cache", "*"): "the driver JVM's class archives in this user's cache directory",
    ("hudilite.server", "*"): "the local Connect server's pid file, log and lock: process state, not table storage",
    ("hudilite.metastore", "publish_snapshot"): "catalog snapshots are directories of hard links to data files",
    ("hudilite.metastore", "prune_snapshots"): "removes those link directories",
    ("hudilite.metastore", "carry_snapshots"): "links those link directories into a replacing table (local only)",
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


# ---- backends by scheme and URI-safe table paths -----------------------------------------------------------
def test_scheme_registry_and_uri_paths(tmp_path):
    from hudilite.storage import (
        LocalStorage,
        canonical,
        normalize_path,
        register_storage,
        relative_to,
        scheme_of,
        storage_for,
        unregister_storage,
    )
    from tests.unit.memstore import MemStorage

    assert [scheme_of(p) for p in ("/a/b", "a:b/c", "file:/x", "file:///x", "S3://b/t")] == ["", "", "file", "file",
                                                                                                "s3"]
    assert isinstance(storage_for(str(tmp_path)), LocalStorage) and storage_for("file:" + str(tmp_path)) is \
        storage_for(str(tmp_path))
    with pytest.raises(ValueError, match="unsupported storage scheme"):
        storage_for("s4://bucket/t")
    with pytest.raises(ValueError, match="unsupported storage scheme"):
        normalize_path("s4://bucket/t")
    made = []
    register_storage("s4", lambda scheme: made.append(scheme) or MemStorage())
    try:
        fs = storage_for("s4://bucket/t")
        assert storage_for("S4://other") is fs and made == ["s4"]  # built once, on first use
        # a URI is kept as it is: no abspath (s4: would become a local directory), no folding of its //
        assert normalize_path("s4://bucket//prefix/./t/") == "s4://bucket/prefix/t"
        assert relative_to("s4://bucket/t/p=1/f.parquet", "s4://bucket/t") == "p=1/f.parquet"
        assert relative_to("s4://bucket/t", "s4://bucket/t/") == ""
        with pytest.raises(ValueError):
            relative_to("s4://bucket/t2/f", "s4://bucket/t")
        assert canonical("s4://bucket/t/") == "s4://bucket/t"
    finally:
        unregister_storage("s4")
    with pytest.raises(ValueError):
        storage_for("s4://bucket/t")
    assert relative_to(str(tmp_path / "a" / "b"), str(tmp_path)) == "a/b"


# ---- the seam's proof: a table's whole life on an in-memory store ------------------------------------------
def _rows(ids, v=1, p="a"):
    import pyarrow as pa

    ids = list(ids)
    return pa.table({"id": pa.array(ids, pa.int64()), "v": pa.array([v] * len(ids), pa.int64()),
                     "p": pa.array([p] * len(ids)), "x": pa.array([f"x{i}" for i in ids])})


def _snapshot(path, pos=None) -> dict:
    """{id: v} of the snapshot (latest, or as of completion position `pos`), merge-on-read slices merged, read
    in this process."""
    from hudilite.reader.changes import latest_position, snapshot_plan
    from hudilite.reader.merge import SliceDesc, merge_slices
    from hudilite.table import HoodieTable

    table = HoodieTable.open(path)
    plan = snapshot_plan(table, pos if pos is not None else latest_position(table))
    parts = [table.fs.read_parquet(f) for f in plan.plain_files]
    descs = [SliceDesc(s.partition, s.file_id, s.base_file.path if s.base_file else None,
                       tuple(lf.path for lf in s.log_files)) for s in plan.merged_slices]
    if descs:
        parts.append(merge_slices(descs, plan.merge_spec()))
    return {r["id"]: r["v"] for t in parts for r in t.select(["id", "v"]).to_pylist()}


@pytest.fixture
def mem(tmp_path, monkeypatch):
    from hudilite.storage import register_storage, unregister_storage
    from tests.unit.memstore import MemStorage

    store = MemStorage()
    register_storage("mem", lambda _scheme: store)
    monkeypatch.chdir(tmp_path)  # a path mangled into a relative local one would land here
    yield store
    unregister_storage("mem")
    assert not list(tmp_path.iterdir()), "local files were created for a mem:// table"


def test_table_lifecycle_on_memory_store(mem):
    import hudilite
    from hudilite.storage import storage_for

    assert storage_for("mem://t1") is mem
    opts = {"hoodie.write.lock.provider": "in_process"}  # the file lock provider needs a POSIX file system

    # copy-on-write: create, insert, upsert, delete, snapshot, time travel, changes between instants
    t = hudilite.Table.create("mem://t1", record_key="id", precombine_field="v", partition_by=("p",), options=opts)
    c1 = t.write(_rows(range(10)), "insert")
    pos1 = t.position()[0]
    c2 = t.write(_rows(range(5, 15), v=2), "upsert")
    t.write(_rows([0, 1]), "delete")
    assert hudilite.Table.exists("mem://t1")
    t = hudilite.Table.open("mem://t1", options=opts)
    latest = {i: 1 for i in range(2, 5)} | {i: 2 for i in range(5, 15)}
    assert _snapshot("mem://t1") == latest
    assert {r["id"] for r in t.to_arrow(["id"]).to_pylist()} == set(latest)
    assert _snapshot("mem://t1", pos1) == {i: 1 for i in range(10)}
    assert sorted(r["id"] for r in t.to_arrow(["id"], position=pos1).to_pylist()) == list(range(10))
    changes = t.changes_arrow(c1, c2, columns=["id", "v"])
    assert changes is not None
    assert sorted((r["_change_op"], r["id"]) for r in changes.to_pylist()) == \
        sorted([("U", i) for i in range(5, 10)] + [("I", i) for i in range(10, 15)])
    assert any(k.startswith("mem://t1/.hoodie/") and k.endswith(".commit") for k in mem.objects)

    # clean: only the latest version of each file group stays
    versions = [k for k in mem.objects if k.startswith("mem://t1/p=a/") and k.endswith(".parquet")]
    assert len(versions) == 3
    t.services.clean({"hoodie.cleaner.policy": "KEEP_LATEST_FILE_VERSIONS",
                      "hoodie.cleaner.fileversions.retained": "1"})
    assert [k for k in mem.objects if k.startswith("mem://t1/p=a/") and k.endswith(".parquet")] == versions[-1:]
    assert _snapshot("mem://t1") == latest

    # a write that dies part way: from its first data file on, the store refuses everything (its own cleanup
    # too, as for a killed process), so the instant stays pending until a rollback removes it
    def die(op, path):
        if op == "write_data" or died:
            died.append(path)
            raise OSError("injected: the writer died")

    died: list[str] = []
    mem.fail = die
    with pytest.raises(OSError, match="injected"):
        t.write(_rows(range(100, 105)), "insert")
    mem.fail = None
    pending = [i.timestamp for i in hudilite.Table.open("mem://t1").timeline.instants if not i.is_completed]
    assert len(pending) == 1
    assert t.services.rollback(force=True) == pending
    assert _snapshot("mem://t1") == latest
    assert all(i.is_completed for i in hudilite.Table.open("mem://t1").timeline.instants)
    assert not [k for k in mem.objects if pending[0] in k and not k.startswith("mem://t1/.hoodie/")]

    # merge-on-read: log appends, then compaction merges them into new base files
    m = hudilite.Table.create("mem://t2", record_key="id", precombine_field="v", partition_by=("p",),
                              table_type="MERGE_ON_READ", options=opts)
    m.write(_rows(range(10)), "insert")
    m.write(_rows(range(5, 10), v=2), "upsert")
    m.write(_rows([0, 1]), "delete")
    logs = [k for k in mem.objects if k.startswith("mem://t2/p=a/") and ".log." in k]
    assert logs
    want = {i: 1 for i in range(2, 5)} | {i: 2 for i in range(5, 10)}
    assert _snapshot("mem://t2") == want
    assert m.to_arrow(["id"]) is None  # log files to merge: not a plain read
    m = hudilite.Table.open("mem://t2", options=opts)
    assert m.services.compact(force=True)
    assert _snapshot("mem://t2") == want
    assert m.to_arrow(["id"]) is not None
