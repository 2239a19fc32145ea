"""Schema conversion and evolution for hudilite.

Four schema dialects meet here:

* **Avro** (a JSON dict): how Apache Hudi records a table schema, in commit metadata
  (``extraMetadata.schema``), in ``hoodie.properties`` (``hoodie.table.create.schema``) and in the
  ``SCHEMA`` header of log blocks.
* **Arrow** (``pyarrow.Schema``): what hudilite reads and writes (parquet files, in-memory batches).
* **Spark** (``pyspark.sql.types.StructType``): what the user's DataFrames carry (converted in
  hudilite.spark.schema).
* The **evolution rules** that decide whether a new batch can be written to an existing table.

This module is engine-free (it runs on Spark executors and in pure-pyarrow code paths); the conversions to and
from Spark types are in hudilite.spark.schema.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple, Union

import pyarrow as pa
import pyarrow.compute as pc

from hudilite.columns import META_FIELDS
from hudilite.errors import HudiliteError

__all__ = [
    "SchemaError",
    "META_FIELDS",
    "arrow_to_avro",
    "avro_to_arrow",
    "avro_to_json",
    "parse_avro_schema_string",
    "with_meta_fields_avro",
    "with_meta_fields_arrow",
    "evolve",
    "cast_table_to_schema",
    "float_to_double",
    "has_promotion",
    "promote",
]


class SchemaError(HudiliteError, ValueError):
    """A schema cannot be converted, or a schema change is not allowed."""


_AVRO_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

AvroSchema = Union[Dict[str, Any], List[Any], str]


def _col(path: str) -> str:
    return f"column '{path}'"


# --------------------------------------------------------------------------------------------
# Avro JSON helpers
# --------------------------------------------------------------------------------------------


def avro_to_json(avro: AvroSchema) -> str:
    """Serialise an Avro schema as compact JSON (the form Hudi stores it in)."""
    return json.dumps(avro, separators=(",", ":"), ensure_ascii=False)


def _unescape_java_properties(s: str) -> str:
    """Undo java.util.Properties escaping (``\\:``, ``\\=``, ``\\\\``, ``\\uXXXX``, ...)."""
    out: List[str] = []
    i, n = 0, len(s)
    while i < n:
        c = s[i]
        if c != "\\" or i + 1 >= n:
            out.append(c)
            i += 1
            continue
        nxt = s[i + 1]
        if nxt == "u" and i + 6 <= n and re.fullmatch(r"[0-9A-Fa-f]{4}", s[i + 2 : i + 6]):
            out.append(chr(int(s[i + 2 : i + 6], 16)))
            i += 6
        elif nxt in "\r\n":
            # line continuation: skip the newline(s) and the next line's leading whitespace
            i += 2
            if nxt == "\r" and i < n and s[i] == "\n":
                i += 1
            while i < n and s[i] in " \t\f":
                i += 1
        else:
            out.append({"t": "\t", "n": "\n", "r": "\r", "f": "\f"}.get(nxt, nxt))
            i += 2
    return "".join(out)


def parse_avro_schema_string(s: Union[str, bytes]) -> AvroSchema:
    """Parse an Avro schema given as a JSON string.

    Tolerates the ``java.util.Properties`` escaping found in ``hoodie.properties`` values
    (``{"type"\\:"record",...}``), a leading ``hoodie.table.create.schema=`` key, and a schema
    that was JSON-encoded twice (a JSON string holding the schema JSON).
    """
    if isinstance(s, (bytes, bytearray)):
        s = bytes(s).decode("utf-8")
    if not isinstance(s, str):
        raise SchemaError(f"expected an Avro schema string, got {type(s).__name__}")
    text = s.strip()
    if not text:
        raise SchemaError("empty Avro schema string")
    if text[0] not in "{[\"":
        # a whole properties line: "hoodie.table.create.schema={...}"
        m = re.match(r"^[A-Za-z0-9_.\-]+\s*[=:]\s*", text)
        if m:
            text = text[m.end() :]
    try:
        parsed = json.loads(text)
    except ValueError:
        try:
            parsed = json.loads(_unescape_java_properties(text))
        except ValueError as e:
            raise SchemaError(f"not a valid Avro schema JSON string: {e}: {text[:200]!r}") from None
    if isinstance(parsed, str) and parsed.lstrip()[:1] in ("{", "["):
        return parse_avro_schema_string(parsed)
    return parsed


# --------------------------------------------------------------------------------------------
# Arrow -> Avro
# --------------------------------------------------------------------------------------------


def _sanitize_avro_name(name: str) -> str:
    """Same rule as Hudi's ``HoodieAvroUtils.sanitizeName`` (invalid characters -> ``__``)."""
    if not name:
        raise SchemaError("table name must not be empty")
    if not re.match(r"[A-Za-z_]", name[0]):
        name = "__" + name[1:]
    return re.sub(r"[^A-Za-z0-9_]", "__", name)


def _min_bytes_for_precision(precision: int) -> int:
    """Smallest fixed size holding any unscaled value of ``precision`` digits (as Spark/Hudi)."""
    num_bytes = 1
    while 2 ** (8 * num_bytes - 1) < 10**precision:
        num_bytes += 1
    return num_bytes


def _check_field_names(fields, path_prefix: str) -> None:
    seen = set()
    for f in fields:
        path = f"{path_prefix}{f.name}"
        if not isinstance(f.name, str) or not _AVRO_NAME_RE.match(f.name):
            raise SchemaError(
                f"{_col(path)}: {f.name!r} is not a valid Avro field name (it must match "
                "[A-Za-z_][A-Za-z0-9_]*); rename the column"
            )
        if f.name in seen:
            raise SchemaError(f"{_col(path)}: duplicate column name")
        seen.add(f.name)


MAX_DECIMAL_PRECISION = 38


