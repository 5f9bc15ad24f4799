"""Load generator for MCP servers over streamable HTTP (loopback only): launch a server, drive it with N concurrent
`mcp.Client` sessions × M tool calls, measure latency / throughput / errors and the server's RSS and open fds, and
kill clients mid-call. Shared by `benchmarks/bench_load.py` (the table on demand) and `tests/test_load.py` (bounds).

Targets (each launched as its own process on a free loopback port):

    serve-tictactoe  `toolgym serve tictactoe -m scripted:minimax -a transport=inprocess --transport streamable-http`;
                     calls `suggest_move` on random open positions (the agent runs one rollout per call)
    serve-tictactoe-stdio  the same with `-a transport=stdio -a session_scope=rollout` (serve's default before it ran
                     the env's server in-process): every request takes its own `mcp-server-tictactoe` child (from a
                     warm pool of pre-started ones), so it measures process churn
    serve-tictactoe-model  `toolgym serve tictactoe` with the env's embedded default model (no `-m`), in-process env
    tictactoe        `mcp-server-tictactoe --transport streamable-http`; each client plays games in a loop:
                     `new_game`, `make_move` (a free cell) until over, `end_game`
    sql              `mcp-server-sql --transport streamable-http` (bundled fixture, in-memory SQLite); each client opens
                     its own database with `open_session`, then `run_query` (a point lookup and a join), `close_session`
    wiki             `mcp-server-wiki --index <cached world index> --transport streamable-http`; `search` and
                     `open_page` alternately

Every tool call counts (setup and teardown calls such as `open_session` are made before the clock starts and after it
stops). A call is an error if it raises or returns `isError`. Memory is the resident set (RSS) of the server process
and its descendants; fds are the entries of /proc/PID/fd, summed the same way. Both are read after a settle pause.

Run as a script this module is the *killable client* used for the mid-call kill scenario:

    python benchmarks/loadgen.py client URL TARGET [K [legacy|modern]]

It makes calls forever and writes `>` to stdout before and `<` after each call (unbuffered), so the parent can tell a
kill that landed mid-call (last byte `>`) from one between calls.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil

BIN = Path(sys.executable).parent
TARGETS = ("serve-tictactoe", "tictactoe", "sql", "wiki")  # "all"; serve-tictactoe-stdio|-model on request


# ------------------------------------------------------------------------------------------------ workloads
class Workload:
    """One client's calls: `setup` (not timed), then `call(i)` M times (timed), then `teardown` (not timed)."""

    def __init__(self, client: Any, rng: random.Random) -> None:
        self.client, self.rng = client, rng

    async def setup(self) -> None:
        pass

    async def call(self, i: int) -> Any:
        raise NotImplementedError

    async def teardown(self) -> None:
        pass


def _open_boards(n: int = 200, seed: int = 0) -> list[str]:
    """Distinct non-terminal positions with X to move (equal X and O counts), for `suggest_move`."""
    from mcp_server_tictactoe import game as g

    rng, out = random.Random(seed), set()
    while len(out) < n:
        b = "." * 9
        for _ in range(rng.randrange(0, 4)):
            for side in "XO":
                if not g.is_over(b):
                    b = g.play(b, rng.choice(g.free_cells(b)), side)
        if not g.is_over(b) and b.count("X") == b.count("O"):
            out.add(b)
    return sorted(out)


class SuggestMove(Workload):
    boards = _open_boards()

    async def call(self, i: int) -> Any:
        return await self.client.call_tool("suggest_move", {"board": self.rng.choice(self.boards)})


_FREE = re.compile(r"Free cells: ([\d, ]+)\.")


class PlayGames(Workload):
    """Games in a loop; a call is `new_game`, `make_move` or `end_game`, so each game costs ~4-7 calls."""

    game: str | None = None
    free: list[int] = []

    async def call(self, i: int) -> Any:
        if self.game is None:
            res = await self.client.call_tool("new_game", {"seed": self.rng.randrange(1 << 30), "x_starts": None,
                                                           "random_move_prob": 0.3})
            if not res.is_error:
                self.game = res.structured_content["game_id"]
                self._read(res.structured_content["board"])
            return res
        if not self.free:  # game over: forget it
            res = await self.client.call_tool("end_game", {"game_id": self.game})
            self.game = None
            return res
        res = await self.client.call_tool("make_move", {"game_id": self.game, "position": self.rng.choice(self.free)})
        if not res.is_error:
            self._read(res.content[0].text)
        return res

    def _read(self, text: str) -> None:
        m = _FREE.search(text)
        self.free = [int(c) for c in m.group(1).split(",")] if m else []

    async def teardown(self) -> None:
        if self.game is not None:
            await self.client.call_tool("end_game", {"game_id": self.game})


