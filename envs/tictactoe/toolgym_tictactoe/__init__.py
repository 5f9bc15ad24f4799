"""Tic-tac-toe through tool calls: the model is X and plays with `make_move(position)` against a minimax opponent
whose strength is set per game by a random-move probability (GUIDE §6).

Two kinds of task (`task=`):
- `game` (default): a whole game. Example i has seed `seed * 1_000_003 + i`, a random-move probability drawn
  uniformly inside bucket `i % num_groups` of `[min_random_move_prob, max_random_move_prob]` (so every batch spans
  the difficulty range) and a start (`starts=`): the empty board with a 50/50 starting side (`empty`), a reachable
  position (`positions`) or a random opening of 0..`opening_moves` random moves, either side first (`openings`).
  Rewards (weights configurable): outcome win 1 / draw 0.5 / loss 0 (a game still running at the turn cap is a
  loss), format (share of turns with a `<think>` block and exactly one well-formed call; weight 0.2), invalid-move
  penalty (-0.1 flat if any call was invalid: unparsable, unknown tool, bad arguments, occupied or out-of-range
  cell; with `invalid_move="forfeit"` the game also ends there, a loss). The opponent: minimax with a random-move
  probability, choosing uniformly among its best moves or (`opponent_style="trappy"`) among those that set a trap.
  Metrics: win, draw, loss, invalid_moves, moves, heldout_visits.
- `move`: one move from a position (`starts=positions`: the reachable positions of `split=`; `openings`: random
  openings inside the split; `kinds=` narrows position starts to win / block / quiet / free positions), graded
  exactly against the game tree (`positions.analyze`): reward `optimal_move`
  (1 when the move keeps the game value) plus format and invalid-move penalty; metrics legal, optimal, fastest,
  win_taken (positions with an immediate win), blocked (positions with a threat and no win). `-n 0` (all) runs the
  whole split in a fixed order: the position-accuracy evaluation. `agent_plays=O` poses the same positions with O to
  move; they reach the model through the colour swap `suggest_move` uses, and are graded on the O board itself.

`split=` (`all`, `train`, `heldout`): positions whose hash puts them in the held-out share (`positions.is_heldout`)
are kept out of every training source of the recipe; games report `heldout_visits` (X-to-move positions of the
held-out split the game passed through), which `toolgym synth --drop-if heldout_visits` uses.
"""

from __future__ import annotations

import contextlib
import copy
import importlib.util
import random
import statistics
import warnings
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field
from typing_extensions import TypedDict

from toolgym import AssistantTurn, HiddenCallError, Rubric, ScriptedPolicy, ServerSpec, StatefulToolEnv, stop
from toolgym.policies.scripted import call, rollout_rng
from toolgym_tictactoe import positions as P
from toolgym_tictactoe.text import (  # noqa: F401 -- the text functions, re-exported where they were defined before
    PREFERENCE,
    THINK_FORMATS,
    board_from_messages,
    completing_cells,
    explain_best_move,
    fork_cells,
    forced_move,
    parse_board,
    safe_value,
    scan_lines,
    unreasoned_think,
)

SYSTEM_PROMPT = (
    "You are playing tic-tac-toe as X against an opponent playing O. Cells are numbered 0-8, row by row:\n"
    " 0 | 1 | 2\n 3 | 4 | 5\n 6 | 7 | 8\n"
    "On each turn, think briefly inside <think></think>, then call make_move with the cell you choose. "
    "Three in a row wins."
)

Prob = Annotated[float, Field(ge=0.0, le=1.0)]

CHECKPOINT = Path(__file__).with_name("checkpoint")
"""The committed tiny tic-tac-toe model (`examples/tictactoe/`, safetensors + tokenizer), shipped as package data."""


def embedded_default_policy() -> str:
    """`hf:<CHECKPOINT>` when the checkpoint and torch + transformers are installed, else the scripted minimax
    expert (a torch-free install still gets a working `toolgym eval tictactoe`)."""
    have = all(importlib.util.find_spec(m) is not None for m in ("torch", "transformers"))
    if have and (CHECKPOINT / "model.safetensors").is_file():
        return f"hf:{CHECKPOINT}"
    return "scripted:minimax"


def _board_fields(board: str) -> dict[str, Any]:
    """The fields a task row that starts from `board` (X to move) carries: who started, and the position's kind,
    pieces and split (what evals break results down by)."""
    pos = P.analyze(board)
    return {"x_starts": board.count("X") == board.count("O"), "kind": pos.kind, "pieces": pos.pieces,
            "split": pos.split}


def positions_shown(messages: list[dict[str, Any]]) -> list[str]:
    """The positions with X to move that a game's user and tool messages showed the player, in order, each once:
    where it had to choose a move (the start, then the board after each opponent reply). What an RL run's games
    visited (`GRPOConfig.save_rollouts`)."""
    out: list[str] = []
    for m in messages:
        if m.get("role") not in ("tool", "user") or not isinstance(m.get("content"), str):
            continue
        b = parse_board(m["content"])
        if b is None or b in out:
            continue
        try:
            P.analyze(b)
        except ValueError:  # a finished game, or not X's turn
            continue
        out.append(b)
    return out


_OPPONENT_KEYS = ("seed", "random_move_prob", "group", "opponent_style", "invalid_move")


def _replay_key(task: dict[str, Any]) -> tuple[Any, ...]:
    """A replayed board's identity: the board and the opponent its game was played with."""
    return (task["board"], *(task.get(k) for k in _OPPONENT_KEYS))


