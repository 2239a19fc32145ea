"""Fuzz test of the log reader: thousands of randomly damaged log files.

Each file is a random sequence of real blocks (Avro data, Parquet data, delete, rollback command) with damage
applied: a truncated tail, garbage between blocks (random bytes, stray magics, a writer that died right after
its magic or mid-header), bad length fields (negative, tiny, huge, off by a few bytes), a wrong trailing block
size, flipped header bytes, and combinations. The scanner must
- never raise,
- account for every byte exactly once (blocks and corrupt ranges tile the file),
- return every block whose bytes survived intact, at its offset, with its header and content (none lost).
Deterministic (fixed seeds); well under 30 s.
"""

from __future__ import annotations

import os
import random
import struct

import pyarrow as pa
import pytest

from hudilite.log import (MAGIC, AvroDataBlock, CommandBlock, CorruptBlock, DeleteBlock, LogBlock,
                          ParquetDataBlock, encode_block, scan_log_file)

SCHEMA = {"type": "record", "name": "r", "fields": [
    {"name": "_hoodie_commit_time", "type": ["null", "string"]},
    {"name": "_hoodie_record_key", "type": ["null", "string"]},
    {"name": "v", "type": ["null", "long"]},
    {"name": "s", "type": ["null", "string"]},
]}


def _blocks() -> list[bytes]:
    rng = random.Random(7)
    out = []
    for i in range(24):
        t = f"2024010100000{i:04d}"
        kind = i % 4
        n = rng.randint(0, 6)
        tbl = pa.table({"_hoodie_commit_time": [t] * n, "_hoodie_record_key": [f"k{rng.randint(0, 50)}" for _ in range(n)],
                        "v": [rng.randint(-10, 10 ** 12) for _ in range(n)],
                        # payloads that contain the magic and length-like bytes on purpose
                        "s": [rng.choice(["x", "#HUDI#", "#HUDI#HUDI#", "\x00\x00\x00\x00\x00\x00\x01", "é" * 5])
                              for _ in range(n)]})
        if kind == 0:
            b = AvroDataBlock.from_table(tbl, SCHEMA, t)
        elif kind == 1:
            b = ParquetDataBlock.from_table(tbl, t)
        elif kind == 2:
            b = DeleteBlock.from_keys([(f"k{j}", "p", None) for j in range(n + 1)], t, ordering_type="int")
        else:
            b = CommandBlock.rollback(t, f"2023010100000{i:04d}")
        out.append(encode_block(b))
    return out


BLOCKS = _blocks()


def _garbage(rng: random.Random) -> bytes:
    choice = rng.randrange(7)
    if choice == 0:
        return bytes(rng.randrange(256) for _ in range(rng.randint(1, 40)))
    if choice == 1:
        return MAGIC * rng.randint(1, 3)  # consecutive magics (writers that died right after the magic)
    if choice == 2:  # a writer that died mid-header: magic + length + part of the block
        src = rng.choice(BLOCKS)
        return src[:rng.randint(len(MAGIC) + 1, len(src) - 1)]
    if choice == 3:
        return MAGIC + struct.pack(">q", rng.choice([-1, 0, 3, 2 ** 62, rng.randint(30, 5000)]))
    if choice == 4:
        return b"#HUDI" if rng.random() < 0.5 else b"#HU"  # partial magics
    if choice == 5:
        return MAGIC[1:] + bytes(rng.randrange(256) for _ in range(rng.randint(0, 10)))
    return MAGIC + bytes(rng.randrange(256) for _ in range(rng.randint(0, 60)))


def _damage_block(rng: random.Random, data: bytes) -> bytes:
    """A block whose framing is broken (it must not parse; neighbours must survive)."""
    b = bytearray(data)
    kind = rng.randrange(5)
    if kind == 0:  # block length field
        length = struct.unpack_from(">q", b, 6)[0]
        new = rng.choice([-5, 0, 10, length + rng.choice([-3, -1, 1, 7, 1000]), 2 ** 40])
        struct.pack_into(">q", b, 6, new)
    elif kind == 1:  # trailing total block size
        total = struct.unpack_from(">q", b, len(b) - 8)[0]
        struct.pack_into(">q", b, len(b) - 8, total + rng.choice([-1, 1, 100]))
    elif kind == 2:  # format version / block type
        struct.pack_into(">i", b, 14, rng.choice([0, 2, 99, -1]))
    elif kind == 3:  # header count / content length
        struct.pack_into(">i", b, 22, rng.choice([-1, 10 ** 6, 7]))
    else:  # cut from the middle
        cut = rng.randint(len(MAGIC), len(b) - 2)
        del b[cut:cut + rng.randint(1, len(b) - cut - 1)]
    return bytes(b)


