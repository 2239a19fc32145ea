"""Record keys and partition paths as Spark column expressions (the same keys as hudilite.keygen computes for
Arrow batches)."""

from __future__ import annotations

from pyspark.sql import functions as F
from pyspark.sql.types import StructType, TimestampType

from hudilite.keygen import DEFAULT_PARTITION, EMPTY_KEY, NULL_KEY, KeySpec

_EPOCH = "TIMESTAMP_NTZ'1970-01-01 00:00:00'"


def _as_string(spec: KeySpec, schema: StructType | None, c: str):
    """The column's string form; a timestamp's as its UTC wall clock when the table says so (`cast(... as string)`
    writes it in the session's time zone): micros since the epoch added to the epoch as a time-zone-free
    timestamp, which is exact where a conversion between zones is not (the hour a clock turns back)."""
    if spec.utc_timestamps and schema is not None and c in schema.fieldNames() \
            and isinstance(schema[c].dataType, TimestampType):
        return F.expr(f"cast(timestampadd(MICROSECOND, unix_micros(`{c}`), {_EPOCH}) as string)")
    return F.col(f"`{c}`").cast("string")

def record_key_expr(spec: KeySpec, schema: StructType | None = None):
    """Simple: str(value); null or "" gives null, which the writers reject (Apache Hudi's key generators refuse
    a null or empty key). Complex: `f1:v1,f2:v2` with __null__/__empty__, null when every part is null or
    empty."""
    if not spec.complex_key:
        v = _as_string(spec, schema, spec.record_key_fields[0])
        return F.when(v != "", v)
    parts = []
    for f in spec.record_key_fields:
        v = _as_string(spec, schema, f)
        v = F.when(v.isNull(), F.lit(NULL_KEY)).when(v == "", F.lit(EMPTY_KEY)).otherwise(v)
        parts.append(F.concat(F.lit(f"{f}:"), v))
    all_null = None
    for f in spec.record_key_fields:
        v = _as_string(spec, schema, f)
        cond = v.isNull() | (v == "")
        all_null = cond if all_null is None else (all_null & cond)
    return F.when(all_null, F.lit(None).cast("string")).otherwise(F.concat_ws(",", *parts))

def partition_path_expr(spec: KeySpec, schema: StructType | None = None):
    if not spec.partition_fields:
        return F.lit("")
    parts = []
    for f in spec.partition_fields:
        v = _as_string(spec, schema, f)
        v = F.when(v.isNull() | (v == ""), F.lit(DEFAULT_PARTITION)).otherwise(v)
        parts.append(F.concat(F.lit(f"{f}="), v) if spec.hive_style else v)
    return F.concat_ws("/", *parts)
