"""Sampling: `-m MODEL` keeps the env's sampling defaults (tic-tac-toe: greedy, 200 tokens) unless flags override
them, in `toolgym serve` as in `toolgym eval`; served answers and eval runs are seeded, so they can be reproduced
whatever the concurrency; the sampling a run used is printed and saved. Real model (the committed tiny checkpoint
through the `hf:` engine), real in-process MCP servers, the real CLI."""

from __future__ import annotations

import asyncio
import json
import random
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from typer.testing import CliRunner

pytest.importorskip("transformers")

from toolgym_tictactoe import CHECKPOINT, TicTacToeEnv  # noqa: E402
from toolgym_tictactoe import positions as P  # noqa: E402

from toolgym import load_policy  # noqa: E402
from toolgym.cli import app, policy_choice  # noqa: E402
from toolgym.eval import evaluate  # noqa: E402

MODEL = f"hf:{CHECKPOINT}"
BOARDS = random.Random(11).sample(P.positions("all"), 30)


def _served(monkeypatch: pytest.MonkeyPatch, *argv: str) -> Any:
    """The server `toolgym serve tictactoe ARGV` builds (its transport stubbed out), and the agent's policy loaded."""
    from mcp.server.mcpserver import MCPServer

    served: list[Any] = []
    monkeypatch.setattr(MCPServer, "run", lambda self, *a, **kw: served.append(self))
    res = CliRunner().invoke(app, ["serve", "tictactoe", *argv])
    assert res.exit_code == 0 and len(served) == 1, res.output
    return served[0]


def _ask(srv: Any, boards: list[str]) -> list[int | None]:
    """The served agent's moves on `boards`, asked by concurrent clients."""
    async def one(b: str) -> int | None:
        async with Client(srv) as c:
            res = await c.call_tool("suggest_move", {"board": b})
            assert not res.is_error, res.content[0].text
            return res.structured_content["position"]

    async def go() -> list[int | None]:
        return list(await asyncio.gather(*(one(b) for b in boards)))

    return asyncio.run(go())


def _eval_moves(boards: list[str], runs: list[tuple[int, int]] = [(0, 8)], **options: Any  # noqa: B006
                ) -> list[list[int | None]]:
    """The first move of each position task, from `evaluate` with `MODEL` and `options` (default: the env's, greedy)
    -- the eval's own path -- once per `(seed, concurrency)` in `runs`, with one loaded model."""
    env = TicTacToeEnv(task="move", transport="inprocess")
    policy = load_policy(MODEL, env, **(options or env.default_policy_options))
    tasks = [{"seed": i, "board": b, "random_move_prob": 0.0} for i, b in enumerate(boards)]

    async def go() -> list[Any]:
        try:
            return [(await evaluate(env, policy, tasks, concurrency=c, seed=seed))[0] for seed, c in runs]
        finally:
            await env.aclose()
            await policy.aclose()

    return [[(t.calls[0].arguments or {}).get("position") if t.calls else None for t in trajs]
            for trajs in asyncio.run(go())]


def test_model_flag_keeps_the_envs_sampling_defaults() -> None:
    env = TicTacToeEnv(transport="inprocess")
    assert policy_choice(env, MODEL, {"temperature": None}) == (MODEL, {"temperature": 0.0, "max_tokens": 200})
    assert policy_choice(env, MODEL, {"temperature": 0.7, "seed": 3}) == (
        MODEL, {"temperature": 0.7, "max_tokens": 200, "seed": 3})
    env.default_policy_options = {"temperature": 0.0, "num_threads": 1}  # type: ignore[misc]
    assert policy_choice(env, "openai:m", {}) == ("openai:m", {"temperature": 0.0})  # sampling options only


def test_served_model_flag_moves_equal_the_eval_on_30_positions(monkeypatch: pytest.MonkeyPatch) -> None:
    """`toolgym serve tictactoe -m hf:<the committed checkpoint>` plays greedy, as eval does (it sampled at
    temperature 1.0 before: 27 of 30 equal); and asking again gives the same moves."""
    srv = _served(monkeypatch, "-m", MODEL)
    served = _ask(srv, BOARDS)
    sampling = srv.agent.policy.sampling
    assert (sampling.temperature, sampling.max_tokens) == (0.0, 200)
    assert served == _eval_moves(BOARDS)[0]
    assert _ask(srv, BOARDS[:5]) == served[:5]


def test_sampled_answers_are_reproducible_per_request(monkeypatch: pytest.MonkeyPatch) -> None:
    """At temperature 1.5 the served model samples, and each request is seeded by its arguments: one board asked 3
    times at once (in one batch with other requests) gets one answer, and whole games repeat per seed while
    different seeds play different games."""
    srv = _served(monkeypatch, "-m", MODEL, "-t", "1.5")
    assert srv.agent.policy is None or srv.agent.policy.sampling.temperature == 1.5  # loading in the background
    boards = [b for b in BOARDS if len(P.analyze(b).optimal) < b.count(".")][:3]  # where some move is a mistake

    async def go() -> tuple[list[Any], list[Any]]:
        async with Client(srv) as c:
            async def move(b: str) -> Any:
                d = (await c.call_tool("suggest_move", {"board": b})).structured_content
                return b, d["position"], d["reasoning"]

            async def game(seed: int) -> Any:
                return (await c.call_tool("run_agent", {"seed": seed, "agent_starts": True})).structured_content

            moves = await asyncio.gather(*(move(b) for b in boards for _ in range(3)))
            games = await asyncio.gather(*(game(s) for s in (0, 1, 2, 0, 1, 2)))
            return moves, games

    moves, games = asyncio.run(go())
    assert srv.agent.policy.sampling.temperature == 1.5
    assert len(set(moves)) == len(boards), moves  # one answer per board
    assert [g["trace"] for g in games[:3]] == [g["trace"] for g in games[3:]]
    texts = {json.dumps([t["arguments"] for t in g["trace"]]) + g["answer"] for g in games[:3]}
    assert len(texts) == 3, texts  # sampling at 1.5 with different seeds: different games


def test_eval_samples_the_same_whatever_the_concurrency() -> None:
    """An eval seeded with --seed samples each rollout from (seed, example, rollout): concurrency 1 and 6 give the
    same moves at temperature 1.5; another seed gives other moves (so the check could fail)."""
    boards = BOARDS[:8]  # index 4 drew a different tail token at concurrency 6 before the float64 sampler
    one, six, other = _eval_moves(boards, [(5, 1), (5, 6), (6, 6)], temperature=1.5, max_tokens=200)
    assert one == six
    assert other != one


def test_eval_prints_and_saves_the_sampling_it_used(tmp_path: Path) -> None:
    out = tmp_path / "ev"
    res = CliRunner().invoke(app, ["eval", "tictactoe", "-m", MODEL, "-n", "3", "-a", "task=move", "-a",
                                   "transport=inprocess", "--seed", "4", "-o", str(out)], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    text = " ".join(res.output.split())
    assert "sampling: temperature=0.0 max_tokens=200 seed=4" in text
    assert f"policy: {MODEL} sampling: temperature=0.0 max_tokens=200 seed=4" in text
    summary = json.loads((out / "summary.json").read_text())
    assert summary["policy"] == MODEL
    assert summary["sampling"] == {"temperature": 0.0, "max_tokens": 200, "seed": 4}
    assert summary["answer_key"] is False
    assert json.loads((out / "run.json").read_text())["sampling"] == summary["sampling"]
