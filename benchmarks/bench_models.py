"""Benchmark the transformers engine on the tiny model: batched vs one-at-a-time generation, and where a tic-tac-toe
rollout's wall time goes (generation / env+tools / other), side by side in one run.

    python benchmarks/bench_models.py [--size tiny] [--requests 64] [--max-tokens 32] [--games 64] [--out benchmarks/results/bench_models.json]

Generation: the same `--requests` prompts (tic-tac-toe first prompts with tools), sampled with temperature 1 to
exactly `--max-tokens` tokens each (no stop), once as one batch and once one request at a time; the ratio is the
batching speed-up. Rollouts: `--games` games through `toolgym.rollout.run_rollouts` with the tiny model
constrained to legal `make_move` turns (so games last several turns), at concurrency `--games` and at concurrency 1
(a quarter of the games), plus the scripted minimax player as the env-only baseline.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def legal_moves(messages: list[dict[str, Any]]) -> list[str]:
    from toolgym.models.formats import HermesFormat
    from toolgym_tictactoe import board_from_messages

    board = board_from_messages(messages) or "." * 9
    fmt = HermesFormat()
    return [
        fmt.render_turn(None, [{"name": "make_move", "arguments": {"position": p}}], reasoning=f"I play {p}.")
        for p, c in enumerate(board)
        if c == "."
    ]


def bench_generation(policy: Any, n: int, max_tokens: int) -> list[dict[str, Any]]:
    from toolgym.policies.batching import GenRequest, SamplingParams
    from toolgym_tictactoe.corpus import TTT_TOOLS

    r = policy.renderer
    prompts = [
        r.encode(r.render([{"role": "system", "content": "Play."}, {"role": "user", "content": f"Game {i}. Your move."}], TTT_TOOLS, True))
        for i in range(n)
    ]
    eng = policy.engine
    stop = eng.stop_ids
    eng.stop_ids = set()  # generate exactly max_tokens per request
    try:
        p = SamplingParams(temperature=1.0, max_tokens=max_tokens, seed=0)
        eng.generate_batch([GenRequest(prompts[0], SamplingParams(max_tokens=4))])  # warm-up
        rows = []
        t = time.perf_counter()
        outs = eng.generate_batch([GenRequest(x, p) for x in prompts])
        dt = time.perf_counter() - t
        toks = sum(len(o.token_ids) for o in outs)
        rows.append({"mode": f"batched ({n} in one batch)", "tokens": toks, "seconds": dt, "tok_per_s": toks / dt})
        t = time.perf_counter()
        toks = 0
        for x in prompts:
            toks += len(eng.generate_batch([GenRequest(x, p)])[0].token_ids)
        dt = time.perf_counter() - t
        rows.append({"mode": "one at a time", "tokens": toks, "seconds": dt, "tok_per_s": toks / dt})
    finally:
        eng.stop_ids = stop
    rows[0]["speedup"] = rows[0]["tok_per_s"] / rows[1]["tok_per_s"]
    rows[1]["speedup"] = 1.0
    return rows


def bench_rollouts(model_dir: Path, games: int) -> list[dict[str, Any]]:
    from toolgym.policies.hf import HFPolicy
    from toolgym.policies import load_policy
    from toolgym.registry import load_env
    from toolgym.rollout import run_rollouts

    rows = []

    async def run(policy: Any, n: int, conc: int, label: str) -> None:
        env = load_env("tictactoe", transport="inprocess")
        async with env:
            jobs = [(i, 0, t) for i, t in enumerate(env.build_dataset(n, seed=0))]
            if hasattr(policy, "queue"):
                policy.queue.reset_stats()
            t = time.perf_counter()
            trajs = await run_rollouts(env, policy, jobs, concurrency=conc)
            wall = time.perf_counter() - t
        await policy.aclose()
        errors = sum(1 for x in trajs if x.error)
        turns = sum(x.metrics.get("turns", 0) for x in trajs)
        gen = sum(x.timings.get("generation_s", 0.0) for x in trajs) / len(trajs)
        tools = sum(x.timings.get("tools_s", 0.0) + x.timings.get("setup_s", 0.0) + x.timings.get("scoring_s", 0.0) for x in trajs) / len(trajs)
        total = sum(x.timings.get("total_s", 0.0) for x in trajs) / len(trajs)
        st = policy.stats if hasattr(policy, "stats") else {}
        rows.append({
            "run": label, "games": n, "concurrency": conc, "errors": errors, "turns": turns, "wall_s": wall,
            "games_per_s": n / wall,
            "per_rollout_generation_s": gen, "per_rollout_env_tools_s": tools, "per_rollout_other_s": max(0.0, total - gen - tools),
            "per_rollout_total_s": total,
            "engine_busy_s": st.get("generate_s"), "mean_batch_size": st.get("mean_batch_size"),
            "generated_tokens": st.get("generated_tokens"),
        })

    env0 = load_env("tictactoe", transport="inprocess")
    asyncio.run(run(load_policy("scripted:minimax", env0, seed=0), games, games, "scripted minimax (env-only baseline)"))
    pol = HFPolicy(str(model_dir), temperature=1.0, max_tokens=64, seed=0, allowed_outputs=legal_moves)
    asyncio.run(run(pol, games, games, f"hf tiny, concurrency {games}"))
    n1 = max(1, games // 4)
    asyncio.run(run(pol, n1, 1, "hf tiny, concurrency 1"))
    return rows


def table(rows: list[dict[str, Any]], cols: list[str]) -> str:
    def fmt(v: Any) -> str:
        return f"{v:.3f}" if isinstance(v, float) else str(v)

    widths = [max(len(c), *(len(fmt(r.get(c))) for r in rows)) for c in cols]
    lines = ["  ".join(c.ljust(w) for c, w in zip(cols, widths)), "  ".join("-" * w for w in widths)]
    lines += ["  ".join(fmt(r.get(c)).ljust(w) for c, w in zip(cols, widths)) for r in rows]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=None, help="model dir (default: build the tiny model in a temp dir)")
    ap.add_argument("--size", default="tiny")
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--games", type=int, default=64)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "bench_models.json"))
    args = ap.parse_args()

    import torch

    from toolgym.policies.hf import HFPolicy
    from toolgym.models.tiny import init_tiny

    model_dir = Path(args.model) if args.model else init_tiny(Path(tempfile.mkdtemp()) / "tiny", size=args.size, seed=0)
    policy = HFPolicy(str(model_dir), temperature=1.0, max_tokens=args.max_tokens, seed=0)
    params = sum(p.numel() for p in policy.model.parameters())
    print(f"model {model_dir} ({params:,} params), torch threads {torch.get_num_threads()}")
    gen = bench_generation(policy, args.requests, args.max_tokens)
    print("\n== generation (transformers engine)")
    print(table(gen, ["mode", "tokens", "seconds", "tok_per_s", "speedup"]))
    roll = bench_rollouts(model_dir, args.games)
    print("\n== tic-tac-toe rollouts (per-rollout times are means; generation includes batch-queue wait)")
    print(table(roll, ["run", "games", "concurrency", "errors", "turns", "wall_s", "games_per_s", "mean_batch_size"]))
    print()
    print(table(roll, ["run", "per_rollout_generation_s", "per_rollout_env_tools_s", "per_rollout_other_s", "per_rollout_total_s", "engine_busy_s"]))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"model": str(model_dir), "params": params, "generation": gen, "rollouts": roll}, indent=2))
    print(f"\nwrote {out}")


if __name__ == "__main__":
    main()
