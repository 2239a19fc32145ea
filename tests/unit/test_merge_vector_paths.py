"""The vectorized paths of the merge-on-read overlay (hudilite/reader/merge.py, delete_vec.py) against the general
paths they stand in for: DELETE block decoding, delete ordering kinds, base-row matching by binary search, the
ascending row selection and the fold of logs whose keys all differ."""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from hudilite.log.blocks import DeleteBlock, decode_delete_content, encode_delete_content
from hudilite.reader import delete_vec, merge
from hudilite.reader.merge import MergeSpec


def _key(rng: random.Random):
    c = rng.random()
    if c < 0.05:
        return None
    if c < 0.1:
        return "ü" * rng.randint(0, 90)  # multi-byte UTF-8, lengths with two-byte varints
    return str(rng.randint(-10**12, 10**12)) * rng.randint(1, 12)


def _records(rng: random.Random, kind: str | None, n: int) -> list[tuple]:
    out = []
    for _ in range(n):
        if kind == "int":
            o = rng.choice([None, 0, rng.randint(-2**31, 2**31 - 1)])
        elif kind == "long":
            o = rng.choice([None, 0, rng.randint(-2**63, 2**63 - 1), rng.randint(-100, 100)])
        else:
            o = None
        out.append((_key(rng), rng.choice([None, "dt=2024-01-01", "p" * 200]), o))
    return out


def _same(got, content: bytes) -> bool:
    exp, _ = decode_delete_content(content)
    keys, vals, present = got
    return (keys.to_pylist() == [r.record_key for r in exp]
            and [int(v) if p else None for v, p in zip(vals, present)] == [r.ordering_val for r in exp])


@pytest.mark.parametrize("kind", ["int", "long", None])
def test_delete_decode_equals_general_decoder(kind):
    rng = random.Random(7)
    for n in [0, 1, 2, 17, 300]:
        content = encode_delete_content(_records(rng, kind, n), kind)
        got = delete_vec.decode(content)
        assert got is not None
        assert _same(got, content)


def _zigzag(v: int) -> bytes:
    z = (v << 1) ^ (v >> 63)
    out = bytearray()
    while True:
        b = z & 0x7F
        z >>= 7
        if z:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def test_delete_decode_array_in_several_blocks_with_byte_sizes():
    """Avro arrays may come in several blocks, a negative count followed by the block's byte size (as Java's
    encoders write them): the same records."""
    rng = random.Random(3)
    recs = _records(rng, "long", 40)
    items = []
    for r in recs:  # each item's bytes: encode a one-record list and cut the array framing off
        one = encode_delete_content([r], "long")[8:]
        items.append(one[1:-1])  # count varint 1 (one byte: 0x02) ... terminating 0
    body = bytearray()
    for lo, hi in [(0, 15), (15, 16), (16, 40)]:
        chunk = b"".join(items[lo:hi])
        body += _zigzag(-(hi - lo)) + _zigzag(len(chunk)) + chunk
    body += b"\x00"
    content = (3).to_bytes(4, "big") + len(body).to_bytes(4, "big") + bytes(body)
    got = delete_vec.decode(content)
    assert got is not None and _same(got, content)
    assert got[0].to_pylist() == [r[0] for r in recs]


def test_delete_decode_declines_other_ordering_types_and_never_disagrees_on_damage():
    assert delete_vec.decode(encode_delete_content([("a", "p", 1.5)], "double")) is None
    assert delete_vec.decode(encode_delete_content([("a", "p", "x")], "string")) is None
    rng = random.Random(11)
    for trial in range(60):
        content = encode_delete_content(_records(rng, "long", rng.randint(1, 40)), "long")
        for _ in range(25):
            b = bytearray(content)
            if rng.random() < 0.6:
                i = rng.randrange(8, len(b))
                b[i] = rng.randrange(256)
            else:
                b = b[:rng.randrange(0, len(b))]
            got = delete_vec.decode(bytes(b))
            if got is None:
                continue  # the caller falls back to the general decoder
            try:
                decode_delete_content(bytes(b))
            except Exception:  # noqa: BLE001
                pytest.fail(f"decoded content the general decoder rejects (trial {trial})")
            assert _same(got, bytes(b))


