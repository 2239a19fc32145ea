"""Tests for hudilite.schema: Arrow <-> Avro <-> Spark conversion and schema evolution."""

from __future__ import annotations

import datetime as dt
import decimal
import io
import json
import sys
import zipfile
from pathlib import Path

import fastavro
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

try:
    import hudilite.schema  # noqa: F401
except ImportError:  # running `pytest` without the repo root on sys.path
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from hudilite.columns import META_FIELDS
from hudilite.schema import (
    SchemaError,
    arrow_to_avro,
    avro_to_arrow,
    avro_to_json,
    cast_table_to_schema,
    evolve,
    parse_avro_schema_string,
    with_meta_fields_arrow,
    with_meta_fields_avro,
)
from hudilite.spark.schema import arrow_to_spark, spark_to_arrow

HUDI_TABLES = Path("/work/shared/hudi-tables")
UTC = dt.timezone.utc


def _fields(avro):
    return {f["name"]: f for f in avro["fields"]}


def _inner(avro_field):
    """The non-null branch of a ["null", T] field."""
    t = avro_field["type"]
    assert isinstance(t, list) and t[0] == "null" and len(t) == 2
    return t[1]


def _loose(t: pa.DataType) -> pa.DataType:
    """Type with all nullability flags set and list/map child names normalised."""
    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, _loose(f.type)) for f in t])
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return pa.list_(pa.field("item", _loose(t.value_type)))
    if pa.types.is_map(t):
        return pa.map_(pa.field("key", _loose(t.key_type), nullable=False), pa.field("value", _loose(t.item_type)))
    return t


def _all_nullable(schema: pa.Schema) -> pa.Schema:
    return pa.schema([pa.field(f.name, _loose(f.type)) for f in schema])


# ------------------------------------------------------------------------------------------
# arrow_to_avro
# ------------------------------------------------------------------------------------------


def test_arrow_to_avro_record_layout():
    avro = arrow_to_avro(pa.schema([("id", pa.int64()), ("name", pa.string())]), "trips")
    assert avro == {
        "type": "record",
        "name": "trips_record",
        "namespace": "hoodie.trips",
        "fields": [
            {"name": "id", "type": ["null", "long"], "default": None},
            {"name": "name", "type": ["null", "string"], "default": None},
        ],
    }
    fastavro.parse_schema(avro)
    # non-nullable arrow fields are still written as nullable unions, like Hudi commit schemas
    avro2 = arrow_to_avro(pa.schema([pa.field("id", pa.int64(), nullable=False)]), "t")
    assert avro2["fields"][0]["type"] == ["null", "long"]


@pytest.mark.parametrize(
    "arrow_type, expected",
    [
        (pa.bool_(), "boolean"),
        (pa.int8(), "int"),
        (pa.int16(), "int"),
        (pa.int32(), "int"),
        (pa.uint8(), "int"),
        (pa.uint16(), "int"),
        (pa.uint32(), "long"),
        (pa.int64(), "long"),
        (pa.float16(), "float"),
        (pa.float32(), "float"),
        (pa.float64(), "double"),
        (pa.string(), "string"),
        (pa.large_string(), "string"),
        (pa.string_view(), "string"),
        (pa.binary(), "bytes"),
        (pa.large_binary(), "bytes"),
        (pa.dictionary(pa.int32(), pa.string()), "string"),
        (pa.date32(), {"type": "int", "logicalType": "date"}),
        (pa.date64(), {"type": "int", "logicalType": "date"}),
        (pa.timestamp("us", tz="UTC"), {"type": "long", "logicalType": "timestamp-micros"}),
        # tz-naive: a wall clock (Spark TIMESTAMP_NTZ), marked so (hudi-rs cannot read local-timestamp)
        (pa.timestamp("us"), {"type": "long", "logicalType": "timestamp-micros", "adjust-to-utc": False}),
        (pa.timestamp("ns", tz="America/New_York"), {"type": "long", "logicalType": "timestamp-micros"}),
        (pa.timestamp("ns"), {"type": "long", "logicalType": "timestamp-micros", "adjust-to-utc": False}),
        (pa.timestamp("ms", tz="UTC"), {"type": "long", "logicalType": "timestamp-millis"}),
        (pa.time32("ms"), {"type": "int", "logicalType": "time-millis"}),
        (pa.time64("us"), {"type": "long", "logicalType": "time-micros"}),
    ],
)
def test_arrow_to_avro_primitive_mapping(arrow_type, expected):
    avro = arrow_to_avro(pa.schema([("c", arrow_type)]), "t")
    assert avro["fields"][0] == {"name": "c", "type": ["null", expected], "default": None}
    fastavro.parse_schema(avro)


@pytest.mark.parametrize(
    "precision, size",
    [(1, 1), (2, 1), (3, 2), (4, 2), (9, 4), (10, 5), (15, 7), (18, 8), (19, 9), (38, 16)],
)
def test_decimal_is_fixed_with_min_size(precision, size):
    avro = arrow_to_avro(pa.schema([("amount", pa.decimal128(precision, 2 if precision > 2 else 0))]), "tx")
    inner = _inner(avro["fields"][0])
    assert inner == {
        "type": "fixed",
        "name": "fixed",
        "namespace": "hoodie.tx.tx_record.amount",
        "size": size,
        "logicalType": "decimal",
        "precision": precision,
        "scale": 2 if precision > 2 else 0,
    }
    fastavro.parse_schema(avro)


def test_nested_names_follow_hudi_convention():
    schema = pa.schema(
        [
            ("arr", pa.list_(pa.struct([("f1", pa.string()), ("dec", pa.decimal128(5, 1))]))),
            ("m", pa.map_(pa.string(), pa.struct([("v", pa.float64())]))),
            ("s", pa.struct([("a", pa.int32()), ("child", pa.struct([("b", pa.bool_())]))])),
            ("ld", pa.list_(pa.decimal128(4, 2))),
        ]
    )
    avro = arrow_to_avro(schema, "t")
    f = _fields(avro)
    arr = _inner(f["arr"])
    assert arr["type"] == "array"
    item = arr["items"][1]
    assert arr["items"][0] == "null"
    assert (item["name"], item["namespace"]) == ("arr", "hoodie.t.t_record")
    dec = _inner(_fields(item)["dec"])
    assert (dec["name"], dec["namespace"]) == ("fixed", "hoodie.t.t_record.arr.dec")
    m = _inner(f["m"])
    assert m["type"] == "map" and m["values"][0] == "null"
    assert (m["values"][1]["name"], m["values"][1]["namespace"]) == ("m", "hoodie.t.t_record")
    s = _inner(f["s"])
    assert (s["name"], s["namespace"]) == ("s", "hoodie.t.t_record")
    child = _inner(_fields(s)["child"])
    assert (child["name"], child["namespace"]) == ("child", "hoodie.t.t_record.s")
    assert _fields(s)["child"]["default"] is None
    ld = _inner(f["ld"])["items"][1]
    assert (ld["name"], ld["namespace"]) == ("fixed", "hoodie.t.t_record.ld")
    parsed = fastavro.parse_schema(avro)
    assert parsed["name"] == "hoodie.t.t_record"


