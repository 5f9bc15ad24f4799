"""Tic-tac-toe through tool calls: the model is X and plays with `make_move(position)` against a minimax opponent
whose strength is set per game by a random-move probability (GUIDE §6).

Dataset: `n` games; example i has seed `seed * 1_000_003 + i`, a 50/50 starting side drawn from that seed, and a
random-move probability drawn uniformly inside bucket `i % num_groups` of `[min_random_move_prob,
max_random_move_prob]`, so every batch spans the difficulty range.
Rewards (weights configurable): outcome win 1 / draw 0.5 / loss 0 (a game still running at the turn cap is a loss),
format (share of turns with a `<think>` block and exactly one well-formed call; weight 0.2), invalid-move penalty
(-0.1 flat if any call was invalid: unparsable, unknown tool, bad arguments, occupied or out-of-range cell).
Metrics: win, draw, loss, invalid_moves, moves.
"""

from __future__ import annotations

import functools
import importlib.util
import random
import re
from pathlib import Path
from typing import Any

from toolgym import AssistantTurn, Rubric, ScriptedPolicy, ServerSpec, StatefulToolEnv, stop
from toolgym.policies.scripted import call

SYSTEM_PROMPT = (
    "You are playing tic-tac-toe as X against an opponent playing O. Cells are numbered 0-8, row by row:\n"
    " 0 | 1 | 2\n 3 | 4 | 5\n 6 | 7 | 8\n"
    "On each turn, think briefly inside <think></think>, then call make_move with the cell you choose. "
    "Three in a row wins."
)

CHECKPOINT = Path(__file__).with_name("checkpoint")
"""The committed tiny tic-tac-toe model (`examples/tictactoe/`, safetensors + tokenizer), shipped as package data."""


def embedded_default_policy() -> str:
    """`hf:<CHECKPOINT>` when the checkpoint and torch + transformers are installed, else the scripted minimax
    expert (a torch-free install still gets a working `toolgym eval tictactoe`)."""
    have = all(importlib.util.find_spec(m) is not None for m in ("torch", "transformers"))
    if have and (CHECKPOINT / "model.safetensors").is_file():
        return f"hf:{CHECKPOINT}"
    return "scripted:minimax"


_CELL = re.compile(r"^\s*(\S)\s*\|\s*(\S)\s*\|\s*(\S)\s*$")


def parse_board(text: str) -> str | None:
    """The last board in a text rendered by the server ('X', 'O', digits for free cells) as a 9-char string."""
    rows: list[str] = []
    found: str | None = None
    for line in text.splitlines():
        m = _CELL.match(line)
        if m:
            rows.append("".join(c if c in "XO" else "." for c in m.groups()))
            if len(rows) == 3:
                found, rows = "".join(rows), []
        elif not line.startswith("---"):
            rows = []
    return found


def board_from_messages(messages: list[dict[str, Any]]) -> str | None:
    for m in reversed(messages):
        if m.get("role") in ("tool", "user") and isinstance(m.get("content"), str):
            b = parse_board(m["content"])
            if b is not None:
                return b
    return None