@pytest.mark.parametrize("t", [pa.int64(), pa.int32(), pa.string(), None])
def test_int_delete_orderings_equal_general(t):
    rng = np.random.default_rng(5)
    vals = rng.integers(-5, 5, 200)
    present = rng.random(200) < 0.8
    py = [int(v) if p else None for v, p in zip(vals, present)]
    k1, o1 = merge._delete_orderings(py, t)
    k2, o2 = merge._int_delete_orderings(np.where(present, vals, 0), present, t)
    assert k1.tolist() == k2.tolist()
    assert (o1 is None and o2 is None) or o1.equals(o2)
    big = np.array([2**40, 0], dtype=np.int64)  # does not fit int32: every delete natural, as in the general path
    k1, o1 = merge._delete_orderings([2**40, 0], pa.int32())
    k2, o2 = merge._int_delete_orderings(big, np.array([True, True]), pa.int32())
    assert k1.tolist() == k2.tolist() and o1.equals(o2)


def test_log_records_same_events_with_and_without_the_vector_decoder(monkeypatch):
    schema = pa.schema([("_hoodie_record_key", pa.string()), ("ts", pa.int64())])
    spec = MergeSpec(schema=schema, ordering_field="ts")
    rng = random.Random(2)
    blocks = [DeleteBlock.from_keys(_records(rng, "long", 50), "001", ordering_type="long"),
              DeleteBlock.from_keys(_records(rng, None, 20), "002")]
    _, fast = merge.log_records(blocks, spec)
    monkeypatch.setattr(delete_vec, "decode", lambda content: None)
    blocks = [DeleteBlock(b.header, b.content) for b in blocks]
    _, slow = merge.log_records(blocks, spec)
    assert fast[0].equals(slow[0]) and fast[1].tolist() == slow[1].tolist()
    assert fast[2].equals(slow[2]) and fast[3].tolist() == slow[3].tolist()


def _index_in(base: pa.ChunkedArray, lkeys: pa.Array):
    pos = pc.index_in(base, value_set=lkeys)
    return (np.flatnonzero(pos.is_valid().to_numpy(zero_copy_only=False)),
            pos.drop_null().to_numpy(zero_copy_only=False).astype(np.int64))


@pytest.mark.parametrize("layout", ["sorted", "unsorted", "duplicates", "strings", "single", "nulls"])
def test_match_equals_index_in(layout):
    rng = np.random.default_rng(1)
    b = np.sort(rng.choice(10**6, 5000, replace=False)).astype(np.int64)
    if layout == "unsorted":
        rng.shuffle(b)
    if layout == "duplicates":
        b[10] = b[11]
    if layout == "single":
        b = b[:1]
    lk = rng.choice(np.r_[b, rng.integers(-10, 2 * 10**6, 400)], 600, replace=False) if len(b) > 1 else b
    lk = np.unique(lk)
    rng.shuffle(lk)
    base = pa.chunked_array([pa.array(b[:len(b) // 2]), pa.array(b[len(b) // 2:])])
    lkeys = pa.array(lk)
    if layout == "strings":
        base, lkeys = base.cast(pa.string()), lkeys.cast(pa.string())
    if layout == "nulls":
        base = pa.chunked_array([pa.array([None] + b[1:].tolist(), pa.int64())])
    got = merge._match(base, lkeys)
    exp = _index_in(base, lkeys)
    assert got[0].tolist() == exp[0].tolist() and got[1].tolist() == exp[1].tolist()
    assert len(got[0]) > 0


def test_rows_equals_take():
    t = pa.table({"a": list(range(10)), "s": [str(i) for i in range(10)]})
    for sel in [np.arange(10), np.array([1, 3, 9]), np.array([3, 1]), np.array([], dtype=np.int64),
                np.array([4])]:
        assert merge._rows(t, sel).equals(t.take(pa.array(sel, pa.int64())))


@pytest.mark.parametrize("event_time", [True, False])
def test_fold_of_distinct_keys_keeps_every_record(event_time):
    keys = pa.array(["3", "1", "2", "9"])
    kinds = np.array([0, 1, 2, 0], dtype=np.int8)
    ords = pa.array([5, 6, None, 1], pa.int64())
    idx = np.array([0, -1, -1, 1])
    k, kd, o, i = merge._fold_log((keys, kinds, ords, idx), event_time)
    assert k.equals(keys) and kd.tolist() == kinds.tolist() and i.tolist() == idx.tolist()
    assert (o.equals(ords) if event_time else o is None)
    # a repeated key still folds (general path): the higher ordering value wins
    k, kd, o, i = merge._fold_log((pa.array(["1", "1"]), np.array([0, 0], np.int8), pa.array([7, 3]),
                                   np.array([0, 1])), True)
    assert k.to_pylist() == ["1"] and i.tolist() == [0]
