"""An aggregate query's WHERE clause as a pyarrow.compute expression, for the driver-local fold (`local.py`).

Only a subset whose Spark SQL meaning Arrow reproduces exactly is translated; anything else is None and the
refresh runs on Spark, which evaluates the clause as written. The subset:

    <column> <op> <literal>  (op: = == <> != < <= > >=; either side may be the literal)
    <column> IS [NOT] NULL    <column> [NOT] IN (<literal>, ...)    <column> [NOT] BETWEEN <lit> AND <lit>
    <boolean column>          AND / OR / NOT, parentheses

A literal must have the column's type with no coercion Spark would add: 'string' for string columns (no
escapes), integers for integer columns, numbers for decimal and floating columns, TRUE / FALSE for booleans,
DATE 'yyyy-mm-dd' for dates (timestamps: Spark reads their literals in the session time zone; not translated).
Logic is three-valued as in SQL: a comparison with a null is null, AND / OR / NOT are Kleene's, and a row whose
condition is null is filtered out (Arrow's filter drops nulls as Spark's WHERE does). Spark orders NaN above
every other floating value and equal to itself; the translation of floating comparisons says so explicitly.
"""

from __future__ import annotations

import datetime
import decimal
import re
from typing import List, Optional, Tuple

import pyarrow as pa
import pyarrow.compute as pc

_TOKEN = re.compile(r"""
    (?P<ws>\s+)
  | (?P<quoted>`(?:[^`]|``)+`)
  | (?P<number>(?:\d+\.?\d*|\.\d+)(?![A-Za-z0-9_.]))
  | (?P<word>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<string>'[^'\\]*'(?!\s*'))
  | (?P<op><>|!=|<=|>=|==|=|<|>)
  | (?P<punct>[(),.\-])
""", re.X)
_KEYWORDS = {"AND", "OR", "NOT", "IS", "NULL", "IN", "BETWEEN", "TRUE", "FALSE", "DATE"}
_FLIP = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "=": "=", "<>": "<>"}


class _Unsupported(Exception):
    """Outside the translated subset (the caller falls back to Spark)."""


def _tokens(text: str) -> List[Tuple[str, str]]:
    out, pos = [], 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            raise _Unsupported(text[pos:])
        pos = m.end()
        if m.lastgroup != "ws":
            out.append((m.lastgroup, m.group()))
    return out


