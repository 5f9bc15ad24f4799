"""CLI: `mcp-server-sql [--transport stdio|streamable-http] [--db URL | --fixture NAME] [limits...]`."""

from __future__ import annotations

import argparse

from mcp_server_sql.server import build_server


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
    a = p.parse_args(argv)
    srv = build_server(db=a.db, fixture=a.fixture, seed=a.seed, read_only=a.read_only, timeout_s=a.timeout_s,
                       max_rows=a.max_rows, hard_max_rows=a.hard_max_rows, max_result_chars=a.max_result_chars,
                       max_sessions=a.max_sessions, max_db_mb=a.max_db_mb, template_db=a.template_db, pg_pool=a.pg_pool,
                       grading_tools=not a.no_grading_tools)
    if a.transport == "stdio":
        srv.stdio = True  # one stdio process serves one client: the process is the session
        srv.run("stdio")
    else:
        srv.run("streamable-http", host=a.host, port=a.port)


if __name__ == "__main__":
    main()
