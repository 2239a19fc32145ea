"""Avro models of Apache Hudi's table-service metadata (org.apache.hudi.avro.model), as Java writes them.

Field names, order, types and defaults follow Hudi's `.avsc` definitions (checked against the plans in the
real tables of `../shared/hudi-tables/`), so Java reads what hudilite writes by schema resolution:
- `HoodieCompactionPlan` (`<t>.compaction.requested`),
- `HoodieRequestedReplaceMetadata` with a `HoodieClusteringPlan` (`<t>.replacecommit.requested` of clustering),
- `HoodieCleanerPlan` (`<t>.clean.requested`), `HoodieCleanMetadata` (`<t>.clean`),
- `HoodieCommitMetadata` / `HoodieReplaceCommitMetadata` (the Avro form of commit metadata, used in the archive),
- `HoodieRollbackPlan` (`<t>.rollback.requested`), `HoodieRollbackMetadata` (the completed `rollback`),
- `HoodieArchivedMetaEntry` (one record per archived instant file, in `.hoodie/archived/.commits_.archive.N_*`).

Timeline files are Avro object container files with one record, codec null (as Java writes them).
"""

from __future__ import annotations

import copy
import io
import json
from typing import Any

import fastavro

NS = "org.apache.hudi.avro.model"


def _opt(t, default=None):
    return {"type": ["null", t], "default": default}


def _str_map(values="string"):
    return {"type": "map", "values": values}


COMPACTION_OPERATION = {
    "type": "record", "name": "HoodieCompactionOperation", "namespace": NS, "fields": [
        {"name": "baseInstantTime", "type": ["null", "string"]},
        {"name": "deltaFilePaths", **_opt({"type": "array", "items": "string"})},
        {"name": "dataFilePath", **_opt("string")},
        {"name": "fileId", "type": ["null", "string"]},
        {"name": "partitionPath", **_opt("string")},
        {"name": "metrics", **_opt(_str_map("double"))},
        {"name": "bootstrapFilePath", **_opt("string")},
    ]}

COMPACTION_PLAN = {
    "type": "record", "name": "HoodieCompactionPlan", "namespace": NS, "fields": [
        {"name": "operations", **_opt({"type": "array", "items": COMPACTION_OPERATION})},
        {"name": "extraMetadata", **_opt(_str_map())},
        {"name": "version", "type": ["int", "null"], "default": 1},
        {"name": "strategy", **_opt({
            "type": "record", "name": "HoodieCompactionStrategy", "namespace": NS, "fields": [
                {"name": "compactorClassName", **_opt("string")},
                {"name": "strategyParams", **_opt(_str_map())},
                {"name": "version", "type": ["int", "null"], "default": 1},
            ]})},
        {"name": "preserveHoodieMetadata", "type": ["boolean", "null"], "default": False},
        {"name": "missingSchedulePartitions", **_opt({"type": "array", "items": "string"})},
    ]}

SLICE_INFO = {
    "type": "record", "name": "HoodieSliceInfo", "namespace": NS, "fields": [
        {"name": "dataFilePath", **_opt("string")},
        {"name": "deltaFilePaths", **_opt({"type": "array", "items": "string"})},
        {"name": "fileId", "type": ["null", "string"]},
        {"name": "partitionPath", **_opt("string")},
        {"name": "bootstrapFilePath", **_opt("string")},
        {"name": "version", "type": ["int", "null"], "default": 1},
    ]}

CLUSTERING_PLAN = {
    "type": "record", "name": "HoodieClusteringPlan", "namespace": NS, "fields": [
        {"name": "inputGroups", **_opt({"type": "array", "items": {
            "type": "record", "name": "HoodieClusteringGroup", "namespace": NS, "fields": [
                {"name": "slices", **_opt({"type": "array", "items": SLICE_INFO})},
                {"name": "metrics", **_opt(_str_map("double"))},
                {"name": "numOutputFileGroups", "type": ["int", "null"], "default": 1},
                {"name": "extraMetadata", **_opt(_str_map())},
                {"name": "version", "type": ["int", "null"], "default": 1},
            ]}})},
        {"name": "strategy", **_opt({
            "type": "record", "name": "HoodieClusteringStrategy", "namespace": NS, "fields": [
                {"name": "strategyClassName", **_opt("string")},
                {"name": "strategyParams", **_opt(_str_map())},
                {"name": "version", "type": ["int", "null"], "default": 1},
            ]})},
        {"name": "extraMetadata", **_opt(_str_map())},
        {"name": "version", "type": ["int", "null"], "default": 1},
        {"name": "preserveHoodieMetadata", **_opt("boolean")},
    ]}