class _ArrowToAvro:
    def __init__(self) -> None:
        self._full_names: set = set()

    def _claim(self, namespace: str, name: str) -> str:
        """Reserve ``namespace.name`` and return ``name``, suffixed if it is already taken."""
        candidate, k = name, 1
        while f"{namespace}.{candidate}" in self._full_names:
            candidate = f"{name}_{k}"
            k += 1
        self._full_names.add(f"{namespace}.{candidate}")
        return candidate

    def record(self, fields, name: str, namespace: str, path_prefix: str) -> Dict[str, Any]:
        fields = list(fields)
        if not fields:
            where = path_prefix.rstrip(".") or "<root>"
            raise SchemaError(f"{_col(where)}: a struct needs at least one field")
        _check_field_names(fields, path_prefix)
        name = self._claim(namespace, name)
        child_ns = f"{namespace}.{name}"
        out_fields = []
        for f in fields:
            path = f"{path_prefix}{f.name}"
            avro_t = self.type(f.type, f.name, child_ns, path)
            out_fields.append({"name": f.name, "type": ["null", avro_t], "default": None})
        return {"type": "record", "name": name, "namespace": namespace, "fields": out_fields}

    def _fixed(self, name: str, namespace: str, size: int) -> Dict[str, Any]:
        # Spark/Hudi name a fixed "<namespace>.<field name>.fixed"
        ns = f"{namespace}.{name}"
        return {"type": "fixed", "name": self._claim(ns, "fixed"), "namespace": ns, "size": size}

    def type(self, t: pa.DataType, name: str, namespace: str, path: str) -> Any:
        T = pa.types
        if isinstance(t, pa.ExtensionType):
            return self.type(t.storage_type, name, namespace, path)
        if T.is_dictionary(t):
            return self.type(t.value_type, name, namespace, path)
        kind = _kind(t)  # the type family decides the Avro type (one mapping for schemas and evolution)
        if kind in _AVRO_PRIMITIVES:
            return kind
        if kind in _AVRO_LOGICAL:
            if kind.startswith("local-"):
                # a wall clock. Avro's local-timestamp says so, but hudi-rs cannot read it (its schema conversion
                # panics), so the timestamp type is marked instead, as Iceberg's Avro mapping marks one
                return {"type": "long", "logicalType": kind[len("local-"):], "adjust-to-utc": False}
            return {"type": _AVRO_LOGICAL[kind], "logicalType": kind}
        if kind == "fixed":
            return self._fixed(name, namespace, t.byte_width)
        if kind == "decimal":
            if t.precision > MAX_DECIMAL_PRECISION:
                # valid Avro, but no Hudi reader has such a type (Spark, Flink and Arrow's decimal128: 38 digits)
                raise SchemaError(f"{_col(path)}: decimal precision {t.precision} > {MAX_DECIMAL_PRECISION}: Apache "
                                  "Hudi's readers cannot read it; cast to decimal(38, s), float64 or string")
            fixed = self._fixed(name, namespace, _min_bytes_for_precision(t.precision))
            fixed.update({"logicalType": "decimal", "precision": t.precision, "scale": t.scale})
            return fixed
        if kind == "array":
            items = self.type(t.value_type, name, namespace, f"{path}.element")
            return {"type": "array", "items": ["null", items]}
        if kind == "map":
            if _kind(t.key_type) != "string":
                raise SchemaError(
                    f"{_col(path)}: map keys must be strings for Avro/Hudi, got {t.key_type} "
                    f"(type {t})"
                )
            values = self.type(t.item_type, name, namespace, f"{path}.value")
            return {"type": "map", "values": ["null", values]}
        if kind == "record":
            return self.record(list(t), name, namespace, f"{path}.")
        hint = ""
        if T.is_null(t):
            hint = " (all values are null, so the type is unknown; cast the column to a real type)"
        elif T.is_uint64(t):
            hint = " (does not fit an Avro long; cast to int64 or decimal)"
        raise SchemaError(f"{_col(path)}: unsupported type {t} for a Hudi table{hint}")


def arrow_to_avro(schema: pa.Schema, table_name: str) -> Dict[str, Any]:
    """Avro record schema for ``schema``, as Apache Hudi writes it in commit metadata.

    The record is named ``<table_name>_record`` in namespace ``hoodie.<table_name>``; every field
    is a ``["null", T]`` union with ``"default": null``. Nested record / fixed names follow Spark's
    Avro converter (record name = field name, namespace = parent namespace + "." + parent name;
    decimals are ``fixed`` named ``fixed`` in namespace ``<parent namespace>.<field name>``).
    """
    if not isinstance(schema, pa.Schema):
        raise SchemaError(f"expected a pyarrow.Schema, got {type(schema).__name__}")
    name = _sanitize_avro_name(table_name)
    return _ArrowToAvro().record(list(schema), f"{name}_record", f"hoodie.{name}", "")


def _meta_field_avro(name: str) -> Dict[str, Any]:
    # exactly what HoodieAvroUtils.addMetadataFields produces
    return {"name": name, "type": ["null", "string"], "doc": "", "default": None}


def with_meta_fields_avro(avro: AvroSchema) -> Dict[str, Any]:
    """Return a copy of the record schema with the 5 Hudi meta fields first (as log block
    ``SCHEMA`` headers carry it). Meta fields already present are moved, not duplicated."""
    if isinstance(avro, (str, bytes)):
        avro = parse_avro_schema_string(avro)
    if not isinstance(avro, dict) or avro.get("type") != "record":
        raise SchemaError("with_meta_fields_avro expects an Avro record schema")
    rest = [f for f in avro.get("fields", []) if f.get("name") not in META_FIELDS]
    out = dict(avro)
    out["fields"] = [_meta_field_avro(n) for n in META_FIELDS] + rest
    return out


def with_meta_fields_arrow(schema: pa.Schema) -> pa.Schema:
    """Return ``schema`` with the 5 Hudi meta columns (nullable strings) first."""
    rest = [f for f in schema if f.name not in META_FIELDS]
    meta = [pa.field(n, pa.string(), nullable=True) for n in META_FIELDS]
    return pa.schema(meta + rest, metadata=schema.metadata)


# --------------------------------------------------------------------------------------------
# Avro -> Arrow
# --------------------------------------------------------------------------------------------


