"""Position-accuracy evaluation throughput: one-move tic-tac-toe tasks (`-a task=move`) through the full stack
(env, rollout engine, policy, MCP server in-process, exact grading) for a scripted and a tiny-model policy, against
a bare `mcp.Client` loop that makes the same MCP calls per position (new_game(board), make_move, game_result,
end_game) with the move computed inline -- the floor the stack sits on -- measured side by side in one run.

    python benchmarks/bench_positions.py [--positions 600] [--model-positions 200] [--model hf:PATH]

Reports positions/s and the ratio to the bare loop; `--model` defaults to the env's committed checkpoint (greedy,
its default sampling options). Writes benchmarks/results/bench_positions.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from mcp_server_tictactoe import game as g
from toolgym import load_env, load_policy
from toolgym.eval import evaluate
from toolgym.mcp_bridge import SessionProvider


async def stack(uri: str, n: int, concurrency: int, **options: object) -> dict[str, float]:
    env = load_env("tictactoe", task="move", transport="inprocess")
    policy = load_policy(uri, env, **{**env.default_policy_options, **options} if uri.startswith("hf:") else options)
    tasks = env.build_dataset(n, seed=5)
    try:
        await evaluate(env, policy, tasks[: min(16, n)], concurrency=concurrency)  # warm-up (model load, caches)
        t0 = time.perf_counter()
        trajs, summary = await evaluate(env, policy, tasks, concurrency=concurrency)
        wall = time.perf_counter() - t0
    finally:
        await env.aclose()
        await policy.aclose()
    return {"positions": n, "wall_s": wall, "positions_per_s": n / wall, "errors": summary["errors"],
            "optimal": summary["rewards"]["optimal"]["mean"], "legal": summary["metrics"]["legal"]["mean"]}


async def bare(n: int, concurrency: int) -> dict[str, float]:
    env = load_env("tictactoe", task="move", transport="inprocess")  # only for its ServerSpec and tasks
    provider = SessionProvider(env.server, "shared")  # type: ignore[arg-type]
    session = await provider.acquire()
    client = session.client
    tasks = env.build_dataset(n, seed=5)

    async def one(task: dict) -> None:
        res = await client.call_tool("new_game", {"seed": task["seed"], "board": task["board"],
                                                  "random_move_prob": task["random_move_prob"]})
        gid = res.structured_content["game_id"]
        await client.call_tool("make_move", {"game_id": gid, "position": g.best_moves(task["board"], "X")[0]})
        await client.call_tool("game_result", {"game_id": gid})
        await client.call_tool("end_game", {"game_id": gid})

    sem = asyncio.Semaphore(concurrency)

    async def bounded(t: dict) -> None:
        async with sem:
            await one(t)

    await asyncio.gather(*(bounded(t) for t in tasks[:16]))
    t0 = time.perf_counter()
    await asyncio.gather(*(bounded(t) for t in tasks))
    wall = time.perf_counter() - t0
    await provider.aclose()
    return {"positions": n, "wall_s": wall, "positions_per_s": n / wall, "errors": 0}


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--positions", type=int, default=600, help="positions for the bare loop and scripted policies")
    ap.add_argument("--model-positions", type=int, default=200, help="positions for the model policy")
    ap.add_argument("--model", default=None, help="policy URI (default: the env's committed checkpoint)")
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "bench_positions.json"))
    a = ap.parse_args()
    model = a.model or load_env("tictactoe").default_policy
    rows = {"bare mcp.Client loop (minimax inline)": await bare(a.positions, a.concurrency),
            "scripted:minimax through the stack": await stack("scripted:minimax", a.positions, a.concurrency),
            "scripted:random through the stack": await stack("scripted:random", a.positions, a.concurrency)}
    if model.startswith(("hf:", "vllm:")):
        rows[f"{model.split('/')[-1]} (greedy) through the stack"] = await stack(model, a.model_positions,
                                                                                 a.concurrency)
    base = rows["bare mcp.Client loop (minimax inline)"]["positions_per_s"]
    t = Table(title=f"position-eval throughput (one-move tasks, in-process server, concurrency {a.concurrency})")
    for c in ("path", "positions", "wall s", "positions/s", "vs bare loop", "optimal %", "errors"):
        t.add_column(c, justify="right" if c != "path" else "left")
    for name, r in rows.items():
        t.add_row(name, str(r["positions"]), f"{r['wall_s']:.2f}", f"{r['positions_per_s']:.1f}",
                  f"{r['positions_per_s'] / base:.3f}x", f"{100 * r['optimal']:.1f}" if "optimal" in r else "-",
                  str(r["errors"]))
    Console(width=140).print(t)
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps({"model": model, "concurrency": a.concurrency, "rows": rows}, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
