"""Value multisets that let an aggregate table fold min / max / count(distinct) from changes alone.

An aggregate refresh folds the detail's change images into the stored per-group state:
count/sum/avg fold exactly from the group's stored numbers. min, max and count(distinct) cannot: whether a
retracted value was the group's only minimum, or the last row holding a distinct value, depends on the other
rows of the group. So each such item keeps, per group, values with the number of detail rows holding them:

* count(distinct x): every non-null value of the group (a value enters the group when its count goes
  0 -> 1, leaves it at 1 -> 0); the item is the number of values.
* min(x) / max(x): a bounded buffer, the `BUFFER` smallest (largest) distinct values of the group with their
  counts. Invariant: the buffer holds every value of the group up to its largest (from its smallest) entry,
  its bound; an empty buffer means the group holds no non-null value. A change whose value lies beyond the
  bound is ignored (it cannot be the extreme while the buffer holds a value), one within it is applied; the
  item is the buffer's smallest (largest) value. Only a group whose buffer a refresh empties while rows remain
  is read again from the detail snapshot — a group must lose its `BUFFER` smallest values between two
  refreshes for that.

The state belongs to the aggregate table: one parquet file per item under

    <aggregate table>/.hoodie/.aux/hudilite_agg_state/<id>_<item>.parquet

(columns `__k0..` the group key values, `__v` the value, `__cnt` the rows holding it, > 0), named in the
extraMetadata of the commit that writes the aggregate (`hudilite.aggregate.state`: the files, the query
signature and the detail position they reflect). State and aggregate rows commit together, so the state is
used only when the newest checkpoint-carrying commit names it for exactly the position the refresh starts
from; anything else (a Spark-path commit, a missing or unreadable file) makes the refresh build it anew from
the detail snapshot. Files no commit will name (failed or superseded refreshes) are removed when the next
state is saved. Other engines ignore `.hoodie/.aux`.
"""

from __future__ import annotations

import datetime
import json
import logging
import os
import uuid
from typing import Dict, List, Optional

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from hudilite import auxfiles, checkpoints
from hudilite.storage.local import storage_for

log = logging.getLogger("hudilite.aggregate")

STATE_KEY = "hudilite.aggregate.state"
DIR = auxfiles.relative(auxfiles.AGG_STATE)
VALUE, COUNT = "__v", "__cnt"
BUFFER = 16  # distinct values kept per group for min / max
DISTINCT = "distinct"  # the kind of a count(distinct) item; min / max items are kinded by their function


def key_names(n_keys: int) -> List[str]:
    return [f"__k{i}" for i in range(n_keys)]


def state_schema(key_types: List[pa.DataType], value_type: pa.DataType) -> pa.Schema:
    return pa.schema([pa.field(k, t) for k, t in zip(key_names(len(key_types)), key_types)]
                     + [pa.field(VALUE, value_type), pa.field(COUNT, pa.int64())])


def null_safe_keys(t: pa.Table, names: List[str]):
    """`t` with join columns for the key columns `names` that match a null key to a null key (Arrow joins never
    match nulls): each key with nulls filled (`__kf<i>`) and its null flag (`__kn<i>`); and their names."""
    for i, c in enumerate(names):
        col = t.column(c)
        if pa.types.is_dictionary(col.type):
            col = col.cast(col.type.value_type)
        t = t.append_column(f"__kf{i}", pc.fill_null(col, _filler(col.type)))
        t = t.append_column(f"__kn{i}", pc.is_null(col))
    return t, [f"__k{x}{i}" for i in range(len(names)) for x in "fn"]


def _filler(t: pa.DataType) -> pa.Scalar:
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return pa.scalar("", t)
    if pa.types.is_boolean(t):
        return pa.scalar(False)
    if pa.types.is_date32(t):
        return pa.scalar(datetime.date(1970, 1, 1), t)
    return pa.scalar(0, t)


