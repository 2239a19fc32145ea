"""SQL DML on a hudilite table, parsed and run as one hudilite commit each: `UPDATE`, `DELETE FROM`,
`INSERT INTO` / `INSERT OVERWRITE`, `TRUNCATE TABLE`, `ALTER TABLE ... ADD COLUMNS`, and the parse of
`CREATE [OR REPLACE] TABLE ... AS SELECT` (without a `USING` other than hudi).

Spark cannot run these on a Hudi table it reads as parquet (it refuses them, or INSERT writes stray parquet
files outside the table), so `parse` recognises them and `execute` runs one on a table path. Resolving the
statement's table name to a path is the caller's (a catalog's) business.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

from pyspark.sql import functions as F
from pyspark.sql.types import CharType, DataType, StringType, StructField, StructType, VarcharType

from hudilite import options, sql_merge
from hudilite.api import Table
from hudilite.columns import META_FIELDS, ROW_ID_FIELD, is_system_column
from hudilite.errors import HudiliteError, InvalidWriteError
from hudilite.table import HoodieTable

_NAME = r"(?:`[^`]+`|[A-Za-z_][\w$]*)"
_REL = rf"(?P<rel>{_NAME}(?:\s*\.\s*{_NAME})?)"
_ALIAS = r"(?:\s+(?:as\s+)?(?P<alias>(?!set\b|where\b)[A-Za-z_]\w*))?"

UPDATE_RE = re.compile(rf"^\s*update\s+{_REL}{_ALIAS}\s+set\s+(?P<set>.+?)(?:\s+where\s+(?P<where>.+))?\s*$",
                       re.IGNORECASE | re.DOTALL)
DELETE_RE = re.compile(rf"^\s*delete\s+from\s+{_REL}{_ALIAS}(?:\s+where\s+(?P<where>.+))?\s*$",
                       re.IGNORECASE | re.DOTALL)
INSERT_RE = re.compile(rf"^\s*insert\s+(?P<mode>into|overwrite)\s+(?:table\s+)?{_REL}\s*"
                       r"(?:\((?P<cols>[^()]*)\))?\s*(?P<query>(?:select|values|with|from|table|\().+)$",
                       re.IGNORECASE | re.DOTALL)
TRUNCATE_RE = re.compile(rf"^\s*truncate\s+table\s+{_REL}\s*$", re.IGNORECASE | re.DOTALL)
CTAS_RE = re.compile(rf"^\s*create\s+(?P<replace>or\s+replace\s+)?table\s+(?P<ine>if\s+not\s+exists\s+)?{_REL}\s+"
                     r"(?:using\s+(?P<using>\w+)\s+)?(?:partitioned\s+by\s*\((?P<parts>[^()]*)\)\s+)?"
                     r"as\s+(?P<query>(?:select|with|from|table|values|\().+)$", re.IGNORECASE | re.DOTALL)
ADD_COLUMNS_RE = re.compile(rf"^\s*alter\s+table\s+{_REL}\s+add\s+columns?\s+(?P<cols>.+)$",
                            re.IGNORECASE | re.DOTALL)
_DEFAULT_NULL = re.compile(r"\s+default\s+null\s*$", re.IGNORECASE)
_COMMENT = re.compile(r"\s+comment\s+'(?:[^'\\]|\\.)*'\s*$", re.IGNORECASE)


@dataclass
class Dml:
    kind: str  # update | delete | insert | overwrite | truncate | ctas | add_columns
    schema: Optional[str]
    identifier: str
    alias: Optional[str] = None
    assignments: Optional[List[Tuple[str, str]]] = None
    where: Optional[str] = None
    columns: Optional[List[str]] = None
    query: Optional[str] = None
    replace: bool = False  # ctas: CREATE OR REPLACE
    if_not_exists: bool = False  # ctas: CREATE TABLE IF NOT EXISTS
    partition_by: Optional[List[str]] = None  # ctas
    new_columns: Optional[List[Tuple[str, str]]] = None  # add_columns: (name, type)
    refused: Optional[str] = None  # add_columns: a definition a hudilite table cannot take (a default, ...)


def _unquote(name: str) -> str:
    name = name.strip()
    return name[1:-1].replace("``", "`") if name.startswith("`") else name


def _split_rel(rel: str) -> Tuple[Optional[str], str]:
    parts = re.findall(_NAME, rel)
    if len(parts) == 2:
        return _unquote(parts[0]), _unquote(parts[1])
    return None, _unquote(parts[0])


def split_top_level(text: str, sep: str = ",") -> List[str]:
    """Split on `sep` outside parentheses and quotes."""
    out, depth, quote, cur = [], 0, None, []
    i = 0
    while i < len(text):
        ch = text[i]
        if quote:
            cur.append(ch)
            if ch == "\\" and i + 1 < len(text):
                cur.append(text[i + 1])
                i += 2
                continue
            if ch == quote:
                quote = None
        elif ch in ("'", '"', "`"):
            quote = ch
            cur.append(ch)
        elif ch == "(":
            depth += 1
            cur.append(ch)
        elif ch == ")":
            depth -= 1
            cur.append(ch)
        elif ch == sep and depth == 0:
            out.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
        i += 1
    out.append("".join(cur))
    return [p.strip() for p in out if p.strip()]


_LEADING_COMMENT = re.compile(r"^\s*(?:/\*.*?\*/|--[^\n]*(?:\n|$))", re.DOTALL)


def strip_leading_comments(sql: str) -> str:
    """Drop leading `/* ... */` and `-- ...` comments (dbt prepends its query comment)."""
    while True:
        m = _LEADING_COMMENT.match(sql)
        if not m:
            return sql
        sql = sql[m.end():]


def parse(sql: str) -> Optional[Dml]:
    sql = strip_leading_comments(sql).strip().rstrip(";").strip()
    head = sql[:16].lower().lstrip()
    if not head.startswith(("update", "delete", "insert", "truncate", "create", "alter")):
        return None
    m = CTAS_RE.match(sql)
    if m:
        if m.group("using") and m.group("using").lower() not in ("hudi", "hudilite"):
            return None  # another format: Spark's own CTAS
        schema, ident = _split_rel(m.group("rel"))
        parts = [_unquote(c) for c in split_top_level(m.group("parts"))] if m.group("parts") else None
        return Dml("ctas", schema, ident, query=m.group("query"), replace=bool(m.group("replace")),
                   if_not_exists=bool(m.group("ine")), partition_by=parts)
    m = ADD_COLUMNS_RE.match(sql)
    if m:
        text = m.group("cols").strip()
        if text.startswith("(") and text.endswith(")"):
            text = text[1:-1]
        cols, refused = [], None
        for part in split_top_level(text):
            part = _COMMENT.sub("", part.strip())
            part = _DEFAULT_NULL.sub("", part)  # a new column is null in the stored rows anyway
            bits = part.split(None, 1)
            if len(bits) != 2:
                return None  # not a column definition: leave it to Spark (which reports it)
            if re.search(r"\b(default|not\s+null|first|after)\b", bits[1], re.IGNORECASE):
                # refused on a hudilite table (not left to Spark: on a copy-on-write entry, a parquet table,
                # Spark would take a DEFAULT into the catalog alone, and the next commit's entry would drop it)
                refused = refused or part
            cols.append((_unquote(bits[0]), bits[1].strip()))
        schema, ident = _split_rel(m.group("rel"))
        return Dml("add_columns", schema, ident, new_columns=cols, refused=refused)
    m = UPDATE_RE.match(sql)
    if m:
        assignments = []
        for a in split_top_level(m.group("set")):
            if "=" not in a:
                return None
            col, expr = a.split("=", 1)
            col = _unquote(col.strip().split(".")[-1])
            assignments.append((col, expr.strip()))
        schema, ident = _split_rel(m.group("rel"))
        return Dml("update", schema, ident, alias=m.group("alias"), assignments=assignments,
                   where=m.group("where"))
    m = DELETE_RE.match(sql)
    if m:
        schema, ident = _split_rel(m.group("rel"))
        return Dml("delete", schema, ident, alias=m.group("alias"), where=m.group("where"))
    m = INSERT_RE.match(sql)
    if m:
        schema, ident = _split_rel(m.group("rel"))
        cols = [_unquote(c) for c in split_top_level(m.group("cols"))] if m.group("cols") else None
        kind = "insert" if m.group("mode").lower() == "into" else "overwrite"
        return Dml(kind, schema, ident, columns=cols, query=m.group("query"))
    m = TRUNCATE_RE.match(sql)
    if m:
        schema, ident = _split_rel(m.group("rel"))
        return Dml("truncate", schema, ident)
    return None


class DmlError(InvalidWriteError):
    """The statement does not fit the table (unknown column, record key updated, value count); nothing was
    written."""


class DmlWriteError(HudiliteError):
    """The statement's commit failed (its cause attached); the table is unchanged."""


