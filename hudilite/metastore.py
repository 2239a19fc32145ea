"""How a hudilite table appears in a Spark catalog (the metastore entry dbt's `ref()` and plain Spark SQL read).

A copy-on-write Hudi table keeps several versions of each file group side by side; a plain parquet table
over the table directory would read all of them. The latest snapshot is an explicit set of base files, and
the metastore cannot hold that set (Derby/Hive limits table, serde and view parameters to ~32 KB: a few
hundred file names), so after every commit the adapter publishes the snapshot as a directory of **hard
links** to exactly the committed base files:

    <table>/.hoodie/.aux/hudilite_catalog/<instant>/<base file>.parquet   (hard links, no data copied)

and points an EXTERNAL parquet table at it (`CREATE TABLE ... USING parquet LOCATION ...` the first time,
`ALTER TABLE ... SET LOCATION` afterwards: one metastore update, so readers switch from one committed
snapshot to the next). Readers get Spark's native parquet scan of the committed base files, from any later
dbt invocation and from plain Spark SQL on the same warehouse, without hudilite installed. Files written
by an in-flight or failed commit are never linked, so they are never visible.

The catalog schema is the model's columns, with the types of the table's latest Hudi schema (older files
with narrower types are widened by the parquet reader; while a base file holds a number type the reader does not
widen, long -> double or an integer -> float, or a float Apache Hudi promotes through its decimal form, the entry
is a data source entry, as for merge-on-read below). The five `_hoodie_*` meta columns stay in the files
(Hudi readers and `hudilite.read` see them) but not in the catalog: `select *` of a model is exactly the
model's columns, so unions, `select *` chains and column-wise comparisons never meet them. Columns the Hudi
schema keeps but the model no longer produces (`sync_all_columns`, rebuilds) and the adapter's internal
columns (`_hudilite_row_id`, `_hoodie_is_deleted`) are left out too.
The two newest snapshot directories are kept, and an older one until an hour after the next was published: a
query that listed it, or another session that resolved the table before the commit, reads on from it. Sessions
hudilite opens let a resolved table expire after a second (`spark.sql.metadataCacheTTLSeconds`), so another
session - a Connect client beside a dbt run, a notebook beside `dbtRunner` - sees a commit within a second.

A **merge-on-read** table's rows are base files merged with log files, which no directory of links can
express. Its entry is a table over the `hudilite` data source (`hudilite/reader/datasource.py`), with the
model's columns: every read plans the latest committed snapshot and merges slices with log files in the
Python workers (partition filters are pushed into planning). PySpark 4.3 passes a catalog table's options to
a Python source neither at read time nor through `SHOW TBLPROPERTIES`, only its stored schema, so the
schema carries the table path (field metadata `hudilite.path`, which the data source reads) and the entry's
properties (`hudilite.catalog`, JSON on the first field, which `describe` reads). The entry changes only
when the columns or properties do; nothing is re-pointed per commit. Reading it needs the data source
registered in the session (`hudilite.register(spark)`; every session the adapter opens does).

A table on **object storage** (`s3://`) has no hard links, and pyspark's JVM has no Hadoop file system for
`s3://` (no hadoop-aws): its entry, copy-on-write too, is the same data source entry. Spark's Hive catalog keeps a
data source table's location in its storage properties without opening it (only the schema's LOCATION is
created and checked, so the adapter puts an object-store warehouse's schemas in the local metastore
directory), and every read goes through the data source and the core's storage backend.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
import uuid
import weakref
from dataclasses import dataclass

from pyspark.errors import AnalysisException, ParseException
from pyspark.sql.types import ArrayType, MapType, StructField, StructType

from hudilite import auxfiles
from hudilite.columns import is_system_column
from hudilite.reader.planner import plan_read
from hudilite.spark.datasource import PATH_KEY, SOURCE_NAME  # PATH_KEY: field metadata naming the table path
from hudilite.spark.read import type_overrides
from hudilite.spark.results import command_result
from hudilite.spark.schema import arrow_to_spark
from hudilite.spark.session import is_connect
from hudilite.storage import is_local
from hudilite.table import HoodieTable

SNAPSHOT_DIR = auxfiles.relative(auxfiles.CATALOG)
KEEP_SNAPSHOTS = 2
# a superseded snapshot directory stays at least this long: another session that resolved the table before
# the commit reads it until its relation cache expires, and a query that listed it opens its files later
SNAPSHOT_RETAIN_S = 3600.0
PROP_PATH = "hudilite.path"
# written by earlier versions on every commit (the location's last part names the instant): unset on the
# next publish
PROP_INSTANT = "hudilite.instant"
PROP_SNAPSHOT = "hudilite.snapshot"
ENTRY_KEY = "hudilite.catalog"  # field metadata of a merge-on-read entry: its properties (JSON)


@dataclass
class CatalogEntry:
    """A catalog entry as `describe` finds it: a hudilite table's (`path` set) or any other table or view."""

    schema: str
    identifier: str
    kind: str  # TABLE | VIEW
    props: dict[str, str]
    columns: list[str]  # visible columns (meta and system columns removed)
    location: str | None = None
    merged: bool = False  # a merge-on-read entry over the hudilite data source
    fields: list | None = None  # the entry's Spark schema when `describe` analysed it (not for copy-on-write)
    types: list[tuple[str, str]] | None = None  # (column, type's simpleString) as `describe` read them
    # False when read from DESCRIBE ... AS JSON, which leaves out properties whose value is empty
    props_exact: bool = True
    # a `CREATE TABLE ... USING hudilite` table made outside the adapter (a dbt source): the table it reads.
    # Not one of the adapter's entries (`path` stays None): read as that table, never published to or dropped
    # with its data
    source_path: str | None = None

    @property
    def is_hudilite(self) -> bool:
        return PROP_PATH in self.props

    @property
    def path(self) -> str | None:
        return self.props.get(PROP_PATH)

    @property
    def table_path(self) -> str | None:
        """The hudilite table the entry reads: its own (`path`), or a data source table's."""
        return self.path or self.source_path