class TicTacToeEnv(StatefulToolEnv):
    name = "tictactoe"
    server = ServerSpec.stdio(["mcp-server-tictactoe"])
    session_scope = "shared"
    hidden_tools = {"new_game", "game_result", "end_game"}
    hidden_args = {"make_move": ["game_id"], "get_board": ["game_id"]}  # filled from state["game_id"]
    system_prompt = SYSTEM_PROMPT
    default_policy = embedded_default_policy()
    # greedy, like the recipe's evals
    default_policy_options = {"temperature": 0.0, "max_tokens": 200} if default_policy.startswith("hf:") else {}
    max_turns = 8
    on_no_call = "nudge"
    nudge_message = "You must make your move by calling make_move with a free cell."

    def __init__(
        self,
        min_random_move_prob: Prob = 0.0,
        max_random_move_prob: Prob = 0.0,
        num_groups: Annotated[int, Field(ge=1)] = 1,
        win_reward: float = 1.0,
        draw_reward: float = 0.5,
        format_weight: Annotated[float, Field(ge=0)] = 0.2,
        invalid_penalty: Annotated[float, Field(ge=0)] = 0.1,
        require_think: bool = True,
        task: Literal["game", "move"] = "game",
        starts: Literal["empty", "positions", "openings"] | None = None,
        split: Literal["all", "train", "heldout"] = "all",
        opening_moves: Annotated[int, Field(ge=0, le=8)] = 4,
        kinds: Literal["all", "win", "block", "quiet", "free"] | list[Literal["win", "block", "quiet", "free"]] = "all",
        agent_plays: Literal["X", "O"] = "X",
        position_share: Prob = 0.0,
        position_pieces: list[Annotated[int, Field(ge=0, le=8)]] | None = None,
        opponent_style: Literal["uniform", "trappy"] = "uniform",
        invalid_move: Literal["retry", "forfeit"] = "retry",
        restart_max_pieces: Annotated[int, Field(ge=1, le=7)] = 7,
        restart_replay: Prob = 0.0,
        restart_buffer: Annotated[int, Field(ge=1)] = 64,
        restart_temperature: Annotated[float, Field(gt=0.0)] = 0.3,
        restart_staleness: Annotated[float, Field(ge=0.0, lt=1.0)] = 0.3,
        restart_score: Literal["loss", "outcome"] = "loss",
        restart_opponent: Literal["game", "optimal"] = "game",
        restart_invalid_move: Literal["game", "forfeit"] = "game",
        restart_board: Literal["uniform", "last_unforced"] = "uniform",
        restart_symmetry: bool = False,
        restart_trap_share: Prob = 0.0,
        restart_trap_random: Prob = 1.0,
        suggest_turns: Annotated[int, Field(ge=1, le=9)] = 3,
        transport: Literal["stdio", "http", "inprocess"] = "stdio",
        **options: Any,
    ) -> None:
        """
        Args:
            min_random_move_prob: Lowest probability that the opponent plays a random move instead of minimax.
            max_random_move_prob: Highest such probability; games draw theirs between the two, by group.
            num_groups: Difficulty buckets of the random-move range (example i is in bucket i % num_groups).
            win_reward: Outcome reward of a win (a loss is 0).
            draw_reward: Outcome reward of a draw.
            format_weight: Weight of the format reward (share of well-formed turns).
            invalid_penalty: Subtracted once if any call was invalid.
            require_think: Whether a well-formed turn needs a <think> block.
            task: A whole game, or one move from a position.
            starts: Where tasks start (default: empty for games, positions for moves).
            split: Which positions by the held-out hash: all, the training share or the held-out share.
            opening_moves: Most random opening moves (starts=openings).
            kinds: Position kinds of move tasks from positions: all, one kind, or a list of win/block/quiet/free.
            agent_plays: The side the agent plays (O: move tasks only).
            position_share: Games from the empty board or openings only: the share of games (each example drawn
                with this probability, seeded) that start instead from a reachable position of `split` and
                `kinds`, so one run mixes whole games with games from the positions where choices matter.
            position_pieces: Position starts (and `position_share` games) only from boards with one of these
                numbers of marks, e.g. `[3]`: the opponent's second move, where its first replies set traps.
            opponent_style: How the opponent's minimax moves are chosen among equally good ones: uniformly (every
                eval), or `trappy` -- preferring moves that leave the agent a quiet position (no win to take, no
                threat to block) with a move that loses, where a player who knows only wins and blocks goes wrong.
                Task rows carry it (like their random-move probability), so a `task_schedule` phase can set it.
            invalid_move: What an invalid move costs in a game besides `invalid_penalty`: `retry` (the game goes
                on; the move is asked again) or `forfeit` (the game ends there, unfinished: a loss -- as a greedy
                player that repeats the move would lose it at the turn cap). Task rows carry it, like the style.
            restart_max_pieces: Games that restart (GRPO's `restart_share`) start only from boards with at most
                this many marks: 3 keeps them to the opening, where the opponent's first replies set its traps.
            restart_replay: The share of restarted groups replayed from a buffer of contested boards (Prioritized
                Level Replay for boards): a board enters the buffer when the group restarted from it comes back,
                scored by the spread of that group's outcomes; contested boards (some samples lose, some do not)
                are replayed, boards whose group all lost or all drew fall out of favour. 0: no buffer, no extra
                random draws -- the restarts of `restart_max_pieces` alone. The rest still come from lost games.
            restart_buffer: Most boards (each with its game's opponent) the replay buffer keeps; when full, a newly
                scored board replaces the lowest-scored one if it scores higher.
            restart_temperature: Rank-based prioritisation's temperature: a board's weight is (1 / rank) ** (1 /
                temperature), rank 1 the highest score (ties share a rank); lower is greedier.
            restart_staleness: Share of the replay distribution given by staleness instead (proportional to the
                restart calls since the board was last scored), so stale scores get refreshed; below 1.
            restart_score: What a replayed board's score spreads: `loss` (the std of the group's lost indicator,
                sqrt(q (1 - q)) with q its share of losses: a trap where some samples lose and some draw or win)
                or `outcome` (the std of win 1 / draw 0.5 / loss 0, in `win_reward` / `draw_reward` units).
            restart_opponent: Whom a game restarted from a lost game's board plays: `game` (that game's opponent,
                its random-move probability included) or `optimal` (the same opponent at random-move probability
                0: the restarted group's outcomes then depend on the model's moves alone, so a board that is
                already lost loses every sample and a board where one reply holds the draw is contested). The
                board is still chosen by the lost game; the seed, style and invalid-move rule stay the game's.
            restart_invalid_move: What an invalid move costs in a restarted game: the game's rule (`game`, see
                `invalid_move`) or `forfeit` (it ends the restarted game as a loss). Against the optimal opponent
                most samples of a restarted group lose whatever they do, so under `retry` an invalid move costs
                little against its group; `forfeit` makes it cost what it costs a greedy player in a whole game.
            restart_board: Which board a lost game restarts from: `uniform` among the boards it showed, or
                `last_unforced` -- the last one with no win to take and no threat to block (no game value is
                consulted), where a game lost to a fork was decided: the moves after it are forced. A lost game
                whose unforced boards were all restarted already (this step) restarts nothing; one that showed
                none (lost by a missed win or block) draws uniformly; the games that were not lost always do.
            restart_symmetry: Each board a game restarts from is first turned into one of its 8 rotations and
                reflections, drawn at random among those no restart of the step has taken (a replayed board keeps
                the image it was restarted in): a trap lost in one orientation is practised in all of them. The
                image is in the board's symmetry class, so the held-out split is unchanged.
            restart_trap_share: Share of the restarted groups (after the replayed ones) that restart from a board
                where X chooses among two or more value-keeping moves (no win to take, no threat to block), drawn
                from any game, against the random opponent (random-move probability 1; the seed, style and
                invalid-move rule stay the game's). Against the optimal opponent every value-keeping move draws, so
                nothing there rewards the one that sets a trap; these groups compare the choices' wins directly.
                Marked `trap = True`, never scored into the replay buffer. The rest still come from lost games.
                The share is taken after the replayed groups, so with `restart_replay` it can leave no group for
                the lost games' boards (and the buffer nothing new to score): keep `round(restart_share *
                batch_size)` above the replayed and trap groups together (a warning says so once when not).
            restart_trap_random: The trap groups' opponent's random-move probability (default 1, the
                random player). Below 1 the opponent also plays its minimax moves, so a move that gives up the game
                value is punished more often: walked exactly with a best-responding X, 4.6 % of the 461 trap boards
                (1-7 marks) have a value-losing move as their best against the random player, none at 0.5, where
                the value-keeping moves still differ by 0.074 reward on average (0.128 at 1).
            suggest_turns: `toolgym serve`'s `suggest_move`: the agent's turns to make one legal move (its first,
                then one more after each move the server rejects, with the error in front of it); 1 returns the
                first move whatever it is.
            transport: How the tic-tac-toe server runs: a stdio subprocess, streamable HTTP or in this process.
        """
        if not 0.0 <= min_random_move_prob <= max_random_move_prob <= 1.0:
            raise ValueError("need 0 <= min_random_move_prob <= max_random_move_prob <= 1")
        if num_groups < 1:
            raise ValueError("num_groups must be >= 1")
        if opponent_style not in ("uniform", "trappy"):
            raise ValueError(f"opponent_style must be 'uniform' or 'trappy', not {opponent_style!r}")
        if invalid_move not in ("retry", "forfeit"):
            raise ValueError(f"invalid_move must be 'retry' or 'forfeit', not {invalid_move!r}")
        self.opponent_style, self.invalid_move = opponent_style, invalid_move
        if not 1 <= suggest_turns <= 9:
            raise ValueError(f"suggest_turns must be 1-9, not {suggest_turns!r}")
        self.suggest_turns = suggest_turns
        self.restart_max_pieces = restart_max_pieces
        if not 0.0 <= restart_replay <= 1.0 or restart_buffer < 1 or restart_temperature <= 0 \
                or not 0.0 <= restart_staleness < 1.0 or restart_score not in ("loss", "outcome"):
            raise ValueError("restart replay: need 0 <= restart_replay <= 1, restart_buffer >= 1, restart_temperature "
                             "> 0, 0 <= restart_staleness < 1 and restart_score 'loss' or 'outcome'")
        if restart_opponent not in ("game", "optimal"):
            raise ValueError(f"restart_opponent must be 'game' or 'optimal', not {restart_opponent!r}")
        self.restart_opponent = restart_opponent
        if restart_invalid_move not in ("game", "forfeit"):
            raise ValueError(f"restart_invalid_move must be 'game' or 'forfeit', not {restart_invalid_move!r}")
        if restart_board not in ("uniform", "last_unforced"):
            raise ValueError(f"restart_board must be 'uniform' or 'last_unforced', not {restart_board!r}")
        self.restart_invalid_move, self.restart_board = restart_invalid_move, restart_board
        self.restart_symmetry = bool(restart_symmetry)
        if not 0.0 <= restart_trap_share <= 1.0 or restart_trap_share and task != "game":
            raise ValueError("restart_trap_share: a share 0-1 of restarted games (task=game)")
        self.restart_trap_share = restart_trap_share
        self._warned_no_lost = False
        if not 0.0 <= restart_trap_random <= 1.0:
            raise ValueError("restart_trap_random: a probability 0-1")
        if restart_trap_random != 1.0 and not restart_trap_share:
            raise ValueError("restart_trap_random sets the trap groups' opponent: set restart_trap_share")
        self.restart_trap_random = restart_trap_random
        if restart_replay and task != "game":
            raise ValueError("restart_replay replays restarted games (task=game)")
        self.restart_replay, self.restart_buffer = restart_replay, restart_buffer
        self.restart_temperature, self.restart_staleness, self.restart_score = \
            restart_temperature, restart_staleness, restart_score
        # the replay buffer (restart_replay): key (board + opponent) -> {"row", "score", "scored"}; GRPO's checkpoints
        # keep it (restart_state / load_restart_state)
        self.replay: dict[tuple[Any, ...], dict[str, Any]] = {}
        self.replay_clock = 0  # restart_tasks calls with restart_replay on (the staleness unit)
        if task not in ("game", "move"):
            raise ValueError(f"task must be 'game' or 'move', not {task!r}")
        starts = starts or ("empty" if task == "game" else "positions")
        if starts not in ("empty", "positions", "openings") or (task == "move" and starts == "empty"):
            raise ValueError(f"starts must be 'empty', 'positions' or 'openings' ('move' tasks: positions or "
                             f"openings), not {starts!r}")
        if split not in ("all", "train", "heldout"):
            raise ValueError(f"split must be 'all', 'train' or 'heldout', not {split!r}")
        if agent_plays not in ("X", "O") or (agent_plays == "O" and task != "move"):
            raise ValueError("agent_plays must be 'X' or 'O' ('O' only for task=move)")
        if not 0 <= opening_moves <= 8:
            raise ValueError("opening_moves must be in 0..8")
        if position_share and (task != "game" or starts == "positions"):
            raise ValueError("position_share mixes position starts into games from the empty board or openings")
        if split != "all" and starts == "empty" and not position_share:
            raise ValueError("split applies to position and opening starts; the empty board is in every split")
        kinds = list(P.KINDS) if kinds == "all" else [kinds] if isinstance(kinds, str) else list(kinds)
        with_positions = starts == "positions" or position_share > 0
        if not kinds or set(kinds) - set(P.KINDS) or not with_positions and kinds != list(P.KINDS):
            raise ValueError(f"kinds must be 'all' or a list of {P.KINDS} (position starts only), not {kinds!r}")
        self.kinds = kinds
        if position_pieces is not None and (not with_positions or not position_pieces
                                            or any(not 0 <= k <= 8 for k in position_pieces)):
            raise ValueError("position_pieces: a non-empty list of mark counts 0-8, for position starts only")
        self.position_pieces = None if position_pieces is None else sorted(set(position_pieces))
        self.task, self.starts, self.split = task, starts, split
        self.opening_moves, self.agent_plays, self.position_share = opening_moves, agent_plays, position_share
        if task == "move":
            options.setdefault("max_turns", 1)
        self.min_p, self.max_p, self.num_groups = min_random_move_prob, max_random_move_prob, num_groups
        self.win_reward, self.draw_reward = win_reward, draw_reward
        self.format_weight, self.invalid_penalty, self.require_think = format_weight, invalid_penalty, require_think
        server = options.pop("server", None) or _server_for(transport)
        super().__init__(server=server, **options)

    # ------------------------------------------------------------ data
    def build_dataset(self, n: int | None = None, seed: int = 0) -> list[dict[str, Any]]:
        """Task rows. Games from the empty board: `n` (default 100). Position starts: `n=None` or 0 is every
        position of the split in a fixed (sorted) order; a smaller `n` a seeded sample; a larger one repeats the
        split in reshuffled passes. Opening starts: `n` (default 100) random openings inside the split. With
        `position_share`, each game example starts from a seeded random position of the split instead with that
        probability."""
        of_kinds = [b for b in P.positions(self.split) if P.analyze(b).kind in self.kinds
                    and (self.position_pieces is None or 9 - b.count(".") in self.position_pieces)] \
            if self.starts == "positions" or self.position_share else []
        if not of_kinds and (self.starts == "positions" or self.position_share):
            raise ValueError(f"no {self.split} position of kinds {self.kinds} with {self.position_pieces} marks")
        mixed = of_kinds if self.position_share else []
        if self.starts == "positions":
            boards = of_kinds
            if n:
                rng = random.Random(f"tictactoe-positions:{seed}:{self.split}")
                order: list[str] = []
                while len(order) < n:
                    order.extend(rng.sample(boards, len(boards)))
                boards = order[:n]
            n = len(boards)
        else:
            n = n or 100
            boards = []
        rows = []
        width = (self.max_p - self.min_p) / self.num_groups
        for i in range(n):
            ex_seed = seed * 1_000_003 + i
            rng = random.Random(f"tictactoe-example:{ex_seed}")
            group = i % self.num_groups
            lo = self.min_p + group * width
            row: dict[str, Any] = {"seed": ex_seed, "x_starts": rng.random() < 0.5,
                                   "random_move_prob": round(lo + rng.random() * width, 4), "group": group}
            if self.opponent_style != "uniform":  # the opponent travels with the task, like its random-move prob
                row["opponent_style"] = self.opponent_style
            if self.invalid_move != "retry":
                row["invalid_move"] = self.invalid_move
            if self.starts == "positions":
                row["board"] = boards[i]
            elif mixed and rng.random() < self.position_share:
                row["board"], row["start"] = rng.choice(mixed), "position"
            elif self.starts == "openings":
                row["board"], row["x_starts"] = P.random_opening(rng, self.opening_moves, self.split)
            if mixed:  # which half of a mixed pool the game came from (eval breaks results down by it)
                row.setdefault("start", self.starts)
            if "board" in row:
                row.update(_board_fields(row["board"]))
                if self.agent_plays == "O":
                    row["board"], row["agent_plays"] = P.swap_colours(row["board"]), "O"
            rows.append(row)
        return rows

    @property
    def report_by(self) -> tuple[str, ...]:  # type: ignore[override]
        """Task fields `toolgym eval` breaks the results down by (with CIs and a plot)."""
        if self.position_share:
            return ("start", "kind", "pieces", "split")
        return ("kind", "pieces", "split") if self.starts != "empty" else ()

    @property
    def report_metrics(self) -> tuple[str, ...] | None:  # type: ignore[override]
        if self.task == "move":
            return ("legal", "optimal", "fastest", "win_taken", "blocked", "format_ok")
        return ("win", "draw", "loss", "format_ok")

    # ------------------------------------------------------------ hooks
    async def setup_state(self, state: dict[str, Any], task: dict[str, Any]) -> None:
        args = {"seed": task.get("seed", 0), "random_move_prob": task.get("random_move_prob", 0.0)}
        if task.get("opponent_style", "uniform") != "uniform":
            args["style"] = task["opponent_style"]
        if task.get("opponent_choices") is not None:  # scripted ties of the perfect opponent (`exact.exact_games`)
            args["opponent_choices"] = list(task["opponent_choices"])
        if task.get("board"):
            args["board"] = x_view(task["board"], task.get("agent_plays", "X"))
        else:
            args["x_starts"] = task.get("x_starts")
        res = (await self.call("new_game", **args)).json()
        state["game_id"], state["board_text"], state["over"] = res["game_id"], res["board"], False
        state["start"] = args.get("board") or "." * 9

    def initial_messages(self, task: dict[str, Any], state: dict[str, Any]) -> list[dict[str, Any]]:
        if task.get("board"):
            first = _game_start(task["board"]) if task.get("one_move") else None
            first = first or "A game in progress."
        else:
            first = "New game. " + ("You move first." if task.get("x_starts", True) else "The opponent moved first.")
        return [{"role": "system", "content": self.system_prompt},
                {"role": "user", "content": f"{first}\n{state['board_text']}"}]

    async def env_response(self, state, turn, records):  # type: ignore[no-untyped-def]
        if any(r.name == "make_move" and r.exec_ok and "Game over" in r.result for r in records):
            state["over"] = True
        elif state["task"].get("invalid_move") == "forfeit" and any(not r.exec_ok for r in records):
            state["over"] = state["forfeit"] = True  # the game stays unfinished: scored as a loss
        elif state["task"].get("one_move") and any(r.name == "make_move" and r.exec_ok for r in records):
            state["over"] = True  # a served suggestion (`suggest_move`): its first legal move is the answer
        return None

    @stop
    def game_over(self, state: dict[str, Any]) -> bool:
        return bool(state.get("over"))

    async def cleanup(self, state: dict[str, Any]) -> None:
        if "game_id" in state:
            if "result" not in state:  # an unscored game (a served one) keeps its final result in the state
                with contextlib.suppress(HiddenCallError):
                    await _result(self, state)
            await self.call("end_game", game_id=state["game_id"])

    # ------------------------------------------------------------ rewards
    def build_rubric(self) -> Rubric:
        if self.task == "move":
            return Rubric([
                (optimal, 1.0),
                (format_ok, self.format_weight),
                (invalid_move_penalty, 1.0),
                (legal, 0.0), (fastest, 0.0), (win_taken, 0.0), (blocked, 0.0),
            ])
        return Rubric([
            (outcome, 1.0),
            (format_ok, self.format_weight),
            (invalid_move_penalty, 1.0),
            (win, 0.0), (draw, 0.0), (loss, 0.0), (invalid_moves, 0.0), (moves, 0.0), (heldout_visits, 0.0),
        ])

    def restart_tasks(self, trajectories: list[Any], n: int, rng: random.Random) -> list[dict[str, Any]]:
        """Games that restart from boards the model was shown in `trajectories` (GRPO's `restart_share`): X to move
        with at least one and at most `restart_max_pieces` marks (so at least two free cells), taken first from games
        it lost (one board per lost game, drawn uniformly among those it faced there, or its last unforced one with
        `restart_board`; with `restart_symmetry` a random rotation or reflection of it), then from the others; each
        board once. A restart keeps its game's opponent (seed, random-move probability, style, invalid-move rule;
        `restart_opponent` and `restart_invalid_move` override the probability and the rule) and is marked `start =
        "restart"`. The outcome chooses: no game value tells which board mattered (`last_unforced` looks only for a
        win to take or a threat to block). Games marked `probe` (GRPO's `probe_games`: played greedily, not
        trained on) come first in each of the two pools, so the boards greedy play loses on are restarted first.

        With `restart_replay`, first the groups restarted in `trajectories` score their boards into the replay
        buffer (`_score_restarts`), then `round(restart_replay * n)` of the rows (at most the buffer's size) are
        boards replayed from it (`_replay`, marked `replay = True`), and the rest come from lost games as above."""
        if self.task != "game":
            raise ValueError("restart_tasks restarts games (task=game)")
        rows: list[dict[str, Any]] = []
        if self.restart_replay:
            self._score_restarts(trajectories)
            rows = self._replay(min(round(self.restart_replay * n), n, len(self.replay)), rng)
        lost, other, choices = [], [], []
        for t in trajectories:
            if t.error is not None:
                continue
            boards = [b for b in positions_shown(t.messages) if 1 <= 9 - b.count(".") <= self.restart_max_pieces]
            if boards:
                (lost if t.metrics.get("loss", 0.0) > 0 else other).append((t.task, boards))
            if self.restart_trap_share:
                tied = [b for b in boards if forced_move(b) is None and len(P.analyze(b).optimal) >= 2]
                if tied:
                    choices.append((t.task, tied))
        seen: set[str] = {r["board"] for r in rows}
        if choices:  # restart_trap_share: choices among value-keeping moves, against the (by default) random opponent
            rng.shuffle(choices)
            want = min(n, len(rows) + round(self.restart_trap_share * n))
            if self.restart_replay and want >= n and not self._warned_no_lost:
                self._warned_no_lost = True
                warnings.warn(f"restart_trap_share: the replayed and trap groups take all {n} restarted groups, so "
                              "none restart from lost games' boards and the replay buffer gets no new board; raise "
                              "restart_share or lower restart_replay / restart_trap_share", stacklevel=2)
            for task, boards in choices:
                fresh = [b for b in boards if b not in seen]
                if len(rows) >= want or not fresh:
                    continue
                row = self._restart_row(task, rng.choice(fresh), seen, rng, self.restart_trap_random)
                rows.append({**row, "trap": True})
        for pool in (lost, other):
            rng.shuffle(pool)
            pool.sort(key=lambda game: not game[0].get("probe"))  # greedy probes first (GRPO's probe_games)
            for task, boards in pool:
                if len(rows) >= n:
                    return rows
                fresh = [b for b in boards if b not in seen]
                if not fresh:
                    continue
                if pool is lost and self.restart_board == "last_unforced" \
                        and any(forced_move(b) is None for b in boards):
                    unforced = [b for b in fresh if forced_move(b) is None]
                    if not unforced:  # this game's unforced boards were all restarted already: it restarts nothing
                        continue
                    board = unforced[-1]
                else:
                    board = rng.choice(fresh)
                rows.append(self._restart_row(task, board, seen, rng,
                                              0.0 if self.restart_opponent == "optimal" else None))
        return rows

    def _restart_row(self, task: dict[str, Any], board: str, seen: set[str], rng: random.Random,
                     random_move_prob: float | None) -> dict[str, Any]:
        """The restart row of `board` from game `task`: with `restart_symmetry` one of the board's images that no
        restart of this step has taken (itself included), marked taken in `seen`; the game's opponent, its
        random-move probability replaced by `random_move_prob` unless None, and `restart_invalid_move`."""
        if self.restart_symmetry:
            untaken = P.images(board) - seen
            seen.add(board)
            board = rng.choice(sorted(untaken))
        seen.add(board)
        row = {k: task[k] for k in _OPPONENT_KEYS if k in task}
        if random_move_prob is not None:
            row["random_move_prob"] = random_move_prob
        if self.restart_invalid_move == "forfeit":
            row["invalid_move"] = "forfeit"
        return {**row, "board": board, "start": "restart", **_board_fields(board)}

    def symmetric_images(self, messages: list[dict[str, Any]], k: int, rng: random.Random) -> list[list[dict[str, Any]]]:
        """The game under up to `k` rotations and reflections of the board (`toolgym_tictactoe.symmetry`): the
        opponent and the outcome are symmetric, so each image is an equally likely game with the same reward."""
        from toolgym_tictactoe.symmetry import game_images

        return game_images(messages, k, rng)

    async def exact_eval(self, policy: Any) -> dict[str, float]:
        """Exact W/D/L of a greedy `policy` in whole games from the empty board against this env's opponent, which
        must be the optimal one (random-move probability 0) or the random one (1): every line of play once,
        weighted by its chance (`toolgym_tictactoe.exact`). Keys (`ExactResult.summary`): win, draw, loss, capped and
        errored (both part of loss), invalid_per_game, lines (games played), diverged (lines that did not replay
        their parent's moves)."""
        from toolgym_tictactoe.exact import exact_games

        self.check_exact_eval()
        return (await exact_games(self, policy, opponent="random" if self.max_p == 1.0 else "optimal")).summary()

    def check_exact_eval(self) -> None:
        """The walk plays whole games from the empty board against an opponent it can enumerate: the optimal one or
        the random one (a mix of the two would weigh every reply by its chance too, but is not implemented)."""
        if self.task != "game" or self.starts != "empty" or self.position_share:
            raise ValueError("exact_eval plays whole games from the empty board (task=game, starts=empty, no "
                             "position_share)")
        if (self.min_p, self.max_p) not in ((0.0, 0.0), (1.0, 1.0)):
            raise ValueError("exact_eval needs the optimal (random-move probability 0) or the random (1) opponent, "
                             f"not {self.min_p}-{self.max_p}")

    def restart_state(self) -> dict[str, Any]:
        """The replay buffer (`restart_replay`) and its clock, for GRPO's checkpoints."""
        return {"replay": copy.deepcopy(self.replay), "replay_clock": self.replay_clock}

    def load_restart_state(self, state: Any) -> None:
        if state is not None:
            self.replay, self.replay_clock = copy.deepcopy(state["replay"]), int(state["replay_clock"])

    def restart_options(self) -> list[str]:
        """`restart_replay`, a `restart_max_pieces` below 7, `restart_opponent = "optimal"`, `restart_invalid_move =
        "forfeit"`, `restart_board = "last_unforced"`, `restart_symmetry` and `restart_trap_share` act only on
        restarted groups (GRPO's `restart_share`)."""
        return [name for name, on in (("restart_replay", bool(self.restart_replay)),
                                      ("restart_max_pieces", self.restart_max_pieces != 7),
                                      ("restart_opponent", self.restart_opponent != "game"),
                                      ("restart_invalid_move", self.restart_invalid_move != "game"),
                                      ("restart_board", self.restart_board != "uniform"),
                                      ("restart_symmetry", self.restart_symmetry),
                                      ("restart_trap_share", bool(self.restart_trap_share))) if on]

    def _score_restarts(self, trajectories: list[Any]) -> None:
        """PLR's scoring, on outcomes only: each group restarted in `trajectories` (`start == "restart"`; its board
        and opponent are the key) gets the spread of its samples' outcomes (`restart_score`) as its board's score;
        a board not in the buffer enters it (when full, in place of the lowest-scored board, if it scores higher)."""
        self.replay_clock += 1
        groups: dict[tuple[Any, ...], list[float]] = {}
        rows: dict[tuple[Any, ...], dict[str, Any]] = {}
        for t in trajectories:
            if t.error is not None or t.task.get("start") != "restart" or not t.task.get("board") \
                    or t.task.get("trap"):
                continue
            key = _replay_key(t.task)
            m = t.metrics
            value = float(m.get("loss", 0.0) > 0) if self.restart_score == "loss" else \
                self.win_reward * m.get("win", 0.0) + self.draw_reward * m.get("draw", 0.0)
            groups.setdefault(key, []).append(value)
            rows[key] = t.task
        for key, values in groups.items():
            if len(values) < 2:  # one sample has no spread to measure
                continue
            score = statistics.pstdev(values)
            if key not in self.replay and len(self.replay) >= self.restart_buffer:
                low = min(self.replay, key=lambda k: (self.replay[k]["score"], self.replay[k]["scored"]))
                if self.replay[low]["score"] >= score:
                    continue
                del self.replay[low]
            row = {k: v for k, v in rows[key].items() if k != "replay"}
            self.replay[key] = {"row": row, "score": score, "scored": self.replay_clock}

    def _replay(self, k: int, rng: random.Random) -> list[dict[str, Any]]:
        """`k` distinct boards from the replay buffer, drawn without replacement from PLR's replay distribution
        (1 - restart_staleness) * P_score + restart_staleness * P_stale: P_score rank-based, (1 / rank) ** (1 /
        restart_temperature) normalised (rank 1 the highest score, ties sharing a rank); P_stale proportional to
        the restart calls since a board was last scored (P_score alone while every board is fresh)."""
        if k <= 0:
            return []
        entries = list(self.replay.values())
        scores = [e["score"] for e in entries]
        h = [(1.0 / (1 + sum(s > x for s in scores))) ** (1.0 / self.restart_temperature) for x in scores]
        stale = [self.replay_clock - e["scored"] for e in entries]
        total_h, total_stale = sum(h), sum(stale)
        rho = self.restart_staleness if total_stale > 0 else 0.0
        weights = [(1 - rho) * a / total_h + (rho * b / total_stale if rho else 0.0) for a, b in zip(h, stale)]
        rows: list[dict[str, Any]] = []
        boards: set[str] = set()
        for _ in range(k):
            live = [w if e["row"]["board"] not in boards else 0.0 for e, w in zip(entries, weights)]
            if not any(live):
                break
            e = entries[rng.choices(range(len(entries)), weights=live)[0]]
            boards.add(e["row"]["board"])
            rows.append({**e["row"], "replay": True})
        return rows

    def scripted_players(self) -> dict[str, Any]:
        return {"minimax": minimax_player, "random": random_player, "imperfect": imperfect_player}


    # ------------------------------------------------------------ serving (`toolgym serve`)
    serve_defaults = {"transport": "inprocess"}  # a served request starts no server process

    def serve_task(
        self,
        seed: Annotated[int, Field(ge=0, le=2**53)] = 0,
        agent_starts: bool | None = None,
        opponent_random_move_prob: Prob = 0.0,
    ) -> dict[str, Any]:
        """Play one game of tic-tac-toe: the agent is X, the opponent O plays minimax (or a random free cell with
        probability opponent_random_move_prob). Returns the outcome for the agent (win, draw, loss, or unfinished
        when the turn cap came first), the final board, the moves in order, the agent's last words and a trace of
        its calls. The same arguments give the same game.

        Args:
            seed: Seeds who starts (unless agent_starts is given), the opponent's choices among equally good moves
                and the agent's sampling.
            agent_starts: Whether the agent (X) moves first; default: a coin flip drawn from the seed.
            opponent_random_move_prob: Probability, 0 to 1, that the opponent plays a random free cell instead of a
                best move: 0 is a perfect opponent.
        """
        if agent_starts is None:
            agent_starts = random.Random(f"tictactoe-example:{seed}").random() < 0.5
        return {"seed": seed, "x_starts": agent_starts, "random_move_prob": opponent_random_move_prob}

    def serve_result(self, trajectory: Any) -> GameSummary:
        """The served game's outcome, final board and moves (from the result `cleanup` keeps in the state)."""
        res = trajectory.info.get("result") or {}
        status = res.get("status", "in_progress")
        return {"outcome": "unfinished" if status == "in_progress" else status,
                "board": res.get("board", ""), "moves": list(res.get("moves", [])),
                "agent_started": bool(res.get("x_starts", trajectory.task.get("x_starts", True)))}

    def serve_tools(self, agent: Any) -> dict[str, Any]:
        """Tools for `toolgym serve`: let any MCP client play against (or get advice from) the agent."""
        from mcp_server_tictactoe import game as g

        async def suggest_move(board: str, agent_plays: Literal["X", "O"] = "X") -> SuggestedMove:
            """Ask the agent for its move on a board; returns the move, the board after it and the game status.

            Args:
                board: The position, 9 cells row by row: X, O, or '.' for empty (e.g. "X...O...." or "X..|.O.|...").
                agent_plays: The side the agent plays; it must be that side's turn.
            """
            agent.check_text(board, "board")
            cells = client_position(board, agent_plays)  # errors in the client's own colours
            cells = x_view(cells, agent_plays)  # the agent always plays X on the server
            seed = int(cells.translate(str.maketrans(".XO", "012")), 3)  # stable per position
            # as in a game: a move the server rejects is answered with its error and the agent moves again, up to
            # suggest_turns turns; the first legal move is the suggestion
            traj = await agent.run({"seed": seed, "board": cells, "one_move": True}, max_turns=self.suggest_turns)
            reasoning = traj.turns[-1]["reasoning"] if traj.turns else None
            tries = [c for c in traj.calls if c.name == "make_move"]
            move = next((c for c in tries if c.exec_ok), None)
            if move is None:
                why = tries[-1].result if tries else "the agent made no move"
                return {"position": None, "valid": False, "board_after": None, "status": None, "error": why,
                        "reasoning": reasoning, "attempts": len(tries)}
            pos = int((move.arguments or {})["position"])
            after = g.play(cells, pos, "X")
            status = {"X": "agent_won"}.get(g.winner(after) or "", "draw" if g.EMPTY not in after else "in_progress")
            return {"position": pos, "valid": True, "board_after": x_view(after, agent_plays), "status": status,
                    "error": None, "reasoning": reasoning, "attempts": tries.index(move) + 1}

        return {"suggest_move": suggest_move}


