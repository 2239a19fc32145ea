"""`.hoodie/.aux`: the auxiliary files hudilite keeps beside the timeline (other engines ignore the directory).

Every kind is declared here, once, with its path and its lifetime, and the paths are built here only:
rollback and archival remove the per-instant kinds of an instant through `remove_instant`, clean runs the sweep
of every kind it owns (hudilite/services/clean.py maps each to its sweep), so a new kind cannot be forgotten by
one of them.

    change images     hudilite_changes/<instant>/<fileId>_<token>.parquet       rolled back, archived
    overlays          hudilite_overlays/<partition>/<fileId>_<baseInstant>/...   swept by clean
    service claims    service_claims/<instant>                                    released by their service
    catalog snapshots hudilite_catalog/<instant>/<base file>.parquet              the dbt adapter's catalog
    aggregate state   hudilite_agg_state/<id>_<item>.parquet                      saved with the aggregate
    ready partitions  ready_partitions.json                                       table-wide, kept
    last completion   last_completion_time                                        table-wide, kept
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from hudilite.storage.local import storage_for

DIR = os.path.join(".hoodie", ".aux")


@dataclass(frozen=True)
class AuxKind:
    name: str  # the file or directory name under .hoodie/.aux
    per_instant: bool = False  # a directory of one entry per instant: <name>/<instant>
    rollback: bool = False  # removed with a rolled-back instant
    archival: bool = False  # removed when its instant is archived
    clean: bool = False  # swept by clean (entries of file slices clean removed)


CHANGE_IMAGES = AuxKind("hudilite_changes", per_instant=True, rollback=True, archival=True)
OVERLAYS = AuxKind("hudilite_overlays", clean=True)
SERVICE_CLAIMS = AuxKind("service_claims", per_instant=True)
CATALOG = AuxKind("hudilite_catalog", per_instant=True)
AGG_STATE = AuxKind("hudilite_agg_state")
READY_PARTITIONS = AuxKind("ready_partitions.json")
LAST_COMPLETION = AuxKind("last_completion_time")
KINDS = (CHANGE_IMAGES, OVERLAYS, SERVICE_CLAIMS, CATALOG, AGG_STATE, READY_PARTITIONS, LAST_COMPLETION)


def aux_dir(base_path: str) -> str:
    return os.path.join(base_path, DIR)


def path(base_path: str, kind: AuxKind, *parts: str) -> str:
    """The path of `kind` in the table at `base_path`, or of an entry under it (`parts`)."""
    return os.path.join(base_path, DIR, kind.name, *parts)


def relative(kind: AuxKind) -> str:
    """The path of `kind` relative to the table's base path."""
    return os.path.join(DIR, kind.name)


def remove_instant(base_path: str, instant: str, reason: str) -> None:
    """Delete what every per-instant kind removed on `reason` ("rollback" or "archival") holds for `instant`."""
    if reason not in ("rollback", "archival"):
        raise ValueError(f"unknown reason {reason!r}")
    fs = storage_for(base_path)
    for kind in KINDS:
        if kind.per_instant and getattr(kind, reason):
            fs.delete_tree(path(base_path, kind, instant))