class _AvroToArrow:
    def __init__(self) -> None:
        # fullname -> arrow type (None while a record is being defined: recursion guard)
        self.named: Dict[str, Optional[pa.DataType]] = {}

    @staticmethod
    def _full_name(node: Dict[str, Any], enclosing_ns: Optional[str]) -> Tuple[str, Optional[str]]:
        name = node.get("name")
        if not isinstance(name, str) or not name:
            raise SchemaError(f"named Avro type without a name: {avro_to_json(node)[:200]}")
        if "." in name:
            return name, name.rsplit(".", 1)[0]
        ns = node["namespace"] if "namespace" in node else enclosing_ns
        ns = ns or None
        return (f"{ns}.{name}" if ns else name), ns

    def _define(self, fullname: str) -> None:
        # None marks "being defined" (a reference to it now would be a recursive type). A name
        # defined twice (invalid Avro, never written by Hudi) simply gets redefined.
        self.named[fullname] = None

    def _lookup(self, name: str, ns: Optional[str], path: str) -> pa.DataType:
        candidates = [name] if "." in name else ([f"{ns}.{name}"] if ns else []) + [name]
        for c in candidates:
            if c in self.named:
                t = self.named[c]
                if t is None:
                    raise SchemaError(
                        f"{_col(path)}: recursive Avro type {c!r} cannot be represented in Arrow"
                    )
                return t
        raise SchemaError(f"{_col(path)}: unknown Avro type {name!r}")

    def fields(self, record: Dict[str, Any], ns: Optional[str], path_prefix: str) -> List[pa.Field]:
        out = []
        raw_fields = record.get("fields")
        if not isinstance(raw_fields, list):
            raise SchemaError(f"Avro record {record.get('name')!r} has no 'fields' list")
        for f in raw_fields:
            fname = f.get("name")
            path = f"{path_prefix}{fname}"
            t, nullable = self.type(f.get("type"), ns, path)
            out.append(pa.field(fname, t, nullable=nullable))
        return out

    def type(self, node: Any, ns: Optional[str], path: str) -> Tuple[pa.DataType, bool]:
        """Return (arrow type, nullable)."""
        if isinstance(node, list):
            branches = [b for b in node if not (b == "null" or b == {"type": "null"})]
            has_null = len(branches) != len(node)
            if not branches:
                return pa.null(), True
            if len(branches) > 1:
                raise SchemaError(
                    f"{_col(path)}: Avro union {avro_to_json(node)[:200]} has more than one "
                    "non-null branch; only [\"null\", T] unions are supported"
                )
            t, nullable = self.type(branches[0], ns, path)
            return t, nullable or has_null
        if isinstance(node, str):
            prim = _primitive_to_arrow(node)
            if prim is not None:
                return prim, node == "null"
            return self._lookup(node, ns, path), False
        if not isinstance(node, dict):
            raise SchemaError(f"{_col(path)}: invalid Avro type {node!r}")

        typ = node.get("type")
        if isinstance(typ, (dict, list)):
            return self.type(typ, ns, path)
        logical = node.get("logicalType")

        if typ in ("record", "error"):
            fullname, rec_ns = self._full_name(node, ns)
            self._define(fullname)
            children = self.fields(node, rec_ns, f"{path}." if path else "")
            t = pa.struct(children)
            self.named[fullname] = t
            return t, False
        if typ == "enum":
            fullname, _ = self._full_name(node, ns)
            self._define(fullname)
            self.named[fullname] = pa.string()
            return pa.string(), False
        if typ == "fixed":
            fullname, _ = self._full_name(node, ns)
            self._define(fullname)
            size = node.get("size")
            if logical == "decimal":
                t = _decimal_type(node, path)
            else:
                if not isinstance(size, int) or size < 0:
                    raise SchemaError(f"{_col(path)}: Avro fixed without a valid size")
                t = pa.binary(size)
            self.named[fullname] = t
            return t, False
        if typ == "array":
            items, items_nullable = self.type(node.get("items"), ns, path + ".element")
            return pa.list_(pa.field("item", items, nullable=items_nullable)), False
        if typ == "map":
            values, values_nullable = self.type(node.get("values"), ns, path + ".value")
            return (
                pa.map_(
                    pa.field("key", pa.string(), nullable=False),
                    pa.field("value", values, nullable=values_nullable),
                ),
                False,
            )
        if isinstance(typ, str) and typ in _AVRO_PRIMITIVES:
            return _logical_primitive(typ, logical, node, path), typ == "null"
        if isinstance(typ, str):
            # {"type": "some.Named"} is a reference to a named type
            return self._lookup(typ, ns, path), False
        raise SchemaError(f"{_col(path)}: invalid Avro type {avro_to_json(node)[:200]}")


def _primitive_to_arrow(name: str) -> Optional[pa.DataType]:
    return {
        "null": pa.null(),
        "boolean": pa.bool_(),
        "int": pa.int32(),
        "long": pa.int64(),
        "float": pa.float32(),
        "double": pa.float64(),
        "bytes": pa.binary(),
        "string": pa.string(),
    }.get(name)


def _decimal_type(node: Dict[str, Any], path: str) -> pa.DataType:
    precision = node.get("precision")
    scale = node.get("scale", 0) or 0
    if not isinstance(precision, int) or precision < 1 or not isinstance(scale, int) or scale < 0:
        raise SchemaError(f"{_col(path)}: invalid Avro decimal {avro_to_json(node)[:200]}")
    if scale > precision:
        raise SchemaError(f"{_col(path)}: Avro decimal scale {scale} > precision {precision}")
    if precision <= 38:
        return pa.decimal128(precision, scale)
    return pa.decimal256(precision, scale)