def qualified(schema: str, identifier: str) -> str:
    return f"{quote_ident(schema)}.{quote_ident(identifier)}"


def describe(spark, schema: str, identifier: str) -> CatalogEntry | None:
    """The catalog entry `schema.identifier`, None when there is none.

    Under Spark Connect one catalog statement, `DESCRIBE TABLE EXTENDED ... AS JSON` (the properties, the kind
    and the columns with their types), whose row comes with the reply (`command_result`: one round trip; a
    server before Spark 4.0: `SHOW TBLPROPERTIES` and the text `DESCRIBE TABLE EXTENDED`); only an entry that
    is not a copy-on-write hudilite table (merge-on-read entries keep their properties in the schema's field
    metadata; views and other tables) has its schema analysed too, and only a data source table that is not a
    merge-on-read entry has its `SHOW TBLPROPERTIES` asked.
    Only a table of the hudilite data source is a merge-on-read entry: a view or a table made from one with
    `select *` carries the same field metadata (Spark keeps a column's metadata through a projection) but
    is not the table, so its rows are not the table's rows. A data source table that is no entry (`CREATE
    TABLE ... USING hudilite LOCATION ...`, its path on every field) has that path as `source_path`.
    A classic session asks the catalog API for the kind first, then `SHOW TBLPROPERTIES` and the analysed
    schema: a missing entry must fail in the API, not in SQL - Spark logs a SQL statement that fails analysis
    at ERROR with its Java stack (SQLQueryContextLogger), on the dbt user's console for every model built the
    first time (under Connect the server's; PySpark's client logs it too, which the adapter quiets)."""
    name = qualified(schema, identifier)
    json_types, v2 = None, False
    try:  # no entry (or no schema): AnalysisException, no tableExists first
        if is_connect(spark):
            props, kind, json_types = _described_json(spark, name)
            # of_source: may be a table of the hudilite data source (a merge-on-read entry, a source table)
            if json_types is not None:  # a view or a table Spark describes (v1): neither
                types, of_source = json_types, False
                cow = PROP_PATH in props and kind == "TABLE" and all(t is not None for _, t in types)
            elif kind == "TABLE":  # a data source (v2) table: a merge-on-read entry's schema says the rest
                props, cow, v2, of_source = {}, False, True, True  # SHOW TBLPROPERTIES only when no entry's
            else:  # a server before Spark 4.0: two statements, DESCRIBE's text rows
                props = {r[0]: r[1] for r in command_rows(spark, f"SHOW TBLPROPERTIES {name}")}
                types, kind, provider = _described(command_rows(spark, f"DESCRIBE TABLE EXTENDED {name}"))
                # DESCRIBE abbreviates a struct of more than 25 fields (spark.sql.debug.maxToStringFields)
                cow = PROP_PATH in props and kind == "TABLE" and not any(" more fields>" in t for _, t in types)
                # a table Spark describes itself (v1) names its provider; a data source (v2) table's names none
                of_source = kind == "TABLE" and (provider or SOURCE_NAME).lower() == SOURCE_NAME
        else:  # in-process calls: the catalog API and the schema cost a fifth of a DESCRIBE (measured)
            t = spark.catalog.getTable(name)
            kind, cow = ("VIEW" if (t.tableType or "").upper() == "VIEW" else "TABLE"), False
            props = {r[0]: r[1] for r in command_rows(spark, f"SHOW TBLPROPERTIES {name}")}
            of_source = kind == "TABLE"  # and its provider, asked below only when its schema names a path
        fields = None if cow else spark.table(name).schema.fields
        located = _fields_path(fields) if fields is not None and of_source else None
        if located is not None and not is_connect(spark) and _classic_provider(spark, name) != SOURCE_NAME:
            located = None
        merged = merged_entry_props(fields) if located is not None else None
        # Spark shows no properties of a Python data source table (even ones set by ALTER TABLE: measured);
        # a merge-on-read entry's are in its schema
        if v2 and merged is None:
            props = {r[0]: r[1] for r in command_rows(spark, f"SHOW TBLPROPERTIES {name}")}
    except AnalysisException:
        return None
    exact = json_types is None
    if fields is None:
        return CatalogEntry(schema, identifier, kind, props, [n for n, _ in types if not is_system_column(n)],
                            types=types, props_exact=exact)
    if merged is not None:
        props = {**props, **merged}
    return CatalogEntry(schema, identifier, kind, props, [f.name for f in fields if not is_system_column(f.name)],
                        merged=merged is not None, fields=list(fields),
                        types=[(f.name, f.dataType.simpleString()) for f in fields], props_exact=exact,
                        source_path=located if merged is None else None)


