"""Hudi log file format: names, block encoding, content codecs, robust scanning, writing."""

from __future__ import annotations

import datetime as dt
import glob
import io
import json
import os
import random
import struct
import zipfile
from decimal import Decimal

import fastavro
import pyarrow as pa
import pytest

from hudilite.errors import HudiliteError
from hudilite.log import (
    MAGIC,
    AvroDataBlock,
    BlockType,
    CommandBlock,
    CorruptBlock,
    DeleteBlock,
    DeleteRecord,
    HeaderKey,
    LogBlock,
    LogFileName,
    LogFormatError,
    LogReader,
    LogWriter,
    ParquetDataBlock,
    append_blocks,
    avro_to_arrow_schema,
    decode_delete_content,
    encode_block,
    encode_delete_content,
    format_log_file_name,
    is_log_file_name,
    list_log_files,
    log_file_sort_key,
    next_log_version,
    parse_log_file_name,
    scan_log_file,
    try_parse_log_file_name,
)
from hudilite.log.blocks import DELETE_RECORD_LIST_SCHEMA

UTC = dt.timezone.utc
META = ["_hoodie_commit_time", "_hoodie_commit_seqno", "_hoodie_record_key", "_hoodie_partition_path", "_hoodie_file_name"]


def nullable(avro_type):
    return ["null", avro_type]