def _game_start(board: str) -> str | None:
    """How a game shows `board` (X to move) when the board alone tells its history -- the empty board (X moves
    first) or one O and no X (the opponent moved first) -- so a served request on it reads as the game's first turn;
    None for any other board, whose history a lone board does not tell."""
    if board.count(".") == 9:
        return "New game. You move first."
    if board.count("O") == 1 and "X" not in board:
        return "New game. The opponent moved first."
    return None


class GameSummary(TypedDict):
    """What a served game (`run_agent`) reports beside the generic fields."""

    outcome: Annotated[Literal["win", "draw", "loss", "unfinished"], Field(
        description="The game's result for the agent: win, draw, loss, or unfinished (the turn cap came first).")]
    board: Annotated[str, Field(description="The final board, 9 cells row by row: X the agent, O the opponent, "
                                            "'.' empty.")]
    moves: Annotated[list[str], Field(description="The moves in order, side then cell, e.g. ['O4', 'X0', 'O8'].")]
    agent_started: Annotated[bool, Field(description="Whether the agent (X) moved first.")]


class SuggestedMove(TypedDict):
    """`suggest_move`'s answer."""

    position: Annotated[int | None, Field(description="The cell the agent plays, 0-8 row by row (null: it made no "
                                                      "valid move).")]
    valid: Annotated[bool, Field(description="Whether the agent's move was legal.")]
    board_after: Annotated[str | None, Field(description="The board after the move, in the client's colours.")]
    status: Annotated[Literal["agent_won", "draw", "in_progress"] | None, Field(
        description="The game after the move: agent_won, draw or in_progress.")]
    error: Annotated[str | None, Field(description="Why the move was not valid (null when it was).")]
    reasoning: Annotated[str | None, Field(description="The agent's thinking before the move.")]
    attempts: Annotated[int, Field(description="The agent's make_move calls: 1 when its first move was legal; after "
                                               "a rejected one it sees the error and moves again, at most "
                                               "suggest_turns turns (3 by default).")]


