"""Stand-ins for the SQLite built-ins that one call can keep busy for seconds, so that the limits hold inside a call.

SQLite checks its progress handler (the statement time limit) between VM instructions, at jumps; a single function
call, or a row of them with no jump in between, is never interrupted. With values capped at `max_value_bytes`
(SQLITE_LIMIT_LENGTH) most built-ins are linear and fast, but these are not (measured with SQLite 3.40, 1 MB values):

| built-in | cost of one call | without a stand-in |
|---|---|---|
| `printf('%.*c', n, 'x')`, `format` | loops `n` times even after the output hit the size cap | n = 2^31: 4.2 s, NULL |
|  `printf('%1000000000d', 1)` | (fast, but NULL rather than an error) | |
| `instr(x, y)` | len(x) x len(y) | 1 MB x 0.5 MB: 4.6 s |
| `replace(x, y, z)` | len(x) x len(y) | 1 MB x 0.5 MB: 4.5 s |
| `x LIKE p`, `x GLOB p` | len(x) x len(p) | 1 MB x 49 KB: 42 s |
| `trim(x, y)`, `ltrim`, `rtrim` | len(x) x len(y) | 0.1 MB x 8 KB: 1.1 s |
| `json_patch(a, b)` | keys(a) x keys(b) | 2 x 0.3 MB: 1.0 s |

Each stand-in is a Python function registered under the built-in's name on the session connection (SQLite lets an
application function override a built-in). It first checks the statement deadline (so a row of a thousand calls
still times out), then either computes the result exactly in linear time (`instr`, `replace`, `trim` on text), or
refuses a call whose work estimate -- the product of its input sizes -- exceeds `max_call_work`, or a printf whose
width or precision forces an output over `max_value_bytes`, and otherwise hands the call to the real built-in on a small helper
connection with the same limits (exact semantics, ~1 us per call).

The costs: a guarded call runs through Python (about 1 us, and it holds the GIL), LIKE can no longer use an index,
and the session connection needs `trusted_schema=ON` (with it OFF, SQLite refuses application functions inside
views, CHECK constraints and indexes, which would break every view that uses LIKE or replace()). The authorizer
still sees every function and table a view expands to, and the dangerous built-ins are DIRECTONLY regardless.
"""

from __future__ import annotations

import functools
import math
import re
import sqlite3
import time
from collections.abc import Callable
from typing import Any

INT64_MAX, INT64_MIN = 2**63 - 1, -(2**63)


class GuardStop(Exception):
    """Raised inside a stand-in; the session reads `guard_error` for the message the model sees."""


def _c_int(v: int) -> int:
    """C's `(int)` of an int64: the low 32 bits, signed."""
    return ((v + 2**31) % 2**32) - 2**31


_PRECISION_IS_LENGTH = set("cdiuxXoprfeE")  # conversions whose output is at least `precision` characters long


