"""Direct markers: one empty file per data file at `.hoodie/.temp/<instant>/<partition>/<file>.marker.<TYPE>`.

Executors create them with plain file creation before opening the data file, so a write killed at any
point leaves markers for every file it may have started. Rollback and commit reconciliation list them.
"""

from __future__ import annotations

import os

from hudilite.storage import relative_to, storage_for

CREATE = "CREATE"
MERGE = "MERGE"
APPEND = "APPEND"
SUFFIX = ".marker."
MARKER_TYPE_FILE = "MARKERS.type"


def marker_dir(base_path: str, instant: str) -> str:
    return os.path.join(base_path, ".hoodie", ".temp", instant)


class DirectMarkers:
    """Creates markers for one instant. Picklable: executors construct it from the base path and instant."""

    def __init__(self, base_path: str, instant: str):
        self.base_path = base_path
        self.instant = instant
        self.root = marker_dir(base_path, instant)

    def init(self) -> None:
        fs = storage_for(self.root)
        fs.makedirs(self.root)
        p = os.path.join(self.root, MARKER_TYPE_FILE)
        if not fs.exists(p):
            fs.write_plain(p, b"DIRECT")

    def create(self, partition: str, file_name: str, kind: str) -> str:
        d = os.path.join(self.root, partition) if partition else self.root
        fs = storage_for(d)
        fs.makedirs(d)
        path = os.path.join(d, f"{file_name}{SUFFIX}{kind}")
        fs.touch(path)
        return path


def list_markers(base_path: str, instant: str) -> list[tuple[str, str, str]]:
    """(partition, data file name, marker type) for every marker of `instant`, from direct marker files
    and from the batched marker service's files (`MARKERS<n>`, one `<partition>/<file>.marker.<TYPE>` per
    line)."""
    root = marker_dir(base_path, instant)
    out: list[tuple[str, str, str]] = []
    fs = storage_for(root)
    if not fs.isdir(root):
        return out
    for p in fs.walk_files(root):
        rel, _, f = relative_to(p, root).rpartition("/")
        if SUFFIX in f:
            name, kind = f.rsplit(SUFFIX, 1)
            out.append((rel, name, kind))
        elif f.startswith("MARKERS") and f != MARKER_TYPE_FILE and not rel:
            for line in fs.read_bytes(p).decode("utf-8", errors="replace").splitlines():
                line = line.strip()
                if SUFFIX not in line:
                    continue  # a torn last line of a crashed service
                path, kind = line.rsplit(SUFFIX, 1)
                part, _, name = path.rpartition("/")
                out.append((part, name, kind))
    return out


def delete_markers(base_path: str, instant: str) -> None:
    # a completed instant's markers may be deleted by its writer and by another writer's leftover cleanup at
    # once: a tree that vanishes under the walk is retried until it is gone
    for attempt in range(5):
        try:
            storage_for(base_path).delete_tree(marker_dir(base_path, instant))
            return
        except FileNotFoundError:
            if attempt == 4:
                raise
