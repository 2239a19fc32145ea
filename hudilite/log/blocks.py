"""Log blocks: in-memory block objects, the block frame encoding, and content codecs.

Content codecs (hudi-format.md §7a):
- AVRO_DATA: int32 3, int32 count, per record int32 length + schemaless Avro datum
  written with the SCHEMA header; converted from/to pyarrow Tables.
- PARQUET_DATA: a complete Parquet file.
- DELETE: int32 3, int32 length, Avro `HoodieDeleteRecordList`.
- COMMAND: no content, rollback headers.

The DELETE union for `orderingVal` is the one Hudi Java writes and the installed
hudi 0.5.0 wheel embeds: `null` followed by single-field wrapper records
(Boolean, Int, Long, Float, Double, Bytes, String, Date, Decimal(30,15),
TimeMicros, TimestampMicros, Array). Binary branch numbers follow that order.
"""

from __future__ import annotations

import datetime as dt
import decimal
import functools
import io
import json
import struct
from typing import Any, Callable, Iterable, Mapping, NamedTuple, Sequence

import fastavro
import fastavro.schema
import pyarrow as pa
import pyarrow.parquet as pq

from hudilite.log.format import (
    DATA_BLOCK_VERSION,
    FORMAT_VERSION,
    MAGIC,
    BlockType,
    CommandType,
    HeaderKey,
    LogFormatError,
    header_key,
)
from hudilite.schema import has_promotion, promote, to_storage

_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_UTC = dt.timezone.utc
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=_UTC)
_EPOCH_DATE = dt.date(1970, 1, 1)


# --------------------------------------------------------------------------- blocks


class LogBlock:
    """One log block. Content bytes are loaded lazily for blocks read from a file."""

    def __init__(
        self,
        block_type: BlockType | int,
        header: Mapping[int, str] | None = None,
        content: bytes | None = b"",
        footer: Mapping[int, str] | None = None,
        *,
        content_loader: Callable[[], bytes] | None = None,
        offset: int | None = None,
        size: int | None = None,
        path: str | None = None,
    ) -> None:
        self.block_type = BlockType(block_type)
        self.header: dict[HeaderKey | int, str] = {header_key(k): v for k, v in (header or {}).items()}
        self.footer: dict[HeaderKey | int, str] = {header_key(k): v for k, v in (footer or {}).items()}
        self._content = content if content_loader is None else None
        self._loader = content_loader
        self.offset = offset
        self.size = size
        self.path = path

    @property
    def content(self) -> bytes:
        if self._content is None:
            assert self._loader is not None  # __init__ sets one of the two
            self._content = self._loader()
        return self._content

    @property
    def instant_time(self) -> str | None:
        return self.header.get(HeaderKey.INSTANT_TIME)

    @property
    def schema(self) -> str | None:
        return self.header.get(HeaderKey.SCHEMA)

    def __repr__(self) -> str:
        where = f", path={self.path!r}" if self.path else ""
        return (
            f"{type(self).__name__}({self.block_type.name}, instant={self.instant_time!r}, "
            f"offset={self.offset}, size={self.size}{where})"
        )


class CommandBlock(LogBlock):
    """COMMAND block; Hudi only defines rollback."""

    def __init__(self, header=None, content=b"", footer=None, **kw) -> None:
        super().__init__(BlockType.COMMAND, header, content, footer, **kw)

    @classmethod
    def rollback(cls, instant_time: str, target_instant_time: str) -> CommandBlock:
        return cls(
            {
                HeaderKey.INSTANT_TIME: instant_time,
                HeaderKey.TARGET_INSTANT_TIME: target_instant_time,
                HeaderKey.COMMAND_BLOCK_TYPE: str(int(CommandType.ROLLBACK)),
            }
        )

    @property
    def target_instant_time(self) -> str | None:
        return self.header.get(HeaderKey.TARGET_INSTANT_TIME)

    @property
    def is_rollback(self) -> bool:
        return self.header.get(HeaderKey.COMMAND_BLOCK_TYPE) == str(int(CommandType.ROLLBACK))