# ---- building and folding --------------------------------------------------------------------------------
def _summed(t: pa.Table, n_keys: int) -> pa.Table:
    """Weights (`__cnt`) summed per (group keys, value); rows of a null value dropped (min, max and count
    distinct ignore nulls) and pairs whose sum is not positive dropped; dictionary columns decoded."""
    names = key_names(n_keys) + [VALUE]
    t = t.filter(pc.is_valid(t.column(VALUE)))
    s = t.group_by(names, use_threads=False).aggregate([(COUNT, "sum")])
    s = s.rename_columns([COUNT if c == f"{COUNT}_sum" else c for c in s.column_names]).select(names + [COUNT])
    for i, f in enumerate(s.schema):
        if pa.types.is_dictionary(f.type):
            s = s.set_column(i, f.name, s.column(i).cast(f.type.value_type))
    return s.filter(pc.greater(s.column(COUNT), 0))


def _trimmed(t: pa.Table, n_keys: int, kind: str, limit: Optional[int]) -> pa.Table:
    """A min / max state cut to the `limit` (default `BUFFER`) smallest / largest values of each group."""
    if kind == DISTINCT or t.num_rows == 0:
        return t
    limit = limit or BUFFER
    names = key_names(n_keys)
    order = [(c, "ascending") for c in names] + [(VALUE, "ascending" if kind == "min" else "descending")]
    t = t.sort_by(order)
    keyed, jk = null_safe_keys(t, names)
    start = np.zeros(t.num_rows, dtype=bool)
    start[0] = True
    for c in jk:  # a row starts a group where any key differs from the row before
        v = keyed.column(c).to_numpy(zero_copy_only=False)
        start[1:] |= v[1:] != v[:-1]
    idx = np.arange(t.num_rows)
    first = np.maximum.accumulate(np.where(start, idx, 0))
    return t.filter(pa.array(idx - first < limit))


def build(keys: List[pa.ChunkedArray], values, kind: str, limit: Optional[int] = None) -> pa.Table:
    """The state of one item from detail rows (their group keys and values)."""
    cols = dict(zip(key_names(len(keys)), keys))
    cols[VALUE] = values
    cols[COUNT] = pa.repeat(pa.scalar(1, pa.int64()), len(values))
    return _trimmed(_summed(pa.table(cols), len(keys)), len(keys), kind, limit)


def _groups(t: pa.Table, n_keys: int) -> pa.Table:
    return t.group_by(key_names(n_keys), use_threads=False).aggregate([])


def fold(state: pa.Table, keys: List[pa.ChunkedArray], values, sign, kind: str, limit: Optional[int] = None):
    """(`state` with the signed change rows (group keys, value, +1 / -1) applied, the groups whose min / max
    buffer emptied: their key columns). A min / max buffer takes only changes up to its bound."""
    n = len(keys)
    names = key_names(n)
    delta = pa.table({**dict(zip(names, keys)), VALUE: values, COUNT: sign}).cast(state.schema)
    delta = delta.filter(pc.is_valid(delta.column(VALUE)))
    if kind == DISTINCT:
        return _summed(pa.concat_tables([state, delta]), n), None
    bound = state.group_by(names, use_threads=False).aggregate([(VALUE, "max" if kind == "min" else "min")])
    bound, jk = null_safe_keys(bound.rename_columns(names + ["__bound"]), names)
    keyed, _ = null_safe_keys(delta, names)
    keyed = keyed.join(bound.drop_columns(names), jk, join_type="left outer", use_threads=False)
    b, v = keyed.column("__bound"), keyed.column(VALUE)
    within = (pc.less_equal if kind == "min" else pc.greater_equal)(v, b)
    keyed = keyed.filter(pc.or_(pc.is_null(b), pc.fill_null(within, False)))
    new = _summed(pa.concat_tables([state, keyed.select(state.column_names)]), n)
    before, after = null_safe_keys(_groups(state, n), names), null_safe_keys(_groups(new, n), names)
    emptied = before[0].join(after[0].select(after[1]), before[1], join_type="left anti", use_threads=False)
    return _trimmed(new, n, kind, limit), emptied.select(names)