# the Connect sessions whose server has no DESCRIBE ... AS JSON (Spark < 4.0); weak, so a process that opens
# many sessions does not keep one entry per session it has closed
_NO_JSON_DESCRIBE: "weakref.WeakSet" = weakref.WeakSet()


def _described_json(spark, name: str) -> tuple[dict[str, str], str, list | None]:
    """(properties, kind, [(column, type's simpleString or None)]) of the entry `name` from one `DESCRIBE
    TABLE EXTENDED ... AS JSON` (Spark 4.0+; one round trip instead of SHOW TBLPROPERTIES and DESCRIBE),
    or ({}, "", None) when the server does not know the syntax, ({}, "TABLE", None) for a data source (v2)
    table, which it does not describe. A type with no simple string here is None (the caller analyses the
    schema then). A missing entry raises AnalysisException as the statement does."""
    if spark in _NO_JSON_DESCRIBE:
        return {}, "", None
    try:
        rows = command_rows(spark, f"DESCRIBE TABLE EXTENDED {name} AS JSON")
    except ParseException:
        _NO_JSON_DESCRIBE.add(spark)
        return {}, "", None
    except AnalysisException as e:
        if e.getCondition() == "NOT_SUPPORTED_COMMAND_FOR_V2_TABLE":
            return {}, "TABLE", None
        raise
    info = json.loads(rows[0][0])
    props = {str(k): str(v) for k, v in (info.get("table_properties") or {}).items()}
    kind = "VIEW" if str(info.get("type", "")).upper() == "VIEW" else "TABLE"
    return props, kind, [(c["name"], json_type_string(c["type"])) for c in info.get("columns") or []]


