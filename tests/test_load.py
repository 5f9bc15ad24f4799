"""Load and soak over streamable HTTP on loopback: `toolgym serve tictactoe` and each bundled MCP server under N
concurrent clients × M calls, clients killed mid-call, and the server's RSS / open fds before and after.

The load generator is `benchmarks/loadgen.py` (shared with `benchmarks/bench_load.py`, which prints the same table
on demand). Every test launches its own server process on a free 127.0.0.1 port. The table of what was measured is
printed at the end of the module (also under pytest's output capture).

Bounds (measured on 2 shared cores; see docs/benchmarks.md, "Load and soak"):
- errors: 0 for well-formed calls, and the server answers a fresh client after clients were killed;
- p99 per call < 3 s for the bundled servers, < 6 s for `toolgym serve` (measured ≤ 0.27 s and ≤ 0.44 s at 50
  clients): generous, to catch hangs and serialised requests, not to benchmark;
- from after a warm-up at the same concurrency to after the load, 3 clients SIGKILLed mid-call and 5 cancelled:
  RSS growth < 32 MiB (measured ≤ 4 MiB here, ≤ 13 MiB without the warm-up: allocator high-water marks of 50
  concurrent requests, flat over further rounds; one leaked stdio env-server child alone is ~68 MiB), fd growth ≤ 2
  (measured 0) and no new processes.
"""

from __future__ import annotations

import asyncio
import io
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import loadgen as L  # noqa: E402

P99_S = {"serve-tictactoe": 6.0, "tictactoe": 3.0, "sql": 3.0, "wiki": 3.0}
RSS_GROWTH_MIB = 32.0
FD_GROWTH = 2
SHAPES = ((10, 30), (50, 10))  # (clients, calls per client): 800 calls per target

ROWS: list[dict[str, Any]] = []


@pytest.fixture(scope="module", autouse=True)
def _print_table(request: pytest.FixtureRequest):
    yield
    plugins = request.config.pluginmanager
    reporter, capman = plugins.getplugin("terminalreporter"), plugins.getplugin("capturemanager")
    if ROWS and reporter is not None and capman is not None:
        from rich.console import Console

        console = Console(width=180, file=io.StringIO(), color_system=None)
        console.print(L.table(ROWS, "load and soak over streamable HTTP on loopback (tests/test_load.py)"))
        with capman.global_and_fixture_disabled():  # shown under output capture too
            reporter.write_line("")
            for line in console.file.getvalue().splitlines():  # type: ignore[attr-defined]
                reporter.write_line(line)


def _check_growth(first: L.Usage, after: L.Usage, what: str) -> None:
    assert after.fds - first.fds <= FD_GROWTH, f"{what}: fds {first.fds} -> {after.fds}"
    assert after.rss_mib - first.rss_mib < RSS_GROWTH_MIB, f"{what}: RSS {first.rss_mib:.1f} -> {after.rss_mib:.1f}"
    assert after.procs == first.procs, f"{what}: {first.procs} -> {after.procs} processes"


async def _load_and_kill(target: str) -> None:
    async with L.Server(target) as srv:
        await L.warm_up(srv.url, target, clients=50, calls=4)  # the allocator's high-water mark of 50 at once
        first = before = await srv.settled_usage()
        for clients, calls in SHAPES:
            r = await L.run_load(srv.url, target, clients, calls, seed=clients)
            after = await srv.settled_usage(before.fds)
            ROWS.append(L.load_row(r, before, after))
            assert r.errors == 0, r.error_samples
            assert r.calls == clients * calls and len(r.latencies) == r.calls
            assert r.pct_ms(0.99) < 1000 * P99_S[target], f"p99 {r.pct_ms(0.99):.0f} ms"
            before = after
        _check_growth(first, before, f"{target} after {sum(c * m for c, m in SHAPES)} calls")

        k = await L.kill_clients(srv.url, target, 3)
        done = await L.cancel_clients(srv.url, target, 5)
        after = await srv.settled_usage(before.fds)
        errors = await L.probe(srv.url, target)
        ROWS.append(L.kill_row(target, k, 5, done, before, after, srv.alive, errors))
        assert srv.alive, srv.log_tail()
        assert errors == [], errors
        assert k.killed == 3 and k.mid_call >= 1 and k.calls_before_kill >= 15, k
        _check_growth(first, after, f"{target} after killed clients")


@pytest.mark.slow
@pytest.mark.parametrize("target", L.TARGETS)
def test_load_soak_and_killed_clients(target: str) -> None:
    asyncio.run(_load_and_kill(target))


@pytest.mark.slow
def test_legacy_sessions_left_by_vanished_clients_cost_a_bounded_amount() -> None:
    """Clients on the pre-2026 initialize handshake own an MCP session on the server; one that vanishes (killed, or no
    DELETE) leaves it until the SDK's idle timeout (30 min). Bound what that costs: < 200 KiB per session (measured
    ~40 KiB), no fds, and the server keeps serving both protocols."""

    async def go() -> None:
        target, n = "tictactoe", 100
        async with L.Server(target) as srv:
            await L.warm_up(srv.url, target, legacy=True)
            await L.abandon_clients(srv.url, target, 20, legacy=True)
            before = await srv.settled_usage()
            k = await L.kill_clients(srv.url, target, 2, legacy=True)
            await L.abandon_clients(srv.url, target, n, legacy=True)
            after = await srv.settled_usage(before.fds)
            errors = await L.probe(srv.url, target, legacy=True) + await L.probe(srv.url, target)
            ROWS.append(L.abandon_row(f"{target} (legacy)", n, 2, before, after, errors))
            assert srv.alive and errors == [] and k.mid_call >= 1
            assert after.fds - before.fds <= FD_GROWTH
            assert 1024 * (after.rss_mib - before.rss_mib) / (n + 2) < 200

    asyncio.run(go())


@pytest.mark.slow
def test_serve_with_stdio_env_servers_leaves_no_child_after_killed_clients() -> None:
    """`toolgym serve` with the env's default stdio transport spawns one env server per request (session scope
    "rollout"); a client killed mid-call must not leave that child behind."""

    async def go() -> None:
        target = "serve-tictactoe-stdio"
        async with L.Server(target) as srv:
            await L.warm_up(srv.url, target, clients=1, calls=2)
            before = await srv.settled_usage()
            k = await L.kill_clients(srv.url, target, 2, min_calls=1)
            after = await srv.settled_usage(before.fds, pause=3.0)
            errors = await L.probe(srv.url, target, calls=1)
            ROWS.append(L.kill_row(target, k, 0, 0, before, after, srv.alive, errors))
            assert srv.alive and errors == [] and k.mid_call == 2
            assert after.procs == before.procs, f"{after.procs - before.procs} env server(s) left behind"
            assert after.fds - before.fds <= FD_GROWTH

    asyncio.run(go())


def test_smoke_load_and_cancelled_clients() -> None:
    """Fast: 4 clients × 10 calls on the tic-tac-toe server, 2 clients cancelled mid-call, then a fresh client."""

    async def go() -> None:
        target = "tictactoe"
        async with L.Server(target) as srv:
            before = await srv.settled_usage(pause=0.2)
            r = await L.run_load(srv.url, target, 4, 10)
            assert r.errors == 0 and r.calls == 40, r.error_samples
            await L.cancel_clients(srv.url, target, 2, after_s=0.2)
            after = await srv.settled_usage(before.fds, pause=0.2)
            assert srv.alive and await L.probe(srv.url, target) == []
            assert after.fds - before.fds <= FD_GROWTH

    asyncio.run(go())