SCHEMA = {
    "type": "record",
    "name": "t_record",
    "namespace": "hoodie.t",
    "fields": [{"name": n, "type": ["null", "string"], "doc": "", "default": None} for n in META]
    + [
        {"name": "id", "type": "long"},
        {"name": "i", "type": nullable("int"), "default": None},
        {"name": "d", "type": nullable("double"), "default": None},
        {"name": "s", "type": nullable("string"), "default": None},
        {"name": "b", "type": nullable("boolean"), "default": None},
        {"name": "day", "type": nullable({"type": "int", "logicalType": "date"}), "default": None},
        {"name": "ts", "type": nullable({"type": "long", "logicalType": "timestamp-micros"}), "default": None},
        {
            "name": "amount",
            "type": nullable({"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 3}),
            "default": None,
        },
        {
            "name": "price",
            "type": nullable(
                {"type": "fixed", "name": "price_fixed", "size": 5, "logicalType": "decimal", "precision": 10, "scale": 2}
            ),
            "default": None,
        },
    ],
}
SCHEMA_JSON = json.dumps(SCHEMA)


def sample_table(magic_in_data: bool = True) -> pa.Table:
    ts = [dt.datetime(2024, 1, 2, 3, 4, 5, 123456, tzinfo=UTC), None, dt.datetime(1969, 12, 31, 23, 59, 59, tzinfo=UTC)]
    return pa.Table.from_pydict(
        {
            "_hoodie_commit_time": ["20240101000000000", None, "20240101000000000"],
            "_hoodie_commit_seqno": ["20240101000000000_0_1", None, "20240101000000000_0_3"],
            "_hoodie_record_key": ["k1", "k2", "k3"],
            "_hoodie_partition_path": ["p=1", "p=1", None],
            "_hoodie_file_name": pa.array([None, None, None], pa.string()),
            "id": pa.array([1, 2, -(2**62)], pa.int64()),
            "i": pa.array([7, None, -(2**31)], pa.int32()),
            "d": [1.5, None, -0.0],
            "s": ["héllo", None, "#HUDI#" if magic_in_data else "x"],
            "b": [True, None, False],
            "day": pa.array([dt.date(2024, 1, 2), None, dt.date(1900, 1, 1)], pa.date32()),
            "ts": pa.array(ts, pa.timestamp("us", tz="UTC")),
            "amount": pa.array([Decimal("123456789.123"), None, Decimal("-0.001")], pa.decimal128(12, 3)),
            "price": pa.array([Decimal("99999999.99"), None, Decimal("-1.00")], pa.decimal128(10, 2)),
        }
    )


def avro_block(instant: str = "20240101000000001", table: pa.Table | None = None) -> AvroDataBlock:
    return AvroDataBlock.from_table(sample_table() if table is None else table, SCHEMA_JSON, instant)


def three_blocks() -> list[bytes]:
    """Encoded AVRO_DATA, DELETE and COMMAND blocks with no magic inside their content."""
    return [
        encode_block(avro_block("001", sample_table(magic_in_data=False))),
        encode_block(DeleteBlock.from_keys([("k1", "p=1")], "002")),
        encode_block(CommandBlock.rollback("003", "001")),
    ]


def assert_tiles(items, size: int) -> None:
    """Blocks and corrupt ranges cover the file exactly, in order."""
    pos = 0
    for item in items:
        length = item.length if isinstance(item, CorruptBlock) else item.size
        assert item.offset == pos, (item, pos)
        assert length > 0
        pos += length
    assert pos == size


def kinds(items) -> list[str]:
    return ["CORRUPT" if isinstance(i, CorruptBlock) else i.block_type.name for i in items]


# --------------------------------------------------------------------------- names


class TestLogFileNames:
    def test_parse(self):
        lf = parse_log_file_name(".d0304c53-6fd2-4b7a-a9d6-5ff632f79224-0_20250331030642808.log.1_0-26-85")
        assert lf == LogFileName("d0304c53-6fd2-4b7a-a9d6-5ff632f79224-0", "20250331030642808", 1, "0-26-85")
        assert lf.sort_key == ("20250331030642808", 1, "0-26-85")
        assert lf.name == ".d0304c53-6fd2-4b7a-a9d6-5ff632f79224-0_20250331030642808.log.1_0-26-85"

    def test_parse_path(self):
        lf = parse_log_file_name("/t/p=1/.f1-0_001.log.12_3-4-5")
        assert (lf.file_id, lf.instant, lf.version, lf.write_token) == ("f1-0", "001", 12, "3-4-5")

    def test_format_round_trip(self):
        name = format_log_file_name("files-0000-0", "00000000000000000", 3, "0-0-0")
        assert name == ".files-0000-0_00000000000000000.log.3_0-0-0"
        assert parse_log_file_name(name).name == name

    @pytest.mark.parametrize(
        "name",
        [
            "f1_001.log.1_0-1-2",  # no leading dot
            ".f1_001.log.1",  # no write token
            ".f1_001.log.1_",  # empty write token
            "._001.log.1_0-1-2",  # empty file id
            ".f1_001.log.x_0-1-2",  # version not a number
            ".f1_00a.log.1_0-1-2",  # instant not digits
            ".f1_001.logs.1_0-1-2",  # wrong marker
            ".f1_001.log._0-1-2",  # empty version
            ".f1_001.log.1.2_0-1-2",  # extra dot part
            ".f1_x_001.log.1_0-1-2",  # middle has an underscore
            "f1_0-1-2_20240101000000000.parquet",  # a base file
            ".hoodie_partition_metadata",
            ".f1_001.archive.1_0-1-2",
        ],
    )
    def test_reject_wrong_shape(self, name):
        with pytest.raises(ValueError):
            parse_log_file_name(name)
        assert try_parse_log_file_name(name) is None
        assert not is_log_file_name(name)

    @pytest.mark.parametrize(
        "args",
        [
            ("f_1", "001", 1, "0-1-2"),
            ("", "001", 1, "0-1-2"),
            ("f1", "2024-01", 1, "0-1-2"),
            ("f1", "001", 0, "0-1-2"),
            ("f1", "001", True, "0-1-2"),
            ("f1", "001", 1, "0_1"),
            ("f1", "001", 1, ""),
        ],
    )
    def test_format_rejects(self, args):
        with pytest.raises(ValueError):
            format_log_file_name(*args)

    def test_sort_key(self):
        names = [
            ".f_002.log.1_0-1-1",
            ".f_001.log.10_0-1-1",
            ".f_001.log.9_0-1-1",
            ".f_001.log.9_0-0-1",
        ]
        assert sorted(names, key=log_file_sort_key) == [
            ".f_001.log.9_0-0-1",
            ".f_001.log.9_0-1-1",
            ".f_001.log.10_0-1-1",
            ".f_002.log.1_0-1-1",
        ]
        assert log_file_sort_key(parse_log_file_name(names[1])) == ("001", 10, "0-1-1")

    def test_list_and_next_version(self, tmp_path):
        for name in [".a_001.log.1_0-1-1", ".a_001.log.2_0-1-1", ".a_002.log.5_0-1-1", ".b_001.log.7_0-1-1", "a_0-1-1_001.parquet"]:
            (tmp_path / name).write_bytes(b"")
        assert [f.name for f in list_log_files(tmp_path, "a")] == [
            ".a_001.log.1_0-1-1",
            ".a_001.log.2_0-1-1",
            ".a_002.log.5_0-1-1",
        ]
        assert list_log_files(tmp_path, "a", "001")[0] == LogFileName("a", "001", 1, "0-1-1")
        assert next_log_version(tmp_path, "a", "001") == 3
        assert next_log_version(tmp_path, "a", "002") == 6
        assert next_log_version(tmp_path, "c", "001") == 1
        assert next_log_version(tmp_path / "missing", "a", "001") == 1


# --------------------------------------------------------------------------- frame


def test_golden_command_block():
    """A rollback block, written out byte by byte from the layout in hudi-format.md §7a."""
    expected = (
        b"#HUDI#"
        + bytes.fromhex("000000000000003f")  # blockLength 63
        + bytes.fromhex("00000001")  # formatVersion 1
        + bytes.fromhex("00000000")  # blockType COMMAND
        + bytes.fromhex("00000003")  # header: 3 entries
        + bytes.fromhex("00000000 00000003") + b"002"  # INSTANT_TIME
        + bytes.fromhex("00000001 00000003") + b"001"  # TARGET_INSTANT_TIME
        + bytes.fromhex("00000003 00000001") + b"0"  # COMMAND_BLOCK_TYPE rollback
        + bytes.fromhex("0000000000000000")  # contentLength 0
        + bytes.fromhex("00000000")  # footer: 0 entries
        + bytes.fromhex("0000000000000045")  # totalBlockSize 69 = 63 + 6
    )
    assert len(expected) == 6 + 8 + 63
    assert encode_block(CommandBlock.rollback("002", "001")) == expected
    (block,) = scan_log_file(expected)
    assert isinstance(block, CommandBlock)
    assert block.is_rollback and block.instant_time == "002" and block.target_instant_time == "001"
    assert (block.offset, block.size, block.content) == (0, len(expected), b"")


def test_golden_delete_content_matches_java():
    """Bytes of a Spark SQL DELETE block content in a Hudi-written table (v9_txns_nonpart_meta)."""
    java = b"\x00\x00\x00\x03\x00\x00\x00\x0f\x02\x02\x0eTXN-002\x02\x00\x04\x00\x00"
    assert encode_delete_content([("TXN-002", "")]) == java
    records, ordering_type = decode_delete_content(java)
    assert records == [("TXN-002", "", 0)] and ordering_type == "int"


def test_block_length_fields():
    data = encode_block(avro_block())
    (length,) = struct.unpack_from(">q", data, 6)
    assert data[:6] == MAGIC
    assert length == len(data) - 14
    assert struct.unpack_from(">q", data, len(data) - 8)[0] == length + 6
    assert struct.unpack_from(">ii", data, 14) == (1, int(BlockType.AVRO_DATA))


def test_header_and_footer_round_trip():
    block = LogBlock(
        BlockType.CDC_DATA,
        {HeaderKey.INSTANT_TIME: "003", HeaderKey.BLOCK_IDENTIFIER: "7", 42: "unknown key", HeaderKey.SCHEMA: "é"},
        b"raw \x00 content",
        {HeaderKey.IS_PARTIAL: "false"},
    )
    data = encode_block(block)
    (back,) = scan_log_file(data)
    assert type(back) is LogBlock and back.block_type is BlockType.CDC_DATA
    assert back.header == block.header and list(back.header) == list(block.header)
    assert isinstance(list(back.header)[0], HeaderKey) and 42 in back.header
    assert back.footer == {HeaderKey.IS_PARTIAL: "false"}
    assert back.content == b"raw \x00 content"
    assert encode_block(back) == data


def test_header_values_must_be_text():
    with pytest.raises(TypeError, match="must be str"):
        encode_block(LogBlock(BlockType.COMMAND, {HeaderKey.COMMAND_BLOCK_TYPE: 0}))


def test_hfile_block_raw_round_trip():
    block = LogBlock(BlockType.HFILE_DATA, {HeaderKey.INSTANT_TIME: "1"}, b"HFILE bytes")
    (back,) = scan_log_file(encode_block(block))
    assert back.block_type is BlockType.HFILE_DATA and back.content == b"HFILE bytes"


# --------------------------------------------------------------------------- avro data


class TestAvroDataBlock:
    def test_round_trip_table(self):
        table = sample_table()
        block = avro_block(table=table)
        assert block.header == {HeaderKey.INSTANT_TIME: "20240101000000001", HeaderKey.SCHEMA: SCHEMA_JSON}
        (back,) = scan_log_file(encode_block(block))
        assert isinstance(back, AvroDataBlock)
        assert back.record_count == 3
        out = back.records()
        assert out.schema == avro_to_arrow_schema(SCHEMA_JSON)
        assert out.to_pylist() == table.to_pylist()
        assert out.cast(table.schema).equals(table)

    def test_content_layout(self):
        content = avro_block().content
        assert struct.unpack_from(">ii", content) == (3, 3)
        (size,) = struct.unpack_from(">i", content, 8)
        record = fastavro.schemaless_reader(io.BytesIO(content[12 : 12 + size]), fastavro.parse_schema(SCHEMA))
        assert record["_hoodie_record_key"] == "k1" and record["amount"] == Decimal("123456789.123")
        assert record["ts"] == dt.datetime(2024, 1, 2, 3, 4, 5, 123456, tzinfo=UTC)

    def test_arrow_schema_derivation(self):
        schema = avro_to_arrow_schema(SCHEMA_JSON)
        assert schema.field("_hoodie_commit_time").nullable
        assert schema.field("id").type == pa.int64() and not schema.field("id").nullable
        assert schema.field("i").type == pa.int32()
        assert schema.field("day").type == pa.date32()
        assert schema.field("ts").type == pa.timestamp("us", tz="UTC")
        assert schema.field("amount").type == pa.decimal128(12, 3)
        assert schema.field("price").type == pa.decimal128(10, 2)

    def test_record_dicts_use_logical_types(self):
        rows = avro_block().record_dicts()
        assert rows[0]["day"] == dt.date(2024, 1, 2)
        assert rows[0]["price"] == Decimal("99999999.99")
        assert rows[1]["ts"] is None and rows[1]["_hoodie_commit_time"] is None

    def test_from_records_matches_from_table(self):
        rows = sample_table().to_pylist()
        a = AvroDataBlock.from_records(rows, SCHEMA, "1")
        assert a.content == AvroDataBlock.from_table(sample_table(), SCHEMA, "1").content

    def test_target_arrow_schema(self):
        target = pa.schema(
            [
                ("s", pa.string()),
                ("ts", pa.timestamp("us")),
                ("id", pa.int64()),
                ("missing", pa.int16()),
            ]
        )
        out = avro_block().records(target)
        assert out.schema == target
        assert out.column("s").to_pylist() == ["héllo", None, "#HUDI#"]
        assert out.column("ts")[0].as_py() == dt.datetime(2024, 1, 2, 3, 4, 5, 123456)
        assert out.column("missing").null_count == 3

    def test_timestamp_units_and_input_types(self):
        schema = {
            "type": "record",
            "name": "r",
            "fields": [
                {"name": "ms", "type": {"type": "long", "logicalType": "timestamp-millis"}},
                {"name": "local", "type": nullable({"type": "long", "logicalType": "local-timestamp-micros"})},
                {"name": "t", "type": {"type": "long", "logicalType": "time-micros"}},
                {"name": "raw", "type": nullable({"type": "long", "logicalType": "timestamp-micros"})},
            ],
        }
        table = pa.table(
            {
                "ms": pa.array([dt.datetime(2024, 5, 6, 7, 8, 9, 123000)], pa.timestamp("ms")),
                "local": pa.array([dt.datetime(2024, 5, 6, 7, 8, 9, 1)], pa.timestamp("us")),
                "t": pa.array([dt.time(1, 2, 3, 4)], pa.time64("us")),
                "raw": pa.array([1_000_000], pa.int64()),  # plain micros pass through
            }
        )
        block = AvroDataBlock.from_table(table, schema, "1")
        out = block.records()
        assert out.schema.field("ms").type == pa.timestamp("ms", tz="UTC")
        assert out.column("ms")[0].as_py() == dt.datetime(2024, 5, 6, 7, 8, 9, 123000, tzinfo=UTC)
        assert out.column("local")[0].as_py() == dt.datetime(2024, 5, 6, 7, 8, 9, 1)
        assert out.column("t")[0].as_py() == dt.time(1, 2, 3, 4)
        assert out.column("raw")[0].as_py() == dt.datetime(1970, 1, 1, 0, 0, 1, tzinfo=UTC)
        # nanosecond input that would lose precision is refused, not truncated
        bad = table.set_column(0, "ms", pa.array([1], pa.timestamp("ns")))
        with pytest.raises(pa.ArrowInvalid):
            AvroDataBlock.from_table(bad, schema, "1")

    def test_nested_types(self):
        schema = {
            "type": "record",
            "name": "r",
            "namespace": "hoodie.n",
            "fields": [
                {
                    "name": "st",
                    "type": nullable(
                        {
                            "type": "record",
                            "name": "st",
                            "fields": [
                                {"name": "a", "type": nullable("string")},
                                {"name": "when", "type": nullable({"type": "long", "logicalType": "timestamp-micros"})},
                            ],
                        }
                    ),
                },
                {"name": "arr", "type": nullable({"type": "array", "items": nullable("int")})},
                {"name": "m", "type": nullable({"type": "map", "values": nullable("st")})},
                {"name": "e", "type": {"type": "enum", "name": "color", "symbols": ["RED", "GREEN"]}},
                {"name": "fx", "type": {"type": "fixed", "name": "four", "size": 4}},
            ],
        }
        when = dt.datetime(2020, 1, 1, tzinfo=UTC)
        rows = [
            {"st": {"a": "x", "when": when}, "arr": [1, None], "m": {"k": {"a": "y", "when": None}}, "e": "GREEN", "fx": b"abcd"},
            {"st": None, "arr": None, "m": None, "e": "RED", "fx": b"\x00\x00\x00\x00"},
        ]
        block = AvroDataBlock.from_records(rows, schema, "1")
        table = block.records()
        assert table.schema.field("m").type == pa.map_(pa.string(), table.schema.field("st").type)
        assert table.schema.field("fx").type == pa.binary(4)
        back = AvroDataBlock.from_table(table, schema, "1")
        assert back.content == block.content
        assert back.record_dicts() == rows

    def test_empty_block(self):
        block = avro_block(table=sample_table().slice(0, 0))
        assert block.content == struct.pack(">ii", 3, 0)
        out = scan_log_file(encode_block(block))[0].records()
        assert out.num_rows == 0 and out.schema == avro_to_arrow_schema(SCHEMA_JSON)

    def test_errors(self):
        assert issubclass(LogFormatError, HudiliteError) and issubclass(LogFormatError, ValueError)
        with pytest.raises(LogFormatError, match="not in the Avro schema"):
            AvroDataBlock.from_table(sample_table().append_column("extra", pa.array([1, 2, 3])), SCHEMA, "1")
        with pytest.raises(LogFormatError, match="does not fit"):
            AvroDataBlock.from_records([{"id": "not a long"}], SCHEMA, "1")
        with pytest.raises(LogFormatError, match="SCHEMA"):
            AvroDataBlock({HeaderKey.INSTANT_TIME: "1"}, avro_block().content).records()
        content = bytearray(avro_block().content)
        content[3] = 2
        with pytest.raises(LogFormatError, match="version 2"):
            AvroDataBlock({HeaderKey.SCHEMA: SCHEMA_JSON}, bytes(content)).records()
        with pytest.raises(LogFormatError):
            AvroDataBlock({HeaderKey.SCHEMA: SCHEMA_JSON}, avro_block().content[:-3]).records()
        with pytest.raises(LogFormatError, match="union"):
            avro_to_arrow_schema({"type": "record", "name": "r", "fields": [{"name": "u", "type": ["int", "string"]}]})


# --------------------------------------------------------------------------- parquet data


def test_parquet_block_round_trip():
    table = sample_table()
    block = ParquetDataBlock.from_table(table, "005", schema=SCHEMA)
    assert block.content[:4] == b"PAR1" and block.content[-4:] == b"PAR1"
    assert block.header == {HeaderKey.INSTANT_TIME: "005", HeaderKey.SCHEMA: SCHEMA_JSON}
    (back,) = scan_log_file(encode_block(block))
    assert isinstance(back, ParquetDataBlock)
    assert back.records().equals(table)
    target = pa.schema([("id", pa.int64()), ("nope", pa.string())])
    assert back.records(target).to_pylist() == [{"id": 1, "nope": None}, {"id": 2, "nope": None}, {"id": -(2**62), "nope": None}]
    assert HeaderKey.SCHEMA not in ParquetDataBlock.from_table(table, "005").header
    # a block made from a table reads back that table without decoding, as the decoded block does
    assert block.records().equals(back.records())
    assert block.records(target).equals(back.records(target))


# --------------------------------------------------------------------------- delete


class TestDeleteBlock:
    def test_default_natural_ordering_zero(self):
        block = DeleteBlock.from_keys([("k1", "p=1"), ("k2", None)], "004")
        (back,) = scan_log_file(encode_block(block))
        assert isinstance(back, DeleteBlock)
        assert back.delete_keys() == [("k1", "p=1", 0), ("k2", None, 0)]
        assert back.ordering_type == "int"
        # branch 2 (zigzag 0x04), value 0: the bytes Spark SQL DELETE writes
        assert b"\x04\x00" in back.content

    def test_explicit_long_zero(self):
        block = DeleteBlock.from_keys([DeleteRecord("k1", "p", None)], "004", ordering_type="long")
        assert block.delete_keys() == [DeleteRecord("k1", "p", 0)]
        assert block.ordering_type == "long"
        assert block.content.endswith(b"\x06\x00\x00")  # branch 3, value 0, array end

    def test_string_ordering_values(self):
        block = DeleteBlock.from_keys([("k1", "p", "b"), ("k2", "p", "a")], "004")
        assert block.ordering_type == "string"
        assert block.delete_keys() == [("k1", "p", "b"), ("k2", "p", "a")]

    @pytest.mark.parametrize(
        "ordering_type, values, expected",
        [
            ("boolean", [True, False], [True, False]),
            ("int", [-(2**31), 5], [-(2**31), 5]),
            ("long", [2**62, None], [2**62, 0]),
            ("float", [1.5, 2], [1.5, 2.0]),
            ("double", [0.1, -2.5], [0.1, -2.5]),
            ("bytes", [b"\x00\xff", bytearray(b"x")], [b"\x00\xff", b"x"]),
            ("string", ["z", ""], ["z", ""]),
            ("date", [dt.date(2024, 2, 29), 1], [dt.date(2024, 2, 29), dt.date(1970, 1, 2)]),
            ("decimal", [Decimal("-12.5"), 7], [Decimal("-12.500000000000000"), Decimal("7.000000000000000")]),
            ("time-micros", [dt.time(23, 59, 59, 999999), 0], [dt.time(23, 59, 59, 999999), dt.time(0)]),
            (
                "timestamp-micros",
                [dt.datetime(2024, 1, 1, 12, tzinfo=UTC), dt.datetime(2024, 1, 1, 12)],
                [dt.datetime(2024, 1, 1, 12, tzinfo=UTC)] * 2,
            ),
            ("array", [[1, "a", None], None], [[1, "a", None], None]),
            ("null", [None, None], [None, None]),
        ],
    )
    def test_every_branch_round_trips(self, ordering_type, values, expected):
        keys = [(f"k{i}", "p", v) for i, v in enumerate(values)]
        block = DeleteBlock.from_keys(keys, "1", ordering_type=ordering_type)
        (back,) = scan_log_file(encode_block(block))
        assert back.ordering_type == ordering_type
        assert [r.ordering_val for r in back.delete_keys()] == expected

    def test_branch_chosen_from_first_value(self):
        cases = [
            (5, "long"),
            (1.0, "double"),
            (True, "boolean"),
            (Decimal("1.5"), "decimal"),
            (dt.datetime(2024, 1, 1), "timestamp-micros"),
            (dt.date(2024, 1, 1), "date"),
            (b"x", "bytes"),
        ]
        for value, expected in cases:
            assert DeleteBlock.from_keys([("k", "p", value)], "1").ordering_type == expected
        mixed = DeleteBlock.from_keys([("k0", "p", None), ("k1", "p", 5)], "1")
        assert mixed.ordering_type == "long" and mixed.delete_keys() == [("k0", "p", 0), ("k1", "p", 5)]

    def test_branch_numbers_follow_hudi_schema(self):
        """Union positions of the HoodieDeleteRecordList schema in the hudi 0.5.0 wheel and Java."""
        union = DELETE_RECORD_LIST_SCHEMA["fields"][0]["type"]["items"]["fields"][2]["type"]
        names = ["null"] + [t["name"] for t in union[1:]]
        assert names == [
            "null",
            "BooleanWrapper",
            "IntWrapper",
            "LongWrapper",
            "FloatWrapper",
            "DoubleWrapper",
            "BytesWrapper",
            "StringWrapper",
            "DateWrapper",
            "DecimalWrapper",
            "TimeMicrosWrapper",
            "TimestampMicrosWrapper",
            "ArrayWrapper",
        ]
        assert DELETE_RECORD_LIST_SCHEMA["namespace"] == "org.apache.hudi.avro.model"
        content = encode_delete_content([("k", "p", "s")])
        assert content[8:] == b"\x02\x02\x02k\x02\x02p\x0e\x02s\x00"  # string = branch 7

    def test_empty(self):
        block = DeleteBlock.from_keys([], "1")
        assert block.content == b"\x00\x00\x00\x03\x00\x00\x00\x01\x00"
        assert block.delete_keys() == [] and block.ordering_type is None

    def test_errors(self):
        with pytest.raises(LogFormatError, match="range"):
            encode_delete_content([("k", "p", 2**31)], "int")
        with pytest.raises(LogFormatError, match="needs a str"):
            encode_delete_content([("k", "p", 5)], "string")
        with pytest.raises(LogFormatError, match="no ordering value"):
            encode_delete_content([("k", "p", "a"), ("k2", "p", None)])
        with pytest.raises(LogFormatError, match="unknown ordering type"):
            encode_delete_content([("k", "p", 1)], "time-millis")
        with pytest.raises(LogFormatError, match="decimal"):
            encode_delete_content([("k", "p", Decimal("1e20"))])
        with pytest.raises(TypeError):
            encode_delete_content([("k", "p", object())])
        with pytest.raises(LogFormatError, match="Kryo"):
            decode_delete_content(b"\x00\x00\x00\x02\x00\x00\x00\x00")
        with pytest.raises(LogFormatError, match="does not match"):
            decode_delete_content(encode_delete_content([("k", "p")]) + b"\x00")


# --------------------------------------------------------------------------- scanning


class TestRobustScan:
    def test_valid_file(self, tmp_path):
        blocks = three_blocks()
        path = tmp_path / ".f_001.log.1_0-1-1"
        path.write_bytes(b"".join(blocks))
        items = scan_log_file(path)
        assert kinds(items) == ["AVRO_DATA", "DELETE", "COMMAND"]
        assert [i.size for i in items] == [len(b) for b in blocks]
        assert all(i.path == str(path) for i in items)
        assert items[0].records().to_pylist() == sample_table(False).to_pylist()  # content read lazily from the file
        assert kinds(scan_log_file(path.read_bytes())) == kinds(items)
        assert_tiles(items, path.stat().st_size)

    def test_empty_file(self, tmp_path):
        (tmp_path / "e").write_bytes(b"")
        assert scan_log_file(tmp_path / "e") == [] and scan_log_file(b"") == []

    def test_truncated_tail(self):
        b1, b2, _ = three_blocks()
        for cut in (1, 6, 10, 14, 30, len(b2) - 1):
            data = b1 + b2[:cut]
            items = scan_log_file(data)
            assert kinds(items) == ["AVRO_DATA", "CORRUPT"], cut
            assert (items[1].offset, items[1].length) == (len(b1), cut)
            assert_tiles(items, len(data))

    def test_truncated_block_followed_by_valid_block(self):
        """Writer died mid-block and the retry appended the blocks again: the damaged block's
        claimed length reaches into the retried blocks, yet they are all found because the
        search restarts right after the damaged block's magic."""
        b1, b2, b3 = three_blocks()
        data = b1[:-20] + b1 + b2 + b3
        (claimed,) = struct.unpack_from(">q", data, 6)
        assert len(b1) - 20 < 14 + claimed < len(data)  # the claimed end lies inside the retried block
        items = scan_log_file(data)
        assert kinds(items) == ["CORRUPT", "AVRO_DATA", "DELETE", "COMMAND"]
        assert (items[0].offset, items[0].length) == (0, len(b1) - 20)
        assert "trailing block size" in items[0].reason
        assert items[1].records().num_rows == 3
        assert items[2].delete_keys() == [("k1", "p=1", 0)]

    def test_garbage_between_blocks(self):
        b1, b2, b3 = three_blocks()
        garbage = b"\x00garbage#HUD\xff" * 3
        data = garbage + b1 + garbage + b2 + b3 + garbage
        items = scan_log_file(data)
        assert kinds(items) == ["CORRUPT", "AVRO_DATA", "CORRUPT", "DELETE", "COMMAND", "CORRUPT"]
        assert [(i.offset, i.length) for i in items if isinstance(i, CorruptBlock)] == [
            (0, len(garbage)),
            (len(garbage) + len(b1), len(garbage)),
            (len(data) - len(garbage), len(garbage)),
        ]
        assert all("no magic" in i.reason for i in items if isinstance(i, CorruptBlock))

    def test_length_points_past_end_of_file(self):
        b1, b2, b3 = three_blocks()
        bad = bytearray(b1)
        struct.pack_into(">q", bad, 6, 10**9)
        data = bytes(bad) + b2 + b3
        items = scan_log_file(data)
        assert kinds(items) == ["CORRUPT", "DELETE", "COMMAND"]
        assert (items[0].offset, items[0].length) == (0, len(b1))
        assert "past the end" in items[0].reason

    @pytest.mark.parametrize("length", [-1, 0, 31, 2**63 - 1])
    def test_implausible_length(self, length):
        b1, b2, _ = three_blocks()
        bad = bytearray(b1)
        struct.pack_into(">q", bad, 6, length)
        items = scan_log_file(bytes(bad) + b2)
        assert kinds(items) == ["CORRUPT", "DELETE"]

    def test_trailing_size_mismatch(self):
        b1, b2, b3 = three_blocks()
        bad = bytearray(b2)
        struct.pack_into(">q", bad, len(bad) - 8, len(bad) + 1)
        data = b1 + bytes(bad) + b3
        items = scan_log_file(data)
        assert kinds(items) == ["AVRO_DATA", "CORRUPT", "COMMAND"]
        assert (items[1].offset, items[1].length) == (len(b1), len(b2))
        assert "trailing block size" in items[1].reason

    def test_shorter_stated_length(self):
        b1, b2, b3 = three_blocks()
        bad = bytearray(b1)
        struct.pack_into(">q", bad, 6, len(b1) - 14 - 10)
        items = scan_log_file(bytes(bad) + b2 + b3)
        assert kinds(items) == ["CORRUPT", "DELETE", "COMMAND"]
        assert items[0].length == len(b1)

    def test_fields_do_not_fill_block(self):
        """Length and trailing size agree, but the content length is off: not a block."""
        b1, b2, _ = three_blocks()
        bad = bytearray(b2)
        header_end = 26 + 8 + len("002") + 4  # one header entry: INSTANT_TIME
        (content_length,) = struct.unpack_from(">q", bad, header_end)
        struct.pack_into(">q", bad, header_end, content_length - 4)
        items = scan_log_file(b1 + bytes(bad))
        assert kinds(items) == ["AVRO_DATA", "CORRUPT"]
        assert "bytes before the trailing block size" in items[1].reason

    def test_magic_repeated(self):
        """A writer died right after writing the magic, and the next one appended."""
        b1, b2, b3 = three_blocks()
        data = b1 + MAGIC + MAGIC + b2 + MAGIC + b3 + MAGIC
        items = scan_log_file(data)
        assert kinds(items) == ["AVRO_DATA", "CORRUPT", "CORRUPT", "DELETE", "CORRUPT", "COMMAND", "CORRUPT"]
        assert all(i.length == 6 for i in items if isinstance(i, CorruptBlock))
        assert_tiles(items, len(data))

    def test_partial_magic_overlapping_next_magic(self):
        """A block cut after 5 bytes (`#HUDI`) forms a false magic with the next block's `#`."""
        b1, b2, _ = three_blocks()
        data = b1 + MAGIC[:5] + b2 + MAGIC[:5] + b2
        items = scan_log_file(data)
        assert kinds(items) == ["AVRO_DATA", "CORRUPT", "DELETE", "CORRUPT", "DELETE"]
        assert items[1].length == 5 and items[3].length == 5

    def test_unknown_block_type_and_version(self):
        b1, b2, _ = three_blocks()
        for field_offset, value, reason in [(18, 9, "unknown block type 9"), (14, 2, "unknown log format version 2")]:
            bad = bytearray(b1)
            struct.pack_into(">i", bad, field_offset, value)
            items = scan_log_file(bytes(bad) + b2)
            assert kinds(items) == ["CORRUPT", "DELETE"]
            assert reason in items[0].reason

    def test_legacy_version_zero_is_reported_corrupt(self):
        b1, b2, _ = three_blocks()
        legacy = MAGIC + struct.pack(">qi", 40, 0) + b"\x01" * 36
        items = scan_log_file(b1 + legacy + b2)
        assert kinds(items) == ["AVRO_DATA", "CORRUPT", "DELETE"]
        assert "legacy" in items[1].reason and items[1].length == len(legacy)

    def test_bad_header(self):
        b1, b2, _ = three_blocks()
        bad = bytearray(b2)
        struct.pack_into(">i", bad, 26 + 4, 10**6)  # header value length beyond the block
        items = scan_log_file(b1 + bytes(bad))
        assert kinds(items) == ["AVRO_DATA", "CORRUPT"]
        assert "header entry 0 value" in items[1].reason

    def test_magic_inside_content_is_not_a_boundary(self):
        block = DeleteBlock.from_keys([("#HUDI#", "#HUDI#" * 3)], "1")
        items = scan_log_file(encode_block(block) + encode_block(block))
        assert kinds(items) == ["DELETE", "DELETE"]

    def test_magic_inside_damaged_content_splits_region(self):
        """Inside a damaged block, a magic in the data is a candidate too: it is tried,
        rejected, and starts a new corrupt range; the next valid block is still found."""
        b1 = encode_block(avro_block("001"))  # a string value is "#HUDI#"
        _, b2, _ = three_blocks()
        bad = bytearray(b1)
        struct.pack_into(">q", bad, len(bad) - 8, 0)
        items = scan_log_file(bytes(bad) + b2)
        assert kinds(items) == ["CORRUPT", "CORRUPT", "DELETE"]
        assert items[1].offset == b1.index(MAGIC, 6)
        assert_tiles(items, len(bad) + len(b2))

    def test_fuzz_intact_blocks_always_found(self):
        """Random truncations, bit flips and garbage: the scan never fails, covers the file,
        and finds every block whose bytes were left intact."""
        blocks = three_blocks() * 2
        rng = random.Random(1234)
        for _ in range(300):
            data, intact = b"", []
            for block in blocks:
                action = rng.choice(["keep", "keep", "truncate", "flip", "garbage"])
                if action == "truncate":
                    block = block[: rng.randrange(0, len(block))]
                elif action == "flip":
                    i = rng.randrange(len(block))
                    block = block[:i] + bytes([block[i] ^ (1 << rng.randrange(8))]) + block[i + 1 :]
                elif action == "garbage":
                    garbage = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 20)))
                    data += garbage + rng.choice([b"", b"#", b"#HUDI"])
                if action in ("keep", "garbage"):
                    intact.append((len(data), len(block)))
                data += block
            items = scan_log_file(data)
            assert_tiles(items, len(data))
            found = {(i.offset, i.size) for i in items if isinstance(i, LogBlock)}
            assert set(intact) <= found


