"""Vectorized (numpy) decoding of DELETE block content for the merge: the record keys and integer ordering values
of an Avro `HoodieDeleteRecordList`, without a Python object per record.

Covered: records whose ordering value is null or an IntWrapper/LongWrapper (what hudilite and Java write for
integer ordering fields and for natural deletes). Anything else (other wrappers, malformed content) returns None
and the caller decodes the block with the exact general decoder (`DeleteBlock.delete_keys`).

Avro records have no per-record length, so where a record ends depends on the previous ones. The decoder
computes, for every byte offset of the content where a record may start, where a record starting there would
end (a handful of numpy passes), then follows that chain from the first record (one list lookup per record).
"""

from __future__ import annotations

import struct

import numpy as np
import pyarrow as pa

_NULL, _STRING = 0, 2  # zigzag varints of union branches 0 and 1 of ["null", "string"]
_INT, _LONG = 4, 6  # zigzag varints of orderingVal branches 2 (IntWrapper) and 3 (LongWrapper)


def _varints(buf: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Zigzag varints at `pos` (clipped reads; callers validate): (values, byte counts; 0 when longer than 10)."""
    last = len(buf) - 1
    z = np.zeros(len(pos), dtype=np.uint64)
    n = np.zeros(len(pos), dtype=np.int64)
    active = np.arange(len(pos))
    for k in range(10):
        b = buf[np.minimum(pos[active] + k, last)]
        z[active] |= (b & 0x7F).astype(np.uint64) << np.uint64(7 * k)
        cont = (b & 0x80) != 0
        n[active[~cont]] = k + 1
        active = active[cont]
        if not len(active):
            break
    v = (z >> np.uint64(1)).astype(np.int64) ^ -(z & np.uint64(1)).astype(np.int64)
    return v, n


def _skip_string(buf: np.ndarray, p: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A ["null", "string"] union at each of `p`: (end offset, or -1 where invalid; string start; length)."""
    br = buf[np.minimum(p, len(buf) - 1)]
    ln, nb = _varints(buf, p + 1)
    is_str = br == _STRING
    ok = (p < len(buf)) & ((br == _NULL) | (is_str & (nb > 0) & (ln >= 0)))
    start = p + 1 + nb
    end = np.where(is_str, start + ln, p + 1)
    end = np.where(ok & (end <= len(buf)), end, -1)
    return end, np.where(is_str, start, 0), np.where(is_str, ln, -1)


def _strings(buf: np.ndarray, start: np.ndarray, length: np.ndarray) -> pa.Array | None:
    """The strings at (start, length) (length -1: null) as a string array; None if not valid UTF-8."""
    n = len(start)
    valid = length >= 0
    lens = np.where(valid, length, 0)
    offs = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lens, out=offs[1:])
    total = int(offs[-1])
    if total >= 2 ** 31 - 1:
        return None
    data = buf[np.repeat(start - offs[:-1], lens) + np.arange(total, dtype=np.int64)]
    null_count = int((~valid).sum())
    validity = pa.py_buffer(np.packbits(valid, bitorder="little")) if null_count else None
    arr = pa.Array.from_buffers(pa.string(), n, [validity, pa.py_buffer(offs.astype(np.int32)), pa.py_buffer(data)],
                                null_count=null_count)
    try:
        arr.validate(full=True)
    except pa.ArrowInvalid:
        return None
    return arr


def decode(content: bytes) -> tuple[pa.Array, np.ndarray, np.ndarray] | None:
    """(record keys (string, null where absent), ordering values (int64), ordering present (bool)) of DELETE
    content, or None when the content is not of the covered form."""
    if len(content) < 9:
        return None
    version, size = struct.unpack_from(">ii", content)
    if version != 3 or 8 + size != len(content):
        return None
    buf = np.frombuffer(content, dtype=np.uint8)
    L = len(buf)
    with np.errstate(over="ignore"):
        # a record starts with its key's union branch (0 or 2): only those offsets can start one
        p = 8 + np.flatnonzero((buf[8:] == _NULL) | (buf[8:] == _STRING))
        kend, _, _ = _skip_string(buf, p)
        pend, _, _ = _skip_string(buf, np.maximum(kend, 0))
        q = np.maximum(pend, 0)
        ob = buf[np.minimum(q, L - 1)]
        ov, on = _varints(buf, q + 1)
        end = np.where(ob == _NULL, q + 1, q + 1 + on)
        ok = (kend >= 0) & (pend >= 0) & (q < L) & ((ob == _NULL) | (((ob == _INT) | (ob == _LONG)) & (on > 0)))
        end = np.where(ok & (end <= L), end, -1)
    nxt = np.full(L + 1, -1, dtype=np.int64)
    nxt[p] = end
    nxt_l = nxt.tolist()
    starts: list[int] = []
    pos = 8
    while True:  # array blocks: count (negative: byte size follows), items; a zero count ends the array
        if pos >= L:
            return None
        (count,), (nb,) = _varints(buf, np.array([pos]))
        if nb == 0:
            return None
        pos += int(nb)
        if count == 0:
            break
        if count < 0:
            count = -count
            (_,), (nb,) = _varints(buf, np.array([pos]))
            if nb == 0:
                return None
            pos += int(nb)
        for _ in range(int(count)):
            starts.append(pos)
            pos = nxt_l[pos] if pos < L else -1
            if pos < 0:
                return None
    if pos != L:
        return None
    st = np.array(starts, dtype=np.int64)
    n = len(st)
    kend, kstart, klen = _skip_string(buf, st)
    pend, pstart, plen = _skip_string(buf, kend)
    ob = buf[pend] if n else np.zeros(0, dtype=np.uint8)
    ov, _ = _varints(buf, pend + 1) if n else (np.zeros(0, np.int64), None)
    present = ob != _NULL
    if (ob == _INT).any() and (np.abs(ov[ob == _INT]) >= (1 << 31)).any():
        return None  # an int out of range: let the general decoder report it
    keys = _strings(buf, kstart, klen)
    if keys is None or _strings(buf, pstart, plen) is None:  # partition paths: UTF-8 checked too
        return None
    return keys, np.where(present, ov, 0), present
