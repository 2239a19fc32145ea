"""The aggregate query: what `hudilite.aggregate` maintains, parsed from one SQL SELECT.

Supported (anything else is an AggregateQueryError naming why):

    select <group key expr> [as k], ..., count(*), count(x), sum(x), avg(x), min(x), max(x), count(distinct y)
    from <detail table> [alias]
    [where <condition on detail columns>]
    group by <the key expressions, their aliases or ordinals>

sqlparse splits the statement into its clauses; expressions are handed to Spark SQL as written.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import List, Optional

import sqlparse
from sqlparse.sql import Identifier, Where
from sqlparse.tokens import CTE, DML, Keyword, Punctuation

from hudilite.errors import HudiliteError

GROUP_KEY = "_hudilite_group_key"
ROWS = "_hudilite_agg_rows"
SIGNATURE_KEY = "hudilite.aggregate.signature"
_AGG_FUNCS = ("count", "sum", "min", "max", "avg")
_OTHER_AGGS = re.compile(
    r"(?i)\b(count|sum|min|max|avg|mean|first|last|any_value|collect_list|collect_set|stddev\w*|std|var\w*|"
    r"percentile\w*|approx_\w+|median|mode|bool_and|bool_or|every|some|max_by|min_by|count_if|array_agg|"
    r"string_agg|listagg|corr|covar\w*|kurtosis|skewness|grouping\w*|bit_\w+|regr_\w+|histogram_numeric|"
    r"row_number|rank|dense_rank|lag|lead|ntile)\s*\(")
IDENT = r"(?:`[^`]+`|[A-Za-z_][A-Za-z0-9_]*)"
_GROUP_KEY_WORDS = {"IS", "NOT", "NULL"}


class AggregateQueryError(HudiliteError, ValueError):
    """The SQL is not an aggregate query hudilite can maintain incrementally."""


def _err(msg: str) -> AggregateQueryError:
    return AggregateQueryError(
        f"{msg}. Supported: select <group keys>, count(*), count(x), sum(x), avg(x), min(x), max(x), "
        "count(distinct x) from <detail table> [where ...] group by <keys>")


@dataclass
class Item:
    expr: str  # SQL text (aggregates: the argument; '*' for count(*))
    name: str  # output column name
    func: Optional[str] = None  # None: a group key
    distinct: bool = False

    @property
    def is_key(self) -> bool:
        return self.func is None


@dataclass
class AggregateQuery:
    items: List[Item]
    relation: str  # as written (e.g. `schema`.`detail`)
    alias: Optional[str]
    where: Optional[str]
    group_by: List[str] = field(default_factory=list)  # key expressions

    @property
    def keys(self) -> List[Item]:
        return [i for i in self.items if i.is_key]

    @property
    def aggs(self) -> List[Item]:
        return [i for i in self.items if not i.is_key]

    @property
    def recomputed(self) -> List[Item]:
        return [i for i in self.aggs if i.func in ("min", "max") or i.distinct]

    def relation_parts(self) -> List[str]:
        """The FROM relation's name parts, unquoted (`schema`.`detail` -> ['schema', 'detail'])."""
        return [p.strip("`") for p in re.findall(IDENT, self.relation)]

    def signature(self) -> str:
        blob = json.dumps([[i.expr, i.name, i.func, i.distinct] for i in self.items] + [self.where or ""])
        return hashlib.sha1(blob.encode()).hexdigest()[:16]


# ---- parsing -------------------------------------------------------------------------------------------
def _split_top(text: str, sep: str = ",") -> List[str]:
    out, depth, cur, quote = [], 0, [], None
    for ch in text:
        if quote:
            cur.append(ch)
            if ch == quote:
                quote = None
            continue
        if ch in ("'", '"', "`"):
            quote = ch
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == sep and depth == 0:
            out.append("".join(cur).strip())
            cur = []
            continue
        cur.append(ch)
    if "".join(cur).strip():
        out.append("".join(cur).strip())
    return out


def _norm(expr: str) -> str:
    return re.sub(r"\s+", " ", expr.strip().replace("`", "")).lower()


def unquote(name: str) -> str:
    return name[1:-1] if name.startswith("`") and name.endswith("`") else name


def _call(expr: str):
    """(func, inner) when `expr` is exactly one call `f(...)` of a supported aggregate."""
    m = re.match(r"(?is)^\s*([A-Za-z_]+)\s*\((.*)\)\s*$", expr)
    if not m or m.group(1).lower() not in _AGG_FUNCS:
        return None
    inner = m.group(2)
    depth = 0
    for ch in inner:  # the closing parenthesis must be the call's own
        depth += ch == "("
        depth -= ch == ")"
        if depth < 0:
            return None
    return m.group(1).lower(), inner.strip()