def _logical_primitive(typ: str, logical: Optional[str], node: Dict[str, Any], path: str):
    if typ == "int":
        if logical == "date":
            return pa.date32()
        if logical == "time-millis":
            return pa.time32("ms")
    elif typ == "long":
        ts = {
            "timestamp-millis": pa.timestamp("ms", tz="UTC"),
            "timestamp-micros": pa.timestamp("us", tz="UTC"),
            "timestamp-nanos": pa.timestamp("ns", tz="UTC"),
            "local-timestamp-millis": pa.timestamp("ms"),
            "local-timestamp-micros": pa.timestamp("us"),
            "local-timestamp-nanos": pa.timestamp("ns"),
            "time-micros": pa.time64("us"),
        }.get(logical or "")
        if ts is not None:
            if node.get("adjust-to-utc") is False and ts.tz is not None:
                return pa.timestamp(ts.unit)  # written for a wall-clock column (see _ArrowToAvro.type)
            return ts
    elif typ == "bytes" and logical == "decimal":
        return _decimal_type(node, path)
    # unknown / inapplicable logical types are ignored, as the Avro spec says
    return _primitive_to_arrow(typ)


def avro_to_arrow(avro: AvroSchema) -> pa.Schema:
    """Arrow schema for an Avro record schema (dict or JSON string).

    ``["null", T]`` unions become nullable fields; timestamp-micros/millis become
    ``timestamp(us|ms, tz="UTC")``, tz-naive ones when marked ``"adjust-to-utc": false``; local-timestamp-*
    become tz-naive timestamps (wall clocks); decimals (fixed
    or bytes) become ``decimal128``; enums and uuids become strings; named types may be
    referenced by name after their definition.
    """
    if isinstance(avro, (str, bytes, bytearray)):
        avro = parse_avro_schema_string(avro)
    if not isinstance(avro, dict) or avro.get("type") not in ("record", "error"):
        raise SchemaError("a table schema must be an Avro record")
    conv = _AvroToArrow()
    fullname, ns = conv._full_name(avro, None)
    conv._define(fullname)
    fields = conv.fields(avro, ns, "")
    conv.named[fullname] = pa.struct(fields)
    return pa.schema(fields)


# --------------------------------------------------------------------------------------------
# Arrow <-> Spark
# --------------------------------------------------------------------------------------------


def _is_list_view(t: pa.DataType) -> bool:
    f = getattr(pa.types, "is_list_view", None)
    g = getattr(pa.types, "is_large_list_view", None)
    return bool((f and f(t)) or (g and g(t)))


def map_leaves(t: pa.DataType, fn, path: str) -> pa.DataType:
    """Rebuild ``t`` applying ``fn(leaf_type, path)`` to every non-nested type. Lists of any
    flavour become ``list_``; dictionaries/extensions are unwrapped first by ``fn`` callers."""
    T = pa.types
    if T.is_struct(t):
        return pa.struct([f.with_type(map_leaves(f.type, fn, f"{path}.{f.name}")) for f in t])
    if T.is_list(t) or T.is_large_list(t) or T.is_fixed_size_list(t) or _is_list_view(t):
        vf = t.value_field
        return pa.list_(vf.with_type(map_leaves(vf.type, fn, f"{path}.element")))
    if T.is_map(t):
        kf, itf = t.key_field, t.item_field
        return pa.map_(
            kf.with_type(map_leaves(kf.type, fn, f"{path}.key")),
            itf.with_type(map_leaves(itf.type, fn, f"{path}.value")),
        )
    return fn(t, path)


def _widened(t: pa.DataType) -> Optional[pa.DataType]:
    """The type Spark and Hudi store an Arrow type they have no type for (losslessly widened), else None."""
    T = pa.types
    if T.is_string_view(t):
        return pa.string()
    if T.is_binary_view(t):
        return pa.binary()
    if T.is_float16(t):
        return pa.float32()
    if T.is_uint8(t):
        return pa.int16()
    if T.is_uint16(t):
        return pa.int32()
    if T.is_uint32(t):
        return pa.int64()
    if T.is_date64(t):
        return pa.date32()
    return None


def spark_leaf(t: pa.DataType, path: str) -> pa.DataType:
    T = pa.types
    if isinstance(t, pa.ExtensionType):
        return map_leaves(t.storage_type, spark_leaf, path)
    if T.is_dictionary(t):
        return map_leaves(t.value_type, spark_leaf, path)
    if T.is_timestamp(t):
        return pa.timestamp("us", tz="UTC" if t.tz else None)
    widened = _widened(t)
    if widened is not None:
        return widened
    if T.is_uint64(t):
        raise SchemaError(f"{_col(path)}: unsupported type {t} for Spark (cast to int64 or decimal)")
    if T.is_time(t):
        return pa.time64("us")
    if T.is_decimal(t):
        if t.precision > MAX_DECIMAL_PRECISION:
            raise SchemaError(f"{_col(path)}: decimal precision {t.precision} > {MAX_DECIMAL_PRECISION} is not "
                              "supported by Spark")
        return pa.decimal128(t.precision, t.scale)
    return t


def _storage_leaf(t: pa.DataType, path: str) -> pa.DataType:
    if pa.types.is_timestamp(t) and t.tz is None:
        return pa.timestamp(t.unit, tz="UTC")
    kind = _kind(t)
    if kind in ("int", "long"):
        # Avro has one int and one long: Apache Hudi's Spark reader fails (an NPE in Spark's vectorized reader)
        # on an INT32 annotated INT(8) or INT(16), as pyarrow writes int8 and int16, where the schema says int
        return pa.int32() if kind == "int" else pa.int64()
    return t


def storage_schema(schema: pa.Schema) -> pa.Schema:
    """`schema` as parquet data files store it, in the types every reader accepts for the table's Avro types:
    wall-clock (tz-naive) timestamps as UTC ones of the same wall-clock value (hudi-rs refuses a merge-on-read
    base file of another type; Spark reads it back as TIMESTAMP_NTZ unchanged), and Arrow's other integers as
    Avro's int and long (int32, int64)."""
    return pa.schema([f.with_type(map_leaves(f.type, _storage_leaf, f.name)) for f in schema], metadata=schema.metadata)


def to_storage(table: pa.Table) -> pa.Table:
    """`table` cast to `storage_schema` (the same values; only tz-naive timestamps and narrow integers change
    type)."""
    target = storage_schema(table.schema)
    return table if target.equals(table.schema) else table.cast(target)


