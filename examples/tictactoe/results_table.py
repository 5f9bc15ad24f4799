"""Markdown tables of the tic-tac-toe recipe from its eval folders (`runs/tictactoe/eval/<model>-<what>/summary.json`,
written by `run.sh`): position accuracy with 95 % Wilson intervals, game results over both eval seeds pooled, valid
tool calls; games with intervals beside the shortcut players' exact ceilings (copy the named cell, random, first
free cell...).

    python examples/tictactoe/results_table.py [runs/tictactoe] [MODEL ...] [--pool NAME=MODEL,MODEL ...]

Without MODEL names, every model that has evals is listed (in the order their folders were made). `--pool` adds a
table of losses against the optimal opponent pooled over runs (seeds of one arm, say), every rollout counted (an
errored game is a loss), with 95 % Wilson intervals, the runs' wins against the random opponent pooled beside
them, and the losses' interval with the games clustered by game seed (runs evaluated on the same seeds share their
draw, so their games are not independent).
"""

from __future__ import annotations

import json
import math
import re
import sys
from pathlib import Path

from toolgym.eval import read_results
from toolgym.stats import clustered_interval, wilson

SEEDS = ("12345", "777")


def rate(k: float, n: int) -> str:
    """'93.1 (92.3-93.8)': a percentage with its 95 % Wilson interval."""
    if not n:
        return "-"
    lo, hi = wilson(k, n)
    return f"{100 * k / n:.1f} ({100 * lo:.1f}-{100 * hi:.1f})"


def _load(path: Path) -> dict | None:  # type: ignore[type-arg]
    f = path / "summary.json"
    return json.loads(f.read_text()) if f.exists() else None


def _stat(summary: dict, name: str) -> tuple[float, int]:  # type: ignore[type-arg]
    for key in ("rewards", "metrics"):
        if name in summary.get(key, {}):
            v = summary[key][name]
            return v["mean"] * v["n"], v["n"]
    return 0.0, 0


def positions(root: Path, model: str, split: str) -> dict[str, tuple[float, int]] | None:
    """Counts (successes, n) of each position metric for `split` (all / train / heldout), from the whole-set eval
    (its per-split breakdown) or a held-out-only eval."""
    s = _load(root / "eval" / f"{model}-positions-all")
    if s is not None and split != "all":
        row = s.get("by", {}).get("split", {}).get(split)
        if row is None:
            return None
        return {k: (row[k]["mean"] * row[k]["n"], row[k]["n"]) for k in ("legal", "optimal", "win_taken", "blocked")
                if k in row}
    if s is None and split == "heldout":
        s = _load(root / "eval" / f"{model}-positions-heldout")
    if s is None:
        return None
    return {k: _stat(s, k) for k in ("legal", "optimal", "win_taken", "blocked")}


def games(root: Path, model: str, opponent: str) -> dict[str, float] | None:
    """Win / draw / loss counts and valid-call counts over both seeds (pooled), or of the single-seed 200-game eval
    of the RL lines (`<model>-games200-<opponent>`, `run.sh weak / noisy / reader`); every rollout counts, an errored
    game as a loss."""
    tot = {"win": 0.0, "draw": 0.0, "loss": 0.0, "n": 0, "calls": 0.0, "valid": 0.0, "capped": 0.0}
    folders = game_folders(root, model, opponent) or [root / "eval" / f"{model}-games200-{opponent}"]
    for folder in folders:
        s = _load(folder)
        if s is None:
            return None
        n = s["rollouts"] - s["errors"]  # the metrics' means are over the finished games; an errored one is a loss
        for k in ("win", "draw", "loss"):
            tot[k] += s["metrics"][k]["mean"] * n
        tot["loss"] += s["errors"]
        tot["n"] += s["rollouts"]
        tot["capped"] += s.get("stop_reasons", {}).get("max_turns", 0)  # unfinished: the turn cap (invalid moves)
        acc = s.get("tool_accuracy", {}).get("*", {})
        tot["calls"] += acc.get("calls", 0.0)
        tot["valid"] += acc.get("exec_ok", 0.0) * acc.get("calls", 0.0)
    return tot