def test_deeply_nested_schema_is_valid_avro():
    inner = pa.struct([("x", pa.decimal128(10, 2)), ("y", pa.list_(pa.decimal128(10, 2)))])
    schema = pa.schema(
        [
            ("a", pa.list_(pa.list_(inner))),
            ("b", pa.map_(pa.string(), pa.list_(inner))),
            ("c", pa.struct([("a", inner), ("b", pa.struct([("a", inner)]))])),
        ]
    )
    avro = arrow_to_avro(schema, "deep")
    fastavro.parse_schema(avro)
    # every named type has a distinct full name
    names = []

    def walk(node):
        if isinstance(node, list):
            for n in node:
                walk(n)
        elif isinstance(node, dict):
            if node.get("type") in ("record", "fixed"):
                names.append(f"{node['namespace']}.{node['name']}")
            for f in node.get("fields", []):
                walk(f["type"])
            walk(node.get("items"))
            walk(node.get("values"))

    walk(avro)
    assert len(names) == len(set(names))


def test_table_name_is_sanitized_like_hudi():
    avro = arrow_to_avro(pa.schema([("a", pa.int32())]), "my-table")
    assert avro["name"] == "my__table_record"
    assert avro["namespace"] == "hoodie.my__table"
    fastavro.parse_schema(avro)


@pytest.mark.parametrize("bad", ["my col", "1abc", "a-b", "é", ""])
def test_invalid_field_names_raise(bad):
    with pytest.raises(SchemaError, match="not a valid Avro field name") as ei:
        arrow_to_avro(pa.schema([("ok", pa.int32()), (bad, pa.int32())]), "t")
    assert repr(bad) in str(ei.value)


def test_invalid_nested_field_name_names_the_path():
    schema = pa.schema([("s", pa.struct([("bad name", pa.int32())]))])
    with pytest.raises(SchemaError, match=r"column 's\.bad name'"):
        arrow_to_avro(schema, "t")


def test_duplicate_field_names_raise():
    schema = pa.schema([("a", pa.int32()), ("a", pa.string())])
    with pytest.raises(SchemaError, match="duplicate"):
        arrow_to_avro(schema, "t")


@pytest.mark.parametrize(
    "arrow_type",
    [pa.null(), pa.uint64(), pa.duration("us"), pa.month_day_nano_interval(), pa.struct([])],
)
def test_unsupported_types_raise_naming_column_and_type(arrow_type):
    with pytest.raises(SchemaError, match="column 'weird'") as ei:
        arrow_to_avro(pa.schema([("weird", arrow_type)]), "t")
    if arrow_type != pa.struct([]):
        assert str(arrow_type) in str(ei.value)


def test_map_with_non_string_keys_raises():
    with pytest.raises(SchemaError, match="column 'm'.*map keys"):
        arrow_to_avro(pa.schema([("m", pa.map_(pa.int32(), pa.string()))]), "t")


def test_avro_to_json_is_compact():
    avro = arrow_to_avro(pa.schema([("a", pa.int32())]), "t")
    s = avro_to_json(avro)
    assert " " not in s
    assert json.loads(s) == avro
    assert s.startswith('{"type":"record","name":"t_record","namespace":"hoodie.t","fields":[')


# ------------------------------------------------------------------------------------------
# meta fields
# ------------------------------------------------------------------------------------------


def test_meta_fields_constant():
    assert META_FIELDS == (
        "_hoodie_commit_time",
        "_hoodie_commit_seqno",
        "_hoodie_record_key",
        "_hoodie_partition_path",
        "_hoodie_file_name",
    )


def test_with_meta_fields_avro():
    avro = arrow_to_avro(pa.schema([("id", pa.int64())]), "t")
    out = with_meta_fields_avro(avro)
    assert [f["name"] for f in out["fields"]] == list(META_FIELDS) + ["id"]
    for f in out["fields"][:5]:
        assert f["type"] == ["null", "string"]
        assert f["default"] is None
    assert (out["name"], out["namespace"]) == (avro["name"], avro["namespace"])
    assert [f["name"] for f in avro["fields"]] == ["id"]  # input not modified
    assert with_meta_fields_avro(out) == out  # idempotent
    assert with_meta_fields_avro(avro_to_json(avro)) == out
    fastavro.parse_schema(out)


def test_with_meta_fields_arrow():
    schema = pa.schema([("id", pa.int64())], metadata={"k": "v"})
    out = with_meta_fields_arrow(schema)
    assert out.names == list(META_FIELDS) + ["id"]
    assert all(out.field(n).type == pa.string() and out.field(n).nullable for n in META_FIELDS)
    assert out.metadata == {b"k": b"v"}
    assert with_meta_fields_arrow(out) == out


# ------------------------------------------------------------------------------------------
# avro_to_arrow and round trips
# ------------------------------------------------------------------------------------------


ROUND_TRIP = [
    # (arrow type written, arrow type read back)
    (pa.bool_(), pa.bool_()),
    (pa.int8(), pa.int32()),
    (pa.int16(), pa.int32()),
    (pa.int32(), pa.int32()),
    (pa.int64(), pa.int64()),
    (pa.float32(), pa.float32()),
    (pa.float64(), pa.float64()),
    (pa.string(), pa.string()),
    (pa.large_string(), pa.string()),
    (pa.binary(), pa.binary()),
    (pa.binary(16), pa.binary(16)),
    (pa.date32(), pa.date32()),
    (pa.timestamp("us", tz="UTC"), pa.timestamp("us", tz="UTC")),
    (pa.timestamp("us"), pa.timestamp("us")),
    (pa.timestamp("ns", tz="UTC"), pa.timestamp("us", tz="UTC")),
    (pa.timestamp("ms", tz="UTC"), pa.timestamp("ms", tz="UTC")),
    (pa.time32("ms"), pa.time32("ms")),
    (pa.time64("us"), pa.time64("us")),
    (pa.decimal128(10, 5), pa.decimal128(10, 5)),
    (pa.decimal128(38, 10), pa.decimal128(38, 10)),
    (pa.decimal128(1, 0), pa.decimal128(1, 0)),
    (pa.list_(pa.int32()), pa.list_(pa.int32())),
    (pa.large_list(pa.string()), pa.list_(pa.string())),
    (pa.list_(pa.list_(pa.float64())), pa.list_(pa.list_(pa.float64()))),
    (pa.map_(pa.string(), pa.int64()), pa.map_(pa.string(), pa.int64())),
    (
        pa.map_(pa.string(), pa.struct([("a", pa.decimal128(7, 2)), ("b", pa.list_(pa.bool_()))])),
        pa.map_(pa.string(), pa.struct([("a", pa.decimal128(7, 2)), ("b", pa.list_(pa.bool_()))])),
    ),
    (
        pa.struct([("x", pa.int16()), ("y", pa.struct([("z", pa.timestamp("us", tz="UTC"))]))]),
        pa.struct([("x", pa.int32()), ("y", pa.struct([("z", pa.timestamp("us", tz="UTC"))]))]),
    ),
]


