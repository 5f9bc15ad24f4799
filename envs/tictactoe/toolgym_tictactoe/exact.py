"""Exact game results of a player against the perfect or the random opponent: every line of play once, weighted by
its chance.

The env's perfect opponent (random-move probability 0) picks uniformly among its equally good moves, the random one
(probability 1) uniformly among the free cells, and who starts is a coin flip. N sampled games estimate a loss rate
p to about +-2 sqrt(p (1 - p) / N): +-2.6 points at 7 % and 400 games. A player that always answers the same
conversation the same way (a greedy model, a deterministic script) meets only finitely many lines of play, so its
rates are a finite sum instead: `exact_games` plays each line once, through the real MCP server with the opponent's
choices scripted (`new_game(opponent_choices=...)`), and weights it by (1/2) x the product over the opponent's
replies of 1 / (its number of choices there: equally good moves, or free cells). Against the perfect opponent a
player meets 80-170 lines; against the random one up to 1,329.

It expands the tree in waves. The first game of each start takes choice 0 at every reply; a reply with k > 1
choices spawns k - 1 sibling games that follow the same choices up to there and another one there, each carrying
1/k of the weight left at that reply. A sibling must replay its parent's moves up to its own choice: a player whose
answer changes between replays of one conversation (sampling, or numerics that depend on the batch) breaks that;
such games are counted (`diverged`) and keep the weight of the line they were asked to follow. An errored game is
a loss of its whole line's weight (it cannot be expanded), and so is a game left unfinished at the turn cap.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from mcp_server_tictactoe import game as g

MAX_GAMES = 20_000


@dataclass
class Line:
    """One game of the walk: a line of play and the probability of the lines it stands for."""

    x_starts: bool
    choices: list[int]  # the opponent's scripted ties this game was asked to follow (tie 0 past them)
    weight: float
    status: str = ""  # win / draw / loss / in_progress (the turn cap) / error
    moves: list[str] = field(default_factory=list)
    invalid_moves: int = 0
    lead: list[str] = field(default_factory=list)  # the moves its parent played before this line's own tie
    diverged: bool = False  # it did not replay `lead`


@dataclass
class ExactResult:
    """Probabilities over the opponent's ties and the coin flip (they sum to 1), and every line played."""

    win: float
    draw: float
    loss: float  # played-out losses, turn-cap games and errored games alike
    capped: float  # of `loss`: games left unfinished at the turn cap
    errored: float  # of `loss`: games that errored
    invalid_per_game: float  # expected invalid moves per game
    lines: list[Line]

    @property
    def games(self) -> int:
        return len(self.lines)

    @property
    def diverged(self) -> int:
        return sum(line.diverged for line in self.lines)

    def summary(self) -> dict[str, float]:
        """The totals as metric -> value (`lines`: games played; `diverged`: lines that did not replay their
        parent's moves, 0 for a deterministic player)."""
        return {"win": self.win, "draw": self.draw, "loss": self.loss, "capped": self.capped, "errored": self.errored,
                "invalid_per_game": self.invalid_per_game, "lines": float(self.games),
                "diverged": float(self.diverged)}


def opponent_ties(moves: list[str], style: str = "uniform", opponent: str = "optimal") -> list[int]:
    """For a game from the empty board through `moves` (`["O4", "X0", ...]`, as `game_result` lists them): how many
    choices the opponent had at each of its replies, in order -- its equally good moves (`optimal`), or the free
    cells (`random`)."""
    board, ties = g.EMPTY * 9, []
    for m in moves:
        side, cell = m[0], int(m[1:])
        if side == "O":
            ties.append(len(g.free_cells(board)) if opponent == "random" else len(g.minimax_choices(board, "O", style)))
        board = g.play(board, cell, side)
    return ties


def _expand(line: Line, style: str = "uniform", opponent: str = "optimal") -> list[Line]:
    """The siblings of a played line (see the module docstring); sets the line's own weight to what is left."""
    out, weight, fixed = [], line.weight, len(line.choices)
    ties = opponent_ties(line.moves, style, opponent)
    replies = [k for k, m in enumerate(line.moves) if m[0] == "O"]  # where each opponent reply sits in the moves
    for j in range(fixed, len(ties)):
        share = weight / ties[j]
        lead = [*line.choices, *([0] * (j - fixed))]
        out.extend(Line(line.x_starts, [*lead, i], share, lead=line.moves[:replies[j]]) for i in range(1, ties[j]))
        weight = share
    line.weight = weight
    return out