def game_folders(root: Path, model: str, opponent: str) -> list[Path]:
    """The eval folders `games` reads for `model` against `opponent` (both fixed seeds, else the 200-game seeds:
    `games200`, `games200b`, and any further `games200c`, `games200d`, ... a run adds for another seed)."""
    folders = [root / "eval" / f"{model}-games-{opponent}-{seed}" for seed in SEEDS]
    if all(f.is_dir() for f in folders):
        return folders
    tag = re.compile(rf"{re.escape(model)}-games200[a-z]?-{re.escape(opponent)}")
    found = root / "eval"
    return sorted(f for f in found.iterdir() if f.is_dir() and tag.fullmatch(f.name)) if found.is_dir() else []


def losses(root: Path, model: str) -> tuple[list[int], int] | None:
    """Games lost to the optimal opponent by `model`: (lost per eval folder, games), every rollout counted -- an errored
    game is a loss (`outcomes` of the summary). None without evals."""
    per, n = [], 0
    folders = game_folders(root, model, "optimal")
    for folder in folders:
        s = _load(folder)
        if s is None:
            return None
        k = s["rollouts"]
        per.append(round(s["outcomes"]["loss"] * k) if "outcomes" in s else
                   round(s["metrics"]["loss"]["mean"] * (k - s["errors"])) + s["errors"])
        n += k
    return (per, n) if folders else None


def seed_losses(root: Path, model: str) -> dict[str, tuple[int, int]]:
    """Games lost to the optimal opponent by `model`, per game seed (the task's `seed`, which draws who starts and the
    opponent's replies): seed -> (lost, games), every rollout counted (an errored one is a loss). Empty without the
    folders' `results.jsonl`."""
    out: dict[str, tuple[int, int]] = {}
    for folder in game_folders(root, model, "optimal"):
        f = folder / "results.jsonl"
        if not f.exists():
            return {}
        for t in read_results(f).values():  # one record per rollout (a resumed file may hold a re-run)
            lost = t.error is not None or float(t.metrics.get("loss", 0.0)) > 0
            key = str(t.task.get("seed", t.example_id))
            k, n = out.get(key, (0, 0))
            out[key] = (k + int(lost), n + 1)
    return out


def clustered_rate(clusters: list[tuple[int, int]]) -> str:
    """'5.9 (4.3-7.5)': the pooled rate of (lost, games) clusters with a 95 % interval that lets the games of one
    cluster be alike (`toolgym.stats.clustered_interval`, the cluster-robust variance of a ratio). For models
    evaluated on the same seeds, a cluster is one seed's games across the models: they share who starts and the
    opponent's reply on every board they both reach, so they are not independent samples."""
    p, lo, hi = clustered_interval(clusters)
    if math.isnan(p):
        return "-"
    return f"{100 * p:.1f} ({100 * lo:.1f}-{100 * hi:.1f})"


def pooled(root: Path, groups: dict[str, list[str]]) -> str:
    """Losses against the optimal opponent pooled over each group's runs (the seeds of one arm), with 95 % Wilson
    intervals, beside each run's own: one seed of a CPU-scale run is not a measurement of its recipe; and the wins
    against the random opponent pooled the same way, over the runs that have those games ('-' if none has). The
    Wilson intervals treat these models' games as independent, but runs that share an eval seed play the same task
    draw (who starts, and the opponent's reply on every board they both reach), so the last column clusters the
    games by seed (`clustered_rate`; '-' without the folders' results.jsonl) -- the interval to quote; `seed_draw.py`
    measures the draw against the exact walks. The spread between seeds of one recipe (training seeds) is in
    neither (compare recipes over seeds: `exact_curve.py`)."""
    out = ["| arm | runs | lost per eval | losses % (95 % CI) | games | wins vs random % (95 % CI) | games | "
           "losses % (95 % CI, games clustered by seed) |",
           "|---|---|---|---|---|---|---|---|"]
    for name, runs in groups.items():
        lost, n, per = 0, 0, []
        won, played = 0.0, 0
        by_seed: dict[str, tuple[int, int]] = {}
        complete = True
        for run in runs:
            mine = seed_losses(root, run)
            complete = complete and bool(mine)
            for key, (k, m) in mine.items():
                a, b = by_seed.get(key, (0, 0))
                by_seed[key] = (a + k, b + m)
            got = losses(root, run)
            if got is None:
                per.append(f"{run}: no evals")
            else:
                per.append(f"{run}: {'+'.join(map(str, got[0]))}")
                lost += sum(got[0])
                n += got[1]
            vs_random = games(root, run, "random")
            if vs_random is not None:
                won += vs_random["win"]
                played += int(vs_random["n"])
        wins = rate(round(won), played) if played else "-"
        clustered = clustered_rate(list(by_seed.values())) if complete else "-"
        out.append(f"| {name} | {len(runs)} | {'; '.join(per)} | {rate(lost, n)} | {n} | {wins} | {played} | "
                   f"{clustered} |")
    return "\n".join(out)