def printf_min_length(fmt: str, args: tuple[Any, ...], to_int64: Callable[[Any], int]) -> int:
    """The largest length one conversion of SQLite's `printf(fmt, *args)` is forced to by its width or precision:
    a lower bound on the output's size, known before formatting. (`%c`'s precision is a repeat count that SQLite
    3.40 loops over even after the output hit the size cap: 4 s for 2^31.) A port of the format parsing in
    SQLite's `sqlite3_str_vappendf` (printf.c) with `SQLITE_PRINTF_SQLFUNC` arguments: flags, `*` and digit widths
    and precisions (digits wrap at 32 bits, `*` takes the low 32 bits of the argument's int64 value), `l`/`ll`, and
    which conversions consume an argument; an unknown conversion ends the formatting, as in SQLite."""
    n = len(fmt)
    at = lambda k: fmt[k] if 0 <= k < n else ""  # noqa: E731 - C's *fmt with a terminating NUL
    used = 0
    worst = 0

    def int_arg() -> int:
        nonlocal used
        if used >= len(args):
            return 0
        used += 1
        return _c_int(to_int64(args[used - 1]))

    f = 0
    while f < n:
        f = fmt.find("%", f)
        if f < 0:
            break
        f += 1
        c = at(f)
        if c == "":
            break
        width, precision, done = 0, -1, False
        while True:
            if c in ("-", "+", " ", "#", "!", "0", ","):
                pass
            elif c == "l":
                f += 1
                c = at(f)
                if c == "l":
                    f += 1
                    c = at(f)
                done = True
            elif "1" <= c <= "9":
                wx = ord(c) - 48
                f += 1
                c = at(f)
                while "0" <= c <= "9":
                    wx = (wx * 10 + ord(c) - 48) & 0xFFFFFFFF
                    f += 1
                    c = at(f)
                width = wx & 0x7FFFFFFF
                if c != "." and c != "l":
                    done = True
                else:
                    f -= 1
            elif c == "*":
                w = int_arg()
                width = (-w if w >= -2147483647 else 0) if w < 0 else w
                c = at(f + 1)
                if c != "." and c != "l":
                    f += 1
                    done = True
            elif c == ".":
                f += 1
                c = at(f)
                if c == "*":
                    p = int_arg()
                    if p < 0:
                        p = -p if p >= -2147483647 else -1
                    precision = p
                    f += 1
                    c = at(f)
                else:
                    px = 0
                    while "0" <= c <= "9":
                        px = (px * 10 + ord(c) - 48) & 0xFFFFFFFF
                        f += 1
                        c = at(f)
                    precision = px & 0x7FFFFFFF
                if c == "l":
                    f -= 1
                else:
                    done = True
            else:
                done = True
            if done:
                break
            f += 1
            c = at(f)
            if c == "":
                break
        if c == "" or c not in "dsgzqQwcouxXfeEGinp%r":
            break  # end of text, an unknown or an internal-only conversion: SQLite stops formatting here
        if c != "n":
            worst = max(worst, width)
        if c in _PRECISION_IS_LENGTH:
            worst = max(worst, precision)
        if c not in "%n":
            used += 1
        f += 1
    return worst


def _size(v: Any) -> int:
    if isinstance(v, (str, bytes)):
        return len(v)
    return 0 if v is None else 24


@functools.lru_cache(maxsize=64)
def _char_class(chars: str) -> re.Pattern[str]:
    return re.compile("[" + "".join(re.escape(ch) for ch in sorted(set(chars))) + "]*")


def _strip(x: str, chars: str, left: bool, right: bool) -> str:
    """Python's strip for a short set; a compiled character class (linear) for a long one."""
    if len(chars) <= 64:
        return x.strip(chars) if left and right else x.lstrip(chars) if left else x.rstrip(chars)
    cls = _char_class(chars)
    start = cls.match(x).end() if left else 0
    end = len(x) - cls.match(x[::-1]).end() if right else len(x)
    return x[start:max(start, end)]