class AvroDataBlock(LogBlock):
    """AVRO_DATA block; records are Avro datums written with the SCHEMA header."""

    def __init__(self, header=None, content=b"", footer=None, **kw) -> None:
        super().__init__(BlockType.AVRO_DATA, header, content, footer, **kw)

    @classmethod
    def from_table(
        cls, table: pa.Table, schema: str | Mapping, instant_time: str, *, header: Mapping | None = None
    ) -> AvroDataBlock:
        schema_json = _schema_json(schema)
        codec = avro_codec(schema_json)
        content = encode_avro_rows(_table_to_rows(table, codec), codec.raw_parsed)
        return cls(data_header(instant_time, schema_json, header), content)

    @classmethod
    def from_records(
        cls,
        records: Iterable[Mapping[str, Any]],
        schema: str | Mapping,
        instant_time: str,
        *,
        header: Mapping | None = None,
    ) -> AvroDataBlock:
        """Records are dicts of Python values as fastavro takes them (datetime, date, Decimal...)."""
        schema_json = _schema_json(schema)
        content = encode_avro_rows(records, avro_codec(schema_json).parsed)
        return cls(data_header(instant_time, schema_json, header), content)

    @property
    def record_count(self) -> int:
        return _avro_content_header(self.content)[1]

    def record_dicts(self) -> list[dict]:
        """Records as dicts, logical types decoded by fastavro."""
        return decode_avro_rows(self.content, self._codec().parsed)

    def records(self, arrow_schema: pa.Schema | None = None) -> pa.Table:
        """Records as a Table; with `arrow_schema`, columns are selected, cast or null-filled to it."""
        codec = self._codec()
        table = _rows_to_table(decode_avro_rows(self.content, codec.raw_parsed), codec)
        return table if arrow_schema is None else _conform(table, arrow_schema)

    def _codec(self) -> _AvroCodec:
        if not self.schema:
            raise LogFormatError("AVRO_DATA block has no SCHEMA header")
        return avro_codec(self.schema)


class ParquetDataBlock(LogBlock):
    """PARQUET_DATA block; the content is a complete Parquet file."""

    def __init__(self, header=None, content=b"", footer=None, **kw) -> None:
        super().__init__(BlockType.PARQUET_DATA, header, content, footer, **kw)
        self._table: pa.Table | None = None  # the table a block made by `from_table` was encoded from

    @classmethod
    def from_table(
        cls,
        table: pa.Table,
        instant_time: str,
        *,
        schema: str | Mapping | None = None,
        compression: str = "gzip",
        header: Mapping | None = None,
        use_dictionary: bool | list[str] = True,
    ) -> ParquetDataBlock:
        """`compression` defaults to gzip, the codec Java uses for parquet log blocks."""
        sink = io.BytesIO()
        pq.write_table(to_storage(table), sink, compression=compression, use_dictionary=use_dictionary)
        schema_json = None if schema is None else _schema_json(schema)
        block = cls(data_header(instant_time, schema_json, header), sink.getvalue())
        block._table = table  # its records, without decoding them again (a writer that goes on to read them)
        return block

    def records(self, arrow_schema: pa.Schema | None = None) -> pa.Table:
        # the content is one Parquet file: read directly (pq.read_table would set up a dataset for it)
        table = self._table if self._table is not None else pq.ParquetFile(pa.BufferReader(self.content)).read()
        return table if arrow_schema is None else _conform(table, arrow_schema)


class DeleteRecord(NamedTuple):
    record_key: str | None
    partition_path: str | None
    ordering_val: Any = None


class DeleteBlock(LogBlock):
    """DELETE block: keys with an ordering value, all of one union branch."""

    def __init__(self, header=None, content=b"", footer=None, **kw) -> None:
        super().__init__(BlockType.DELETE, header, content, footer, **kw)
        self._decoded: tuple[list[DeleteRecord], str | None] | None = None

    @classmethod
    def from_keys(
        cls,
        keys: Iterable[DeleteRecord | tuple],
        instant_time: str,
        *,
        ordering_type: str | None = None,
        header: Mapping | None = None,
    ) -> DeleteBlock:
        """Keys are (record_key, partition_path[, ordering_val]).

        The branch is `ordering_type` (one of ORDERING_TYPES) or is chosen from the
        Python type of the first non-None ordering value. Without any ordering
        value every record gets int 0, the natural value Spark SQL DELETE writes.
        """
        return cls(data_header(instant_time, None, header), encode_delete_content(keys, ordering_type))

    def delete_keys(self) -> list[DeleteRecord]:
        return list(self._decode()[0])

    @property
    def ordering_type(self) -> str | None:
        """Union branch of the first record's ordering value (None for an empty block)."""
        return self._decode()[1]

    def _decode(self) -> tuple[list[DeleteRecord], str | None]:
        if self._decoded is None:
            self._decoded = decode_delete_content(self.content)
        return self._decoded