MAX_BOARD_CHARS = 200


def client_position(board: str, side: str = "X") -> str:
    """A position given by a client, checked with `side` to move: 9 cells (X, O, or '.'/'-'/'_'/space/digit for
    empty; separators '|', '/', ',', '+', newlines ignored) as a 9-character board with '.' for empty cells. Errors
    (`ToolError`) speak of the client's colours and of what it sent (its length, its cell count)."""
    from mcp.server.mcpserver.exceptions import ToolError
    from mcp_server_tictactoe import game as g

    if len(board) > MAX_BOARD_CHARS:
        raise ToolError(f"board too long: {len(board)} characters (a board is 9 cells, at most {MAX_BOARD_CHARS} "
                        "characters with separators)")
    cells = [c for c in board.upper() if c not in "|/\n\r\t,+"]
    if len(cells) != 9:
        raise ToolError(f"a board has 9 cells (X, O or . for empty), got {len(cells)}: {board[:60]!r}")
    bad = sorted({c for c in cells if c not in "XO.-_ 012345678"})
    if bad:
        raise ToolError(f"invalid cell characters {bad}: use X, O or . for empty")
    out = "".join(c if c in "XO" else g.EMPTY for c in cells)
    other = "O" if side == "X" else "X"
    mine, theirs = out.count(side), out.count(other)
    if not (mine == theirs or theirs == mine + 1):
        raise ToolError(f"not a position with {side} to move: {mine} {side} and {theirs} {other}")
    if g.is_over(out):
        raise ToolError("the game on that board is already over")
    return out


