"""`toolgym serve tictactoe`: calls/s of the default against the default before this work (a server process per
request), the other transports, 1 and 10 clients, the scripted expert and the embedded model; and start-up time.

    python benchmarks/bench_serve.py [--duration 10] [--baseline-ref 7eb49dc] [--policies scripted,model]
                                     [--configs before,default,stdio,http,stdio-rollout] [--json PATH]
                                     [--repeat N]

Every configuration is a real `toolgym serve tictactoe ... --transport streamable-http` process on a loopback port;
the clients are `mcp.Client` sessions over HTTP in this process, each calling `suggest_move` on random open positions
(the agent runs one rollout per call) in a loop for `--duration` seconds. Configurations:

  before         the code at `--baseline-ref` (the commit before serving went in-process), extracted with
                 `git archive` and run with its plain default: a stdio `mcp-server-tictactoe` process per request
  default        this code's plain default: the env's `serve_defaults` put the tic-tac-toe server in-process
  stdio          `-a transport=stdio`: one server process, shared by every request (the env's shared session)
  http           `-a transport=http`: one streamable-HTTP server process, shared likewise
  stdio-rollout  `-a transport=stdio -a session_scope=rollout`: a server process per request, taken from the warm
                 pool serve keeps for such servers
  transformers-forward
                 the default with `--model-arg lean_decode=false` (model policy only): every decode step through the
                 transformers forward instead of `toolgym.policies.lean_decode` (and so without drafts)
  no-draft       the default with `--model-arg draft_tokens=0` (model policy only): the lean step without
                 speculative greedy decoding (`toolgym.policies.ngram_draft`)

Policies: `scripted` (`-m scripted:minimax`) and `model` (no `-m`: the embedded checkpoint, greedy). The ratio
column divides each row's calls/s by `before`'s for the same policy and client count, measured in the same run;
`÷ before` is how many times less server CPU a call takes than `before`'s. Start-up: seconds from spawning the process to the `ready` line (absent before), to the first answered
`initialize` and to the first answered `suggest_move` (with the model: after it loaded). Then 3 s of 10 clients
warm up (not counted). Server CPU is the process tree's user+system time over the measured window per call (the
column least moved by other jobs on the machine: on a crowded machine a server of many processes gets a larger
share of the CPU than one process, so calls/s ratios shrink there while CPU per call does not); processes and RSS
are the peak of the server's tree while the clients run. Prints the table, the machine's load average before and
after, and writes benchmarks/results/bench_serve.json.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).parent))
import loadgen as L  # noqa: E402

CONFIGS = {
    "before": [],
    "default": [],
    "stdio": ["-a", "transport=stdio"],
    "http": ["-a", "transport=http"],
    "stdio-rollout": ["-a", "transport=stdio", "-a", "session_scope=rollout"],
    "transformers-forward": ["--model-arg", "lean_decode=false"],
    "no-draft": ["--model-arg", "draft_tokens=0"],
}
POLICIES = {"scripted": ["-m", "scripted:minimax"], "model": []}
MODEL_ONLY = {"transformers-forward", "no-draft"}  # configurations that set a model option


def code_paths(root: Path) -> list[str]:
    """The import roots of a checkout: the framework, every server and env package."""
    return [str(root), *(str(p) for p in sorted((root / "servers").iterdir()) if (p / "pyproject.toml").exists()),
            *(str(p) for p in sorted((root / "envs").iterdir()) if (p / "pyproject.toml").exists())]


def extract(ref: str, dest: Path) -> Path:
    """The framework, servers and envs of commit `ref`, as files under `dest`."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", ref, "toolgym", "servers", "envs"],
                             check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    return dest


@dataclass
class Process:
    """One `toolgym serve` process (streamable HTTP, loopback) and its start-up times."""

    argv: list[str]
    code: Path
    port: int = field(default_factory=L.free_port)
    proc: subprocess.Popen[str] | None = None
    ready_s: float | None = None
    init_s: float | None = None
    first_s: float | None = None
    log: list[str] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    async def start(self, timeout: float = 180.0) -> None:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(code_paths(self.code)), "PYTHONUNBUFFERED": "1"}
        cmd = [sys.executable, "-m", "toolgym.cli", "serve", "tictactoe", *self.argv, "--transport",
               "streamable-http", "--host", "127.0.0.1", "--port", str(self.port)]
        t0 = time.perf_counter()
        self.proc = subprocess.Popen(cmd, env=env, cwd=tempfile.gettempdir(), stdin=subprocess.DEVNULL,  # noqa: S603
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                     start_new_session=True)

        def read() -> None:
            assert self.proc is not None and self.proc.stderr is not None
            for line in self.proc.stderr:
                self.log.append(line)
                if line.startswith("ready: ") and self.ready_s is None:
                    self.ready_s = time.perf_counter() - t0

        threading.Thread(target=read, daemon=True).start()
        deadline = t0 + timeout
        while time.perf_counter() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"serve exited with {self.proc.returncode}: {''.join(self.log)[-2000:]}")
            try:
                async with L.client(self.url) as c:
                    self.init_s = time.perf_counter() - t0
                    res = await c.call_tool("suggest_move", {"board": "O........"})
                    if res.is_error:
                        raise RuntimeError(res.content[0].text)
                    self.first_s = time.perf_counter() - t0
                    return
            except Exception:  # noqa: BLE001 - not listening yet
                await asyncio.sleep(0.1)
        raise RuntimeError(f"serve did not answer within {timeout}s: {''.join(self.log)[-2000:]}")

    def tree(self) -> list[psutil.Process]:
        assert self.proc is not None
        root = psutil.Process(self.proc.pid)
        return [root, *root.children(recursive=True)]

    def cpu_s(self) -> float:
        """User+system CPU seconds of the process tree, reaped children included."""
        total = 0.0
        for p in self.tree():
            with contextlib.suppress(psutil.NoSuchProcess, psutil.ZombieProcess):
                t = p.cpu_times()
                total += t.user + t.system + t.children_user + t.children_system
        return total

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


