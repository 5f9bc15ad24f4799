"""The SQL MCP server: tools over a per-session database.

Every session gets its own clone of the template database, made on first use and dropped when the session ends:
* an explicit handle from the `open_session` tool, passed as the `session` argument of every tool. This works on
  every transport and protocol version; toolgym's env uses it (the 2026 MCP protocol, which `mcp.Client`
  negotiates by default, is sessionless: each request arrives on a fresh connection object);
* without a handle, the transport's own session: the connection object on the handshake-era protocol, the
  streamable-HTTP session id, or the process under stdio (one client per process). Where there is none
  (2026 protocol in memory or over HTTP) a call without a handle is refused with a message naming open_session.

Sharing the server (docs/security.md): at most `max_sessions` live at once and `max_client_sessions` per client (the
transport session that opened them; clients without one share a quota); a session in use -- a call in flight, or one
within `session_idle_s` -- is never evicted to make room (a full server refuses new sessions instead), and only the
client that opened a session may close it. Calls run on the scheduler of `mcp_server_sql.sched` (one per session at a
time, a reserved lane for sessions whose calls are cheap).

Tool errors are MCP error results whose text starts with `Refused:` (policy: statement kind, ATTACH, PRAGMA, file
functions, read-only mode, caps, the in-call limits of `Limits`), `Timeout:` or `SQL error:` (the database's own
message). docs/security.md lists what each limit bounds and its default.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import inspect
import json
import secrets
import threading
import time
import weakref
from collections import Counter, OrderedDict
from collections.abc import Callable, Hashable
from typing import Annotated, Any, TypeVar

import anyio.to_thread
from mcp.server.mcpserver import Context, MCPServer
from pydantic import Field
from mcp.server.mcpserver.exceptions import ToolError

from mcp_server_sql.db import Limits, Result, SessionDB, SQLError, SQLTimeout, in_parallel, make_backend, py_value
from mcp_server_sql.sched import Scheduler
from mcp_server_sql.sqlcheck import SQLRefused

INSTRUCTIONS = (
    "A SQL database private to this session. Inspect it with list_tables and describe_table, read with run_query "
    "(one SELECT per call), change it with execute (one INSERT/UPDATE/DELETE/DDL statement per call; it commits). "
    "Results are text tables capped at a number of rows."
)


SESSION_DOC = "Session handle from open_session (leave empty on stdio and session-ful transports)"
F = TypeVar("F", bound=Callable[..., Any])

# Tool parameters: types plus the description every MCP client shows (schemas are derived from these signatures).
Session = Annotated[str | None, Field(description=SESSION_DOC)]
Handle = Annotated[str, Field(description="The handle open_session returned.")]
Table = Annotated[str, Field(description="Name of a table or view (see list_tables).")]
SampleRows = Annotated[int, Field(description="How many sample rows to show (0: none).")]
ReadSQL = Annotated[str, Field(description="One read-only statement: SELECT, WITH ... SELECT or VALUES.")]
WriteSQL = Annotated[str, Field(description="One statement: INSERT, UPDATE, DELETE, CREATE/DROP TABLE, INDEX or "
                                            "VIEW, or ALTER TABLE.")]
MaxRows = Annotated[int | None, Field(description="Show at most this many rows (default: the server's row cap).")]
GradeRows = Annotated[int | None, Field(description="Return at most this many rows (default and most: the server's "
                                                   "grading row cap).")]
Tables = Annotated[list[str] | None, Field(description="Base tables to dump (default: all).")]


def _tool(srv: MCPServer) -> Callable[[F], F]:
    """`@srv.tool()` with the docstring as the description, its paragraphs unwrapped (MCPServer takes `__doc__`
    as is, indentation and line breaks included)."""
    def register(fn: F) -> F:
        paragraphs = inspect.cleandoc(fn.__doc__ or "").split("\n\n")
        return srv.tool(description="\n\n".join(" ".join(p.split()) for p in paragraphs))(fn)
    return register


class ToolFailure(ToolError):
    """Raised from a tool: becomes an MCP error result with this text."""


def _cell(v: Any, width: int) -> str:
    if v is None:
        s = "NULL"
    else:
        v = py_value(v)
        s = repr(v) if isinstance(v, float) and v != v else str(v)
    s = s.replace("\n", "\\n").replace("|", "\\|")
    return s if len(s) <= width else s[: width - 1] + "…"


def format_table(res: Result, limits: Limits, what: str = "row") -> str:
    """A compact text table: header, separator, rows, then a count line and a truncation note."""
    cols = [str(c) for c in res.columns]
    body = [[_cell(v, limits.max_cell_chars) for v in row] for row in res.rows]
    widths = [max([len(c)] + [len(r[i]) for r in body]) for i, c in enumerate(cols)]
    lines = [" | ".join(c.ljust(w) for c, w in zip(cols, widths)).rstrip(),
             "-|-".join("-" * w for w in widths)]
    size = sum(len(x) + 1 for x in lines)
    shown = 0
    cut_by_size = False
    for r in body:
        line = " | ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip()
        if size + len(line) + 1 > limits.max_result_chars:
            cut_by_size = True
            break
        lines.append(line)
        size += len(line) + 1
        shown += 1
    n = len(body)
    if cut_by_size:
        lines.append(f"({shown} {what}s shown; result truncated at {limits.max_result_chars} characters — "
                     "select fewer columns or rows)")
    elif res.truncated:
        lines.append(f"({shown} {what}s shown; result truncated at the row cap, more rows exist — "
                     "add a LIMIT, filter or aggregate)")
    else:
        lines.append(f"({n} {what}{'s' if n != 1 else ''})")
    return "\n".join(lines)


@dataclasses.dataclass(eq=False)
class _Entry:
    db: SessionDB
    client: Hashable | None  # who opened it (`client_key`)
    last_used: float
    active: int = 0  # calls in flight
    closing: bool = False  # closed or dropped while a call was in flight: closed when the last one ends


class SessionRegistry:
    """Session databases by key: an `open_session` handle (random, unguessable) or a transport owner (a
    connection object, an HTTP session id, the stdio process). Created lazily; dropped by `close_session` (only by
    the client that opened it), when a connection object is garbage-collected, or evicted to make room.

    Quotas: at most `max_sessions` in all and `max_client_sessions` per client (default half of `max_sessions`;
    clients without a transport identity share one quota). To make room for a new session the least recently used
    session *not in use* is evicted (the client's own first when it is at its quota) -- in use: a call in flight, or a
    call within `idle_s` --; when every candidate is in use, the new one is refused with a message saying so."""

    def __init__(self, backend, max_sessions: int = 256, max_client_sessions: int | None = None,
                 idle_s: float = 300.0):
        self.backend = backend
        self.max_sessions = max_sessions
        self.max_client_sessions = max_client_sessions or max(1, max_sessions // 2)
        self.idle_s = idle_s
        self._dbs: OrderedDict[Any, _Entry] = OrderedDict()
        self._lock = threading.Lock()
        self._pending: Counter[Hashable | None] = Counter()  # sessions being created, per client
        self.created = 0
        self.evicted = 0
        self._closed = False

    # --- room ---------------------------------------------------------------------------------------------
    def _make_room(self, client: Hashable | None) -> list[_Entry]:
        """Under the lock: check the client's quota and the server's; return the entries evicted for room."""
        evicted = []
        now = time.monotonic()

        def idle(e: _Entry) -> bool:
            return not e.active and now - e.last_used >= self.idle_s

        mine = sum(1 for e in self._dbs.values() if e.client == client) + self._pending[client]
        if mine >= self.max_client_sessions:  # room from the client's own idle sessions, else refused
            victim = next((k for k, e in self._dbs.items() if e.client == client and idle(e)), None)
            if victim is None:
                raise SQLRefused(f"this client has {mine} sessions open, the most one client may hold "
                                 f"(--max-client-sessions {self.max_client_sessions}), all in use; close one with "
                                 "close_session")
            evicted.append(self._dbs.pop(victim))
            self.evicted += 1
        while len(self._dbs) + sum(self._pending.values()) >= self.max_sessions:
            victim = next((k for k, e in self._dbs.items() if idle(e)), None)
            if victim is None:
                raise SQLRefused(f"the server holds its most sessions ({self.max_sessions}, --max-sessions) and every "
                                 f"one is in use (a call within {self.idle_s:g} s); try again later")
            evicted.append(self._dbs.pop(victim))
            self.evicted += 1
        return evicted

    def _create(self, key: Any, client: Hashable | None) -> _Entry:
        with self._lock:
            evicted = self._make_room(client)
            self._pending[client] += 1
        for old in evicted:
            self._close_entry(old)
        try:
            db = self.backend.new_session()
        finally:
            with self._lock:
                self._pending[client] -= 1
                if not self._pending[client]:
                    del self._pending[client]
        entry = _Entry(db, client, time.monotonic())
        with self._lock:
            self.created += 1
            self._dbs[key] = entry
        return entry

    @staticmethod
    def _close_entry(entry: _Entry) -> None:
        if entry.active:
            entry.closing = True  # the last call closes it
            return
        with contextlib.suppress(Exception):  # a session that fails to close must not stop the others
            entry.db.close()

    # --- handles -------------------------------------------------------------------------------------------
    def open(self, client: Hashable | None = None) -> str:
        handle = "s-" + secrets.token_urlsafe(16)
        self._create(("handle", handle), client)
        return handle

    def use_handle(self, handle: str) -> _Entry:
        """The entry of a handle, marked in use (pair with `release`)."""
        with self._lock:
            entry = self._dbs.get(("handle", handle))
            if entry is None:
                raise SQLRefused("unknown or closed session handle (open one with open_session)")
            self._dbs.move_to_end(("handle", handle))
            entry.active += 1
            entry.last_used = time.monotonic()
            return entry

    def by_handle(self, handle: str) -> SessionDB:
        entry = self.use_handle(handle)
        self.release(entry)
        return entry.db

    def release(self, entry: _Entry) -> None:
        with self._lock:
            entry.active -= 1
            entry.last_used = time.monotonic()
            close = entry.closing and not entry.active
        if close:
            entry.closing = False
            self._close_entry(entry)

    def close_handle(self, handle: str, client: Hashable | None = None) -> bool:
        with self._lock:
            entry = self._dbs.get(("handle", handle))
            if entry is None:
                return False
            if entry.client != client:
                raise SQLRefused("this session was opened by another client; only that client may close it")
            del self._dbs[("handle", handle)]
        self._close_entry(entry)
        return True

    # --- transport owners ----------------------------------------------------------------------------------
    @staticmethod
    def owner_key(owner: object) -> Any:
        return ("owner", owner) if isinstance(owner, (str, tuple)) else ("owner", id(owner))

    def lookup_owner(self, owner: object) -> _Entry | None:
        """The owner's entry marked in use, or None when it has no session yet (then `use_owner` creates one)."""
        key = self.owner_key(owner)
        with self._lock:
            entry = self._dbs.get(key)
            if entry is not None:
                self._dbs.move_to_end(key)
                entry.active += 1
                entry.last_used = time.monotonic()
            return entry

    def use_owner(self, owner: object) -> _Entry:
        entry = self.lookup_owner(owner)
        if entry is not None:
            return entry
        key = self.owner_key(owner)
        entry = self._create(key, key)
        if key[1] == id(owner):
            try:
                weakref.finalize(owner, self.drop, key)
            except TypeError:  # not weak-referenceable: rely on eviction
                pass
        with self._lock:
            entry.active += 1
        return entry

    def by_owner(self, owner: object) -> SessionDB:
        entry = self.use_owner(owner)
        self.release(entry)
        return entry.db

    def drop(self, key: Any) -> None:
        with self._lock:
            entry = self._dbs.pop(key, None)
        if entry is not None:
            threading.Thread(target=self._close_entry, args=(entry,), daemon=True).start()

    def __len__(self) -> int:
        return len(self._dbs)

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            entries = list(self._dbs.values())
            self._dbs.clear()
        # in parallel: PostgreSQL drops a database per session (after SIGTERM there are a few seconds)
        in_parallel(self._close_quietly, entries)
        self.backend.close()

    @staticmethod
    def _close_quietly(entry: _Entry) -> None:
        with contextlib.suppress(Exception):
            entry.db.close()


def client_key(ctx: Context, stdio: bool) -> Hashable | None:
    """Who is calling, for quotas and ownership: the caller's transport session (`transport_owner`) as a hashable
    key, or None when the transport has none (such clients share one quota)."""
    owner = transport_owner(ctx, stdio)
    if owner is None:
        return None
    return SessionRegistry.owner_key(owner)


def transport_owner(ctx: Context, stdio: bool) -> object | None:
    """The object or key that lives exactly as long as the caller's MCP session, or None when the transport has
    no session.

    mcp 2.x: `ctx.session` is a per-request `ServerSession` wrapping a `Connection`. On the handshake-era protocol
    (<= 2025-11-25) that connection lives as long as the client's session; with a streamable-HTTP session id we key
    on the id. The 2026 protocol (what `mcp.Client` negotiates by default) is sessionless: every request gets a
    fresh connection, so over stdio the process is the session (one client per process) and otherwise there is no
    session identity at all; callers then use `open_session` and pass its handle."""
    session = ctx.session
    conn = getattr(session, "_connection", None)
    if conn is None:
        return session  # an SDK whose session object is connection-scoped
    if getattr(conn, "session_id", None):
        return ("http-session", conn.session_id)
    if str(getattr(conn, "protocol_version", "")) < "2026":
        return conn
    if stdio:
        return "stdio-process"
    return None


def build_server(
    db: str | None = None,
    fixture: str | None = "business",
    seed: int = 0,
    read_only: bool = False,
    timeout_s: float = 5.0,
    max_rows: int = 50,
    hard_max_rows: int = 500,
    max_result_chars: int = 20_000,
    max_cell_chars: int = 200,
    max_sessions: int = 256,
    max_db_mb: int = 64,
    template_db: str | None = None,
    pg_pool: int = 2,
    grading_tools: bool = True,
    name: str = "sql",
    max_client_sessions: int | None = None,
    session_idle_s: float = 300.0,
    workers: int = 16,
    reserved_workers: int = 4,
    lane_s: float = 1.0,
    **limits_in_call: Any,
) -> MCPServer:
    """Build the server. `db`: a database URL (sqlite:///file.db, postgresql+psycopg://admin@host/db) or a
    SQLite file path; without it the bundled `fixture` is generated into an in-memory SQLite template.
    With a PostgreSQL URL the fixture (or `template_db`) becomes the template database cloned per session.
    `max_client_sessions`, `session_idle_s`: the registry's quotas (`SessionRegistry`); `workers`,
    `reserved_workers`, `lane_s`: the scheduler (`mcp_server_sql.sched`).
    `limits_in_call`: any other field of `Limits` (`max_value_bytes=`, `max_sql_bytes=`, `sqlite_heap_mb=`,
    `pg_work_mem_mb=`, `grade_max_rows=`, ...; defaults and meaning in docs/security.md)."""
    unknown = set(limits_in_call) - {f.name for f in dataclasses.fields(Limits)}
    if unknown:
        raise TypeError(f"build_server() got unknown limits {sorted(unknown)}")
    limits = Limits(timeout_s=timeout_s, max_rows=max_rows, hard_max_rows=hard_max_rows, read_only=read_only,
                    max_result_chars=max_result_chars, max_cell_chars=max_cell_chars, max_db_mb=max_db_mb,
                    **limits_in_call)
    backend = make_backend(db, fixture=None if db and not db.startswith("postgres") else fixture, seed=seed,
                           limits=limits, template_db=template_db, pg_pool=pg_pool)
    registry = SessionRegistry(backend, max_sessions=max_sessions, max_client_sessions=max_client_sessions,
                               idle_s=session_idle_s)
    sched = Scheduler(workers=workers, reserved=reserved_workers, lane_s=lane_s)
    atexit.register(registry.close)
    srv = MCPServer(name, instructions=INSTRUCTIONS, log_level="WARNING")  # per-request INFO lines through rich: ~30 % of a call's CPU
    srv.registry = registry  # type: ignore[attr-defined]  # for tests and benchmarks
    srv.scheduler = sched  # type: ignore[attr-defined]
    srv.limits = limits  # type: ignore[attr-defined]
    srv.stdio = False  # type: ignore[attr-defined]  # set by the CLI: one stdio process serves one client

    async def run(ctx: Context, fn, *args, **kwargs):
        handle = kwargs.get("session")
        try:
            if handle:
                entry = registry.use_handle(handle)
            else:
                owner = transport_owner(ctx, srv.stdio)  # type: ignore[attr-defined]
                if owner is None:
                    raise SQLRefused("this transport has no MCP session (2026 protocol without stdio): call "
                                     "open_session and pass its handle as `session`")
                entry = registry.lookup_owner(owner) or await anyio.to_thread.run_sync(registry.use_owner, owner)
            try:
                return await sched.run(entry.db, lambda: fn(entry.db, *args))
            finally:
                registry.release(entry)
        except SQLRefused as e:
            raise ToolFailure(f"Refused: {e}") from None
        except SQLTimeout as e:
            raise ToolFailure(f"Timeout: {e}") from None
        except SQLError as e:
            raise ToolFailure(f"SQL error: {e}") from None

    @_tool(srv)
    async def open_session(ctx: Context) -> str:
        """Open a new private database session (a fresh copy of the database) and return its handle as JSON
        {"session": handle}. Pass the handle as `session` to the other tools; needed only on transports without
        MCP sessions."""
        client = client_key(ctx, srv.stdio)  # type: ignore[attr-defined]
        try:
            return json.dumps({"session": await anyio.to_thread.run_sync(registry.open, client)})
        except SQLRefused as e:  # a quota, or SQLite's memory cap reached
            raise ToolFailure(f"Refused: {e}") from None

    @_tool(srv)
    async def close_session(session: Handle, ctx: Context) -> str:
        """Close a session opened with open_session and drop its database."""
        client = client_key(ctx, srv.stdio)  # type: ignore[attr-defined]
        try:
            closed = await anyio.to_thread.run_sync(registry.close_handle, session, client)
        except SQLRefused as e:
            raise ToolFailure(f"Refused: {e}") from None
        return "closed" if closed else "no such session"

    @_tool(srv)
    async def list_tables(ctx: Context, session: Session = None) -> str:
        """List the tables and views of the database with their row counts."""
        rows = await run(ctx, lambda d: d.tables(), session=session)
        return format_table(Result(["table", "kind", "rows"], rows), limits, what="table")

    @_tool(srv)
    async def describe_table(table: Table, ctx: Context, sample_rows: SampleRows = 3, session: Session = None
                             ) -> str:
        """Describe a table: its columns (name, type, nullable, default), primary key, foreign keys and a few
        sample rows."""
        info = await run(ctx, lambda d: d.describe(table, sample_rows), session=session)
        pk = set(info["primary_key"])
        fk = {c: f"{t}.{rc}" for cs, t, rcs in info["foreign_keys"] for c, rc in zip(cs, rcs)}
        cols = Result(["column", "type", "nullable", "key"],
                      [(n, ty, "yes" if nl else "no",
                        ", ".join(k for k in ["PK" if n in pk else "", f"FK -> {fk[n]}" if n in fk else ""] if k))
                       for n, ty, nl, _ in info["columns"]])
        out = [f"table {info['table']}", format_table(cols, limits, what="column")]
        if info["primary_key"]:
            out.append(f"primary key: ({', '.join(info['primary_key'])})")
        if info["sample"].columns:
            out.append("sample rows:")
            out.append(format_table(info["sample"], limits))
        return "\n".join(out)

    @_tool(srv)
    async def run_query(sql: ReadSQL, ctx: Context, max_rows: MaxRows = None, session: Session = None) -> str:
        """Run one read-only SQL query (SELECT / WITH / VALUES) and return the result as a text table; a note says
        when the row cap cut the result."""
        res = await run(ctx, lambda d: d.query(sql, max_rows, cell_chars=limits.max_cell_chars + 1), session=session)
        return format_table(res, limits)

    @_tool(srv)
    async def execute(sql: WriteSQL, ctx: Context, session: Session = None) -> str:
        """Execute one statement that changes the database (INSERT, UPDATE, DELETE, CREATE/DROP TABLE|INDEX|VIEW,
        ALTER TABLE) and commit it. Returns the number of affected rows (and rows of a RETURNING clause)."""
        res = await run(ctx, lambda d: d.execute(sql), session=session)
        msg = f"OK, {res.rowcount} row{'s' if res.rowcount != 1 else ''} affected" if res.rowcount >= 0 else "OK"
        if res.columns:
            msg += "\n" + format_table(res, limits)
        return msg

    @_tool(srv)
    async def explain_query(sql: ReadSQL, ctx: Context, session: Session = None) -> str:
        """Show the database's query plan for one read query, without running it."""
        res = await run(ctx, lambda d: d.explain(sql), session=session)
        return "\n".join(str(r[0]) for r in res.rows)

    if grading_tools:
        @_tool(srv)
        async def dump_tables(ctx: Context, tables: Tables = None, session: Session = None) -> str:
            """(For graders) Every row of the given base tables (default: all) as JSON {table: {columns, rows}}; refused
            ("Refused: grading: ...") past the graders' caps (rows per table, value size, total size)."""
            return json.dumps(await run(ctx, lambda d: d.dump(tables), session=session))

        @_tool(srv)
        async def query_json(sql: ReadSQL, ctx: Context, max_rows: GradeRows = None, session: Session = None) -> str:
            """(For graders) Run one read query; JSON {columns, rows, truncated} with values made JSON-friendly. The
            graders' caps apply (rows, value size, total size): past one the call is refused ("Refused: grading:
            ...")."""
            res = await run(ctx, lambda d: d.query_all(sql, max_rows), session=session)
            return json.dumps({"columns": res.columns, "rows": [[py_value(v) for v in r] for r in res.rows],
                               "truncated": res.truncated})

    return srv