def x_view(board: str, agent_plays: str = "X") -> str:
    """The board as the server (and the model, who is always X there) sees it: colours swapped when the agent
    plays O."""
    return P.swap_colours(board) if agent_plays == "O" else board


def _server_for(transport: str) -> ServerSpec:
    if transport == "stdio":
        return ServerSpec.stdio(["mcp-server-tictactoe"])
    if transport == "inprocess":
        from mcp_server_tictactoe import build_server

        return ServerSpec.inprocess(build_server())
    if transport == "http":
        from toolgym.sandbox import free_port

        port = free_port()
        return ServerSpec.http(f"http://127.0.0.1:{port}/mcp",
                               launch=["mcp-server-tictactoe", "--transport", "streamable-http", "--port", str(port)])
    raise ValueError(f"unknown transport {transport!r}: use stdio, http or inprocess")


# ---------------------------------------------------------------- reward functions
async def _result(env: TicTacToeEnv, state: dict[str, Any]) -> dict[str, Any]:
    if "result" not in state:
        state["result"] = (await env.call("game_result", game_id=state["game_id"])).json()
    return state["result"]


async def outcome(env, state) -> float:  # type: ignore[no-untyped-def]
    """Win 1 / draw 0.5 / loss 0; a game still running when the turn cap hit counts as a loss."""
    status = (await _result(env, state))["status"]
    return {"win": env.win_reward, "draw": env.draw_reward}.get(status, 0.0)


