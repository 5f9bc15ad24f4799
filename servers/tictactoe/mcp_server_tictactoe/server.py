"""The tic-tac-toe MCP server.

Player tools: `get_board(game_id)`, `make_move(game_id, position)`. Setup and grading tools: `new_game(seed, ...)`,
`game_result(game_id)`, `end_game(game_id)`. Any MCP client can play; an RL environment typically hides the setup
and grading tools and the `game_id` argument from the model and injects them itself.

Errors are raised as `ToolError`, so the client gets the message as an error result (`is_error`).
Tools are `async def` on purpose: they are CPU-trivial, and MCPServer runs sync tools in a worker thread
(a thread hand-off per call that costs more than the game logic).
Games live in one table keyed by an unguessable id, so many clients (or rollouts) can share one server process
without seeing each other's games. The table is bounded: at most `max_games` games, and `max_client_games` per client
(the MCP transport session that started them; clients without one share a quota). Room for a new game comes from the
least recently used game *not in use* (no call within `idle_s`; the client's own first when it is at its quota); when
every candidate is in use the new game is refused. Only the client that started a game may end it.
"""

from __future__ import annotations

import inspect
import random
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, TypeVar

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field

from mcp_server_tictactoe import game as g

MAX_GAMES = 100_000
IDLE_S = 300.0  # a game with a call this recent is in use: never evicted for room
F = TypeVar("F", bound=Callable[..., Any])

# Tool parameters: types plus the description every MCP client shows (schemas are derived from these signatures).
GameId = Annotated[str, Field(description="The game's id, as new_game returned it.")]
Position = Annotated[int, Field(description="The cell to play, 0 (top left) to 8 (bottom right).")]
Seed = Annotated[int, Field(description="Seeds who starts (when x_starts is not given) and the opponent's choices.")]
XStarts = Annotated[bool | None, Field(description="Whether X (the player) moves first; default: a 50/50 draw from "
                                                   "the seed.")]
RandomMoveProb = Annotated[float, Field(description="Probability (0 to 1) that the opponent plays a random free cell "
                                                    "instead of a best move.")]
Style = Annotated[Literal["uniform", "trappy"], Field(description="How the opponent picks among equally good moves: "
                                                  "uniformly, or (trappy) preferring moves after which you have no win "
                                                  "to take and no threat to block but a move that loses.")]
StartBoard = Annotated[str | None, Field(description="Start from this position instead: 9 cells row by row, X, O or "
                                                     "'.' for empty, X to move.")]
OpponentChoices = Annotated[list[Annotated[int, Field(ge=0)]] | None, Field(
    description="Script the opponent's choices instead of drawing them from the seed: its n-th reply plays the "
                "choices[n]-th (from 0, in cell order) of its equally good moves at random_move_prob 0, or of the free "
                "cells at random_move_prob 1; the first of them past the end of the list. With a player that always "
                "answers a board the same way, one game per list walks every line of play, each weighted by its "
                "chance: an exact evaluation instead of a sample.")]


def _tool(srv: MCPServer) -> Callable[[F], F]:
    """`@srv.tool()` with the docstring as the description, its paragraphs unwrapped (MCPServer takes `__doc__`
    as is, indentation and line breaks included)."""
    def register(fn: F) -> F:
        paragraphs = inspect.cleandoc(fn.__doc__ or "").split("\n\n")
        return srv.tool(description="\n\n".join(" ".join(p.split()) for p in paragraphs))(fn)
    return register


@dataclass
class Game:
    seed: int
    random_move_prob: float
    x_starts: bool
    board: str = g.EMPTY * 9
    style: str = "uniform"
    moves: list[tuple[str, int]] = field(default_factory=list)
    invalid_moves: int = 0
    client: Hashable | None = None  # who started it (`client_key`)
    last_used: float = 0.0
    choices: list[int] | None = None  # scripted ties (`opponent_choices`), else the seed draws them
    replies: int = 0  # opponent replies so far


    @property
    def status(self) -> str:
        return g.status(self.board)

    def opponent_reply(self) -> int:
        """Play the opponent's move; a scripted tie index past its choices is a ToolError, with nothing changed."""
        if self.choices is None:
            cell = g.opponent_move(self.board, self.seed, self.random_move_prob, "O", self.style)
        else:
            random_reply = self.random_move_prob == 1.0
            options = (g.free_cells(self.board) if random_reply
                       else sorted(g.minimax_choices(self.board, "O", self.style)))
            k = self.choices[self.replies] if self.replies < len(self.choices) else 0
            if k >= len(options):
                what = "free cells" if random_reply else "equally good moves"
                raise ToolError(f"opponent_choices[{self.replies}] is {k}, but the opponent has {len(options)} {what} "
                                f"here ({', '.join(map(str, options))})")
            cell = options[k]
        self.replies += 1
        self.board = g.play(self.board, cell, "O")
        self.moves.append(("O", cell))
        return cell

    def describe(self) -> str:
        return g.describe(self.board)


