"""The aggregate query: what `hudilite.aggregate` maintains, parsed from one SQL SELECT.

Supported (anything else is an AggregateQueryError naming why):

    select <group key expr> [as k], ..., count(*), count(x), sum(x), avg(x), min(x), max(x), count(distinct y)
    from <detail table> [alias]
    [where <condition on detail columns>]
    group by <the key expressions, their aliases or ordinals>

A small top-level scanner (quotes, parentheses, comments) splits the clauses: the core needs no SQL parser
library, and expressions are handed to Spark SQL as written.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import List, Optional, Tuple

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
_IDENT = r"(?:`[^`]+`|[A-Za-z_][A-Za-z0-9_]*)"


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
        return [p.strip("`") for p in re.findall(_IDENT, self.relation)]

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


def _unquote(name: str) -> str:
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


# words that end an expression, so a trailing word after them is not an implicit alias (`x is null`,
# `case ... end`), and words after which the next word is an operand (`not x`, `distinct x`)
_NOT_ALIAS = {"END", "NULL", "TRUE", "FALSE", "AND", "OR", "NOT", "IS", "IN", "LIKE", "RLIKE", "ILIKE", "REGEXP",
              "THEN", "ELSE", "WHEN", "CASE", "DISTINCT", "BETWEEN", "ASC", "DESC", "ALL", "ANY", "SOME", "EXISTS",
              "INTERVAL", "YEAR", "YEARS", "MONTH", "MONTHS", "WEEK", "WEEKS", "DAY", "DAYS", "HOUR", "HOURS",
              "MINUTE", "MINUTES", "SECOND", "SECONDS", "MILLISECOND", "MILLISECONDS", "MICROSECOND",
              "MICROSECONDS", "DIV", "AS", "FROM", "WHERE", "GROUP", "BY"}


def _alias(text: str) -> Tuple[str, Optional[str]]:
    """(expression, alias or None) of one select item: `expr as name` or `expr name`."""
    m = re.match(rf"(?is)^(.*?)\s+as\s+({_IDENT})\s*$", text)
    if m and _balanced(m.group(1)):
        return m.group(1).strip(), _unquote(m.group(2))
    m = re.match(rf"(?is)^(.*\S)\s+({_IDENT})\s*$", text)
    if not m or m.group(2).upper() in _NOT_ALIAS or not _balanced(m.group(1)):
        return text, None
    prev = m.group(1)
    last = re.search(r"[A-Za-z_][A-Za-z0-9_]*$", prev)
    if prev[-1] in ")`'\"" or (prev[-1].isalnum() or prev[-1] == "_") and not (
            last and last.group(0).upper() in _NOT_ALIAS - {"END", "NULL", "TRUE", "FALSE"}):
        return prev.strip(), _unquote(m.group(2))
    return text, None


def _balanced(text: str) -> bool:
    """Whether `text` closes every parenthesis and quote it opens."""
    depth, quote = 0, None
    for ch in text:
        if quote:
            quote = None if ch == quote else quote
        elif ch in ("'", '"', "`"):
            quote = ch
        else:
            depth += (ch == "(") - (ch == ")")
    return depth == 0 and quote is None


def _item(text: str) -> Item:
    text, alias = _alias(text)
    call = _call(text)
    if call is None:
        if _OTHER_AGGS.search(text):
            raise _err(f"unsupported select expression {text!r} (an aggregate must be a single call, not part of "
                       "an expression)")
        return Item(text, alias or _unquote(text.split(".")[-1].strip()))
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


def _strip_comments(sql: str) -> str:
    """`sql` without `-- ...` and `/* ... */` comments (outside quotes)."""
    out, i, n, quote = [], 0, len(sql), None
    while i < n:
        ch = sql[i]
        if quote:
            out.append(ch)
            if ch == "\\" and quote != "`" and i + 1 < n:
                out.append(sql[i + 1])
                i += 1
            elif ch == quote:
                quote = None
        elif ch in ("'", '"', "`"):
            quote = ch
            out.append(ch)
        elif sql.startswith("--", i):
            j = sql.find("\n", i)
            i = n if j < 0 else j
            continue
        elif sql.startswith("/*", i):
            j = sql.find("*/", i + 2)
            out.append(" ")
            i = n if j < 0 else j + 2
            continue
        else:
            out.append(ch)
        i += 1
    return "".join(out)


def _words(text: str) -> List[Tuple[int, int, str]]:
    """The words and semicolons outside quotes and parentheses: (start, end, upper-cased text)."""
    out, i, n, depth = [], 0, len(text), 0
    while i < n:
        ch = text[i]
        if ch in ("'", '"', "`"):
            j = i + 1
            while j < n and text[j] != ch:
                j += 2 if text[j] == "\\" and ch != "`" else 1
            i = j + 1
            continue
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch.isalnum() or ch == "_":
            j = i
            while j < n and (text[j].isalnum() or text[j] in "_$"):
                j += 1
            word = text[i:j].upper()
            call = text[j:].lstrip().startswith("(") and word not in _KEEP_BEFORE_PAREN  # a function: left(x, 1)
            if depth == 0 and not ch.isdigit() and not call:
                out.append((i, j, word))
            i = j
            continue
        elif ch == ";" and depth == 0:
            out.append((i, i + 1, ";"))
        i += 1
    return out


_KEEP_BEFORE_PAREN = {"SELECT", "FROM", "WHERE", "JOIN", "USING", "ON", "VALUES", "WITH", "AS", "IN", "AND", "OR",
                      "NOT", "EXISTS", "UNION", "ALL", "BY"}
# clause words a maintained aggregate cannot have after FROM (any of them ends the WHERE condition)
_CLAUSES = {"JOIN", "INNER", "LEFT", "RIGHT", "FULL", "CROSS", "NATURAL", "LATERAL", "ON", "USING", "HAVING",
            "ORDER", "LIMIT", "OFFSET", "UNION", "INTERSECT", "EXCEPT", "MINUS", "WINDOW", "QUALIFY", "CLUSTER",
            "DISTRIBUTE", "SORT", "TABLESAMPLE", "PIVOT", "UNPIVOT", "FETCH", "SELECT", "VALUES", "WITH",
            "ROLLUP", "CUBE", "GROUPING", "INTO", "FOR"}
_CLAUSE_TAIL = {"OUTER", "JOIN", "BY", "ALL", "SEMI", "ANTI", "DISTINCT", "SETS"}
_DML = {"INSERT", "UPDATE", "DELETE", "MERGE", "REPLACE", "UPSERT", "CREATE", "DROP", "ALTER"}


def _statement(sql: str) -> str:
    """The one statement of `sql`, comments removed; an error when there are several or none."""
    text = _strip_comments(sql).strip().rstrip(";").strip()
    cuts = [s for s, _, w in _words(text) if w == ";"]
    pieces, start = [], 0
    for c in cuts + [len(text)]:
        if text[start:c].strip():
            pieces.append(text[start:c].strip())
        start = c + 1
    if len(pieces) != 1:
        raise _err("the model must be exactly one SELECT statement")
    return pieces[0]


def parse(sql: str) -> AggregateQuery:
    """The aggregate query of `sql` (one SELECT ... FROM one table [WHERE ...] GROUP BY ...)."""
    text = _statement(sql)
    words = _words(text)
    if not words or text[:words[0][0]].strip():
        raise _err("the model must be a SELECT")
    first = words[0][2]
    if first == "WITH":
        raise _err("WITH (common table expressions) is not supported")
    if first in _DML:
        raise _err(f"unexpected {text[words[0][0]:words[0][1]]}")
    if first != "SELECT":
        raise _err("the model must be a SELECT")
    if len(words) > 1 and words[1][2] in ("DISTINCT", "ALL") and not text[words[0][1]:words[1][0]].strip():
        raise _err("SELECT DISTINCT is not supported")
    bounds = {"select": [words[0][1], None], "from": [None, None], "where": [None, None], "group": [None, None]}
    section, i = "select", 1
    while i < len(words):
        s, e, w = words[i]
        nxt = words[i + 1][2] if i + 1 < len(words) else ""
        if w == ";":
            i += 1
            continue
        if section == "select":
            if w == "FROM":
                bounds["select"][1], bounds["from"][0], section = s, e, "from"
            elif w == "WHERE":
                raise _err("WHERE in an unexpected place")
            i += 1
            continue
        if w == "WHERE":
            if section != "from":
                raise _err("WHERE in an unexpected place")
            bounds["from"][1], bounds["where"][0], section = s, e, "where"
        elif w == "GROUP" and nxt == "BY":
            bounds[section][1], bounds["group"][0], section = s, words[i + 1][1], "group"
            i += 1
        elif w in _CLAUSES or (w == "GROUP" and section != "group"):
            what = [w]
            while i + 1 < len(words) and words[i + 1][2] in _CLAUSE_TAIL:
                i += 1
                what.append(words[i][2])
            what = " ".join(what)
            if "JOIN" in what:
                raise _err("joins are not supported (aggregate one hudilite table; join in the detail model)")
            raise _err(f"{what} is not supported")
        i += 1
    semi = [s for s, _, w in words if w == ";"]
    end = semi[0] if semi else len(text)
    parts = {k: (text[b[0]:b[1] if b[1] is not None else end].strip() if b[0] is not None else "")
             for k, b in bounds.items()}
    if not parts["select"] or not parts["from"]:
        raise _err("SELECT ... FROM expected")
    if not parts["group"]:
        raise _err("GROUP BY expected")
    rel_text = parts["from"]
    m = re.match(rf"(?is)^({_IDENT}(?:\.{_IDENT})*)(?:\s+(?:as\s+)?({_IDENT}))?$", rel_text)
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
    return AggregateQuery(items, m.group(1), _unquote(m.group(2)) if m.group(2) else None, where,
                          [k.expr for k in keys])



def default_name(i: Item) -> str:
    inner = "1" if i.expr == "*" else i.expr
    return f"{i.func}({'DISTINCT ' if i.distinct else ''}{inner})"