REQUESTED_REPLACE = {
    "type": "record", "name": "HoodieRequestedReplaceMetadata", "namespace": NS, "fields": [
        {"name": "operationType", **_opt("string")},
        {"name": "clusteringPlan", **_opt(CLUSTERING_PLAN)},
        {"name": "extraMetadata", **_opt(_str_map())},
        {"name": "version", "type": ["int", "null"], "default": 1},
    ]}

CLEANER_PLAN = {
    "type": "record", "name": "HoodieCleanerPlan", "namespace": NS, "fields": [
        {"name": "earliestInstantToRetain", **_opt({
            "type": "record", "name": "HoodieActionInstant", "namespace": NS, "fields": [
                {"name": "timestamp", "type": "string"},
                {"name": "action", "type": "string"},
                {"name": "state", "type": "string"},
            ]})},
        {"name": "policy", "type": "string"},
        {"name": "filesToBeDeletedPerPartition", **_opt(_str_map({"type": "array", "items": "string"}))},
        {"name": "version", "type": ["int", "null"], "default": 1},
        {"name": "filePathsToBeDeletedPerPartition", **_opt(_str_map({"type": "array", "items": {
            "type": "record", "name": "HoodieCleanFileInfo", "namespace": NS, "fields": [
                {"name": "filePath", **_opt("string")},
                {"name": "isBootstrapBaseFile", **_opt("boolean")},
            ]}}))},
        {"name": "partitionsToBeDeleted", **_opt({"type": "array", "items": "string"})},
    ]}

CLEAN_PARTITION_METADATA = {
    "type": "record", "name": "HoodieCleanPartitionMetadata", "namespace": NS, "fields": [
        {"name": "partitionPath", "type": "string"},
        {"name": "policy", "type": "string"},
        {"name": "deletePathPatterns", "type": {"type": "array", "items": "string"}},
        {"name": "successDeleteFiles", "type": {"type": "array", "items": "string"}},
        {"name": "failedDeleteFiles", "type": {"type": "array", "items": "string"}},
        {"name": "isPartitionDeleted", **_opt("boolean")},
    ]}

CLEAN_METADATA = {
    "type": "record", "name": "HoodieCleanMetadata", "namespace": NS, "fields": [
        {"name": "policy", "type": "string", "default": ""},
        {"name": "startCleanTime", "type": "string"},
        {"name": "timeTakenInMillis", "type": "long"},
        {"name": "totalFilesDeleted", "type": "int"},
        {"name": "earliestCommitToRetain", "type": "string"},
        {"name": "lastCompletedCommitTimestamp", "type": "string", "default": ""},
        {"name": "partitionMetadata", "type": {"type": "map", "values": CLEAN_PARTITION_METADATA}},
        {"name": "version", "type": ["int", "null"], "default": 1},
        {"name": "bootstrapPartitionMetadata", **_opt({"type": "map", "values": NS + ".HoodieCleanPartitionMetadata"})},
    ]}

INSTANT_INFO = {
    "type": "record", "name": "HoodieInstantInfo", "namespace": NS, "fields": [
        {"name": "commitTime", "type": "string"},
        {"name": "action", "type": "string"},
    ]}

_LONG_MAP = {"type": "map", "values": "long"}

