"""How much of a sampled game eval is the draw of its seeds: each sampled game checked against the model's exact walk
(`exact_games.py --json`), and the loss rate the walk gives on the same seeds and on many fresh ones.

    python examples/tictactoe/seed_draw.py EXACT.json=RESULTS.jsonl[,RESULTS.jsonl ...] [...] [--fresh 20000]
                                           [--outcome loss|win]

Each argument pairs one model's exact walk with the `results.jsonl` of its sampled games (`toolgym eval`, greedy, the
same opponent). A greedy model is a fixed player, and the server draws the opponent's replies from the game seed
and the board (`game.opponent_move`), so the walk alone says which line every seeded game follows
(`exact.seeded_line`). Per model it prints: the sampled games and how many the walk replays move for move with the
same result; the games lost (`--outcome win`: won) as sampled, as the walk plays the same seeds, exactly, and as
the walk plays `--fresh` new seeds (half with each side starting). When the sampled and the exact rates differ but
every game is replayed, the difference is the seeds' draw, not the model -- and models evaluated on the same seeds
share that draw, so their pooled games are not independent samples. The pooled row sums the models. Exits 3 when
a sampled game is not replayed (the games are not of the walked player, or its play depends on the batch; an
errored game, counted as lost, is never replayed), 2 for bad input (a walk of several models, games without
`x_starts` or against mixed opponents).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import fields
from pathlib import Path
from typing import Any

from toolgym.journal import read_results
from toolgym_tictactoe.exact import Line, seeded_line

OUTCOMES = {"loss": ("loss", "in_progress", "error"), "win": ("win",)}  # line statuses, as `exact_games` counts them


def read_walk(path: Path, outcome: str = "loss") -> tuple[str, float, list[Line]]:
    """The one model of an `exact_games.py --json` file: its name, exact `outcome` rate and lines."""
    data = json.loads(path.read_text())
    if len(data) != 1:
        raise ValueError(f"{path}: holds {len(data)} models; give a walk of one")
    (uri, res), = data.items()
    names = {f.name for f in fields(Line)}
    return uri, float(res[outcome]), [Line(**{k: v for k, v in line.items() if k in names}) for line in res["lines"]]


def check(lines: list[Line], rows: list[dict[str, Any]], fresh: int, outcome: str = "loss") -> dict[str, Any]:
    """Replay every sampled game on the walk and count the games of `outcome` each way (see the module docstring):
    keys games, replayed, not_replayed (their seeds), sampled, walk (the walk on the same seeds), fresh (seeds
    walked) and walk_fresh. An errored sampled game is a loss; a draw the walk does not cover (its errored lines,
    which have no moves) is one too, as `exact_games` counts them."""
    hit = OUTCOMES[outcome]

    def scored(line: Line | None) -> bool:
        return line.status in hit if line is not None else outcome == "loss"
    out = {"games": len(rows), "replayed": 0, "sampled": 0, "walk": 0, "not_replayed": []}
    for row in rows:
        task = row["task"]
        if "x_starts" not in task:
            raise ValueError(f"a sampled game without x_starts in its task: {task}")
        p = float(task.get("random_move_prob", 0.0))
        line = seeded_line(lines, int(task["seed"]), bool(task["x_starts"]), p, task.get("opponent_style", "uniform"))
        result = (row.get("info") or {}).get("result") or {}
        errored = row.get("error") is not None
        got = outcome == "loss" if errored else float((row.get("metrics") or {}).get(outcome, 0.0)) > 0
        out["sampled"] += got
        out["walk"] += scored(line)
        if not errored and line is not None and line.moves == list(result.get("moves", [])) and scored(line) == got:
            out["replayed"] += 1
        else:
            out["not_replayed"].append(task["seed"])
    opponents = {float(r["task"].get("random_move_prob", 0.0)) for r in rows} or {0.0}
    if len(opponents) > 1:
        raise ValueError(f"the sampled games mix opponents {sorted(opponents)}: check one at a time")
    p = opponents.pop()
    walked = [seeded_line(lines, 10**9 + i, i % 2 == 0, p) for i in range(fresh)]
    out["fresh"] = fresh
    out["walk_fresh"] = sum(map(scored, walked))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("pairs", nargs="+", metavar="EXACT.json=RESULTS.jsonl[,...]")
    ap.add_argument("--fresh", type=int, default=20_000, help="new seeds the walk plays (default 20000)")
    ap.add_argument("--outcome", choices=sorted(OUTCOMES), default="loss", help="the rate to compare (default loss)")
    args = ap.parse_args(argv)
    for pair in args.pairs:
        walk, _, results = pair.partition("=")
        if not results:
            ap.error(f"{pair}: give EXACT.json=RESULTS.jsonl")
        missing = [f for f in (walk, *results.split(",")) if not Path(f).is_file()]
        if missing:
            ap.error(f"no such file: {', '.join(missing)}")
    o = "lost" if args.outcome == "loss" else "won"
    print(f"| model | sampled games | replayed by the walk | {o} % sampled | {o} % by the walk, same seeds | "
          f"{o} % exact | {o} % by the walk, fresh seeds |")
    print("|---|---|---|---|---|---|---|")
    total = {"games": 0, "replayed": 0, "sampled": 0, "walk": 0, "fresh": 0, "walk_fresh": 0}
    exact_sum, bad = 0.0, 0
    for pair in args.pairs:
        walk, _, results = pair.partition("=")
        # one record per rollout (a resumed eval's file may hold a re-run of one)
        rows = [t.to_dict() for f in results.split(",") for t in read_results(Path(f)).values()]
        if not rows:
            print(f"seed_draw.py: {results}: no rollouts (toolgym eval's results.jsonl)", file=sys.stderr)
            return 2
        try:
            uri, exact, lines = read_walk(Path(walk), args.outcome)
            r = check(lines, rows, args.fresh, args.outcome)
        except (ValueError, KeyError) as e:
            print(f"seed_draw.py: {pair}: {e}", file=sys.stderr)
            return 2
        n = max(r["games"], 1)
        print(f"| {uri} | {r['games']} | {r['replayed']} | {100 * r['sampled'] / n:.2f} | "
              f"{100 * r['walk'] / n:.2f} | {100 * exact:.2f} | {100 * r['walk_fresh'] / max(r['fresh'], 1):.2f} |")
        if r["not_replayed"]:
            bad += len(r["not_replayed"])
            print(f"  not replayed ({len(r['not_replayed'])}): seeds {r['not_replayed'][:10]}", file=sys.stderr)
        for k in total:
            total[k] += r[k]
        exact_sum += exact
    if len(args.pairs) > 1:
        n = max(total["games"], 1)
        print(f"| pooled ({len(args.pairs)} models) | {total['games']} | {total['replayed']} | "
              f"{100 * total['sampled'] / n:.2f} | {100 * total['walk'] / n:.2f} | "
              f"{100 * exact_sum / len(args.pairs):.2f} (mean) | "
              f"{100 * total['walk_fresh'] / max(total['fresh'], 1):.2f} |")
    if bad:
        print(f"{bad} sampled games not replayed by their walk: not the walked player's games", file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
