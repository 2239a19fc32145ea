"""Change images: what a copy-on-write commit changed, written while it merges, so that change reads of that
commit read only the changed rows instead of diffing the file groups it touched.

A copy-on-write merge knows exactly what it does to a file group: which stored rows an incoming record
replaces (their before images), which it deletes, which keys are new. Recomputing that afterwards means
reading the record keys of both file slices of every touched group (the whole table when the changes are
spread out). So each merge also writes one small parquet file, the group's change images:

    <table>/.hoodie/.aux/hudilite_changes/<instant>/<fileId>_<writeToken>.parquet

with the table's columns (meta fields included, as stored) plus `_change_op`: 'U' (new image of an updated
record), 'I' (inserted), 'B' (stored image of an updated record), 'D' (stored image of a deleted record) —
exactly the rows of a change read of that commit. File groups the commit created hold only inserts: their
base files are listed instead of copied. The commit metadata lists both (extraMetadata
`hudilite.change.images`, JSON), so only files of the completed commit are ever read (a retried task's
leftovers are not listed); other engines ignore `.hoodie/.aux`.

Written for commits (copy-on-write upsert / insert / delete) unless `hoodie.write.change.images=false`.
Rollback removes an instant's directory; archival removes the directories of archived instants. Change
reads use the images when the range is exactly one such commit (anything else falls back to the diff).
"""

from __future__ import annotations

import json
import os

import pyarrow as pa

from hudilite import auxfiles
from hudilite.options import CHANGE_IMAGES
from hudilite.storage.local import storage_for

DIR = auxfiles.relative(auxfiles.CHANGE_IMAGES)
META_KEY = "hudilite.change.images"
OPTION = CHANGE_IMAGES.key
CHANGE_OP = "_change_op"  # the operation column of change reads (hudilite.reader.changes) and of the images
INSERT, UPDATE, DELETE, BEFORE = "I", "U", "D", "B"
STAT_IMAGES = "_hl_change_images"  # write-stat field (removed before the commit metadata is written)
STAT_INSERTED = "_hl_all_inserted"


def instant_dir(base_path: str, instant: str) -> str:
    return auxfiles.path(base_path, auxfiles.CHANGE_IMAGES, instant)


def write(base_path: str, instant: str, fid: str, token: str, parts: list[tuple[str, pa.Table]],
          compression: str = "snappy", *, fsync: bool = True) -> str | None:
    """Write one file group's change images: `parts` = (op, rows in the file schema). Returns the file name
    (within the instant's directory), None when there is nothing to write."""
    parts = [(op, t) for op, t in parts if t.num_rows]
    if not parts:
        return None
    tables = [t.append_column(CHANGE_OP, pa.repeat(pa.scalar(op, pa.string()), t.num_rows)) for op, t in parts]
    out = pa.concat_tables(tables) if len(tables) > 1 else tables[0]
    d = instant_dir(base_path, instant)
    fs = storage_for(base_path)
    fs.makedirs(d)
    name = f"{fid}_{token}.parquet"
    # fsync: named by the commit's metadata (its directory is synced before the commit)
    fs.write_parquet(os.path.join(d, name), [out], fsync=fsync, compression=compression)
    return name


def take_from_stats(stats: list[dict]) -> dict | None:
    """Remove the change-image fields from the write stats (in place); the commit metadata entry (None when
    some file group of the commit has no images: the commit is not covered)."""
    images, inserted, covered = [], [], True
    for s in stats:
        img = s.pop(STAT_IMAGES, None)
        ins = s.pop(STAT_INSERTED, False)
        if img:
            images.append(img)
        elif ins:
            inserted.append(s["path"])
        elif s.get("numWrites") or s.get("numDeletes"):
            covered = False
    return {"images": sorted(images), "inserted": sorted(inserted)} if covered else None


def files_of(table, instant: str, metadata: dict) -> tuple[list[str], list[str]] | None:
    """(image files, base files of created groups) of a completed commit; None if it has none or any is
    missing."""
    raw = (metadata.get("extraMetadata") or {}).get(META_KEY)
    if not raw:
        return None
    try:
        entry = json.loads(raw)
        d = instant_dir(table.base_path, instant)
        images = [os.path.join(d, n) for n in entry["images"]]
        inserted = [os.path.join(table.base_path, p) for p in entry["inserted"]]
    except (ValueError, KeyError, TypeError):
        return None
    if not all(table.fs.exists(p) for p in images + inserted):
        return None
    return images, inserted


def remove_unclaimed(base_path: str, instant: str, claimed: set) -> None:
    """Delete image files of `instant` that no write stat claims (failed or speculative task attempts)."""
    fs, d = storage_for(base_path), instant_dir(base_path, instant)
    for n in fs.listdir(d):
        if n not in claimed:
            fs.delete(os.path.join(d, n))