def parse_position(board: str) -> str:
    """Validate a position given as 9 cells (X, O, or '.'/'-'/'_'/space/digit for empty; separators '|', '/',
    newlines ignored) with X to move. Returns the 9-character board with '.' for empty cells."""
    if len(board) > 200:
        raise ToolError(f"board too long: {len(board)} characters (a board is 9 cells, at most 200 characters with "
                        "separators)")
    cells = [c for c in board.upper() if c not in "|/\n\r\t,+"]
    if len(cells) != 9:
        raise ToolError(f"a board has 9 cells (X, O or . for empty), got {len(cells)}: {board[:60]!r}")
    out = "".join(c if c in "XO" else g.EMPTY for c in cells)
    bad = [c for c in cells if c not in "XO.-_ 012345678"]
    if bad:
        raise ToolError(f"invalid cell characters {sorted(set(bad))}: use X, O or . for empty")
    x, o = out.count("X"), out.count("O")
    if not (x == o or o == x + 1):
        raise ToolError(f"not a position with X to move: {x} X and {o} O")
    if g.is_over(out):
        raise ToolError("the game on that board is already over")
    return out


def client_key(ctx: Context | None) -> Hashable | None:
    """Who is calling: the MCP transport session (an HTTP session id, or the connection on the handshake-era
    protocol), or None when the transport has none (the 2026 protocol is sessionless; such clients share a quota)."""
    session = getattr(ctx, "session", None) if ctx is not None else None
    conn = getattr(session, "_connection", None)
    if conn is None:
        return None
    if getattr(conn, "session_id", None):
        return ("http-session", conn.session_id)
    if str(getattr(conn, "protocol_version", "")) < "2026":
        return ("connection", id(conn))
    return None


