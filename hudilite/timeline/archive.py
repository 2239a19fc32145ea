"""The archived timeline of table version 6 (timeline layout 1): `.hoodie/archived/`.

Layout (as Apache Hudi 0.14/0.15 writes it): Hudi log files named `.commits_.archive.<N>_<writeToken>` (file id
`commits`, empty base instant, extension `archive`), made of `#HUDI#` AVRO_DATA blocks whose SCHEMA header is
`HoodieArchivedMetaEntry`; one record per archived instant *file* (requested / inflight / completed) with
`commitTime`, `actionType`, `actionState` and the instant's metadata in the field for its kind
(`hoodieCommitMetadata`, `hoodieReplaceCommitMetadata`, `hoodieCleanMetadata`, `hoodieRollbackMetadata`,
`hoodieCompactionPlan`, `hoodieCleanerPlan`, `hoodieRequestedReplaceMetadata`). hudi-rs never reads the archive;
hudilite reads it so that log-block and file validity is judged against the whole timeline (`Timeline.committed_times`).

Reading is tolerant: damaged byte ranges are skipped (the log reader's corrupt-block handling), records whose
schema cannot be decoded are skipped with a warning, and an instant that is both archived and still on the
active timeline (an archival killed before it removed the active files) counts once.
"""

from __future__ import annotations

import json
import logging
import os
import re
from dataclasses import dataclass, field
from functools import cached_property

from hudilite.log.blocks import AvroDataBlock, LogBlock, decode_avro_rows, encode_avro_rows
from hudilite.log.format import BlockType, HeaderKey
from hudilite.log.reader import scan_log_file
from hudilite.log.writer import append_blocks, create_log_file
from hudilite.storage.local import storage_for
from hudilite.timeline.avro_models import ARCHIVED_META_ENTRY, parsed
from hudilite.timeline.instant import COMPLETED, COMPLETION_KEY, INFLIGHT, REQUESTED, WRITE_ACTIONS, Instant

log = logging.getLogger(__name__)

ARCHIVE_FILE_ID = "commits"
ARCHIVE_EXT = "archive"
_NAME_RE = re.compile(r"^\.commits_\.archive\.(\d+)_(.+)$")
ARCHIVE_WRITE_TOKEN = "1-0-1"
MAX_ARCHIVE_FILE_BYTES = 128 * 1024 * 1024
SERVICE_OPERATIONS = ("COMPACT", "CLUSTER", "LOG_COMPACT")  # commit operation types that keep every row as is


def is_service_commit(metadata: dict | None) -> bool:
    """Whether commit metadata is a table service's (compaction, clustering): it rewrites files, not rows."""
    return str((metadata or {}).get("operationType") or "").upper() in SERVICE_OPERATIONS


def archive_dir(meta_dir: str, folder: str = "archived") -> str:
    return os.path.join(meta_dir, folder or "archived")


def archive_file_name(version: int, token: str = ARCHIVE_WRITE_TOKEN) -> str:
    return f".{ARCHIVE_FILE_ID}_.{ARCHIVE_EXT}.{version}_{token}"


def list_archive_files(directory: str) -> list[tuple[int, str]]:
    """(version, path) of the archive files, oldest first."""
    try:
        names = storage_for(directory).list_entries(directory)[1]
    except (FileNotFoundError, NotADirectoryError):
        return []
    out = []
    for n in names:
        m = _NAME_RE.match(n)
        if m:
            out.append((int(m.group(1)), os.path.join(directory, n)))
    return sorted(out)


@dataclass
class ArchivedEntry:
    timestamp: str
    action: str
    state: str
    metadata: dict | None = None
    completion: str = ""  # recorded by the v8/9 LSM history; the v6 archive has none