def per_group(state: pa.Table, n_keys: int, kind: str) -> pa.Table:
    """Per group present in `state`: its key columns and `__r`, the item's value (number of distinct values,
    smallest or largest value)."""
    fn = "count" if kind == DISTINCT else kind
    out = state.group_by(key_names(n_keys), use_threads=False).aggregate([(VALUE, fn)])
    return out.rename_columns(["__r" if c == f"{VALUE}_{fn}" else c for c in out.column_names])


# ---- storage ---------------------------------------------------------------------------------------------
def _dir(agg_path: str) -> str:
    return os.path.join(agg_path, DIR)


def stored_entry(agg_path: str) -> Optional[dict]:
    """The state entry (`files`, `signature`, `detail`, `position`) named by the newest checkpoint-carrying
    commit of the aggregate table; None when it names none or an unreadable one."""
    raw = (checkpoints.newest_metadata(agg_path, checkpoints.CHECKPOINT_KEY) or {}).get(STATE_KEY)
    if not raw:
        return None
    try:
        entry = json.loads(raw)
        if not (isinstance(entry, dict) and isinstance(entry.get("files"), dict)):
            raise ValueError("no files")
        return entry
    except ValueError:
        log.warning("aggregate %s: unreadable %s; rebuilding the aggregate state", agg_path, STATE_KEY)
        return None


def load(agg_path: str, entry: Optional[dict], signature: str, detail: str, position: str,
         schemas: Dict[int, pa.Schema]) -> Optional[Dict[int, pa.Table]]:
    """The state of each item (`schemas`: item position among the query's aggregates -> its state schema) as
    of the detail `position`, when the stored `entry` (`stored_entry`) is for that position; else None (build
    it anew)."""
    if entry is None or (entry.get("signature"), entry.get("detail"), entry.get("position")) != (
            signature, detail, position):
        return None
    try:
        files = {int(n): os.path.join(_dir(agg_path), name) for n, name in entry["files"].items()}
    except (ValueError, TypeError):
        return None
    if sorted(files) != sorted(schemas):
        return None
    out = {}
    for n, path in files.items():
        try:
            t = storage_for(path).read_parquet(path)
            if t.column_names != schemas[n].names:
                raise ValueError(f"columns {t.column_names}")
            out[n] = t.cast(schemas[n])
        except (OSError, ValueError, pa.ArrowException) as e:
            log.warning("aggregate %s: state file %s unusable (%s); rebuilding the state", agg_path, path, e)
            return None
    return out


def save(agg_path: str, states: Dict[int, pa.Table], signature: str, detail: str, position: str,
         current: Optional[dict]) -> Dict[str, str]:
    """Write the states of a refresh that ends at the detail `position`; returns the extraMetadata entry for
    the commit that writes the aggregate rows. Removes the other files of the state directory except those of
    `current` (`stored_entry`: the table's state until this refresh commits)."""
    fs, d = storage_for(agg_path), _dir(agg_path)
    fs.makedirs(d)
    stem = uuid.uuid4().hex[:16]
    names = {}
    for n, t in states.items():
        names[str(n)] = f"{stem}_{n}.parquet"
        fs.write_parquet(os.path.join(d, names[str(n)]), [t], fsync=False, compression="snappy")
    kept = set(names.values()) | {os.path.basename(str(k)) for k in (current or {}).get("files", {}).values()}
    for f in fs.listdir(d):
        if f not in kept:
            fs.delete(os.path.join(d, f))
    entry = {"signature": signature, "detail": detail, "position": position, "files": names}
    return {STATE_KEY: json.dumps(entry, sort_keys=True, separators=(",", ":"))}
