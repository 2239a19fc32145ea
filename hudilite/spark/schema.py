"""Spark types for Arrow schemas and back (hudilite.schema holds the engine-free dialects: Avro and Arrow)."""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql.pandas.types import from_arrow_type, to_arrow_type
from pyspark.sql.types import StructField, StructType

from hudilite.schema import SchemaError, map_leaves, spark_leaf


def arrow_to_spark(schema: pa.Schema):
    """pyspark ``StructType`` for an Arrow schema. All timestamps (any unit, with or without a
    time zone) become ``TimestampType``; decimals keep precision/scale; nested types recurse."""
    fields = []
    for f in schema:
        t = map_leaves(f.type, spark_leaf, f.name)
        try:
            st = from_arrow_type(t, prefer_timestamp_ntz=False)
        except Exception as e:  # PySparkTypeError etc.
            raise SchemaError(f"column '{f.name}': type {f.type} cannot be converted to Spark: {e}") from None
        fields.append(StructField(f.name, st, nullable=f.nullable))
    return StructType(fields)

def _from_spark_leaf(t: pa.DataType, path: str) -> pa.DataType:
    if pa.types.is_time64(t) and t.unit == "ns":
        return pa.time64("us")  # Spark TIME has at most microsecond precision
    return t

def spark_to_arrow(struct) -> pa.Schema:
    """Arrow schema for a pyspark ``StructType`` (or anything with a ``.schema``, e.g. a
    DataFrame). ``TimestampType`` becomes ``timestamp("us", tz="UTC")``; ``TimestampNTZType``
    becomes a tz-naive ``timestamp("us")``."""
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