_SIMPLE_TYPES = {"boolean", "tinyint", "smallint", "int", "bigint", "float", "double", "date", "binary",
                 "timestamp_ntz", "void", "variant"}


def json_type_string(t: dict) -> str | None:
    """The simpleString of a type as `DESCRIBE ... AS JSON` writes it (what PySpark's `DataType.simpleString()`
    gives for the same type), or None for a type this does not know."""
    name = t.get("name")
    if name in _SIMPLE_TYPES:
        return name
    if name == "timestamp_ltz":
        return "timestamp"
    if name == "string":
        collation = t.get("collation") or "UTF8_BINARY"
        return "string" if collation == "UTF8_BINARY" else f"string collate {collation}"
    if name == "decimal":
        return f"decimal({t['precision']},{t['scale']})"
    if name == "interval":
        start, end = t.get("start_unit"), t.get("end_unit")
        return f"interval {start}" if start == end else f"interval {start} to {end}"
    if name == "array":
        inner = json_type_string(t["element_type"])
        return None if inner is None else f"array<{inner}>"
    if name == "map":
        k, v = json_type_string(t["key_type"]), json_type_string(t["value_type"])
        return None if k is None or v is None else f"map<{k},{v}>"
    if name == "struct":
        fields = [(f["name"], json_type_string(f["type"])) for f in t.get("fields") or []]
        if any(ft is None for _, ft in fields):
            return None
        return "struct<" + ",".join(f"{n}:{ft}" for n, ft in fields) + ">"
    return None


_CHAR_TYPE = re.compile(r"\b(?:var)?char\(\d+\)")


def _described(rows) -> tuple[list[tuple[str, str]], str, str | None]:
    """(name, type) of each column, the kind (TABLE | VIEW) and the provider (None for a view) from `DESCRIBE
    TABLE EXTENDED`'s rows: the columns come first, each with a type; the first row without one ends them (a
    partitioned table's "# Partition Information" header or the blank row before "# Detailed Table
    Information"). The detailed section is one row per item; its `Type` row is VIEW, EXTERNAL or MANAGED, its
    `Provider` row the table's source. DESCRIBE names the declared `char(n)` / `varchar(n)` where the schema
    (and the simpleString compared with) has `string`."""
    types: list[tuple[str, str]] = []
    i = 0
    while i < len(rows) and rows[i][1]:
        types.append((rows[i][0], _CHAR_TYPE.sub("string", rows[i][1])))
        i += 1
    detailed, items = False, {}
    for r in rows[i:]:
        if r[0] == "# Detailed Table Information":
            detailed = True
        elif detailed and r[0] in ("Type", "Provider"):
            items.setdefault(r[0], (r[1] or "").strip())
    kind = "VIEW" if items.get("Type", "").upper() == "VIEW" else "TABLE"
    return types, kind, items.get("Provider") or None


def _classic_provider(spark, name: str) -> str | None:
    """The provider of the table `name` in a classic session, lower case (the catalog API does not say it)."""
    state = spark._jsparkSession.sessionState()
    provider = state.catalog().getTableMetadata(state.sqlParser().parseTableIdentifier(name)).provider()
    return provider.get().lower() if provider.isDefined() else None


def command_rows(spark, statement: str) -> list:
    """The rows of a SQL command: from the reply under Spark Connect (no further round trip), else collected."""
    df = spark.sql(statement)
    held = command_result(df)
    return held.rows if held is not None else df.collect()


