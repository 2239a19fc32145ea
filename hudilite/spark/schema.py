"""Spark types for Arrow schemas and back (hudilite.schema holds the engine-free dialects: Avro and Arrow)."""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql.pandas.types import from_arrow_type, to_arrow_type
from pyspark.sql.types import ArrayType, DataType, MapType, StructField, StructType

from hudilite.schema import SchemaError, map_leaves, spark_leaf


def arrow_to_spark(schema: pa.Schema):
    """pyspark ``StructType`` for an Arrow schema. Timestamps with a time zone (any unit) become
    ``TimestampType``, those without one (wall clocks: Avro local-timestamp) ``TimestampNTZType``; decimals keep
    precision/scale; nested types recurse."""
    fields = []
    for f in schema:
        t = map_leaves(f.type, spark_leaf, f.name)
        try:
            st = from_arrow_type(t, prefer_timestamp_ntz=True)
        except Exception as e:  # PySparkTypeError etc.
            raise SchemaError(f"column '{f.name}': type {f.type} cannot be converted to Spark: {e}") from None
        fields.append(StructField(f.name, st, nullable=f.nullable))
    return StructType(fields)

def as_nullable(t: DataType) -> DataType:
    """`t` with every field, element and map value nullable, at every depth: the type a Spark file scan gives a
    user-specified schema (Spark's `asNullable`), so a frame built otherwise matches a scan's schema."""
    if isinstance(t, StructType):
        return StructType([StructField(f.name, as_nullable(f.dataType), True, f.metadata) for f in t.fields])
    if isinstance(t, ArrayType):
        return ArrayType(as_nullable(t.elementType), True)
    if isinstance(t, MapType):
        return MapType(as_nullable(t.keyType), as_nullable(t.valueType), True)
    return t


def arrow_frame(spark, table: pa.Table):
    """A Spark DataFrame of the rows of an Arrow `table` (a local relation: the rows travel with the plan, no
    files are scanned), typed as a Spark scan of the same columns would be: `arrow_to_spark`, all nullable."""
    arrow = pa.schema([pa.field(f.name, map_leaves(f.type, spark_leaf, f.name), True) for f in table.schema])
    return spark.createDataFrame(table.cast(to_jvm_arrow(arrow)), as_nullable(arrow_to_spark(arrow)))


def _jvm_leaf(t: pa.DataType, path: str) -> pa.DataType:
    return pa.time64("ns") if pa.types.is_time(t) else t


def to_jvm_arrow(schema: pa.Schema) -> pa.Schema:
    """`schema` as Arrow batches handed to Spark's JVM must have it (`mapInArrow` output): Spark takes a TIME
    column only as time64[ns] (else UNSUPPORTED_ARROWTYPE); files keep time-micros, which its scans read."""
    return pa.schema([f.with_type(map_leaves(f.type, _jvm_leaf, f.name)) for f in schema])


def _from_spark_leaf(t: pa.DataType, path: str) -> pa.DataType:
    if pa.types.is_time64(t) and t.unit == "ns":
        return pa.time64("us")  # Spark TIME has at most microsecond precision
    return t

def spark_to_arrow(struct) -> pa.Schema:
    """Arrow schema for a pyspark ``StructType`` (or anything with a ``.schema``, e.g. a
    DataFrame). ``TimestampType`` becomes ``timestamp("us", tz="UTC")``; ``TimestampNTZType``
    becomes a tz-naive ``timestamp("us")``; ``TimeType`` ``time64("us")`` (`to_jvm_arrow` for batches
    handed to Spark)."""
    if not isinstance(struct, StructType) and isinstance(getattr(struct, "schema", None), StructType):
        struct = struct.schema
    if not isinstance(struct, StructType):
        raise SchemaError(f"expected a pyspark StructType, got {type(struct).__name__}")
    fields = []
    for f in struct.fields:
        try:
            t = to_arrow_type(
                f.dataType, error_on_duplicated_field_names_in_struct=True, timezone="UTC"
            )
        except Exception as e:
            raise SchemaError(f"column '{f.name}': Spark type {f.dataType.simpleString()} cannot be converted to "
                              f"Arrow: {e}") from None
        fields.append(pa.field(f.name, map_leaves(t, _from_spark_leaf, f.name), nullable=f.nullable))
    return pa.schema(fields)