async def win(env, state) -> float:  # type: ignore[no-untyped-def]
    return float((await _result(env, state))["status"] == "win")


async def draw(env, state) -> float:  # type: ignore[no-untyped-def]
    return float((await _result(env, state))["status"] == "draw")


async def loss(env, state) -> float:  # type: ignore[no-untyped-def]
    return float((await _result(env, state))["status"] in ("loss", "in_progress"))


async def moves(env, state) -> float:  # type: ignore[no-untyped-def]
    return float(sum(1 for m in (await _result(env, state))["moves"] if m.startswith("X")))


async def heldout_visits(env, state) -> float:  # type: ignore[no-untyped-def]
    """X-to-move positions of the held-out split this game passed through (`positions.heldout_visits`)."""
    return float(P.heldout_visits(state["start"], (await _result(env, state))["moves"]))


# ---------------------------------------------------------------- one-move tasks (task="move")
def _first_move(task: dict[str, Any], calls: list[Any]) -> tuple[Any, int | None]:
    """(the position's analysis on the board as posed, the cell of the agent's first call when it was a legal
    move, else None). Graded on the posed board for the agent's own side, so an O task checks the colour swap."""
    side = task.get("agent_plays", "X")
    pos = P.analyze(task["board"], side)
    first = calls[0] if calls else None
    if first is None or first.name != "make_move" or not first.exec_ok:
        return pos, None
    return pos, int((first.arguments or {})["position"])