@pytest.mark.parametrize("written, read", ROUND_TRIP, ids=[str(w) for w, _ in ROUND_TRIP])
def test_round_trip_single_type(written, read):
    avro = arrow_to_avro(pa.schema([("c", written)]), "t")
    fastavro.parse_schema(avro)
    back = avro_to_arrow(avro)
    assert back.names == ["c"]
    assert back.field("c").nullable
    assert _loose(back.field("c").type) == _loose(read)
    # avro -> arrow -> avro is a fixed point
    assert arrow_to_avro(back, "t") == avro
    # and via the JSON string
    assert avro_to_arrow(avro_to_json(avro)) == back


def test_round_trip_all_types_in_one_schema():
    schema = pa.schema([(f"c{i}", w) for i, (w, _) in enumerate(ROUND_TRIP)])
    expected = pa.schema([(f"c{i}", r) for i, (_, r) in enumerate(ROUND_TRIP)])
    avro = arrow_to_avro(schema, "all_types")
    fastavro.parse_schema(avro)
    back = avro_to_arrow(avro)
    assert _all_nullable(back) == _all_nullable(expected)
    # list items / map values / struct children are nullable after the round trip
    assert back.field("c21").type.value_field.nullable
    assert back.field("c24").type.item_field.nullable


def test_round_trip_data_through_fastavro():
    """Values written by fastavro with our schema read back in a pyarrow table of avro_to_arrow."""
    schema = pa.schema(
        [
            ("id", pa.int64()),
            ("ts", pa.timestamp("us", tz="UTC")),
            ("amount", pa.decimal128(10, 2)),
            ("d", pa.date32()),
            ("tags", pa.list_(pa.string())),
            ("attrs", pa.map_(pa.string(), pa.int32())),
            ("s", pa.struct([("a", pa.float64())])),
        ]
    )
    avro = arrow_to_avro(schema, "t")
    rows = [
        {
            "id": 1,
            "ts": dt.datetime(2024, 5, 1, 12, 30, 0, 123456, tzinfo=UTC),
            "amount": decimal.Decimal("12.34"),
            "d": dt.date(2024, 5, 1),
            "tags": ["a", None],
            "attrs": {"k": 1},
            "s": {"a": 1.5},
        },
        {k: None for k in schema.names},
    ]
    buf = io.BytesIO()
    fastavro.writer(buf, fastavro.parse_schema(avro), rows)
    buf.seek(0)
    records = list(fastavro.reader(buf))
    arrow_schema = avro_to_arrow(avro)
    for r in records:
        r["attrs"] = list(r["attrs"].items()) if r["attrs"] is not None else None
    table = pa.Table.from_pylist(records, schema=arrow_schema)
    assert table.column("ts")[0].as_py() == rows[0]["ts"]
    assert table.column("amount")[0].as_py() == decimal.Decimal("12.34")
    assert table.column("tags")[0].as_py() == ["a", None]


def test_avro_to_arrow_unions_and_nullability():
    avro = {
        "type": "record",
        "name": "r",
        "fields": [
            {"name": "a", "type": ["null", "int"]},
            {"name": "b", "type": ["string", "null"]},
            {"name": "c", "type": "long"},
            {"name": "d", "type": ["double"]},
            {"name": "e", "type": {"type": "array", "items": "int"}},
        ],
    }
    s = avro_to_arrow(avro)
    assert [(f.name, f.type, f.nullable) for f in s] == [
        ("a", pa.int32(), True),
        ("b", pa.string(), True),
        ("c", pa.int64(), False),
        ("d", pa.float64(), False),
        ("e", pa.list_(pa.field("item", pa.int32(), nullable=False)), False),
    ]
    assert not s.field("e").type.value_field.nullable


def test_avro_to_arrow_multi_branch_union_raises():
    avro = {"type": "record", "name": "r", "fields": [{"name": "u", "type": ["null", "int", "string"]}]}
    with pytest.raises(SchemaError, match="column 'u'"):
        avro_to_arrow(avro)


def test_avro_to_arrow_logical_types():
    avro = {
        "type": "record",
        "name": "r",
        "namespace": "ns",
        "fields": [
            {"name": "tm", "type": {"type": "long", "logicalType": "timestamp-millis"}},
            {"name": "tu", "type": {"type": "long", "logicalType": "timestamp-micros"}},
            {"name": "ltm", "type": {"type": "long", "logicalType": "local-timestamp-millis"}},
            {"name": "ltu", "type": {"type": "long", "logicalType": "local-timestamp-micros"}},
            {"name": "d", "type": {"type": "int", "logicalType": "date"}},
            {"name": "tim", "type": {"type": "int", "logicalType": "time-millis"}},
            {"name": "tiu", "type": {"type": "long", "logicalType": "time-micros"}},
            {"name": "dec_b", "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 3}},
            {
                "name": "dec_f",
                "type": {"type": "fixed", "name": "f1", "size": 8, "logicalType": "decimal", "precision": 18, "scale": 4},
            },
            {"name": "dec_noscale", "type": {"type": "bytes", "logicalType": "decimal", "precision": 5}},
            {"name": "uuid", "type": {"type": "string", "logicalType": "uuid"}},
            {"name": "en", "type": {"type": "enum", "name": "Color", "symbols": ["RED", "GREEN"]}},
            {"name": "fx", "type": {"type": "fixed", "name": "Md5", "size": 16}},
            {"name": "unknown_lt", "type": {"type": "long", "logicalType": "something-else"}},
            {"name": "str_prop", "type": {"type": "string", "avro.java.string": "String"}},
        ],
    }
    fastavro.parse_schema(avro)
    s = avro_to_arrow(avro)
    assert [f.type for f in s] == [
        pa.timestamp("ms", tz="UTC"),
        pa.timestamp("us", tz="UTC"),
        pa.timestamp("ms"),
        pa.timestamp("us"),
        pa.date32(),
        pa.time32("ms"),
        pa.time64("us"),
        pa.decimal128(9, 3),
        pa.decimal128(18, 4),
        pa.decimal128(5, 0),
        pa.string(),
        pa.string(),
        pa.binary(16),
        pa.int64(),
        pa.string(),
    ]


def test_avro_to_arrow_named_type_references():
    avro = {
        "type": "record",
        "name": "Outer",
        "namespace": "com.example",
        "fields": [
            {"name": "home", "type": {"type": "record", "name": "Address", "fields": [{"name": "zip", "type": "string"}]}},
            {"name": "work", "type": ["null", "Address"]},  # short name in enclosing namespace
            {"name": "other", "type": "com.example.Address"},  # full name
            {"name": "money", "type": {"type": "fixed", "name": "Money", "namespace": "m", "size": 5,
                                       "logicalType": "decimal", "precision": 10, "scale": 2}},
            {"name": "money2", "type": ["null", "m.Money"]},
            {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["A"]}},
            {"name": "kinds", "type": {"type": "array", "items": "Kind"}},
            {"name": "by_name", "type": {"type": "map", "values": "Address"}},
        ],
    }
    fastavro.parse_schema(avro)
    # Java Avro also accepts a reference wrapped as {"type": "<name>"}
    avro["fields"].append({"name": "wrapped", "type": {"type": "Address"}})
    s = avro_to_arrow(avro)
    address = pa.struct([pa.field("zip", pa.string(), nullable=False)])
    assert s.field("home").type == address
    assert s.field("work").type == address and s.field("work").nullable
    assert s.field("other").type == address
    assert s.field("money2").type == pa.decimal128(10, 2)
    assert s.field("kinds").type.value_type == pa.string()
    assert s.field("by_name").type.item_type == address
    assert s.field("wrapped").type == address


