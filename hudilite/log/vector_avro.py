"""Vectorized (numpy) Avro binary encoding and decoding of AVRO_DATA block content for flat records.

The content of an AVRO_DATA block is `int32 3`, `int32 count`, then per record `int32 length` + the Avro binary
datum (hudi-format.md §7a). For records whose fields are primitives (boolean, int, long, float, double, string,
bytes; date and timestamp logical types), optionally in a `["null", T]` / `[T, "null"]` union - every table
hudilite writes, and Java's flat tables - the datums are built and parsed column by column with numpy instead of
one Python call per record (fastavro), byte-identical to fastavro's output (tested). Anything else (nested
records, arrays, maps, enums, fixed, decimals) returns None and the caller uses fastavro.
"""

from __future__ import annotations

import json
import struct

import numpy as np
import pyarrow as pa

from hudilite.log.blocks import AvroDataBlock, avro_codec, data_header

_PRIM = {"boolean", "int", "long", "float", "double", "string", "bytes"}
_LOGICAL = {("int", "date"): "date", ("long", "timestamp-micros"): "ts_us", ("long", "timestamp-millis"): "ts_ms",
            ("long", "local-timestamp-micros"): "lts_us", ("long", "local-timestamp-millis"): "lts_ms"}
_K = np.arange(10, dtype=np.uint64)


def _field_plan(schema_json: str):
    """[(name, kind, value_branch or None (not a union), null_branch or None)] or None if unsupported."""
    try:
        schema = json.loads(schema_json)
    except (TypeError, ValueError):
        return None
    if not isinstance(schema, dict) or schema.get("type") != "record":
        return None
    out = []
    for f in schema.get("fields") or []:
        t = f.get("type")
        value_branch = null_branch = None
        if isinstance(t, list):
            if len(t) != 2 or "null" not in t:
                return None
            null_branch = t.index("null")
            value_branch = 1 - null_branch
            t = t[value_branch]
        kind = None
        if isinstance(t, str) and t in _PRIM:
            kind = t
        elif isinstance(t, dict) and t.get("type") in _PRIM:
            lt = t.get("logicalType")
            kind = _LOGICAL.get((t["type"], lt)) if lt else t["type"]
        if kind is None:
            return None
        out.append((f["name"], kind, value_branch, null_branch))
    return out