def optimal(task, calls) -> float:  # type: ignore[no-untyped-def]
    """1 when the agent's first call is a legal move that keeps the position's game value (any optimal move)."""
    pos, cell = _first_move(task, calls)
    return float(cell in pos.optimal)


def legal(task, calls) -> float:  # type: ignore[no-untyped-def]
    """The agent's first call was make_move on a free cell."""
    return float(_first_move(task, calls)[1] is not None)


def fastest(task, calls) -> float:  # type: ignore[no-untyped-def]
    """The move is in the depth-aware minimax set (fastest win, slowest loss): stricter than `optimal`."""
    pos, cell = _first_move(task, calls)
    return float(cell in pos.fastest)


def win_taken(task, calls) -> float | None:  # type: ignore[no-untyped-def]
    """On positions with an immediate win: the move wins at once (None elsewhere)."""
    pos, cell = _first_move(task, calls)
    return float(cell in pos.wins) if pos.kind == "win" else None


def blocked(task, calls) -> float | None:  # type: ignore[no-untyped-def]
    """On positions with a threat and no win: the move takes a threatened cell (None elsewhere)."""
    pos, cell = _first_move(task, calls)
    return float(cell in pos.threats) if pos.kind == "block" else None


def invalid_moves(calls, turns) -> float:  # type: ignore[no-untyped-def]
    """Calls that did not make a legal move (bad syntax, unknown tool, bad arguments, occupied/out-of-range cell)
    plus turns whose tool-call markup could not be parsed."""
    return float(sum(1 for c in calls if not c.exec_ok) + sum(1 for t in turns if not t.parse_ok and not t.tool_calls))


def invalid_move_penalty(env, calls, turns) -> float:  # type: ignore[no-untyped-def]
    return -env.invalid_penalty if invalid_moves(calls, turns) > 0 else 0.0


def format_ok(env, turns) -> float:  # type: ignore[no-untyped-def]
    """Share of assistant turns with a think block (if required) and exactly one parsable call."""
    if not turns:
        return 0.0
    good = 0
    for t in turns:
        think = bool(t.reasoning) or not env.require_think
        good += int(think and t.parse_ok and len(t.tool_calls) == 1 and t.tool_calls[0].parse_ok)
    return good / len(turns)


