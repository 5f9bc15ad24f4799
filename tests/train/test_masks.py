"""Assistant-only masks: tool/user/system tokens are never trained on; SFT tokenisation matches the policy's traces."""

from __future__ import annotations

import asyncio
from pathlib import Path

from toolgym import load_env, load_policy, run_rollouts
from toolgym.train.data import pad_batch, step_examples, stratified_order, tokenize_rows, trajectory_row


def _teacher_games(n: int = 3):  # type: ignore[no-untyped-def]
    env = load_env("tictactoe", transport="inprocess")

    async def go():  # type: ignore[no-untyped-def]
        await env.start()
        try:
            pol = load_policy("scripted:minimax", env, seed=0)
            return await run_rollouts(env, pol, [(i, 0, t) for i, t in enumerate(env.build_dataset(n))])
        finally:
            await env.aclose()

    return env, asyncio.run(go())


def test_sft_mask_covers_exactly_the_assistant_turns(tiny_model: Path) -> None:
    from transformers import AutoTokenizer

    from toolgym.models.chat import ChatRenderer

    env, trajs = _teacher_games()
    r = ChatRenderer(AutoTokenizer.from_pretrained(tiny_model))
    rows = [trajectory_row(t, env.model_tools()) for t in trajs]
    for row, tr in zip(rows, tokenize_rows(r, rows), strict=True):
        masked = r.decode([i for i, m in zip(tr.ids, tr.mask, strict=True) if m])
        unmasked = r.decode([i for i, m in zip(tr.ids, tr.mask, strict=True) if not m])
        assert "<tool_response>" not in masked and "Opponent played" not in masked and "tic-tac-toe" not in masked
        assert "<tool_response>" in unmasked and "New game" in unmasked
        n_asst = sum(1 for m in row["messages"] if m["role"] == "assistant")
        assert masked.count("<tool_call>") == n_asst and masked.count("<|im_end|>") == n_asst
        for m in row["messages"]:
            if m["role"] == "tool":
                assert m["content"].splitlines()[0] not in masked
        # the full ids decode to the template render of the conversation
        assert r.decode(tr.ids) == r.render(row["messages"], row["tools"], True)


def test_policy_trace_mask_is_the_sampled_tokens(tiny_model: Path) -> None:
    env = load_env("tictactoe", transport="inprocess")

    async def go():  # type: ignore[no-untyped-def]
        await env.start()
        pol = load_policy(f"hf:{tiny_model}", env, max_tokens=12, seed=0)
        try:
            return await run_rollouts(env, pol, [(i, 0, t) for i, t in enumerate(env.build_dataset(2))])
        finally:
            await pol.aclose()
            await env.aclose()

    for t in asyncio.run(go()):
        assert t.error is None and t.tokens is not None
        tr = t.tokens
        ids_masked = [i for i, m in zip(tr.ids, tr.mask, strict=True) if m]
        assert len(ids_masked) > 0
        assert len(tr.ids) == len(tr.mask) == len(tr.logprobs)
        assert all(lp == 0.0 for lp, m in zip(tr.logprobs, tr.mask, strict=True) if not m)
        assert all(lp < 0.0 for lp, m in zip(tr.logprobs, tr.mask, strict=True) if m)
        b = pad_batch([tr], pad_id=0, max_len=10_000)
        assert int(b["mask"].sum()) == len(ids_masked) - int(tr.mask[0])


def test_stratified_order_spans_groups() -> None:
    order = stratified_order(40, 4, seed=1, epoch=0)
    assert sorted(order) == list(range(40))
    for k in range(0, 40, 8):
        assert sorted(i % 4 for i in order[k : k + 8]) == [0, 0, 1, 1, 2, 2, 3, 3]
    assert step_examples(3, 8, 40, 4, 1) == order[24:32]
    assert len(step_examples(5, 8, 20, 4, 1)) == 8  # wraps into the next epoch


