"""CLI: `mcp-server-sql [--transport stdio|streamable-http] [--db URL | --fixture NAME] [limits...]`."""

from __future__ import annotations

import argparse
import os

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
    p.add_argument("--max-sessions", type=int, default=256)
    p.add_argument("--max-db-mb", type=int, default=64, help="SQLite: size cap of a session database")
    p.add_argument("--no-grading-tools", action="store_true", help="do not expose dump_tables / query_json")
    g = p.add_argument_group("limits inside one call (docs/security.md)")
    for flag, help_ in IN_CALL_FLAGS.items():
        field = flag.replace("-", "_")
        g.add_argument(f"--{flag}", type=int, default=getattr(Limits, field), help=f"{help_} (default %(default)s)")
    a = p.parse_args(argv)
    if "MALLOC_MMAP_THRESHOLD_" not in os.environ:
        bound_malloc()
    srv = build_server(db=a.db, fixture=a.fixture, seed=a.seed, read_only=a.read_only, timeout_s=a.timeout_s,
                       max_rows=a.max_rows, hard_max_rows=a.hard_max_rows, max_result_chars=a.max_result_chars,
                       max_sessions=a.max_sessions, max_db_mb=a.max_db_mb, template_db=a.template_db, pg_pool=a.pg_pool,
                       grading_tools=not a.no_grading_tools,
                       **{f.replace("-", "_"): getattr(a, f.replace("-", "_")) for f in IN_CALL_FLAGS})
    if a.transport == "stdio":
        srv.stdio = True  # one stdio process serves one client: the process is the session
        srv.run("stdio")
    else:
        srv.run("streamable-http", host=a.host, port=a.port)


if __name__ == "__main__":
    main()
