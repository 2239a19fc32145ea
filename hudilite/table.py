"""A Hudi table on storage: its config, timeline, file system view, and table-level files."""

from __future__ import annotations

import os

from hudilite import options as o
from hudilite.config import TableConfig
from hudilite.errors import CorruptTableError, TableNotFoundError
from hudilite.fs_view import PARTITION_METAFILE, FileSystemView, list_partitions, partitions_in_listing
from hudilite.replace import recover
from hudilite.schema import SchemaError, avro_to_arrow, check_key_types, evolve
from hudilite.storage import storage_for
from hudilite.storage.paths import is_local, normalize_path, relative_to
from hudilite.timeline import Timeline
from hudilite.timeline.archive import is_service_commit
from hudilite.timeline.instant import parse_instant_file

META_DIR = ".hoodie"
PROPS_FILE = "hoodie.properties"


class HoodieTable:
    def __init__(self, base_path: str, config: TableConfig):
        self.base_path = base_path
        self.config = config
        self.fs = storage_for(base_path)
        self._timeline: Timeline | None = None

    # ---- opening / creating --------------------------------------------------------------
    @staticmethod
    def exists(path: str) -> bool:
        """A table is here: hoodie.properties, or (damaged: `open` raises) a timeline without it."""
        base = normalize_path(path)
        recover(base)  # a rebuild that swapped directories and crashed halfway is completed first
        fs = storage_for(base)
        props = os.path.join(base, META_DIR, PROPS_FILE)
        return (fs.exists(props) and not fs.isdir(props)) or _has_timeline(base)

    @classmethod
    def open(cls, path: str) -> "HoodieTable":
        base = normalize_path(path)
        recover(base)  # a rebuild that swapped directories and crashed halfway is completed first
        props_path = os.path.join(base, META_DIR, PROPS_FILE)
        fs = storage_for(base)
        if not fs.exists(props_path) or fs.isdir(props_path):
            if not fs.exists(base):
                raise TableNotFoundError(f"no table at {base}: the path does not exist")
            if _has_timeline(base):
                raise CorruptTableError(f"{base}: {META_DIR}/{PROPS_FILE} is missing, but {META_DIR} holds a "
                                        "timeline: the table is damaged")
            raise TableNotFoundError(f"no Hudi table at {base}: {META_DIR}/{PROPS_FILE} is missing")
        try:
            text = fs.read_bytes(props_path).decode("utf-8")
        except UnicodeDecodeError as e:
            raise CorruptTableError(f"{base}: hoodie.properties is damaged (not UTF-8: {e})") from None
        config = TableConfig.parse(text, base)
        config.validate_readable(base)
        return cls(base, config)

    @classmethod
    def create(cls, path: str, config: TableConfig) -> "HoodieTable":
        base = normalize_path(path)
        fs = storage_for(base)
        meta = os.path.join(base, META_DIR)
        # layout 2 (versions 8/9): the timeline and its history live under .hoodie/timeline, as Java lays them out
        history = os.path.join(meta, config.timeline_path, o.T_HISTORY_PATH.get(config.props)) \
            if config.layout_version >= 2 else os.path.join(meta, "archived")
        for d in (meta, history, os.path.join(meta, ".temp"), os.path.join(meta, ".aux")):
            fs.makedirs(d)
        props = os.path.join(meta, PROPS_FILE)
        try:
            created = fs.put_if_absent(props, config.serialize().encode("utf-8"))
        except FileNotFoundError:  # our temp file went: removed by the creator that won (below)
            if not fs.exists(props):
                raise
            created = False
        if not created:
            return cls.open(base)  # another writer created it first
        # temp files of creators killed before they linked theirs (left forever otherwise); a creator racing
        # this one has lost already and only loses by another error
        fs.delete_stale_temps(props)
        return cls(base, config)

    def stored_version(self) -> int:
        """The table version hoodie.properties holds now (an upgrade may have changed it since `open`)."""
        path = os.path.join(self.meta_path, PROPS_FILE)
        return TableConfig.parse(self.fs.read_bytes(path).decode("utf-8"), self.base_path).version

    # ---- paths ---------------------------------------------------------------------------
    @property
    def meta_path(self) -> str:
        return os.path.join(self.base_path, META_DIR)

    @property
    def temp_path(self) -> str:
        return os.path.join(self.meta_path, ".temp")

    def partition_dir(self, partition: str) -> str:
        return os.path.join(self.base_path, partition) if partition else self.base_path

    # ---- timeline & view -----------------------------------------------------------------
    @property
    def timeline(self) -> Timeline:
        if self._timeline is None:
            self._timeline = Timeline.load(self.base_path, self.config.layout_version, self.config.timeline_path)
        return self._timeline

    def reload(self) -> Timeline:
        self._timeline = None
        return self.timeline

    def view(self, listing: dict[str, list] | None = None) -> FileSystemView:
        return FileSystemView(self.base_path, self.timeline, listing)

    def listing(self) -> tuple[list[str], dict[str, list] | None]:
        """(partitions, listing for a FileSystemView) of a look at the whole table: on object stores from one
        recursive listing of the table (a LIST per 1000 objects, not per partition); elsewhere the partitions
        and None (directories are listed as they are needed)."""
        listing = self.fs.list_tree(self.base_path)
        if listing is None:
            return self.partitions(), None
        return partitions_in_listing(listing, self.config.is_partitioned), listing

    def listed_view(self) -> tuple[list[str], FileSystemView]:
        """(partitions, view) of the whole table, from `listing()`."""
        partitions, listing = self.listing()
        return partitions, self.view(listing)

    def partitions(self) -> list[str]:
        return list_partitions(self.base_path, self.config.is_partitioned)

    def accepts(self, table_type: str, record_key, partition_by, precombine_field, columns, schema) -> bool:
        """Whether a write of this layout can be a commit on this table rather than a rebuild of it (see
        hudilite.replace): same table type, record key, partitioning and precombine field (a stored one among
        the incoming `columns`), and `schema` (Arrow) a permitted evolution of the
        stored schema."""
        cfg = self.config
        if cfg.table_type != table_type:
            return False
        if list(cfg.record_key_fields) != list(record_key):
            return False
        stored_parts = list(cfg.partition_fields) if cfg.is_partitioned else []
        if stored_parts != list(partition_by):
            return False
        if cfg.precombine_field:
            if precombine_field and precombine_field != cfg.precombine_field:
                return False
            if cfg.precombine_field not in columns:
                return False
        elif precombine_field:
            return False
        try:
            stored = self.timeline.schema_json() or cfg.create_schema
            if stored:
                table_arrow = avro_to_arrow(stored)
                check_key_types(table_arrow, evolve(table_arrow, schema), record_key, partition_by)
        except (SchemaError, ValueError):
            return False
        return True

    def snapshot_stats(self) -> dict:
        """{'rows', 'bytes', 'files'} of the latest snapshot without reading data: a base file's row count is
        the `numWrites` its commit recorded for it, else its parquet footer (a commit archived or unreadable).
        'rows' is None when a file slice has log files: a merge-on-read slice's rows are known only by merging."""
        tl = self.timeline
        partitions, view = self.listed_view()
        slices = view.latest_slices(partitions)
        rows: int | None = 0
        size = files = 0
        recorded: dict[str, dict] = {}  # base instant -> {relative file path: numWrites}
        for s in slices:
            if s.log_files:
                rows = None
            b = s.base_file
            if b is None:
                continue
            files += 1
            size += b.size
            if rows is None:
                continue
            if b.instant not in recorded:
                recorded[b.instant] = _recorded_rows(tl, b.instant)
            rel = relative_to(b.path, self.base_path)
            n = recorded[b.instant].get(rel)
            rows += n if n is not None else self.fs.parquet_metadata(b.path).num_rows
        return {"rows": rows, "bytes": size, "files": files}

    def last_write_records(self) -> int | None:
        """The records the newest completed write took, from its commit metadata: inserted, updated and deleted,
        and the late ones its rewritten file slices counted as ignored (a file group the write left as it was
        records none). Table services (compaction, clustering) are not writes. None: no write on the active
        timeline, or its metadata cannot be read."""
        tl = self.timeline
        for inst in reversed(tl.completed()):
            try:
                md = tl.read_metadata(inst)
            except Exception:  # noqa: BLE001 - unknown is an answer here: the caller decides without it
                return None
            if is_service_commit(md):
                continue
            return sum(int(st.get(k) or 0) for sts in (md.get("partitionToWriteStats") or {}).values()
                       for st in sts or () for k in ("numInserts", "numUpdateWrites", "numDeletes", "numIgnored"))
        return None

    # ---- partition metadata ----------------------------------------------------------------
    def ensure_partition_metadata(self, partition: str, instant: str) -> None:
        d = self.partition_dir(partition)
        self.fs.makedirs(d)
        path = os.path.join(d, PARTITION_METAFILE)
        # object stores: the conditional put alone (1 request) instead of HEAD + LIST (a missing key is looked
        # up as a prefix too) + put; locally the check is cheaper than put_if_absent's temp file and link
        if is_local(d) and self.fs.exists(path):
            return
        depth = len(partition.split("/")) if partition else 0
        body = f"#partition metadata\ncommitTime={instant}\npartitionDepth={depth}\n"
        self.fs.put_if_absent(path, body.encode("utf-8"))

    def write_properties(self) -> None:
        self.fs.write_bytes(os.path.join(self.meta_path, PROPS_FILE), self.config.serialize().encode("utf-8"))


def _recorded_rows(tl: Timeline, ts: str) -> dict:
    inst = tl.get(ts)
    if inst is None or not inst.is_completed:
        return {}
    try:
        md = tl.read_metadata(inst)
    except Exception:  # noqa: BLE001 - unreadable metadata: the footers say it
        return {}
    return {st["path"]: int(st["numWrites"]) for sts in (md.get("partitionToWriteStats") or {}).values()
            for st in sts or () if st.get("path") and st.get("numWrites") is not None}


def _has_timeline(base: str) -> bool:
    """Whether `.hoodie` (or `.hoodie/timeline`) holds instant files."""
    meta = os.path.join(base, META_DIR)
    fs = storage_for(base)
    for d in (meta, os.path.join(meta, "timeline")):
        try:
            names = fs.list_entries(d)[1]
        except (FileNotFoundError, NotADirectoryError):
            continue
        if any(parse_instant_file(n, 1) or parse_instant_file(n, 2) for n in names):
            return True
    return False