ROLLBACK_PLAN = {
    "type": "record", "name": "HoodieRollbackPlan", "namespace": NS, "fields": [
        {"name": "instantToRollback", **_opt(INSTANT_INFO)},
        {"name": "RollbackRequests", **_opt({"type": "array", "items": {
            "type": "record", "name": "HoodieRollbackRequest", "namespace": NS, "fields": [
                {"name": "partitionPath", "type": "string"},
                {"name": "fileId", **_opt("string")},
                {"name": "latestBaseInstant", **_opt("string")},
                {"name": "filesToBeDeleted", "type": {"type": "array", "items": "string"}, "default": []},
                {"name": "logBlocksToBeDeleted", **_opt(_LONG_MAP)},
            ]}})},
        {"name": "version", "type": ["int", "null"], "default": 1},
    ]}

ROLLBACK_METADATA = {
    "type": "record", "name": "HoodieRollbackMetadata", "namespace": NS, "fields": [
        {"name": "startRollbackTime", "type": "string"},
        {"name": "timeTakenInMillis", "type": "long"},
        {"name": "totalFilesDeleted", "type": "int"},
        {"name": "commitsRollback", "type": {"type": "array", "items": "string"}},
        {"name": "partitionMetadata", "type": {"type": "map", "values": {
            "type": "record", "name": "HoodieRollbackPartitionMetadata", "namespace": NS, "fields": [
                {"name": "partitionPath", "type": "string"},
                {"name": "successDeleteFiles", "type": {"type": "array", "items": "string"}},
                {"name": "failedDeleteFiles", "type": {"type": "array", "items": "string"}},
                {"name": "rollbackLogFiles", **_opt(_LONG_MAP)},
                {"name": "writtenLogFiles", **_opt(_LONG_MAP)},
            ]}}},
        {"name": "version", "type": ["int", "null"], "default": 1},
        {"name": "instantsRollback", "type": {"type": "array", "items": copy.deepcopy(INSTANT_INFO)}, "default": []},
    ]}

_WRITE_STAT_LONGS = ("numWrites", "numDeletes", "numUpdateWrites", "totalWriteBytes", "totalWriteErrors")
_WRITE_STAT_LONGS2 = ("totalLogRecords", "totalLogFiles", "totalUpdatedRecordsCompacted", "numInserts",
                      "totalLogBlocks", "totalCorruptLogBlock", "totalRollbackBlocks", "fileSizeInBytes")


def _write_stat(strings: tuple[str, ...], *more: dict) -> dict[str, Any]:
    """HoodieWriteStat: the leading string fields differ by timeline layout, the counters are shared, layout 2
    appends `more`."""
    return {"type": "record", "name": "HoodieWriteStat", "namespace": NS, "fields": [
        *[{"name": n, **_opt("string")} for n in strings],
        *[{"name": n, **_opt("long")} for n in _WRITE_STAT_LONGS],
        {"name": "partitionPath", **_opt("string")},
        *[{"name": n, **_opt("long")} for n in _WRITE_STAT_LONGS2],
        *more,
    ]}


WRITE_STAT: dict[str, Any] = _write_stat(("fileId", "path", "prevCommit", "prevFilePathOverwritten"))


def _commit_metadata(name: str, replace: bool, write_stat) -> dict:
    fields = [
        {"name": "partitionToWriteStats", **_opt({"type": "map", "values": {"type": "array", "items": write_stat}})},
        {"name": "extraMetadata", **_opt(_str_map())},
        {"name": "version", "type": ["int", "null"], "default": 1},
        {"name": "operationType", **_opt("string")},
    ]
    if replace:
        fields.append({"name": "partitionToReplaceFileIds",
                       **_opt({"type": "map", "values": {"type": "array", "items": "string"}})})
        fields.append({"name": "compacted", **_opt("boolean")})
    return {"type": "record", "name": name, "namespace": NS, "fields": fields}


COMMIT_METADATA = _commit_metadata("HoodieCommitMetadata", False, WRITE_STAT)
REPLACE_COMMIT_METADATA = _commit_metadata("HoodieReplaceCommitMetadata", True, NS + ".HoodieWriteStat")

