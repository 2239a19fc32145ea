"""count(distinct x) of an aggregate table maintained from changes: per group, how many detail rows hold each
value (a multiset), so a refresh knows when a value enters a group (its count goes 0 -> 1) or leaves it
(1 -> 0) without reading the detail table.

A `materialized='aggregate'` refresh folds the detail's change images into the stored per-group state;
count/sum/avg fold exactly, min/max fold until a retraction reaches the stored extreme. count(distinct) cannot
fold from the group's stored number alone: a retracted value may or may not still be held by another row of
the group. Without this state every affected group is recomputed from a read of the detail snapshot, which
costs about a full recomputation when a change batch touches most groups. With it a refresh reads and
rewrites the state (one row per distinct (group, value) pair), never the detail.

The state belongs to the aggregate table: one parquet file per count(distinct) item under

    <aggregate table>/.hoodie/.aux/hudilite_agg_state/<id>_<item>.parquet

(columns `__k0..` the group key values, `__v` the value, `__cnt` the rows holding it, > 0), named in the
extraMetadata of the commit that writes the aggregate (`hudilite.aggregate.distinct.state`: the files, the
query signature and the detail position they reflect). The state and the aggregate rows commit together,
so the state is used only when the newest checkpoint-carrying commit names it for exactly the position the
refresh starts from; anything else (a Spark-path commit, a first build, a missing or unreadable file) makes
the refresh build it anew from the detail snapshot at the refresh's end. Files no commit will name (failed or
superseded refreshes) are removed when the next state is saved. Other engines ignore `.hoodie/.aux`.
"""

from __future__ import annotations

import json
import logging
import os
import uuid
from typing import Dict, List, Optional

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from hudilite.storage.local import storage_for

log = logging.getLogger("hudilite.aggregate")

STATE_KEY = "hudilite.aggregate.distinct.state"
DIR = os.path.join(".hoodie", ".aux", "hudilite_agg_state")
VALUE, COUNT = "__v", "__cnt"


def key_names(n_keys: int) -> List[str]:
    return [f"__k{i}" for i in range(n_keys)]


def _dir(agg_path: str) -> str:
    return os.path.join(agg_path, DIR)


def _newest_checkpoint_commit(agg_path: str, checkpoint_key: str) -> Optional[dict]:
    """The extraMetadata of the newest completed commit of the aggregate table that carries a checkpoint."""
    from hudilite.table import HoodieTable

    if not HoodieTable.exists(agg_path):
        return None
    tl = HoodieTable.open(agg_path).timeline
    for inst in reversed(tl.completed()):
        extra = tl.read_metadata(inst).get("extraMetadata") or {}
        if extra.get(checkpoint_key):
            return extra
    return None


def state_schema(key_types: List[pa.DataType], value_type: pa.DataType) -> pa.Schema:
    return pa.schema([pa.field(k, t) for k, t in zip(key_names(len(key_types)), key_types)]
                     + [pa.field(VALUE, value_type), pa.field(COUNT, pa.int64())])


def load(agg_path: str, checkpoint_key: str, signature: str, detail: str, position: str,
         schemas: Dict[int, pa.Schema]) -> Optional[Dict[int, pa.Table]]:
    """The state of each count(distinct) item (`schemas`: item position among the query's aggregates -> its
    state schema) as of the detail `position`, when the newest checkpoint-carrying commit of the aggregate
    table names it for that position; else None (build it anew)."""
    extra = _newest_checkpoint_commit(agg_path, checkpoint_key)
    raw = (extra or {}).get(STATE_KEY)
    if not raw:
        return None
    try:
        entry = json.loads(raw)
        if (entry["signature"], entry["detail"], entry["position"]) != (signature, detail, position):
            return None
        files = {int(n): os.path.join(_dir(agg_path), name) for n, name in entry["files"].items()}
    except (ValueError, KeyError, TypeError, AttributeError):
        log.warning("aggregate %s: unreadable %s; rebuilding the count(distinct) state", agg_path, STATE_KEY)
        return None
    if sorted(files) != sorted(schemas):
        return None
    out = {}
    for n, path in files.items():
        try:
            t = pq.read_table(path)
            if t.column_names != schemas[n].names:
                raise ValueError(f"columns {t.column_names}")
            out[n] = t.cast(schemas[n])
        except (OSError, ValueError, pa.ArrowException) as e:
            log.warning("aggregate %s: count(distinct) state %s unusable (%s); rebuilding it", agg_path, path, e)
            return None
    return out