def test_avro_to_arrow_unknown_and_recursive_types_raise():
    with pytest.raises(SchemaError, match="unknown Avro type 'Nope'"):
        avro_to_arrow({"type": "record", "name": "r", "fields": [{"name": "x", "type": "Nope"}]})
    recursive = {
        "type": "record",
        "name": "Node",
        "fields": [{"name": "next", "type": ["null", "Node"]}],
    }
    with pytest.raises(SchemaError, match="recursive"):
        avro_to_arrow(recursive)
    with pytest.raises(SchemaError, match="record"):
        avro_to_arrow({"type": "array", "items": "int"})


# ------------------------------------------------------------------------------------------
# parse_avro_schema_string
# ------------------------------------------------------------------------------------------

ESCAPED = (
    '{"type"\\:"record","name"\\:"t_record","namespace"\\:"hoodie.t","fields"\\:['
    '{"name"\\:"id","type"\\:["int","null"]},'
    '{"name"\\:"d","type"\\:[{"type"\\:"fixed","name"\\:"fixed","namespace"\\:"hoodie.t.t_record.d",'
    '"size"\\:5,"logicalType"\\:"decimal","precision"\\:10,"scale"\\:5},"null"]}]}'
)


def test_parse_escaped_properties_value():
    parsed = parse_avro_schema_string(ESCAPED)
    assert parsed["name"] == "t_record"
    assert parsed["fields"][0] == {"name": "id", "type": ["int", "null"]}
    s = avro_to_arrow(ESCAPED)
    assert s.field("id").type == pa.int32() and s.field("id").nullable
    assert s.field("d").type == pa.decimal128(10, 5)


def test_parse_plain_json_and_variants():
    plain = avro_to_json(arrow_to_avro(pa.schema([("a", pa.string())]), "t"))
    assert parse_avro_schema_string(plain)["fields"][0]["name"] == "a"
    assert parse_avro_schema_string(plain.encode()) == json.loads(plain)
    assert parse_avro_schema_string("hoodie.table.create.schema=" + ESCAPED)["name"] == "t_record"
    assert parse_avro_schema_string(json.dumps(plain)) == json.loads(plain)  # double-encoded
    # a JSON string value with an escaped quote survives both paths
    doc = '{"type":"record","name":"r","doc":"say \\"hi\\"","fields":[]}'
    assert parse_avro_schema_string(doc)["doc"] == 'say "hi"'
    props_escaped = doc.replace("\\", "\\\\").replace(":", "\\:")
    assert parse_avro_schema_string(props_escaped)["doc"] == 'say "hi"'
    # \uXXXX property escapes
    assert parse_avro_schema_string('{"type"\\:"record","name"\\:"r\\u00e9","fields"\\:[]}')["name"] == "r\u00e9"


@pytest.mark.parametrize("bad", ["", "   ", "{not json", '{"type"\\:'])
def test_parse_invalid_raises(bad):
    with pytest.raises(SchemaError):
        parse_avro_schema_string(bad)


# ------------------------------------------------------------------------------------------
# real Apache Hudi tables
# ------------------------------------------------------------------------------------------


def _zip_members(zf: zipfile.ZipFile):
    return [n for n in zf.namelist() if "__MACOSX" not in n and not n.endswith(".DS_Store") and not n.endswith("/")]


def _commit_schemas(zf: zipfile.ZipFile):
    """instant (requested time) -> commit metadata schema string, for the data table's timeline."""
    out = {}
    for name in _zip_members(zf):
        parts = name.split("/")
        if ".hoodie" not in parts or "metadata" in parts[parts.index(".hoodie") + 1 :]:
            continue
        base = parts[-1]
        stem, _, action = base.rpartition(".")
        if action not in ("commit", "deltacommit", "replacecommit") or not stem or "." in stem:
            continue
        data = zf.read(name)
        if not data:
            continue
        if "timeline" in parts:  # v8+: avro container file, named <requested>_<completed>.<action>
            records = list(fastavro.reader(io.BytesIO(data)))
            extra = (records[0].get("extraMetadata") or {}) if records else {}
            instant = stem.split("_")[0]
        else:  # v6: JSON
            extra = json.loads(data).get("extraMetadata") or {}
            instant = stem
        if extra.get("schema"):
            out[instant] = extra["schema"]
    return out


def _properties(zf: zipfile.ZipFile):
    for name in _zip_members(zf):
        parts = name.split("/")
        if parts[-1] == "hoodie.properties" and parts[-2] == ".hoodie" and len(parts) == 3:
            props = {}
            for line in zf.read(name).decode().splitlines():
                if line.startswith("#") or "=" not in line:
                    continue
                k, _, v = line.partition("=")
                props[k] = v
            return props
    return {}


ALL_ZIPS = sorted(str(p.relative_to(HUDI_TABLES)) for p in HUDI_TABLES.rglob("*.zip")) if HUDI_TABLES.exists() else []
needs_tables = pytest.mark.skipif(not ALL_ZIPS, reason="real Hudi tables not available")

PARQUET_TABLES = [
    "sample_table/cow/v6_nonpartitioned.zip",
    "sample_table/cow/v6_complexkeygen_hivestyle.zip",
    "sample_table/cow/v8_nonpartitioned.zip",
    "sample_table/cow/v9_txns_simple_meta.zip",
    "sample_table/cow/v9_timebasedkeygen_epochmillis.zip",
    "sample_table/mor/parquet/v6_nonpartitioned.zip",
    "sample_table/mor/avro/v9_txns_nonpart_meta.zip",
]