SQL_QUERIES = [
    "SELECT name, city FROM customers WHERE customer_id = {k}",
    "SELECT o.order_id, SUM(oi.quantity * oi.unit_price) FROM orders o JOIN order_items oi ON oi.order_id = o.order_id "
    "WHERE o.customer_id = {k} GROUP BY o.order_id",
]


class SqlQueries(Workload):
    session: str | None = None

    async def setup(self) -> None:
        import json

        res = await self.client.call_tool("open_session", {})
        self.session = json.loads(res.content[0].text)["session"]

    async def call(self, i: int) -> Any:
        sql = SQL_QUERIES[i % 2].format(k=self.rng.randrange(1, 40))
        return await self.client.call_tool("run_query", {"sql": sql, "session": self.session})

    async def teardown(self) -> None:
        if self.session:
            await self.client.call_tool("close_session", {"session": self.session})


WIKI_WORDS = ["river", "war", "king", "city", "music", "mountain", "bridge", "festival", "trade", "island", "poet",
              "museum", "harbour", "battle", "school", "temple"]


def _wiki_titles() -> list[str]:
    from mcp_server_wiki.index import WikiIndex, ensure_index

    idx = WikiIndex(ensure_index("world"))
    try:
        titles = {h.title for w in WIKI_WORDS for h in idx.search(w, 5)}
    finally:
        idx.close()
    return sorted(titles) or ["Zisteth"]


class WikiReads(Workload):
    titles: list[str] = []

    async def call(self, i: int) -> Any:
        if i % 2 == 0:
            return await self.client.call_tool("search", {"query": self.rng.choice(WIKI_WORDS), "k": 5})
        return await self.client.call_tool("open_page", {"title": self.rng.choice(self.titles)})


WORKLOADS: dict[str, type[Workload]] = {"serve-tictactoe": SuggestMove, "serve-tictactoe-stdio": SuggestMove,
                                        "serve-tictactoe-model": SuggestMove, "tictactoe": PlayGames,
                                        "sql": SqlQueries, "wiki": WikiReads}


def prepare(target: str) -> None:
    """Work done once per process before a target is loaded (kept out of every timing)."""
    if target == "wiki" and not WikiReads.titles:
        WikiReads.titles = _wiki_titles()


# ------------------------------------------------------------------------------------------------ the server
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def server_command(target: str, port: int) -> list[str]:
    http = ["--transport", "streamable-http", "--host", "127.0.0.1", "--port", str(port)]
    if target.startswith("serve-tictactoe"):
        env = ["transport=stdio", "session_scope=rollout"] if target == "serve-tictactoe-stdio" else ["transport=inprocess"]
        model = [] if target == "serve-tictactoe-model" else ["-m", "scripted:minimax"]
        return [str(BIN / "toolgym"), "serve", "tictactoe", *model, *(x for e in env for x in ("-a", e)), *http]
    if target == "tictactoe":
        return [str(BIN / "mcp-server-tictactoe"), *http]
    if target == "sql":
        return [str(BIN / "mcp-server-sql"), *http]
    if target == "wiki":
        from mcp_server_wiki.index import ensure_index

        return [str(BIN / "mcp-server-wiki"), "--index", str(ensure_index("world")), *http]
    raise ValueError(f"unknown target {target!r}: one of {', '.join(TARGETS)}")


@dataclass
class Usage:
    rss_mib: float
    fds: int
    procs: int


