"""Fuzz test of the log reader: over ten thousand randomly damaged log files per run, in memory.

Each file is a random sequence of real blocks (Avro data, Parquet data, delete, rollback command) with damage
applied: a truncated tail, garbage between blocks (random bytes, stray magics, a writer that died right after
its magic or mid-header), bad length fields (negative, tiny, huge, off by a few bytes), a wrong trailing block
size, flipped header bytes, and combinations. The scanner must
- never raise,
- account for every byte exactly once (blocks and corrupt ranges tile the file),
- return every block whose bytes survived intact, at its offset, with its header and content (none lost).
And through the merge-on-read path (`merge.valid_blocks` / `merge.merge_slice`, what snapshot reads use) on
damaged log files whose blocks belong to completed, inflight, rolled-back (rollback command blocks), archived
and later-than-`as_of` instants:
- exactly the intact data/delete blocks of completed instants count, in processing order: never a block of
  a failed instant (nor one a surviving rollback command names), none of a completed one lost,
- the merged records are those of a plain fold of those blocks (commit-time ordering), and event-time merging
  gives what it gives on an undamaged log holding only those blocks.
Deterministic (fixed seeds); about 10 s.
"""

from __future__ import annotations

import os
import random
import struct

import pyarrow as pa
import pytest

from hudilite.log import (MAGIC, AvroDataBlock, CommandBlock, CorruptBlock, DeleteBlock, LogBlock,
                          ParquetDataBlock, encode_block, scan_log_file)
from hudilite.reader.merge import COMMIT_TIME, EVENT_TIME, MergeSpec, SliceDesc, merge_slice, valid_blocks

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


def _make_file(rng: random.Random, pool: list[bytes] = BLOCKS):
    """(file bytes, [(offset, block bytes)] of the blocks that must be found)."""
    segs = []  # (bytes, intact block?)
    for _ in range(rng.randint(0, 8)):
        if rng.random() < 0.3:
            segs.append((_garbage(rng), False))
        data = rng.choice(pool)
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


N_IN_MEMORY = 10_000  # damaged log files scanned from bytes per run (plus N_ON_DISK files and the merge fuzz)
N_ON_DISK = 300
N_SLICES = 1500  # merge fuzz: file slices of 1-3 damaged log files each


def test_fuzz_damaged_logs_in_memory():
    rng = random.Random(20240501)
    n_intact = 0
    for i in range(N_IN_MEMORY):
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
    assert n_intact > 15_000  # the fuzz exercised plenty of survivors


def test_fuzz_damaged_log_files_on_disk(tmp_path):
    rng = random.Random(99)
    for i in range(N_ON_DISK):
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


# ---- the merge-on-read path: blocks of failed instants never count ----------------------------------------
ARCHIVED_BEFORE = "20240101000000000"
INSTANTS = {  # instant -> state
    "20231201000000001": "archived",  # older than the active timeline, not on it: committed
    # failed long ago: its instant files are gone (older than the active timeline, so it would count as an
    # archived commit), only the rollback command blocks in the log say it failed
    "20231201000000002": "archived-rolledback",
    "20240102000000001": "completed",
    "20240102000000002": "inflight",
    "20240102000000003": "completed",
    "20240102000000004": "rolledback",  # failed (inflight on the timeline), named by a rollback command block
    "20240102000000005": "requested",
    "20240102000000006": "completed",
    "20240102000000007": "rolledback",
    "20240102000000008": "completed",
    "20240102000000009": "after",  # completed, but later than the read's as_of
}
AS_OF = "20240102000000008"
MERGE_SCHEMA = pa.schema([("_hoodie_commit_time", pa.string()), ("_hoodie_record_key", pa.string()),
                          ("v", pa.int64()), ("s", pa.string())])


def _merge_blocks():
    """[(encoded block, kind, instant, content)]: data blocks (rows), delete blocks (keys), rollback commands
    (target). Every instant has data and delete blocks; rolled-back ones also a rollback command each."""
    rng = random.Random(11)
    out = []
    rb = 20240103000000000
    for t, state in INSTANTS.items():
        for j in range(4):
            n = rng.randint(1, 5)
            keys = [f"k{rng.randint(0, 12)}" for _ in range(n)]
            if j < 2:
                rows = [{"_hoodie_commit_time": t, "_hoodie_record_key": k, "v": rng.randint(0, 5),
                         "s": rng.choice(["x", "#HUDI#", "é"]) + t[-1]} for k in keys]
                tbl = pa.Table.from_pylist(rows, MERGE_SCHEMA)
                b = AvroDataBlock.from_table(tbl, SCHEMA, t) if j == 0 else ParquetDataBlock.from_table(tbl, t)
                out.append((encode_block(b), "data", t, rows))
            elif j == 2:
                b = DeleteBlock.from_keys([(k, "", rng.choice([None, 0, 3])) for k in keys], t,
                                          ordering_type="int")
                out.append((encode_block(b), "delete", t, keys))
            elif state.endswith("rolledback"):
                rb += 1
                out.append((encode_block(CommandBlock.rollback(str(rb), t)), "rollback", str(rb), t))
    return out