@needs_tables
@pytest.mark.parametrize("zip_rel", PARQUET_TABLES)
def test_real_table_schema_matches_parquet_base_files(zip_rel):
    with zipfile.ZipFile(HUDI_TABLES / zip_rel) as zf:
        schemas = _commit_schemas(zf)
        assert schemas, "no commit schema found"
        checked = 0
        for name in _zip_members(zf):
            if not name.endswith(".parquet") or "/.hoodie/" in name:
                continue
            instant = name.rsplit("_", 1)[1].split(".")[0]
            if instant not in schemas:
                continue
            file_schema = pq.read_schema(io.BytesIO(zf.read(name)))
            data_fields = [f for f in file_schema if f.name not in META_FIELDS]
            expected = _all_nullable(pa.schema(data_fields))
            converted = avro_to_arrow(schemas[instant])
            assert converted.names == expected.names
            assert _all_nullable(converted) == expected, name
            checked += 1
        assert checked > 0


@needs_tables
@pytest.mark.parametrize("zip_rel", ALL_ZIPS)
def test_real_commit_schemas_round_trip_exactly(zip_rel):
    """arrow_to_avro(avro_to_arrow(s)) reproduces Hudi's own commit schema byte for byte."""
    with zipfile.ZipFile(HUDI_TABLES / zip_rel) as zf:
        schemas = _commit_schemas(zf)
        props = _properties(zf)
    for schema_json in set(schemas.values()):
        avro = json.loads(schema_json)
        table_name = avro["namespace"][len("hoodie."):]
        arrow = avro_to_arrow(schema_json)
        regenerated = arrow_to_avro(arrow, table_name)
        fastavro.parse_schema(regenerated)
        assert regenerated == avro
        assert avro_to_json(regenerated) == schema_json
    create = props.get("hoodie.table.create.schema")
    if create:
        create_arrow = avro_to_arrow(create)
        assert create_arrow.names
        if schemas:
            latest = avro_to_arrow(schemas[max(schemas)])
            # the create schema's columns are still there (types may differ: timestamp-based key
            # generators store the partition column as a string in commit schemas)
            assert set(create_arrow.names) <= set(latest.names)


# ------------------------------------------------------------------------------------------
# evolve
# ------------------------------------------------------------------------------------------


def _s(**cols):
    return pa.schema(list(cols.items()))


def test_evolve_identical_schema_is_noop():
    table = _s(id=pa.int64(), name=pa.string(), ts=pa.timestamp("us", tz="UTC"))
    assert evolve(table, table) == table


def test_evolve_new_columns_appended_in_incoming_order_and_nullable():
    table = _s(id=pa.int64(), name=pa.string())
    incoming = pa.schema(
        [pa.field("zeta", pa.int32(), nullable=False), ("id", pa.int64()), ("alpha", pa.string())]
    )
    out = evolve(table, incoming)
    assert out.names == ["id", "name", "zeta", "alpha"]
    assert out.field("zeta").nullable and out.field("zeta").type == pa.int32()


def test_evolve_missing_column_is_kept_and_made_nullable():
    table = pa.schema([pa.field("id", pa.int64(), nullable=False), ("name", pa.string())])
    out = evolve(table, _s(id=pa.int64()))
    assert out.names == ["id", "name"]
    assert out.field("name").nullable
    out2 = evolve(table, _s(name=pa.string()))
    assert out2.field("id").nullable and out2.field("id").type == pa.int64()


def test_evolve_new_table_from_empty_schema_canonicalizes_types():
    incoming = _s(
        a=pa.dictionary(pa.int8(), pa.string()),
        b=pa.timestamp("ns", tz="UTC"),
        c=pa.uint16(),
        d=pa.large_string(),
        e=pa.list_(pa.timestamp("ns")),
    )
    out = evolve(pa.schema([]), incoming)
    assert [f.type for f in out] == [
        pa.string(),
        pa.timestamp("us", tz="UTC"),
        pa.int32(),
        pa.large_string(),
        pa.list_(pa.timestamp("us")),
    ]
    arrow_to_avro(out, "t")  # storable


WIDENINGS = [
    (pa.int8(), pa.int16(), pa.int16()),
    (pa.int16(), pa.int32(), pa.int32()),
    (pa.int8(), pa.int32(), pa.int32()),
    (pa.int8(), pa.int64(), pa.int64()),
    (pa.int32(), pa.int64(), pa.int64()),
    (pa.int32(), pa.float32(), pa.float32()),
    (pa.int32(), pa.float64(), pa.float64()),
    (pa.int64(), pa.float32(), pa.float32()),
    (pa.int64(), pa.float64(), pa.float64()),
    (pa.float32(), pa.float64(), pa.float64()),
    (pa.int16(), pa.uint8(), pa.int16()),
    (pa.int8(), pa.uint8(), pa.int16()),
]


@pytest.mark.parametrize("stored, incoming, result", WIDENINGS, ids=[f"{a}->{b}" for a, b, _ in WIDENINGS])
def test_evolve_widening_allowed(stored, incoming, result):
    out = evolve(_s(qty=stored), _s(qty=incoming))
    assert out.field("qty").type == result


KEEP_STORED = [
    # incoming type equal in Avro terms, or promotable to the stored type: stored type kept
    (pa.string(), pa.large_string()),
    (pa.large_string(), pa.string()),
    (pa.string(), pa.dictionary(pa.int32(), pa.string())),
    (pa.binary(), pa.large_binary()),
    (pa.bool_(), pa.bool_()),
    (pa.int64(), pa.int32()),
    (pa.int64(), pa.int8()),
    (pa.float64(), pa.float32()),
    (pa.float64(), pa.int64()),
    (pa.float32(), pa.int32()),
    (pa.int32(), pa.int16()),
    (pa.timestamp("us", tz="UTC"), pa.timestamp("us")),
    (pa.timestamp("us", tz="UTC"), pa.timestamp("ns", tz="UTC")),
    (pa.timestamp("us", tz="UTC"), pa.timestamp("ms", tz="UTC")),
    (pa.timestamp("us", tz="UTC"), pa.timestamp("us", tz="Europe/Paris")),
    (pa.date32(), pa.date64()),
    (pa.decimal128(10, 2), pa.decimal128(10, 2)),
    (pa.decimal128(10, 2), pa.decimal128(5, 2)),
    (pa.decimal128(10, 3), pa.decimal128(5, 1)),
    (pa.string(), pa.null()),
    (pa.struct([("a", pa.int32())]), pa.null()),
]


@pytest.mark.parametrize("stored, incoming", KEEP_STORED, ids=[f"{a}<-{b}" for a, b in KEEP_STORED])
def test_evolve_keeps_stored_type(stored, incoming):
    assert evolve(_s(c=stored), _s(c=incoming)).field("c").type == stored


