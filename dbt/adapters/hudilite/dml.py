"""SQL DML on hudilite tables: `UPDATE`, `DELETE FROM`, `INSERT INTO` / `INSERT OVERWRITE`, `TRUNCATE TABLE`.

A hudilite table's catalog entry is a parquet table over a snapshot directory, so Spark itself would either
refuse these statements or (INSERT) write stray parquet files that are not part of the Hudi table. Statements
that target a hudilite table are therefore recognised here and run as one hudilite commit each (hooks,
`run-operation`, dbt's test utilities); anything else goes to Spark unchanged.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import List, Optional, Tuple

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


@dataclass
class Dml:
    kind: str  # update | delete | insert | overwrite | truncate
    schema: Optional[str]
    identifier: str
    alias: Optional[str] = None
    assignments: Optional[List[Tuple[str, str]]] = None
    where: Optional[str] = None
    columns: Optional[List[str]] = None
    query: Optional[str] = None


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
    if not head.startswith(("update", "delete", "insert", "truncate")):
        return None
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