# The models Apache Hudi 1.x writes completed (and inflight) write instants with on timeline layout 2: the
# write stat carries the log-file fields and runtime stats, the commit metadata a `compacted` flag.
WRITE_STAT_V2: dict[str, Any] = _write_stat(
        ("fileId", "path", "prevCommit"),
        {"name": "logVersion", **_opt("int")},
        {"name": "logOffset", **_opt("long")},
        {"name": "baseFile", **_opt("string")},
        {"name": "logFiles", **_opt({"type": "array", "items": "string"})},
        {"name": "cdcStats", **_opt({"type": "map", "values": "long"})},
        {"name": "prevBaseFile", **_opt("string")},
        {"name": "minEventTime", **_opt("long")},
        {"name": "maxEventTime", **_opt("long")},
        {"name": "runtimeStats", **_opt({
            "type": "record", "name": "HoodieRuntimeStats", "namespace": NS, "fields": [
                {"name": n, **_opt("long")} for n in ("totalScanTime", "totalCreateTime", "totalUpsertTime")]})},
        *[{"name": n, **_opt("long")} for n in ("totalLogFilesCompacted", "totalLogReadTimeMs",
                                                 "totalLogSizeCompacted")],
        {"name": "tempPath", **_opt("string")},
        {"name": "numUpdates", **_opt("long")},
)


def _commit_metadata_v2(name: str, replace: bool) -> dict:
    fields = [
        {"name": "partitionToWriteStats",
         **_opt({"type": "map", "values": {"type": "array", "items": copy.deepcopy(WRITE_STAT_V2)}})},
        {"name": "compacted", **_opt("boolean")},
        {"name": "extraMetadata", **_opt(_str_map())},
        {"name": "version", "type": ["int", "null"], "default": 1},
        {"name": "operationType", **_opt("string")},
    ]
    if replace:
        fields.append({"name": "partitionToReplaceFileIds",
                       **_opt({"type": "map", "values": {"type": "array", "items": "string"}})})
    return {"type": "record", "name": name, "namespace": NS, "fields": fields}


COMMIT_METADATA_V2 = _commit_metadata_v2("HoodieCommitMetadata", False)
REPLACE_COMMIT_METADATA_V2 = _commit_metadata_v2("HoodieReplaceCommitMetadata", True)

ARCHIVED_META_ENTRY = {
    "type": "record", "name": "HoodieArchivedMetaEntry", "namespace": NS, "fields": [
        {"name": "hoodieCommitMetadata", **_opt(COMMIT_METADATA)},
        {"name": "hoodieCleanMetadata", **_opt(CLEAN_METADATA)},
        {"name": "commitTime", **_opt("string")},
        {"name": "actionType", **_opt("string")},
        {"name": "version", "type": ["int", "null"], "default": 1},
        {"name": "hoodieCompactionPlan", **_opt(COMPACTION_PLAN)},
        {"name": "hoodieCleanerPlan", **_opt(CLEANER_PLAN)},
        {"name": "actionState", **_opt("string")},
        {"name": "hoodieReplaceCommitMetadata", **_opt(REPLACE_COMMIT_METADATA)},
        {"name": "hoodieRequestedReplaceMetadata", **_opt(REQUESTED_REPLACE)},
        {"name": "hoodieRollbackMetadata", **_opt(ROLLBACK_METADATA)},
    ]}


_PARSED: dict[tuple[str, int], dict] = {}


def parsed(schema: dict) -> dict:
    key = (schema["name"], id(schema))  # the v6 and 1.x models share record names
    if key not in _PARSED:
        _PARSED[key] = fastavro.parse_schema(copy.deepcopy(schema), named_schemas={})
    return _PARSED[key]


def to_container(schema: dict, record: dict) -> bytes:
    """One record as an Avro object container file (codec null), as Java writes timeline files."""
    buf = io.BytesIO()
    fastavro.writer(buf, parsed(schema), [record], codec="null")
    return buf.getvalue()


def from_container(data: bytes) -> dict | None:
    """The first record of an Avro object container file (None for an empty file)."""
    if not data:
        return None
    recs = list(fastavro.reader(io.BytesIO(data)))
    return recs[0] if recs else None


