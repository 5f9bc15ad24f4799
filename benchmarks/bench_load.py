"""Load and soak: `toolgym serve` and each bundled MCP server over streamable HTTP on loopback, N concurrent clients ×
M tool calls each, then clients killed mid-call; the server's RSS and open fds before and after each step.

    python benchmarks/bench_load.py [--target serve-tictactoe|tictactoe|sql|wiki|all|a,b] [--clients 10,50]
                                    [--calls 50] [--kill 3] [--cancel 5] [--abandon 100] [--legacy] [--json PATH]

One server process per target (see `benchmarks/loadgen.py` for the command lines and the calls each client makes).
Per target, in order:

  1 client       the baseline measured in the same run: one client, M calls in sequence (the `× 1 client` column is
                 the throughput ratio of each row to it)
  N clients      N `mcp.Client` sessions (each its own HTTP connection pool) × M calls, all started together
  kill K         K subprocess clients calling in a loop, each SIGKILLed mid-call (the `mid-call` count says how many
                 kills landed while a call was in flight), then `--cancel` in-process clients cancelled mid-call
  abandon A      A clients that set up (e.g. `open_session`), make 2 calls and vanish without any goodbye: what a
                 crashed client leaves on the server, by the hundred (RSS growth per client in the notes)

RSS / fds `before → after` are the server process (and its children) after a settle pause; `after` is polled until
the fds are back to `before` or stop changing. `--legacy` makes every client use the pre-2026 initialize handshake,
whose MCP sessions the server keeps (until DELETE, or 30 min idle), instead of the 2026 sessionless protocol that
`mcp.Client` negotiates by default. Writes benchmarks/results/bench_load.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

sys.path.insert(0, str(Path(__file__).parent))
import loadgen as L  # noqa: E402


async def bench_target(target: str, a: argparse.Namespace, progress: Progress) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    t0 = time.perf_counter()
    async with L.Server(target) as srv:
        start_s = time.perf_counter() - t0
        await L.warm_up(srv.url, target, legacy=a.legacy)
        first = before = await srv.settled_usage()
        base_cps = None
        for n in [1, *a.clients]:
            task = progress.add_task(f"{target} {n}×{a.calls}", total=n * a.calls)
            r = await L.run_load(srv.url, target, n, a.calls, seed=n, legacy=a.legacy,
                                 on_call=lambda t=task: progress.advance(t))
            progress.remove_task(task)
            after = await srv.settled_usage(before.fds)
            base_cps = base_cps or r.calls_per_s
            rows.append(L.load_row(r, before, after, base_cps, f"server up in {start_s:.1f}s" if n == 1 else ""))
            before = after
        if a.kill or a.cancel:
            task = progress.add_task(f"{target} kill {a.kill} + cancel {a.cancel}", total=None)
            k = await L.kill_clients(srv.url, target, a.kill, legacy=a.legacy) if a.kill else L.KillResult(0, 0, 0)
            done = await L.cancel_clients(srv.url, target, a.cancel, legacy=a.legacy) if a.cancel else 0
            progress.remove_task(task)
            after = await srv.settled_usage(before.fds)
            errs = await L.probe(srv.url, target, legacy=a.legacy)
            rows.append(L.kill_row(target, k, a.cancel, done, before, after, srv.alive, errs))
            before = after
        if a.abandon:
            task = progress.add_task(f"{target} abandon {a.abandon}", total=None)
            await L.abandon_clients(srv.url, target, a.abandon, legacy=a.legacy)
            progress.remove_task(task)
            after = await srv.settled_usage(before.fds)
            rows.append(L.abandon_row(target, a.abandon, 2, before, after,
                                      await L.probe(srv.url, target, legacy=a.legacy)))
        rows[-1]["total_growth"] = {"rss_mib": round(rows[-1]["after"]["rss_mib"] - first.rss_mib, 1),
                                    "fds": rows[-1]["after"]["fds"] - first.fds}
    return rows


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default="all",
                    help=f"{', '.join(L.TARGETS)}, serve-tictactoe-stdio, serve-tictactoe-model, all, or a,b")
    ap.add_argument("--clients", default="10,50", help="concurrent clients per row, comma-separated")
    ap.add_argument("--calls", type=int, default=50, help="calls per client")
    ap.add_argument("--kill", type=int, default=3, help="subprocess clients SIGKILLed mid-call (0: skip)")
    ap.add_argument("--cancel", type=int, default=5, help="in-process clients cancelled mid-call (0: skip)")
    ap.add_argument("--abandon", type=int, default=100, help="clients that vanish without goodbye (0: skip)")
    ap.add_argument("--legacy", action="store_true", help="clients use the pre-2026 initialize handshake (sessions)")
    ap.add_argument("--json", default=str(Path(__file__).parent / "results" / "bench_load.json"))
    a = ap.parse_args()
    a.clients = [int(x) for x in a.clients.split(",") if x]
    targets = list(L.TARGETS) if a.target == "all" else a.target.split(",")
    console = Console(width=170)
    rows: list[dict[str, Any]] = []
    load = os.getloadavg()[0]
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, transient=True) as progress:
        for target in targets:
            rows += await bench_target(target, a, progress)
    proto = "legacy initialize handshake" if a.legacy else "2026 sessionless protocol"
    console.print("RSS MiB and fds: before → after the step, server process and its children")
    console.print(L.table(rows, f"load and soak over streamable HTTP on loopback ({proto}; {a.calls} calls per client; "
                              f"{os.cpu_count()} CPUs, load avg {load:.1f} at start)"))
    for r in rows:
        if r.get("error_samples"):
            console.print(f"[red]{r['target']} {r['step']}: {r['error_samples'][:2]}")
    Path(a.json).parent.mkdir(parents=True, exist_ok=True)
    Path(a.json).write_text(json.dumps({"calls_per_client": a.calls, "legacy": a.legacy, "cpus": os.cpu_count(),
                                        "loadavg_at_start": round(load, 2), "python": platform.python_version(),
                                        "rows": rows}, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