@dataclass
class ArchivedTimeline:
    """Instants moved out of the active timeline."""

    entries: list = field(default_factory=list)  # ArchivedEntry, in archive order

    @cached_property
    def instants(self) -> list[Instant]:
        """One Instant per archived instant time (its most advanced state)."""
        best: dict[str, ArchivedEntry] = {}
        order = {REQUESTED: 0, INFLIGHT: 1, COMPLETED: 2}
        for e in self.entries:
            cur = best.get(e.timestamp)
            if cur is None or order.get(e.state, 2) >= order.get(cur.state, 2):
                best[e.timestamp] = e
        out = []
        for t, e in best.items():
            action = e.action
            if e.state == COMPLETED and action == "compaction":
                action = "commit"
            out.append(Instant(t, action, e.state if e.state in order else COMPLETED))
        return sorted(out, key=Instant.sort_key)

    @cached_property
    def completed_write_times(self) -> frozenset:
        return frozenset(i.timestamp for i in self.instants if i.is_completed and i.action in WRITE_ACTIONS)

    @cached_property
    def all_times(self) -> frozenset:
        return frozenset(e.timestamp for e in self.entries)

    @cached_property
    def completion_times(self) -> dict:
        """Completed write instant -> its completion time: hudilite's `hudilite.completion.time` from the
        archived commit metadata, else the instant time (no completion order recorded)."""
        out = {t: t for t in self.completed_write_times}
        for e in self.entries:
            if e.state == COMPLETED and e.timestamp in out:
                c = e.completion or ((e.metadata or {}).get("extraMetadata") or {}).get(COMPLETION_KEY)
                if c:
                    out[e.timestamp] = c
        return out

    @cached_property
    def _completed_metadata(self) -> dict:
        return {e.timestamp: e.metadata or {} for e in self.entries if e.state == COMPLETED}

    @cached_property
    def _completions(self) -> dict:
        return {e.timestamp: e.completion for e in self.entries if e.state == COMPLETED and e.completion}

    def completed_metadata(self, timestamp: str) -> dict | None:
        """The metadata archived with the completed instant `timestamp`; None when absent or undecodable."""
        return self._raw_metadata.get(timestamp)

    @cached_property
    def _raw_metadata(self) -> dict:
        return {e.timestamp: e.metadata for e in self.entries if e.state == COMPLETED}

    def metadata(self, instant: Instant) -> dict:
        """The commit metadata archived with a completed instant ({} if none was archived)."""
        return self._completed_metadata.get(instant.timestamp, {}) if instant.is_completed else {}

    def completion_time(self, instant: Instant) -> str:
        """As Timeline.completion_time, from the archived metadata: hudilite's completion time, else the
        instant time (no completion order recorded); '' for an instant archived before it completed."""
        if not instant.is_completed:
            return ""
        c = self._completions.get(instant.timestamp)
        if c:
            return c
        return ((self.metadata(instant).get("extraMetadata") or {}).get(COMPLETION_KEY) or instant.timestamp)

    @cached_property
    def service_times(self) -> frozenset:
        """Archived compaction and clustering commits: they rewrite files, not rows (change ranges need no
        detail of them)."""
        return frozenset(e.timestamp for e in self.entries if e.state == COMPLETED and is_service_commit(e.metadata))

    @cached_property
    def first_time(self) -> str | None:
        return min((e.timestamp for e in self.entries), default=None)

    def __bool__(self) -> bool:
        return bool(self.entries)


def load_archive(directory: str) -> ArchivedTimeline:
    import fastavro

    entries: list[ArchivedEntry] = []
    parsed_cache: dict[str, dict] = {}
    for _version, path in list_archive_files(directory):
        try:
            items = scan_log_file(path)
        except OSError as e:
            log.warning("cannot read archive file %s: %s", path, e)
            continue
        for b in items:
            if not isinstance(b, AvroDataBlock) or not b.schema:
                continue
            try:
                parsed = parsed_cache.get(b.schema)
                if parsed is None:
                    parsed = fastavro.parse_schema(json.loads(b.schema), named_schemas={})
                    parsed_cache[b.schema] = parsed
                rows = decode_avro_rows(b.content, parsed)
            except Exception as e:  # noqa: BLE001 - a damaged block is skipped, the rest still counts
                log.warning("skipping an undecodable archive block in %s at %s: %s", path, b.offset, e)
                continue
            for r in rows:
                t = r.get("commitTime")
                action = r.get("actionType")
                if not t or not action:
                    continue
                state = (r.get("actionState") or COMPLETED).upper()
                md = None
                for k in ("hoodieCommitMetadata", "hoodieReplaceCommitMetadata", "hoodieCleanMetadata",
                          "hoodieCompactionPlan", "hoodieCleanerPlan", "hoodieRequestedReplaceMetadata",
                          "hoodieRollbackMetadata"):
                    if r.get(k) is not None:
                        md = r[k]
                        break
                entries.append(ArchivedEntry(t, action, state, md))
    return ArchivedTimeline(entries)


def append_archive_records(directory: str, records: list[dict], *, max_file_bytes: int = MAX_ARCHIVE_FILE_BYTES
                           ) -> str:
    """Append one AVRO_DATA block of HoodieArchivedMetaEntry records to the current archive file (a new
    version once the current one is over `max_file_bytes`, or always on a storage that cannot append). Returns
    the file written."""
    import struct

    fs = storage_for(directory)
    fs.makedirs(directory)
    files = list_archive_files(directory)
    # where the storage cannot append (object stores), every archival starts a new version (Hudi's log writer
    # rolls over there too); readers read every version
    if files and fs.supports_append and fs.size(files[-1][1]) < max_file_bytes:
        path, new = files[-1][1], False
    else:
        path, new = os.path.join(directory, archive_file_name((files[-1][0] + 1) if files else 1)), True
    schema_json = json.dumps(ARCHIVED_META_ENTRY)
    content = encode_avro_rows(records, parsed(ARCHIVED_META_ENTRY))
    assert struct.unpack(">i", content[4:8])[0] == len(records)
    block = LogBlock(BlockType.AVRO_DATA, {HeaderKey.SCHEMA: schema_json}, content)
    (create_log_file if new else append_blocks)(path, [block])
    return path