def _item(text: str) -> Item:
    alias = None
    parsed = [t for t in sqlparse.parse(text)[0].tokens if not t.is_whitespace]
    if len(parsed) == 1 and isinstance(parsed[0], Identifier) and parsed[0].get_alias():
        m = re.match(rf"(?is)^(.*?)\s+(?:as\s+)?({IDENT})\s*$", text)
        if m:
            text, alias = m.group(1).strip(), unquote(m.group(2))
    if alias is None:
        # an explicit trailing `AS name` that sqlparse does not group with the expression (`x is null as isn`,
        # `interval 1 day as i`): still the item's alias, never part of the SQL handed to Spark
        m = re.match(rf"(?is)^(.*?\S)\s+as\s+({IDENT})\s*$", text)
        if m and m.group(1).count("(") == m.group(1).count(")"):
            text, alias = m.group(1).strip(), unquote(m.group(2))
    call = _call(text)
    if call is None:
        if _OTHER_AGGS.search(text):
            raise _err(f"unsupported select expression {text!r} (an aggregate must be a single call, not part of "
                       "an expression)")
        return Item(text, alias or unquote(text.split(".")[-1].strip()))
    func, inner = call
    distinct = bool(re.match(r"(?is)^distinct\s+", inner))
    if distinct:
        inner = re.sub(r"(?is)^distinct\s+", "", inner).strip()
        if func != "count":
            raise _err(f"{func}(distinct ...) is not supported (only count(distinct x))")
    if inner == "*" and (func != "count" or distinct):
        raise _err(f"{func}(*) is not supported")
    if inner in ("1",) and func == "count":
        inner = "*"
    if _OTHER_AGGS.search(inner):
        raise _err(f"nested aggregate in {text!r}")
    if "," in _split_top(inner)[0] or len(_split_top(inner)) != 1:
        raise _err(f"{text!r}: one argument expected")
    return Item(inner, alias or "", func, distinct)


def parse(sql: str) -> AggregateQuery:
    """The aggregate query of `sql` (one SELECT ... FROM one table [WHERE ...] GROUP BY ...)."""
    text = sqlparse.format(sql, strip_comments=True).strip().rstrip(";").strip()
    stmts = [s for s in sqlparse.parse(text) if str(s).strip()]
    if len(stmts) != 1:
        raise _err("the model must be exactly one SELECT statement")
    section, pieces = None, {"select": [], "from": [], "where": [], "group": []}
    for tok in stmts[0].tokens:
        if tok.is_whitespace:
            continue
        v = tok.value.upper() if tok.ttype is not None else ""
        if tok.ttype is CTE:
            raise _err("WITH (common table expressions) is not supported")
        if tok.ttype is DML:
            if v != "SELECT" or section is not None:
                raise _err(f"unexpected {tok.value}")
            section = "select"
            continue
        if isinstance(tok, Where):
            if section != "from":
                raise _err("WHERE in an unexpected place")
            section = "where"
            pieces["where"].append(str(tok)[len("where"):].strip())
            continue
        if tok.ttype in Keyword and v == "FROM":
            section = "from"
            continue
        if tok.ttype in Keyword and re.sub(r"\s+", " ", v) == "GROUP BY":
            section = "group"
            continue
        if tok.ttype in Keyword and v in ("DISTINCT", "ALL") and section == "select" and not pieces["select"]:
            raise _err("SELECT DISTINCT is not supported")
        # sqlparse leaves `is`/`not`/`null` of a key like `x is null` as bare keywords
        if tok.ttype in Keyword and section in ("from", "where", "group") and not (
                section == "group" and v in _GROUP_KEY_WORDS):
            what = re.sub(r"\s+", " ", v)
            if "JOIN" in what:
                raise _err("joins are not supported (aggregate one hudilite table; join in the detail model)")
            raise _err(f"{what} is not supported")
        if tok.ttype is Punctuation and tok.value == ";":
            continue
        if section is None:
            raise _err("the model must be a SELECT")
        pieces[section].append(str(tok))
    parts = {k: " ".join(v).strip() for k, v in pieces.items()}
    if not parts["select"] or not parts["from"]:
        raise _err("SELECT ... FROM expected")
    if not parts["group"]:
        raise _err("GROUP BY expected")
    rel_text = parts["from"]
    m = re.match(rf"(?is)^({IDENT}(?:\.{IDENT})*)(?:\s+(?:as\s+)?({IDENT}))?$", rel_text)
    if not m:
        raise _err(f"FROM must name one table (got {rel_text!r}; subqueries and joins are not supported)")
    items = [_item(t) for t in _split_top(parts["select"])]
    if not any(not i.is_key for i in items):
        raise _err("no aggregate in the select list")
    keys = [i for i in items if i.is_key]
    group = _split_top(parts["group"])
    matched: List[Item] = []
    for g in group:
        hit = None
        if g.strip().isdigit():
            n = int(g)
            if not 1 <= n <= len(items) or not items[n - 1].is_key:
                raise _err(f"GROUP BY {g}: not the position of a group key in the select list")
            hit = items[n - 1]
        else:
            for k in keys:
                if _norm(k.expr) == _norm(g) or _norm(k.name) == _norm(g):
                    hit = k
                    break
        if hit is None:
            raise _err(f"GROUP BY {g.strip()!r} must also be in the select list (the group keys are the table's key)")
        matched.append(hit)
    missing = [k.expr for k in keys if all(k is not h for h in matched)]
    if missing:
        raise _err(f"select expressions {missing} are neither aggregates nor in GROUP BY")
    if not keys:
        raise _err("at least one group key is needed (the group keys are the table's record key)")
    where = parts["where"] or None
    if where and _OTHER_AGGS.search(where) and re.search(r"(?i)\b(count|sum|min|max|avg)\s*\(", where):
        raise _err("aggregates in WHERE are not supported (HAVING is not supported either)")
    return AggregateQuery(items, m.group(1), unquote(m.group(2)) if m.group(2) else None, where,
                          [k.expr for k in keys])


def default_name(i: Item) -> str:
    inner = "1" if i.expr == "*" else i.expr
    return f"{i.func}({'DISTINCT ' if i.distinct else ''}{inner})"