class Server:
    """A server process on a free loopback port; its log goes to a temp file (see `log_tail` on failure)."""

    def __init__(self, target: str, start_timeout: float = 60.0) -> None:
        self.target, self.port = target, free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.start_timeout = start_timeout
        self.proc: subprocess.Popen[bytes] | None = None
        self._log = tempfile.NamedTemporaryFile(prefix=f"load-{target}-", suffix=".log", delete=False)  # noqa: SIM115

    async def start(self) -> Server:
        self.proc = subprocess.Popen(server_command(self.target, self.port), stdin=subprocess.DEVNULL,  # noqa: S603
                                     stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + self.start_timeout
        async with httpx.AsyncClient() as c:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"{self.target} exited with {self.proc.returncode}:\n{self.log_tail()}")
                with contextlib.suppress(httpx.HTTPError):
                    await c.get(self.url, timeout=1.0)
                    return self
                await asyncio.sleep(0.1)
        self.stop()
        raise RuntimeError(f"{self.target} did not answer at {self.url} within {self.start_timeout}s")

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def usage(self) -> Usage:
        """RSS (MiB) and open fds of the server and its descendants."""
        assert self.proc is not None
        root = psutil.Process(self.proc.pid)
        rss, fds, n = 0, 0, 0
        for p in [root, *root.children(recursive=True)]:
            with contextlib.suppress(psutil.NoSuchProcess, psutil.ZombieProcess):
                rss += p.memory_info().rss
                fds += p.num_fds()
                n += 1
        return Usage(rss / 2**20, fds, n)

    async def settled_usage(self, baseline_fds: int | None = None, pause: float = 1.0, timeout: float = 8.0) -> Usage:
        """Usage after `pause`, then polled until the fd count is back to `baseline_fds` or stops changing
        (closed connections are reaped asynchronously), at most `timeout` seconds."""
        await asyncio.sleep(pause)
        deadline, last = time.monotonic() + timeout, self.usage()
        while time.monotonic() < deadline:
            if baseline_fds is not None and last.fds <= baseline_fds:
                break
            await asyncio.sleep(0.5)
            now = self.usage()
            if baseline_fds is None and now.fds == last.fds:
                break
            last = now
        return last

    def log_tail(self, n: int = 3000) -> str:
        self._log.flush()
        return Path(self._log.name).read_text(errors="replace")[-n:]

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self._log.close()
        with contextlib.suppress(OSError):
            os.unlink(self._log.name)

    async def __aenter__(self) -> Server:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        self.stop()


# ------------------------------------------------------------------------------------------------ the load
@dataclass
class LoadResult:
    target: str
    clients: int
    calls: int  # calls made (clients × calls per client)
    wall_s: float
    latencies: list[float] = field(repr=False, default_factory=list)
    errors: int = 0
    error_samples: list[str] = field(default_factory=list)

    @property
    def calls_per_s(self) -> float:
        return self.calls / self.wall_s if self.wall_s else 0.0

    def pct_ms(self, q: float) -> float:
        if not self.latencies:
            return float("nan")
        lat = sorted(self.latencies)
        return 1e3 * lat[min(len(lat) - 1, int(q * len(lat)))]


def client(url: str, legacy: bool = False) -> Any:
    """An `mcp.Client` for `url`: the 2026 sessionless protocol it negotiates by default, or with `legacy` the
    initialize handshake, whose streamable-HTTP session (an `mcp-session-id`) the server keeps until the client
    deletes it or it idles out (what older SDKs and other clients do)."""
    from mcp import Client

    return Client(url, mode="legacy") if legacy else Client(url)


async def run_load(url: str, target: str, clients: int, calls: int, seed: int = 0, call_timeout: float = 60.0,
                   on_call: Callable[[], None] | None = None, legacy: bool = False) -> LoadResult:
    """`clients` concurrent MCP sessions (one `mcp.Client` each: its own HTTP connection pool) × `calls` tool calls.
    The clock runs from the moment every client has connected and set up to the last call's answer."""
    prepare(target)
    cls = WORKLOADS[target]
    res = LoadResult(target, clients, clients * calls, 0.0)
    ready, go = asyncio.Semaphore(0), asyncio.Event()

    def failed(msg: str) -> None:
        res.errors += 1
        if len(res.error_samples) < 5:
            res.error_samples.append(msg[:300])

    async def one(k: int) -> None:
        connected = False
        try:
            async with client(url, legacy) as c:
                w = cls(c, random.Random(seed * 1_000_003 + k))
                await w.setup()
                connected = True
                ready.release()
                await go.wait()
                for i in range(calls):
                    t = time.perf_counter()
                    try:
                        out = await asyncio.wait_for(w.call(i), call_timeout)
                    except Exception as exc:  # noqa: BLE001 - counted and sampled
                        failed(f"{type(exc).__name__}: {exc}")
                    else:
                        if out.is_error:
                            failed(out.content[0].text if out.content else "isError")
                    res.latencies.append(time.perf_counter() - t)
                    if on_call:
                        on_call()
                await w.teardown()
        except Exception as exc:  # noqa: BLE001 - a client that could not connect: all its calls are errors
            failed(f"client {k}: {type(exc).__name__}: {exc}")
            if not connected:
                res.errors += calls - 1
                ready.release()

    tasks = [asyncio.create_task(one(k)) for k in range(clients)]
    for _ in range(clients):
        await ready.acquire()
    t0 = time.perf_counter()
    go.set()
    await asyncio.gather(*tasks)
    res.wall_s = time.perf_counter() - t0
    return res


