"""Rollout-stack overhead: scripted minimax games through the full toolgym stack vs a bare `mcp.Client` loop that
makes the same calls, per transport (in-process, stdio, streamable HTTP), measured side by side in one run.

    python benchmarks/bench_mcp.py [--games 300] [--concurrency 8] [--transports inprocess,stdio,http]

Full stack = env + rollout engine + scripted minimax player (board parsed from the tool text, schema validation,
hidden-arg injection, rubric with a grading call, cleanup). Bare = one client, the same tool calls
(new_game, make_move..., game_result, end_game) with the moves computed inline. Reports games/s, calls/game, ms per
call and the full/bare ratio per call. Writes benchmarks/results/bench_mcp.json.
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
from toolgym import load_env, load_policy, run_rollouts
from toolgym.mcp_bridge import MCPSession, SessionProvider


async def full_stack(transport: str, games: int, concurrency: int) -> dict[str, float]:
    env = load_env("tictactoe", transport=transport, min_random_move_prob=0.0, max_random_move_prob=0.5)
    async with env:
        policy = load_policy("scripted:minimax", env)
        tasks = env.build_dataset(games, seed=1)
        await run_rollouts(env, policy, [(i, 0, t) for i, t in enumerate(tasks[:10])], concurrency)  # warm-up
        provider: SessionProvider = env.provider  # type: ignore[assignment]
        before = provider.shared.calls if provider.shared else 0
        t0 = time.perf_counter()
        trajs = await run_rollouts(env, policy, [(i, 0, t) for i, t in enumerate(tasks)], concurrency)
        wall = time.perf_counter() - t0
        calls = (provider.shared.calls if provider.shared else 0) - before
    errors = sum(1 for t in trajs if t.error)
    return {"games_per_s": games / wall, "calls": calls, "ms_per_call": 1000 * wall / calls, "errors": errors}


async def bare(transport: str, games: int, concurrency: int) -> dict[str, float]:
    env = load_env("tictactoe", transport=transport)  # only for its ServerSpec
    provider = SessionProvider(env.server, "shared")  # type: ignore[arg-type]
    session: MCPSession = await provider.acquire()
    client = session.client
    tasks = env.build_dataset(games, seed=1)
    n_calls = 0

    async def play(task: dict) -> None:
        nonlocal n_calls
        res = await client.call_tool("new_game", {"seed": task["seed"], "x_starts": task["x_starts"],
                                                  "random_move_prob": task["random_move_prob"]})
        gid = res.structured_content["game_id"]
        n_calls += 1
        board = "........." if task["x_starts"] else None
        while True:
            if board is None:
                text = (await client.call_tool("get_board", {"game_id": gid})).content[0].text
                n_calls += 1
                from toolgym_tictactoe import parse_board

                board = parse_board(text)
            if g.is_over(board):
                break
            cell = g.best_moves(board, "X")[0]
            out = await client.call_tool("make_move", {"game_id": gid, "position": cell})
            n_calls += 1
            text = out.content[0].text
            if "Game over" in text:
                break
            from toolgym_tictactoe import parse_board

            board = parse_board(text)
        await client.call_tool("game_result", {"game_id": gid})
        await client.call_tool("end_game", {"game_id": gid})
        n_calls += 2

    sem = asyncio.Semaphore(concurrency)

    async def one(t: dict) -> None:
        async with sem:
            await play(t)

    await asyncio.gather(*(one(t) for t in tasks[:10]))
    n_calls = 0
    t0 = time.perf_counter()
    await asyncio.gather(*(one(t) for t in tasks))
    wall = time.perf_counter() - t0
    await provider.aclose()
    return {"games_per_s": games / wall, "calls": n_calls, "ms_per_call": 1000 * wall / n_calls, "errors": 0}


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--games", type=int, default=300)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--transports", default="inprocess,stdio,http")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "bench_mcp.json"))
    a = ap.parse_args()
    rows = []
    for tr in a.transports.split(","):
        b = await bare(tr, a.games, a.concurrency)
        f = await full_stack(tr, a.games, a.concurrency)
        rows.append({"transport": tr, "bare": b, "full": f, "ratio_per_call": f["ms_per_call"] / b["ms_per_call"]})
    t = Table(title=f"scripted minimax games ({a.games} games, concurrency {a.concurrency})")
    for c in ("transport", "bare games/s", "full games/s", "bare ms/call", "full ms/call", "calls/game (full)",
              "full/bare per call", "errors"):
        t.add_column(c, justify="right")
    for r in rows:
        t.add_row(r["transport"], f"{r['bare']['games_per_s']:.0f}", f"{r['full']['games_per_s']:.0f}",
                  f"{r['bare']['ms_per_call']:.3f}", f"{r['full']['ms_per_call']:.3f}",
                  f"{r['full']['calls'] / a.games:.1f}", f"{r['ratio_per_call']:.2f}x", str(r["full"]["errors"]))
    Console(width=130).print(t)
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps({"games": a.games, "concurrency": a.concurrency, "rows": rows}, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