class GameTable:
    """All games of one server process (see the module docstring for the quotas)."""

    def __init__(self, max_games: int = MAX_GAMES, max_client_games: int | None = None, idle_s: float = IDLE_S) -> None:
        self.games: OrderedDict[str, Game] = OrderedDict()  # least recently used first
        self.max_games = max_games
        self.max_client_games = max_client_games or max(1, max_games // 2)
        self.idle_s = idle_s
        self.evicted = 0

    def _make_room(self, client: Hashable | None) -> None:
        now = time.monotonic()

        def idle(game: Game) -> bool:
            return now - game.last_used >= self.idle_s

        mine = sum(1 for gm in self.games.values() if gm.client == client)
        if mine >= self.max_client_games:
            victim = next((k for k, gm in self.games.items() if gm.client == client and idle(gm)), None)
            if victim is None:
                raise ToolError(f"this client has {mine} games in play, the most one client may hold "
                                f"({self.max_client_games}); end one with end_game")
            del self.games[victim]
            self.evicted += 1
        while len(self.games) >= self.max_games:
            victim = next((k for k, gm in self.games.items() if idle(gm)), None)
            if victim is None:
                raise ToolError(f"the server holds its most games ({self.max_games}) and every one is in use "
                                f"(a call within {self.idle_s:g} s); try again later")
            del self.games[victim]
            self.evicted += 1

    def new(self, seed: int, x_starts: bool | None, random_move_prob: float, board: str | None = None,
            client: Hashable | None = None, style: str = "uniform", choices: list[int] | None = None
            ) -> tuple[str, Game]:
        if not 0.0 <= random_move_prob <= 1.0:
            raise ToolError(f"random_move_prob must be in [0, 1], got {random_move_prob}")
        if choices is not None and (random_move_prob not in (0.0, 1.0) or any(
                isinstance(k, bool) or not isinstance(k, int) or k < 0 for k in choices)):
            raise ToolError("opponent_choices scripts the choices of a perfect (random_move_prob 0) or a random "
                            "(random_move_prob 1) opponent, as indices >= 0")
        if style not in g.STYLES:
            raise ToolError(f"style must be one of {', '.join(g.STYLES)}, got {style!r}")
        if board is not None:
            board = parse_position(board)
            x_starts = board.count("O") == board.count("X")
            game = Game(seed=seed, random_move_prob=random_move_prob, x_starts=x_starts, board=board, style=style,
                        choices=choices)
        else:
            if x_starts is None:
                x_starts = random.Random(f"tictactoe-start:{seed}").random() < 0.5
            game = Game(seed=seed, random_move_prob=random_move_prob, x_starts=x_starts, style=style,
                        choices=choices)
            if not x_starts:
                game.opponent_reply()
        self._make_room(client)
        game.client, game.last_used = client, time.monotonic()
        game_id = secrets.token_hex(8)
        self.games[game_id] = game
        return game_id, game

    def get(self, game_id: str) -> Game:
        game = self.games.get(game_id)
        if game is None:
            raise ToolError(f"unknown game_id {game_id!r}: start a game with new_game first")
        game.last_used = time.monotonic()
        self.games.move_to_end(game_id)
        return game

    def end(self, game_id: str, client: Hashable | None = None) -> None:
        game = self.games.get(game_id)
        if game is None:
            return
        if game.client != client:
            raise ToolError("this game was started by another client; only that client may end it")
        del self.games[game_id]


def build_server(max_games: int = MAX_GAMES, max_client_games: int | None = None, idle_s: float = IDLE_S
                 ) -> MCPServer:
    """Build a server instance with its own game table (usable in-process or run over any transport)."""
    srv = MCPServer("tictactoe", instructions="Play tic-tac-toe as X. Cells are numbered 0-8, row by row.",
                    log_level="WARNING")  # per-request INFO lines through rich cost ~30 % of a call's CPU
    table = GameTable(max_games, max_client_games, idle_s)

    @_tool(srv)
    async def new_game(seed: Seed, ctx: Context, x_starts: XStarts = None, random_move_prob: RandomMoveProb = 0.0,
                       board: StartBoard = None, style: Style = "uniform",
                       opponent_choices: OpponentChoices = None) -> dict[str, Any]:
        """Start a game. The opponent (O) plays minimax, or a random cell with probability random_move_prob.
        Returns the game id, who starts and the board."""
        game_id, game = table.new(seed, x_starts, random_move_prob, board, client_key(ctx), style,
                                  None if opponent_choices is None else list(opponent_choices))
        return {"game_id": game_id, "x_starts": game.x_starts, "board": game.describe()}

    @_tool(srv)
    async def get_board(game_id: GameId) -> str:
        """Show the current board, whose move it is and the free cells."""
        return table.get(game_id).describe()

    @_tool(srv)
    async def make_move(game_id: GameId, position: Position) -> str:
        """Place your X on a free cell (0-8, row by row); the opponent replies at once."""
        game = table.get(game_id)
        if game.status != "in_progress":
            game.invalid_moves += 1
            raise ToolError(f"the game is over ({game.status}); no more moves")
        if isinstance(position, bool) or not isinstance(position, int) or not 0 <= position <= 8:
            game.invalid_moves += 1
            raise ToolError(f"invalid position {position!r}: choose a free cell from 0 to 8")
        if game.board[position] != g.EMPTY:
            game.invalid_moves += 1
            free = ", ".join(str(c) for c in g.free_cells(game.board))
            raise ToolError(f"cell {position} is already taken; free cells: {free}")
        before = game.board
        game.board = g.play(game.board, position, "X")
        game.moves.append(("X", position))
        text = f"You played {position}."
        if game.status == "in_progress":
            try:
                text += f" Opponent played {game.opponent_reply()}."
            except ToolError:  # a scripted tie past the opponent's choices: the move is not played
                game.board = before
                game.moves.pop()
                raise
        return f"{text}\n{game.describe()}"

    @_tool(srv)
    async def game_result(game_id: GameId) -> dict[str, Any]:
        """Grading view of a game: status (in_progress, win, draw, loss), moves and invalid-move count."""
        game = table.get(game_id)
        return {
            "status": game.status,
            "board": game.board,
            "x_starts": game.x_starts,
            "moves": [f"{side}{cell}" for side, cell in game.moves],
            "invalid_moves": game.invalid_moves,
            "random_move_prob": game.random_move_prob,
            "style": game.style,
        }

    @_tool(srv)
    async def end_game(game_id: GameId, ctx: Context) -> str:
        """Forget a game and free its memory."""
        table.end(game_id, client_key(ctx))
        return "ok"

    srv.games = table  # type: ignore[attr-defined]  # for tests and in-process inspection
    return srv