async def cancel_clients(url: str, target: str, clients: int, after_s: float = 0.3, seed: int = 99,
                         legacy: bool = False) -> int:
    """`clients` in-process clients calling in a loop, cancelled after `after_s` (each mid-call or between calls):
    their `mcp.Client` contexts unwind and close the connections. Returns the calls they completed."""
    prepare(target)
    done = 0

    async def loop(k: int) -> None:
        nonlocal done
        async with client(url, legacy) as c:
            w = WORKLOADS[target](c, random.Random(seed + k))
            await w.setup()
            i = 0
            while True:
                await w.call(i)
                i += 1
                done += 1

    tasks = [asyncio.create_task(loop(k)) for k in range(clients)]
    await asyncio.sleep(after_s)
    for t in tasks:
        t.cancel()
    for t in tasks:
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await t
    return done


async def abandon_clients(url: str, target: str, clients: int, calls: int = 2, legacy: bool = False,
                          concurrency: int = 10) -> None:
    """`clients` clients that set up (e.g. `open_session`), make `calls` calls and vanish the way a killed client
    does: no teardown call and no HTTP DELETE of their MCP session (`terminate_on_close=False`). What they leave
    on the server (a legacy MCP session until its idle timeout, an SQL session database, a game) is what a crashed
    client leaves; cheap enough to do by the hundred, unlike `kill_clients`."""
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    prepare(target)
    sem = asyncio.Semaphore(concurrency)

    async def one(k: int) -> None:
        async with sem:
            transport = streamable_http_client(url, terminate_on_close=False)
            async with (Client(transport, mode="legacy") if legacy else Client(transport)) as c:
                w = WORKLOADS[target](c, random.Random(5000 + k))
                await w.setup()
                for i in range(calls):
                    await w.call(i)

    await asyncio.gather(*(one(k) for k in range(clients)))


@dataclass
class KillResult:
    killed: int
    mid_call: int  # kills that landed while a call was in flight (the client's last mark was '>')
    calls_before_kill: int
    seconds: float = 0.0


async def kill_clients(url: str, target: str, clients: int, min_calls: int = 5, start_timeout: float = 60.0,
                       legacy: bool = False) -> KillResult:
    """Start `clients` subprocess clients (`python loadgen.py client URL TARGET`) calling in a loop; once all have
    finished `min_calls` calls, SIGKILL each one at a moment its last mark is `>` (a call in flight; a process
    that never shows one within 2 s is killed anyway). The kernel then drops its sockets: no MCP goodbye, no HTTP
    close. A process stuck before `min_calls` is killed at the `start_timeout` deadline."""
    t0 = time.monotonic()
    procs = [subprocess.Popen([sys.executable, __file__, "client", url, target, str(k),  # noqa: S603
                               "legacy" if legacy else "modern"],
                              stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
             for k in range(clients)]
    marks = [bytearray() for _ in procs]
    for p in procs:
        os.set_blocking(p.stdout.fileno(), False)  # type: ignore[union-attr]

    def drain() -> None:
        for p, m in zip(procs, marks):
            with contextlib.suppress(BlockingIOError, TypeError, ValueError):
                m += p.stdout.read() or b""  # type: ignore[union-attr, operator]

    try:
        deadline = time.monotonic() + start_timeout
        while time.monotonic() < deadline:
            drain()
            if all(m.count(b"<") >= min_calls or p.poll() is not None for p, m in zip(procs, marks)):
                break
            await asyncio.sleep(0.02)
        for p, m in zip(procs, marks):
            until = time.monotonic() + 2.0
            while p.poll() is None and m[-1:] != b">" and time.monotonic() < until:
                await asyncio.sleep(0.001)
                drain()
            if p.poll() is None:
                p.send_signal(signal.SIGKILL)
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGKILL)
        for p in procs:
            p.wait()
    drain()
    for p in procs:
        p.stdout.close()  # type: ignore[union-attr]
    mid = sum(m[-1:] == b">" for m in marks)
    return KillResult(len(procs), mid, sum(m.count(b"<") for m in marks), time.monotonic() - t0)


async def _client_forever(url: str, target: str, k: int, legacy: bool) -> None:
    prepare(target)
    out = sys.stdout.buffer
    async with client(url, legacy) as c:
        w = WORKLOADS[target](c, random.Random(1000 + k))
        await w.setup()
        i = 0
        while True:
            out.write(b">")
            out.flush()
            await w.call(i)
            out.write(b"<")
            out.flush()
            i += 1


async def probe(url: str, target: str, calls: int = 3, legacy: bool = False) -> list[str]:
    """A fresh client makes a few calls; returns the error texts (empty: the server is healthy)."""
    r = await run_load(url, target, 1, calls, seed=12345, call_timeout=20.0, legacy=legacy)
    return r.error_samples if r.errors else []