# ---- encoding ------------------------------------------------------------------------------------------------
def _varint(v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Zigzag varints of int64 values: (bytes in row order, byte count per value)."""
    v = v.astype(np.int64, copy=False)
    z = ((v << 1) ^ (v >> 63)).view(np.uint64)
    n = np.ones(len(z), dtype=np.int64)
    t = z >> np.uint64(7)
    while t.any():
        n += t > 0
        t >>= np.uint64(7)
    m = ((z[:, None] >> (np.uint64(7) * _K)[None, :]) & np.uint64(0x7F)).astype(np.uint8)
    cols = np.arange(10)[None, :]
    m |= ((cols < (n[:, None] - 1)) * 0x80).astype(np.uint8)
    return m[cols < n[:, None]], n


def _assemble(segs: list, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Interleave per-row segments: output row i = segs[0][i] + segs[1][i] + ...; returns (bytes, row lengths)."""
    lens = np.stack([ln for _, ln in segs]) if segs else np.zeros((0, n), dtype=np.int64)
    row_len = lens.sum(axis=0)
    within = np.cumsum(lens, axis=0) - lens
    row_start = np.cumsum(row_len) - row_len
    out = np.empty(int(row_len.sum()), dtype=np.uint8)
    for s, (data, ln) in enumerate(segs):
        if len(data) == 0:
            continue
        src_start = np.cumsum(ln) - ln
        idx = np.repeat(row_start + within[s] - src_start, ln) + np.arange(len(data), dtype=np.int64)
        out[idx] = data
    return out, row_len


def _int_values(col: pa.ChunkedArray | pa.Array, kind: str) -> np.ndarray:
    if kind in ("ts_us", "ts_ms", "lts_us", "lts_ms"):
        unit = "us" if kind.endswith("us") else "ms"
        if not pa.types.is_timestamp(col.type):
            return np.asarray(col.cast(pa.int64()).fill_null(0).to_numpy(zero_copy_only=False), dtype=np.int64)
        if col.type.unit != unit:
            col = col.cast(pa.timestamp(unit, tz=col.type.tz), safe=False)
        return np.asarray(col.cast(pa.int64()).fill_null(0).to_numpy(zero_copy_only=False), dtype=np.int64)
    if kind == "date":
        if pa.types.is_date(col.type):
            col = col.cast(pa.date32()).cast(pa.int32())
    return np.asarray(col.cast(pa.int64()).fill_null(0).to_numpy(zero_copy_only=False), dtype=np.int64)


def encode_records(table: pa.Table, schema_json: str) -> bytes | None:
    """AVRO_DATA content for `table` under `schema_json`, or None when the schema or data is not supported
    (the caller then encodes with fastavro, which also reports bad data)."""
    plan = _field_plan(schema_json)
    if plan is None:
        return None
    names = {p[0] for p in plan}
    if any(c not in names for c in table.column_names):
        return None
    n = table.num_rows
    segs: list = []
    try:
        for name, kind, vb, nb in plan:
            if name in table.column_names:
                col = table.column(name).combine_chunks()
            else:
                col = pa.nulls(n)
            valid = ~np.asarray(col.is_null().to_numpy(zero_copy_only=False), dtype=bool) if col.null_count \
                else np.ones(n, dtype=bool)
            if vb is None:
                if not valid.all():
                    return None
            else:
                branch = np.where(valid, 2 * vb, 2 * nb).astype(np.uint8)  # zigzag of the branch index
                segs.append((branch, np.ones(n, dtype=np.int64)))
            if pa.types.is_null(col.type):
                continue
            if kind in ("int", "long", "date", "ts_us", "ts_ms", "lts_us", "lts_ms"):
                if not (pa.types.is_integer(col.type) or pa.types.is_temporal(col.type)):
                    return None
                vals = _int_values(col, kind)[valid]
                data, ln = _varint(vals)
                full = np.zeros(n, dtype=np.int64)
                full[valid] = ln
                segs.append((data, full))
            elif kind in ("float", "double"):
                if not (pa.types.is_floating(col.type) or pa.types.is_integer(col.type)):
                    return None
                dt_ = "<f4" if kind == "float" else "<f8"
                vals = np.asarray(col.cast(pa.float64()).fill_null(0).to_numpy(zero_copy_only=False))[valid]
                data = vals.astype(dt_).view(np.uint8)
                full = np.zeros(n, dtype=np.int64)
                full[valid] = 4 if kind == "float" else 8
                segs.append((data, full))
            elif kind == "boolean":
                if not pa.types.is_boolean(col.type):
                    return None
                vals = np.asarray(col.fill_null(False).to_numpy(zero_copy_only=False), dtype=bool)[valid]
                full = valid.astype(np.int64)
                segs.append((vals.astype(np.uint8), full))
            else:  # string / bytes
                if kind == "string" and not (pa.types.is_string(col.type) or pa.types.is_large_string(col.type)):
                    return None
                if kind == "bytes" and not (pa.types.is_binary(col.type) or pa.types.is_large_binary(col.type)):
                    return None
                filled = col.fill_null("" if kind == "string" else b"")
                big = pa.types.is_large_string(filled.type) or pa.types.is_large_binary(filled.type)
                offs = np.frombuffer(filled.buffers()[1], dtype=np.int64 if big else np.int32)
                offs = offs[filled.offset:filled.offset + n + 1].astype(np.int64)
                raw = filled.buffers()[2]
                data = np.frombuffer(raw, dtype=np.uint8)[offs[0]:offs[-1]] if raw is not None and n \
                    else np.zeros(0, dtype=np.uint8)
                slen = np.diff(offs)
                ldata, lln = _varint(slen[valid])
                full = np.zeros(n, dtype=np.int64)
                full[valid] = lln
                segs.append((ldata, full))
                segs.append((data, slen))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError, TypeError, ValueError):
        return None
    datum_len = np.stack([ln for _, ln in segs]).sum(axis=0) if segs else np.zeros(n, dtype=np.int64)
    prefix = datum_len.astype(">i4").view(np.uint8)
    out, _ = _assemble([(prefix, np.full(n, 4, dtype=np.int64))] + segs, n)
    return struct.pack(">ii", 3, n) + out.tobytes()