# --------------------------------------------------------------------------- writing


class TestWriter:
    def test_append_blocks_returns_locations(self, tmp_path):
        path = tmp_path / ".f_001.log.1_0-1-1"
        first = append_blocks(path, [avro_block("001"), DeleteBlock.from_keys([("k1", "p")], "002")])
        second = append_blocks(path, [CommandBlock.rollback("003", "002")])
        assert [loc.offset for loc in first + second] == [0, first[0].size, first[0].size + first[1].size]
        assert sum(loc.size for loc in first + second) == path.stat().st_size
        items = scan_log_file(path)
        assert [(i.offset, i.size) for i in items] == [(loc.offset, loc.size) for loc in first + second]
        assert append_blocks(path, []) == []

    def test_append_after_damaged_tail(self, tmp_path):
        path = tmp_path / ".f_001.log.1_0-1-1"
        b1, b2, _ = three_blocks()
        path.write_bytes(b1 + b2[:20])
        (loc,) = append_blocks(path, [CommandBlock.rollback("003", "001")], fsync=False)
        assert loc.offset == len(b1) + 20
        assert kinds(scan_log_file(path)) == ["AVRO_DATA", "CORRUPT", "COMMAND"]

    def test_writer_versions_and_roll_over(self, tmp_path):
        part = tmp_path / "p=1"
        writer = LogWriter(part, "fid-0", "001", "0-1-1", max_file_size=50)
        assert writer.version == 1 and writer.path == str(part / ".fid-0_001.log.1_0-1-1")
        blocks = [DeleteBlock.from_keys([(f"k{i}", "p")], f"00{i + 2}") for i in range(3)]
        assert len(encode_block(blocks[0])) > 50
        locations = writer.append(blocks[:2])
        assert [os.path.basename(loc.path)[-11:] for loc in locations] == ["log.1_0-1-1", "log.2_0-1-1"]
        writer.append(blocks[2:])
        assert writer.version == 3
        assert [f.version for f in list_log_files(part, "fid-0", "001")] == [1, 2, 3]
        # a new writer starts at the next free version
        assert LogWriter(part, "fid-0", "001", "0-2-2").version == 4
        reader = LogReader.for_file_group(part, "fid-0", "001")
        assert [b.instant_time for b in reader.blocks()] == ["002", "003", "004"]

    def test_writer_appends_to_explicit_version_until_full(self, tmp_path):
        writer = LogWriter(tmp_path, "f", "001", "0-1-1", version=1)
        writer.append([CommandBlock.rollback("002", "001")])
        writer = LogWriter(tmp_path, "f", "001", "0-1-1", version=1)
        writer.append([CommandBlock.rollback("003", "002")])
        assert kinds(scan_log_file(writer.path)) == ["COMMAND", "COMMAND"]

    def test_writer_rejects_bad_names(self, tmp_path):
        with pytest.raises(ValueError):
            LogWriter(tmp_path, "f_1", "001", "0-1-1")