def publish(spark, schema: str, identifier: str, path: str, visible: list[str], props: dict[str, str],
            entry: CatalogEntry | None, sql=None) -> str:
    """Point the catalog entry `schema.identifier` (now `entry`) at the latest committed snapshot of the table
    at `path`, with the columns `visible` (the table's types) and `props`. `sql` runs the DDL (default
    `spark.sql`; a caller may tag or translate its errors). Returns what was done, for logs."""
    sql = sql or spark.sql
    plan = plan_read(path)
    spark_schema = arrow_to_spark(plan.schema)
    fields = {f.name: f for f in spark_schema.fields}
    lower = {k.lower(): v for k, v in fields.items()}
    cols = []  # the model's columns only: `_hoodie_*` meta columns stay in the files, out of `select *`
    for c in visible:
        f = fields.get(c) or lower.get(c.lower())
        if f is not None and not is_system_column(f.name):
            cols.append(f)
    instant = plan.as_of or ""
    if plan.table.config.table_type == "MERGE_ON_READ":
        _publish_merged(spark, schema, identifier, path, cols, props, entry, sql)
        if is_local(path):  # the snapshot directories carried from a copy-on-write table it replaced
            prune_snapshots(path, None)
        return "(merge-on-read)"
    if not is_local(path):
        _publish_merged(spark, schema, identifier, path, cols, props, entry, sql)
        return "(object storage, read through the hudilite data source)"
    overrides = type_overrides(plan, spark_schema)
    if overrides is not None and any(overrides(f) for f in plan.base_files):
        # a base file written before a column was widened (long -> double, ...): Spark's parquet scan cannot
        # read it as the table's type, the data source can; a parquet entry again once every such file is rewritten
        _publish_merged(spark, schema, identifier, path, cols, props, entry, sql)
        prune_snapshots(path, None)
        return "(files of a narrower column type, read through the hudilite data source)"
    snap = publish_snapshot(path, instant, plan.base_files)
    # no per-commit properties: the location (`.../hudilite_catalog/<instant>`) names the snapshot and its
    # instant, so an unchanged model's properties stay as they are and only the location moves
    all_props = {**props, PROP_PATH: path}
    name = qualified(schema, identifier)
    same_schema = False
    if entry is not None and entry.is_hudilite and entry.kind == "TABLE" and not entry.merged:
        # names compare exactly: a rebuild may store a column in another letter case ('amount' for 'Amount'),
        # and SET LOCATION alone would leave the entry showing the old spelling
        current = list(_entry_types(spark, name, entry))
        same_schema = current == [(f.name, f.dataType.simpleString()) for f in cols]
    if same_schema:
        assert entry is not None
        stored = entry.props
        if not entry.props_exact and any(v == "" and k not in stored for k, v in all_props.items()):
            stored = {r[0]: r[1] for r in command_rows(spark, f"SHOW TBLPROPERTIES {name}")}  # empty or absent?
        stale = [k for k in stored if k.startswith("hudilite.") and k not in all_props]
        if stale:
            sql(f"ALTER TABLE {name} UNSET TBLPROPERTIES IF EXISTS ({', '.join(sql_string(k) for k in stale)})")
        changed = {k: v for k, v in all_props.items() if stored.get(k) != v}
        if changed:
            sql(f"ALTER TABLE {name} SET TBLPROPERTIES ({props_sql(changed)})")
        # SET LOCATION refreshes the table in this session itself (AlterTableSetLocationCommand calls
        # catalog.refreshTable): no refreshTable round trip after it
        sql(f"ALTER TABLE {name} SET LOCATION {sql_string(snap)}")
    else:
        if entry is not None:
            sql(f"DROP {'VIEW' if entry.kind == 'VIEW' else 'TABLE'} IF EXISTS {name}")
        sql(f"CREATE TABLE {name} ({columns_ddl(cols)}) USING parquet "
            f"LOCATION {sql_string(snap)} TBLPROPERTIES ({props_sql(all_props)})")
        try:
            spark.catalog.refreshTable(name)
        except Exception:  # noqa: BLE001, S110 - a stale cache only; the entry is already updated
            pass
    prune_snapshots(path, snap)
    return f"at {instant} ({len(plan.base_files)} files, {'moved' if same_schema else 'created'})"