_BLOCK_CLASSES: dict[BlockType, Callable[..., LogBlock]] = {  # (header, content, footer, ...)
    BlockType.COMMAND: CommandBlock,
    BlockType.DELETE: DeleteBlock,
    BlockType.AVRO_DATA: AvroDataBlock,
    BlockType.PARQUET_DATA: ParquetDataBlock,
}


def make_block(block_type: BlockType | int, header=None, content: bytes | None = b"", footer=None, **kw) -> LogBlock:
    """A block of the class for `block_type` (a plain LogBlock for HFILE, CDC, CORRUPT)."""
    cls = _BLOCK_CLASSES.get(BlockType(block_type))
    if cls is None:
        return LogBlock(block_type, header, content, footer, **kw)
    return cls(header, content, footer, **kw)


def data_header(instant_time: str, schema_json: str | None, extra: Mapping | None) -> dict:
    header: dict = {HeaderKey.INSTANT_TIME: instant_time}
    if schema_json is not None:
        header[HeaderKey.SCHEMA] = schema_json
    for key, value in (extra or {}).items():
        header[header_key(key)] = value
    return header


# --------------------------------------------------------------------------- frame


def encode_header(entries: Mapping[int, str]) -> bytes:
    """int32 count, then per entry int32 key, int32 length, UTF-8 value (in dict order)."""
    out = bytearray(_I32.pack(len(entries)))
    for key, text in entries.items():
        if not isinstance(text, str):
            raise TypeError(f"header value for key {key!r} must be str, got {type(text).__name__}")
        value = text.encode("utf-8")
        out += struct.pack(">ii", int(key), len(value))
        out += value
    return bytes(out)


def encode_block(block: LogBlock) -> bytes:
    """The complete binary block: magic, lengths, header, content, footer."""
    content = block.content
    body = b"".join(
        (
            struct.pack(">ii", FORMAT_VERSION, int(block.block_type)),
            encode_header(block.header),
            _I64.pack(len(content)),
            content,
            encode_header(block.footer),
        )
    )
    block_length = len(body) + _I64.size
    return b"".join((MAGIC, _I64.pack(block_length), body, _I64.pack(block_length + len(MAGIC))))


# --------------------------------------------------------------------------- Avro data

# Avro logical type -> (underlying Avro type, Arrow type). Top-level columns of these
# types are encoded from/decoded to plain ints and cast in Arrow, which is much faster
# than going through Python datetime objects. Top-level decimals are likewise encoded
# straight from Arrow's buffers.
_TEMPORAL: dict[str, tuple[str, pa.DataType]] = {
    "date": ("int", pa.date32()),
    "time-millis": ("int", pa.time32("ms")),
    "time-micros": ("long", pa.time64("us")),
    "timestamp-millis": ("long", pa.timestamp("ms", tz="UTC")),
    "timestamp-micros": ("long", pa.timestamp("us", tz="UTC")),
    "timestamp-nanos": ("long", pa.timestamp("ns", tz="UTC")),
    "local-timestamp-millis": ("long", pa.timestamp("ms")),
    "local-timestamp-micros": ("long", pa.timestamp("us")),
    "local-timestamp-nanos": ("long", pa.timestamp("ns")),
}

_PRIMITIVES: dict[str, pa.DataType] = {
    "null": pa.null(),
    "boolean": pa.bool_(),
    "int": pa.int32(),
    "long": pa.int64(),
    "float": pa.float32(),
    "double": pa.float64(),
    "bytes": pa.binary(),
    "string": pa.string(),
}


def _schema_json(schema: str | Mapping) -> str:
    return schema if isinstance(schema, str) else json.dumps(schema)


def avro_to_arrow_schema(schema: str | Mapping) -> pa.Schema:
    """The Arrow schema AVRO_DATA records decode to without a target schema.

    Timestamps become `timestamp[unit, tz=UTC]` (local-timestamp: no tz), dates
    `date32`, decimals `decimal128/256`, enums strings, maps `map<string, _>`.
    A union is allowed only as `null` plus one type.
    """
    return avro_codec(_schema_json(schema)).arrow_schema


