"""Key-range index: per latest base file, the [min, max] of its record keys, from parquet footers.

Lookups are scoped to the record's partition (a record key is unique within a partition, as in Hudi's non-global
indexes); `global_index.py` first sends each row of a global write to the partition holding its key. In a partition
whose files have pairwise disjoint key ranges, a key covered by one file's range goes to that file group (the merge
task finds out whether it is an update or an insert) and a key covered by none is a new insert; this is a broadcast
range join in the JVM. Partitions with overlapping or unknown ranges get an exact key lookup (a join against the
keys stored in their files). Auto-increment and time-ordered keys give disjoint ranges, so the exact lookup is
rarely needed.

Numeric single-column keys use the key column's own parquet statistics (numeric order); other keys use
`_hoodie_record_key` (string order).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.parquet as pq

from hudilite.columns import KEY_COL
from hudilite.errors import damaged_file
from hudilite.file_group import FileSlice
from hudilite.storage import storage_for


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
            with damaged_file(bf.path):
                md = storage_for(bf.path).parquet_metadata(bf.path, size=bf.size or None)
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

    def split_partitions(self) -> tuple[list[FileRange], set[str]]:
        """(ranges of partitions whose files have known, pairwise disjoint key ranges; partitions needing
        an exact key lookup because ranges overlap or are unknown)."""
        disjoint: list[FileRange] = []
        exact: set[str] = set()
        for part, rs in self.by_partition.items():
            rs = [r for r in rs if r.path]
            if any(r.lo is None for r in rs):
                exact.add(part)
                continue
            rs.sort(key=lambda r: r.lo)
            if any(rs[i].lo <= rs[i - 1].hi for i in range(1, len(rs))):
                exact.add(part)
            else:
                disjoint.extend(rs)
        return disjoint, exact

    def files(self, partitions=None) -> list[FileRange]:
        out = []
        for p, rs in self.by_partition.items():
            if partitions is None or p in partitions:
                out.extend(rs)
        return out