def models(root: Path) -> list[str]:
    seen: dict[str, float] = {}
    for d in (root / "eval").glob("*"):
        for marker in ("-positions-", "-games-", "-games200-"):
            if marker in d.name:
                name = d.name.split(marker)[0]
                seen[name] = min(seen.get(name, math.inf), d.stat().st_mtime)
    return sorted(seen, key=seen.get)  # type: ignore[arg-type]


def table(root: Path, names: list[str]) -> str:
    out = ["| model | held-out positions: optimal % | legal % | all 4,520: optimal % | legal % | vs random W/D/L % "
           "(200 games) | vs optimal W/D/L % (200 games) | valid calls % |",
           "|---|---|---|---|---|---|---|---|"]
    for name in names:
        held, every = positions(root, name, "heldout"), positions(root, name, "all")
        cells = [rate(*held["optimal"]) if held else "-", rate(*held["legal"]) if held else "-",
                 rate(*every["optimal"]) if every else "-", rate(*every["legal"]) if every else "-"]
        calls = valid = 0.0
        for opp in ("random", "optimal"):
            g = games(root, name, opp)
            if g is None or not g["n"]:
                cells.append("-")
                continue
            cells.append("/".join(f"{100 * g[k] / g['n']:.1f}" for k in ("win", "draw", "loss")))
            calls += g["calls"]
            valid += g["valid"]
        cells.append(rate(valid, int(calls)) if calls else "-")
        out.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def kinds(root: Path, name: str) -> str:
    """The whole-set eval of one model by position kind and by split."""
    s = _load(root / "eval" / f"{name}-positions-all")
    if s is None:
        return ""
    out = [f"| {name}: positions | n | legal % | optimal % | win taken % | blocked % |", "|---|---|---|---|---|---|"]
    for field in ("split", "kind"):
        for value, row in s["by"][field].items():
            cells = [rate(row[k]["mean"] * row[k]["n"], row[k]["n"]) if k in row else "-"
                     for k in ("legal", "optimal", "win_taken", "blocked")]
            out.append(f"| {field} {value} | {row['n']} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def quiet(root: Path, names: list[str]) -> str:
    """Optimal rate on the quiet and free positions (where SFT is weakest) by split, from each model's whole-set eval
    or its quiet/free-only eval (`<model>-positions-quietfree`, e.g. the main-line GRPO run)."""
    cols = [(k, sp) for k in ("quiet", "free") for sp in ("train", "heldout")]
    out = ["| model | " + " | ".join(f"{k} {sp} optimal %" for k, sp in cols) + " |", "|---" * (len(cols) + 1) + "|"]
    for name in names:
        for what in ("all", "quietfree"):
            f = root / "eval" / f"{name}-positions-{what}" / "results.jsonl"
            if f.exists():
                break
        else:
            continue
        hits: dict[tuple[str, str], list[float]] = {c: [0.0, 0] for c in cols}  # type: ignore[misc]
        for t in read_results(f).values():  # one record per rollout (a resumed file may hold a re-run)
            key = (t.task.get("kind"), t.task.get("split"))
            if key in hits:
                hits[key][0] += t.rewards.get("optimal", 0.0)
                hits[key][1] += 1
        out.append(f"| {name} | " + " | ".join(rate(hits[c][0], int(hits[c][1])) for c in cols) + " |")
    return "\n".join(out)


def quiet_counts(root: Path, name: str) -> tuple[float, int] | None:
    """(value-keeping moves, n) over every quiet position: from `<model>-positions-quiet` (run.sh forced) or the
    quiet rows of the whole-set eval."""
    s = _load(root / "eval" / f"{name}-positions-quiet")
    if s is not None:
        return _stat(s, "optimal")
    s = _load(root / "eval" / f"{name}-positions-all")
    row = s.get("by", {}).get("kind", {}).get("quiet") if s else None
    return (row["optimal"]["mean"] * row["optimal"]["n"], row["optimal"]["n"]) if row else None


def games_ci(root: Path, names: list[str]) -> str:
    """Games with 95 % Wilson intervals (win and loss rates) per opponent, valid calls and every quiet position,
    then the shortcut players' exact ceilings on the same evals (`toolgym_tictactoe.shortcuts`): a result at or
    under a ceiling is no evidence of play."""
    from toolgym_tictactoe import positions as P
    from toolgym_tictactoe.shortcuts import SHORTCUTS, game_outcome, position_scores

    out = ["| player | vs random: W % | D % | L % | vs optimal: W % | D % | L % | of which the turn cap % | valid calls % "
           "| quiet positions: optimal % |", "|---|---|---|---|---|---|---|---|---|---|"]
    for name in names:
        cells: list[str] = []
        calls = valid = 0.0
        for opp in ("random", "optimal"):
            g = games(root, name, opp)
            if g is None or not g["n"]:
                cells += ["-"] * (4 if opp == "optimal" else 3)
                continue
            n = int(g["n"])
            cells += [rate(g["win"], n), f"{100 * g['draw'] / n:.1f}", rate(g["loss"], n)]
            if opp == "optimal":  # games lost by running out of turns (repeated invalid moves), not played out
                cells.append(f"{100 * g['capped'] / n:.1f}")
            calls += g["calls"]
            valid += g["valid"]
        q = quiet_counts(root, name)
        cells += [rate(valid, int(calls)) if calls else "-", rate(*q) if q else "-"]
        out.append(f"| {name} | " + " | ".join(cells) + " |")
    quiet_boards = [b for b in P.positions("all") if P.analyze(b).kind == "quiet"]
    for sc in SHORTCUTS:
        cells = []
        for p in (1.0, 0.0):
            w, d, lo = game_outcome(sc, p)
            cells += [f"{100 * w:.1f}", f"{100 * d:.1f}", f"{100 * lo:.1f}"] + (["0"] if p == 0.0 else [])  # no turn cap
        cells += ["100", f"{100 * position_scores(sc, quiet_boards)['optimal']:.1f}"]
        out.append(f"| shortcut `{sc}` (exact) | " + " | ".join(cells) + " |")
    return "\n".join(out)


def main(argv: list[str]) -> None:
    groups: dict[str, list[str]] = {}
    args = []
    it = iter(argv)
    for a in it:
        if a == "--pool" or a.startswith("--pool="):
            spec = a.split("=", 1)[1] if a.startswith("--pool=") else next(it, "")
            name, _, runs = spec.partition("=")
            if not name or not runs:
                sys.exit(f"--pool NAME=MODEL,MODEL: not {spec!r}")
            groups[name] = runs.split(",")
        else:
            args.append(a)
    root = Path(args[0]) if args else Path("runs/tictactoe")
    names = args[1:] or ([] if groups else models(root))
    if groups:
        print(pooled(root, groups))
        if not names:
            return
        print()
    print(table(root, names))
    print()
    print(games_ci(root, names))
    print()
    print(quiet(root, names))
    for name in names:
        k = kinds(root, name)
        if k:
            print()
            print(k)


if __name__ == "__main__":
    main(sys.argv[1:])
