"""Benchmark mcp-server-sql: tool calls/s and per-call latency vs the bare SQLAlchemy call, measured in the same run,
on SQLite and PostgreSQL; plus per-session setup (clone) time.

    python benchmarks/bench_sql.py [--calls 300] [--sessions 20] [--pg-url URL | --no-pg] [--json out.json]

Without --pg-url a throwaway PostgreSQL cluster is started when Debian's binaries exist (/usr/lib/postgresql/*/bin;
run as root it uses the `postgres` OS user). Columns:
  bare SQLAlchemy   `conn.exec_driver_sql(q).fetchall()` on a plain engine over the same database
  db layer          the server's SessionDB.query (checks, authorizer / read-only transaction, row cap), no MCP
  MCP in-memory     `mcp.Client(server).call_tool("run_query", ...)` (text table result)
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import socket
import statistics
import subprocess
import tempfile
import time

import anyio
import mcp
import sqlalchemy as sa
from mcp_server_sql import build_server
from mcp_server_sql.fixtures import load_fixture

QUERIES = [
    "SELECT name, city FROM customers WHERE customer_id = 7",
    "SELECT o.order_id, SUM(oi.quantity * oi.unit_price) FROM orders o JOIN order_items oi ON oi.order_id = o.order_id "
    "WHERE o.customer_id = 7 GROUP BY o.order_id",
]


def stats(lat: list[float]) -> dict[str, float]:
    lat = sorted(lat)
    return {"calls_per_s": len(lat) / sum(lat), "mean_ms": 1e3 * statistics.mean(lat),
            "p50_ms": 1e3 * lat[len(lat) // 2], "p95_ms": 1e3 * lat[int(len(lat) * 0.95)]}


def bench_bare(engine: sa.Engine, n: int) -> dict[str, float]:
    lat = []
    with engine.connect() as conn:
        for i in range(n):
            t = time.perf_counter()
            conn.exec_driver_sql(QUERIES[i % 2]).fetchall()
            lat.append(time.perf_counter() - t)
    return stats(lat)


def bench_db_layer(srv, n: int) -> dict[str, float]:
    db = srv.registry.backend.new_session()
    try:
        lat = []
        for i in range(n):
            t = time.perf_counter()
            db.query(QUERIES[i % 2])
            lat.append(time.perf_counter() - t)
        return stats(lat)
    finally:
        db.close()


async def bench_mcp(srv, n: int, sessions: int) -> tuple[dict[str, float], dict[str, float]]:
    async with mcp.Client(srv) as c:
        setup = []
        handles = []
        for _ in range(sessions):
            t = time.perf_counter()
            r = await c.call_tool("open_session", {})
            setup.append(time.perf_counter() - t)
            handles.append(json.loads(r.content[0].text)["session"])
        lat = []
        for i in range(n):
            t = time.perf_counter()
            r = await c.call_tool("run_query", {"sql": QUERIES[i % 2], "session": handles[0]})
            lat.append(time.perf_counter() - t)
            assert not r.is_error, r.content[0].text
        for h in handles:
            await c.call_tool("close_session", {"session": h})
        # with a warm clone pool (PostgreSQL): wait until the pool is refilled before each open
        backend = srv.registry.backend
        warm = []
        for _ in range(5 if getattr(backend, "pool_size", 0) else 0):
            t0 = time.perf_counter()
            while backend.ready < backend.pool_size and time.perf_counter() - t0 < 30:
                await anyio.sleep(0.05)
            t = time.perf_counter()
            r = await c.call_tool("open_session", {})
            warm.append(time.perf_counter() - t)
            await c.call_tool("close_session", {"session": json.loads(r.content[0].text)["session"]})
    out = {"open_session_mean_ms": 1e3 * statistics.mean(setup),
           "open_session_p50_ms": 1e3 * sorted(setup)[len(setup) // 2]}
    if warm:
        out["open_session_warm_pool_mean_ms"] = 1e3 * statistics.mean(warm)
    return stats(lat), out


def bench_raw_clone(srv, k: int = 5) -> float:
    """Mean ms of one clone of the template without any pool (SQLite backup / PostgreSQL CREATE DATABASE + role)."""
    backend = srv.registry.backend
    times = []
    for _ in range(k):
        t = time.perf_counter()
        if hasattr(backend, "_clone"):
            name, _ = backend._clone()
            times.append(time.perf_counter() - t)
            backend.drop_session(name)
        else:
            backend.new_session().close()
            times.append(time.perf_counter() - t)
    return 1e3 * statistics.mean(times)


def start_postgres() -> tuple[str, callable] | None:
    dirs = sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)
    if not dirs:
        return None
    bindir = dirs[0]
    base = tempfile.mkdtemp(prefix="bench-pg-")
    os.chmod(base, 0o777)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    wrap = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    user = "postgres" if os.geteuid() == 0 else os.environ.get("USER", "postgres")
    subprocess.run([*wrap, f"{bindir}/initdb", "-D", f"{base}/data", "-U", user, "--auth=trust", "--locale=C", "-E", "UTF8"],
                   check=True, capture_output=True)
    opts = f"-c listen_addresses=127.0.0.1 -c port={port} -c unix_socket_directories={base} -c fsync=off"
    subprocess.run([*wrap, f"{bindir}/pg_ctl", "-D", f"{base}/data", "-l", f"{base}/log", "-o", opts, "-w", "start"],
                   check=True, capture_output=True)

    def stop():
        subprocess.run([*wrap, f"{bindir}/pg_ctl", "-D", f"{base}/data", "-m", "immediate", "stop"], capture_output=True)
        shutil.rmtree(base, ignore_errors=True)
    return f"postgresql+psycopg://{user}@127.0.0.1:{port}/postgres", stop


def run_backend(name: str, db_url: str | None, n: int, sessions: int) -> dict:
    t = time.perf_counter()
    srv = build_server(db=db_url)
    server_start = time.perf_counter() - t
    try:
        if db_url is None:
            engine = sa.create_engine("sqlite://")
            load_fixture("business", engine)
        else:
            engine = sa.create_engine(sa.engine.make_url(db_url).set(database=srv.registry.backend.template))
        bare = bench_bare(engine, n)
        engine.dispose()
        layer = bench_db_layer(srv, n)
        via_mcp, setup = anyio.run(bench_mcp, srv, n, sessions)
        setup["raw_clone_mean_ms"] = bench_raw_clone(srv)
    finally:
        srv.registry.close()
    return {"backend": name, "server_start_s": server_start, "bare_sqlalchemy": bare, "db_layer": layer,
            "mcp_inmemory": via_mcp, **setup,
            "ratio_mcp_vs_bare_latency": via_mcp["mean_ms"] / bare["mean_ms"],
            "mcp_overhead_ms": via_mcp["mean_ms"] - bare["mean_ms"]}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--calls", type=int, default=300)
    p.add_argument("--sessions", type=int, default=20)
    p.add_argument("--pg-url", default=None)
    p.add_argument("--no-pg", action="store_true")
    p.add_argument("--json", default="benchmarks/results/bench_sql.json")
    a = p.parse_args()
    results = [run_backend("sqlite", None, a.calls, a.sessions)]
    stop = None
    if not a.no_pg:
        url = a.pg_url
        if url is None:
            started = start_postgres()
            if started:
                url, stop = started
        if url:
            try:
                results.append(run_backend("postgresql", url, a.calls, a.sessions))
            finally:
                if stop:
                    stop()
        else:
            print("(PostgreSQL binaries not found: skipping postgresql)")
    hdr = f"{'backend':<11}{'path':<17}{'calls/s':>9}{'mean ms':>9}{'p50 ms':>8}{'p95 ms':>8}"
    print(hdr)
    print("-" * len(hdr))
    for r in results:
        for key, label in (("bare_sqlalchemy", "bare SQLAlchemy"), ("db_layer", "db layer"), ("mcp_inmemory", "MCP in-memory")):
            s = r[key]
            print(f"{r['backend']:<11}{label:<17}{s['calls_per_s']:>9.0f}{s['mean_ms']:>9.3f}{s['p50_ms']:>8.3f}{s['p95_ms']:>8.3f}")
        print(f"{r['backend']:<11}MCP/bare latency ratio {r['ratio_mcp_vs_bare_latency']:.1f}x  "
              f"(+{r['mcp_overhead_ms']:.2f} ms/call); open_session (clone) mean {r['open_session_mean_ms']:.1f} ms, "
              f"p50 {r['open_session_p50_ms']:.1f} ms; server start {r['server_start_s']:.2f} s")
        warm = r.get("open_session_warm_pool_mean_ms")
        print(f"{r['backend']:<11}per-session setup: raw clone {r['raw_clone_mean_ms']:.1f} ms"
              + (f"; open_session with a warm clone pool {warm:.1f} ms" if warm is not None else ""))
    os.makedirs(os.path.dirname(a.json) or ".", exist_ok=True)
    with open(a.json, "w") as f:
        json.dump({"calls": a.calls, "sessions": a.sessions, "queries": QUERIES, "results": results}, f, indent=2)
    print(f"wrote {a.json}")


if __name__ == "__main__":
    main()
