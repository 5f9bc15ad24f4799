"""Per-session databases with safety limits, for SQLite and PostgreSQL.

A `Backend` owns a *template* (the fixture or the user's database) and clones it for every session:

* SQLite: the template is an in-memory database; a session gets its own private in-memory copy (sqlite3 backup
  API, ~1 ms). There is no file a session could name, ATTACH is refused, and the connection carries an
  authorizer that allows only reads in read calls, only table-level DDL/DML in write calls, denies PRAGMA, ATTACH,
  DETACH, virtual tables, triggers, transactions and dangerous functions (load_extension, readfile, writefile, ...),
  a progress handler that interrupts statements past the time limit, and a page-count cap on the database size.
  Inside a call: SQLite's own limits (`sqlite3.Connection.setlimit`: value size, SQL size, expression depth,
  compound terms, LIKE pattern size, program size, no attached databases, few parameters), stand-ins for the
  built-ins whose one call can run long (`mcp_server_sql.guards`), and a process-wide cap on SQLite's heap
  (`PRAGMA hard_heap_limit`), so a huge value is refused at once instead of being built.
* PostgreSQL: the template is a database (`toolgym_tpl_<fixture>_s<seed>`, built once and reused, or a database
  the user names). A session gets `CREATE DATABASE <s> TEMPLATE <tpl>` plus its own LOGIN role with CONNECT on that
  database only (no superuser, no createdb/createrole, no pg_read_server_files); a background thread keeps
  `pool_size` clones ready so that opening a session is a connect rather than a CREATE DATABASE. SQL cannot reference another
  database in PostgreSQL, so the role and the database together confine the session. Reads run in READ ONLY
  transactions through a server-side cursor (streams, so a billion-row result stops at the row cap); every call
  sets `statement_timeout`, `work_mem` and `standard_conforming_strings` for its transaction; the role carries a
  `temp_file_limit` (when the admin may set it); model statements go through the extended protocol (one statement
  per message, whatever the text says).

Both: results are fetched row by row with a budget (`max_fetch_mb`); a value over `max_value_bytes` is refused
(PostgreSQL: when it arrives), and `run_query` keeps only the part of each cell it shows.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import decimal
import heapq
import itertools
import logging
import os
import queue
import re
import secrets
import sqlite3
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.pool import NullPool, StaticPool

from mcp_server_sql.guards import Guards
from mcp_server_sql.sqlcheck import (
    PG_REFUSED_FUNCTIONS,
    SQLRefused,
    check_sql,
    expanded_size,
    refused_functions,
)

log = logging.getLogger("mcp_server_sql")


@dataclass
class Limits:
    """What one call may do. The in-call limits and their reasons are tabled in docs/security.md."""

    timeout_s: float = 5.0
    max_rows: int = 50  # rows shown per result (the model may ask for fewer, or up to hard_max_rows)
    hard_max_rows: int = 500
    max_cell_chars: int = 200
    max_result_chars: int = 20_000
    read_only: bool = False
    max_db_mb: int = 64  # SQLite only: page-count cap of a session database
    # --- inside one call ---
    max_value_bytes: int = 1_000_000  # one string/blob (SQLite: SQLITE_LIMIT_LENGTH, also a row's record; PG: on fetch)
    max_sql_bytes: int = 100_000  # the statement text, UTF-8 (both; SQLite: SQLITE_LIMIT_SQL_LENGTH)
    max_expr_depth: int = 100  # SQLite: SQLITE_LIMIT_EXPR_DEPTH (default 1000)
    max_compound_select: int = 50  # SQLite: terms of a UNION/INTERSECT/EXCEPT chain (default 500)
    max_like_pattern_bytes: int = 1_000  # SQLite: SQLITE_LIMIT_LIKE_PATTERN_LENGTH (default 50,000)
    max_vdbe_ops: int = 25_000  # SQLite: instructions of one compiled statement, SQLITE_LIMIT_VDBE_OP (default 250M)
    max_call_work: int = 100_000_000  # SQLite: size product allowed to one LIKE/GLOB/instr/trim/... call (guards.py)
    max_fetch_mb: int = 64  # both: text/blob bytes (8 per other value) one call may fetch into the server
    sqlite_heap_mb: int = 1024  # SQLite: process-wide PRAGMA hard_heap_limit, all sessions together (0: off)
    pg_work_mem_mb: int = 4  # PostgreSQL: work_mem of every transaction (memory per sort/hash node)
    pg_temp_file_mb: int = 256  # PostgreSQL: temp_file_limit of the session role (needs a superuser admin)
    max_expanded_tokens: int = 10_000  # SQLite: tokens the compiler copies for CTE/view references (compile time)
    # --- grading (query_json, dump_tables): refused past these, never cut ---
    grade_max_rows: int = 10_000  # rows of one query_json result, and of each dumped table
    grade_max_cell_chars: int = 10_000  # one value (text; blobs: hex digits)
    grade_max_mb: int = 8  # text/blob megabytes of one grading answer (blobs count twice: they travel as hex)


class SQLTimeout(Exception):
    pass


class LaneExceeded(Exception):
    """A call given a short lane time (`SessionDB.lane_s`, the scheduler's reserved lane) ran past it and was stopped
    and rolled back; the scheduler runs it again in the general lane."""


KILL_GRACE_S = 2.0  # PostgreSQL: a call still running this long after its cancel has its server process terminated


class Watchdog:
    """One thread for the deadlines of every session's calls: `arm(when, fn)` runs `fn()` at `time.monotonic()` time
    `when` unless `disarm`ed first. Callbacks run on this thread and must be quick (or start a thread)."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Callable[[], None]]] = []
        self._disarmed: set[int] = set()
        self._cv = threading.Condition()
        self._seq = itertools.count(1)
        self._thread: threading.Thread | None = None

    def arm(self, when: float, fn: Callable[[], None]) -> int:
        with self._cv:
            seq = next(self._seq)
            heapq.heappush(self._heap, (when, seq, fn))
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._loop, name="sql-watchdog", daemon=True)
                self._thread.start()
            self._cv.notify()
        return seq

    def disarm(self, seq: int) -> None:
        with self._cv:
            self._disarmed.add(seq)

    def _loop(self) -> None:
        while True:
            with self._cv:
                while True:
                    while self._heap and self._heap[0][1] in self._disarmed:
                        self._disarmed.discard(heapq.heappop(self._heap)[1])
                    now = time.monotonic()
                    if self._heap and self._heap[0][0] <= now:
                        fn = heapq.heappop(self._heap)[2]
                        break
                    self._cv.wait(self._heap[0][0] - now if self._heap else None)
            try:
                fn()
            except Exception:  # a failed cancel must not stop the other deadlines
                log.exception("watchdog callback failed")


WATCHDOG = Watchdog()


def in_parallel(fn: Callable[[Any], Any], items: list[Any], workers: int = 8) -> None:
    """`fn(item)` for every item, on up to `workers` threads; one after another when threads cannot start any more
    (at interpreter exit, where the registry's atexit close runs)."""
    if len(items) > 1:
        try:
            with ThreadPoolExecutor(max_workers=min(workers, len(items)), thread_name_prefix="sql-close") as pool:
                list(pool.map(fn, items))
            return
        except RuntimeError:  # "cannot schedule new futures after interpreter shutdown"
            pass
    for item in items:
        fn(item)


