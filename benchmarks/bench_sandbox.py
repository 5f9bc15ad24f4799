"""Per-rollout sandboxes: rollouts/s of a stateful third-party server with a fresh server + sandbox per rollout,
without and with the warm pool, against one shared server (the baseline that does *not* isolate rollouts), all in
one run on the same tasks. The isolation column is the share of rollouts whose state reward was 1.0 (each saw only
its own state).

    python benchmarks/bench_sandbox.py [--server memory|filesystem|both] [--rollouts 48] [--concurrency 4]
                                       [--prestart 8] [--turn-ms 0,500]

Servers: the npm `@modelcontextprotocol/server-memory` and `server-filesystem` of `examples/sandboxes` (install with
`npm ci --prefix examples/npm`; setup.sh does). The policy is the config env's scripted `reference` player,
so the time is the server's and toolgym's, not a model's; `--turn-ms` adds a wait per model turn (as for a remote
model endpoint: no CPU), the case the warm pool is for -- servers start while rollouts wait for the model. With
instant turns the spawn rate of the machine bounds both per-rollout modes. Writes
benchmarks/results/bench_sandbox.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from toolgym import load_env, run_rollouts
from toolgym.policies import Policy, PolicySession

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples" / "sandboxes"


def variant(server: str, mode: str, prestart: int, tmp: Path) -> Path:
    """The example's env.toml rewritten for one mode: shared (one server, one state file), per-rollout, pooled."""
    src = EXAMPLES / server / "env.toml"
    text = src.read_text().replace('"../../npm/node_modules', f'"{ROOT}/examples/npm/node_modules')
    text = text.replace("prestart = 4", f"prestart = {prestart if mode == 'pool' else 0}")
    if mode == "shared":
        text = text.replace('scope = "rollout"', 'scope = "shared"').replace("prestart = 0", "")
        if server == "memory":
            text = text.replace("{rollout_dir}/memory.jsonl", str(tmp / "shared-memory.jsonl"))
        else:  # one shared folder, the fixture copied in once
            import shutil

            shared = tmp / "shared-fs"
            shutil.copytree(EXAMPLES / server / "fixtures" / "notes", shared / "notes", dirs_exist_ok=True)
            text = text.replace('"{rollout_dir}"', f'"{shared}"')
            text = "\n".join(line for line in text.splitlines() if not line.startswith("fixtures"))
    out = EXAMPLES / server / f".bench-{mode}.toml"  # beside the original: its tasks and reward module resolve
    out.write_text(text)
    return out


class _Slow(Policy):
    """A policy that waits `seconds` before each turn of `inner` (a model endpoint's latency, without its CPU)."""

    def __init__(self, inner: Policy, seconds: float) -> None:
        self.inner, self.seconds, self.name = inner, seconds, inner.name

    def open(self, tools: list[dict[str, Any]], task: dict[str, Any]) -> PolicySession:
        inner, seconds = self.inner.open(tools, task), self.seconds

        class S(PolicySession):
            async def act(self, messages: list[dict[str, Any]]) -> Any:
                await asyncio.sleep(seconds)
                return await inner.act(messages)

        return S()


async def measure(cfg: Path, n: int, concurrency: int, turn_s: float = 0.0) -> dict[str, Any]:
    env = load_env(str(cfg))
    t_start = time.perf_counter()
    await env.start()  # includes filling the warm pool
    start_s = time.perf_counter() - t_start
    try:
        policy = _Slow(env.scripted_players()["reference"](env), turn_s)
        tasks = [env.build_dataset()[i % 24] for i in range(n)]
        t0 = time.perf_counter()
        trajs = await run_rollouts(env, policy, [(i, 0, t) for i, t in enumerate(tasks)], concurrency)
        wall = time.perf_counter() - t0
        hits = env.provider.pool_hits if env.provider else 0
    finally:
        await env.aclose()
    ok = [t for t in trajs if t.error is None]
    return {"rollouts": n, "wall_s": wall, "rollouts_per_s": n / wall, "start_s": start_s,
            "setup_ms_p50": 1000 * sorted(t.timings["setup_s"] for t in trajs)[len(trajs) // 2],
            "errors": n - len(ok), "isolated": sum(t.rewards.get("state", 0.0) == 1.0 for t in ok) / n,
            "pool_hits": hits}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--server", default="both", choices=["memory", "filesystem", "both"])
    ap.add_argument("--rollouts", type=int, default=48)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--prestart", type=int, default=8)
    ap.add_argument("--turn-ms", default="0,500", help="model-turn latencies to measure, comma-separated")
    a = ap.parse_args()
    turns = [int(x) for x in a.turn_ms.split(",")]
    if not (ROOT / "examples" / "npm" / "node_modules" / ".bin").is_dir():
        raise SystemExit("install the example servers first: npm ci --prefix examples/npm")
    servers = ["memory", "filesystem"] if a.server == "both" else [a.server]
    modes = [("shared", "one shared server (no isolation)"), ("rollout", "server + sandbox per rollout"),
             ("pool", f"per rollout, warm pool of {a.prestart}")]
    results: dict[str, dict[str, Any]] = {}
    console = Console(width=140)
    with tempfile.TemporaryDirectory() as tmp, Progress(console=console, transient=True) as prog:
        bar = prog.add_task("variants", total=len(servers) * len(modes) * len(turns))
        for server in servers:
            for ms in turns:
                for mode, _ in modes:
                    cfg = variant(server, mode, a.prestart, Path(tmp))
                    try:
                        results[f"{server}/{ms}/{mode}"] = asyncio.run(measure(cfg, a.rollouts, a.concurrency,
                                                                               ms / 1000))
                    finally:
                        cfg.unlink()
                    prog.advance(bar)
    t = Table(title=f"per-rollout sandboxes: {a.rollouts} rollouts, concurrency {a.concurrency}, reference player "
                    f"(2 turns) with a model-turn wait; ratio vs per rollout without pool")
    for col in ("server", "turn ms", "mode", "rollouts/s", "ratio", "setup p50 ms", "start s", "pool hits",
                "isolated", "errors"):
        t.add_column(col, justify="left" if col in ("server", "mode") else "right")
    for server in servers:
        for ms in turns:
            base = results[f"{server}/{ms}/rollout"]["rollouts_per_s"]
            for mode, label in modes:
                r = results[f"{server}/{ms}/{mode}"]
                t.add_row(server, str(ms), label, f"{r['rollouts_per_s']:.1f}", f"{r['rollouts_per_s'] / base:.2f}x",
                          f"{r['setup_ms_p50']:.0f}", f"{r['start_s']:.2f}", str(r["pool_hits"]),
                          f"{100 * r['isolated']:.0f} %", str(r["errors"]))
    console.print(t)
    out = ROOT / "benchmarks" / "results" / "bench_sandbox.json"
    out.write_text(json.dumps({"args": vars(a), "results": results}, indent=2))
    console.print(f"-> {out}")


if __name__ == "__main__":
    main()