def _make_file(rng: random.Random):
    """(file bytes, [(offset, block bytes)] of the blocks that must be found)."""
    segs = []  # (bytes, intact block?)
    for _ in range(rng.randint(0, 8)):
        if rng.random() < 0.3:
            segs.append((_garbage(rng), False))
        data = rng.choice(BLOCKS)
        if rng.random() < 0.2:
            segs.append((_damage_block(rng, data), False))
        else:
            segs.append((data, True))
    if rng.random() < 0.3:
        segs.append((_garbage(rng), False))
    buf, intact, off = bytearray(), [], 0
    for data, ok in segs:
        if ok:
            intact.append((off, data))
        buf += data
        off += len(data)
    if buf and rng.random() < 0.35:  # truncated tail
        cut = rng.randint(0, len(buf))
        buf = buf[:cut]
        intact = [(o, d) for o, d in intact if o + len(d) <= cut]
    return bytes(buf), intact


def _check(items, size: int, intact, where: str) -> None:
    pos = 0
    found = {}
    for it in items:
        if isinstance(it, CorruptBlock):
            assert it.offset == pos and it.length > 0, f"{where}: corrupt range at {it.offset}, expected {pos}"
            pos += it.length
        else:
            assert isinstance(it, LogBlock)
            assert it.offset == pos, f"{where}: block at {it.offset}, expected {pos}"
            found[it.offset] = it
            pos += it.size
    assert pos == size, f"{where}: items cover {pos} of {size} bytes"
    for off, data in intact:
        b = found.get(off)
        assert b is not None, f"{where}: the intact block at offset {off} was lost"
        assert b.size == len(data)
        assert encode_block(b) == data, f"{where}: block at {off} decoded differently"


def test_fuzz_damaged_logs_in_memory():
    rng = random.Random(20240501)
    n_intact = 0
    for i in range(3000):
        data, intact = _make_file(rng)
        items = scan_log_file(data)
        _check(items, len(data), intact, f"file {i}")
        n_intact += len(intact)
        for off, raw in intact[:1]:  # content of a surviving block decodes as the undamaged block does
            b = next(x for x in items if isinstance(x, LogBlock) and x.offset == off)
            ref = next(x for x in scan_log_file(raw) if isinstance(x, LogBlock))
            if isinstance(b, AvroDataBlock):
                assert b.record_dicts() == ref.record_dicts()
            elif isinstance(b, ParquetDataBlock):
                assert b.records().equals(ref.records())
            elif isinstance(b, DeleteBlock):
                assert b.delete_keys() == ref.delete_keys()
    assert n_intact > 5000  # the fuzz exercised plenty of survivors


def test_fuzz_damaged_log_files_on_disk(tmp_path):
    rng = random.Random(99)
    for i in range(300):
        data, intact = _make_file(rng)
        p = os.path.join(tmp_path, f".f{i}_20240101000000000.log.1_0-0-0")
        with open(p, "wb") as f:
            f.write(data)
        _check(scan_log_file(p), len(data), intact, p)


@pytest.mark.parametrize("n_magics", [1, 2, 3])
def test_consecutive_magics_never_hide_the_next_block(n_magics):
    """Regression: writers that died right after the magic leave `#HUDI#` runs; the block after them is read."""
    blk = BLOCKS[0]
    for prefix in (MAGIC * n_magics, MAGIC * n_magics + b"\x00\x00", b"#HUDI" + MAGIC * (n_magics - 1),
                   MAGIC[:-1] * n_magics):
        data = BLOCKS[1] + prefix + blk + BLOCKS[2]
        _check(scan_log_file(data), len(data), [(0, BLOCKS[1]), (len(BLOCKS[1]) + len(prefix), blk),
                                                 (len(data) - len(BLOCKS[2]), BLOCKS[2])], repr(prefix))
    # a magic overlapping the next block's magic: "#HUDI#HUDI#..." (the damaged magic's last '#' is shared)
    data = b"#HUDI" + blk
    _check(scan_log_file(data), len(data), [(5, blk)], "overlap")
