"""Table configuration: `.hoodie/hoodie.properties` (read and write versions 6, 8, 9)."""

from __future__ import annotations

import uuid
import zlib
from dataclasses import dataclass, field

from hudilite import options as o
from hudilite.errors import CorruptTableError, UnsupportedTableError
from hudilite.timeline.instant_time import format_instant, now_ms

COPY_ON_WRITE = "COPY_ON_WRITE"
MERGE_ON_READ = "MERGE_ON_READ"

EVENT_TIME_PAYLOAD = "org.apache.hudi.common.model.DefaultHoodieRecordPayload"
COMMIT_TIME_PAYLOAD = "org.apache.hudi.common.model.OverwriteWithLatestAvroPayload"
EVENT_TIME_STRATEGY = "eeb8d96f-b1e4-49fd-bbf8-28ac514178e5"
COMMIT_TIME_STRATEGY = "ce9acb64-bde0-424c-9b91-f6ebba25356d"

KEYGEN_SIMPLE = "org.apache.hudi.keygen.SimpleKeyGenerator"
KEYGEN_COMPLEX = "org.apache.hudi.keygen.ComplexKeyGenerator"
KEYGEN_NONPARTITIONED = "org.apache.hudi.keygen.NonpartitionedKeyGenerator"
KEYGEN_TIMESTAMP = "org.apache.hudi.keygen.TimestampBasedKeyGenerator"

WRITE_TABLE_VERSION = 9  # the version of new tables unless `hoodie.write.table.version` says otherwise
WRITABLE_VERSIONS = (6, 8, 9)
# key generator class -> the type name version 8+ records (Java's KeyGeneratorType)
KEYGEN_TYPES = {KEYGEN_SIMPLE: "SIMPLE", KEYGEN_COMPLEX: "COMPLEX", KEYGEN_NONPARTITIONED: "NON_PARTITION",
                KEYGEN_TIMESTAMP: "TIMESTAMP"}
READABLE_VERSIONS = {6: 1, 8: 2, 9: 2}  # table version -> required timeline layout version


# The table's identity (declared in hudilite.options): it moves with the directory and differs for a table
# rebuilt or recreated at the same path, so checkpoints that record it can tell "the table I consumed" from
# "a new table at that path".
TABLE_ID_KEY = o.T_TABLE_ID.key


def new_table_id() -> str:
    return f"{format_instant(now_ms())}-{uuid.uuid4().hex}"


def table_id_created(table_id: str | None) -> str | None:
    """The creation time (17-digit instant format) recorded in a table id; None if it has none."""
    head = (table_id or "").split("-", 1)[0]
    return head if len(head) == 17 and head.isdigit() else None


def table_checksum(database: str, table: str) -> int:
    """Java's hoodie.table.checksum: crc32 of "<database>.<table>" as an unsigned number."""
    return zlib.crc32(f"{database}.{table}".encode("utf-8")) & 0xFFFFFFFF


def _check_checksum(props: dict[str, str], path: str) -> None:
    """Java validates hoodie.table.checksum when it reads the file (a damaged name or checksum line fails);
    so do we. Without hoodie.database.name Java sums "" and hudilite "default" as the database."""
    given = o.T_CHECKSUM.get(props)
    if given is None:
        return
    name, db = props[o.T_NAME.key], o.T_DATABASE.get(props)
    sums = {table_checksum(d, name) for d in ([db] if db is not None else ["", "default"])}
    if not given.strip().isdigit() or int(given) not in sums:
        raise CorruptTableError(
            f"{path}: hoodie.properties is damaged: {o.T_CHECKSUM.key}={given!r} does not match "
            f"{o.T_NAME.key}={name!r} (expected {min(sums)})")


def parse_properties(text: str) -> dict[str, str]:
    props: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#") or line.startswith("!"):
            continue
        if "=" not in line:
            raise CorruptTableError(f"hoodie.properties: malformed line {raw!r} (expected key=value)")
        k, v = line.split("=", 1)
        props[k.strip()] = v.strip()
    return props


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace(":", "\\:").replace("\n", "\\n")


def unescape(value: str) -> str:
    out, i = [], 0
    while i < len(value):
        c = value[i]
        if c == "\\" and i + 1 < len(value):
            nxt = value[i + 1]
            out.append({"n": "\n", "t": "\t"}.get(nxt, nxt))
            i += 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


