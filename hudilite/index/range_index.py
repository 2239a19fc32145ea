"""Key-range index: per latest base file, the [min, max] of its record keys, from parquet footers.

Lookups are scoped to the record's partition (a record key is unique within a partition, as in Hudi's
non-global indexes). A key covered by exactly one file's range goes to that file group (the merge task
finds out whether it is an update or an insert); a key covered by several ranges is *ambiguous* and is
resolved by an exact key lookup; a key covered by none is a new insert. Auto-increment and time-ordered keys
give disjoint ranges, so the exact lookup is rarely needed.

Numeric single-column keys use the key column's own parquet statistics (numeric order); other keys use
`_hoodie_record_key` (string order).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from hudilite.file_group import FileSlice
from hudilite.writer.context import KEY_COL, PART_COL


@dataclass
class FileRange:
    partition: str
    file_id: str
    base_instant: str
    path: str
    size: int
    rows: int
    lo: object = None  # None: unknown (always a candidate)
    hi: object = None


def _col_minmax(md: pq.FileMetaData, col: str):
    idx = None
    for i in range(md.num_columns):
        if md.schema.column(i).name == col and md.schema.column(i).path == col:
            idx = i
            break
    if idx is None:
        return None, None
    lo = hi = None
    for rg in range(md.num_row_groups):
        st = md.row_group(rg).column(idx).statistics
        if st is None or not st.has_min_max:
            return None, None
        lo = st.min if lo is None else min(lo, st.min)
        hi = st.max if hi is None else max(hi, st.max)
    return lo, hi


@dataclass
class RangeIndex:
    numeric_key: str | None  # the single numeric key column, or None for string keys
    by_partition: dict[str, list[FileRange]] = field(default_factory=dict)

    @classmethod
    def build(cls, slices: list[FileSlice], record_key_fields: list[str], data_schema: pa.Schema) -> "RangeIndex":
        numeric = None
        if len(record_key_fields) == 1 and record_key_fields[0] in data_schema.names:
            t = data_schema.field(record_key_fields[0]).type
            if pa.types.is_integer(t):
                numeric = record_key_fields[0]

        def one(sl: FileSlice) -> FileRange | None:
            bf = sl.base_file
            if bf is None:
                return FileRange(sl.partition, sl.file_id, sl.base_instant, "", 0, 0)
            md = pq.read_metadata(bf.path)
            lo, hi = _col_minmax(md, numeric) if numeric else _col_minmax(md, KEY_COL)
            if not numeric and lo is None:
                kv = md.metadata or {}
                if b"hoodie_min_record_key" in kv:
                    lo, hi = kv[b"hoodie_min_record_key"].decode(), kv[b"hoodie_max_record_key"].decode()
            return FileRange(sl.partition, sl.file_id, sl.base_instant, bf.path, bf.size, md.num_rows, lo, hi)

        with ThreadPoolExecutor(max_workers=8) as pool:
            ranges = [r for r in pool.map(one, slices) if r is not None]
        idx = cls(numeric)
        for r in ranges:
            idx.by_partition.setdefault(r.partition, []).append(r)
        return idx

    def tag(self, batch: pa.RecordBatch) -> tuple[pa.Array, pa.Array]:
        """(file id or null, ambiguous flag) for every row of `batch`."""
        n = batch.num_rows
        fids = np.full(n, None, dtype=object)
        amb = np.zeros(n, dtype=bool)
        parts = batch.column(batch.schema.get_field_index(PART_COL)).to_numpy(zero_copy_only=False)
        if self.numeric_key:
            keys = batch.column(batch.schema.get_field_index(self.numeric_key)).to_numpy(zero_copy_only=False)
        else:
            keys = batch.column(batch.schema.get_field_index(KEY_COL)).to_numpy(zero_copy_only=False)
        for p in np.unique(parts.astype(str)) if n else []:
            ranges = self.by_partition.get(p)
            if not ranges:
                continue
            rows = np.nonzero(parts == p)[0]
            k = keys[rows]
            known = [r for r in ranges if r.lo is not None]
            unknown = [r for r in ranges if r.lo is None]
            if known:
                lo = np.array([r.lo for r in known], dtype=object if not self.numeric_key else np.int64)
                hi = np.array([r.hi for r in known], dtype=object if not self.numeric_key else np.int64)
                kk = k if self.numeric_key else k.astype(object)
                cover = (lo[None, :] <= kk[:, None]) & (kk[:, None] <= hi[None, :])
                count = cover.sum(axis=1) + len(unknown)
                first = cover.argmax(axis=1)
            else:
                count = np.full(len(rows), len(unknown))
                first = np.zeros(len(rows), dtype=np.int64)
            single = count == 1
            if known:
                single_known = single & (cover.sum(axis=1) == 1)
                names = np.array([r.file_id for r in known], dtype=object)
                fids[rows[single_known]] = names[first[single_known]]
                if unknown:
                    fids[rows[single & ~single_known]] = unknown[0].file_id
            elif unknown:
                fids[rows[single]] = unknown[0].file_id
            amb[rows[count > 1]] = True
        return pa.array(fids, pa.string()), pa.array(amb, pa.bool_())

    def files(self, partitions=None) -> list[FileRange]:
        out = []
        for p, rs in self.by_partition.items():
            if partitions is None or p in partitions:
                out.extend(rs)
        return out