def ordering_at_least(a, b):
    """Element-wise `a >= b` of two ordering-value arrays as Apache Hudi (Java's `compareTo`) and Spark order
    them: NaN above every number and equal to NaN (pyarrow's comparisons are false for NaN). Null where either
    is null."""
    ge = pc.greater_equal(a, b)
    if not (pa.types.is_floating(a.type) or pa.types.is_floating(b.type)):
        return ge
    a_nan = pc.is_nan(a) if pa.types.is_floating(a.type) else pc.not_equal(a, a)  # false; null for a null
    b_num = pc.invert(pc.is_nan(b)) if pa.types.is_floating(b.type) else pc.is_valid(b)
    out = pc.if_else(a_nan, True, pc.and_(b_num, ge))
    return pc.if_else(pc.is_null(b), pa.scalar(None, pa.bool_()), out)


def nan_rank(values):
    """For a floating-point ordering column, whether each value is NaN (null for a null): a sort key placed
    before the values puts NaN above every number, as Java and Spark order them (pyarrow's sorts place NaN
    with the nulls). None for other types."""
    return pc.is_nan(values) if pa.types.is_floating(values.type) else None


# --------------------------------------------------------------------------------------------
# Schema evolution
# --------------------------------------------------------------------------------------------


# Type families (`_kind`) that are Avro primitive types, and the logical types with their Avro base type.
_AVRO_PRIMITIVES = frozenset(("boolean", "int", "long", "float", "double", "string", "bytes"))
_AVRO_LOGICAL = {"date": "int", "timestamp-millis": "long", "timestamp-micros": "long", "time-millis": "int",
                 "time-micros": "long", "local-timestamp-millis": "long", "local-timestamp-micros": "long"}


def _kind(t: pa.DataType) -> Optional[str]:
    """The Avro-level type family of an Arrow type (types of one family share an Avro type): an Avro primitive
    type, logical type, or 'decimal', 'fixed', 'array', 'record', 'map', 'null'; None if Avro has none."""
    T = pa.types
    if isinstance(t, pa.ExtensionType):
        return _kind(t.storage_type)
    if T.is_dictionary(t):
        return _kind(t.value_type)
    if T.is_null(t):
        return "null"
    if T.is_boolean(t):
        return "boolean"
    if T.is_int8(t) or T.is_int16(t) or T.is_int32(t) or T.is_uint8(t) or T.is_uint16(t):
        return "int"
    if T.is_int64(t) or T.is_uint32(t):
        return "long"
    if T.is_float16(t) or T.is_float32(t):
        return "float"
    if T.is_float64(t):
        return "double"
    if T.is_string(t) or T.is_large_string(t) or T.is_string_view(t):
        return "string"
    if T.is_binary(t) or T.is_large_binary(t) or T.is_binary_view(t):
        return "bytes"
    if T.is_decimal(t):
        return "decimal"
    if T.is_fixed_size_binary(t):
        return "fixed"
    if T.is_date(t):
        return "date"
    if T.is_timestamp(t):  # no time zone: a wall clock (Spark TIMESTAMP_NTZ), Avro's local-timestamp
        kind = "timestamp-millis" if t.unit == "ms" else "timestamp-micros"
        return kind if t.tz else "local-" + kind
    if T.is_time32(t):
        return "time-millis"
    if T.is_time64(t):
        return "time-micros"
    if T.is_list(t) or T.is_large_list(t) or T.is_fixed_size_list(t) or _is_list_view(t):
        return "array"
    if T.is_struct(t):
        return "record"
    if T.is_map(t):
        return "map"
    return None


# Why a type change is refused when no more specific reason applies: nothing is damaged, the stored files just
# could not be read as the new type.
_NOT_A_WIDENING = ("not a type widening Apache Hudi allows, e.g. int -> long -> float -> double; the stored "
                   "values could not be read as the new type")

# Avro / Hudi type promotions: stored kind -> kinds it may be widened to.
_PROMOTIONS = {
    "int": ("long", "float", "double"),
    "long": ("float", "double"),
    "float": ("double",),
}
# Lossless promotions of incoming values into a stored logical type (the stored type is kept).
# Tables written before wall-clock timestamps had their own Avro type stored them as UTC timestamps: such a
# table's column still takes them, as the same UTC values.
_INCOMING_ONLY_PROMOTIONS = {
    "timestamp-micros": ("timestamp-millis", "local-timestamp-micros", "local-timestamp-millis"),
    "timestamp-millis": ("local-timestamp-millis",),
    "local-timestamp-micros": ("local-timestamp-millis",),
    "time-micros": ("time-millis",),
}
_TIMESTAMP_KINDS = frozenset(("timestamp-micros", "timestamp-millis", "local-timestamp-micros",
                              "local-timestamp-millis"))
_INT_TYPES = (pa.int8(), pa.int16(), pa.int32(), pa.int64())
_UNIT_RANK = {"s": 0, "ms": 1, "us": 2, "ns": 3}


def _int_range(t: pa.DataType) -> Tuple[int, int]:
    if pa.types.is_dictionary(t):
        t = t.value_type
    bits = t.bit_width
    if pa.types.is_unsigned_integer(t):
        return 0, 2**bits - 1
    return -(2 ** (bits - 1)), 2 ** (bits - 1) - 1


def _covers(a: Tuple[int, int], b: Tuple[int, int]) -> bool:
    return a[0] <= b[0] and a[1] >= b[1]


def _canonical_leaf(t: pa.DataType, path: str) -> pa.DataType:
    """Storage type for a new column: something parquet/Spark/Avro all understand."""
    T = pa.types
    if isinstance(t, pa.ExtensionType):
        return canonical(t.storage_type, path)
    if T.is_dictionary(t):
        return canonical(t.value_type, path)
    if _kind(t) is None or T.is_null(t) or T.is_uint64(t):
        # reuse arrow_to_avro's messages for unsupported types
        _ArrowToAvro().type(t, "x", "ns", path)
        raise SchemaError(f"{_col(path)}: unsupported type {t}")  # pragma: no cover
    widened = _widened(t)
    if widened is not None:
        return widened
    if T.is_timestamp(t) and t.unit in ("s", "ns"):
        return pa.timestamp("us", tz=t.tz)
    if T.is_time32(t) and t.unit == "s":
        return pa.time32("ms")
    if T.is_time64(t) and t.unit == "ns":
        return pa.time64("us")
    return t