async def warm_up(url: str, target: str, clients: int = 4, calls: int = 10, legacy: bool = False) -> None:
    """First calls pay for imports, caches and allocator growth; keep them out of the `before` snapshot."""
    await run_load(url, target, clients, calls, seed=7, legacy=legacy)


# ------------------------------------------------------------------------------------------------ the table
COLUMNS = ("target", "step", "clients", "calls", "calls/s", "× 1 client", "p50 ms", "p99 ms", "errors", "RSS MiB",
           "fds", "notes")


def usage_dict(u: Usage) -> dict[str, Any]:
    return {"rss_mib": round(u.rss_mib, 1), "fds": u.fds, "procs": u.procs}


def _procs_note(before: Usage, after: Usage) -> str:
    n = after.procs - before.procs
    return f"; {n:+d} process{'es' if abs(n) != 1 else ''} left" if n else ""


def load_row(r: LoadResult, before: Usage, after: Usage, base_cps: float | None = None, notes: str = ""
             ) -> dict[str, Any]:
    """A table row (and JSON record) for one `run_load`."""
    return {"target": r.target, "step": "1 client" if r.clients == 1 else f"{r.clients} clients",
            "clients": r.clients, "calls": r.calls, "calls_per_s": round(r.calls_per_s, 1),
            **({"x_one_client": round(r.calls_per_s / base_cps, 2)} if base_cps else {}),
            "p50_ms": round(r.pct_ms(0.5), 2), "p99_ms": round(r.pct_ms(0.99), 2), "errors": r.errors,
            "error_samples": r.error_samples, "before": usage_dict(before), "after": usage_dict(after),
            "notes": (notes + _procs_note(before, after)).lstrip("; ")}


def kill_row(target: str, k: KillResult, cancelled: int, completed: int, before: Usage, after: Usage, alive: bool,
             probe_errors: list[str]) -> dict[str, Any]:
    """A row for `kill_clients` (`k`) followed by `cancel_clients` (`cancelled` clients, `completed` calls)."""
    ok = alive and not probe_errors
    return {"target": target, "step": f"kill {k.killed} + cancel {cancelled}", "clients": k.killed + cancelled,
            "calls": k.calls_before_kill + completed, "errors": len(probe_errors), "error_samples": probe_errors,
            "mid_call": k.mid_call, "alive": alive, "before": usage_dict(before), "after": usage_dict(after),
            "notes": f"{k.mid_call}/{k.killed} kills mid-call, " + ("serves after" if ok else "NOT SERVING AFTER")
            + _procs_note(before, after)}


def abandon_row(target: str, n: int, calls: int, before: Usage, after: Usage, probe_errors: list[str]
                ) -> dict[str, Any]:
    """A row for `abandon_clients`: the RSS growth per abandoned client in the notes."""
    per = 1024 * (after.rss_mib - before.rss_mib) / n
    return {"target": target, "step": f"abandon {n}", "clients": n, "calls": n * calls, "errors": len(probe_errors),
            "error_samples": probe_errors, "before": usage_dict(before), "after": usage_dict(after),
            "kib_per_client": round(per, 1), "notes": f"{per:+.0f} KiB per client" + _procs_note(before, after)}


def table(rows: list[dict[str, Any]], title: str) -> Any:
    """The rich table of `rows` (the benchmark prints it; the load tests print it at the end of their module)."""
    from rich.table import Table

    t = Table(title=title)
    for c in COLUMNS:
        t.add_column(c, justify="left" if c in ("target", "step", "notes") else "right")
    for r in rows:
        b, f = r["before"], r["after"]
        t.add_row(r["target"], r["step"], str(r["clients"]), str(r["calls"]),
                  f"{r['calls_per_s']:.0f}" if "calls_per_s" in r else "",
                  f"{r['x_one_client']:.2f}x" if "x_one_client" in r else "",
                  f"{r['p50_ms']:.1f}" if "p50_ms" in r else "", f"{r['p99_ms']:.1f}" if "p99_ms" in r else "",
                  str(r["errors"]), f"{b['rss_mib']:.1f} → {f['rss_mib']:.1f}", f"{b['fds']} → {f['fds']}",
                  r["notes"])
    return t


if __name__ == "__main__":
    if len(sys.argv) >= 4 and sys.argv[1] == "client":
        asyncio.run(_client_forever(sys.argv[2], sys.argv[3], int(sys.argv[4]) if len(sys.argv) > 4 else 0,
                                    sys.argv[5:6] == ["legacy"]))
    else:
        sys.exit(__doc__)