def _arrow_type(avro_type: Any) -> tuple[pa.DataType, bool]:
    """(Arrow type, nullable) of an expanded Avro type."""
    if isinstance(avro_type, list):
        members = [m for m in avro_type if m != "null"]
        if not members:
            return pa.null(), True
        if len(members) > 1:
            raise LogFormatError(f"unsupported Avro union (only null plus one type): {avro_type}")
        return _arrow_type(members[0])[0], len(members) < len(avro_type)
    if isinstance(avro_type, str):
        if avro_type not in _PRIMITIVES:
            raise LogFormatError(f"unresolved Avro type {avro_type!r}")
        return _PRIMITIVES[avro_type], False
    kind, logical = avro_type["type"], avro_type.get("logicalType")
    if isinstance(kind, (dict, list)):
        return _arrow_type(kind)
    if logical == "decimal" and kind in ("bytes", "fixed"):
        precision, scale = int(avro_type["precision"]), int(avro_type.get("scale", 0))
        return (pa.decimal128 if precision <= 38 else pa.decimal256)(precision, scale), False
    if logical in _TEMPORAL and _TEMPORAL[logical][0] == kind:
        return _TEMPORAL[logical][1], False
    if kind == "record":
        return pa.struct([pa.field(f["name"], *_arrow_type(f["type"])) for f in avro_type["fields"]]), False
    if kind == "enum":
        return pa.string(), False
    if kind == "fixed":
        return pa.binary(int(avro_type["size"])), False
    if kind == "array":
        return pa.list_(_arrow_type(avro_type["items"])[0]), False
    if kind == "map":
        return pa.map_(pa.string(), _arrow_type(avro_type["values"])[0]), False
    return _arrow_type(kind)


def _temporal_logical(avro_type: Any) -> str | None:
    """The temporal logical type of a top-level field type (possibly nullable), if any."""
    if isinstance(avro_type, list):
        members = [m for m in avro_type if m != "null"]
        return _temporal_logical(members[0]) if len(members) == 1 else None
    if isinstance(avro_type, dict):
        logical = avro_type.get("logicalType")
        if logical in _TEMPORAL and avro_type.get("type") == _TEMPORAL[logical][0]:
            return logical
    return None


def _decimal_spec(avro_type: Any) -> tuple[pa.DataType, int | None] | None:
    """(Arrow decimal type, fixed size or None for bytes) of a top-level decimal field type."""
    if isinstance(avro_type, list):
        members = [m for m in avro_type if m != "null"]
        return _decimal_spec(members[0]) if len(members) == 1 else None
    if isinstance(avro_type, dict) and avro_type.get("logicalType") == "decimal":
        if avro_type.get("type") in ("bytes", "fixed"):
            size = int(avro_type["size"]) if avro_type["type"] == "fixed" else None
            return _arrow_type(avro_type)[0], size
    return None


def _strip_logical(avro_type: Any) -> Any:
    if isinstance(avro_type, list):
        return [_strip_logical(m) for m in avro_type]
    if isinstance(avro_type, dict) and avro_type.get("logicalType") in _TEMPORAL:
        return avro_type["type"]
    return avro_type


class _AvroCodec:
    """Parsed forms of one writer schema: with logical types, and with top-level
    temporal columns as plain ints (`raw_*`)."""

    def __init__(self, schema_json: str) -> None:
        try:
            schema = json.loads(schema_json)
        except json.JSONDecodeError as exc:
            raise LogFormatError(f"SCHEMA is not JSON: {exc}") from exc
        if not isinstance(schema, dict) or schema.get("type") != "record":
            raise LogFormatError("the data block schema must be an Avro record")
        try:
            self.parsed = fastavro.parse_schema(schema)
            expanded = fastavro.schema.expand_schema(schema)
        except Exception as exc:  # fastavro raises several exception types for bad schemas
            raise LogFormatError(f"invalid Avro schema: {exc}") from exc
        fields, raw_fields, raw_avro_fields = [], [], []
        self.temporal: dict[str, pa.DataType] = {}
        for field, expanded_field in zip(schema["fields"], expanded["fields"]):
            name = field["name"]
            arrow_type, nullable = _arrow_type(expanded_field["type"])
            fields.append(pa.field(name, arrow_type, nullable))
            logical = _temporal_logical(field["type"])
            if logical is None:
                raw_fields.append(fields[-1])
                raw_avro_fields.append(field)
            else:
                self.temporal[name] = arrow_type
                raw_type = pa.int32() if _TEMPORAL[logical][0] == "int" else pa.int64()
                raw_fields.append(pa.field(name, raw_type, nullable))
                raw_avro_fields.append({**field, "type": _strip_logical(field["type"])})
        self.decimals: dict[str, tuple[pa.DataType, int | None]] = {
            f["name"]: spec for f in expanded["fields"] if (spec := _decimal_spec(f["type"])) is not None
        }
        self.names = [f.name for f in fields]
        self.arrow_schema = pa.schema(fields)
        self.raw_arrow_schema = pa.schema(raw_fields)
        self.raw_parsed = fastavro.parse_schema({**schema, "fields": raw_avro_fields})