def _check_nested(t: pa.DataType, path: str) -> None:
    """Struct field names, non-empty structs and string map keys, at every nesting level."""
    T = pa.types
    if T.is_struct(t):
        if t.num_fields == 0:
            raise SchemaError(f"{_col(path)}: a struct needs at least one field")
        _check_field_names(list(t), f"{path}.")
        for f in t:
            _check_nested(f.type, f"{path}.{f.name}")
    elif T.is_list(t) or T.is_large_list(t) or T.is_fixed_size_list(t) or _is_list_view(t):
        _check_nested(t.value_type, f"{path}.element")
    elif T.is_map(t):
        if _kind(t.key_type) != "string":
            raise SchemaError(f"{_col(path)}: map keys must be strings for Avro/Hudi, got {t.key_type}")
        _check_nested(t.item_type, f"{path}.value")


def canonical(t: pa.DataType, path: str) -> pa.DataType:
    """Validated storage type for a new column (see :func:`_canonical_leaf`)."""
    _check_nested(t, path)
    return map_leaves(t, _canonical_leaf, path)


@dataclass
class _CastFlags:
    float_truncate: bool = False  # int -> float promotions (Avro allows them even if inexact)
    time_truncate: bool = False  # ns -> us timestamps (Hudi stores micros)


class _Merger:
    """Walks a stored (table) type and an incoming type together.

    mode "evolve": returns the new table type (may widen the stored type, add nested fields).
    mode "cast": the stored type is the target and must not change; records whether the cast
    needs truncation options.
    """

    def __init__(self, mode: str, allow_incoming_promotion: bool = True) -> None:
        self.mode = mode
        self.allow_incoming_promotion = allow_incoming_promotion
        self.flags = _CastFlags()

    def _deny(self, path: str, stored: pa.DataType, incoming: pa.DataType, why: str = "") -> SchemaError:
        if self.mode == "cast":
            return SchemaError(
                f"{_col(path)}: cannot write values of type {incoming} into the table type {stored}"
                + (f" ({why})" if why else "")
            )
        return SchemaError(
            f"{_col(path)}: cannot change type from {stored} to {incoming} "
            f"({why or _NOT_A_WIDENING})"
        )

    def merge(self, stored: pa.DataType, incoming: pa.DataType, path: str) -> pa.DataType:
        ks, ki = _kind(stored), _kind(incoming)
        if ki is None:
            raise SchemaError(f"{_col(path)}: unsupported type {incoming}")
        if ki == "null":
            return stored  # an all-null batch column fits any column
        if ks is None:
            raise SchemaError(f"{_col(path)}: unsupported table type {stored}")
        if ks == ki:
            return self._same_kind(stored, incoming, ks, path)
        if ki in _PROMOTIONS.get(ks, ()):
            # the table type must be widened
            if self.mode == "cast":
                raise self._deny(path, stored, incoming, "it is wider than the table type")
            return canonical(incoming, path)
        into_wall_clock = ks in _TIMESTAMP_KINDS and ki in _TIMESTAMP_KINDS and ks.startswith("local-")
        # (cast mode: a data file's UTC storage type of a wall-clock column, utc_storage_schema: its UTC wall clock)
        if (ks in _PROMOTIONS.get(ki, ()) or ki in _INCOMING_ONLY_PROMOTIONS.get(ks, ())
                or (into_wall_clock and self.mode == "cast")):
            # incoming values are narrower: they are promoted to the table type on write
            if self.mode == "evolve" and not self.allow_incoming_promotion:
                raise self._deny(path, stored, incoming)
            if ks in ("float", "double"):
                self.flags.float_truncate = True
            if ks in _TIMESTAMP_KINDS and _UNIT_RANK[incoming.unit] > _UNIT_RANK[stored.unit]:
                self.flags.time_truncate = True
            return stored
        if into_wall_clock:
            raise self._deny(path, stored, incoming, "the column holds wall-clock timestamps without a time zone "
                                                     "(Spark TIMESTAMP_NTZ); cast the values to TIMESTAMP_NTZ "
                                                     "in the time zone you mean")
        raise self._deny(path, stored, incoming)

    def _same_kind(self, stored, incoming, kind, path) -> pa.DataType:
        T = pa.types
        if kind == "int":
            rs, ri = _int_range(stored), _int_range(incoming)
            if _covers(rs, ri):
                return stored
            if self.mode == "cast":
                raise self._deny(path, stored, incoming, "values may not fit")
            for cand in _INT_TYPES[:3]:
                r = _int_range(cand)
                if _covers(r, rs) and _covers(r, ri):
                    return cand
            return pa.int32()  # pragma: no cover - int kind always fits int32
        if kind == "float":
            if T.is_float32(stored) or not T.is_float32(incoming):
                return stored
            if self.mode == "cast":
                raise self._deny(path, stored, incoming)
            return pa.float32()
        if kind == "decimal":
            ps, ss, pi, si = stored.precision, stored.scale, incoming.precision, incoming.scale
            if (ps, ss) == (pi, si):
                return stored
            if ss >= si and ps - ss >= pi - si:
                if self.mode == "evolve" and not self.allow_incoming_promotion:
                    raise self._deny(path, stored, incoming)
                return stored
            raise self._deny(path, stored, incoming)
        if kind == "fixed":
            if stored.byte_width != incoming.byte_width:
                raise self._deny(path, stored, incoming)
            return stored
        if kind in _TIMESTAMP_KINDS or kind in ("time-micros", "time-millis"):
            if _UNIT_RANK[incoming.unit] > _UNIT_RANK[stored.unit]:
                self.flags.time_truncate = True
            return stored
        if kind == "date":
            if T.is_date64(incoming) and T.is_date32(stored):
                self.flags.time_truncate = True
            return stored
        if kind == "record":
            return pa.struct(self.fields(list(stored), list(incoming), f"{path}."))
        if kind == "array":
            sf, inf = stored.value_field, incoming.value_field
            elem = self.merge(sf.type, inf.type, f"{path}.element")
            nullable = sf.nullable or (inf.nullable and self.mode == "evolve")
            vf = pa.field(sf.name, elem, nullable=nullable, metadata=sf.metadata)
            return pa.large_list(vf) if T.is_large_list(stored) else pa.list_(vf)
        if kind == "map":
            if _kind(incoming.key_type) != "string" or _kind(stored.key_type) != "string":
                raise self._deny(path, stored, incoming)
            sf, inf = stored.item_field, incoming.item_field
            val = self.merge(sf.type, inf.type, f"{path}.value")
            nullable = sf.nullable or (inf.nullable and self.mode == "evolve")
            return pa.map_(stored.key_field, pa.field(sf.name, val, nullable=nullable, metadata=sf.metadata))
        # boolean, string, bytes: same Avro type, keep the table's Arrow type
        return stored

    def fields(self, stored: List[pa.Field], incoming: List[pa.Field], path_prefix: str) -> List[pa.Field]:
        inc_by_name: Dict[str, pa.Field] = {}
        for f in incoming:
            if f.name in inc_by_name:
                raise SchemaError(f"{_col(path_prefix + f.name)}: duplicate column name in the incoming data")
            inc_by_name[f.name] = f
        stored_names = {f.name for f in stored}
        stored_lower = {f.name.lower(): f.name for f in stored}
        out: List[pa.Field] = []
        for sf in stored:
            inf = inc_by_name.get(sf.name)
            path = path_prefix + sf.name
            if inf is None:
                if self.mode == "evolve":
                    out.append(sf.with_nullable(True))  # kept; written as null
                else:
                    out.append(sf)
                continue
            t = self.merge(sf.type, inf.type, path)
            nullable = sf.nullable or (inf.nullable and self.mode == "evolve")
            out.append(pa.field(sf.name, t, nullable=nullable, metadata=sf.metadata))
        for f in incoming:
            if f.name in stored_names:
                continue
            path = path_prefix + f.name
            if self.mode == "cast":
                raise SchemaError(f"{_col(path)}: not in the table schema (evolve the table schema first)")
            other = stored_lower.get(f.name.lower())
            if other is not None:
                raise SchemaError(
                    f"{_col(path)}: differs only in letter case from the existing column "
                    f"'{path_prefix}{other}'; rename it to match"
                )
            if not _AVRO_NAME_RE.match(f.name):
                raise SchemaError(
                    f"{_col(path)}: {f.name!r} is not a valid Avro field name (it must match "
                    "[A-Za-z_][A-Za-z0-9_]*); rename the column"
                )
            out.append(pa.field(f.name, canonical(f.type, path), nullable=True, metadata=f.metadata))
        return out


