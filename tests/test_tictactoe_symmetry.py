"""A game's images under the board's symmetries (`toolgym_tictactoe.symmetry`, `TicTacToeEnv.symmetric_images`, GRPO's
`symmetry_images`). Real parts: games played through the tic-tac-toe MCP server (in-process) by the scripted
teachers whose think formats the RL starts were trained on, against the optimal and the random opponent."""

from __future__ import annotations

import asyncio
import copy
import json
import random

import pytest
from mcp_server_tictactoe import game as g
from toolgym_tictactoe import forced_move, parse_board
from toolgym_tictactoe import positions as P
from toolgym_tictactoe.symmetry import cell_map, game_image, game_images, image_board

from toolgym.policies import load_policy
from toolgym.registry import load_env
from toolgym.rollout import run_rollouts

TEACHERS = {  # the formats of the committed starts and the default model
    "late": {"mistake_prob": 1.0, "mistakes": "quiet", "think": "track", "free_list": True},
    "forced": {"mistake_prob": 1.0, "mistakes": "quiet", "think": "track"},
    "default": {"mistake_prob": 0.0, "think": "track", "tie_break": "exploit"},
    "scan": {"mistake_prob": 0.3, "think": "scan"},
}


def _games(teacher: dict, n: int, random_move_prob: float, seed: int = 0) -> list:
    async def go() -> list:
        env = load_env("tictactoe", transport="inprocess", min_random_move_prob=random_move_prob,
                       max_random_move_prob=random_move_prob)
        player = load_policy("scripted:imperfect", env, seed=seed, **teacher)
        async with env:
            return await run_rollouts(env, player, [(i, 0, r) for i, r in enumerate(env.build_dataset(n, seed=seed))], n)
    return asyncio.run(go())


def _boards(messages: list[dict]) -> list[str]:
    return [b for m in messages if m["role"] in ("user", "tool") and (b := parse_board(m["content"])) is not None]


def _moves(messages: list[dict]) -> list[int]:
    return [json.loads(m["tool_calls"][0]["function"]["arguments"])["position"]
            for m in messages if m["role"] == "assistant" and m.get("tool_calls")]


@pytest.mark.parametrize("name", sorted(TEACHERS))
def test_every_image_is_the_same_game_turned(name: str) -> None:
    """Each image: the same number of messages, every board the symmetry's image of the original's, every move the
    image cell, the same ending (so the same reward), the think text what the teacher writes for the image board --
    and the inverse symmetry gives the game back."""
    games = _games(TEACHERS[name], 24, 0.5)
    for t in games:
        assert t.error is None
        images = game_images(t.messages, 7, random.Random(1))
        assert images, f"{name}: a teacher game got no image"
        assert len(images) == len({json.dumps(i) for i in images})  # distinct
        for perm in P.SYMMETRIES[1:]:
            img = game_image(t.messages, perm)
            to = cell_map(perm)
            if img is None:  # only where a forced move's image is not the scan's first forced cell there
                turns = zip(_boards(t.messages), _moves(t.messages))
                assert any(forced_move(b) == c and forced_move(image_board(b, to)) != to[c] for b, c in turns)
                continue
            assert len(img) == len(t.messages)
            assert _boards(img) == [image_board(b, to) for b in _boards(t.messages)]
            assert _moves(img) == [to[c] for c in _moves(t.messages)]
            assert img[-1]["content"].splitlines()[-1] == t.messages[-1]["content"].splitlines()[-1]  # the ending
            back = {v: k for k, v in to.items()}
            inverse = next(p for p in P.SYMMETRIES if cell_map(p) == back)
            assert game_image(img, inverse) == t.messages


def test_image_turns_are_what_the_teacher_writes_there() -> None:
    """An image's assistant turns equal the scripted teacher's own text on the image board with the image move: the
    late start's teacher re-run on each image position (its quiet move pinned to the image cell) writes the same."""
    from toolgym_tictactoe import unreasoned_think, explain_best_move, forced_move

    for t in _games(TEACHERS["late"], 12, 0.0, seed=3):
        for img in game_images(t.messages, 3, random.Random(0)):
            board = None
            for m in img:
                if m["role"] in ("user", "tool"):
                    board = parse_board(m["content"])
                elif m["role"] == "assistant":
                    cell = _moves([m])[0]
                    want = explain_best_move(board, think="track")[1] if forced_move(board) == cell else \
                        unreasoned_think(board, "track", cell, free_list=True)
                    assert m["reasoning_content"] == want
                    assert board[cell] == "."


def test_a_game_written_in_no_known_format_gets_no_image() -> None:
    """A garbled scan, a second call in a turn, an invalid move's error result or text outside the think block: no
    image at all (an image never holds text the model's format would not have produced)."""
    t = _games(TEACHERS["late"], 1, 0.0)[0]
    env = load_env("tictactoe", transport="inprocess")
    assert env.symmetric_images(t.messages, 2, random.Random(0))
    k = next(i for i, m in enumerate(t.messages) if m["role"] == "assistant")
    for change in (
        lambda m: m.update(reasoning_content=m["reasoning_content"].replace(" | -", " | block 4", 1)),
        lambda m: m.update(tool_calls=m["tool_calls"] * 2),
        lambda m: m.update(content="I play here."),
    ):
        bad = copy.deepcopy(t.messages)
        change(bad[k])
        assert game_images(bad, 7, random.Random(0)) == []
    bad = copy.deepcopy(t.messages)
    bad[k + 1]["content"] = "Error: cell 4 is already taken; free cells: 0, 1, 2."
    assert game_images(bad, 7, random.Random(0)) == []


def test_images_of_a_symmetric_game_are_fewer() -> None:
    """A game whose every board is symmetric under some symmetry has fewer distinct images than 7: from the empty
    board, X in the centre, O in a corner, its images are the other corners' games (and no image repeats)."""
    env = load_env("tictactoe", transport="inprocess")
    start = g.describe("." * 9)
    after = g.play(g.play("." * 9, 4, "X"), 0, "O")
    think = ""  # a model that writes no think text
    msgs = [{"role": "system", "content": env.system_prompt},
            {"role": "user", "content": f"New game. You move first.\n{start}"},
            {"role": "assistant", "content": "", "reasoning_content": think,
             "tool_calls": [{"id": "c1", "type": "function",
                             "function": {"name": "make_move", "arguments": '{"position": 4}'}}]},
            {"role": "tool", "tool_call_id": "c1", "name": "make_move",
             "content": f"You played 4. Opponent played 0.\n{g.describe(after)}"}]
    images = game_images(msgs, 7, random.Random(0))
    assert len(images) == 3  # O in each of the three other corners
    assert sorted(_boards(i)[-1].index("O") for i in images) == [2, 6, 8]