MERGE_BLOCKS = _merge_blocks()
ARB = next(t for t, s in INSTANTS.items() if s == "archived-rolledback")
_BY_BYTES = {raw: (kind, t, content) for raw, kind, t, content in MERGE_BLOCKS}


def _merge_spec(mode: str) -> MergeSpec:
    committed = {t for t, s in INSTANTS.items() if s in ("completed", "after")}
    known = {t for t, s in INSTANTS.items() if not s.startswith("archived")}
    return MergeSpec(schema=MERGE_SCHEMA, merge_mode=mode, ordering_field="v", as_of=AS_OF,
                     committed=frozenset(committed), known=frozenset(known),
                     archived_before=ARCHIVED_BEFORE)


def _expected_blocks(files) -> list[bytes]:
    """The reference rule: intact data/delete blocks of instants that completed (or were archived), not after
    as_of, not named by an intact rollback command block in any file of the slice; instants in first-seen
    order, blocks in log order within an instant."""
    intact = [raw for _, blocks in files for _, raw in blocks]
    rolled_back = {_BY_BYTES[raw][2] for raw in intact if _BY_BYTES[raw][0] == "rollback"}
    order, by_instant = [], {}
    for raw in intact:
        kind, t, _ = _BY_BYTES[raw]
        state = INSTANTS.get(t)
        if kind == "rollback" or state not in ("completed", "archived", "archived-rolledback") or t in rolled_back:
            continue
        if t not in by_instant:
            order.append(t)
            by_instant[t] = []
        by_instant[t].append(raw)
    return [raw for t in order for raw in by_instant[t]]


def _fold(blocks: list[bytes]) -> dict:
    """Commit-time ordering, plainly: later records replace earlier ones, deletes remove them."""
    rows = {}
    for raw in blocks:
        kind, _, content = _BY_BYTES[raw]
        if kind == "data":
            for r in content:
                rows[r["_hoodie_record_key"]] = r
        else:
            for k in content:
                rows.pop(k, None)
    return rows


def test_fuzz_damaged_logs_merge_only_blocks_of_completed_instants():
    rng = random.Random(424242)
    failed = {t for t, s in INSTANTS.items() if s not in ("completed", "archived", "archived-rolledback")}
    pool = [raw for raw, *_ in MERGE_BLOCKS]
    commit_spec, event_spec = _merge_spec(COMMIT_TIME), _merge_spec(EVENT_TIME)
    n_counted = n_failed_seen = 0
    for i in range(N_SLICES):
        files = [_make_file(rng, pool) for _ in range(rng.randint(1, 3))]
        logs = tuple(data for data, _ in files)
        expected = _expected_blocks(files)
        got = valid_blocks(logs, commit_spec)
        assert [encode_block(b) for b in got] == expected, f"slice {i}: the blocks that count differ"
        assert not {b.instant_time for b in got} & failed
        if any(_BY_BYTES[raw][::2] == ("rollback", ARB) for _, blocks in files for _, raw in blocks):
            # a failed instant only the log's (surviving) rollback command blocks know of
            assert ARB not in {b.instant_time for b in got}
        n_counted += len(expected)
        n_failed_seen += sum(_BY_BYTES[raw][1] in failed for _, blocks in files for _, raw in blocks)
        desc = SliceDesc("", "f", None, logs)
        merged = merge_slice(desc, commit_spec)
        assert sorted(merged.to_pylist(), key=lambda r: r["_hoodie_record_key"]) == \
            sorted(_fold(expected).values(), key=lambda r: r["_hoodie_record_key"]), f"slice {i}: merged rows"
        if i % 5 == 0:  # event time: as an undamaged log of just the blocks that count
            clean = SliceDesc("", "f", None, (b"".join(expected),))
            assert merge_slice(desc, event_spec).equals(merge_slice(clean, event_spec)), f"slice {i}: event time"
    assert n_counted > 3000 and n_failed_seen > 3000  # both sides exercised