def evolve(table_schema: pa.Schema, incoming: pa.Schema, *, allow_incoming_promotion: bool = True) -> pa.Schema:
    """The table schema after writing a batch with schema ``incoming``.

    Allowed:
      * new columns (appended at the end in incoming order, always nullable in the table schema;
        also new fields inside structs),
      * a column missing from the batch (kept, made nullable; it is written as null),
      * widening: int8 -> int16 -> int32 -> int64, int -> long/float/double, long -> float/double,
        float -> double (Avro/Hudi promotion rules), also inside structs, lists and map values,
      * same Avro type in another Arrow flavour (string/large_string, timestamp units/time zones
        mapping to the same Avro logical type, ...): the table type is kept,
      * an incoming type that can be promoted to the table type (e.g. int32 data into an int64
        column, decimal(5,2) into decimal(10,2)): the table type is kept. Pass
        ``allow_incoming_promotion=False`` to reject these instead.
      * an all-null (``pa.null()``) incoming column for an existing column.

    Anything else raises :class:`SchemaError` naming the column, the stored type and the
    incoming type. ``evolve(pa.schema([]), incoming)`` gives the schema of a new table.
    """
    merger = _Merger("evolve", allow_incoming_promotion)
    fields = merger.fields(list(table_schema), list(incoming), "")
    return pa.schema(fields, metadata=table_schema.metadata)


def check_key_types(stored: pa.Schema, evolved: pa.Schema, record_key, partition_by=()) -> None:
    """Refuse a widening of a record key or partition column that changes how its values are spelled: a key's
    stored string ('1') and a partition's path are made from the value, so after long -> double ('1.0') an
    upsert of a stored key would add a second record. Integer widenings keep the spelling, and so do decimal
    ones of the same scale."""
    for role, names in (("record key", record_key), ("partition", partition_by)):
        for name in names:
            if name not in stored.names or name not in evolved.names:
                continue
            before, after = stored.field(name).type, evolved.field(name).type
            T = pa.types
            if before.equals(after) or (T.is_integer(before) and T.is_integer(after)) or (
                    T.is_decimal(before) and T.is_decimal(after) and before.scale == after.scale):
                continue
            why = ("its stored keys are text made from the value ('1'), which would change ('1.0'): an upsert of "
                   "a stored record would add a second one") if role == "record key" else (
                   "its partition paths are made from the value ('1'), which would change ('1.0'): one value "
                   "would get a second partition")
            raise SchemaError(f"{_col(name)}: a {role} column cannot change type from {before} to {after}: {why}; "
                              f"cast the data to {before}")


def float_to_double(col):
    """A float column promoted to double as Apache Hudi promotes it: through the float's shortest decimal form
    (2.6f -> 2.6, not the binary value 2.5999999046325684). Hudi's Avro record rewrite
    (`HoodieAvroUtils.rewritePrimaryTypeWithDiffSchemaType`) and its Spark file readers' schema-evolution cast
    (float -> string -> double) do this for log records and base files alike; hudi-rs reads the same. Used for
    every float -> double promotion here (reads of both table types, rewrites of stored rows, incoming data)."""
    return pc.cast(pc.cast(col, pa.string()), pa.float64())


