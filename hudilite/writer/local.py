"""Writes of Arrow data without Spark: `hudilite.write(pyarrow_table, ...)` plans and merges in this process.

For small batches (an aggregate table's changed groups, a few thousand corrections, a seed) the fixed cost of
Spark jobs (tagging, profiling, routing and merging are one job each) exceeds the work itself. The same write
runs here on the driver: the same validation, key-range index, insert sizing, per-file-group merge
(`hudilite.writer.handle` / `log_handle`, one thread per group), markers, transaction and commit as a Spark
write - only the row movement is pyarrow instead of Spark jobs. The batch is held in memory: use a Spark
DataFrame for large inputs.

Record keys and partition paths are computed with pyarrow where they are provably the strings Spark computes
(`hudilite.keygen.arrow_keygen`: integer and string keys, integer/string/date partition values); other key or
partition types are rejected with an error naming the column (write a Spark DataFrame instead).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from hudilite.columns import DELETE_COL, FID_COL, IS_DELETED_FIELD, KEY_COL, PART_COL, SEQ_COL
from hudilite.errors import InvalidWriteError, damaged_file
from hudilite.index.global_index import find_local, relocate
from hudilite.keygen import KeySpec, arrow_keygen
from hudilite.schema import SchemaError, canonical
from hudilite.storage import storage_for
from hudilite.writer.context import WriteContext
from hudilite.writer.handle import StreamingBaseFileWriter, dedup_latest
from hudilite.writer.planning import PlannerBase, merge_group

_MAX_THREADS = 4


def as_table(data) -> pa.Table:
    """Arrow input (Table, RecordBatch or a list of batches) as a Table with storage types (dictionaries
    decoded, types Hudi has no type for widened: what Spark would hand over)."""
    if isinstance(data, pa.RecordBatch):
        data = pa.Table.from_batches([data])
    elif isinstance(data, (list, tuple)):
        data = pa.Table.from_batches(list(data))
    cols, fields = [], []
    for f, col in zip(data.schema, data.columns):
        try:
            t = canonical(f.type, f.name)
        except SchemaError as e:
            raise InvalidWriteError(str(e)) from None
        if t != col.type:
            try:
                col = col.cast(t)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
                raise InvalidWriteError(f"column {f.name!r}: cannot store {f.type} as {t}: {e}") from None
        cols.append(col)
        fields.append(pa.field(f.name, t, f.nullable))
    return pa.Table.from_arrays(cols, schema=pa.schema(fields))


def prepare_rows(data: pa.Table, spec: KeySpec, delete_operation: bool) -> pa.Table:
    """The batch plus record key, partition path, delete flag and arrival order (as `_prepare_rows` adds in
    Spark)."""
    keygen = arrow_keygen(spec, data.schema)
    if keygen is None:
        fields = list(spec.record_key_fields) + list(spec.partition_fields)
        types = ", ".join(f"{n} {data.schema.field(n).type}" for n in fields if n in data.schema.names)
        raise InvalidWriteError(
            f"Arrow input: record key / partition columns ({types}) must be integer or string columns (partition "
            "values also dates) for a write without Spark; write a Spark DataFrame for other key types")
    n = data.num_rows
    if delete_operation:
        delete = pa.array(np.ones(n, dtype=bool))
    elif IS_DELETED_FIELD in data.column_names:
        delete = pc.fill_null(data.column(IS_DELETED_FIELD).cast(pa.bool_()), False)
    else:
        delete = pa.array(np.zeros(n, dtype=bool))
    out = keygen(data)
    return out.append_column(DELETE_COL, delete).append_column(SEQ_COL, pa.array(np.arange(n, dtype=np.int64)))


class LocalPlanner(PlannerBase):
    """Tagging, profile, routing and the merges of one Arrow batch, in this process."""

    def __init__(self, client, table, data_schema: pa.Schema, prepared: pa.Table):
        super().__init__(client.wo, table, data_schema)
        self.rows = prepared

    def profile(self) -> None:
        self.load_slices(self.batch_scope(pc.unique(self.rows.column(PART_COL)).to_pylist()))
        rows = self.rows
        if self.global_lookup:
            self.rows = rows = self._globalize(rows)
        fid = pa.nulls(rows.num_rows, pa.string()) if self.overwrite else self._tag(rows)
        self.rows = rows = rows.append_column(FID_COL, fid)
        is_del = rows.column(DELETE_COL)
        pcf = self.wo.precombine_field
        null_pc = pc.and_(pc.is_null(rows.column(pcf)), pc.invert(is_del)) if pcf and pcf in rows.column_names \
            else pa.array(np.zeros(rows.num_rows, dtype=bool))
        counted = pa.table({
            "part": rows.column(PART_COL), "null_key": pc.is_null(rows.column(KEY_COL)), "null_pc": null_pc,
            "insert": pc.and_(pc.is_null(rows.column(FID_COL)), pc.invert(is_del))})
        agg = counted.group_by("part", use_threads=False).aggregate(
            [([], "count_all"), ("null_key", "sum"), ("null_pc", "sum"), ("insert", "sum")])
        self.check_profile([{"part": r["part"], "n": r["count_all"], "null_keys": r["null_key_sum"] or 0,
                             "null_pc": r["null_pc_sum"] or 0, "inserts": r["insert_sum"] or 0}
                            for r in agg.to_pylist()])

    def release(self) -> None:
        pass

    def _globalize(self, rows: pa.Table) -> pa.Table:
        """Global index: one row per key (the batch's latest), each sent to the partition the index decides."""
        rows = dedup_latest(rows, self.dedup_settings())
        found = find_local(rows, self.index, self.slices, self.wo.precombine_field, self.merge_spec())
        return relocate(rows, found, self.choice, self.wo.precombine_field, bool(self.wo.precombine_field))

    def _tag(self, rows: pa.Table) -> pa.Array:
        """The file group holding (or whose key range covers) each row's key, else null - the same rule as the
        Spark planner's range join / exact key join."""
        disjoint, exact = self.index.split_partitions()
        ranges: dict[str, list] = {}
        for r in disjoint:
            ranges.setdefault(r.partition, []).append(r)
        parts = rows.column(PART_COL)
        out = np.full(rows.num_rows, None, dtype=object)
        numeric = self.index.numeric_key
        valid = pc.is_valid(rows.column(KEY_COL))  # null keys are rejected by the profile
        for part in pc.unique(parts).to_pylist():
            if part not in ranges and part not in exact:
                continue  # no files in the partition: inserts
            idx = np.nonzero(pc.and_(pc.equal(parts, part), valid).to_numpy(zero_copy_only=False))[0]
            if part in ranges:
                rs = sorted(ranges[part], key=lambda r: r.lo)
                keys = rows.column(numeric).cast(pa.int64()) if numeric else rows.column(KEY_COL)
                keys = keys.take(pa.array(idx)).to_numpy(zero_copy_only=False)
                lo = np.array([r.lo for r in rs], dtype=keys.dtype)
                hi = np.array([r.hi for r in rs], dtype=keys.dtype)
                i = np.searchsorted(lo, keys, side="right") - 1
                ok = i >= 0
                ok[ok] = keys[ok] <= hi[i[ok]]
                fids = np.array([r.file_id for r in rs], dtype=object)
                out[idx[ok]] = fids[i[ok]]
            else:
                keys = rows.column(KEY_COL).take(pa.array(idx))
                # oldest base file first: the newest one holding a key owns it (the owner rule, writer/planning.py)
                for r in sorted(self.index.by_partition[part], key=lambda r: r.base_instant):
                    if not r.path:
                        continue
                    with damaged_file(r.path):
                        stored = storage_for(r.path).read_parquet(r.path, columns=[KEY_COL]).column(KEY_COL)
                    hit = pc.is_in(keys, value_set=stored.combine_chunks()).to_numpy(zero_copy_only=False)
                    out[idx[hit]] = r.file_id
        return pa.array(out, pa.string())

    def execute(self, ctx: WriteContext):
        buckets, new_groups = self.insert_buckets()
        lookup = self.targets(new_groups)
        rows = self.rows
        fid = rows.column(FID_COL).to_numpy(zero_copy_only=False)
        untagged = np.array([f is None for f in fid], dtype=bool)
        # rows of new keys: the batch's latest row per key decides (a new key inserted and then deleted stays
        # absent); the surviving inserts go to their partition's buckets
        inserts = None
        if untagged.any():
            # per (partition, key): one key in two partitions is two records under a partition-scoped index,
            # as the Spark write's per-partition buckets keep them (a global index left one row per key)
            inserts = dedup_latest(rows.filter(pa.array(untagged)), ctx, per_partition=True)
            inserts = inserts.filter(pc.invert(inserts.column(DELETE_COL)))
        groups: dict[str, list[pa.Table]] = {}
        tagged = rows.filter(pa.array(~untagged))
        if tagged.num_rows:
            tf = tagged.column(FID_COL)
            for f in pc.unique(tf).to_pylist():
                groups.setdefault(f, []).append(tagged.filter(pc.equal(tf, f)))
        if inserts is not None and inserts.num_rows:
            ip = inserts.column(PART_COL)
            for part, bs in buckets.items():
                sub = inserts.filter(pc.equal(ip, part))
                start = 0
                for f, w in bs:
                    if start < sub.num_rows:
                        groups.setdefault(f, []).append(sub.slice(start, w))
                    start += w
        work = [(f, pa.concat_tables(ts) if len(ts) > 1 else ts[0]) for f, ts in groups.items() if f in lookup]
        mor, block_format = self.mor, self.block_format

        def one(item):
            f, t = item
            return merge_group(ctx, lookup[f], f, t.drop_columns([FID_COL]), mor, block_format)

        if len(work) <= 1:
            results = [one(w) for w in work]
        else:
            with ThreadPoolExecutor(max_workers=min(_MAX_THREADS, len(work))) as pool:
                results = list(pool.map(one, work))
        return [s for r in results for s in r], self.replaced()


def bulk_insert(prepared: pa.Table, ctx: WriteContext) -> list[dict]:
    """Bulk insert of an Arrow batch: its rows stream into new base files (deletes dropped)."""
    nulls = prepared.column(KEY_COL).null_count
    if nulls:
        raise InvalidWriteError(ctx.null_key_message(nulls))
    w = StreamingBaseFileWriter(ctx)
    w.write(prepared.filter(pc.invert(prepared.column(DELETE_COL))).drop_columns([DELETE_COL, SEQ_COL]))
    return w.close()