@functools.lru_cache(maxsize=64)
def avro_codec(schema_json: str) -> _AvroCodec:
    return _AvroCodec(schema_json)


def encode_avro_rows(rows: Iterable[Mapping[str, Any]], parsed: dict) -> bytes:
    out = bytearray(struct.pack(">ii", DATA_BLOCK_VERSION, 0))
    buf = io.BytesIO()
    count = 0
    for row in rows:
        buf.seek(0)
        buf.truncate()
        try:
            fastavro.schemaless_writer(buf, parsed, row)
        except Exception as exc:  # fastavro raises ValueError/TypeError/KeyError/...
            raise LogFormatError(f"record {count} does not fit the Avro schema: {exc}") from exc
        datum = buf.getvalue()
        out += _I32.pack(len(datum))
        out += datum
        count += 1
    out[4:8] = _I32.pack(count)
    return bytes(out)


def _avro_content_header(content: bytes) -> tuple[int, int]:
    if len(content) < 8:
        raise LogFormatError(f"AVRO_DATA content too short ({len(content)} bytes)")
    version, count = struct.unpack_from(">ii", content)
    if version != DATA_BLOCK_VERSION:
        raise LogFormatError(f"unsupported AVRO_DATA block version {version} (only {DATA_BLOCK_VERSION})")
    if count < 0:
        raise LogFormatError(f"negative AVRO_DATA record count {count}")
    return version, count


def decode_avro_rows(content: bytes, parsed: dict) -> list[dict]:
    _, count = _avro_content_header(content)
    end = len(content)
    buf = io.BytesIO(content)
    buf.seek(8)
    rows = []
    for i in range(count):
        size_bytes = buf.read(4)
        if len(size_bytes) < 4:
            raise LogFormatError(f"AVRO_DATA content ends before record {i} of {count}")
        (size,) = _I32.unpack(size_bytes)
        start = buf.tell()
        if size < 0 or start + size > end:
            raise LogFormatError(f"AVRO_DATA record {i} length {size} is out of bounds")
        try:
            rows.append(fastavro.schemaless_reader(buf, parsed, None))
        except Exception as exc:  # EOFError, ValueError, UnicodeDecodeError, ...
            raise LogFormatError(f"AVRO_DATA record {i} does not decode: {exc}") from exc
        if buf.tell() != start + size:
            raise LogFormatError(f"AVRO_DATA record {i}: datum is {buf.tell() - start} bytes, length says {size}")
    if buf.tell() != end:
        raise LogFormatError(f"AVRO_DATA content has {end - buf.tell()} bytes after the last record")
    return rows


def _temporal_to_int(column: pa.ChunkedArray, target: pa.DataType) -> pa.ChunkedArray:
    """Arrow temporal column -> the int Avro encodes (ints pass through)."""
    if pa.types.is_integer(column.type):
        return column
    if pa.types.is_timestamp(target) and pa.types.is_timestamp(column.type):
        target = pa.timestamp(target.unit, tz=column.type.tz)
    as_int = pa.int32() if target in (pa.date32(), pa.time32("ms")) else pa.int64()
    return column.cast(target).cast(as_int)


