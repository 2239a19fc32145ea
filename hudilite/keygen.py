"""Record keys and partition paths (simple, complex and non-partitioned key generators).

Computed as Spark column expressions so they run inside the executors' JVM with no Python round trip.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from hudilite.columns import KEY_COL, PART_COL

DEFAULT_PARTITION = "__HIVE_DEFAULT_PARTITION__"
NAME_MAX = 255  # bytes of one directory name: the limit of Linux and macOS file systems and of HDFS
NULL_KEY = "__null__"
EMPTY_KEY = "__empty__"


# what Apache Hudi escapes in a partition value as %XX when hoodie.datasource.write.partitionpath.urlencode is
# on (PartitionPathEncodeUtils, Hive's set): control characters, '/', the separators of paths and URLs, '%'
URL_ENCODED = frozenset([chr(c) for c in range(1, 32)] + list('"#%\'*/:=?\\\x7f{[]^'))
_ESCAPE = re.compile("%([0-9A-Fa-f]{2})")


def _segment_value(seg: str, hive_style: bool) -> str:
    """A partition directory's value as written: a hive-style `field=value` without its field name."""
    return seg.split("=", 1)[1] if hive_style and "=" in seg else seg


def partition_path_problem(path: str | None, depth: int, url_encoded: bool = False,
                           hive_style: bool = False) -> str | None:
    """Why a partition path made from partition values is refused, or None: it must have one directory level per
    partition field (no value may contain '/'), no level may be '.' or '..' (a value '..' without hive-style
    partitioning would write outside the table), and none may be longer than a directory name can be. In a
    table whose paths are URL-encoded (`url_encoded`: written by Apache Hudi with
    hoodie.datasource.write.partitionpath.urlencode), a value with a character Hudi escapes is refused too:
    hudilite writes values as they are, so such a value would get a directory of its own beside Hudi's."""
    if not depth or path is None:
        return None
    segments = path.split("/")
    if len(segments) != depth:
        return f"partition value produces the path {path!r}: partition values may not contain '/'"
    if url_encoded:
        for seg in segments:
            value = _segment_value(seg, hive_style)
            escaped = sorted(set(value) & URL_ENCODED)
            if escaped:
                return (f"partition value {value!r} holds {escaped[0]!r}, which this table's paths URL-encode "
                        "(hoodie.datasource.write.partitionpath.urlencode=true, as Apache Hudi wrote it): hudilite "
                        "writes partition values of such tables only without the characters Hudi escapes")
    if any(seg in (".", "..") for seg in segments):
        return (f"partition value produces the path {path!r}: a partition value may not be '.' or '..' "
                "(the files would land outside their partition directory)")
    for seg in segments:
        size = len(seg.encode("utf-8", "surrogatepass"))
        if size > NAME_MAX:
            return (f"partition value produces a directory name of {size} bytes ({seg[:40]!r}...): a partition "
                    f"directory name may have at most {NAME_MAX} bytes (the file systems' limit)")
    return None


@dataclass(frozen=True)
class KeySpec:
    record_key_fields: tuple[str, ...]
    partition_fields: tuple[str, ...]
    hive_style: bool
    # timestamp (with time zone) values as their UTC wall clock, not the writing session's (TableConfig)
    utc_timestamps: bool = False

    @property
    def complex_key(self) -> bool:
        return len(self.record_key_fields) > 1


def unescape_partition_value(value: str) -> str:
    """A partition directory's value as written with urlencode on: each %XX is the character XX."""
    return _ESCAPE.sub(lambda m: chr(int(m.group(1), 16)), value) if "%" in value else value


def partition_values(spec: KeySpec, partition: str, url_encoded: bool = False) -> dict[str, str]:
    """Partition column values (as strings) parsed back from a partition path (`url_encoded`: the table's
    hoodie.datasource.write.partitionpath.urlencode). Empty when the path does not have one directory per field:
    Apache Hudi writes a value holding '/' as it is when urlencode is off, so no directory is any field's."""
    if not spec.partition_fields or not partition:
        return {}
    segs = partition.split("/")
    if len(segs) != len(spec.partition_fields):
        return {}
    out = {}
    for f, seg in zip(spec.partition_fields, segs):
        value = _segment_value(seg, spec.hive_style)
        out[f] = unescape_partition_value(value) if url_encoded else value
    return out


def integer_key_column(record_key_fields, schema) -> str | None:
    """The record-key column when the key is one column of a signed integer type in the Arrow `schema`: such
    keys are the decimal strings of the column's values, so records can be matched on the values."""
    import pyarrow as pa

    fields = list(record_key_fields)
    if len(fields) != 1 or fields[0] not in schema.names:
        return None
    return fields[0] if pa.types.is_signed_integer(schema.field(fields[0]).type) else None


def arrow_keygen(spec: KeySpec, schema):
    """For bulk inserts: a function that adds the record key and partition path columns to an Arrow table in
    the Python worker, so Spark ships only the data columns (its row -> Arrow conversion is the costly part
    of a bulk insert). Only where the string forms are the same as `record_key_expr` / `partition_path_expr`
    compute them in Spark (key columns of integer or string type, simple or complex; partition columns of
    integer, string or date type); otherwise None and the JVM expressions are used."""
    import pyarrow as pa
    import pyarrow.compute as pc

    def plain(name: str, allow_date: bool) -> bool:
        if name not in schema.names:
            return False
        t = schema.field(name).type
        return (pa.types.is_integer(t) or pa.types.is_string(t) or pa.types.is_large_string(t)
                or (allow_date and pa.types.is_date32(t)))

    if not all(plain(f, False) for f in spec.record_key_fields):
        return None
    if not all(plain(f, True) for f in spec.partition_fields):
        return None

    def as_string(table, name):
        return pc.cast(table.column(name), pa.string())

    def add(table):
        if spec.complex_key:  # f1:v1,f2:v2 with __null__ / __empty__; null when every part is null
            segs, all_null = [], None
            for f in spec.record_key_fields:
                v = as_string(table, f)
                null = pc.is_null(v)
                empty = pc.fill_null(pc.equal(v, ""), False)
                gone = pc.or_(null, empty)
                all_null = gone if all_null is None else pc.and_(all_null, gone)
                v = pc.if_else(null, NULL_KEY, pc.if_else(empty, EMPTY_KEY, v))
                segs.append(pc.binary_join_element_wise(f"{f}:", v, ""))
            key = pc.if_else(all_null, pa.scalar(None, pa.string()), pc.binary_join_element_wise(*segs, ","))
        else:  # "" -> null: rejected like a null key
            key = as_string(table, spec.record_key_fields[0])
            key = pc.if_else(pc.fill_null(pc.equal(key, ""), False), pa.scalar(None, pa.string()), key)
        if spec.partition_fields:
            segs = []
            for f in spec.partition_fields:
                v = as_string(table, f)
                v = pc.if_else(pc.or_kleene(pc.is_null(v), pc.equal(v, "")), DEFAULT_PARTITION, v)
                segs.append(pc.binary_join_element_wise(f"{f}=", v, "") if spec.hive_style else v)
            part = segs[0] if len(segs) == 1 else pc.binary_join_element_wise(*segs, "/")
        else:
            part = pa.array([""], pa.string()).take(pa.array([0] * table.num_rows, pa.int32()))
        return table.append_column(KEY_COL, key).append_column(PART_COL, part)

    return add
