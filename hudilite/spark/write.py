"""The Spark write engine: the merge-write planner over DataFrames (tag rows with their file groups through the
indexes, route inserts to new or small file groups, merge each file group in a Python task) that
`hudilite.writer.client.WriteClient` runs for Spark DataFrames (hudilite.writer.local.LocalPlanner is the
driver-local Arrow engine)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import pyarrow as pa
from pyspark import StorageLevel
from pyspark.sql import Window
from pyspark.sql import functions as F
from pyspark.sql.types import BooleanType, IntegerType, LongType, StringType, StructField, StructType

from hudilite.columns import DELETE_COL, FID_COL, KEY_COL, MOVED_COL, PART_COL, SEQ_COL
from hudilite.errors import InvalidWriteError
from hudilite.index.global_index import FOUND_PART, FOUND_PC, explode_found, relocate, slice_keys
from hudilite.options import INPUT_PERSIST
from hudilite.reader.merge import SliceDesc
from hudilite.spark.files import read_parquet_files
from hudilite.spark.schema import spark_to_arrow
from hudilite.spark.session import default_parallelism
from hudilite.storage import capture_bindings, install_bindings
from hudilite.table import HoodieTable
from hudilite.writer.context import WriteContext
from hudilite.writer.handle import stats_table
from hudilite.writer.planning import PlannerBase, merge_group

if TYPE_CHECKING:  # the client runs this planner
    from hudilite.writer.client import WriteClient


class SparkPlanner(PlannerBase):
    """Index tagging, profiling, routing and the per-file-group merge job for insert/upsert/delete/overwrite of
    a Spark DataFrame.

    Tagging and insert assignment are JVM-only (broadcast range joins, hash bucketing); the only Python step
    is the merge, one call per file group.
    """

    def __init__(self, client: WriteClient, table: HoodieTable | None, data_schema: pa.Schema, prepared):
        super().__init__(client.wo, table, data_schema)
        self.spark = client.spark
        self.prepared = prepared
        self.tagged = None
        self.persisted = False

    def profile(self) -> None:
        wo = self.wo
        self.load_slices()
        if self.global_lookup:
            self.prepared = self._globalize(self.prepared)
        tagged = self.prepared.withColumn(FID_COL, F.lit(None).cast("string")) if self.overwrite \
            else self._tag(self.prepared)
        # The profile reads only the key columns (column pruning); the write pass recomputes the input. Persisting
        # instead costs more for cheap inputs; `hoodie.write.input.persist=true` opts in for expensive ones.
        self.persisted = wo.get(INPUT_PERSIST)
        self.tagged = tagged.persist(StorageLevel.MEMORY_AND_DISK) if self.persisted else tagged
        pcf = wo.precombine_field
        null_pc = (F.col(f"`{pcf}`").isNull() & ~F.col(DELETE_COL)) if (pcf and pcf in self.prepared.columns) \
            else F.lit(False)
        rows = self.tagged.groupBy(F.col(PART_COL).alias("part")).agg(
            F.count(F.lit(1)).alias("n"),
            F.sum(F.col(KEY_COL).isNull().cast("long")).alias("null_keys"),
            F.sum(null_pc.cast("long")).alias("null_pc"),
            F.sum((F.col(FID_COL).isNull() & ~F.col(DELETE_COL)).cast("long")).alias("inserts"),
        ).collect()
        try:
            self.check_profile([r.asDict() for r in rows])
        except InvalidWriteError:
            self.release()
            raise

    def release(self) -> None:
        if self.tagged is not None and self.persisted:
            self.tagged.unpersist()
        self.tagged = None

    # ------------------------------------------------------------------------------------------
    def _globalize(self, rows):
        """Global index (hudilite/index/global_index.py) in Spark: one row per key (the batch's latest), the
        stored keys of the files whose key ranges cover incoming keys (a broadcast range join picks the files,
        one task per file reads them), joined to the rows by key; `relocate` assigns the partitions."""
        wo, spark = self.wo, self.spark
        pcf = wo.precombine_field if wo.precombine_field in rows.columns else None
        order = ([F.col(f"`{pcf}`").desc_nulls_last()] if pcf else []) + [F.col(SEQ_COL).desc()]
        rows = (rows.withColumn("_hl_rn", F.row_number().over(Window.partitionBy(KEY_COL).orderBy(*order)))
                .filter(F.col("_hl_rn") == 1).drop("_hl_rn"))
        numeric = self.index.numeric_key
        kt = LongType() if numeric else StringType()
        key = F.col(f"`{numeric}`").cast("long") if numeric else F.col(KEY_COL)
        ranges = [r for r in self.index.files() if r.path]
        hit = {i for i, r in enumerate(ranges) if r.lo is None}
        known = [(i, r.lo, r.hi) for i, r in enumerate(ranges) if r.lo is not None]
        if known:
            rdf = spark.createDataFrame(known, StructType([StructField("_r_i", IntegerType()),
                                                           StructField("_r_lo", kt), StructField("_r_hi", kt)]))
            hit |= {r[0] for r in rows.select(key.alias("_k")).join(
                F.broadcast(rdf), (F.col("_k") >= F.col("_r_lo")) & (F.col("_k") <= F.col("_r_hi")))
                .select("_r_i").distinct().collect()}
        by_id = {(s.partition, s.file_id): s for s in self.slices}
        descs = [SliceDesc.of(by_id[(ranges[i].partition, ranges[i].file_id)]).to_json() for i in sorted(hit)
                 if (ranges[i].partition, ranges[i].file_id) in by_id]
        pc_type = rows.schema[pcf].dataType if pcf else StringType()
        found_schema = StructType([StructField("key", kt), StructField(FOUND_PART, StringType()),
                                   StructField(FOUND_PC, pc_type)])
        found_arrow = spark_to_arrow(found_schema)
        key_col, spec = numeric or KEY_COL, self.merge_spec()
        bindings = capture_bindings(self.table.base_path)

        def keys_task(batches):
            install_bindings(bindings)
            for b in batches:
                for d in b.column(0).to_pylist():
                    t = slice_keys(SliceDesc.from_json(d), key_col, pcf, spec)
                    yield from t.cast(found_arrow).to_batches()

        found = (spark.createDataFrame([(d,) for d in descs], "d string").repartition(max(len(descs), 1))
                 .mapInArrow(keys_task, found_schema)) if descs else spark.createDataFrame([], found_schema)
        agg = found.groupBy(F.col("key").alias("_hl_gk")).agg(
            F.collect_list(F.struct(F.col(FOUND_PART), F.col(FOUND_PC))).alias("_hl_found"))
        joined = rows.join(agg, key == F.col("_hl_gk"), "left").drop("_hl_gk")
        out = StructType([StructField(f.name, f.dataType, True) for f in rows.schema.fields]
                         + [StructField(MOVED_COL, BooleanType(), False)])
        choice, event_time = self.choice, bool(wo.precombine_field)

        def relocate_task(batches):
            install_bindings(bindings)
            for b in batches:
                t, found_rows = explode_found(pa.Table.from_batches([b]), "_hl_found")
                yield from relocate(t, found_rows, choice, pcf, event_time).to_batches()

        return joined.mapInArrow(relocate_task, out)

    def _tag(self, rows):
        """Add FID_COL: the file group holding (or whose key range covers) each row's key, else null."""
        disjoint, exact = self.index.split_partitions()
        parts: list = []
        if disjoint:
            numeric = self.index.numeric_key
            kt = LongType() if numeric else StringType()
            rdf = self.spark.createDataFrame(
                [(r.partition, r.file_id, r.lo, r.hi) for r in disjoint],
                StructType([StructField("_r_part", StringType()), StructField("_r_fid", StringType()),
                            StructField("_r_lo", kt), StructField("_r_hi", kt)]))
            key = F.col(f"`{numeric}`").cast("long") if numeric else F.col(KEY_COL)
            a = rows.filter(~F.col(PART_COL).isin(list(exact))) if exact else rows
            a = (a.join(F.broadcast(rdf), (F.col(PART_COL) == F.col("_r_part"))
                        & (key >= F.col("_r_lo")) & (key <= F.col("_r_hi")), "left")
                 .withColumnRenamed("_r_fid", FID_COL).drop("_r_part", "_r_lo", "_r_hi"))
            parts.append(a)
        elif not exact:
            parts.append(rows.withColumn(FID_COL, F.lit(None).cast("string")))
        if exact:
            files = [r.path for r in self.index.files(exact) if r.path]
            name = F.col("_hl_file")
            key_schema = StructType([StructField(KEY_COL, StringType()), StructField(PART_COL, StringType())])
            keys = (read_parquet_files(self.spark, key_schema, files, meta={"file_name": "_hl_file"})
                    .select(F.col(KEY_COL).alias("_k"), F.col(PART_COL).alias("_p"),
                            F.substring_index(name, "_", 1).alias(FID_COL), name))
            if self.mor:  # a key in several base files: the newest one owns it (the owner rule, writer/planning.py)
                inst = F.substring_index(F.substring_index(name, "_", -1), ".", 1)
                keys = (keys.select("_k", "_p", F.struct(inst.alias("i"), F.col(FID_COL).alias("f")).alias("_o"))
                        .groupBy("_k", "_p").agg(F.max("_o").getField("f").alias(FID_COL)))
            else:
                keys = keys.drop("_hl_file")
            b = (rows.filter(F.col(PART_COL).isin(list(exact)))
                 .join(keys, (F.col(KEY_COL) == F.col("_k")) & (F.col(PART_COL) == F.col("_p")), "left")
                 .drop("_k", "_p"))
            parts.append(b)
            if not disjoint:  # rows of partitions without files
                parts.append(rows.filter(~F.col(PART_COL).isin(list(exact)))
                             .withColumn(FID_COL, F.lit(None).cast("string")))
        out = parts[0]
        for p in parts[1:]:
            out = out.unionByName(p)
        return out

    def _route(self, buckets):
        """Rows with a file group keep it; rows of new keys are spread over their partition's buckets by a hash
        of the key, deletes included (all rows of one key meet in one task, where the batch's latest row per key
        decides: a new key inserted and then deleted in one batch stays absent); deletes of new keys in a
        partition without inserts are dropped."""
        brows = []
        for part, bs in buckets.items():
            total = sum(w for _, w in bs)
            start = 0
            for fid, w in bs:
                brows.append((part, fid, start, start + w, total))
                start += w
        if not brows:
            return self.tagged.filter(F.col(FID_COL).isNotNull())
        bdf = self.spark.createDataFrame(brows, StructType([
            StructField("_b_part", StringType()), StructField("_b_fid", StringType()),
            StructField("_b_lo", LongType()), StructField("_b_hi", LongType()), StructField("_b_total", LongType())]))
        # one pass over the input: untagged inserts pick up their bucket's group, tagged rows keep theirs
        w = F.pmod(F.xxhash64(F.col(KEY_COL)), F.col("_b_total"))
        cond = (F.col(FID_COL).isNull() & (F.col(PART_COL) == F.col("_b_part"))
                & (w >= F.col("_b_lo")) & (w < F.col("_b_hi")))
        return (self.tagged.join(F.broadcast(bdf), cond, "left")
                .withColumn(FID_COL, F.coalesce(F.col(FID_COL), F.col("_b_fid")))
                .drop("_b_part", "_b_fid", "_b_lo", "_b_hi", "_b_total")
                .filter(F.col(FID_COL).isNotNull()))

    def execute(self, ctx: WriteContext):
        buckets, new_groups = self.insert_buckets()
        lookup = self.targets(new_groups)
        routed = self._route(buckets)
        mor, block_format = self.mor, self.block_format
        n_tasks = max(1, min(len(lookup), 4 * default_parallelism(self.spark)))
        bindings = capture_bindings(ctx.base_path)

        def merge(key, table):  # no type hints: Spark picks the (key, pyarrow.Table) form
            install_bindings(bindings)
            fid = key[0].as_py()
            return stats_table(merge_group(ctx, lookup[fid], fid, table, mor, block_format))

        stats = collect_stats(routed.repartition(n_tasks, FID_COL).groupBy(FID_COL)
                               .applyInArrow(merge, stat_struct())) if lookup else []
        return stats, self.replaced()


def stat_struct():
    return StructType([StructField("stat", StringType())])


def collect_stats(df) -> list[dict]:
    return [json.loads(r["stat"]) for r in df.collect()]