def _decimal_to_avro(column: pa.ChunkedArray, target: pa.DataType, size: int | None) -> list[bytes | None]:
    """Arrow decimals -> Avro decimal bytes (big-endian two's complement; minimal length
    for `bytes`, sign-extended to `size` for `fixed`), as fastavro would write them."""
    column = column.cast(target)  # rescales; raises if a value does not fit
    width = target.byte_width
    out: list[bytes | None] = []
    for chunk in column.chunks:
        raw = memoryview(chunk.buffers()[1])
        valid = chunk.is_valid().to_pylist() if chunk.null_count else None
        for i in range(len(chunk)):
            if valid is not None and not valid[i]:
                out.append(None)
                continue
            start = (chunk.offset + i) * width
            unscaled = int.from_bytes(raw[start : start + width], "little", signed=True)
            length = size if size is not None else (unscaled.bit_length() + 8) // 8
            try:
                out.append(unscaled.to_bytes(length, "big", signed=True))
            except OverflowError:
                raise LogFormatError(f"decimal {unscaled}e-{target.scale} does not fit fixed({size})") from None
    return out


def _map_fixer(arrow_type: pa.DataType) -> Callable[[Any], Any] | None:
    """Converter turning Arrow map values (lists of pairs) into the dicts fastavro writes."""
    if pa.types.is_map(arrow_type):
        inner = _map_fixer(arrow_type.item_type)
        if inner is None:
            return lambda v: None if v is None else dict(v)
        fix = inner
        return lambda v: None if v is None else {k: fix(x) for k, x in v}
    if pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type) or pa.types.is_fixed_size_list(arrow_type):
        inner = _map_fixer(arrow_type.value_type)
        if inner is None:
            return None
        return lambda v: None if v is None else [inner(x) for x in v]
    if pa.types.is_struct(arrow_type):
        inners = {f.name: fx for f in arrow_type if (fx := _map_fixer(f.type)) is not None}
        if not inners:
            return None

        def fix_struct(v):
            if v is None:
                return None
            v = dict(v)
            for name, fx in inners.items():
                v[name] = fx(v.get(name))
            return v

        return fix_struct
    return None


def _table_to_rows(table: pa.Table, codec: _AvroCodec) -> list[dict]:
    extra = [n for n in table.column_names if n not in set(codec.names)]
    if extra:
        raise LogFormatError(f"columns not in the Avro schema: {extra}")
    columns, decimals = {}, {}
    for name in codec.names:
        if name not in table.column_names:
            continue
        column = table.column(name)
        if name in codec.temporal:
            column = _temporal_to_int(column, codec.temporal[name])
        elif name in codec.decimals and pa.types.is_decimal(column.type):
            decimals[name] = _decimal_to_avro(column, *codec.decimals[name])
            continue
        columns[name] = column
    rows = pa.table(columns).to_pylist() if columns else [{} for _ in range(table.num_rows)]
    fixers = {n: fx for n, c in columns.items() if (fx := _map_fixer(c.type)) is not None}
    for row in rows if fixers else ():
        for name, fx in fixers.items():
            row[name] = fx(row[name])
    for name, values in decimals.items():
        for row, value in zip(rows, values):
            row[name] = value
    return rows


def _rows_to_table(rows: list[dict], codec: _AvroCodec) -> pa.Table:
    table = pa.Table.from_pylist(rows, schema=codec.raw_arrow_schema)
    for name, arrow_type in codec.temporal.items():
        i = table.schema.get_field_index(name)
        table = table.set_column(i, table.schema.field(i).with_type(arrow_type), table.column(i).cast(arrow_type))
    return table


def _conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """Select, cast and order columns as `schema`; missing columns become nulls."""
    columns = []
    for field in schema:
        if field.name in table.column_names:
            column = table.column(field.name)
            if has_promotion(column.type, field.type):
                column = promote(column, field.type)
            columns.append(column if column.type == field.type else column.cast(field.type))
        else:
            columns.append(pa.nulls(table.num_rows, field.type))
    return pa.Table.from_arrays(columns, schema=schema)


# --------------------------------------------------------------------------- delete

_NS = "org.apache.hudi.avro.model"

# Ordering value branches in union order (branch number = position + 1; 0 is null).
_WRAPPED: tuple[tuple[str, str, Any], ...] = (
    ("boolean", "BooleanWrapper", "boolean"),
    ("int", "IntWrapper", "int"),
    ("long", "LongWrapper", "long"),
    ("float", "FloatWrapper", "float"),
    ("double", "DoubleWrapper", "double"),
    ("bytes", "BytesWrapper", "bytes"),
    ("string", "StringWrapper", "string"),
    ("date", "DateWrapper", "int"),
    ("decimal", "DecimalWrapper", {"type": "bytes", "logicalType": "decimal", "precision": 30, "scale": 15}),
    ("time-micros", "TimeMicrosWrapper", {"type": "long", "logicalType": "time-micros"}),
    ("timestamp-micros", "TimestampMicrosWrapper", "long"),
)
ORDERING_TYPES: tuple[str, ...] = ("null",) + tuple(t for t, _, _ in _WRAPPED) + ("array",)


