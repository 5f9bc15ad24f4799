"""What a GRPO run's sampled games did at chosen positions: per window of steps, how many moves its games played from
each symmetry class (X to move), the share of them that kept the game value and the share that took the lowest-numbered
free cell (the first cell of the free-cell list the prompt and the late start's think text write: a habit of the text,
not of the board, that is right in some orientations of a class and wrong in others). The classes are given, or taken
from where an eval's lost games were decided (`losses.py`), so "did RL ever try the right reply where greedy play
loses?" has a number: a class met a few times per window, or always answered the same wrong way, cannot be learnt.

    python examples/tictactoe/decisions.py RUN_DIR [--classes B ...] [--from-eval EVAL_DIR [--top K]] [--window W]
        [--all] [--greedy GREEDY_EVAL_DIR] [--reach EVAL_DIR]

RUN_DIR: a GRPO run with `save_rollouts = true`, or an eval folder (`results.jsonl`, e.g. sampled one-move tasks:
`toolgym eval tictactoe -m hf:MODEL -n 0 -r 8 -t 0.7 -a task=move -a kinds=quiet`), read as one window. A board is
9 characters (`X`, `O`, `.`), any symmetry of the class; `--all`: every class met, with a total row. Only valid moves
count (an invalid call is not a move of the game). An eval folder also gets the share of moves that took the first
cell of the model's own think-text list ("I'll play somewhere free: 5 0 3. I play 5."), which is the lowest free cell
when the start's teacher wrote the list in board order and any cell when it wrote it shuffled (`free_order`).

`--greedy` (RUN_DIR a sampled eval of one-move tasks, GREEDY_EVAL_DIR the same tasks at temperature 0): per board,
the greedy move against the samples -- where greedy play loses the value, do the samples mostly keep it (a sharper
policy would fix it) or mostly lose it too (the policy itself is wrong there)?

`--reach` (RUN_DIR a GRPO run, EVAL_DIR a greedy eval of whole games): per class where the eval's lost games were
decided (and `--classes`), the share of the run's whole games (from the empty board: neither restarts nor position
starts) that reached it with X to move, beside the share of the eval's games -- does training meet the boards that
greedy play meets?
"""

from __future__ import annotations

import argparse
import re
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path

from toolgym.journal import read_results
from toolgym.train.runstate import read_rollouts
from toolgym_tictactoe import positions as P


def start_and_moves(r: dict) -> tuple[str, list[str]]:  # type: ignore[type-arg]
    """A rollout record's start board (its info's, else its task's, else the empty board) and its game's moves."""
    info = r.get("info") or {}
    start = info.get("start") or (r.get("task") or {}).get("board") or "." * 9
    return start, list((info.get("result") or {}).get("moves") or [])


def decisions(rollouts: Iterable[dict], classes: set[str] | None, window: int) -> dict[tuple[int, str], list[int]]:  # type: ignore[type-arg]
    """{(first step of the window, class): [moves played there, of which value-keeping, of which the first free
    cell]}; `classes` None: every class."""
    out: dict[tuple[int, str], list[int]] = defaultdict(lambda: [0, 0, 0])
    for r in rollouts:
        start, moves = start_and_moves(r)
        w = (int(r["step"]) - 1) // window * window + 1
        for board, mv in zip(P.replay(start, moves), moves, strict=False):
            c = P.canonical(board)
            if mv[0] != "X" or (classes is not None and c not in classes):
                continue
            cell = out[(w, c)]
            cell[0] += 1
            cell[1] += int(mv[1:]) in P.analyze(board).optimal
            cell[2] += int(mv[1:]) == board.index(".")
    return dict(out)


def first_moves(rollouts: Iterable[dict]) -> dict[str, list[int]]:  # type: ignore[type-arg]
    """{board: the cells X played first from it, one per rollout} over one-move tasks (a rollout with no valid move
    counts as cell -1, a move that keeps nothing)."""
    out: dict[str, list[int]] = defaultdict(list)
    for r in rollouts:
        board, moves = start_and_moves(r)
        moves = [m for m in moves if m[0] == "X"]
        out[board].append(int(moves[0][1:]) if moves else -1)
    return dict(out)


def reach(rollouts: Iterable[dict], classes: Iterable[str]) -> tuple[int, dict[str, int]]:  # type: ignore[type-arg]
    """(whole games, {class: how many of them reached it with X to move}) over rollouts of games from the empty
    board (a rollout whose task or info names a start board is left out)."""
    wanted = {P.canonical(c) for c in classes}
    games, out = 0, dict.fromkeys(wanted, 0)
    for r in rollouts:
        start, moves = start_and_moves(r)
        if start != "." * 9:
            continue
        games += 1
        for c in {P.canonical(b) for b, mv in zip(P.replay("." * 9, moves), moves, strict=False) if mv[0] == "X"}:
            if c in out:
                out[c] += 1
    return games, out


def greedy_vs_sampled(greedy: dict[str, list[int]], sampled: dict[str, list[int]]) -> dict[str, int]:
    """Boards by the greedy move (keeps the value or not) and by whether more than half of the sampled moves keep
    it: `boards`, `greedy_wrong`, `greedy_wrong_samples_right` (the greedy/sampled gap), `greedy_right`,
    `greedy_right_samples_wrong`. Boards missing from either side are left out."""
    out = dict.fromkeys(("boards", "greedy_wrong", "greedy_wrong_samples_right", "greedy_right",
                         "greedy_right_samples_wrong"), 0)
    for board, cells in greedy.items():
        if not cells or not sampled.get(board):
            continue
        optimal = P.analyze(board).optimal
        keep = sum(c in optimal for c in sampled[board]) / len(sampled[board])
        out["boards"] += 1
        if cells[0] in optimal:
            out["greedy_right"] += 1
            out["greedy_right_samples_wrong"] += keep <= 0.5
        else:
            out["greedy_wrong"] += 1
            out["greedy_wrong_samples_right"] += keep > 0.5
    return out