@dataclass
class TableConfig:
    """Parsed hoodie.properties with typed accessors."""

    props: dict[str, str] = field(default_factory=dict)

    # ---- required basics -------------------------------------------------------------
    @property
    def name(self) -> str:
        return o.T_NAME.get(self.props)

    @property
    def table_type(self) -> str:
        t = o.T_TYPE.get(self.props).upper()
        return {"COW": COPY_ON_WRITE, "MOR": MERGE_ON_READ}.get(t, t)

    @property
    def version(self) -> int:
        return int(o.T_VERSION.get(self.props))

    @property
    def layout_version(self) -> int:
        return int(o.T_LAYOUT_VERSION.get(self.props))

    @property
    def timeline_path(self) -> str:
        return "" if self.layout_version < 2 else o.T_TIMELINE_PATH.get(self.props)

    @property
    def record_key_fields(self) -> list[str]:
        return o.T_RECORD_KEYS.get(self.props)

    @property
    def precombine_field(self) -> str | None:
        v = o.T_ORDERING.get(self.props) or o.T_PRECOMBINE.get(self.props)
        return v or None

    @property
    def partition_fields(self) -> list[str]:
        return o.T_PARTITIONS.get(self.props)

    @property
    def keygen(self) -> str:
        return o.T_KEYGEN_CLASS.get(self.props) or o.T_KEYGEN_TYPE.get(self.props)

    @property
    def is_partitioned(self) -> bool:
        kg = self.keygen.upper()
        return bool(self.partition_fields) and "NONPARTITIONED" not in kg and kg != "NON_PARTITION"

    @property
    def hive_style(self) -> bool:
        return o.T_HIVE_STYLE.get(self.props)

    @property
    def timestamp_keys_utc(self) -> bool:
        return o.T_KEYGEN_UTC.get(self.props)

    @property
    def url_encode(self) -> bool:
        return o.T_URL_ENCODE.get(self.props)

    @property
    def base_file_format(self) -> str:
        return o.T_BASE_FORMAT.get(self.props).upper()

    @property
    def populate_meta_fields(self) -> bool:
        return o.T_META_FIELDS.get(self.props)

    @property
    def table_id(self) -> str | None:
        """hudilite's table identity (TABLE_ID_KEY); None for tables created by other engines or by hudilite
        before identities existed."""
        return self.props.get(TABLE_ID_KEY) or None

    @property
    def create_schema(self) -> str | None:
        s = o.T_CREATE_SCHEMA.get(self.props)
        return unescape(s) if s else None

    @property
    def archive_folder(self) -> str:
        return o.T_ARCHIVE_FOLDER.get(self.props) or o.T_ARCHIVE_FOLDER.default

    @property
    def payload_class(self) -> str:
        return o.T_PAYLOAD.get(self.props)

    @property
    def merge_mode(self) -> str:
        """EVENT_TIME_ORDERING or COMMIT_TIME_ORDERING, inferred as Java/hudi-rs do."""
        mode = o.T_MERGE_MODE.get(self.props)
        if mode:
            return mode.upper()
        strategy = o.T_MERGE_STRATEGY.get(self.props) or o.T_MERGER_STRATEGY.get(self.props)
        payload = self.payload_class
        if self.version >= 8 and strategy:
            return "COMMIT_TIME_ORDERING" if strategy == COMMIT_TIME_STRATEGY else "EVENT_TIME_ORDERING"
        if payload.endswith("OverwriteWithLatestAvroPayload"):
            return "COMMIT_TIME_ORDERING"
        if payload:
            return "EVENT_TIME_ORDERING"
        return "EVENT_TIME_ORDERING" if self.precombine_field else "COMMIT_TIME_ORDERING"

    def validate_readable(self, path: str) -> None:
        if not self.name:
            raise CorruptTableError(f"{path}: hoodie.properties has no {o.T_NAME.key}")
        if self.table_type not in (COPY_ON_WRITE, MERGE_ON_READ):
            raise CorruptTableError(f"{path}: unknown {o.T_TYPE.key} {self.table_type!r}")
        if self.version not in READABLE_VERSIONS:
            raise UnsupportedTableError(
                f"{path}: table version {self.version} is not supported (readable: 6, 8, 9)"
            )
        if o.T_LAYOUT_VERSION.key not in self.props:
            raise CorruptTableError(f"{path}: hoodie.properties lacks {o.T_LAYOUT_VERSION.key}")
        if self.layout_version != READABLE_VERSIONS[self.version]:
            raise CorruptTableError(
                f"{path}: table version {self.version} needs timeline layout "
                f"{READABLE_VERSIONS[self.version]}, found {self.layout_version}"
            )
        if o.T_DROP_PARTITION_COLUMNS.get(self.props):
            raise UnsupportedTableError(f"{path}: tables with drop.partition.columns=true are not supported")
        if self.base_file_format != "PARQUET":
            raise UnsupportedTableError(
                f"{path}: base file format {self.base_file_format} is not supported (only PARQUET)"
            )

    def validate_writable(self, path: str) -> None:
        self.validate_readable(path)
        if self.version not in WRITABLE_VERSIONS:
            raise UnsupportedTableError(
                f"{path}: writing table version {self.version} is not supported (hudilite writes 6, 8, 9)"
            )

    # ---- (de)serialisation ---------------------------------------------------------------
    @classmethod
    def parse(cls, text: str, path: str = "") -> "TableConfig":
        try:
            props = parse_properties(text)
        except CorruptTableError as e:
            raise CorruptTableError(f"{path}: {e}") from None
        for key in (o.T_NAME.key, o.T_TYPE.key, o.T_VERSION.key):
            if key not in props:
                raise CorruptTableError(f"{path}: hoodie.properties is damaged: required key {key} is missing")
        try:
            int(props[o.T_VERSION.key])
        except ValueError:
            raise CorruptTableError(
                f"{path}: hoodie.properties is damaged: {o.T_VERSION.key}={props[o.T_VERSION.key]!r}"
            ) from None
        _check_checksum(props, path)
        return cls(props)

    def serialize(self) -> str:
        props = dict(self.props)
        db = props.get(o.T_DATABASE.key, "default")
        props[o.T_CHECKSUM.key] = str(table_checksum(db, props[o.T_NAME.key]))
        lines = ["#Properties saved on hudilite", "#Updated by hudilite"]
        for k in sorted(props):
            lines.append(f"{k}={_escape(props[k])}")
        return "\n".join(lines) + "\n"

    @classmethod
    def new(
        cls,
        *,
        name: str,
        table_type: str,
        record_key_fields: list[str],
        precombine_field: str | None,
        partition_fields: list[str],
        hive_style: bool,
        create_schema: str | None,
        extra: dict[str, str] | None = None,
        version: int = WRITE_TABLE_VERSION,
    ) -> "TableConfig":
        if len(record_key_fields) > 1:
            keygen = KEYGEN_COMPLEX
        elif not partition_fields:
            keygen = KEYGEN_NONPARTITIONED
        elif len(partition_fields) > 1:
            keygen = KEYGEN_COMPLEX
        else:
            keygen = KEYGEN_SIMPLE
        if not partition_fields and len(record_key_fields) > 1:
            keygen = KEYGEN_COMPLEX  # Java's complex keygen with empty partition fields: not partitioned
        props = {
            o.T_NAME.key: name,
            o.T_TYPE.key: table_type,
            o.T_VERSION.key: "6",  # the version-6 set; v8_properties rewrites it for 8 and 9
            o.T_LAYOUT_VERSION.key: "1",
            o.T_RECORD_KEYS.key: ",".join(record_key_fields),
            o.T_PARTITIONS.key: ",".join(partition_fields),
            o.T_KEYGEN_CLASS.key: keygen,
            o.T_HIVE_STYLE.key: "true" if hive_style else "false",
            o.T_URL_ENCODE.key: "false",
            o.T_KEYGEN_UTC.key: "true",
            o.T_DROP_PARTITION_COLUMNS.key: "false",
            o.T_META_FIELDS.key: "true",
            o.T_BASE_FORMAT.key: "PARQUET",
            o.T_LOG_FORMAT.key: "HOODIE_LOG",
            o.T_TIMEZONE.key: "UTC",
            o.T_ARCHIVE_FOLDER.key: "archived",
            o.T_DATABASE.key: "default",
            o.T_METADATA_PARTITIONS.key: "",
            o.T_PAYLOAD.key: EVENT_TIME_PAYLOAD,
            o.T_MERGER_STRATEGY.key: EVENT_TIME_STRATEGY,
            TABLE_ID_KEY: new_table_id(),
        }
        if precombine_field:
            props[o.T_PRECOMBINE.key] = precombine_field
        else:
            props[o.T_PAYLOAD.key] = COMMIT_TIME_PAYLOAD
            props[o.T_MERGER_STRATEGY.key] = COMMIT_TIME_STRATEGY
        if version != 6:
            props = v8_properties(props, version)
        if create_schema:
            props[o.T_CREATE_SCHEMA.key] = create_schema
        props.update(extra or {})
        return cls(props)



