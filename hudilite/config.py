"""Table configuration: `.hoodie/hoodie.properties` (read versions 6, 8, 9; write version 6)."""

from __future__ import annotations

import uuid
import zlib
from dataclasses import dataclass, field

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

WRITE_TABLE_VERSION = 6
READABLE_VERSIONS = {6: 1, 8: 2, 9: 2}  # table version -> required timeline layout version


# The table's identity: `<creation time (17-digit UTC ms)>-<uuid4 hex>`, written once when the table is created.
# Apache Hudi has no table id (`hoodie.table.checksum` is a crc of database and name, equal for a table rebuilt
# under the same name), so this is a hudilite key; Java and hudi-rs ignore keys they do not know. It moves
# with the directory and differs for a table rebuilt or recreated at the same path, so checkpoints that
# record it can tell "the table I consumed" from "a new table at that path".
TABLE_ID_KEY = "hudilite.table.id"


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
    given = props.get("hoodie.table.checksum")
    if given is None:
        return
    name, db = props["hoodie.table.name"], props.get("hoodie.database.name")
    sums = {table_checksum(d, name) for d in ([db] if db is not None else ["", "default"])}
    if not given.strip().isdigit() or int(given) not in sums:
        raise CorruptTableError(
            f"{path}: hoodie.properties is damaged: hoodie.table.checksum={given!r} does not match "
            f"hoodie.table.name={name!r} (expected {min(sums)})")


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
        return self.props.get("hoodie.table.name", "")

    @property
    def table_type(self) -> str:
        t = self.props.get("hoodie.table.type", COPY_ON_WRITE).upper()
        return {"COW": COPY_ON_WRITE, "MOR": MERGE_ON_READ}.get(t, t)

    @property
    def version(self) -> int:
        return int(self.props.get("hoodie.table.version", "0"))

    @property
    def layout_version(self) -> int:
        return int(self.props.get("hoodie.timeline.layout.version", "0"))

    @property
    def timeline_path(self) -> str:
        return "" if self.layout_version < 2 else self.props.get("hoodie.timeline.path", "timeline")

    @property
    def record_key_fields(self) -> list[str]:
        return _split(self.props.get("hoodie.table.recordkey.fields", ""))

    @property
    def precombine_field(self) -> str | None:
        v = self.props.get("hoodie.table.ordering.fields") or self.props.get("hoodie.table.precombine.field")
        return v or None

    @property
    def partition_fields(self) -> list[str]:
        return _split(self.props.get("hoodie.table.partition.fields", ""))

    @property
    def keygen(self) -> str:
        return self.props.get("hoodie.table.keygenerator.class") or self.props.get(
            "hoodie.table.keygenerator.type", ""
        )

    @property
    def is_partitioned(self) -> bool:
        kg = self.keygen.upper()
        return bool(self.partition_fields) and "NONPARTITIONED" not in kg and kg != "NON_PARTITION"

    @property
    def hive_style(self) -> bool:
        return self.props.get("hoodie.datasource.write.hive_style_partitioning", "false").lower() == "true"

    @property
    def url_encode(self) -> bool:
        return self.props.get("hoodie.datasource.write.partitionpath.urlencode", "false").lower() == "true"

    @property
    def base_file_format(self) -> str:
        return self.props.get("hoodie.table.base.file.format", "PARQUET").upper()

    @property
    def populate_meta_fields(self) -> bool:
        return self.props.get("hoodie.populate.meta.fields", "true").lower() == "true"

    @property
    def table_id(self) -> str | None:
        """hudilite's table identity (TABLE_ID_KEY); None for tables created by other engines or by hudilite
        before identities existed."""
        return self.props.get(TABLE_ID_KEY) or None

    @property
    def create_schema(self) -> str | None:
        s = self.props.get("hoodie.table.create.schema")
        return unescape(s) if s else None

    @property
    def merge_mode(self) -> str:
        """EVENT_TIME_ORDERING or COMMIT_TIME_ORDERING, inferred as Java/hudi-rs do."""
        mode = self.props.get("hoodie.record.merge.mode")
        if mode:
            return mode.upper()
        strategy = self.props.get("hoodie.record.merge.strategy.id") or self.props.get(
            "hoodie.compaction.record.merger.strategy"
        )
        payload = self.props.get("hoodie.compaction.payload.class", "")
        if self.version >= 8 and strategy:
            return "COMMIT_TIME_ORDERING" if strategy == COMMIT_TIME_STRATEGY else "EVENT_TIME_ORDERING"
        if payload.endswith("OverwriteWithLatestAvroPayload"):
            return "COMMIT_TIME_ORDERING"
        if payload:
            return "EVENT_TIME_ORDERING"
        return "EVENT_TIME_ORDERING" if self.precombine_field else "COMMIT_TIME_ORDERING"

    def validate_readable(self, path: str) -> None:
        if not self.name:
            raise CorruptTableError(f"{path}: hoodie.properties has no hoodie.table.name")
        if self.table_type not in (COPY_ON_WRITE, MERGE_ON_READ):
            raise CorruptTableError(f"{path}: unknown hoodie.table.type {self.table_type!r}")
        if self.version not in READABLE_VERSIONS:
            raise UnsupportedTableError(
                f"{path}: table version {self.version} is not supported (readable: 6, 8, 9)"
            )
        if "hoodie.timeline.layout.version" not in self.props:
            raise CorruptTableError(f"{path}: hoodie.properties lacks hoodie.timeline.layout.version")
        if self.layout_version != READABLE_VERSIONS[self.version]:
            raise CorruptTableError(
                f"{path}: table version {self.version} needs timeline layout "
                f"{READABLE_VERSIONS[self.version]}, found {self.layout_version}"
            )
        if self.props.get("hoodie.datasource.write.drop.partition.columns", "false").lower() == "true":
            raise UnsupportedTableError(f"{path}: tables with drop.partition.columns=true are not supported")
        if self.base_file_format != "PARQUET":
            raise UnsupportedTableError(
                f"{path}: base file format {self.base_file_format} is not supported (only PARQUET)"
            )

    def validate_writable(self, path: str) -> None:
        self.validate_readable(path)
        if self.version != WRITE_TABLE_VERSION:
            raise UnsupportedTableError(
                f"{path}: writing table version {self.version} is not supported (hudilite writes version 6)"
            )

    # ---- (de)serialisation ---------------------------------------------------------------
    @classmethod
    def parse(cls, text: str, path: str = "") -> "TableConfig":
        try:
            props = parse_properties(text)
        except CorruptTableError as e:
            raise CorruptTableError(f"{path}: {e}") from None
        for key in ("hoodie.table.name", "hoodie.table.type", "hoodie.table.version"):
            if key not in props:
                raise CorruptTableError(f"{path}: hoodie.properties is damaged: required key {key} is missing")
        try:
            int(props["hoodie.table.version"])
        except ValueError:
            raise CorruptTableError(
                f"{path}: hoodie.properties is damaged: hoodie.table.version={props['hoodie.table.version']!r}"
            ) from None
        _check_checksum(props, path)
        return cls(props)

    def serialize(self) -> str:
        props = dict(self.props)
        db = props.get("hoodie.database.name", "default")
        props["hoodie.table.checksum"] = str(table_checksum(db, props["hoodie.table.name"]))
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
            "hoodie.table.name": name,
            "hoodie.table.type": table_type,
            "hoodie.table.version": str(WRITE_TABLE_VERSION),
            "hoodie.timeline.layout.version": "1",
            "hoodie.table.recordkey.fields": ",".join(record_key_fields),
            "hoodie.table.partition.fields": ",".join(partition_fields),
            "hoodie.table.keygenerator.class": keygen,
            "hoodie.datasource.write.hive_style_partitioning": "true" if hive_style else "false",
            "hoodie.datasource.write.partitionpath.urlencode": "false",
            "hoodie.datasource.write.drop.partition.columns": "false",
            "hoodie.populate.meta.fields": "true",
            "hoodie.table.base.file.format": "PARQUET",
            "hoodie.table.log.file.format": "HOODIE_LOG",
            "hoodie.table.timeline.timezone": "UTC",
            "hoodie.archivelog.folder": "archived",
            "hoodie.database.name": "default",
            "hoodie.table.metadata.partitions": "",
            "hoodie.compaction.payload.class": EVENT_TIME_PAYLOAD,
            "hoodie.compaction.record.merger.strategy": EVENT_TIME_STRATEGY,
            TABLE_ID_KEY: new_table_id(),
        }
        if precombine_field:
            props["hoodie.table.precombine.field"] = precombine_field
        else:
            props["hoodie.compaction.payload.class"] = COMMIT_TIME_PAYLOAD
            props["hoodie.compaction.record.merger.strategy"] = COMMIT_TIME_STRATEGY
        if create_schema:
            props["hoodie.table.create.schema"] = create_schema
        props.update(extra or {})
        return cls(props)


def _split(v: str) -> list[str]:
    return [s.strip() for s in v.split(",") if s.strip()]