class SQLError(Exception):
    """An error reported by the database (syntax, constraint, unknown column, ...)."""


@dataclass
class Result:
    columns: list[str]
    rows: list[tuple]
    truncated: bool = False
    rowcount: int = -1  # for writes


def py_value(v: Any) -> Any:
    """A JSON-friendly value: Decimal -> float, dates -> ISO text, bytes -> hex."""
    if isinstance(v, decimal.Decimal):
        return int(v) if v == v.to_integral_value() and abs(v) < 2**53 else float(v)
    if isinstance(v, (dt.date, dt.datetime, dt.time)):
        return v.isoformat()
    if isinstance(v, (bytes, bytearray, memoryview)):
        return bytes(v).hex()
    if isinstance(v, bool):
        return int(v)
    return v


def _quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


class SessionDB:
    """One session's database. All methods are blocking and serialised by `lock`."""

    dialect = "?"

    def __init__(self, limits: Limits):
        self.limits = limits
        self.lock = threading.Lock()
        self.engine: sa.Engine  # for schema inspection
        self.closed = False
        # the call in progress: its deadline (the earlier of the time limit and the lane time) and whether the lane
        # time is the earlier one; `lane_s` is set by the scheduler for calls in its reserved lane
        self.lane_s: float | None = None
        self.deadline = float("inf")
        self._lane_until = float("inf")
        self._lane_first = False

    @contextlib.contextmanager
    def _locked(self):
        """Hold the session's lock for one operation; the operation's lane time (if any) starts now."""
        with self.lock:
            self._lane_until = time.monotonic() + self.lane_s if self.lane_s else float("inf")
            try:
                yield
            finally:
                self._lane_until = float("inf")

    # --- the public operations (each holds the lock) ---------------------------------------------------
    def query(self, sql: str, max_rows: int | None = None, cell_chars: int | None = None) -> Result:
        """A read query. With `cell_chars`, longer text/blob values are cut to that many characters (bytes) as they
        are fetched: the caller shows no more, and the server keeps no more."""
        stmt = self._check(sql, "read")
        n = self._row_cap(max_rows)
        with self._locked():
            return self._query(stmt, n, cell_chars=cell_chars)

    def execute(self, sql: str) -> Result:
        if self.limits.read_only:
            raise SQLRefused("the server is in read-only mode: writes are not allowed")
        stmt = self._check(sql, "write")
        with self._locked():
            return self._execute(stmt)

    def explain(self, sql: str) -> Result:
        stmt = self._check(sql, "read")
        with self._locked():
            return self._explain(stmt)

    def tables(self) -> list[tuple[str, str, int]]:
        with self._locked():
            names = self._table_names()
            out = []
            for kind, name in names:
                r = self._query(f"SELECT COUNT(*) FROM {self._qname(name)}", 1, internal=True)
                out.append((name, kind, int(r.rows[0][0])))
            return out

    def describe(self, table: str, sample_rows: int = 3) -> dict[str, Any]:
        with self._locked():
            names = {n for _, n in self._table_names()}
            if table not in names:
                # be forgiving on case, like SQL itself
                match = [n for n in names if n.lower() == table.lower()]
                if not match:
                    raise SQLRefused(f"no table or view named {table!r}; tables: {', '.join(sorted(names))}")
                table = match[0]
            info = self._inspect(table)
            info["sample"] = self._query(f"SELECT * FROM {self._qname(table)}", max(0, min(sample_rows, 20)),
                                         internal=True, cell_chars=self.limits.max_cell_chars + 1)
            return info

    def dump(self, tables: list[str] | None = None) -> dict[str, dict[str, Any]]:
        """Every row of the given (default: all) base tables, JSON-friendly: {table: {columns, rows}}. For graders:
        each table at most `grade_max_rows` rows, each value at most `grade_max_cell_chars`, all of them together at
        most `grade_max_mb`; past any of these the dump is refused (`SQLRefused` starting "grading:")."""
        with self._locked():
            names = [n for k, n in self._table_names() if k == "table"]
            if tables:
                unknown = set(tables) - set(names)
                if unknown:
                    raise SQLRefused(f"unknown tables: {sorted(unknown)}")
                names = [n for n in names if n in tables]
            out = {}
            budget = [self.limits.grade_max_mb * 1024 * 1024]
            for name in names:
                r = self._query(f"SELECT * FROM {self._qname(name)}", self.limits.grade_max_rows, internal=True,
                                grade=budget)
                if r.truncated:
                    raise SQLRefused(f"grading: table {name} has more than {self.limits.grade_max_rows:,} rows "
                                     "(the graders' row cap, --grade-max-rows)")
                out[name] = {"columns": r.columns, "rows": [[py_value(v) for v in row] for row in r.rows]}
            return out

    def query_all(self, sql: str, max_rows: int | None = None) -> Result:
        """A read query for graders: the same checks and time limit as `query`, and the graders' caps: each value at
        most `grade_max_cell_chars`, the whole at most `grade_max_mb`, at most `grade_max_rows` rows; past a cap the
        answer is refused (`SQLRefused` starting "grading:"), never cut. With `max_rows` (at most `grade_max_rows`)
        more rows than asked for give a `truncated` result instead."""
        cap = self.limits.grade_max_rows
        if max_rows is not None and not 1 <= max_rows <= cap:
            raise SQLRefused(f"grading: max_rows must be between 1 and {cap:,} (--grade-max-rows)")
        stmt = self._check(sql, "read")
        with self._locked():
            res = self._query(stmt, max_rows or cap, grade=[self.limits.grade_max_mb * 1024 * 1024])
        if res.truncated and max_rows is None:
            raise SQLRefused(f"grading: the result has more than {cap:,} rows (the graders' row cap, --grade-max-rows)")
        return res

    # --- helpers ----------------------------------------------------------------------------------------
    def _check(self, sql: str, kind: str) -> str:
        if isinstance(sql, str) and len(sql) * 4 > self.limits.max_sql_bytes:  # cheap test first, then exact
            size = len(sql.encode("utf-8", "surrogatepass"))
            if size > self.limits.max_sql_bytes:
                raise SQLRefused(f"the statement is {size:,} bytes long; the limit is {self.limits.max_sql_bytes:,}")
        return check_sql(sql, kind)

    def _fetch(self, cur, max_rows: int, cell_chars: int | None = None, chunk: int = 1,
               grade: list[int] | None = None) -> list[tuple]:
        """Up to `max_rows + 1` rows, `chunk` at a time, each value checked against `max_value_bytes` and counted
        against `max_fetch_mb` (text and blob lengths after the cut to `cell_chars`, 8 bytes for anything else).
        `grade`: a one-item list holding the graders' byte budget left, spent here: a value over
        `grade_max_cell_chars` or a total over the budget is refused instead of cut (graders compare whole values).
        Past the call's deadline between two chunks: the call's timeout (or lane) error."""
        rows: list[tuple] = []
        total, budget = 0, self.limits.max_fetch_mb * 1024 * 1024
        vmax = self.limits.max_value_bytes
        gcell = self.limits.grade_max_cell_chars
        while len(rows) <= max_rows:
            if time.monotonic() > self.deadline:
                raise self._stopped()
            batch = cur.fetchmany(min(chunk, max_rows + 1 - len(rows)))
            if not batch:
                break
            for row in batch:
                out = []
                for v in row:
                    if isinstance(v, (str, bytes, bytearray, memoryview)):
                        size = len(v)
                        if size > vmax or (isinstance(v, str) and size * 4 > vmax and len(v.encode()) > vmax):
                            raise SQLRefused(f"a value in the result is larger than the limit of {vmax:,} bytes; "
                                             "select a part of it (substr, left) or its length")
                        if cell_chars is not None and size > cell_chars:
                            v = v[:cell_chars] if isinstance(v, str) else bytes(v[: cell_chars // 2 + 1])
                            size = len(v)
                        if grade is not None:
                            shown = size if isinstance(v, str) else 2 * size  # blobs travel as hex
                            if shown > gcell:
                                raise SQLRefused(f"grading: a value of {shown:,} characters is over the graders' cap "
                                                 f"of {gcell:,} (--grade-max-cell-chars)")
                            grade[0] -= shown
                        total += size
                    elif isinstance(v, (list, dict, tuple)):  # PostgreSQL arrays and json
                        text = str(v)
                        if len(text) > vmax:
                            raise SQLRefused(f"a value in the result is larger than the limit of {vmax:,} bytes")
                        if grade is not None:
                            if len(text) > gcell:
                                raise SQLRefused(f"grading: a value of {len(text):,} characters is over the graders' "
                                                 f"cap of {gcell:,} (--grade-max-cell-chars)")
                            grade[0] -= len(text)
                        total += len(text)
                    else:
                        total += 8
                        if grade is not None:
                            grade[0] -= 8
                    out.append(v)
                if total > budget:
                    raise SQLRefused(f"the result holds more than {self.limits.max_fetch_mb} MB of values; select "
                                     "fewer rows or columns, or shorter values")
                if grade is not None and grade[0] < 0:
                    raise SQLRefused(f"grading: the answer holds more than {self.limits.grade_max_mb} MB of values "
                                     "(the graders' cap, --grade-max-mb)")
                rows.append(tuple(out))
        return rows

    def _stopped(self) -> Exception:
        """The error for a call stopped at its deadline: `LaneExceeded` when that was its lane time."""
        if self._lane_first:
            return LaneExceeded()
        return SQLTimeout(f"statement timed out after {self.limits.timeout_s:g} s and was cancelled")

    def _set_deadline(self, timeout_s: float) -> float:
        """Start a call: its deadline is `timeout_s` from now, or the lane time (`lane_s`) when that is shorter.
        Returns the time-limit deadline."""
        hard = time.monotonic() + timeout_s
        lane = self._lane_until
        self._lane_first = lane < hard
        self.deadline = min(hard, lane)
        return hard

    def _row_cap(self, max_rows: int | None) -> int:
        if max_rows is None:
            return self.limits.max_rows
        if max_rows < 1:
            raise SQLRefused("max_rows must be at least 1")
        if max_rows > self.limits.hard_max_rows:
            raise SQLRefused(f"max_rows may be at most {self.limits.hard_max_rows}; aggregate or page with LIMIT/OFFSET")
        return max_rows

    def _inspect(self, table: str) -> dict[str, Any]:
        insp = sa.inspect(self.engine)
        cols = insp.get_columns(table)
        try:
            pk = insp.get_pk_constraint(table).get("constrained_columns") or []
            fks = insp.get_foreign_keys(table)
        except Exception:  # views
            pk, fks = [], []
        return {
            "table": table,
            "columns": [(c["name"], str(c["type"]), c.get("nullable", True), c.get("default")) for c in cols],
            "primary_key": pk,
            "foreign_keys": [(fk["constrained_columns"], fk["referred_table"], fk["referred_columns"]) for fk in fks],
        }

    def _qname(self, name: str) -> str:
        """A table name for the server's own queries, qualified where a session could shadow it."""
        return _quote_ident(name)

    # backend hooks
    def _query(self, stmt: str, max_rows: int, internal: bool = False, cell_chars: int | None = None,
               grade: list[int] | None = None) -> Result: ...
    def _execute(self, stmt: str) -> Result: ...
    def _explain(self, stmt: str) -> Result: ...
    def _table_names(self) -> list[tuple[str, str]]: ...
    def close(self) -> None: ...


# ----------------------------------------------------------------------------------------------------------
# SQLite

A = sqlite3
_READ_ACTIONS = {A.SQLITE_SELECT, A.SQLITE_READ, A.SQLITE_FUNCTION, A.SQLITE_RECURSIVE}
_WRITE_ACTIONS = _READ_ACTIONS | {
    A.SQLITE_INSERT, A.SQLITE_UPDATE, A.SQLITE_DELETE, A.SQLITE_CREATE_TABLE, A.SQLITE_CREATE_INDEX,
    A.SQLITE_CREATE_VIEW, A.SQLITE_DROP_TABLE, A.SQLITE_DROP_INDEX, A.SQLITE_DROP_VIEW, A.SQLITE_ALTER_TABLE,
    A.SQLITE_REINDEX, A.SQLITE_ANALYZE,
}
_DENIED_FUNCTIONS = {"load_extension", "readfile", "writefile", "edit", "fts3_tokenizer", "zipfile", "sqlar_compress",
                     "sqlar_uncompress", "shell", "system", "eval", "sqlite_dbpage", "sqlite_dbdata"}
_ACTION_NAMES = {getattr(A, n): n[len("SQLITE_"):].replace("_", " ") for n in (
    "SQLITE_CREATE_INDEX SQLITE_CREATE_TABLE SQLITE_CREATE_TEMP_INDEX SQLITE_CREATE_TEMP_TABLE SQLITE_CREATE_TEMP_TRIGGER "
    "SQLITE_CREATE_TEMP_VIEW SQLITE_CREATE_TRIGGER SQLITE_CREATE_VIEW SQLITE_DELETE SQLITE_DROP_INDEX SQLITE_DROP_TABLE "
    "SQLITE_DROP_TEMP_INDEX SQLITE_DROP_TEMP_TABLE SQLITE_DROP_TEMP_TRIGGER SQLITE_DROP_TEMP_VIEW SQLITE_DROP_TRIGGER "
    "SQLITE_DROP_VIEW SQLITE_INSERT SQLITE_PRAGMA SQLITE_READ SQLITE_SELECT SQLITE_TRANSACTION SQLITE_UPDATE "
    "SQLITE_ATTACH SQLITE_DETACH SQLITE_ALTER_TABLE SQLITE_REINDEX SQLITE_ANALYZE SQLITE_CREATE_VTABLE "
    "SQLITE_DROP_VTABLE SQLITE_FUNCTION SQLITE_SAVEPOINT SQLITE_RECURSIVE").split()}
_SCHEMA_TABLES = ("sqlite_master", "sqlite_schema", "sqlite_temp_master")

# SQLite's limits per connection, from Limits fields; then the fixed ones: no attached database at all (ATTACH is
# refused earlier too), and few parameters (the server binds none; `?250000` alone would allocate 14 MB).
_SQLITE_LIMITS = [("max_value_bytes", "SQLITE_LIMIT_LENGTH"), ("max_sql_bytes", "SQLITE_LIMIT_SQL_LENGTH"),
                  ("max_expr_depth", "SQLITE_LIMIT_EXPR_DEPTH"), ("max_compound_select", "SQLITE_LIMIT_COMPOUND_SELECT"),
                  ("max_like_pattern_bytes", "SQLITE_LIMIT_LIKE_PATTERN_LENGTH"), ("max_vdbe_ops", "SQLITE_LIMIT_VDBE_OP")]
SQLITE_FIXED_LIMITS = {"SQLITE_LIMIT_ATTACHED": 0, "SQLITE_LIMIT_VARIABLE_NUMBER": 100}
# SQLite's messages for its limits -> the hint that follows "Refused:" (the message itself is kept)
_LIMIT_HINTS = [
    ("string or blob too big", "a value would exceed the size limit of {max_value_bytes:,} bytes (string or blob too big); "
                               "build smaller values"),
    ("expression tree is too large", "{msg}: the expression is nested too deeply (limit {max_expr_depth})"),
    ("too many terms in compound select", "{msg} (limit {max_compound_select}); split the query"),
    ("pattern too complex", "{msg}: the LIKE/GLOB pattern is longer than the limit of {max_like_pattern_bytes:,} bytes"),
    ("variable number must be between", "{msg}: the server binds no parameters"),
    ("too many sql variables", "{msg}: the server binds no parameters"),
    ("too many attached databases", "ATTACH is not allowed: a session can only use its own database"),
]


def apply_sqlite_limits(conn: sqlite3.Connection, limits: Limits) -> None:
    """Set the per-connection SQLite limits of `limits` (and the fixed ones) on `conn`."""
    if not hasattr(conn, "setlimit"):  # Python < 3.11
        log.warning("sqlite3.Connection.setlimit is missing (Python < 3.11): SQLite's in-call limits are not set")
        return
    for field, name in _SQLITE_LIMITS:
        conn.setlimit(getattr(sqlite3, name), int(getattr(limits, field)))
    for name, value in SQLITE_FIXED_LIMITS.items():
        conn.setlimit(getattr(sqlite3, name), value)


def set_sqlite_heap_limit(mb: int) -> int:
    """Cap SQLite's heap for the whole process (`PRAGMA hard_heap_limit`); it only ever lowers an existing cap.
    Returns the cap in force, in bytes (0: none)."""
    c = sqlite3.connect(":memory:")
    try:
        if mb > 0:
            c.execute(f"PRAGMA hard_heap_limit = {int(mb) * 1024 * 1024}")
        return int(c.execute("PRAGMA hard_heap_limit").fetchone()[0])
    finally:
        c.close()


class SqliteSession(SessionDB):
    dialect = "sqlite"

    def __init__(self, template: sqlite3.Connection, template_lock: threading.Lock, limits: Limits):
        super().__init__(limits)
        self.mode = "internal"
        self.denied: str | None = None
        self.guard_error: tuple[str, str] | None = None  # set by a stand-in (guards.py) that stopped a call
        self.deadline = float("inf")
        conn = sqlite3.connect(":memory:", check_same_thread=False, isolation_level=None)
        helper = sqlite3.connect(":memory:", check_same_thread=False, isolation_level=None, cached_statements=256)
        try:
            with template_lock:
                template.backup(conn)
            page = conn.execute("PRAGMA page_size").fetchone()[0]
            conn.execute(f"PRAGMA max_page_count = {max(64, limits.max_db_mb * 1024 * 1024 // page)}")
            conn.execute("PRAGMA foreign_keys = ON")
            # ON so that views, CHECKs and indexes may call the stand-ins of guards.py (application functions);
            # the authorizer still sees every function and table a view expands to (see guards.py)
            conn.execute("PRAGMA trusted_schema = ON")
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()  # parse the schema before the limits
        except MemoryError:
            conn.close()
            helper.close()
            raise SQLRefused(f"the server's SQLite memory cap ({limits.sqlite_heap_mb} MB for all sessions) is "
                             "reached: close sessions") from None
        apply_sqlite_limits(conn, limits)
        apply_sqlite_limits(helper, limits)
        self.helper = helper
        Guards(self, helper).install(conn)
        conn.set_authorizer(self._authorize)
        conn.set_progress_handler(self._progress, 2000)
        self.conn = conn
        self.engine = sa.create_engine("sqlite://", creator=lambda: conn, poolclass=StaticPool)

    def _authorize(self, action, arg1, arg2, dbname, source):
        if self.mode == "internal":
            return A.SQLITE_OK
        why = None
        if action == A.SQLITE_FUNCTION and arg2 and arg2.lower() in _DENIED_FUNCTIONS:
            why = f"function {arg2}() is not allowed (no file or extension access)"
        elif action == A.SQLITE_ATTACH:
            why = "ATTACH is not allowed: a session can only use its own database"
        elif action == A.SQLITE_PRAGMA:
            why = "PRAGMA is not allowed"
        elif dbname not in (None, "main") and action not in (A.SQLITE_FUNCTION, A.SQLITE_RECURSIVE, A.SQLITE_SELECT):
            why = f"access to database {dbname!r} is not allowed"
        elif action in (A.SQLITE_READ, A.SQLITE_UPDATE) and arg1 and arg1.lower() in _SCHEMA_TABLES:
            return A.SQLITE_OK  # schema (re)loading; direct writes to the schema are refused by SQLite itself
        elif action not in (_READ_ACTIONS if self.mode == "read" else _WRITE_ACTIONS):
            name = _ACTION_NAMES.get(action, str(action))
            why = (f"{name} is not allowed in a read query (use execute)" if self.mode == "read" and action in _WRITE_ACTIONS
                   else f"{name} is not allowed")
        if why:
            self.denied = why
            return A.SQLITE_DENY
        return A.SQLITE_OK

    def _progress(self) -> int:
        return 1 if time.monotonic() > self.deadline else 0

    def _views(self) -> dict[str, str]:
        """View name (lowercase) -> its CREATE VIEW text."""
        rows = self.conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'view'").fetchall()
        return {n.lower(): sql or "" for n, sql in rows}

    def _check_compile_size(self, stmt: str) -> None:
        """Refuse a statement whose size with its CTE and view references expanded is over `max_expanded_tokens`:
        SQLite copies a CTE or view body per reference while it prepares a statement, where neither the progress
        handler nor `interrupt()` stops it (measured, SQLite 3.40: 18 CTEs each naming the previous twice ran 46 s
        and took 383 MB before failing; `interrupt()` from another thread did not end it within 60 s)."""
        cap = self.limits.max_expanded_tokens
        if cap <= 0:
            return
        mode, self.mode = self.mode, "internal"
        try:
            views = self._views()
        finally:
            self.mode = mode
        size = expanded_size(stmt, views, "sqlite", limit=cap)
        if size > cap:
            raise SQLRefused(f"the statement is too complex to compile: its CTE and view references expand to over "
                             f"{cap:,} tokens (--max-expanded-tokens); name each CTE or view fewer times, or "
                             "materialize a part with CREATE TABLE ... AS")

    def _run(self, mode: str, fn, stmt: str | None = None):
        self.mode, self.denied, self.guard_error = mode, None, None
        self._set_deadline(self.limits.timeout_s if mode != "internal" else 60.0)
        timeout = self._stopped()
        try:
            if stmt is not None:
                self._check_compile_size(stmt)
            return fn()
        except MemoryError:
            raise SQLRefused(
                f"the statement needs more memory than allowed (its compiled program is over {self.limits.max_vdbe_ops:,} "
                f"instructions, or SQLite's memory cap of {self.limits.sqlite_heap_mb} MB for all sessions is reached); "
                "simplify it or work on smaller values") from None
        except (sqlite3.Error, sqlite3.Warning) as e:
            if self.guard_error:
                kind, msg = self.guard_error
                if kind == "timeout":
                    raise timeout from None
                raise (SQLRefused if kind == "refused" else SQLError)(msg) from None
            if self.denied:
                raise SQLRefused(self.denied) from None
            msg = str(e)
            if "interrupted" in msg:
                raise timeout from None
            if "full" in msg:
                raise SQLRefused(f"database size limit reached ({self.limits.max_db_mb} MB)") from None
            low = msg.lower()
            for needle, hint in _LIMIT_HINTS:
                if needle in low:
                    raise SQLRefused(hint.format(msg=msg, **vars(self.limits))) from None
            raise SQLError(msg) from None
        finally:
            self.mode, self.deadline = "internal", float("inf")

    def _query(self, stmt, max_rows, internal=False, cell_chars=None, grade=None):
        def go():
            cur = self.conn.execute(stmt)
            try:
                cols = [d[0] for d in cur.description or []]
                rows = self._fetch(cur, max_rows, cell_chars, grade=grade)
            finally:
                cur.close()
            return Result(cols, rows[:max_rows], truncated=len(rows) > max_rows)
        return self._run("internal" if internal else "read", go, None if internal else stmt)

    def _internal(self, sql: str) -> None:
        mode, self.mode = self.mode, "internal"
        try:
            self.conn.execute(sql)
        finally:
            self.mode = mode

    def _execute(self, stmt):
        def go():
            # in a transaction of its own, so that a statement stopped part-way (time limit, lane time, size cap)
            # leaves nothing behind, RETURNING rows included
            self._internal("BEGIN")
            try:
                cur = self.conn.execute(stmt)
                try:
                    cols = [d[0] for d in cur.description or []]
                    rows = self._fetch(cur, self.limits.max_rows, self.limits.max_cell_chars + 1) if cols else []
                    rest = False
                    while cols and cur.fetchone() is not None:  # finish RETURNING statements, keeping nothing
                        rest = True
                    n = cur.rowcount
                finally:
                    cur.close()
                self._internal("COMMIT")
            except BaseException:
                if self.conn.in_transaction:
                    with contextlib.suppress(sqlite3.Error):
                        self._internal("ROLLBACK")
                raise
            return Result(cols, rows[: self.limits.max_rows], truncated=len(rows) > self.limits.max_rows or rest,
                          rowcount=n)
        return self._run("write", go, stmt)

    def _explain(self, stmt):
        def go():
            cur = self.conn.execute("EXPLAIN QUERY PLAN " + stmt)
            rows = cur.fetchall()
            return Result(["plan"], [(r[-1],) for r in rows])
        return self._run("read", go, stmt)

    def _table_names(self):
        rows = self._run("internal", lambda: self.conn.execute(
            "SELECT type, name FROM sqlite_master WHERE type IN ('table','view') AND name NOT LIKE 'sqlite_%' ORDER BY name"
        ).fetchall())
        return [(t, n) for t, n in rows]

    def close(self):
        if not self.closed:
            self.closed = True
            self.engine.dispose()
            self.conn.close()
            self.helper.close()


class SqliteBackend:
    """Template: the fixture or a copy of a SQLite file/URL, held in memory; each session clones it."""

    dialect = "sqlite"

    def __init__(self, url: str | None, fixture: str | None, seed: int, limits: Limits):
        self.limits = limits
        self.heap_limit = set_sqlite_heap_limit(limits.sqlite_heap_mb)
        self.template = sqlite3.connect(":memory:", check_same_thread=False)
        self.lock = threading.Lock()
        if url:
            path = sa.engine.make_url(url).database
            if not path or path == ":memory:":
                raise ValueError(f"SQLite URL {url!r} names no file")
            src = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
            try:
                src.backup(self.template)
            except MemoryError:
                raise ValueError(f"{path} does not fit in SQLite's memory cap ({limits.sqlite_heap_mb} MB; every "
                                 "session holds a copy too): raise --sqlite-heap-mb") from None
            finally:
                src.close()
        else:
            from mcp_server_sql.fixtures import load_fixture

            eng = sa.create_engine("sqlite://", creator=lambda: self.template, poolclass=StaticPool)
            load_fixture(fixture or "business", eng, seed=seed)  # no dispose(): it would close the template
        self.template.commit()

    def new_session(self) -> SqliteSession:
        return SqliteSession(self.template, self.lock, self.limits)

    def close(self):
        self.template.close()


# ----------------------------------------------------------------------------------------------------------
# PostgreSQL

SESSION_PREFIX, BUILD_PREFIX = "tg_s_", "tg_b_"  # + <instance, 8 hex> + "_" + random hex
APP_PREFIX = "toolgym-sql/"  # + <instance>: the application_name of every connection of one server instance
_TAGGED = re.compile(r"^tg_[sb]_([0-9a-f]{8})_[0-9a-f]+$")


class PostgresSession(SessionDB):
    dialect = "postgresql"

    def __init__(self, backend: PostgresBackend, name: str, password: str, limits: Limits):
        super().__init__(limits)
        self.backend, self.name = backend, name
        url = backend.admin_url.set(username=name, password=password, database=name)
        self.engine = sa.create_engine(url, poolclass=NullPool, connect_args={"application_name": backend.app_name})
        self._raw: Any = None
        self.conn: Any = None  # psycopg.Connection, not autocommit
        self.backend_pid = 0
        # the call in progress, for the watchdog: its number (0: none) and why it was stopped
        self._cancel_lock = threading.Lock()
        self._active = 0
        self._calls = itertools.count(1)
        self.stop_reason: str | None = None
        self._connect()

    def _connect(self) -> None:
        self._raw = self.engine.raw_connection()  # keep the pool proxy alive: collecting it closes the connection
        self.conn = self._raw.driver_connection
        self.conn.autocommit = False
        self.backend_pid = self.conn.info.backend_pid

    def _drop_connection(self) -> None:
        """Close a broken connection (its server process ends, and with it every lock it held); the next call
        connects again."""
        raw, self._raw, self.conn = self._raw, None, None
        if raw is not None:
            with contextlib.suppress(Exception):
                raw.invalidate()
            with contextlib.suppress(Exception):
                raw.close()

    def _check(self, sql: str, kind: str) -> str:
        stmt = super()._check(sql, kind)
        refused_functions(stmt)  # the reviewed list; also revoked in the database when the admin may
        return stmt

    def _begin(self, read_only: bool):
        cur = self.conn.cursor()  # one round trip: all settings in one simple-protocol message
        ro = "SET TRANSACTION READ ONLY; " if read_only else ""
        # SET LOCAL every time, and the role back to the session's own: the values a session could have changed
        # (were set_config() not refused) count for nothing. The lexer of sqlcheck.py reads '...' without
        # backslash escapes, so the server must too.
        wm = f"SET LOCAL work_mem = '{int(self.limits.pg_work_mem_mb * 1024)}kB'; " if self.limits.pg_work_mem_mb > 0 else ""
        cur.execute(f"{ro}SET LOCAL ROLE NONE; SET LOCAL statement_timeout = {int(self.limits.timeout_s * 1000)}; "
                    f"{wm}SET LOCAL standard_conforming_strings = on")
        cur.close()

    def _qname(self, name: str) -> str:
        return "public." + _quote_ident(name)  # never a pg_temp table of the same name

    def _rollback(self) -> None:
        """Roll back, retrying once: psycopg can report a statement's error again on the first ROLLBACK (seen with
        temp_file_limit hit inside FETCH), leaving the transaction aborted. A connection that cannot roll back is
        closed (its server process ends, releasing whatever it held)."""
        import psycopg

        try:
            try:
                self.conn.rollback()
            except psycopg.Error:
                self.conn.rollback()
        except psycopg.Error:
            self._drop_connection()

    # --- the call deadline: a client-side watchdog the session cannot switch off -------------------------
    def _arm(self) -> tuple[int, int, int]:
        """Start a call: at its deadline the watchdog cancels the running statement (whatever `statement_timeout`
        the session managed to set, and across every FETCH of a cursor), and KILL_GRACE_S later terminates the
        server process if the call has not ended."""
        self._set_deadline(self.limits.timeout_s)
        with self._cancel_lock:
            call = next(self._calls)
            self._active, self.stop_reason = call, None
        reason = "lane" if self._lane_first else "timeout"
        t1 = WATCHDOG.arm(self.deadline, lambda: self._in_thread(self._cancel, call, reason))
        t2 = WATCHDOG.arm(self.deadline + KILL_GRACE_S, lambda: self._in_thread(self._terminate, call))
        return call, t1, t2

    def _disarm(self, armed: tuple[int, int, int]) -> None:
        call, t1, t2 = armed
        WATCHDOG.disarm(t1)
        WATCHDOG.disarm(t2)
        with self._cancel_lock:  # waits for a cancel being sent: it can never reach the next call's statement
            if self._active == call:
                self._active = 0
        self.deadline = float("inf")

    @staticmethod
    def _in_thread(fn, *args) -> None:
        threading.Thread(target=fn, args=args, daemon=True).start()

    def _cancel(self, call: int, reason: str) -> None:
        with self._cancel_lock:
            if self._active != call or self.conn is None:
                return
            self.stop_reason = reason
            try:
                if hasattr(self.conn, "cancel_safe"):
                    self.conn.cancel_safe(timeout=KILL_GRACE_S)
                else:
                    self.conn.cancel()
            except Exception as e:  # noqa: BLE001 - the terminate that follows still ends it
                log.warning("cancel of session %s failed: %s", self.name, e)

    def _terminate(self, call: int) -> None:
        with self._cancel_lock:
            if self._active != call:
                return
            self.stop_reason = self.stop_reason or "timeout"
            pid = self.backend_pid
        log.warning("session %s: call still running %.0f s after its cancel; terminating its server process",
                    self.name, KILL_GRACE_S)
        with contextlib.suppress(Exception), self.backend.admin.connect() as c:
            c.exec_driver_sql("SELECT pg_terminate_backend(%s)", (pid,))

    def _wrap(self, fn):
        import psycopg

        if self.conn is None or self.conn.closed:
            try:
                self._connect()
            except sa.exc.DBAPIError as e:
                raise SQLError(f"cannot connect to the session database: {str(e.orig).strip().splitlines()[0]}") from None
        armed = self._arm()
        try:
            out = fn()
            self.conn.commit()
            return out
        except psycopg.errors.QueryCanceled:
            self._rollback()
            if self.stop_reason == "lane":
                raise LaneExceeded() from None
            raise SQLTimeout(f"statement timed out after {self.limits.timeout_s:g} s and was cancelled") from None
        except psycopg.errors.InsufficientPrivilege as e:
            self._rollback()
            raise SQLRefused(f"permission denied: {str(e).splitlines()[0]}") from None
        except psycopg.errors.ReadOnlySqlTransaction:
            self._rollback()
            raise SQLRefused("writes are not allowed in a read query (use execute)") from None
        except psycopg.errors.ConfigurationLimitExceeded as e:  # temp_file_limit
            self._rollback()
            raise SQLRefused(f"{str(e).splitlines()[0]}: the statement's temporary files (sorts, hashes larger than "
                             f"work_mem = {self.limits.pg_work_mem_mb} MB) are over the limit; use less data") from None
        except (psycopg.errors.ProgramLimitExceeded, psycopg.errors.OutOfMemory) as e:
            self._rollback()
            raise SQLRefused(f"{str(e).splitlines()[0]} (a value or the statement is too large)") from None
        except (SQLRefused, SQLTimeout, LaneExceeded):
            self._rollback()
            raise
        except psycopg.Error as e:
            if self.conn is None or self.conn.closed or self.conn.broken:
                self._drop_connection()
                if self.stop_reason == "lane":
                    raise LaneExceeded() from None
                if self.stop_reason:
                    raise SQLTimeout(f"statement timed out after {self.limits.timeout_s:g} s; its server process "
                                     "was terminated") from None
                raise SQLError(f"the connection to the database was lost ({str(e).strip().splitlines()[0]}); "
                               "the next call connects again") from None
            self._rollback()
            raise SQLError(str(e).strip().splitlines()[0]) from None
        except BaseException:
            self._rollback()
            raise
        finally:
            self._disarm(armed)

    def _query(self, stmt, max_rows, internal=False, cell_chars=None, grade=None):
        def go():
            self._begin(read_only=True)
            cur = self.conn.cursor(name=f"c_{secrets.token_hex(4)}")  # DECLARE: extended protocol, one statement
            try:
                cur.execute(stmt)
                rows = self._fetch(cur, max_rows, cell_chars, chunk=16, grade=grade)
                cols = [d.name for d in cur.description or []]
            finally:
                with contextlib.suppress(Exception):
                    cur.close()
            return Result(cols, rows[:max_rows], truncated=len(rows) > max_rows)
        return self._wrap(go)

    def _execute(self, stmt):
        def go():
            self._begin(read_only=False)
            cur = self.conn.cursor()
            # prepare=True: the extended protocol, which runs one statement (a text without parameters would go
            # through the simple protocol, which runs all of them)
            cur.execute(stmt, prepare=True)
            cols = [d.name for d in cur.description or []]
            rows = self._fetch(cur, self.limits.max_rows, self.limits.max_cell_chars + 1, chunk=16) if cols else []
            n = cur.rowcount
            cur.close()
            return Result(cols, rows[: self.limits.max_rows], truncated=len(rows) > self.limits.max_rows, rowcount=n)
        return self._wrap(go)

    def _explain(self, stmt):
        def go():
            self._begin(read_only=True)
            cur = self.conn.cursor()
            cur.execute("EXPLAIN " + stmt, prepare=True)
            rows = cur.fetchall()
            cur.close()
            return Result(["plan"], [tuple(r) for r in rows])
        return self._wrap(go)

    def _table_names(self):
        def go():
            self._begin(read_only=True)
            cur = self.conn.cursor()
            cur.execute("SELECT CASE table_type WHEN 'VIEW' THEN 'view' ELSE 'table' END, table_name "
                        "FROM information_schema.tables WHERE table_schema = 'public' ORDER BY table_name")
            rows = cur.fetchall()
            cur.close()
            return [(t, n) for t, n in rows]
        return self._wrap(go)

    def close(self):
        if self.closed:
            return
        self.closed = True
        try:
            self._drop_connection()
        finally:
            self.engine.dispose()
            self.backend.drop_session(self.name)


_SAFE_NAME = re.compile(r"^[a-z_][a-z0-9_]*$")


def sweep(admin: sa.Engine | str, keep: str | None = None) -> dict[str, list[str]]:
    """Drop the databases and roles that servers of this kind created (names `tg_s_<instance>_...` and
    `tg_b_<instance>_...`) and whose server instance is gone: no connection with the application name
    `toolgym-sql/<instance>` is open any more (every connection of a live server carries it: its admin heartbeat and
    its sessions). `keep`: an instance never swept (the caller's own). Returns what was dropped."""
    eng = admin if isinstance(admin, sa.Engine) else _admin_engine(admin, APP_PREFIX + "sweep")
    dropped: dict[str, list[str]] = {"databases": [], "roles": []}
    try:
        with eng.connect() as c:
            live = {r[0][len(APP_PREFIX):] for r in c.exec_driver_sql(
                "SELECT DISTINCT application_name FROM pg_stat_activity WHERE application_name LIKE %s",
                (APP_PREFIX.replace("_", r"\_") + "%",))}
            if keep:
                live.add(keep)
            dbs = [r[0] for r in c.exec_driver_sql("SELECT datname FROM pg_database WHERE datname ~ %s",
                                                   (_TAGGED.pattern,))]
            roles = [r[0] for r in c.exec_driver_sql("SELECT rolname FROM pg_roles WHERE rolname ~ %s",
                                                     (_TAGGED.pattern,))]
            for db in dbs:
                m = _TAGGED.match(db)
                if m and m.group(1) not in live:
                    try:
                        c.exec_driver_sql(f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")
                        dropped["databases"].append(db)
                    except sa.exc.DBAPIError as e:
                        log.warning("sweep: could not drop database %s: %s", db, str(e.orig).strip())
            for role in roles:
                m = _TAGGED.match(role)
                if m and m.group(1) not in live:
                    try:
                        c.exec_driver_sql(f"DROP ROLE IF EXISTS {role}")
                        dropped["roles"].append(role)
                    except sa.exc.DBAPIError as e:
                        log.warning("sweep: could not drop role %s: %s", role, str(e.orig).strip())
    finally:
        if not isinstance(admin, sa.Engine):
            eng.dispose()
    if dropped["databases"] or dropped["roles"]:
        log.warning("swept %d databases and %d roles left by servers that are gone",
                    len(dropped["databases"]), len(dropped["roles"]))
    return dropped


def _admin_url(url: str | sa.URL) -> sa.URL:
    u = sa.engine.make_url(url)
    if u.drivername in ("postgresql", "postgres"):
        u = u.set(drivername="postgresql+psycopg")
    return u


def _admin_engine(url: str | sa.URL, app_name: str) -> sa.Engine:
    return sa.create_engine(_admin_url(url), isolation_level="AUTOCOMMIT", poolclass=NullPool,
                            connect_args={"application_name": app_name})


class PostgresBackend:
    """Admin URL (a role that may CREATE DATABASE and CREATE ROLE); the template is a fixture database built once
    (and reused by later server processes) or an existing database named by `template_db`.

    Every database and role this server creates is named `tg_s_<instance>_<random>` (a template being built:
    `tg_b_...`), and every connection it opens carries the application name `toolgym-sql/<instance>`, one of them (the
    heartbeat) for the server's whole life. A server killed before it could drop its objects leaves them tagged with
    an instance that no connection names any more: `sweep()` drops them, at every start and from
    `mcp-server-sql --sweep`."""

    dialect = "postgresql"
    GROUP = "toolgym_sql_sessions"

    def __init__(self, url: str, fixture: str | None, seed: int, limits: Limits, template_db: str | None = None,
                 pool_size: int = 2):
        self.limits = limits
        self.pool_size = max(0, pool_size)
        self._ready: queue.Queue[tuple[str, str]] = queue.Queue()
        self._want, self._closing = threading.Event(), threading.Event()
        self._filler: threading.Thread | None = None
        self.instance = secrets.token_hex(4)
        self.app_name = APP_PREFIX + self.instance
        self.admin_url = _admin_url(url)
        self.admin = _admin_engine(self.admin_url, self.app_name)
        self._heartbeat = self.admin.raw_connection()  # names this instance as live while the server runs
        self.temp_file_limit_ok = True  # False once the admin turned out unable to set it
        self.functions_revoked = False  # True once EXECUTE on the reviewed functions is revoked in the template
        self.sessions: set[str] = set()
        self._lock = threading.Lock()
        # WAL_LOG (PostgreSQL 15's default) copies a small template block by block through the WAL; FILE_COPY
        # copies files but forces a checkpoint per clone. Override with MCP_SERVER_SQL_PG_CLONE=FILE_COPY.
        self.clone_strategy = os.environ.get("MCP_SERVER_SQL_PG_CLONE", "WAL_LOG").upper()
        if self.clone_strategy not in ("WAL_LOG", "FILE_COPY"):
            raise ValueError("MCP_SERVER_SQL_PG_CLONE must be WAL_LOG or FILE_COPY")
        self.swept = sweep(self.admin, keep=self.instance)
        with self.admin.connect() as c:
            exists = c.exec_driver_sql("SELECT 1 FROM pg_roles WHERE rolname = %s", (self.GROUP,)).first()
            if not exists:
                try:
                    c.exec_driver_sql(f"CREATE ROLE {self.GROUP} NOLOGIN")
                except sa.exc.DBAPIError:
                    pass  # created concurrently
        if template_db:
            if not _SAFE_NAME.match(template_db):
                raise ValueError(f"template database name {template_db!r} must match {_SAFE_NAME.pattern}")
            self.template = template_db
            self._grant_on_template()
        else:
            self.template = f"toolgym_tpl_{fixture or 'business'}_s{seed}"
            self._ensure_fixture_template(fixture or "business", seed)
        self._revoke_reviewed(self.template)
        if self.pool_size:
            self._filler = threading.Thread(target=self._fill_pool, name="pg-clone-pool", daemon=True)
            self._filler.start()

    def _db_exists(self, c, name) -> bool:
        return c.exec_driver_sql("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).first() is not None

    def _ensure_fixture_template(self, fixture: str, seed: int):
        from mcp_server_sql.fixtures import load_fixture

        with self.admin.connect() as c:
            if self._db_exists(c, self.template):
                return
            tmp = f"{BUILD_PREFIX}{self.instance}_{secrets.token_hex(4)}"  # swept if this server dies building it
            c.exec_driver_sql(f"CREATE DATABASE {tmp}")
        eng = sa.create_engine(self.admin_url.set(database=tmp), poolclass=NullPool,
                               connect_args={"application_name": self.app_name})
        load_fixture(fixture, eng, seed=seed)
        eng.dispose()
        self._grant_on_template(tmp)
        with self.admin.connect() as c:
            try:
                c.exec_driver_sql(f"ALTER DATABASE {tmp} RENAME TO {self.template}")
            except sa.exc.DBAPIError:  # another process won the race
                c.exec_driver_sql(f"DROP DATABASE IF EXISTS {tmp}")

    def _db_engine(self, db: str) -> sa.Engine:
        return sa.create_engine(self.admin_url.set(database=db), isolation_level="AUTOCOMMIT", poolclass=NullPool,
                                connect_args={"application_name": self.app_name})

    def _grant_on_template(self, db: str | None = None):
        db = db or self.template
        eng = self._db_engine(db)
        with eng.connect() as c:
            for sql in (f"GRANT USAGE, CREATE ON SCHEMA public TO {self.GROUP}",
                        f"GRANT SELECT, INSERT, UPDATE, DELETE, REFERENCES ON ALL TABLES IN SCHEMA public TO {self.GROUP}",
                        f"GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA public TO {self.GROUP}"):
                c.exec_driver_sql(sql)
        eng.dispose()
        with self.admin.connect() as c:
            c.exec_driver_sql(f"REVOKE ALL ON DATABASE {db} FROM PUBLIC")

    def _revoke_reviewed(self, db: str) -> None:
        """Revoke EXECUTE on the reviewed functions (`sqlcheck.PG_REFUSED_FUNCTIONS`: set_config, advisory locks,
        large objects, ...) from PUBLIC in the template, so that every clone refuses them to its session role, in
        nested and dynamic SQL too. Only the functions' owner (a superuser) may; otherwise a warning, and the text
        check of sqlcheck.py with the client-side deadline are what hold."""
        names = sorted(PG_REFUSED_FUNCTIONS)
        find = ("SELECT p.oid::regprocedure::text FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace "
                "WHERE n.nspname = 'pg_catalog' AND p.proname = ANY(%s)")
        eng = self._db_engine(db)
        try:
            with eng.connect() as c:
                left = [r[0] for r in c.exec_driver_sql(find + f" AND has_function_privilege('{self.GROUP}', p.oid, "
                                                        "'EXECUTE')", (names,))]
                for sig in left:
                    with contextlib.suppress(sa.exc.DBAPIError):
                        c.exec_driver_sql(f"REVOKE EXECUTE ON FUNCTION {sig} FROM PUBLIC")
                left = [r[0] for r in c.exec_driver_sql(find + f" AND has_function_privilege('{self.GROUP}', p.oid, "
                                                        "'EXECUTE')", (names,))]
        finally:
            eng.dispose()
        self.functions_revoked = not left
        if left:
            log.warning("the admin role may not revoke EXECUTE on %d reviewed functions (%s, ...) in %s: only the "
                        "server's text check refuses them", len(left), left[0], db)

    def _clone(self) -> tuple[str, str]:
        """Create a session role and its database (a clone of the template); return (name, password)."""
        name = f"{SESSION_PREFIX}{self.instance}_{secrets.token_hex(5)}"
        password = secrets.token_urlsafe(18)
        with self._lock:
            self.sessions.add(name)  # registered first so that close() drops it whatever happens
        with self.admin.connect() as c:
            c.exec_driver_sql(
                f"CREATE ROLE {name} LOGIN PASSWORD '{password}' NOSUPERUSER NOCREATEDB NOCREATEROLE "
                f"CONNECTION LIMIT 4 IN ROLE {self.GROUP}")
            for attempt in range(20):
                try:
                    c.exec_driver_sql(f"CREATE DATABASE {name} TEMPLATE {self.template} STRATEGY {self.clone_strategy}")
                    break
                except sa.exc.OperationalError as e:  # template busy (concurrent clone)
                    if "being accessed" not in str(e) or attempt == 19:
                        c.exec_driver_sql(f"DROP ROLE IF EXISTS {name}")
                        raise
                    time.sleep(0.05 * (attempt + 1))
            c.exec_driver_sql(f"REVOKE ALL ON DATABASE {name} FROM PUBLIC")
            # CONNECT only: with TEMPORARY a session could `CREATE TABLE pg_temp.orders ...`, which shadows the
            # real table for every unqualified name on that connection (graders' queries included)
            c.exec_driver_sql(f"GRANT CONNECT ON DATABASE {name} TO {name}")
            c.exec_driver_sql(f"ALTER ROLE {name} SET statement_timeout = {int(self.limits.timeout_s * 1000)}")
            if self.limits.pg_temp_file_mb > 0 and self.temp_file_limit_ok:
                try:  # a superuser-only setting (or GRANT SET ON PARAMETER temp_file_limit, PostgreSQL 15+)
                    c.exec_driver_sql(f"ALTER ROLE {name} SET temp_file_limit = '{int(self.limits.pg_temp_file_mb)}MB'")
                except sa.exc.DBAPIError as e:
                    self.temp_file_limit_ok = False
                    log.warning("temp_file_limit not set for session roles (%s): the admin role may not set it",
                                str(e.orig).splitlines()[0] if e.orig else e)
        return name, password

    @property
    def ready(self) -> int:
        """Clones ready to hand out now (a warm pool of `pool_size`)."""
        return self._ready.qsize()

    def _fill_pool(self) -> None:
        """Background thread: keep `pool_size` clones ready so that opening a session is a connect, not a clone."""
        while not self._closing.is_set():
            if self._ready.qsize() >= self.pool_size:
                self._want.wait(0.5)
                self._want.clear()
                continue
            try:
                item = self._clone()
            except Exception:  # server gone or out of resources: retry slowly, new_session clones inline
                self._closing.wait(1.0)
                continue
            if self._closing.is_set():  # closed while cloning: close() may have missed it
                self.drop_session(item[0])
            else:
                self._ready.put(item)

    def new_session(self) -> PostgresSession:
        item = None
        if self.pool_size:
            try:
                item = self._ready.get_nowait()
            except queue.Empty:
                item = None
            self._want.set()
        name, password = item or self._clone()
        return PostgresSession(self, name, password, self.limits)

    def drop_session(self, name: str):
        with self._lock:
            self.sessions.discard(name)
        try:
            with self.admin.connect() as c:
                c.exec_driver_sql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
                c.exec_driver_sql(f"DROP ROLE IF EXISTS {name}")
        except Exception:
            pass

    def close(self):
        """Drop every session database and role (in parallel: a server stopped with SIGTERM gets a few seconds before
        SIGKILL), after the pool filler has finished -- and dropped -- the clone it was making."""
        self._closing.set()
        self._want.set()
        if self._filler is not None:
            self._filler.join(timeout=30)
        in_parallel(self.drop_session, list(self.sessions))
        with contextlib.suppress(Exception):
            self._heartbeat.close()
        self.admin.dispose()


def make_backend(db: str | None = None, fixture: str | None = None, seed: int = 0, limits: Limits | None = None,
                 template_db: str | None = None, pg_pool: int = 2):
    limits = limits or Limits()
    if db and db.split(":", 1)[0].split("+", 1)[0] in ("postgresql", "postgres"):
        return PostgresBackend(db, fixture, seed, limits, template_db=template_db, pool_size=pg_pool)
    if db and not db.startswith("sqlite"):
        # a bare path to a SQLite file
        db = "sqlite:///" + db
    return SqliteBackend(db, fixture, seed, limits)