# ---------------------------------------------------------------- scripted players
MISTAKES = ("any", "quiet")
"""Where `scripted:imperfect` may play a random cell: on any position, or only where no move is forced ("quiet":
it always takes an immediate win, else blocks, and plays a uniformly random free cell elsewhere)."""


FREE_ORDERS = ("board", "shuffled")
"""The order of the free-cell list of `free_list`: the board's (lowest cell first) or a fresh random one each move."""


def _minimax_player(  # type: ignore[no-untyped-def]
    mistake_prob: float, seed: int | None = None, tie_break: str = "preference", think: str = "scan",
    mistakes: str = "any", invalid_prob: float = 0.0, invalid_last_prob: float | None = None, free_list: bool = False,
    free_order: str = "board",
):
    """Reads the board from the latest tool/user message and plays via `make_move`. With `mistake_prob` it plays a
    random free cell instead of a best one (1.0 = the random player, 0.0 = the minimax expert). `tie_break` picks
    among equally good quiet moves: "preference" (centre, corners, edges: one fixed answer per position) or "random"
    (uniform over all minimax-best moves, so a model trained on its games keeps every good move in play for RL) or
    "exploit" (the minimax-best move that wins most often against a random opponent, `safe_value`).
    `mistakes="quiet"` keeps the random cells to positions without a forced move (`forced_move` is None): at
    mistake_prob 1.0 a player that takes every win and blocks every threat and was never shown a strategic move.
    `invalid_prob`: the probability of first calling an occupied cell on a move (where one is occupied), then, after
    the error, the move it would have played: teacher games that show a recovery (`toolgym synth --failed-turns
    context` keeps the invalid turn out of the loss). `invalid_last_prob` (default `invalid_prob`): that probability
    on a board with one free cell, where games are rare but a player that misreads the board loses a draw.
    `free_list`: a random cell's think text lists the free cells first (`unreasoned_think`), in the board's order or, with
    `free_order="shuffled"`, a random one drawn per move (so no place in the list goes with any cell)."""
    for name, prob in (("invalid_prob", invalid_prob), ("invalid_last_prob", invalid_last_prob)):
        if prob is not None and not 0.0 <= prob <= 1.0:
            raise ValueError(f"{name} must be in [0, 1], not {prob}")
    if mistakes not in MISTAKES:
        raise ValueError(f"mistakes must be one of {MISTAKES}, not {mistakes!r}")
    if tie_break not in ("preference", "random", "exploit"):
        raise ValueError(f"tie_break must be 'preference', 'random' or 'exploit', not {tie_break!r}")
    if think not in THINK_FORMATS:
        raise ValueError(f"think must be one of {THINK_FORMATS}, not {think!r}")
    if free_order not in FREE_ORDERS:
        raise ValueError(f"free_order must be one of {FREE_ORDERS}, not {free_order!r}")
    if free_order != "board" and not free_list:
        raise ValueError("free_order needs free_list=true (it orders that list)")
    from mcp_server_tictactoe import game as g

    def act(messages: list[dict[str, Any]], memory: dict[str, Any]) -> AssistantTurn:
        rng = rollout_rng(memory, f"{seed}")
        board = board_from_messages(messages)
        if board is None:
            return AssistantTurn(content="", reasoning="I need to see the board.", tool_calls=[call("get_board")])
        free = g.free_cells(board)
        if not free:
            return AssistantTurn(content="The game is over.", reasoning="No free cells.")
        taken = [i for i in range(9) if i not in free]
        order = rng.sample(free, len(free)) if free_order == "shuffled" else None
        retrying = bool(messages) and messages[-1].get("role") == "tool" and parse_board(messages[-1]["content"]) is None
        p_invalid = invalid_last_prob if len(free) == 1 and invalid_last_prob is not None else invalid_prob
        if p_invalid > 0 and taken and not retrying and rng.random() < p_invalid:
            cell = rng.choice(taken)  # an occupied cell: the error the next turn recovers from
            return AssistantTurn(content="", reasoning=unreasoned_think(board, think, cell, free_list, order),
                                 tool_calls=[call("make_move", position=cell)])
        if (mistakes == "any" or forced_move(board) is None) and rng.random() < mistake_prob:
            cell = rng.choice(free)
            why = unreasoned_think(board, think, cell, free_list, order)
        else:
            cell, why = explain_best_move(board, tie_break, rng, think)
        return AssistantTurn(content="", reasoning=why, tool_calls=[call("make_move", position=cell)])

    return act


def minimax_player(env: Any, /, seed: int | None = None, tie_break: str = "preference",
                   think: str = "scan") -> ScriptedPolicy:
    """`scripted:minimax`: the minimax expert.

    Args:
        seed: Seeds its choices among equally good moves (tie_break="random").
        tie_break: Among equally good quiet moves: "preference", "random" or "exploit".
        think: The think block it writes: "scan", "forks", "track", "slots" or "none".
    """
    return ScriptedPolicy(_minimax_player(0.0, seed, tie_break, think), "scripted:minimax")


def random_player(env: Any, /, seed: int | None = None) -> ScriptedPolicy:
    """`scripted:random`: reads the board and plays a random free cell.

    Args:
        seed: Seeds its moves.
    """
    return ScriptedPolicy(_minimax_player(1.0, seed), "scripted:random")


def imperfect_player(env: Any, /, mistake_prob: float = 0.2, seed: int | None = None, tie_break: str = "preference",
                     think: str = "scan", mistakes: str = "any", invalid_prob: float = 0.0,
                     invalid_last_prob: float | None = None, free_list: bool = False,
                     free_order: str = "board") -> ScriptedPolicy:
    """`scripted:imperfect`: the minimax expert that plays a random free cell with probability `mistake_prob`.

    Args:
        mistake_prob: Probability of a random free cell instead of a best move.
        seed: Seeds its mistakes and its choices among equally good moves.
        tie_break: Among equally good quiet moves: "preference", "random" or "exploit".
        think: The think block it writes: "scan", "forks", "track", "slots" or "none".
        mistakes: Where random cells may be played: "any" position, or only "quiet" ones (no win to take, no
            threat to block; forced moves are always right).
        invalid_prob: Probability of calling an occupied cell first on a move, then the real move after the error
            (recovery data; pair with `toolgym synth --failed-turns context`).
        invalid_last_prob: The same on a board with one free cell (default: invalid_prob).
        free_list: Whether a random cell's think text first lists the free cells ("I'll play somewhere free: 2 7.").
        free_order: The order of that list: "board" (lowest cell first) or "shuffled" (a random order per move).
    """
    last = None if invalid_last_prob is None else float(invalid_last_prob)
    return ScriptedPolicy(_minimax_player(float(mistake_prob), seed, tie_break, think, mistakes, float(invalid_prob),
                                          last, bool(free_list), str(free_order)), "scripted:imperfect")


def load_environment(**kwargs: Any) -> TicTacToeEnv:
    return TicTacToeEnv(**kwargs)
