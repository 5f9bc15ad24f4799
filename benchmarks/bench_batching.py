"""Static vs continuous batching in the transformers engine, on the workload it is for: multi-turn tic-tac-toe games
of the committed model (0.9M, fp32, 1 thread) through the real MCP server, seeded, temperature 1 (or, with
`--temperature 0`, greedy as `toolgym eval` and `toolgym serve` play).

For each concurrency, the same games are played five times in one process: `batching="static"` (the baseline: each
batch runs until its longest row ends), `batching="continuous"` with `parked_kv_mb=0` (rows join and leave the
running batch; every turn prefills its whole prompt), `batching="continuous"` with `draft_tokens=0` (a game's next
turn extends its parked KV; one token per row per decode step) and `batching="continuous"` (the default: also
speculative steps, `toolgym.policies.ngram_draft`), and the default again with `lockstep=True` (what GRPO's
`deterministic = true` uses: a batch starts once every game in flight has asked, and no row joins a running batch --
the price of bit-reproducible runs). The bench checks that the five produce the same token traces
before it prints timings (seeded sampling draws the same tokens whatever the batch, and a speculative step keeps
only drafted tokens equal to what the row draws), then prints wall time, engine time, decode steps, rows per decode
step, prefill time, reused prompt tokens and drafted tokens kept, with the speed-up against static. Writes JSON to
--out.

    python benchmarks/bench_batching.py [--games 32] [--concurrency 8,32] [--max-tokens 200] [--temperature 1]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path
from typing import Any

MODES = [("static", {"batching": "static"}), ("continuous, no parked KV", {"batching": "continuous", "parked_kv_mb": 0}),
         ("continuous, no drafts", {"batching": "continuous", "draft_tokens": 0}),
         ("continuous", {"batching": "continuous"}),
         ("continuous, lock-step", {"batching": "continuous", "lockstep": True})]


async def play(options: dict[str, Any], games: int, concurrency: int, max_tokens: int, temperature: float
               ) -> tuple[list[Any], dict]:
    from toolgym_tictactoe import CHECKPOINT

    from toolgym.policies.hf import HFPolicy
    from toolgym.registry import load_env
    from toolgym.rollout import run_rollouts

    policy = HFPolicy(CHECKPOINT, temperature=temperature, max_tokens=max_tokens, seed=3, **options)
    env = load_env("tictactoe", transport="inprocess")
    async with env:
        jobs = [(i, 0, t) for i, t in enumerate(env.build_dataset(games, seed=0))]
        t0 = time.perf_counter()
        trajs = await run_rollouts(env, policy, jobs, concurrency=concurrency)
        wall = time.perf_counter() - t0
    stats = dict(policy.stats)
    await policy.aclose()
    return trajs, {"wall_s": wall, **stats}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--games", type=int, default=32)
    ap.add_argument("--concurrency", default="8,32", help="comma-separated")
    ap.add_argument("--max-tokens", type=int, default=200)
    ap.add_argument("--temperature", type=float, default=1.0, help="0: greedy, as eval and serve play")
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/bench_batching.json"))
    args = ap.parse_args()
    from rich.console import Console
    from rich.table import Table

    con = Console(width=130)
    results: list[dict[str, Any]] = []
    for conc in (int(c) for c in args.concurrency.split(",")):
        runs = {}
        for name, options in MODES:
            trajs, st = asyncio.run(play(options, args.games, conc, args.max_tokens, args.temperature))
            errors = sum(t.error is not None for t in trajs)
            runs[name] = (trajs, st, errors)
        ref = runs["static"][0]
        same = all(a.tokens is not None and b.tokens is not None and a.tokens.ids == b.tokens.ids
                   for trajs, _, _ in runs.values() for a, b in zip(ref, trajs, strict=True))
        if not same:
            raise SystemExit(f"concurrency {conc}: the batching modes sampled different games; no timings printed")
        base = runs["static"][1]["wall_s"]
        t = Table(title=f"{args.games} tic-tac-toe games at concurrency {conc}, temperature {args.temperature:g} "
                        "(same traces in every mode)")
        for col in ("mode", "wall s", "vs static", "engine s", "decode steps", "rows / step", "prefill s",
                    "prompt tokens reused", "drafts kept", "errors"):
            t.add_column(col, justify="left" if col == "mode" else "right")
        for name, (_, st, errors) in runs.items():
            reused = st.get("reused_tokens", 0)
            total = reused + st.get("prefill_tokens", 0)
            t.add_row(name, f"{st['wall_s']:.2f}", f"{base / st['wall_s']:.2f}x", f"{st['generate_s']:.2f}",
                      str(st.get("decode_steps", "-")),
                      f"{st['mean_decode_rows']:.1f}" if "mean_decode_rows" in st else f"{st['mean_batch_size']:.1f} per batch",
                      f"{st['prefill_s']:.2f}" if "prefill_s" in st else "-",
                      f"{100 * reused / total:.0f} %" if total else "-",
                      f"{st.get('accepted_tokens', 0)} / {st.get('drafted_tokens', 0)}", str(errors))
            results.append({"concurrency": conc, "mode": name, "games": args.games, "errors": errors,
                            "temperature": args.temperature,
                            "speedup_vs_static": base / st["wall_s"], **st})
        con.print(t)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