DENIED = [
    (pa.string(), pa.int32()),
    (pa.int64(), pa.string()),
    (pa.date32(), pa.string()),
    (pa.string(), pa.date32()),
    (pa.int32(), pa.bool_()),
    (pa.bool_(), pa.int32()),
    (pa.float64(), pa.string()),
    (pa.string(), pa.binary()),
    (pa.binary(), pa.string()),
    (pa.int64(), pa.timestamp("us", tz="UTC")),
    (pa.timestamp("us", tz="UTC"), pa.int64()),
    (pa.timestamp("ms", tz="UTC"), pa.timestamp("us", tz="UTC")),
    (pa.timestamp("us", tz="UTC"), pa.date32()),
    (pa.decimal128(10, 2), pa.decimal128(12, 2)),
    (pa.decimal128(10, 2), pa.decimal128(10, 3)),
    (pa.decimal128(10, 2), pa.float64()),
    (pa.float64(), pa.decimal128(10, 2)),
    (pa.int32(), pa.struct([("a", pa.int32())])),
    (pa.struct([("a", pa.int32())]), pa.int32()),
    (pa.list_(pa.int32()), pa.int32()),
    (pa.list_(pa.int32()), pa.struct([("a", pa.int32())])),
    (pa.list_(pa.int64()), pa.list_(pa.string())),
    (pa.map_(pa.string(), pa.int32()), pa.map_(pa.string(), pa.string())),
    (pa.map_(pa.string(), pa.int32()), pa.list_(pa.int32())),
    (pa.binary(16), pa.binary(8)),
]


@pytest.mark.parametrize("stored, incoming", DENIED, ids=[f"{a}->{b}" for a, b in DENIED])
def test_evolve_denied(stored, incoming):
    with pytest.raises(SchemaError) as ei:
        evolve(_s(qty=stored), _s(qty=incoming))
    msg = str(ei.value)
    assert "column 'qty" in msg and "cannot change type from" in msg
    if not pa.types.is_nested(stored) or not pa.types.is_nested(incoming):
        assert f"column 'qty': cannot change type from {stored} to {incoming} (" in msg


def test_evolve_denied_message_format():
    with pytest.raises(SchemaError) as ei:
        evolve(_s(qty=pa.int64()), _s(qty=pa.string()))
    # the reason names the rule, not damage (the table was never touched)
    assert str(ei.value) == ("column 'qty': cannot change type from int64 to string (not a type widening Apache "
                             "Hudi allows, e.g. int -> long -> float -> double; the stored values could not be "
                             "read as the new type)")


def test_evolve_without_incoming_promotion():
    with pytest.raises(SchemaError, match="from int64 to int32"):
        evolve(_s(qty=pa.int64()), _s(qty=pa.int32()), allow_incoming_promotion=False)
    # widening the table is still fine
    assert evolve(_s(qty=pa.int32()), _s(qty=pa.int64()), allow_incoming_promotion=False).field("qty").type == pa.int64()


def test_evolve_nested_struct_changes():
    stored = _s(s=pa.struct([("a", pa.int32()), ("b", pa.string())]))
    incoming = _s(s=pa.struct([("c", pa.float64()), ("a", pa.int64())]))
    out = evolve(stored, incoming)
    t = out.field("s").type
    assert [f.name for f in t] == ["a", "b", "c"]
    assert t.field("a").type == pa.int64()
    assert t.field("b").nullable and t.field("c").nullable
    with pytest.raises(SchemaError, match=r"column 's\.b': cannot change type from string to int32"):
        evolve(stored, _s(s=pa.struct([("b", pa.int32())])))


def test_evolve_nested_list_and_map_widening():
    stored = _s(
        l=pa.list_(pa.struct([("x", pa.int32())])),
        m=pa.map_(pa.string(), pa.float32()),
    )
    incoming = _s(
        l=pa.list_(pa.struct([("x", pa.int64()), ("y", pa.string())])),
        m=pa.map_(pa.string(), pa.float64()),
    )
    out = evolve(stored, incoming)
    assert _loose(out.field("l").type) == _loose(pa.list_(pa.struct([("x", pa.int64()), ("y", pa.string())])))
    assert out.field("m").type == pa.map_(pa.string(), pa.float64())
    with pytest.raises(SchemaError, match=r"column 'm\.value'"):
        evolve(stored, _s(m=pa.map_(pa.string(), pa.string())))
    with pytest.raises(SchemaError, match=r"column 'l\.element\.x'"):
        evolve(stored, _s(l=pa.list_(pa.struct([("x", pa.string())]))))


def test_evolve_rejects_bad_new_columns():
    table = _s(qty=pa.int64())
    with pytest.raises(SchemaError, match="column 'Qty'.*letter case"):
        evolve(table, _s(Qty=pa.int64()))
    with pytest.raises(SchemaError, match="column 'n'.*null"):
        evolve(table, _s(n=pa.null()))
    with pytest.raises(SchemaError, match="column 'bad name'"):
        evolve(table, pa.schema([("bad name", pa.int32())]))
    with pytest.raises(SchemaError, match="column 'u'.*uint64"):
        evolve(table, _s(u=pa.uint64()))
    with pytest.raises(SchemaError, match="duplicate"):
        evolve(table, pa.schema([("x", pa.int32()), ("x", pa.int32())]))
    deep = pa.struct([("ok", pa.list_(pa.struct([("bad-name", pa.int32())])))])
    with pytest.raises(SchemaError, match=r"column 's\.ok\.element\.bad-name'"):
        evolve(table, _s(s=deep))
    with pytest.raises(SchemaError, match=r"column 'm'.*map keys"):
        evolve(table, _s(m=pa.map_(pa.int32(), pa.string())))


def test_evolve_keeps_table_metadata():
    table = pa.schema([("a", pa.int32())], metadata={"k": "v"})
    assert evolve(table, _s(b=pa.string())).metadata == {b"k": b"v"}


# ------------------------------------------------------------------------------------------
# cast_table_to_schema
# ------------------------------------------------------------------------------------------


def test_cast_same_schema_returns_same_table():
    t = pa.table({"a": [1, 2]})
    assert cast_table_to_schema(t, t.schema) is t


def test_cast_reorders_adds_missing_and_widens():
    schema = pa.schema(
        [
            ("id", pa.int64()),
            ("name", pa.string()),
            ("score", pa.float64()),
            ("extra", pa.struct([("z", pa.int32())])),
        ]
    )
    t = pa.table(
        {
            "score": pa.array([1, 2**60 + 1], pa.int64()),  # long -> double is inexact but allowed
            "id": pa.array([1, 2], pa.int32()),
            "name": pa.array(["a", "b"], pa.large_string()),
        }
    )
    out = cast_table_to_schema(t, schema)
    assert out.schema == schema
    assert out.column("id").to_pylist() == [1, 2]
    assert out.column("name").to_pylist() == ["a", "b"]
    assert out.column("score").to_pylist() == [1.0, float(2**60)]
    assert out.column("extra").to_pylist() == [None, None]


def test_cast_nested_struct_list_map():
    schema = pa.schema(
        [
            ("s", pa.struct([("a", pa.int64()), ("b", pa.string()), ("c", pa.float64())])),
            ("l", pa.list_(pa.int64())),
            ("m", pa.map_(pa.string(), pa.float64())),
        ]
    )
    t = pa.table(
        {
            "s": pa.array([{"b": "x", "a": 1}, None], pa.struct([("b", pa.string()), ("a", pa.int32())])),
            "l": pa.array([[1, None], None], pa.list_(pa.int32())),
            "m": pa.array([[("k", 1.5)], None], pa.map_(pa.string(), pa.float32())),
        }
    )
    out = cast_table_to_schema(t, schema)
    assert out.schema == schema
    assert out.column("s").to_pylist() == [{"a": 1, "b": "x", "c": None}, None]
    assert out.column("l").to_pylist() == [[1, None], None]
    assert out.column("m").to_pylist() == [[("k", 1.5)], None]


