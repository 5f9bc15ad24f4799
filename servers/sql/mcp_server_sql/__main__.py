"""CLI: `mcp-server-sql [--transport stdio|streamable-http] [--db URL | --fixture NAME] [limits...]`, and
`mcp-server-sql --sweep --db POSTGRES_URL` (drop what killed servers left behind, then exit).

SIGTERM ends the server like Ctrl-C: its session databases and roles are dropped before it exits (uvicorn, serving
streamable HTTP, re-raises the signal after its graceful shutdown, into the same handler)."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys

from mcp_server_sql.db import Limits
from mcp_server_sql.server import build_server

IN_CALL_FLAGS = {
    "max-value-bytes": "largest string or blob a statement may build or return",
    "max-sql-bytes": "longest statement text (UTF-8 bytes)",
    "max-expr-depth": "SQLite: deepest expression nesting",
    "max-compound-select": "SQLite: most terms in a UNION/INTERSECT/EXCEPT chain",
    "max-like-pattern-bytes": "SQLite: longest LIKE/GLOB pattern",
    "max-vdbe-ops": "SQLite: most instructions in one compiled statement",
    "max-call-work": "SQLite: largest input-size product of one LIKE/GLOB/instr/replace/trim/json_patch call",
    "max-fetch-mb": "text/blob megabytes one call may fetch into the server",
    "sqlite-heap-mb": "SQLite: memory cap of the whole process, all sessions together (0: none)",
    "pg-work-mem-mb": "PostgreSQL: work_mem of every transaction (0: the server's own)",
    "pg-temp-file-mb": "PostgreSQL: temp_file_limit of each session role (0: none; needs a superuser admin)",
    "max-expanded-tokens": "SQLite: most tokens the compiler may copy for CTE and view references (0: no check)",
    "grade-max-rows": "graders (query_json, dump_tables): most rows of a result or of a dumped table",
    "grade-max-cell-chars": "graders: longest value (blobs: hex digits)",
    "grade-max-mb": "graders: most megabytes of values in one answer",
}


def bound_malloc(mmap_threshold: int = 128 * 1024) -> bool:
    """glibc only: serve every allocation of `mmap_threshold` bytes or more with its own mmap, returned to the system
    when freed. By default glibc raises that threshold after the first large free and keeps freed blocks in
    per-thread arenas, so a burst of large values (SQLite's, at most its heap cap at any moment) left the process
    hundreds of MB larger than its live memory: peak RSS +570 MB under a 128 MB SQLite cap in
    tests/sql/test_limits.py, +140 MB with this. Same as MALLOC_MMAP_THRESHOLD_=131072. Returns whether it applied."""
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return bool(libc.mallopt(-3, int(mmap_threshold)))  # M_MMAP_THRESHOLD
    except (OSError, AttributeError):
        return False


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="mcp-server-sql", description=__doc__)
    p.add_argument("--transport", choices=["stdio", "streamable-http"], default="stdio")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--db", default=None,
                   help="database URL (sqlite:///file.db, postgresql+psycopg://admin@host:port/postgres) or a SQLite "
                        "file; default: the bundled fixture in an in-memory SQLite template")
    p.add_argument("--fixture", default="business", help="bundled fixture (SQLite default, or PostgreSQL template)")
    p.add_argument("--seed", type=int, default=0, help="fixture seed")
    p.add_argument("--template-db", default=None, help="PostgreSQL: clone this existing database per session")
    p.add_argument("--pg-pool", type=int, default=2, help="PostgreSQL: session clones kept ready in the background")
    p.add_argument("--read-only", action="store_true", help="refuse every write")
    p.add_argument("--timeout-s", type=float, default=5.0, help="per-statement time limit")
    p.add_argument("--max-rows", type=int, default=50, help="rows shown per result")
    p.add_argument("--hard-max-rows", type=int, default=500, help="largest max_rows a call may ask for")
    p.add_argument("--max-result-chars", type=int, default=20_000)
    p.add_argument("--max-sessions", type=int, default=256, help="live sessions at most")
    p.add_argument("--max-client-sessions", type=int, default=None,
                   help="live sessions one client may hold (default: half of --max-sessions)")
    p.add_argument("--session-idle-s", type=float, default=300.0,
                   help="a session with a call this recent is in use and never evicted for room")
    p.add_argument("--workers", type=int, default=16, help="threads running database calls")
    p.add_argument("--reserved-workers", type=int, default=4, help="of --workers: the lane for cheap sessions")
    p.add_argument("--lane-s", type=float, default=1.0, help="time a call may take in the reserved lane")
    p.add_argument("--sweep", action="store_true",
                   help="PostgreSQL (--db): drop the databases and roles of servers that are gone, print them, exit")
    p.add_argument("--max-db-mb", type=int, default=64, help="SQLite: size cap of a session database")
    p.add_argument("--no-grading-tools", action="store_true", help="do not expose dump_tables / query_json")
    g = p.add_argument_group("limits inside one call (docs/security.md)")
    for flag, help_ in IN_CALL_FLAGS.items():
        field = flag.replace("-", "_")
        g.add_argument(f"--{flag}", type=int, default=getattr(Limits, field), help=f"{help_} (default %(default)s)")
    a = p.parse_args(argv)
    if a.sweep:
        if not a.db or a.db.split(":", 1)[0].split("+", 1)[0] not in ("postgresql", "postgres"):
            p.error("--sweep needs --db with a PostgreSQL admin URL")
        from mcp_server_sql.db import sweep

        print(json.dumps(sweep(a.db)))
        return
    if "MALLOC_MMAP_THRESHOLD_" not in os.environ:
        bound_malloc()
    exit_on_sigterm()
    srv = build_server(db=a.db, fixture=a.fixture, seed=a.seed, read_only=a.read_only, timeout_s=a.timeout_s,
                       max_rows=a.max_rows, hard_max_rows=a.hard_max_rows, max_result_chars=a.max_result_chars,
                       max_sessions=a.max_sessions, max_db_mb=a.max_db_mb, template_db=a.template_db, pg_pool=a.pg_pool,
                       grading_tools=not a.no_grading_tools, max_client_sessions=a.max_client_sessions,
                       session_idle_s=a.session_idle_s, workers=a.workers, reserved_workers=a.reserved_workers,
                       lane_s=a.lane_s, **{f.replace("-", "_"): getattr(a, f.replace("-", "_")) for f in IN_CALL_FLAGS})
    try:
        if a.transport == "stdio":
            srv.stdio = True  # one stdio process serves one client: the process is the session
            srv.run("stdio")
        else:
            srv.run("streamable-http", host=a.host, port=a.port)
    except KeyboardInterrupt:
        pass
    finally:
        srv.registry.close()  # type: ignore[attr-defined]  # drop every session database now, not at exit


def exit_on_sigterm() -> None:
    """SIGTERM raises KeyboardInterrupt in the main thread, as SIGINT does, so that the server unwinds and drops its
    session databases (the default action ends the process at once, leaving them behind)."""
    def on_term(signum, frame):
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second SIGTERM ends it at once
        raise KeyboardInterrupt

    if sys.platform != "win32":
        signal.signal(signal.SIGTERM, on_term)


if __name__ == "__main__":
    main()