# ---- JSON commit metadata -> the Avro record shape ---------------------------------------------------------
def commit_metadata_record(md: dict, replace: bool) -> dict:
    """Hudi's JSON commit metadata (hudilite or Java v6) -> a HoodieCommitMetadata / HoodieReplaceCommitMetadata
    record (the write-stat fields of the Avro model; others dropped; numbers as longs, text as strings)."""
    pts: dict[str, list[dict[str, Any]]] = {}
    for part, stats in (md.get("partitionToWriteStats") or {}).items():
        out = []
        for s in stats or []:
            stat: dict[str, Any] = {}
            for f in WRITE_STAT["fields"]:
                v = (s or {}).get(f["name"])
                if v is None:
                    stat[f["name"]] = None
                elif f["type"][1] == "long":
                    try:
                        stat[f["name"]] = int(v)
                    except (TypeError, ValueError):
                        stat[f["name"]] = None
                else:
                    stat[f["name"]] = str(v)
            out.append(stat)
        pts[str(part)] = out
    rec: dict[str, Any] = {
        "partitionToWriteStats": pts,
        "extraMetadata": {str(k): str(v) for k, v in (md.get("extraMetadata") or {}).items()},
        "version": 1,
        "operationType": md.get("operationType"),
    }
    if replace:
        rec["partitionToReplaceFileIds"] = {str(k): [str(x) for x in (v or [])]
                                            for k, v in (md.get("partitionToReplaceFileIds") or {}).items()}
        rec["compacted"] = bool(md.get("compacted", False))
    return rec


def _typed(value, avro_type):
    """A JSON commit-metadata value as the Avro field type wants it (None where it does not fit)."""
    if value is None:
        return None
    if avro_type in ("long", "int"):
        try:
            return int(value)
        except (TypeError, ValueError):
            return None
    if avro_type == "string":
        return str(value)
    if isinstance(avro_type, dict) and avro_type.get("type") == "array":
        return [str(v) for v in value] if isinstance(value, (list, tuple)) else None
    if isinstance(avro_type, dict) and avro_type.get("type") == "map":
        return {str(k): int(v) for k, v in value.items()} if isinstance(value, dict) else None
    if isinstance(avro_type, dict) and avro_type.get("type") == "record":
        if not isinstance(value, dict):
            return None
        return {f["name"]: _typed(value.get(f["name"]), f["type"][1]) for f in avro_type["fields"]}
    return value


def commit_metadata_record_v2(md: dict, replace: bool) -> dict:
    """Hudi's JSON commit metadata (as hudilite builds it) -> the HoodieCommitMetadata /
    HoodieReplaceCommitMetadata record Apache Hudi 1.x writes on timeline layout 2. Stat fields the model lacks
    are dropped (hudilite's own ones: readers do not need them)."""
    pts: dict[str, list[dict[str, Any]]] = {}
    for part, stats in (md.get("partitionToWriteStats") or {}).items():
        pts[str(part)] = [{f["name"]: _typed((s or {}).get(f["name"]), f["type"][1]) for f in WRITE_STAT_V2["fields"]}
                          for s in stats or []]
    rec: dict[str, Any] = {
        "partitionToWriteStats": pts,
        "compacted": bool(md.get("compacted", False)),
        "extraMetadata": {str(k): str(v) for k, v in (md.get("extraMetadata") or {}).items()},
        "version": 1,
        "operationType": md.get("operationType"),
    }
    if replace:
        rec["partitionToReplaceFileIds"] = {str(k): [str(x) for x in (v or [])]
                                            for k, v in (md.get("partitionToReplaceFileIds") or {}).items()}
    return rec


def commit_metadata_bytes(md: dict, replace: bool, layout: int) -> bytes:
    """The content of a write instant's file: JSON on timeline layout 1 (version 6), an Avro container of the
    1.x model on layout 2 (versions 8 and 9)."""
    if layout >= 2:
        return to_container(REPLACE_COMMIT_METADATA_V2 if replace else COMMIT_METADATA_V2,
                            commit_metadata_record_v2(md, replace))
    return json.dumps(md, indent=2).encode("utf-8")