@dataclass
class DmlResult:
    operation: str  # the hudilite write operation the statement ran as
    result: object  # what `hudilite.write` returned
    added_columns: List[str]  # ADD COLUMNS: the new columns


def execute(spark, d: Dml, path: str, name: str, query_frame=None,
            columns: Optional[Sequence[str]] = None) -> DmlResult:
    """Run `d` (not ctas) on the table at `path` as one commit. `name` labels errors; `query_frame` holds
    the rows of INSERT's query and `columns` its target columns when the statement lists none (default: the
    table's data columns). Statement errors raise DmlError before anything is written; a failed commit
    raises DmlWriteError."""
    cfg = HoodieTable.open(path).config
    current = Table(path, spark=spark).read()
    data_cols = [c for c in current.columns if c not in META_FIELDS]
    types = {c: current.schema[c].dataType for c in data_cols}
    lower = {c.lower(): c for c in data_cols}
    if d.alias:
        current = current.alias(d.alias)
    cond = F.coalesce(F.expr(d.where).cast("boolean"), F.lit(False)) if d.where else F.lit(True)
    keyed = list(cfg.record_key_fields) != [ROW_ID_FIELD]
    added: List[str] = []
    if d.kind == "add_columns":
        if d.refused:
            raise DmlError(f"ALTER TABLE {name} ADD COLUMNS: {d.refused!r}: a hudilite table's new column is nullable, "
                           "comes last and has no default (its stored rows hold null; Hudi schemas keep no "
                           "defaults): add it as `name type`, then set its values with UPDATE")
        # the Hudi schema gets the nullable columns through an empty upsert commit (schema evolution), so
        # every reader (catalog, hudi-rs) sees them, null in the stored rows
        fields = list(current.select(*[F.col(f"`{c}`") for c in data_cols]).schema.fields)
        for col, typ in d.new_columns:
            if col.lower() in lower or is_system_column(col):
                raise DmlError(f"ALTER TABLE {name} ADD COLUMNS: column {col!r} exists")
            dtype = DataType.fromDDL(typ)
            if isinstance(dtype, (CharType, VarcharType)):
                dtype = StringType()
            fields.append(StructField(col, dtype, True))
            added.append(col)
        df, op = spark.createDataFrame([], StructType(fields)), "upsert"
    elif d.kind == "update":
        sets = {}
        for col, expr in d.assignments:
            if col.lower() not in lower or is_system_column(col):
                raise DmlError(f"UPDATE {name}: no column {col!r}")
            sets[lower[col.lower()]] = expr
        keys = {k.lower() for k in cfg.record_key_fields}
        if keyed and keys & {c.lower() for c in sets}:
            raise DmlError(f"UPDATE {name}: the record key ({', '.join(cfg.record_key_fields)}) cannot be updated")
        df = current.filter(cond).select(*[
            (F.expr(sets[c]).cast(types[c]).alias(c) if c in sets else F.col(f"`{c}`")) for c in data_cols])
        op = "upsert"
    elif d.kind == "delete":
        df, op = current.filter(cond).select(*[F.col(f"`{c}`") for c in data_cols]), "delete"
    elif d.kind == "truncate":
        df = spark.createDataFrame([], current.select(*[F.col(f"`{c}`") for c in data_cols]).schema)
        op = "insert_overwrite_table"
    elif d.kind in ("insert", "overwrite"):
        src = query_frame if query_frame is not None else spark.sql(d.query)
        target = d.columns or list(data_cols if columns is None else columns)
        if len(src.columns) != len(target):
            raise DmlError(f"INSERT into {name}: {len(src.columns)} values for "
                           f"{len(target)} columns ({', '.join(target)})")
        missing = [c for c in target if c.lower() not in lower]
        if missing:
            raise DmlError(f"INSERT into {name}: no column(s) {missing}")
        df = src.select(*[F.col(f"`{s}`").cast(types[lower[t.lower()]]).alias(lower[t.lower()])
                          for s, t in zip(src.columns, target)])
        if not keyed:
            df = sql_merge.with_row_id(df, ROW_ID_FIELD)
        op = "insert" if d.kind == "insert" else "insert_overwrite_table"
    else:
        raise DmlError(f"{d.kind}: not a statement on an existing table")
    parts = list(cfg.partition_fields) if cfg.is_partitioned else []
    table = Table(path, record_key=list(cfg.record_key_fields), precombine_field=cfg.precombine_field or None,
                  partition_by=parts, table_type=cfg.table_type)
    try:
        result = table.write(df, op, options={options.TABLE_NAME.key: cfg.name, options.INPUT_PERSIST.key: "true"})
    except Exception as e:  # noqa: BLE001 (whatever failed, the commit did not happen)
        raise DmlWriteError(f"{d.kind.upper()} on {name} failed, the table is unchanged: {e}") from e
    return DmlResult(op, result, added)