class TicTacToeEnv(StatefulToolEnv):
    name = "tictactoe"
    server = ServerSpec.stdio(["mcp-server-tictactoe"])
    session_scope = "shared"
    hidden_tools = {"new_game", "game_result", "end_game"}
    hidden_args = {"make_move": ["game_id"], "get_board": ["game_id"]}
    system_prompt = SYSTEM_PROMPT
    default_policy = embedded_default_policy()
    # greedy, like the recipe's evals
    default_policy_options = {"temperature": 0.0, "max_tokens": 144} if default_policy.startswith("hf:") else {}
    max_turns = 8
    on_no_call = "nudge"
    nudge_message = "You must make your move by calling make_move with a free cell."

    def __init__(
        self,
        min_random_move_prob: float = 0.0,
        max_random_move_prob: float = 0.0,
        num_groups: int = 1,
        win_reward: float = 1.0,
        draw_reward: float = 0.5,
        format_weight: float = 0.2,
        invalid_penalty: float = 0.1,
        require_think: bool = True,
        transport: str = "stdio",
        **options: Any,
    ) -> None:
        if not 0.0 <= min_random_move_prob <= max_random_move_prob <= 1.0:
            raise ValueError("need 0 <= min_random_move_prob <= max_random_move_prob <= 1")
        if num_groups < 1:
            raise ValueError("num_groups must be >= 1")
        self.min_p, self.max_p, self.num_groups = min_random_move_prob, max_random_move_prob, num_groups
        self.win_reward, self.draw_reward = win_reward, draw_reward
        self.format_weight, self.invalid_penalty, self.require_think = format_weight, invalid_penalty, require_think
        server = options.pop("server", None) or _server_for(transport)
        super().__init__(server=server, **options)

    # ------------------------------------------------------------ data
    def build_dataset(self, n: int | None = None, seed: int = 0) -> list[dict[str, Any]]:
        n = 100 if n is None else n
        rows = []
        width = (self.max_p - self.min_p) / self.num_groups
        for i in range(n):
            ex_seed = seed * 1_000_003 + i
            rng = random.Random(f"tictactoe-example:{ex_seed}")
            group = i % self.num_groups
            lo = self.min_p + group * width
            rows.append({
                "seed": ex_seed,
                "x_starts": rng.random() < 0.5,
                "random_move_prob": round(lo + rng.random() * width, 4),
                "group": group,
            })
        return rows

    # ------------------------------------------------------------ hooks
    async def setup_state(self, state: dict[str, Any], task: dict[str, Any]) -> None:
        args = {"seed": task.get("seed", 0), "random_move_prob": task.get("random_move_prob", 0.0)}
        if task.get("board"):
            args["board"] = task["board"]
        else:
            args["x_starts"] = task.get("x_starts")
        res = (await self.call("new_game", **args)).json()
        state["game_id"], state["board_text"], state["over"] = res["game_id"], res["board"], False

    def initial_messages(self, task: dict[str, Any], state: dict[str, Any]) -> list[dict[str, Any]]:
        if task.get("board"):
            first = "A game in progress."
        else:
            first = "New game. " + ("You move first." if task.get("x_starts", True) else "The opponent moved first.")
        return [{"role": "system", "content": self.system_prompt},
                {"role": "user", "content": f"{first}\n{state['board_text']}"}]

    def update_tool_args(self, tool: str, args: dict[str, Any], state: dict[str, Any]) -> dict[str, Any]:
        return {**args, "game_id": state["game_id"]}

    async def env_response(self, state, turn, records):  # type: ignore[no-untyped-def]
        if any(r.name == "make_move" and r.exec_ok and "Game over" in r.result for r in records):
            state["over"] = True
        return None

    @stop
    def game_over(self, state: dict[str, Any]) -> bool:
        return bool(state.get("over"))

    async def cleanup(self, state: dict[str, Any]) -> None:
        if "game_id" in state:
            await self.call("end_game", game_id=state["game_id"])

    # ------------------------------------------------------------ rewards
    def build_rubric(self) -> Rubric:
        return Rubric([
            (outcome, 1.0),
            (format_ok, self.format_weight),
            (invalid_move_penalty, 1.0),
            (win, 0.0), (draw, 0.0), (loss, 0.0), (invalid_moves, 0.0), (moves, 0.0),
        ])

    def scripted_players(self) -> dict[str, Any]:
        return {
            "minimax": lambda env, **o: ScriptedPolicy(
                _minimax_player(0.0, o.get("seed"), o.get("tie_break", "preference")), "scripted:minimax"
            ),
            "random": lambda env, **o: ScriptedPolicy(_minimax_player(1.0, o.get("seed")), "scripted:random"),
            "imperfect": lambda env, **o: ScriptedPolicy(
                _minimax_player(float(o.get("mistake_prob", 0.2)), o.get("seed"), o.get("tie_break", "preference")),
                "scripted:imperfect",
            ),
        }


    def serve_tools(self, agent: Any) -> dict[str, Any]:
        """Tools for `toolgym serve`: let any MCP client play against (or get advice from) the agent."""
        from mcp.server.mcpserver.exceptions import ToolError
        from mcp_server_tictactoe import game as g
        from mcp_server_tictactoe.server import parse_position

        async def suggest_move(board: str, agent_plays: str = "X") -> dict[str, Any]:
            """Ask the agent for its move on a board; returns the move, the board after it and the game status.

            Args:
                board: The position, 9 cells row by row: X, O, or '.' for empty (e.g. "X.O.X...." or "X|.|O/...").
                agent_plays: The side the agent plays; it must be that side's turn (choices: ["X", "O"]).
            """
            agent.check_text(board, "board")
            side = agent_plays.strip().upper()
            if side not in ("X", "O"):
                raise ToolError("agent_plays must be 'X' or 'O'")
            cells = parse_position(board.translate(str.maketrans("XOxo", "OXox")) if side == "O" else board)
            seed = int(cells.translate(str.maketrans(".XO", "012")), 3)  # stable per position
            traj = await agent.run({"seed": seed, "board": cells}, max_turns=1)
            move = next((c for c in traj.calls if c.name == "make_move"), None)
            if move is None or not move.exec_ok:
                why = move.result if move is not None else "the agent made no move"
                return {"position": None, "valid": False, "error": why, "reasoning": traj.turns[0]["reasoning"]
                        if traj.turns else None}
            pos = int((move.arguments or {})["position"])
            after = g.play(cells, pos, "X")
            status = {"X": "agent_won"}.get(g.winner(after) or "", "draw" if g.EMPTY not in after else "in_progress")
            if side == "O":
                after = after.translate(str.maketrans("XO", "OX"))
            return {"position": pos, "valid": True, "board_after": after, "status": status,
                    "reasoning": traj.turns[0]["reasoning"] if traj.turns else None}

        return {"suggest_move": suggest_move}