# ---- decoding ------------------------------------------------------------------------------------------------
def _read_varint(buf: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Zigzag varints starting at `pos`: (values, byte counts). One pass per byte position, over the varints
    still continuing (most are short: union branches and lengths take one or two bytes)."""
    m = len(pos)
    z = np.zeros(m, dtype=np.uint64)
    n = np.zeros(m, dtype=np.int64)
    active = None  # indices still continuing (None: all)
    last = len(buf) - 1
    for k in range(10):
        p = pos if active is None else pos[active]
        b = buf[np.minimum(p + k, last)]
        part = (b & 0x7F).astype(np.uint64) << np.uint64(7 * k)
        cont = (b & 0x80) != 0
        if active is None:
            z |= part
            if not cont.any():
                n[:] = k + 1
                break
            n[~cont] = k + 1
            active = np.flatnonzero(cont)
        else:
            z[active] |= part
            n[active[~cont]] = k + 1
            active = active[cont]
            if not len(active):
                break
    else:
        raise ValueError("varint longer than 10 bytes")
    v = (z >> np.uint64(1)).astype(np.int64) ^ -(z & np.uint64(1)).astype(np.int64)
    return v, n


def _record_bounds(content: bytes, count: int) -> tuple[np.ndarray, np.ndarray] | None:
    """(start, end) of each record's datum: each is `int32 length` + datum, so the positions chain."""
    unpack = struct.Struct(">i").unpack_from
    lens = [0] * count
    p = 8
    for i in range(count):  # sequential by nature; kept to the minimum per record
        ln = unpack(content, p)[0]
        if ln < 0:
            return None
        lens[i] = ln
        p += 4 + ln
    if p != len(content):
        return None
    ln = np.array(lens, dtype=np.int64)
    ends = 8 + np.cumsum(ln + 4)
    return ends - ln, ends


def _with_nulls(vals: np.ndarray, valid: np.ndarray, allv: bool, dtype) -> pa.Array:
    """An Arrow array of `count` values: `vals` at the valid positions, nulls elsewhere."""
    if allv:
        return pa.array(vals.astype(dtype, copy=False))
    full = np.zeros(len(valid), dtype=dtype)
    full[valid] = vals
    return pa.array(full, mask=~valid)


def decode_records(content: bytes, schema_json: str, arrow_schema: pa.Schema | None = None) -> pa.Table | None:
    """The records of AVRO_DATA content as a Table (types as `AvroDataBlock.records()` gives them when
    `arrow_schema` is that schema), or None when unsupported or not decodable (the caller falls back)."""
    plan = _field_plan(schema_json)
    if plan is None or len(content) < 8:
        return None
    try:
        version, count = struct.unpack_from(">ii", content, 0)
        if version != 3 or count < 0:
            return None
        buf = np.frombuffer(content, dtype=np.uint8)
        bounds = _record_bounds(content, count)
        if bounds is None:
            return None
        starts, ends = bounds
        pos = starts.copy()
        cols = {}
        for name, kind, vb, nb in plan:
            if vb is not None:
                br, bl = _read_varint(buf, pos)
                valid = br == vb
                if not (valid | (br == nb)).all():
                    return None
                pos = pos + bl
            else:
                valid = np.ones(count, dtype=bool)
            allv = bool(valid.all())  # no nulls: skip the scatter into full-length arrays
            vp = pos if allv else pos[valid]
            nv = len(vp)
            if kind in ("int", "long", "date", "ts_us", "ts_ms", "lts_us", "lts_ms"):
                vals, ln = _read_varint(buf, vp) if nv else (np.zeros(0, np.int64), np.zeros(0, np.int64))
                arr = _with_nulls(vals, valid, allv, np.int64)
                typ = {"int": pa.int32(), "long": pa.int64(), "date": pa.date32(),
                       "ts_us": pa.timestamp("us", tz="UTC"), "ts_ms": pa.timestamp("ms", tz="UTC"),
                       "lts_us": pa.timestamp("us"), "lts_ms": pa.timestamp("ms")}[kind]
                arr = arr.cast(pa.int32()).cast(typ) if kind in ("int", "date") else arr.cast(typ)
            elif kind in ("float", "double"):
                w = 4 if kind == "float" else 8
                idx = vp[:, None] + np.arange(w)[None, :]
                if nv and idx.max() >= len(buf):
                    return None
                vals = buf[idx].reshape(-1).view("<f4" if w == 4 else "<f8") if nv else np.zeros(0)
                arr = _with_nulls(vals, valid, allv, np.float32 if w == 4 else np.float64)
                ln = np.full(nv, w, dtype=np.int64)
            elif kind == "boolean":
                full = np.zeros(count, dtype=bool)
                full[valid] = buf[vp] != 0 if nv else np.zeros(0, dtype=bool)
                arr = pa.array(full, mask=~valid)
                ln = np.ones(nv, dtype=np.int64)
            else:
                slen, sl = _read_varint(buf, vp) if nv else (np.zeros(0, np.int64), np.zeros(0, np.int64))
                if nv and (slen.min() < 0 or (vp + sl + slen).max() > len(buf)):
                    return None
                lens = np.zeros(count, dtype=np.int64)
                lens[valid] = slen
                src = np.zeros(count, dtype=np.int64)
                src[valid] = vp + sl
                total = int(lens.sum())
                offs = np.zeros(count + 1, dtype=np.int64)
                np.cumsum(lens, out=offs[1:])
                data = buf[np.repeat(src - offs[:-1], lens) + np.arange(total, dtype=np.int64)]
                validity = pa.py_buffer(np.packbits(valid, bitorder="little")) if not valid.all() else None
                big = total >= 2 ** 31 - 1
                typ = (pa.large_string() if big else pa.string()) if kind == "string" else \
                    (pa.large_binary() if big else pa.binary())
                offsets = pa.py_buffer(offs.astype(np.int64 if big else np.int32))
                arr = pa.Array.from_buffers(typ, count, [validity, offsets, pa.py_buffer(data)],
                                            null_count=int((~valid).sum()))
                if kind == "string":
                    arr.validate(full=True)  # UTF-8 check
                ln = sl + slen
            if allv:
                pos = pos + ln
            else:
                pos = pos.copy()
                pos[valid] += ln
            cols[name] = arr
        if not np.array_equal(pos, ends):
            return None
    except (ValueError, IndexError, pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError, struct.error):
        return None
    t = pa.table(cols)
    if arrow_schema is not None:
        arrays = []
        for f in arrow_schema:
            c = t.column(f.name) if f.name in t.column_names else pa.nulls(t.num_rows, f.type)
            arrays.append(c.cast(f.type) if c.type != f.type else c)
        t = pa.Table.from_arrays(arrays, schema=arrow_schema)
    return t


def fast_records(block) -> pa.Table:
    """`block.records()` of an AvroDataBlock, decoded vectorized when its schema allows."""
    schema = block.schema
    if schema:
        try:
            target = avro_codec(schema).arrow_schema
        except Exception:  # noqa: BLE001 - let records() report it
            target = None
        if target is not None:
            t = decode_records(block.content, schema, target)
            if t is not None:
                return t
    return block.records()


def avro_block(table: pa.Table, schema_json: str, instant: str):
    """An AvroDataBlock for `table` (vectorized encoding when the schema allows, else fastavro)."""
    content = encode_records(table, schema_json)
    if content is None:
        return AvroDataBlock.from_table(table, schema_json, instant)
    return AvroDataBlock(data_header(instant, schema_json, None), content)