def _summed(t: pa.Table, n_keys: int) -> pa.Table:
    """Weights (`__cnt`) summed per (group keys, value); rows of a null value dropped (count distinct ignores
    nulls) and pairs whose sum is not positive dropped; dictionary columns decoded."""
    names = key_names(n_keys) + [VALUE]
    t = t.filter(pc.is_valid(t.column(VALUE)))
    s = t.group_by(names, use_threads=False).aggregate([(COUNT, "sum")])
    s = s.rename_columns([COUNT if c == f"{COUNT}_sum" else c for c in s.column_names]).select(names + [COUNT])
    for i, f in enumerate(s.schema):
        if pa.types.is_dictionary(f.type):
            s = s.set_column(i, f.name, s.column(i).cast(f.type.value_type))
    return s.filter(pc.greater(s.column(COUNT), 0))


def build(keys: List[pa.ChunkedArray], values) -> pa.Table:
    """The state of one count(distinct) from the detail rows' group keys and values."""
    cols = dict(zip(key_names(len(keys)), keys))
    cols[VALUE] = values
    cols[COUNT] = pa.repeat(pa.scalar(1, pa.int64()), len(values))
    return _summed(pa.table(cols), len(keys))


def fold(state: pa.Table, keys: List[pa.ChunkedArray], values, sign) -> pa.Table:
    """`state` with the signed change rows (group keys, value, +1 / -1) applied."""
    delta = pa.table({**dict(zip(key_names(len(keys)), keys)), VALUE: values, COUNT: sign}).cast(state.schema)
    return _summed(pa.concat_tables([state, delta]), len(keys))


def distinct_counts(state: pa.Table, n_keys: int) -> pa.Table:
    """Per group present in `state`: its key columns and `__n`, the number of distinct values."""
    out = state.group_by(key_names(n_keys), use_threads=False).aggregate([(VALUE, "count")])
    return out.rename_columns(["__n" if c == f"{VALUE}_count" else c for c in out.column_names])


def save(agg_path: str, states: Dict[int, pa.Table], signature: str, detail: str, position: str,
         keep: tuple = ()) -> Dict[str, str]:
    """Write the states of a refresh that ends at the detail `position`; returns the extraMetadata entry for
    the commit that writes the aggregate rows. Removes the other files of the state directory except `keep`
    (the files of the commit this refresh started from: the table's current state until this one commits)."""
    fs, d = storage_for(agg_path), _dir(agg_path)
    fs.makedirs(d)
    stem = uuid.uuid4().hex[:16]
    names = {}
    for n, t in states.items():
        names[str(n)] = f"{stem}_{n}.parquet"
        pq.write_table(t, os.path.join(d, names[str(n)]), compression="snappy")
    kept = set(names.values()) | {os.path.basename(k) for k in keep}
    for f in fs.listdir(d):
        if f not in kept:
            fs.delete(os.path.join(d, f))
    entry = {"signature": signature, "detail": detail, "position": position, "files": names}
    return {STATE_KEY: json.dumps(entry, sort_keys=True, separators=(",", ":"))}


def current_files(agg_path: str, checkpoint_key: str) -> tuple:
    """The state files the newest checkpoint-carrying commit names (kept while a refresh runs)."""
    raw = (_newest_checkpoint_commit(agg_path, checkpoint_key) or {}).get(STATE_KEY)
    try:
        return tuple(json.loads(raw)["files"].values()) if raw else ()
    except (ValueError, KeyError, TypeError, AttributeError):
        return ()