async def exact_games(env: Any, policy: Any, concurrency: int = 64, max_games: int = MAX_GAMES,
                      on_done: Callable[[Any], Any] | None = None, opponent: str = "optimal") -> ExactResult:
    """Every line of play of `policy` (X, from the empty board) against the `optimal` (random-move probability 0) or
    the `random` opponent (probability 1), once each.

    `env`: a tic-tac-toe env of whole games (`task="game"`; its `opponent_style` and `invalid_move` rule apply),
    started here if it is not (`env.start()`; closing it is the caller's).
    `policy`: any toolgym policy; the result is exact only for one that answers a conversation the same way each
    time (greedy decoding, temperature 0). `on_done(trajectory)` is called as each game ends (a progress bar).
    Raises ValueError for a move-task env, another `opponent`, or when the walk would pass `max_games` games."""
    from toolgym.rollout import run_rollouts

    if getattr(env, "task", "game") != "game":
        raise ValueError("exact_games plays whole games: load the env with task=game")
    if opponent not in ("optimal", "random"):
        raise ValueError(f"opponent must be 'optimal' or 'random', not {opponent!r}")
    await env.start()
    style = getattr(env, "opponent_style", "uniform")
    extra: dict[str, Any] = {}
    if style != "uniform":
        extra["opponent_style"] = style
    if getattr(env, "invalid_move", "retry") != "retry":
        extra["invalid_move"] = env.invalid_move
    done: list[Line] = []
    wave = [Line(True, [], 0.5), Line(False, [], 0.5)]
    while wave:
        if len(done) + len(wave) > max_games:
            raise ValueError(f"the walk passed {max_games} games: is the player deterministic (temperature 0)?")
        jobs = [(i, 0, {"seed": 0, "x_starts": line.x_starts, "random_move_prob": float(opponent == "random"),
                         "opponent_choices": line.choices, **extra}) for i, line in enumerate(wave)]
        trajs = await run_rollouts(env, policy, jobs, concurrency, on_done=on_done)
        nxt: list[Line] = []
        for line, traj in zip(wave, trajs, strict=True):
            done.append(line)
            result = (traj.info or {}).get("result") or {}
            if traj.error is not None or "moves" not in result:
                line.status = "error"
                continue
            line.moves, line.status = list(result["moves"]), str(result["status"])
            line.invalid_moves = int(result.get("invalid_moves", 0))
            line.diverged = line.moves[:len(line.lead)] != line.lead
            nxt.extend(_expand(line, style, opponent))
        wave = nxt
    total = {s: sum(line.weight for line in done if line.status == s)
             for s in ("win", "draw", "loss", "in_progress", "error")}
    return ExactResult(win=total["win"], draw=total["draw"],
                       loss=total["loss"] + total["in_progress"] + total["error"], capped=total["in_progress"],
                       errored=total["error"], invalid_per_game=sum(line.weight * line.invalid_moves for line in done),
                       lines=done)


def seeded_line(lines: list[Line], seed: int, x_starts: bool, random_move_prob: float,
                style: str = "uniform") -> Line | None:
    """The line of a deterministic player's walk (`lines`, from `exact_games`) that the game seeded `seed` plays:
    the opponent's replies drawn as the server draws them for that seed (`game.opponent_move`), the player's moves
    read from the lines. So a walk tells, with no model, what any seeded sample of games would have scored, and a
    sampled game that does not replay its line shows a player that is not the one walked. None when the draw
    leaves the lines (another opponent, style or start; errored lines have no moves and are never followed).
    Raises ValueError when the lines disagree on the player's move after one history (not one player's walk)."""
    cand = [line for line in lines if line.x_starts == x_starts and line.status != "error"]
    board, k = g.EMPTY * 9, 0
    while cand:
        ended = [line for line in cand if len(line.moves) == k]
        if ended:
            return ended[0]
        if cand[0].moves[k][0] == "O":
            move = f"O{g.opponent_move(board, seed, random_move_prob, 'O', style)}"
        else:
            mine = {line.moves[k] for line in cand}
            if len(mine) > 1:
                raise ValueError(f"the lines play {sorted(mine)} after {cand[0].moves[:k]}: not one player's walk")
            move = mine.pop()
        cand = [line for line in cand if line.moves[k] == move]
        board, k = g.play(board, int(move[1:]), move[0]), k + 1
    return None


__all__ = ["ExactResult", "Line", "exact_games", "opponent_ties", "seeded_line"]
