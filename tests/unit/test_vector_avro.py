"""The numpy Avro codec of AVRO_DATA content is byte-identical to fastavro (encoding) and decodes to the same
table as `AvroDataBlock.records()`; unsupported schemas and damaged content fall back (None)."""

from __future__ import annotations

import datetime as dt
import json
import random

import pyarrow as pa
import pytest

from hudilite.log.blocks import AvroDataBlock
from hudilite.log.vector_avro import avro_block, decode_records, encode_records, fast_records

SCHEMA = {"type": "record", "name": "r", "fields": [
    {"name": "a", "type": ["null", "long"]}, {"name": "b", "type": ["null", "int"]},
    {"name": "c", "type": ["null", "double"]}, {"name": "d", "type": ["float", "null"]},
    {"name": "e", "type": ["null", "string"]}, {"name": "f", "type": ["null", "boolean"]},
    {"name": "g", "type": ["null", {"type": "int", "logicalType": "date"}]},
    {"name": "h", "type": ["null", {"type": "long", "logicalType": "timestamp-micros"}]},
    {"name": "i", "type": "long"}, {"name": "j", "type": ["null", "bytes"]}, {"name": "k", "type": ["null", "string"]}]}


def _table(seed: int, n: int) -> pa.Table:
    rng = random.Random(seed)

    def maybe(v):
        return None if rng.random() < 0.2 else v

    return pa.table({
        "a": pa.array([maybe(rng.choice([0, -1, 1, 63, 64, -65, 2 ** 63 - 1, -2 ** 63, rng.randint(-2 ** 40, 2 ** 40)]))
                       for _ in range(n)], pa.int64()),
        "b": pa.array([maybe(rng.randint(-2 ** 31, 2 ** 31 - 1)) for _ in range(n)], pa.int32()),
        "c": pa.array([maybe(rng.random() * 1e6 - 5e5) for _ in range(n)], pa.float64()),
        "d": pa.array([maybe(rng.random()) for _ in range(n)], pa.float32()),
        "e": pa.array([maybe(rng.choice(["", "x", "héllo ☃", "#HUDI#", "z" * 300])) for _ in range(n)], pa.string()),
        "f": pa.array([maybe(rng.random() < .5) for _ in range(n)], pa.bool_()),
        "g": pa.array([maybe(dt.date(2020, 1, 1) + dt.timedelta(days=rng.randint(-1000, 1000))) for _ in range(n)],
                      pa.date32()),
        "h": pa.array([maybe(dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)
                             + dt.timedelta(microseconds=rng.randint(-10 ** 12, 10 ** 12))) for _ in range(n)],
                      pa.timestamp("us", tz="UTC")),
        "i": pa.array([rng.randint(-10, 10) for _ in range(n)], pa.int64()),
        "j": pa.array([maybe(bytes(rng.randint(0, 255) for _ in range(rng.randint(0, 5)))) for _ in range(n)],
                      pa.binary()),
    })


@pytest.mark.parametrize("seed,n", [(1, 0), (2, 1), (3, 257), (4, 3000)])
def test_identical_to_fastavro(seed, n):
    t = _table(seed, n)
    sj = json.dumps(SCHEMA)
    ref = AvroDataBlock.from_table(t, sj, "1")
    assert encode_records(t, sj) == ref.content
    assert avro_block(t, sj, "1").content == ref.content
    got = fast_records(ref)
    want = ref.records()
    assert got.schema == want.schema and got.equals(want)


def test_unsupported_or_damaged_falls_back():
    sj = json.dumps(SCHEMA)
    t = _table(5, 50)
    content = encode_records(t, sj)
    assert decode_records(content[:-3], sj) is None  # truncated datum
    assert decode_records(content[:8] + b"\x00\x00\x00\x05" + content[12:], sj) is None  # bad record length
    nested = {"type": "record", "name": "r", "fields": [{"name": "m", "type": {"type": "map", "values": "long"}}]}
    assert encode_records(pa.table({"m": pa.array([[("a", 1)]], pa.map_(pa.string(), pa.int64()))}),
                          json.dumps(nested)) is None
    assert encode_records(t.append_column("extra", pa.array([1] * 50)), sj) is None  # column not in the schema
    required_null = pa.table({"i": pa.array([1, None], pa.int64())})
    assert encode_records(required_null, json.dumps({"type": "record", "name": "r",
                                                     "fields": [{"name": "i", "type": "long"}]})) is None
