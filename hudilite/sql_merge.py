"""SQL MERGE behaviours as the rows of ONE upsert commit (Spark DataFrames in, DataFrames out).

A Hudi upsert replaces each stored row by the incoming row of its key. SQL MERGE (and dbt's incremental
strategies built on it) can do more: leave stored rows that fail a predicate alone, update only some columns,
delete every stored row of a key and insert the batch's rows beside each other. Each function here turns a
batch into the rows whose plain upsert has that effect, so the result still commits atomically.
"""

from __future__ import annotations

import datetime as dt
import uuid
from typing import List, Sequence

from pyspark.sql import Window
from pyspark.sql import functions as F

_DEST = "DBT_INTERNAL_DEST"  # the stored table's alias in predicates (dbt's name, which its users write)


def _all(predicates: Sequence[str]):
    return F.coalesce(F.expr(" AND ".join(f"({p})" for p in predicates)), F.lit(False))


def protect(df, target, record_key: Sequence[str], predicates: Sequence[str]):
    """Rows of `df` whose key names a stored row of `target` failing `predicates` are dropped: that row is
    protected (a Hudi table holds one row per key, so the new one cannot be added beside it)."""
    t = target.alias(_DEST)
    protected = t.filter(~_all(predicates)).select(
        *[F.col(f"{_DEST}.`{k}`").alias(f"__hl_k{i}") for i, k in enumerate(record_key)])
    on = [df[f"`{k}`"].eqNullSafe(protected[f"__hl_k{i}"]) for i, k in enumerate(record_key)]
    return df.join(protected, on=on, how="left_anti")


def keep_stored(df, target, record_key: Sequence[str], columns: Sequence[str]):
    """A partial update: rows of `df` whose key is stored in `target` take the stored values of `columns`; new
    rows are inserted whole. A column of `columns` that `target` lacks (the batch adds it) is null in the
    stored rows, as after dbt's ALTER TABLE ADD COLUMNS: matched rows get null there, not the batch's value.
    (The writer's `hoodie.write.partial.update` keeps stored values of columns missing from the batch, so new
    rows would get nulls there, and it is copy-on-write only.)"""
    if not columns:
        return df
    tcols = {c.lower(): c for c in target.columns}
    stored = [c for c in columns if c.lower() in tcols]
    t = target.select(*[F.col(f"`{tcols[k.lower()]}`").alias(f"__hl_k{i}") for i, k in enumerate(record_key)],
                      *[F.col(f"`{tcols[c.lower()]}`").alias(f"__hl_v{j}") for j, c in enumerate(stored)],
                      F.lit(True).alias("__hl_matched"))
    on = [df[f"`{k}`"].eqNullSafe(t[f"__hl_k{i}"]) for i, k in enumerate(record_key)]
    j = df.join(t, on=on, how="left")
    idx = {c: n for n, c in enumerate(stored)}
    kept = set(columns)

    def value(c):
        if c not in kept:
            return df[f"`{c}`"]
        old = F.col(f"__hl_v{idx[c]}") if c in idx else F.lit(None)
        return F.when(F.col("__hl_matched"), old.cast(df.schema[c].dataType)).otherwise(F.col(f"`{c}`")).alias(c)

    return j.select(*[value(c) for c in df.columns])


def delete_insert(batch, deleted, target, keys: Sequence[str], predicates: Sequence[str], row_id: str,
                  is_deleted: str):
    """delete + insert on a table keyed by a row id (`row_id`), as upsert rows: every stored row whose `keys`
    equal a batch row's (and that satisfies `predicates`) is deleted, every batch row not flagged by the
    boolean column `deleted` is inserted under a new row id. SQL semantics: keys compare with `=` (null keys
    never match), duplicate keys in the batch are all inserted, a protected stored row stays beside the new
    one. Returns the batch's columns, `row_id` and the delete flag `is_deleted`."""
    tcols = {c.lower(): c for c in target.columns}
    kb = batch.select(*[F.col(f"`{k}`").alias(f"__hl_k{i}") for i, k in enumerate(keys)]).distinct()
    dest = target.alias(_DEST)
    if predicates:
        dest = dest.filter(_all(predicates))
    on = [F.col(f"{_DEST}.`{tcols[k.lower()]}`") == kb[f"__hl_k{i}"] for i, k in enumerate(keys)]
    data = [c for c in batch.columns if c != deleted]
    stored = [c for c in data if c.lower() in tcols]
    gone = dest.join(kb, on=on, how="left_semi").select(
        F.col(f"{_DEST}.`{row_id}`").alias(row_id),
        *[F.col(f"{_DEST}.`{tcols[c.lower()]}`").cast(batch.schema[c].dataType).alias(c) for c in stored],
        *[F.lit(None).cast(batch.schema[c].dataType).alias(c) for c in data if c not in stored],
        F.lit(True).alias(is_deleted))
    new = with_row_id(batch.filter(~F.col(deleted)).select(*[F.col(f"`{c}`") for c in data]), row_id)
    return gone.unionByName(new.withColumn(is_deleted, F.lit(False)).select(*gone.columns))


def with_row_id(df, column: str):
    """`df` with a unique, increasing key in `column`: `<UTC time>-<random>-<row id>` (increasing keys keep the
    range index from ever looking inside old files)."""
    prefix = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%d%H%M%S%f") + "-" + uuid.uuid4().hex[:6]
    return df.withColumn(column, F.concat(F.lit(prefix + "-"),
                                          F.lpad(F.monotonically_increasing_id().cast("string"), 20, "0")))


def latest_per_key(df, record_key: List[str], precombine):
    """Each key's newest row (highest `precombine` value, then latest arrival), deletes included.

    The writer drops a delete whose key is not stored yet before it de-duplicates the batch, so a key inserted
    and deleted in the same batch would be inserted: de-duplicating first gives the newest event its say."""
    seq, rn = "__hl_arrival", "__hl_rn"
    order = ([F.col(f"`{precombine}`").desc_nulls_last()] if precombine else []) + [F.col(seq).desc()]
    w = Window.partitionBy(*[F.col(f"`{k}`") for k in record_key]).orderBy(*order)
    return (df.withColumn(seq, F.monotonically_increasing_id()).withColumn(rn, F.row_number().over(w))
            .filter(F.col(rn) == 1).drop(seq, rn))