def test_sft_tokenisation_equals_policy_trace(tiny_model: Path) -> None:
    """A token-level policy that 'samples' the canonical text of each move produces exactly the ids and mask that
    `tokenize_conversation` builds from the finished conversation: SFT and RL see the same tokens."""
    import re

    from transformers import AutoTokenizer

    from toolgym.models.chat import ChatRenderer
    from toolgym.policies.batching import GenOutput
    from toolgym.policies.model import ModelPolicy

    tok = AutoTokenizer.from_pretrained(tiny_model)
    r = ChatRenderer(tok)

    class Canonical(ModelPolicy):
        def generate_batch(self, requests):  # type: ignore[no-untyped-def]
            outs = []
            for req in requests:
                text = r.decode(req.prompt_ids)
                free = re.findall(r"Free cells: ([0-9, ]+)", text)
                cell = int(free[-1].split(",")[0]) if free else 4
                body = (f"<think>\nI play {cell}.\n</think>\n\n<tool_call>\n"
                        f'{{"name": "make_move", "arguments": {{"position": {cell}}}}}\n</tool_call><|im_end|>')
                ids = r.encode(body)
                outs.append(GenOutput(ids, [-0.5] * len(ids), "stop"))
            return outs

    env = load_env("tictactoe", transport="inprocess")

    async def go():  # type: ignore[no-untyped-def]
        await env.start()
        pol = Canonical(r)
        try:
            return await run_rollouts(env, pol, [(i, 0, t) for i, t in enumerate(env.build_dataset(3))])
        finally:
            await pol.aclose()
            await env.aclose()

    trajs = asyncio.run(go())
    for t in trajs:
        assert t.error is None and t.tokens is not None and len(t.calls) >= 3
        sft = tokenize_rows(r, [trajectory_row(t, env.model_tools())])[0]
        n = len(t.tokens.ids)
        assert sft.ids[:n] == t.tokens.ids
        assert sft.mask[:n] == t.tokens.mask
        # the policy's trace stops after the last sampled turn; the finished conversation also holds the final tool
        # result (the game-over message): extra context tokens, never trained on
        assert not any(sft.mask[n:])


def test_answer_only_drops_each_turns_reasoning_from_the_loss_mask() -> None:
    """pg_tokens='answer': in every assistant turn the tokens up to and including the reasoning end leave the mask
    (they stay in ids); a turn without the end marker keeps its whole mask; prompt/tool tokens stay 0."""
    from toolgym.train.data import answer_only
    from toolgym.types import TokenTrace

    E = [8, 9]  # a two-token end marker
    ids = [1, 2, 5, 6, 8, 9, 3, 4, 7, 7, 5, 8, 9, 6, 2, 3, 3]
    mask = [0, 0, 1, 1, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1, 0, 1, 1]
    #       prompt | turn 1: think 5 6, end 8 9, answer 3 4 | tool | turn 2: 5, end, answer 6 | tool | turn 3: no end
    out = answer_only(TokenTrace(ids=ids, mask=mask, logprobs=[0.0] * len(ids)), E)
    assert out.ids == ids and out.logprobs == [0.0] * len(ids)
    assert out.mask == [0, 0, 0, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 1, 0, 1, 1]
    assert answer_only(TokenTrace(ids=[8, 9], mask=[1, 1], logprobs=[0, 0]), E).mask == [0, 0]


def test_failed_turns_are_context_and_the_recovery_is_trained(tiny_model: Path, tmp_path: Path) -> None:
    """`toolgym synth --failed-turns context` on real tic-tac-toe games whose teacher calls an occupied cell first
    (`invalid_prob`): each invalid turn is marked weight 0, the SFT mask leaves exactly those turns out, and the
    retry after the error (a different, free cell) is in the loss."""
    import json

    from transformers import AutoTokenizer
    from typer.testing import CliRunner

    from toolgym.cli import app
    from toolgym.models.chat import ChatRenderer

    out = tmp_path / "games.jsonl"
    res = CliRunner().invoke(app, ["synth", "tictactoe", "--teacher", "scripted:imperfect", "--teacher-arg", "mistake_prob=0",
                                   "--teacher-arg", "invalid_prob=0.5", "--failed-turns", "context", "-n", "6",
                                   "-a", "transport=inprocess", "-a", "max_random_move_prob=1.0", "-o", str(out)])
    assert res.exit_code == 0, res.output
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    summary = json.loads(out.with_name("games.summary.json").read_text())
    marked = [(r, k) for r in rows for k, m in enumerate(r["messages"]) if m.get("weight") == 0]
    assert len(marked) == summary["failed_turns"] > 0
    renderer = ChatRenderer(AutoTokenizer.from_pretrained(tiny_model))
    for row, trace in zip(rows, tokenize_rows(renderer, rows), strict=True):
        masked = renderer.decode([i for i, m in zip(trace.ids, trace.mask, strict=True) if m])
        asst = [m for m in row["messages"] if m["role"] == "assistant"]
        assert masked.count("<tool_call>") == sum(1 for m in asst if m.get("weight", 1) != 0 and m.get("tool_calls"))
    for row, k in marked:
        error, retry = row["messages"][k + 1], row["messages"][k + 2]
        assert error["role"] == "tool" and "already taken" in error["content"]
        bad = json.loads(row["messages"][k]["tool_calls"][0]["function"]["arguments"])["position"]
        good = json.loads(retry["tool_calls"][0]["function"]["arguments"])["position"]
        assert retry.get("weight", 1) == 1 and good != bad

    bad_opt = CliRunner().invoke(app, ["synth", "tictactoe", "--teacher", "scripted:random", "--failed-turns", "drop",
                                       "-n", "1", "-a", "transport=inprocess", "-o", str(tmp_path / "x.jsonl")])
    assert bad_opt.exit_code == 2 and "--failed-turns" in bad_opt.output