class Guards:
    """The stand-ins of one session: `session` provides `deadline`, `limits` and receives `guard_error`."""

    def __init__(self, session: Any, helper: sqlite3.Connection) -> None:
        self.session, self.helper = session, helper

    # --- plumbing -------------------------------------------------------------------------------------------
    def _stop(self, kind: str, message: str) -> GuardStop:
        self.session.guard_error = (kind, message)
        return GuardStop(message)

    def _tick(self) -> None:
        if time.monotonic() > self.session.deadline:
            raise self._stop("timeout", "")

    def _work(self, name: str, *values: Any) -> None:
        work = math.prod(max(1, _size(v)) for v in values)
        budget = self.session.limits.max_call_work
        if work > budget:
            sizes = " x ".join(f"{_size(v):,}" for v in values)
            raise self._stop("refused", f"{name}() on inputs this large ({sizes} characters) exceeds the per-call "
                                        f"work limit ({budget:,}); use shorter values or patterns")

    def _too_big(self, name: str) -> GuardStop:
        return self._stop("refused", f"{name}() would build a value over the size limit of "
                                     f"{self.session.limits.max_value_bytes:,} bytes (string or blob too big)")

    def _native(self, name: str, sql: str, args: tuple[Any, ...]) -> Any:
        try:
            return self.helper.execute(sql, args).fetchone()[0]
        except sqlite3.DataError:
            raise self._too_big(name) from None
        except MemoryError:
            raise self._stop("refused", f"{name}(): out of memory: SQLite's memory cap of "
                                        f"{self.session.limits.sqlite_heap_mb} MB for all sessions is reached") from None
        except sqlite3.Error as e:
            msg = str(e)
            if "pattern too complex" in msg:
                raise self._stop("refused", f"{msg}: the LIKE/GLOB pattern is longer than the limit of "
                                            f"{self.session.limits.max_like_pattern_bytes:,} bytes") from None
            raise self._stop("error", msg) from None

    def _to_int64(self, v: Any) -> int:
        """sqlite3_value_int64 of a Python value, as SQLite would compute it."""
        if v is None:
            return 0
        if isinstance(v, int):
            return max(INT64_MIN, min(INT64_MAX, v))
        if isinstance(v, float):
            return 0 if v != v else int(max(INT64_MIN, min(INT64_MAX, v)))
        return int(self.helper.execute("SELECT CAST(? AS INTEGER)", (v,)).fetchone()[0] or 0)

    # --- the stand-ins --------------------------------------------------------------------------------------
    def printf(self, *args: Any) -> Any:
        self._tick()
        if args and isinstance(args[0], (str, bytes)):
            fmt = args[0] if isinstance(args[0], str) else args[0].decode("utf-8", "replace")
            if "%" in fmt and printf_min_length(fmt, args[1:], self._to_int64) > self.session.limits.max_value_bytes:
                raise self._too_big("printf")
        return self._native("printf", f"SELECT printf({', '.join('?' * len(args))})", args)

    def instr(self, x: Any, y: Any) -> Any:
        self._tick()
        if x is None or y is None:
            return None
        if (type(x) is str and type(y) is str) or (type(x) is bytes and type(y) is bytes):
            return x.find(y) + 1  # characters for text, bytes for blobs, 1 for an empty needle: as SQLite
        self._work("instr", x, y)
        return self._native("instr", "SELECT instr(?, ?)", (x, y))

    def replace(self, x: Any, y: Any, z: Any) -> Any:
        self._tick()
        if type(x) is str and type(y) is str and type(z) is str:
            if not y:
                return x
            count = x.count(y)
            if count:
                out = len(x.encode()) + count * (len(z.encode()) - len(y.encode()))
                if out > self.session.limits.max_value_bytes:
                    raise self._too_big("replace")
            return x.replace(y, z)
        self._work("replace", x, y)
        return self._native("replace", "SELECT replace(?, ?, ?)", (x, y, z))

    def _trim(self, name: str, x: Any, y: Any, left: bool, right: bool) -> Any:
        self._tick()
        if type(x) is str and type(y) is str:
            return _strip(x, y, left, right)
        self._work(name, x, y)
        return self._native(name, f"SELECT {name}(?, ?)", (x, y))

    def like(self, *args: Any) -> Any:
        self._tick()
        self._work("like", args[0], args[1])
        return self._native("like", f"SELECT like({', '.join('?' * len(args))})", args)

    def glob(self, pattern: Any, x: Any) -> Any:
        self._tick()
        self._work("glob", pattern, x)
        return self._native("glob", "SELECT glob(?, ?)", (pattern, x))

    def json_patch(self, a: Any, b: Any) -> Any:
        self._tick()
        self._work("json_patch", a, b)
        return self._native("json_patch", "SELECT json_patch(?, ?)", (a, b))

    def install(self, conn: sqlite3.Connection) -> None:
        det = {"deterministic": True}
        conn.create_function("printf", -1, self.printf, **det)
        try:
            self.helper.execute("SELECT format('%d', 1)")
            conn.create_function("format", -1, self.printf, **det)  # an alias of printf since SQLite 3.38
        except sqlite3.Error:
            pass
        conn.create_function("instr", 2, self.instr, **det)
        conn.create_function("replace", 3, self.replace, **det)
        conn.create_function("trim", 2, lambda x, y: self._trim("trim", x, y, True, True), **det)
        conn.create_function("ltrim", 2, lambda x, y: self._trim("ltrim", x, y, True, False), **det)
        conn.create_function("rtrim", 2, lambda x, y: self._trim("rtrim", x, y, False, True), **det)
        conn.create_function("like", 2, self.like, **det)
        conn.create_function("like", 3, self.like, **det)
        conn.create_function("glob", 2, self.glob, **det)
        try:
            self.helper.execute("SELECT json_patch('{}', '{}')")
            conn.create_function("json_patch", 2, self.json_patch, **det)
        except sqlite3.Error:
            pass