def test_cast_timestamps_dictionary_and_null_columns():
    schema = pa.schema([("ts", pa.timestamp("us", tz="UTC")), ("cat", pa.string()), ("n", pa.int32())])
    t = pa.table(
        {
            "ts": pa.array([1_000_001_999, None], pa.timestamp("ns")),  # sub-microsecond part dropped
            "cat": pa.array(["x", "y"]).dictionary_encode(),
            "n": pa.nulls(2),
        }
    )
    out = cast_table_to_schema(t, schema)
    assert out.schema == schema
    assert out.column("ts")[0].as_py() == dt.datetime(1970, 1, 1, 0, 0, 1, 1, tzinfo=UTC)
    assert out.column("cat").to_pylist() == ["x", "y"]
    assert out.column("n").to_pylist() == [None, None]


def test_cast_lossless_promotions():
    schema = pa.schema(
        [("ts", pa.timestamp("us", tz="UTC")), ("f", pa.float32()), ("t", pa.time64("us")), ("d", pa.decimal128(10, 3))]
    )
    t = pa.table(
        {
            "ts": pa.array([1500], pa.timestamp("ms", tz="UTC")),
            "f": pa.array([1.5], pa.float16()),
            "t": pa.array([1500], pa.time32("ms")),
            "d": pa.array([decimal.Decimal("1.25")], pa.decimal128(5, 2)),
        }
    )
    out = cast_table_to_schema(t, schema)
    assert out.schema == schema
    assert out.column("ts")[0].as_py() == dt.datetime(1970, 1, 1, 0, 0, 1, 500000, tzinfo=UTC)
    assert out.column("f").to_pylist() == [1.5]
    assert out.column("t")[0].as_py() == dt.time(0, 0, 1, 500000)
    assert out.column("d")[0].as_py() == decimal.Decimal("1.250")


def test_cast_multiple_chunks():
    t = pa.concat_tables([pa.table({"a": pa.array([1], pa.int32())}), pa.table({"a": pa.array([2], pa.int32())})])
    out = cast_table_to_schema(t, pa.schema([("a", pa.int64()), ("b", pa.string())]))
    assert out.column("a").to_pylist() == [1, 2]
    assert out.column("b").to_pylist() == [None, None]


def test_cast_after_evolve_round_trip():
    table_schema = _s(id=pa.int64(), qty=pa.int32(), note=pa.string())
    batch = pa.table({"qty": pa.array([5], pa.int64()), "id": pa.array([1], pa.int32()), "new": ["x"]})
    new_schema = evolve(table_schema, batch.schema)
    out = cast_table_to_schema(batch, new_schema)
    assert out.schema.names == ["id", "qty", "note", "new"]
    assert out.to_pylist() == [{"id": 1, "qty": 5, "note": None, "new": "x"}]


def test_cast_errors():
    schema = pa.schema([("a", pa.int32())])
    with pytest.raises(SchemaError, match="'b'.*not in the table schema"):
        cast_table_to_schema(pa.table({"a": pa.array([1], pa.int32()), "b": [1]}), schema)
    with pytest.raises(SchemaError, match="column 'a'.*int64.*int32"):
        cast_table_to_schema(pa.table({"a": pa.array([1], pa.int64())}), schema)  # narrowing
    with pytest.raises(SchemaError, match="column 'a'"):
        cast_table_to_schema(pa.table({"a": ["1"]}), schema)  # string -> int is not a widening
    with pytest.raises(SchemaError, match=r"column 's\.z'.*not in the table schema"):
        cast_table_to_schema(
            pa.table({"s": pa.array([{"y": 1, "z": 2}])}), pa.schema([("s", pa.struct([("y", pa.int64())]))])
        )
    required = pa.schema([pa.field("a", pa.int32(), nullable=False)])
    with pytest.raises(SchemaError, match="does not allow nulls"):
        cast_table_to_schema(pa.table({"b": [1]}).drop_columns(["b"]), required)
    with pytest.raises(SchemaError, match="contains nulls"):
        cast_table_to_schema(pa.table({"a": pa.array([1, None], pa.int16())}), required)


# ------------------------------------------------------------------------------------------
# Spark
# ------------------------------------------------------------------------------------------


SPARK_ARROW = pa.schema(
    [
        ("b", pa.bool_()),
        ("i8", pa.int8()),
        ("i16", pa.int16()),
        ("i32", pa.int32()),
        ("i64", pa.int64()),
        ("f32", pa.float32()),
        ("f64", pa.float64()),
        ("s", pa.string()),
        ("bin", pa.binary()),
        ("d", pa.date32()),
        ("ts", pa.timestamp("us", tz="UTC")),
        ("dec", pa.decimal128(15, 2)),
        ("arr", pa.list_(pa.struct([("x", pa.int64()), ("y", pa.string())]))),
        ("m", pa.map_(pa.string(), pa.float64())),
        ("st", pa.struct([("a", pa.int32()), ("inner", pa.struct([("t", pa.timestamp("us", tz="UTC"))]))])),
        pa.field("req", pa.string(), nullable=False),
    ]
)


def test_arrow_to_spark_types():
    from pyspark.sql import types as T

    st = arrow_to_spark(SPARK_ARROW)
    assert isinstance(st, T.StructType)
    assert st.simpleString() == (
        "struct<b:boolean,i8:tinyint,i16:smallint,i32:int,i64:bigint,f32:float,f64:double,"
        "s:string,bin:binary,d:date,ts:timestamp,dec:decimal(15,2),"
        "arr:array<struct<x:bigint,y:string>>,m:map<string,double>,"
        "st:struct<a:int,inner:struct<t:timestamp>>,req:string>"
    )
    assert not st["req"].nullable and st["s"].nullable


@pytest.mark.parametrize(
    "arrow_type, ntz",
    [(pa.timestamp("us"), True), (pa.timestamp("ns"), True), (pa.timestamp("ms", tz="UTC"), False),
     (pa.timestamp("ns", tz="Asia/Tokyo"), False)],
)
def test_arrow_to_spark_timestamps_with_a_zone_are_timestamp_type_without_one_ntz(arrow_type, ntz):
    from pyspark.sql import types as T

    st = arrow_to_spark(pa.schema([("t", arrow_type)]))
    assert isinstance(st["t"].dataType, T.TimestampNTZType if ntz else T.TimestampType)