def _server_for(transport: str) -> ServerSpec:
    if transport == "stdio":
        return ServerSpec.stdio(["mcp-server-tictactoe"])
    if transport == "inprocess":
        from mcp_server_tictactoe import build_server

        return ServerSpec.inprocess(build_server())
    if transport == "http":
        from toolgym.mcp_bridge import free_port

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
PREFERENCE = (4, 0, 2, 6, 8, 1, 3, 5, 7)  # centre, corners, edges: the tie-break among equally good moves


def completing_cells(board: str, side: str) -> list[int]:
    """Free cells that would complete a line of three for `side`."""
    from mcp_server_tictactoe import game as g

    return [c for c in g.free_cells(board) if g.winner(g.play(board, c, side)) == side]


def _threat(board: str, line: tuple[int, ...]) -> tuple[str, int] | None:
    """('win', cell) if X has two in `line` and its third cell is free, ('block', cell) for O, else None."""
    cells = [board[i] for i in line]
    if cells.count(".") == 1:
        free = line[cells.index(".")]
        for side, what in (("X", "win"), ("O", "block")):
            if cells.count(side) == 2:
                return what, free
    return None


def scan_lines(board: str) -> str:
    """The eight lines of three, one per text line: its cells, then their contents with free cells as their number,
    and a mark on a line one move from three (`048: X X 8 win 8`, `258: O 5 O block 5`); rows, columns, diagonals.
    The teacher writes this before its verdict, so a small model finds a threat one cell lookup at a time and one
    text line at a time instead of in one step over the whole board; the spaces keep every content its own token."""
    from mcp_server_tictactoe import game as g

    out = []
    for line in g.LINES:
        text = "".join(map(str, line)) + ": " + " ".join(board[i] if board[i] != g.EMPTY else str(i) for i in line)
        mark = _threat(board, line)
        out.append(text + (f" {mark[0]} {mark[1]}" if mark else ""))
    return "\n".join(out)


def forced_move(board: str) -> int | None:
    """The cell the teacher must play, if any: the first `win` line of the scan, else the first `block` line."""
    from mcp_server_tictactoe import game as g

    marks = [m for m in (_threat(board, line) for line in g.LINES) if m]
    for kind in ("win", "block"):
        for what, cell in marks:
            if what == kind:
                return cell
    return None