def _publish_merged(spark, schema: str, identifier: str, path: str, cols, props: dict[str, str],
                    entry: CatalogEntry | None, sql) -> None:
    """A merge-on-read table's entry reads the latest committed merged snapshot through the hudilite data
    source, so it only changes when the columns or properties do."""
    all_props = {**props, PROP_PATH: path}
    struct = merged_entry_schema(path, cols, all_props)
    name = qualified(schema, identifier)
    if entry is not None and entry.merged and entry.kind == "TABLE":
        def shape(fields):  # column comments (persist_docs) are not part of what is published
            return [(f.name, f.dataType.simpleString(), f.metadata.get(PATH_KEY), f.metadata.get(ENTRY_KEY))
                    for f in fields]

        if shape(_entry_fields(spark, name, entry)) == shape(struct.fields):
            return
    if entry is not None:
        sql(f"DROP {'VIEW' if entry.kind == 'VIEW' else 'TABLE'} IF EXISTS {name}")
    # DDL has no syntax for field metadata: the catalog API stores the schema as given (EXTERNAL: dropping
    # the entry never deletes the table directory)
    spark.catalog.createTable(f"{schema}.{identifier}", source=SOURCE_NAME, schema=struct, path=path)


def _entry_fields(spark, name: str, entry: CatalogEntry):
    """The entry's schema: as `describe` read it at the model's start (the adapter holds the table's lock
    since), else read again (one analysis of the table, a listing of its files)."""
    return entry.fields if entry.fields is not None else spark.table(name).schema.fields


def _entry_types(spark, name: str, entry: CatalogEntry) -> list[tuple[str, str]]:
    """(column, type's simpleString) of the entry: as `describe` read them, else from its schema."""
    if entry.types is not None:
        return entry.types
    return [(f.name, f.dataType.simpleString()) for f in _entry_fields(spark, name, entry)]


def merged_entry_schema(path: str, fields, props: dict):
    """The schema of a merge-on-read entry: `fields` with the table path on each (the data source finds it
    on any field) and the entry's properties on the first."""
    out = []
    for i, f in enumerate(fields):
        meta = {PATH_KEY: path}
        if i == 0:
            meta[ENTRY_KEY] = json.dumps(props, sort_keys=True)
        out.append(StructField(f.name, f.dataType, True, meta))
    return StructType(out)


def _fields_path(fields) -> str | None:
    """The table path a hudilite data source table's schema names on every field, else None."""
    paths = {f.metadata.get(PATH_KEY) for f in fields}
    return paths.pop() if len(paths) == 1 and None not in paths and "" not in paths else None


def merged_entry_props(fields) -> dict | None:
    """The properties a merge-on-read entry stores in its schema, or None for any other table."""
    raw = fields[0].metadata.get(ENTRY_KEY) if fields else None
    if not raw:
        return None
    try:
        props = json.loads(raw)
    except ValueError:
        return None
    return {str(k): str(v) for k, v in props.items()} if isinstance(props, dict) else None


def snapshot_root(base_path: str) -> str:
    return os.path.join(base_path, SNAPSHOT_DIR)


def publish_snapshot(base_path: str, instant: str, files: list[str], symlinks: bool = True) -> str:
    """Create `<base>/.hoodie/.aux/hudilite_catalog/<instant>/` holding hard links to `files` (created
    under a temporary name and renamed, so a snapshot directory is either complete or absent). Where the file
    system has no hard links: symbolic links, or with `symlinks=False` the OSError."""
    # direct file calls: hard links of a local table's files (Spark's catalog reads them as a parquet table)
    root = snapshot_root(base_path)
    final = os.path.join(root, instant or "empty")
    if os.path.isdir(final):
        return final
    os.makedirs(root, exist_ok=True)
    tmp = os.path.join(root, f".tmp-{uuid.uuid4().hex}")
    os.makedirs(tmp)
    try:
        for f in files:
            dst = os.path.join(tmp, os.path.basename(f))
            try:
                os.link(f, dst)
            except OSError:  # no hard links on this file system: a symlink reads the same for Spark
                if not symlinks:
                    raise
                os.symlink(os.path.abspath(f), dst)
        try:
            os.rename(tmp, final)
        except OSError:
            if not os.path.isdir(final):
                raise
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final