def test_log_reader_orders_files_and_rollbacks(tmp_path):
    names = [".f_001.log.10_0-1-1", ".f_001.log.2_0-1-1", ".f_001.log.9_0-1-1"]
    instants = {"10": "004", "2": "002", "9": "003"}
    for name in names:
        version = name.split(".log.")[1].split("_")[0]
        blocks = [DeleteBlock.from_keys([("k", "p")], instants[version])]
        if version == "10":
            blocks.append(CommandBlock.rollback("005", "003"))
        append_blocks(tmp_path / name, blocks, fsync=False)
    with open(tmp_path / names[0], "ab") as f:
        f.write(b"junk")
    reader = LogReader(tmp_path / n for n in names)
    assert [os.path.basename(p) for p in reader.paths] == [names[1], names[2], names[0]]
    assert [b.instant_time for b in reader.blocks()] == ["002", "003", "004", "005"]
    assert reader.rollback_targets() == {"003"}
    assert [b.instant_time for b in reader.blocks(skip_rolled_back=True)] == ["002", "004"]
    (corrupt,) = reader.corrupt_blocks()
    assert corrupt.path == str(tmp_path / names[0]) and corrupt.length == 4


# --------------------------------------------------------------------------- real Hudi logs

HUDI_TABLES = "/work/shared/hudi-tables"
MOR_ZIPS = sorted(glob.glob(os.path.join(HUDI_TABLES, "**", "mor", "**", "*.zip"), recursive=True))