@functools.lru_cache(maxsize=None)
def safe_value(board: str, x_to_move: bool) -> float:
    """Expected reward (win 1, draw 0.5) for X against the random opponent when X takes an immediate win, else
    blocks, else plays the minimax-best move with the highest such value (`tie_break="exploit"`)."""
    from mcp_server_tictactoe import game as g

    if g.winner(board):
        return 1.0 if g.winner(board) == "X" else 0.0
    free = g.free_cells(board)
    if not free:
        return 0.5
    if not x_to_move:
        return sum(safe_value(g.play(board, c, "O"), True) for c in free) / len(free)
    forced = forced_move(board)
    moves = [forced] if forced is not None else g.best_moves(board, "X")
    return max(safe_value(g.play(board, c, "X"), False) for c in moves)


def explain_best_move(board: str, tie_break: str = "preference", rng: random.Random | None = None) -> tuple[int, str]:
    """A minimax-best move for X and a reason a small model can imitate token by token: the line scan
    (`scan_lines`), then the verdict: the first `win` line of the scan, else the first `block` line (`forced_move`),
    else a best move chosen by `tie_break` (see `_minimax_player`; "random" draws with `rng`). The teacher's think
    block is this text."""
    from mcp_server_tictactoe import game as g

    scan = scan_lines(board)
    cell = forced_move(board)
    if cell is not None:
        if cell in completing_cells(board, "X"):
            return cell, f"{scan}\nI win at {cell}. I play {cell}."
        return cell, f"{scan}\nO wins at {cell}; I block. I play {cell}."
    best = g.best_moves(board, "X")
    if tie_break == "exploit":  # the best move against a random opponent among those that never lose
        top = max(safe_value(g.play(board, c, "X"), False) for c in best)
        best = [c for c in best if safe_value(g.play(board, c, "X"), False) >= top - 1e-12]
    if tie_break == "random":
        cell = (rng or random.Random()).choice(best)
    else:  # preference, and ties among exploit's best moves
        cell = next(c for c in PREFERENCE if c in best)
    return cell, f"{scan}\nNo threats. I play {cell}."


def _minimax_player(  # type: ignore[no-untyped-def]
    mistake_prob: float, seed: int | None = None, tie_break: str = "preference"
):
    """Reads the board from the latest tool/user message and plays via `make_move`. With `mistake_prob` it plays a
    random free cell instead of a best one (1.0 = the random player, 0.0 = the minimax expert). `tie_break` picks
    among equally good quiet moves: "preference" (centre, corners, edges: one fixed answer per position) or "random"
    (uniform over all minimax-best moves, so a model trained on its games keeps every good move in play for RL) or
    "exploit" (the minimax-best move that wins most often against a random opponent, `safe_value`)."""
    if tie_break not in ("preference", "random", "exploit"):
        raise ValueError(f"tie_break must be 'preference', 'random' or 'exploit', not {tie_break!r}")
    from mcp_server_tictactoe import game as g

    def act(messages: list[dict[str, Any]], memory: dict[str, Any]) -> AssistantTurn:
        rng = memory.setdefault("rng", random.Random(f"{seed}:{memory.get('session_index', 0)}"))
        board = board_from_messages(messages)
        if board is None:
            return AssistantTurn(content="", reasoning="I need to see the board.", tool_calls=[call("get_board")])
        free = g.free_cells(board)
        if not free:
            return AssistantTurn(content="The game is over.", reasoning="No free cells.")
        if rng.random() < mistake_prob:
            cell = rng.choice(free)
            why = f"{scan_lines(board)}\nI'll play somewhere free. I play {cell}."
        else:
            cell, why = explain_best_move(board, tie_break, rng)
        return AssistantTurn(content="", reasoning=why, tool_calls=[call("make_move", position=cell)])

    return act


def load_environment(**kwargs: Any) -> TicTacToeEnv:
    return TicTacToeEnv(**kwargs)