def v8_properties(v6: dict[str, str], version: int) -> dict[str, str]:
    """The hoodie.properties of a new version-8/9 table from the version-6 set, keyed as Apache Hudi 1.x writes
    them (compared with tables Java wrote): timeline layout 2 under `.hoodie/timeline` with its `history`,
    the key generator as a type, the merge mode spelled out; version 8 keeps the payload class, merge strategy
    id and precombine field, version 9 names ordering fields and no payload or strategy (both follow from the
    merge mode)."""
    if version not in (8, 9):
        raise ValueError(f"table version {version}: hudilite writes 6, 8 or 9")
    props = dict(v6)
    event_time = o.T_PRECOMBINE.key in props
    props[o.T_VERSION.key] = str(version)
    props[o.T_INITIAL_VERSION.key] = str(version)
    props[o.T_LAYOUT_VERSION.key] = "2"
    props[o.T_TIMELINE_PATH.key] = "timeline"
    props[o.T_HISTORY_PATH.key] = "history"
    props[o.T_KEYGEN_TYPE.key] = KEYGEN_TYPES[props.pop(o.T_KEYGEN_CLASS.key)]
    props[o.T_MERGE_MODE.key] = "EVENT_TIME_ORDERING" if event_time else "COMMIT_TIME_ORDERING"
    strategy = props.pop(o.T_MERGER_STRATEGY.key)
    if version == 8:
        props[o.T_MERGE_STRATEGY.key] = strategy
    else:
        props.pop(o.T_PAYLOAD.key)
        props[o.T_TABLE_FORMAT.key] = "native"
        props[o.T_ARCHIVE_FOLDER.key] = "history"  # as Apache Hudi 1.2 records it (the LSM history's folder)
        if event_time:
            props[o.T_ORDERING.key] = props.pop(o.T_PRECOMBINE.key)
    return props