def eval_rollouts(eval_dir: Path) -> tuple[list, list[dict]]:  # type: ignore[type-arg]
    """An eval folder's results and the same as rollout records of one step (what `decisions` and `first_moves`
    read)."""
    results = list(read_results(eval_dir / "results.jsonl").values())
    return results, [{"step": 1, "info": t.info, "task": t.task} for t in results]


LISTED = re.compile(r"somewhere free: ([0-9 ]+)\. I play (\d)\.")


def first_listed(messages_per_task: Iterable[list[dict]]) -> tuple[int, int, int]:  # type: ignore[type-arg]
    """Over one-move tasks' messages: (moves whose think text lists free cells, of which the move is the first listed,
    of which the first listed is the lowest listed)."""
    n = first = lowest = 0
    for messages in messages_per_task:
        text = next((m.get("reasoning_content") or "" for m in messages if m["role"] == "assistant"), "")
        if (found := LISTED.search(text)) is None:
            continue
        cells = [int(c) for c in found.group(1).split()]
        n += 1
        first += int(found.group(2)) == cells[0]
        lowest += cells[0] == min(cells)
    return n, first, lowest


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--classes", nargs="*", default=[], help="boards (any symmetry of each class)")
    ap.add_argument("--from-eval", type=Path, help="also the classes where this eval's lost games were decided")
    ap.add_argument("--top", type=int, default=3, help="how many of those (most losses first)")
    ap.add_argument("--window", type=int, default=10)
    ap.add_argument("--all", action="store_true", help="every class the games met, and a total row")
    ap.add_argument("--greedy", type=Path, help="a greedy eval of the same one-move tasks (RUN_DIR: sampled)")
    ap.add_argument("--reach", type=Path, help="a greedy eval of whole games: how often the run's whole games and "
                    "the eval's reach the classes its lost games were decided at")
    args = ap.parse_args()
    if args.reach:
        args.from_eval = args.from_eval or args.reach
    if args.greedy:
        g = greedy_vs_sampled(*(first_moves(eval_rollouts(d)[1]) for d in (args.greedy, args.run_dir)))
        print(f"{g['boards']} boards: greedy loses the value on {g['greedy_wrong']}, of which the samples keep it on "
              f"more than half: {g['greedy_wrong_samples_right']}; greedy keeps it on {g['greedy_right']}, of which "
              f"the samples lose it on half or more: {g['greedy_right_samples_wrong']}")
    classes = [P.canonical(b) for b in args.classes]
    if args.from_eval:
        import importlib.util

        spec = importlib.util.spec_from_file_location("losses", Path(__file__).with_name("losses.py"))
        losses = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
        spec.loader.exec_module(losses)  # type: ignore[union-attr]
        where = losses.lost_at(args.from_eval)[2]
        classes += [b for b, _ in where.most_common() if losses.is_class(b)][: args.top]
    if (args.run_dir / "results.jsonl").exists():  # an eval: every rollout in one window
        results, rollouts = eval_rollouts(args.run_dir)
        args.window = 1
        n, first, lowest = first_listed(t.messages for t in results)
        if n:
            print(f"{n} of {len(results)} moves listed free cells in their think text: the first listed played "
                  f"{100 * first / n:.1f} %, the first listed the lowest {100 * lowest / n:.1f} %")
    else:
        rollouts = read_rollouts(args.run_dir)  # a step replayed after a resume counts once
    if args.reach:
        (n_run, run), (n_eval, ev) = reach(rollouts, classes), reach(eval_rollouts(args.reach)[1], classes)
        print(f"whole games reaching each class (X to move): {args.run_dir} ({n_run} games from the empty board) "
              f"against {args.reach} ({n_eval})")
        print("| class (X to move) | training games % | eval games % |\n|---|---|---|")
        for c in dict.fromkeys(classes):
            print(f"| `{c[:3]}/{c[3:6]}/{c[6:]}` | {100 * run[c] / max(n_run, 1):.1f} | {100 * ev[c] / max(n_eval, 1):.1f} |")
        return
    table = decisions(rollouts, None if args.all else set(classes), args.window)
    if args.all:
        classes += sorted({c for (_, c) in table} - set(classes))
    if not classes:
        raise SystemExit("no class: give --classes, --from-eval or --all")
    last = max((int(r["step"]) for r in rollouts), default=0)
    steps = sorted({(s - 1) // args.window * args.window + 1 for s in range(1, last + 1)})
    print(f"{args.run_dir}: moves played from each class per {args.window}-step window (value-keeping %; "
          "the first free cell %)")
    print("| class (X to move) | " + " | ".join(f"{w}-{min(w + args.window - 1, last)}" for w in steps) + " |")
    print("|---|" + "---|" * len(steps))
    for c in dict.fromkeys(classes):
        cells = [table.get((w, c), [0, 0, 0]) for w in steps]
        row = " | ".join(f"{n} ({100 * k / n:.0f} %; {100 * f / n:.0f} %)" if n else "0" for n, k, f in cells)
        print(f"| `{c[:3]}/{c[3:6]}/{c[6:]}` | {row} |")
    if args.all:
        cells = [[sum(v[i] for (w2, _), v in table.items() if w2 == w) for i in range(3)] for w in steps]
        print("| all | " + " | ".join(f"{n} ({100 * k / n:.1f} %; {100 * f / n:.1f} %)" if n else "0"
                                    for n, k, f in cells) + " |")


if __name__ == "__main__":
    main()
