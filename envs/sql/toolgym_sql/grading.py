"""Comparison rules for SQL answers and database states (no toolgym, no MCP: plain data in, bool out).

* Result sets (execution match): same number of columns and rows; rows compared as a multiset unless the gold
  query orders its result (a top-level ORDER BY), then in order. Numbers compare with a tolerance
  (relative 1e-6 or absolute 1e-4, so 3 == 3.0 and SQLite floats == PostgreSQL NUMERIC); booleans are 0/1;
  dates compare as ISO text. Column names are ignored (aliases are free), column order is not.
* States (state match, tau-bench style): for every table the multiset of rows must be equal under the same value
  rules, and the table set and column names must be equal.
"""

from __future__ import annotations

import decimal
import hashlib
import json
import math
import re
from typing import Any

REL_TOL, ABS_TOL = 1e-6, 1e-4


def _num(v: Any) -> float | None:
    if isinstance(v, bool):
        return float(v)
    if isinstance(v, (int, float, decimal.Decimal)):
        return float(v)
    return None


def _key(v: Any) -> tuple:
    n = _num(v)
    if v is None:
        return (0, "")
    if n is not None:
        return (1, round(n, 3) if math.isfinite(n) else n, "")
    return (2, 0, str(v))


def values_equal(a: Any, b: Any) -> bool:
    na, nb = _num(a), _num(b)
    if na is not None and nb is not None:
        return math.isclose(na, nb, rel_tol=REL_TOL, abs_tol=ABS_TOL)
    if a is None or b is None:
        return a is None and b is None
    return str(a) == str(b)


def rows_equal(got: list[list[Any]], gold: list[list[Any]], ordered: bool = False) -> bool:
    if len(got) != len(gold):
        return False
    if any(len(r) != len(gold[0]) for r in got) if gold else False:
        return False
    if not ordered:
        got = sorted(got, key=lambda r: tuple(_key(v) for v in r))
        gold = sorted(gold, key=lambda r: tuple(_key(v) for v in r))
    return all(len(a) == len(b) and all(values_equal(x, y) for x, y in zip(a, b)) for a, b in zip(got, gold))


_ORDER_BY = re.compile(r"\border\s+by\b", re.I)


def is_ordered(sql: str) -> bool:
    """True when the query has an ORDER BY at nesting depth 0 (the result order is part of the answer)."""
    depth, buf = 0, []
    in_str = False
    for ch in sql:
        if ch == "'":
            in_str = not in_str
        if in_str:
            continue
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif depth == 0:
            buf.append(ch)
    return bool(_ORDER_BY.search("".join(buf)))


def states_equal(got: dict[str, dict], goal: dict[str, dict]) -> tuple[bool, str]:
    """Compare two dumps {table: {columns, rows}}; returns (equal, first difference in words)."""
    if set(got) != set(goal):
        return False, f"tables differ: extra {sorted(set(got) - set(goal))}, missing {sorted(set(goal) - set(got))}"
    for t in sorted(goal):
        if [c.lower() for c in got[t]["columns"]] != [c.lower() for c in goal[t]["columns"]]:
            return False, f"columns of {t} differ"
        if not rows_equal(got[t]["rows"], goal[t]["rows"]):
            return False, f"rows of {t} differ ({len(got[t]['rows'])} vs {len(goal[t]['rows'])} rows)"
    return True, ""


def state_digest(dump: dict[str, dict]) -> str:
    """A digest of a dump that is stable across SQLite and PostgreSQL (numbers rounded to 1e-3, rows sorted)."""
    canon = {}
    for t, d in sorted(dump.items()):
        rows = sorted(([_key(v) for v in r] for r in d["rows"]))
        canon[t] = [[c.lower() for c in d["columns"]], rows]
    return hashlib.sha256(json.dumps(canon, default=str).encode()).hexdigest()[:16]