def carry_snapshots(base_path: str, staging: str) -> list[str]:
    """Before the table at `staging` replaces the one at `base_path` (`Table.replacing`): give it hard links of
    the old table's snapshot directories at the same place. The catalog entry, and every session that resolved
    it, names `<base_path>/.hoodie/.aux/hudilite_catalog/<instant>`, which after the swap is inside the new
    table: such a session (Spark's relation cache, CATALOG_CACHE_TTL_S) or a query that listed the old snapshot
    reads on from it instead of failing, and the new table's publishes prune the directories as their own.
    A merge-on-read new table's publishes prune them too (`prune_snapshots(path, None)`). Not done where hard
    links cannot be made (a symbolic link would name a path the swap removes or replaces). Never fails the
    replacement: a directory that cannot be carried is left out. Returns the names carried."""
    if not is_local(base_path):
        return []
    root = snapshot_root(base_path)
    try:
        names = sorted(n for n in os.listdir(root) if not n.startswith("."))
    except FileNotFoundError:
        return []
    if not names or not HoodieTable.exists(staging):
        return []
    carried = []
    for n in names:
        src = os.path.join(root, n)
        try:
            files = [os.path.join(src, f) for f in sorted(os.listdir(src))]
            if any(os.path.islink(f) for f in files):
                continue
            publish_snapshot(staging, n, files, symlinks=False)
        except OSError:  # removed by a concurrent prune, or no hard links here: the directory is left out
            continue
        carried.append(n)
    return carried


def prune_snapshots(base_path: str, current: str | None, keep: int = KEEP_SNAPSHOTS,
                    retain_s: float = SNAPSHOT_RETAIN_S, now: float | None = None) -> list[str]:
    """Remove the snapshot directories other than `current` and the `keep` newest that were superseded (the
    next one published) more than `retain_s` ago, and temporary directories that old (crashed publishes; a
    running one's is seconds old). `current` None: the entry names none (merge-on-read): every directory is
    superseded, the newest when it was made (carried just before the swap that replaced its table). Returns the
    names removed."""
    root = snapshot_root(base_path)  # the link directories of `publish_snapshot`: local like them
    try:
        entries = os.listdir(root)
    except FileNotFoundError:
        return []
    now = time.time() if now is None else now
    names = sorted(n for n in entries if not n.startswith("."))
    if current is None:
        keep_names: set[str] = set()
        successors = names[1:] + names[-1:]
    else:
        keep_names = set(names[-keep:]) | {os.path.basename(current)}
        successors = names[1:]

    def older(name: str) -> bool:
        try:
            return now - os.stat(os.path.join(root, name)).st_mtime > retain_s
        except FileNotFoundError:  # removed by a concurrent prune
            return False

    # a directory's successor was published when the directory was superseded: sessions that resolved the
    # table before that (Spark's relation cache, CATALOG_CACHE_TTL_S) and queries that listed it read on
    removed = [n for n, succ in zip(names, successors) if n not in keep_names and older(succ)]
    removed += [n for n in entries if n.startswith(".tmp-") and older(n)]
    for n in removed:
        shutil.rmtree(os.path.join(root, n), ignore_errors=True)
    return removed


def quote_ident(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def sql_string(value: str) -> str:
    return "'" + str(value).replace("\\", "\\\\").replace("'", "\\'") + "'"


def ddl_type(dt) -> str:
    """A Spark SQL type for DDL, with nested field names quoted."""
    if isinstance(dt, StructType):
        return "struct<" + ",".join(f"{quote_ident(f.name)}:{ddl_type(f.dataType)}" for f in dt.fields) + ">"
    if isinstance(dt, ArrayType):
        return f"array<{ddl_type(dt.elementType)}>"
    if isinstance(dt, MapType):
        return f"map<{ddl_type(dt.keyType)},{ddl_type(dt.valueType)}>"
    return dt.simpleString()


def columns_ddl(fields) -> str:
    return ", ".join(f"{quote_ident(f.name)} {ddl_type(f.dataType)}" for f in fields)


def props_sql(props: dict) -> str:
    return ", ".join(f"{sql_string(k)} = {sql_string(v)}" for k, v in props.items())