def _wrapper(name: str, value_type: Any) -> dict:
    return {"type": "record", "name": name, "namespace": _NS, "fields": [{"name": "value", "type": value_type}]}


DELETE_RECORD_LIST_SCHEMA: dict = {
    "type": "record",
    "name": "HoodieDeleteRecordList",
    "namespace": _NS,
    "fields": [
        {
            "name": "deleteRecordList",
            "type": {
                "type": "array",
                "items": {
                    "type": "record",
                    "name": "HoodieDeleteRecord",
                    "namespace": _NS,
                    "fields": [
                        {"name": "recordKey", "type": ["null", "string"], "default": None},
                        {"name": "partitionPath", "type": ["null", "string"], "default": None},
                        {
                            "name": "orderingVal",
                            "type": [
                                "null",
                                *(_wrapper(name, value_type) for _, name, value_type in _WRAPPED),
                                {
                                    "type": "record",
                                    "name": "ArrayWrapper",
                                    "namespace": _NS,
                                    "fields": [
                                        {
                                            "name": "wrappedValues",
                                            "type": [
                                                "null",
                                                {
                                                    "type": "array",
                                                    "items": [
                                                        "null",
                                                        *(f"{_NS}.{name}" for _, name, _ in _WRAPPED),
                                                        _wrapper("LocalDateWrapper", "int"),
                                                    ],
                                                },
                                            ],
                                            "default": None,
                                        }
                                    ],
                                },
                            ],
                            "default": None,
                        },
                    ],
                },
            },
        }
    ],
}
_DELETE_PARSED = fastavro.parse_schema(DELETE_RECORD_LIST_SCHEMA)
_WRAPPER_OF = {t: f"{_NS}.{name}" for t, name, _ in _WRAPPED} | {"array": f"{_NS}.ArrayWrapper"}
_TYPE_OF_WRAPPER = {v: k for k, v in _WRAPPER_OF.items()} | {f"{_NS}.LocalDateWrapper": "date"}
_INT_RANGES = {"int": 1 << 31, "long": 1 << 63}


def infer_ordering_type(value: Any) -> str:
    """The ordering value branch for a Python value."""
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "long"
    if isinstance(value, float):
        return "double"
    if isinstance(value, str):
        return "string"
    if isinstance(value, (bytes, bytearray, memoryview)):
        return "bytes"
    if isinstance(value, decimal.Decimal):
        return "decimal"
    if isinstance(value, dt.datetime):
        return "timestamp-micros"
    if isinstance(value, dt.date):
        return "date"
    if isinstance(value, dt.time):
        return "time-micros"
    if isinstance(value, (list, tuple)):
        return "array"
    raise TypeError(f"no delete ordering value branch for {type(value).__name__}")


def _ordering_datum(kind: str, value: Any) -> Any:
    """The fastavro datum (tuple notation selects the wrapper) for one ordering value."""
    if kind == "null":
        if value is not None:
            raise LogFormatError(f"ordering type 'null' cannot hold {value!r}")
        return None
    if kind == "array":
        items = None if value is None else [None if v is None else _ordering_datum(infer_ordering_type(v), v)
                                            for v in value]
        return (_WRAPPER_OF["array"], {"wrappedValues": items})
    if kind not in _WRAPPER_OF:
        raise LogFormatError(f"unknown ordering type {kind!r}; expected one of {ORDERING_TYPES}")
    if kind in _INT_RANGES:
        if isinstance(value, bool) or not isinstance(value, int):
            raise LogFormatError(f"ordering type {kind!r} needs an int, got {value!r}")
        bound = _INT_RANGES[kind]
        if not -bound <= value < bound:
            raise LogFormatError(f"ordering value {value} out of range for {kind!r}")
    elif kind == "boolean" and not isinstance(value, bool):
        raise LogFormatError(f"ordering type 'boolean' needs a bool, got {value!r}")
    elif kind in ("float", "double"):
        value = float(value)
    elif kind == "string" and not isinstance(value, str):
        raise LogFormatError(f"ordering type 'string' needs a str, got {value!r}")
    elif kind == "bytes":
        value = bytes(value)
    elif kind == "date" and isinstance(value, dt.date):
        value = (value - _EPOCH_DATE).days
    elif kind == "decimal":
        value = decimal.Decimal(value)
        if value.as_tuple().exponent < -15 or value.adjusted() >= 15:
            raise LogFormatError(f"ordering value {value} does not fit decimal(30,15)")
    elif kind == "timestamp-micros" and isinstance(value, dt.datetime):
        aware = value if value.tzinfo is not None else value.replace(tzinfo=_UTC)
        value = (aware - _EPOCH) // dt.timedelta(microseconds=1)
    return (_WRAPPER_OF[kind], {"value": value})


