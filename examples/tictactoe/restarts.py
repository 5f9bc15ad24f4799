"""Which boards a GRPO run's restarted groups started from (`restart_share`, `restart_replay`): per window of steps,
the restarted groups, how many of them were replayed from the buffer (`replay = true` rows), and how many started
from each given symmetry class (X to move), new and replayed, with the share of their samples that lost -- so "did
restarts ever reach the traps?" has a number; then, new and replayed groups apart, the share that was contested
(some samples lost, some did not: the groups whose advantage is not zero on the loss) and the distinct boards.
Trap groups (the env's `restart_trap_share`, `trap = true` rows: a choice among value-keeping moves, against a
weaker opponent) are a third kind: their share of samples won, and of groups contested on the win (some samples
won, some did not -- what compares the choices' traps).

    python examples/tictactoe/restarts.py RUN_DIR [--classes B ...] [--window W] [--max-step S]

RUN_DIR: a GRPO run with `save_rollouts = true`. A board is 9 characters (`X`, `O`, `.`), any symmetry of the class.
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from pathlib import Path

from toolgym.train.runstate import read_rollouts
from toolgym_tictactoe import positions as P


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--classes", nargs="*", default=[], help="boards (any symmetry of each class)")
    ap.add_argument("--window", type=int, default=20)
    ap.add_argument("--max-step", type=int, default=None, help="only the steps up to this one (a run resumed past it)")
    args = ap.parse_args()
    classes = [P.canonical(b) for b in args.classes]
    groups: dict[tuple[int, int], list] = {}  # (step, example_id) -> [class or None, replayed, samples, lost]
    traps: dict[tuple[int, int], list[int]] = {}  # trap groups: (step, example_id) -> [samples, won]
    for r in read_rollouts(args.run_dir):  # a step replayed after a resume counts once
        task = r.get("task") or {}
        if task.get("start") != "restart" or (args.max_step is not None and int(r["step"]) > args.max_step):
            continue
        key = (int(r["step"]), int(r["example_id"]))
        if task.get("trap"):
            t = traps.setdefault(key, [0, 0])
            t[0] += 1
            t[1] += float((r.get("metrics") or {}).get("win", 0.0)) > 0
            continue
        g = groups.setdefault(key, [P.canonical(task["board"]), bool(task.get("replay")), 0, 0])
        g[2] += 1
        g[3] += float((r.get("metrics") or {}).get("loss", 0.0)) > 0
    last = max((s for s, _ in [*groups, *traps]), default=0)
    windows = sorted({(s - 1) // args.window * args.window + 1 for s in range(1, last + 1)})
    table: dict[tuple[int, str], list[int]] = defaultdict(lambda: [0, 0, 0, 0])  # groups, replayed, samples, lost
    for (step, _), (cls, replayed, n, lost) in groups.items():
        w = (step - 1) // args.window * args.window + 1
        for key in ("all", *([cls] if cls in classes else []), *(["any trap"] if cls in classes else [])):
            cell = table[(w, key)]
            cell[0] += 1
            cell[1] += replayed
            cell[2] += n
            cell[3] += lost
    print(f"{args.run_dir}: restarted groups per {args.window}-step window: groups (of which replayed), samples lost %")
    print("| start board | " + " | ".join(f"{w}-{min(w + args.window - 1, last)}" for w in windows) + " | all |")
    print("|---|" + "---|" * (len(windows) + 1))
    for key in ("all", *dict.fromkeys(classes), *(["any trap"] if classes else [])):
        cells = [table.get((w, key), [0, 0, 0, 0]) for w in windows]
        total = [sum(c[i] for c in cells) for i in range(4)]
        name = key if key in ("all", "any trap") else f"`{key[:3]}/{key[3:6]}/{key[6:]}`"
        row = " | ".join(f"{g} ({rp}), {100 * lo / n:.0f} %" if g else "0" for g, rp, n, lo in (*cells, total))
        print(f"| {name} | {row} |")
    print("\n| restarted groups | " + " | ".join(f"{w}-{min(w + args.window - 1, last)}" for w in windows) + " | all |")
    print("|---|" + "---|" * (len(windows) + 1))
    for label, rep in (("new (from lost games)", False), ("replayed", True)):
        cells = []
        for ws in ([w] for w in windows), [windows]:
            for sel in ws:
                gs = [(c, n, lo) for (s, _), (c, r, n, lo) in groups.items()
                      if r == rep and (s - 1) // args.window * args.window + 1 in sel]
                contested = sum(0 < lo < n for _, n, lo in gs)
                cells.append(f"{len(gs)}: {100 * contested / len(gs):.0f} % contested, {len({c for c, _, _ in gs})} "
                             "classes" if gs else "0")
        print(f"| {label} | " + " | ".join(cells) + " |")
    if traps:
        cells = []
        for sel in [*([w] for w in windows), windows]:
            ts = [t for (s, _), t in traps.items() if (s - 1) // args.window * args.window + 1 in sel]
            won = sum(w for _, w in ts) / max(1, sum(n for n, _ in ts))
            contested = sum(0 < w < n for n, w in ts)
            cells.append(f"{len(ts)}: {100 * won:.0f} % won, {100 * contested / len(ts):.0f} % contested"
                         if ts else "0")
        print("| trap (won, contested on the win) | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