def is_float_to_double(source: pa.DataType, target: pa.DataType) -> bool:
    return pa.types.is_float32(source) and pa.types.is_float64(target)


def is_int_to_floating(source: pa.DataType, target: pa.DataType) -> bool:
    """int or long -> float or double (Avro's promotions): Java's conversion to the nearest value, which Arrow's
    safe cast refuses for integers beyond 2**53 (2**24 for float) and Spark's parquet reader does not do for
    long -> double or any integer -> float."""
    return pa.types.is_integer(source) and (pa.types.is_float32(target) or pa.types.is_float64(target))


def _is_promotion(source: pa.DataType, target: pa.DataType) -> bool:
    return is_float_to_double(source, target) or is_int_to_floating(source, target)


def _nested_parts(t: pa.DataType) -> dict | None:
    """Children of a nested type by name (struct fields; "element" of lists; "key"/"value" of maps), else None."""
    T = pa.types
    if T.is_struct(t):
        return {t.field(i).name: t.field(i).type for i in range(t.num_fields)}
    if T.is_map(t):
        return {"key": t.key_type, "value": t.item_type}
    if T.is_list(t) or T.is_large_list(t):
        return {"element": t.value_type}
    return None


def has_promotion(source: pa.DataType, target: pa.DataType) -> bool:
    """Whether `source` -> `target` promotes a number as Apache Hudi does and a plain cast does not (float ->
    double, int/long -> float/double) anywhere: at the top or inside structs, list elements and map values (the
    nested promotions Apache Hudi's record rewrite applies field by field)."""
    if _is_promotion(source, target):
        return True
    have, want = _nested_parts(source), _nested_parts(target)
    if have is None or want is None:
        return False
    return any(k in have and has_promotion(have[k], t) for k, t in want.items())


def promote(arr, target: pa.DataType):
    """`arr` (Array or ChunkedArray) cast to `target` with Apache Hudi's number promotions at the top or nested
    (struct fields by name, list elements, map values): a float through its decimal form (`float_to_double`),
    an integer to the nearest float or double; struct fields `arr` lacks become nulls. Other casts are Arrow's."""
    if isinstance(arr, pa.ChunkedArray):
        return pa.chunked_array([promote(c, target) for c in arr.chunks], target)
    if not has_promotion(arr.type, target):
        return arr.cast(target)
    if len(arr) == 0:
        return pa.array([], type=target)
    if is_float_to_double(arr.type, target):
        return float_to_double(arr)
    if is_int_to_floating(arr.type, target):
        return pc.cast(arr, options=pc.CastOptions(target_type=target, allow_float_truncate=True))
    T = pa.types
    mask = arr.is_null() if arr.null_count else None
    if T.is_struct(target):
        have = {arr.type.field(i).name for i in range(arr.type.num_fields)}
        flat = arr.flatten()  # children with the parent's offset (and nulls) applied
        names = [arr.type.field(i).name for i in range(arr.type.num_fields)]
        children = [promote(flat[names.index(f.name)], f.type) if f.name in have else pa.nulls(len(arr), f.type)
                    for f in target]
        return pa.StructArray.from_arrays(children, fields=list(target), mask=mask)
    # offsets rebased to the slice's own values (Arrow takes no null bitmap with sliced offsets)
    first, last = arr.offsets[0].as_py(), arr.offsets[-1].as_py()
    offsets = pc.subtract(arr.offsets, pa.scalar(first, arr.offsets.type))
    if T.is_map(target):
        keys = arr.keys.slice(first, last - first).cast(target.key_type)
        items = promote(arr.items.slice(first, last - first), target.item_type)
        if mask is None:
            return pa.MapArray.from_arrays(offsets, keys, items, type=target)
        return pa.MapArray.from_arrays(offsets, keys, items, type=target, mask=mask)
    cls = pa.LargeListArray if T.is_large_list(target) else pa.ListArray
    values = promote(arr.values.slice(first, last - first), target.value_type)
    return cls.from_arrays(offsets, values, type=target, mask=mask)


def cast_table_to_schema(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """Make ``table`` conform to ``schema``: reorder columns, add missing (nullable) columns and
    nested struct fields as nulls, and cast to the (wider) table types. Only casts allowed by the
    evolution rules are performed; a column not in ``schema`` raises :class:`SchemaError`.
    Vectorised (pyarrow compute), no per-row Python."""
    if table.schema.equals(schema, check_metadata=False):
        if table.schema.metadata != schema.metadata:
            return table.replace_schema_metadata(schema.metadata)
        return table
    names = table.column_names
    index: Dict[str, int] = {}
    for i, n in enumerate(names):
        if n in index:
            raise SchemaError(f"{_col(n)}: duplicate column name in the data")
        index[n] = i
    wanted = set(schema.names)
    extra = [n for n in names if n not in wanted]
    if extra:
        raise SchemaError(
            "columns " + ", ".join(repr(n) for n in extra) + " are not in the table schema "
            "(evolve the table schema first)"
        )
    arrays = []
    for f in schema:
        pos = index.get(f.name)
        if pos is None:
            if not f.nullable:
                raise SchemaError(f"{_col(f.name)}: missing from the data and the table schema does not allow nulls")
            arrays.append(pa.nulls(table.num_rows, f.type))
            continue
        col = table.column(pos)
        if has_promotion(col.type, f.type):
            col = promote(col, f.type)
        elif col.type != f.type:
            merger = _Merger("cast")
            merger.merge(f.type, col.type, f.name)
            opts = pc.CastOptions(
                target_type=f.type,
                allow_float_truncate=merger.flags.float_truncate,
                allow_time_truncate=merger.flags.time_truncate,
            )
            try:
                col = pc.cast(col, options=opts)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
                raise SchemaError(f"{_col(f.name)}: cannot cast {col.type} to {f.type}: {e}") from None
        if not f.nullable and col.null_count:
            raise SchemaError(f"{_col(f.name)}: contains nulls but the table schema does not allow them")
        arrays.append(col)
    return pa.Table.from_arrays(arrays, schema=schema)