class _Parser:
    def __init__(self, tokens, resolve, schema: pa.Schema):
        self.t, self.i, self.resolve, self.schema = tokens, 0, resolve, schema
        self.columns: set = set()

    # ---- token helpers
    def peek(self, k: int = 0):
        return self.t[self.i + k] if self.i + k < len(self.t) else (None, None)

    def kw(self, word: str, k: int = 0) -> bool:
        kind, v = self.peek(k)
        return kind == "word" and v.upper() == word

    def take(self):
        tok = self.peek()
        if tok[0] is None:
            raise _Unsupported("unexpected end")
        self.i += 1
        return tok

    def expect(self, kind: str, value: str) -> None:
        k, v = self.take()
        if k != kind or (v.upper() if k == "word" else v) != value:
            raise _Unsupported(f"expected {value}")

    # ---- grammar: or > and > not > predicate
    def parse(self) -> pc.Expression:
        e = self.disjunction()
        if self.peek()[0] is not None:
            raise _Unsupported("trailing tokens")
        return e

    def chain(self, word: str, operand, combine):
        """operand (word operand)*, combined left to right."""
        e = operand()
        while self.kw(word):
            self.take()
            e = combine(e, operand())
        return e

    def disjunction(self):
        return self.chain("OR", self.conjunction, pc.or_kleene)

    def conjunction(self):
        return self.chain("AND", self.negation, pc.and_kleene)

    def negation(self):
        if self.kw("NOT"):
            self.take()
            return pc.invert(self.negation())
        return self.predicate()

    def predicate(self):
        if self.peek() == ("punct", "("):
            self.take()
            e = self.disjunction()
            self.expect("punct", ")")
            return e
        left = self.operand()
        kind, v = self.peek()
        if kind == "op":
            self.take()
            right = self.operand()
            op = "=" if v == "==" else "<>" if v == "!=" else v
            if isinstance(left, str) and not isinstance(right, str):
                return self.compare(left, op, right)
            if isinstance(right, str) and not isinstance(left, str):
                return self.compare(right, _FLIP[op], left)
            raise _Unsupported("a comparison needs one column and one literal")
        if not isinstance(left, str):
            raise _Unsupported("a literal is not a condition")
        if self.kw("IS"):
            self.take()
            negated = self.kw("NOT")
            if negated:
                self.take()
            self.expect("word", "NULL")
            f = pc.field(left)
            return pc.is_valid(f) if negated else pc.is_null(f)
        negated = self.kw("NOT")
        if negated:
            self.take()
        if self.kw("IN"):
            self.take()
            self.expect("punct", "(")
            values = [self.literal()]
            while self.peek() == ("punct", ","):
                self.take()
                values.append(self.literal())
            self.expect("punct", ")")
            e = self.compare(left, "=", values[0])
            for v in values[1:]:  # a chain of equalities: Spark's IN is null when x is null or unmatched with a null
                e = pc.or_kleene(e, self.compare(left, "=", v))
            return pc.invert(e) if negated else e
        if self.kw("BETWEEN"):
            self.take()
            low = self.literal()
            self.expect("word", "AND")
            high = self.literal()
            e = pc.and_kleene(self.compare(left, ">=", low), self.compare(left, "<=", high))
            return pc.invert(e) if negated else e
        if negated:
            raise _Unsupported("NOT without IN / BETWEEN")
        if not pa.types.is_boolean(self.schema.field(left).type):
            raise _Unsupported("a non-boolean column as a condition")
        return pc.field(left)

    def operand(self):
        """A column name (str) or a literal (a `_Lit`)."""
        kind, v = self.peek()
        if kind in ("quoted", "word") and not (kind == "word" and v.upper() in _KEYWORDS and not (
                v.upper() == "DATE" and self.peek(1)[0] != "string")):
            return self.column()
        return self.literal()

    def column(self) -> str:
        parts = [self.take()]
        while self.peek() == ("punct", ".") and self.peek(1)[0] in ("quoted", "word"):
            self.take()
            parts.append(self.take())
        if any(k not in ("quoted", "word") for k, _ in parts):
            raise _Unsupported("not a column")
        names = [v[1:-1].replace("``", "`") if k == "quoted" else v for k, v in parts]
        col = self.resolve(names)
        if col is None:
            raise _Unsupported(f"unknown column {'.'.join(names)}")
        self.columns.add(col)
        return col

    def literal(self) -> "_Lit":
        kind, v = self.take()
        if kind == "punct" and v == "-":
            kind, v = self.take()
            if kind != "number":
                raise _Unsupported("minus before a non-number")
            return _Lit("number", "-" + v)
        if kind == "number":
            return _Lit("number", v)
        if kind == "string":
            return _Lit("string", v[1:-1])
        if kind == "word" and v.upper() in ("TRUE", "FALSE"):
            return _Lit("bool", v.upper() == "TRUE")
        if kind == "word" and v.upper() == "DATE":
            k, s = self.take()
            if k != "string" or not re.fullmatch(r"\d{4}-\d{2}-\d{2}", s[1:-1]):
                raise _Unsupported("DATE literal")
            try:
                return _Lit("date", datetime.date.fromisoformat(s[1:-1]))
            except ValueError:
                raise _Unsupported("DATE literal") from None
        raise _Unsupported(f"not a literal: {v}")

    # ---- a typed comparison
    def compare(self, col: str, op: str, lit: "_Lit"):
        t = self.schema.field(col).type
        value = lit.typed(t)
        f = pc.field(col)
        cmp = {"=": pc.equal, "<>": pc.not_equal, "<": pc.less, "<=": pc.less_equal, ">": pc.greater,
               ">=": pc.greater_equal}[op]
        e = cmp(f, value)
        if pa.types.is_floating(t) and op in (">", ">="):
            # Spark orders NaN above every number (a numeral is never NaN, so =, <> and < agree with Arrow's
            # IEEE comparisons, which are false for NaN except <>)
            e = pc.or_kleene(e, pc.is_nan(f))
        return e


class _Lit:
    def __init__(self, kind: str, value):
        self.kind, self.value = kind, value

    def typed(self, t: pa.DataType) -> pa.Scalar:
        """The literal as a scalar of the column type `t`; _Unsupported when Spark would coerce instead."""
        if self.kind == "string" and (pa.types.is_string(t) or pa.types.is_large_string(t)):
            return pa.scalar(self.value, t)
        if self.kind == "bool" and pa.types.is_boolean(t):
            return pa.scalar(self.value)
        if self.kind == "date" and pa.types.is_date32(t):
            return pa.scalar(self.value, t)
        if self.kind == "number":
            integral = re.fullmatch(r"-?\d+", self.value) is not None
            if pa.types.is_integer(t) and integral:
                v = int(self.value)
                if not -2**63 <= v < 2**63:  # Spark types a larger numeral as a decimal
                    raise _Unsupported("integer literal out of range")
                return pa.scalar(v, pa.int64())
            if pa.types.is_floating(t):
                return pa.scalar(float(self.value), pa.float64())
            if pa.types.is_decimal(t):
                d = decimal.Decimal(self.value)
                digits = len(d.as_tuple().digits)
                scale = max(0, -int(d.as_tuple().exponent))
                if max(digits, scale) > 38:
                    raise _Unsupported("decimal literal too wide")
                return pa.scalar(d, pa.decimal128(max(digits, scale, 1), scale))
        raise _Unsupported(f"{self.kind} literal against a {t} column")


def arrow_filter(where: str, resolve, schema: pa.Schema) -> Optional[Tuple[pc.Expression, List[str]]]:
    """(the filter expression, the detail columns it reads) of the WHERE text `where`; None when it is outside
    the translated subset. `resolve(name parts)`: the detail column a (qualified) reference names, or None."""
    try:
        p = _Parser(_tokens(where), resolve, schema)
        expr = p.parse()
    except _Unsupported:
        return None
    return expr, sorted(p.columns)