def _ordering_value(datum: Any) -> tuple[str, Any]:
    """(branch name, Python value) of a decoded ordering datum."""
    if datum is None:
        return "null", None
    name, record = datum
    kind = _TYPE_OF_WRAPPER[name]
    if kind == "array":
        items = record["wrappedValues"]
        return kind, None if items is None else [_ordering_value(item)[1] for item in items]
    value = record["value"]
    if kind == "date":
        value = _EPOCH_DATE + dt.timedelta(days=value)
    elif kind == "timestamp-micros":
        value = _EPOCH + dt.timedelta(microseconds=value)
    return kind, value


def encode_delete_content(keys: Iterable[DeleteRecord | Sequence], ordering_type: str | None = None) -> bytes:
    """DELETE block content for (record_key, partition_path[, ordering_val]) tuples."""
    records = [DeleteRecord(*key) for key in keys]
    kind = ordering_type
    if kind is None:
        first = next((r.ordering_val for r in records if r.ordering_val is not None), None)
        kind = "int" if first is None else infer_ordering_type(first)
    if kind not in ORDERING_TYPES:
        raise LogFormatError(f"unknown ordering type {kind!r}; expected one of {ORDERING_TYPES}")
    items = []
    for record in records:
        value = record.ordering_val
        if value is None and kind in _INT_RANGES:
            value = 0
        elif value is None and kind not in ("null", "array"):
            raise LogFormatError(f"record {record.record_key!r} has no ordering value for branch {kind!r}")
        items.append(
            {
                "recordKey": record.record_key,
                "partitionPath": record.partition_path,
                "orderingVal": _ordering_datum(kind, value),
            }
        )
    buf = io.BytesIO()
    try:
        fastavro.schemaless_writer(buf, _DELETE_PARSED, {"deleteRecordList": items})
    except Exception as exc:  # fastavro raises ValueError/TypeError/...
        raise LogFormatError(f"delete records do not encode: {exc}") from exc
    datum = buf.getvalue()
    return struct.pack(">ii", DATA_BLOCK_VERSION, len(datum)) + datum


def decode_delete_content(content: bytes) -> tuple[list[DeleteRecord], str | None]:
    """(records, branch of the first record's ordering value) of DELETE block content."""
    if len(content) < 8:
        raise LogFormatError(f"DELETE content too short ({len(content)} bytes)")
    version, size = struct.unpack_from(">ii", content)
    if version != DATA_BLOCK_VERSION:
        raise LogFormatError(f"unsupported DELETE block version {version} (versions 1-2 are Kryo; only 3 is read)")
    if size < 0 or 8 + size != len(content):
        raise LogFormatError(f"DELETE content length {size} does not match the {len(content) - 8} bytes present")
    buf = io.BytesIO(content)
    buf.seek(8)
    try:
        datum = fastavro.schemaless_reader(buf, _DELETE_PARSED, None, return_record_name=True)
    except Exception as exc:  # EOFError, ValueError, KeyError, ...
        raise LogFormatError(f"DELETE content does not decode: {exc}") from exc
    if buf.tell() != len(content):
        raise LogFormatError(f"DELETE content has {len(content) - buf.tell()} bytes after the record list")
    records, first_kind = [], None
    for item in datum["deleteRecordList"]:
        kind, value = _ordering_value(item["orderingVal"])
        first_kind = first_kind or kind
        records.append(DeleteRecord(item["recordKey"], item["partitionPath"], value))
    return records, first_kind