async def load(srv: Process, clients: int, duration: float, seed: int) -> dict[str, Any]:
    """`clients` sessions calling `suggest_move` in a loop for `duration` s (calls in flight then finish)."""
    boards = L.SuggestMove.boards
    lat: list[float] = []
    errors, peak = [0], {"procs": 0, "rss_mib": 0.0}
    stop_at = [0.0]
    ready, go = asyncio.Semaphore(0), asyncio.Event()

    async def one(k: int) -> None:
        rng = random.Random(seed * 1000 + k)
        async with L.client(srv.url) as c:
            ready.release()
            await go.wait()
            while time.perf_counter() < stop_at[0]:
                t = time.perf_counter()
                try:
                    res = await c.call_tool("suggest_move", {"board": rng.choice(boards)})
                    errors[0] += bool(res.is_error)
                except Exception:  # noqa: BLE001 - counted
                    errors[0] += 1
                lat.append(time.perf_counter() - t)

    def sample(done: threading.Event) -> None:
        while not done.is_set():
            with contextlib.suppress(psutil.Error):
                tree = srv.tree()
                peak["procs"] = max(peak["procs"], len(tree))
                peak["rss_mib"] = max(peak["rss_mib"], sum(p.memory_info().rss for p in tree) / 2**20)
            time.sleep(0.05)

    tasks = [asyncio.create_task(one(k)) for k in range(clients)]
    for _ in range(clients):
        await ready.acquire()
    done = threading.Event()
    sampler = threading.Thread(target=sample, args=(done,), daemon=True)
    sampler.start()
    cpu0, t0 = srv.cpu_s(), time.perf_counter()
    stop_at[0] = t0 + duration
    go.set()
    await asyncio.gather(*tasks)
    wall = time.perf_counter() - t0
    cpu = srv.cpu_s() - cpu0
    done.set()
    sampler.join()
    lat.sort()
    n = len(lat)
    return {"clients": clients, "calls": n, "wall_s": wall, "calls_per_s": n / wall if wall else 0.0,
            "p50_ms": 1e3 * lat[n // 2] if n else float("nan"), "errors": errors[0],
            "cpu_s_per_call": cpu / n if n else float("nan"), **peak}


async def bench(config: str, policy: str, code: Path, duration: float) -> dict[str, Any]:
    srv = Process([*POLICIES[policy], *CONFIGS[config]], code)
    try:
        await srv.start()
        row: dict[str, Any] = {"config": config, "policy": policy, "ready_s": srv.ready_s, "init_s": srv.init_s,
                               "first_s": srv.first_s, "runs": []}
        await load(srv, 10, min(3.0, duration), seed=99)  # warm-up, not counted (first batches, caches, pools)
        for clients in (1, 10):
            row["runs"].append(await load(srv, clients, duration, seed=clients))
        return row
    finally:
        srv.stop()


def table(rows: list[dict[str, Any]], title: str) -> Table:
    t = Table(title=title, title_justify="left")
    for col in ("policy", "config", "clients", "calls/s", "× before", "p50 ms", "CPU s/call", "÷ before", "procs",
                "RSS MiB", "errors", "ready s", "initialize s", "1st answer s"):
        t.add_column(col, justify="left" if col in ("policy", "config") else "right")
    base = {(r["policy"], run["clients"]): run for r in rows if r["config"] == "before" for run in r["runs"]}
    for r in rows:
        for i, run in enumerate(r["runs"]):
            b = base.get((r["policy"], run["clients"]))
            ratio = f"{run['calls_per_s'] / b['calls_per_s']:.1f}" if b and b["calls_per_s"] else "-"
            cpu_ratio = f"{b['cpu_s_per_call'] / run['cpu_s_per_call']:.1f}" if b and run["cpu_s_per_call"] else "-"
            start = [f"{r[k]:.1f}" if r[k] is not None else "-" for k in ("ready_s", "init_s", "first_s")] \
                if i == 0 else ["", "", ""]
            t.add_row(r["policy"] if i == 0 else "", r["config"] if i == 0 else "", str(run["clients"]),
                      f"{run['calls_per_s']:.2f}", ratio, f"{run['p50_ms']:.0f}", f"{run['cpu_s_per_call']:.3f}",
                      cpu_ratio, str(run["procs"]), f"{run['rss_mib']:.0f}", str(run["errors"]), *start)
    return t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--duration", type=float, default=10.0, help="seconds of calls per row")
    ap.add_argument("--baseline-ref", default="7eb49dc", help="commit whose plain default is `before`")
    ap.add_argument("--policies", default="scripted,model")
    ap.add_argument("--configs", default=",".join(CONFIGS))
    ap.add_argument("--json", type=Path, default=ROOT / "benchmarks" / "results" / "bench_serve.json")
    ap.add_argument("--repeat", type=int, default=1,
                    help="rounds of every row; with 2 or more, each round's ratios to its own `before` are summarised "
                         "(median and range): the machine's speed drifts between rounds by more than some margins")
    a = ap.parse_args()
    if a.repeat < 1:
        ap.error("--repeat must be at least 1")
    console = Console(width=200)
    load_before = os.getloadavg()
    rounds: list[list[dict[str, Any]]] = []
    with tempfile.TemporaryDirectory(prefix="bench-serve-") as tmp:
        old = extract(a.baseline_ref, Path(tmp)) if "before" in a.configs.split(",") else None
        for k in range(a.repeat):
            rows = []
            for policy in a.policies.split(","):
                for config in a.configs.split(","):
                    if config in MODEL_ONLY and policy != "model":
                        continue
                    console.print(f"[dim]round {k + 1}/{a.repeat}: {policy} / {config} ...[/]")
                    code = old if config == "before" else ROOT
                    assert code is not None
                    rows.append(asyncio.run(bench(config, policy, code, a.duration)))
            rounds.append(rows)
        shutil.rmtree(tmp, ignore_errors=True)
    load_after = os.getloadavg()
    title = (f"toolgym serve tictactoe: suggest_move over streamable HTTP, {a.duration:g} s per row "
             f"({platform.node()}, {os.cpu_count()} CPUs, load average {load_before[0]:.1f} before, "
             f"{load_after[0]:.1f} after; before = {a.baseline_ref})")
    for k, rows in enumerate(rounds):
        console.print(table(rows, title if a.repeat == 1 else f"round {k + 1} of {a.repeat}: {title}"))
    summary = summarise(rounds) if a.repeat > 1 else []
    if summary:
        console.print(summary_table(summary, f"{a.repeat} rounds: each row's calls/s over its round's `before`"))
    a.json.parent.mkdir(parents=True, exist_ok=True)
    out = {"date": time.strftime("%Y-%m-%d %H:%M"), "baseline_ref": a.baseline_ref, "duration_s": a.duration,
           "cpus": os.cpu_count(), "loadavg_before": load_before, "loadavg_after": load_after, "rows": rounds[0]}
    if a.repeat > 1:
        out.update(rounds=rounds, summary=summary)
    a.json.write_text(json.dumps(out, indent=2))
    console.print(f"wrote {a.json}")


def summarise(rounds: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Per (policy, config, clients): calls/s and its ratio to the same round's `before`, as median, min and max over
    the rounds."""
    ratios: dict[tuple[str, str, int], list[tuple[float, float]]] = {}
    for rows in rounds:
        base = {(r["policy"], run["clients"]): run["calls_per_s"] for r in rows if r["config"] == "before"
                for run in r["runs"]}
        for r in rows:
            for run in r["runs"]:
                b = base.get((r["policy"], run["clients"]))
                ratio = run["calls_per_s"] / b if b else float("nan")
                ratios.setdefault((r["policy"], r["config"], run["clients"]), []).append((run["calls_per_s"], ratio))
    out = []
    for (policy, config, clients), vals in ratios.items():
        cps, rat = [v[0] for v in vals], [v[1] for v in vals]
        out.append({"policy": policy, "config": config, "clients": clients,
                    "calls_per_s": {"median": statistics.median(cps), "min": min(cps), "max": max(cps)},
                    "x_before": {"median": statistics.median(rat), "min": min(rat), "max": max(rat)}})
    return out


def summary_table(summary: list[dict[str, Any]], title: str) -> Table:
    t = Table(title=title, title_justify="left")
    for col in ("policy", "config", "clients", "calls/s median (min-max)", "× before median (min-max)"):
        t.add_column(col, justify="left" if col in ("policy", "config") else "right")
    for s in summary:
        c, x = s["calls_per_s"], s["x_before"]
        t.add_row(s["policy"], s["config"], str(s["clients"]), f"{c['median']:.2f} ({c['min']:.2f}-{c['max']:.2f})",
                  f"{x['median']:.1f} ({x['min']:.1f}-{x['max']:.1f})")
    return t


if __name__ == "__main__":
    main()