def test_arrow_to_spark_normalizes_exotic_types():
    from pyspark.sql import types as T

    st = arrow_to_spark(
        pa.schema(
            [
                ("u8", pa.uint8()),
                ("u32", pa.uint32()),
                ("ls", pa.large_string()),
                ("dict", pa.dictionary(pa.int32(), pa.string())),
                ("ll", pa.large_list(pa.timestamp("ns"))),
            ]
        )
    )
    assert st["u8"].dataType == T.ShortType()
    assert st["u32"].dataType == T.LongType()
    assert st["ls"].dataType == T.StringType()
    assert st["dict"].dataType == T.StringType()
    assert st["ll"].dataType == T.ArrayType(T.TimestampNTZType(), True)
    with pytest.raises(SchemaError, match="column 'u64'"):
        arrow_to_spark(pa.schema([("u64", pa.uint64())]))


def test_spark_to_arrow_types():
    from pyspark.sql import types as T

    st = T.StructType(
        [
            T.StructField("ts", T.TimestampType()),
            T.StructField("ntz", T.TimestampNTZType()),
            T.StructField("dec", T.DecimalType(20, 4)),
            T.StructField("arr", T.ArrayType(T.IntegerType(), containsNull=False)),
            T.StructField("m", T.MapType(T.StringType(), T.LongType())),
            T.StructField("s", T.StructType([T.StructField("x", T.ShortType())]), nullable=False),
        ]
    )
    out = spark_to_arrow(st)
    assert out.field("ts").type == pa.timestamp("us", tz="UTC")
    assert out.field("ntz").type == pa.timestamp("us")
    assert out.field("dec").type == pa.decimal128(20, 4)
    assert out.field("arr").type == pa.list_(pa.field("element", pa.int32(), nullable=False))
    assert out.field("m").type == pa.map_(pa.string(), pa.int64())
    assert out.field("s").type == pa.struct([("x", pa.int16())]) and not out.field("s").nullable


def test_arrow_spark_arrow_round_trip_without_jvm():
    assert spark_to_arrow(arrow_to_spark(SPARK_ARROW)) == SPARK_ARROW


def _spark_rows_table():
    return pa.table(
        {
            "b": [True], "i8": pa.array([1], pa.int8()), "i16": pa.array([2], pa.int16()),
            "i32": pa.array([3], pa.int32()), "i64": [4], "f32": pa.array([1.5], pa.float32()),
            "f64": [2.5], "s": ["x"], "bin": [b"\x00\x01"], "d": [dt.date(2024, 1, 2)],
            "ts": [dt.datetime(2024, 1, 2, 3, 4, 5, 6, tzinfo=UTC)], "dec": [decimal.Decimal("123.45")],
            "arr": [[{"x": 1, "y": "a"}]], "m": [[("k", 1.0)]],
            "st": [{"a": 1, "inner": {"t": dt.datetime(2020, 1, 1, tzinfo=UTC)}}], "req": ["r"],
        },
        schema=SPARK_ARROW,
    )


def test_spark_dataframe_round_trip(spark):
    table = _spark_rows_table()
    df = spark.createDataFrame(table, schema=arrow_to_spark(SPARK_ARROW))
    assert df.schema == arrow_to_spark(SPARK_ARROW)
    assert spark_to_arrow(df.schema) == SPARK_ARROW
    back = df.toArrow()
    assert back.schema.names == SPARK_ARROW.names
    assert _all_nullable(back.schema) == _all_nullable(SPARK_ARROW)
    assert back.to_pylist() == table.to_pylist()


def test_spark_dataframe_schema_to_avro(spark):
    df = spark.sql(
        "SELECT CAST(1 AS INT) AS id, 'a' AS name, CAST('2024-01-01 00:00:00' AS TIMESTAMP) AS ts,"
        " CAST(1.5 AS DECIMAL(10,2)) AS amount, array(named_struct('k', 1L)) AS items,"
        " map('a', 1.0D) AS attrs"
    )
    arrow = spark_to_arrow(df)
    assert arrow.field("ts").type == pa.timestamp("us", tz="UTC")
    avro = arrow_to_avro(arrow, "spark_t")
    fastavro.parse_schema(avro)
    f = _fields(avro)
    assert _inner(f["ts"]) == {"type": "long", "logicalType": "timestamp-micros"}
    assert _inner(f["amount"])["precision"] == 10 and _inner(f["amount"])["scale"] == 2
    back = arrow_to_spark(avro_to_arrow(avro))
    # same types; nullability is lost on the way through Avro (Hudi makes everything nullable)
    assert back.simpleString() == df.schema.simpleString()


def test_ordering_at_least_ranks_nan_above_numbers_as_java_does():
    from hudilite.schema import ordering_at_least

    nan = float("nan")
    a = pa.array([1.0, nan, nan, 2.0, None, 1.0, 3.0])
    b = pa.array([2.0, 1.0, nan, nan, 1.0, None, 3.0])
    assert ordering_at_least(a, b).to_pylist() == [False, True, True, False, None, None, True]
    assert ordering_at_least(pa.array([1, None, 3]), pa.array([nan, 1.0, 2.0])).to_pylist() == [False, None, True]
    assert ordering_at_least(pa.array([1, 2]), pa.array([2, 1])).to_pylist() == [False, True]


def test_storage_schema_stores_wall_clocks_as_utc_and_narrow_ints_as_int32():
    from hudilite.schema import storage_schema, to_storage

    s = pa.schema([("a", pa.timestamp("us")), ("b", pa.timestamp("ms", tz="Asia/Tokyo")),
                   ("c", pa.list_(pa.timestamp("us"))), ("d", pa.int64()), ("e", pa.int8()), ("f", pa.int16()),
                   ("g", pa.uint8()), ("h", pa.uint16()), ("i", pa.struct([("x", pa.int8())])),
                   ("j", pa.map_(pa.string(), pa.int16())), ("k", pa.int32()), ("l", pa.uint32())])
    assert [f.type for f in storage_schema(s)] == [
        pa.timestamp("us", tz="UTC"), pa.timestamp("ms", tz="Asia/Tokyo"), pa.list_(pa.timestamp("us", tz="UTC")),
        pa.int64(), pa.int32(), pa.int32(), pa.int32(), pa.int32(), pa.struct([("x", pa.int32())]),
        pa.map_(pa.string(), pa.int32()), pa.int32(), pa.int64()]
    t = pa.table({"a": pa.array([dt.datetime(2024, 1, 1, 11)], pa.timestamp("us")),
                  "e": pa.array([-128], pa.int8()), "g": pa.array([255], pa.uint8())})
    stored = to_storage(t)
    assert stored.column("a").to_pylist() == [dt.datetime(2024, 1, 1, 11, tzinfo=UTC)]
    assert stored.column("a").cast(pa.timestamp("us")).to_pylist() == [dt.datetime(2024, 1, 1, 11)]
    assert (stored.schema.field("e").type, stored.column("e").to_pylist()) == (pa.int32(), [-128])
    assert (stored.schema.field("g").type, stored.column("g").to_pylist()) == (pa.int32(), [255])