@pytest.mark.skipif(not MOR_ZIPS, reason="Hudi-written test tables not available")
def test_hudi_written_logs_decode_and_reencode_byte_for_byte():
    seen = set()
    for zip_path in MOR_ZIPS:
        with zipfile.ZipFile(zip_path) as zf:
            for name in zf.namelist():
                if "__MACOSX" in name or not is_log_file_name(name):
                    continue
                data = zf.read(name)
                items = scan_log_file(data)
                assert_tiles(items, len(data))
                for block in items:
                    assert not isinstance(block, CorruptBlock), (zip_path, name, block)
                    assert encode_block(block) == data[block.offset : block.offset + block.size]
                    seen.add(block.block_type)
                    if isinstance(block, AvroDataBlock):
                        table = block.records()
                        assert table.num_rows == block.record_count
                        assert AvroDataBlock.from_table(table, block.schema, "0").content == block.content
                    elif isinstance(block, ParquetDataBlock):
                        assert block.records().num_rows > 0
                    elif isinstance(block, DeleteBlock):
                        assert encode_delete_content(block.delete_keys(), block.ordering_type) == block.content
    assert {BlockType.AVRO_DATA, BlockType.PARQUET_DATA, BlockType.DELETE, BlockType.HFILE_DATA} <= seen
