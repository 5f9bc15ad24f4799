"""TRL adapter (`toolgym.integrations.trl`): a toolgym env as a `GRPOTrainer` `environment_factory` + rewards.

1. The contract without a model: the generated tool methods have the schemas the model must see (hidden tool
   absent, hidden args removed), `reset` runs the hidden setup and returns the first user message, a tool call
   goes through the real MCP server, and the reward functions give the rubric's values (1 for the right answer,
   0 for a guess; accuracy rates None where no call was made).
2. Two real GRPO steps on CPU (`trl.GRPOTrainer`, TRL's shipped `qwen2_5.jinja` chat template) with the tiny
   offline model from `toolgym.models.tiny`, first overfitted for a few seconds on the reference conversation of
   one time-conversion task so that it emits the tool call: TRL's own tool loop then calls `mcp-server-time`
   through the adapter and the toolgym rubric scores the rollouts.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("trl")
pytest.importorskip("transformers")

from toolgym.integrations.trl import TRLEnv  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TIME_ENV = ROOT / "examples" / "third_party_time" / "env.toml"

pytestmark = pytest.mark.skipif(
    shutil.which("mcp-server-time") is None and not (Path(sys.executable).parent / "mcp-server-time").exists(),
    reason="mcp-server-time not installed (pip install -e '.[examples]')",
)


def _reference(task: dict) -> dict:
    return {k: v[0] for k, v in task["expected_calls"][0]["arguments"].items()}


def test_trl_env_contract() -> None:
    from transformers.utils import get_json_schema

    with TRLEnv(str(TIME_ENV)) as tg:
        e = tg.environment_factory()
        assert not hasattr(e, "get_current_time")  # a hidden tool is not a method
        schema = get_json_schema(e.convert_time)
        schema = schema.get("function", schema)
        assert schema["name"] == "convert_time"
        assert set(schema["parameters"]["required"]) == {"source_timezone", "time", "target_timezone"}
        rows = tg.dataset(n=2, as_list=True)
        assert rows[0]["prompt"][-1] == {"role": "user", "content": ""}
        obs = e.reset(**rows[0])
        task = json.loads(rows[0]["toolgym_task"])
        assert obs == task["prompt"]
        out = tg.run(e.convert_time(**_reference(task)))
        assert task["answer"] in out
        bad = tg.run(e.convert_time(source_timezone="Nowhere/City", time="01:00", target_timezone="UTC"))
        assert bad.startswith("Error")
        completion = [
            {"role": "assistant", "content": "",
             "tool_calls": [{"type": "function", "function": {"name": "convert_time", "arguments": _reference(task)}}]},
            {"role": "tool", "name": "convert_time", "content": out},
            {"role": "assistant", "content": f"<answer>{task['answer']}</answer>"},
        ]
        names = tg.reward_names()
        got = {n: f(completions=[completion], environments=[e])[0] for n, f in zip(names, tg.reward_funcs(), strict=True)}
        assert got["correct"] == 1.0 and got["used_tool"] == 1.0
        assert got["tool_exec_ok"] == 0.5  # one good call, one with an unknown zone
        assert got["call_match"] == 0.0    # two calls where one was expected
        assert dict(zip(names, tg.reward_weights(), strict=True))["correct"] == 1.0

        e2 = tg.environment_factory()
        e2.reset(**rows[1])
        guess = [[{"role": "assistant", "content": "<answer>00:00</answer>"}]]
        got2 = {n: f(completions=guess, environments=[e2])[0] for n, f in zip(names, tg.reward_funcs(), strict=True)}
        assert got2["correct"] == 0.0 and got2["used_tool"] == 0.0 and got2["tool_exec_ok"] is None
        assert tg.errors == []


def test_trl_env_tictactoe_hidden_args_and_stop() -> None:
    """Hidden setup (`new_game`), the hidden `game_id` argument, server-side rewards (`game_result`) and the `@stop`
    condition through the adapter, with minimax playing against the perfect opponent (a draw)."""
    pytest.importorskip("toolgym_tictactoe")
    from mcp_server_tictactoe import game as g
    from toolgym_tictactoe import parse_board
    from transformers.utils import get_json_schema

    with TRLEnv("tictactoe") as tg:
        e = tg.environment_factory()
        schema = get_json_schema(e.make_move)
        assert "game_id" not in json.dumps(schema) and not hasattr(e, "new_game")
        row = tg.dataset(n=1, as_list=True)[0]
        text = e.reset(**row)
        completion = []
        for _ in range(6):
            board = parse_board(text)
            assert board is not None, text
            cell = g.best_moves(board, "X")[0]
            call = {"type": "function", "function": {"name": "make_move", "arguments": {"position": cell}}}
            text = tg.run(e.make_move(position=cell))
            completion += [{"role": "assistant", "content": "<think>best move</think>", "tool_calls": [call]},
                           {"role": "tool", "name": "make_move", "content": text}]
            if "Game over" in text:
                break
        assert "Game over" in text
        after = tg.run(e.make_move(position=0))
        assert "episode is over" in after
        completion += [{"role": "assistant", "content": "", "tool_calls": [
            {"type": "function", "function": {"name": "make_move", "arguments": {"position": 0}}}]},
            {"role": "tool", "name": "make_move", "content": after}]
        got = {n: f(completions=[completion], environments=[e])[0]
               for n, f in zip(tg.reward_names(), tg.reward_funcs(), strict=True)}
        assert got["outcome"] == 0.5 and got["draw"] == 1.0
        assert got["format_ok"] == 1.0 and got["invalid_move_penalty"] == 0.0  # the post-stop turn is not scored
        assert got["tool_exec_ok"] == 1.0
        assert tg.errors == []


def _overfit(model, tok, text: str, steps: int = 100) -> None:  # type: ignore[no-untyped-def]
    import torch

    ids = tok(text, return_tensors="pt").input_ids
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    model.train()
    for _ in range(steps):
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad()


@pytest.mark.slow
def test_grpo_two_steps_cpu(tmp_path: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer
    from trl.chat_template_utils import qwen2_5_chat_template

    from toolgym.models.tiny import init_tiny

    t0 = time.perf_counter()
    torch.manual_seed(0)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the tiny model gains nothing from threads; on a shared 2-core box they thrash
    model_dir = init_tiny(tmp_path / "tiny", size="tiny", seed=0)
    tok = AutoTokenizer.from_pretrained(model_dir)
    tok.chat_template = qwen2_5_chat_template  # TRL only accepts tool templates it ships
    tok.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)

    tg = TRLEnv(str(TIME_ENV))
    try:
        rows = tg.dataset(n=1, as_list=True) * 4
        task = json.loads(rows[0]["toolgym_task"])
        probe = tg.environment_factory()
        user = probe.reset(**rows[0])
        tools = [getattr(probe, "convert_time")]
        conv = [*rows[0]["prompt"][:-1], {"role": "user", "content": user},
                {"role": "assistant", "content": "", "tool_calls": [
                    {"type": "function", "function": {"name": "convert_time", "arguments": _reference(task)}}]},
                {"role": "tool", "name": "convert_time", "content": tg.run(probe.convert_time(**_reference(task)))},
                {"role": "assistant", "content": f"<answer>{task['answer']}</answer>"}]
        _overfit(model, tok, tok.apply_chat_template(conv, tools=tools, tokenize=False))

        from datasets import Dataset

        args = GRPOConfig(
            output_dir=str(tmp_path / "out"), use_cpu=True, bf16=False, max_steps=2, learning_rate=1e-5,
            per_device_train_batch_size=4, num_generations=4, max_completion_length=320, temperature=0.3,
            reward_weights=tg.reward_weights(), max_tool_calling_iterations=tg.max_turns, logging_steps=1,
            report_to=[], save_strategy="no", beta=0.0, dataloader_num_workers=0,
        )
        trainer = GRPOTrainer(model=model, processing_class=tok, args=args, train_dataset=Dataset.from_list(rows),
                              reward_funcs=tg.reward_funcs(), environment_factory=tg.environment_factory)
        trainer.train()
        logs = [h for h in trainer.state.log_history if "reward" in h]
        assert len(logs) == 2, trainer.state.log_history
        assert tg.errors == []
        calls = [c for ep, _ in tg.episodes() for c in ep.calls]
        assert calls, "TRL's tool loop never reached the MCP server"
        assert any(r.exec_ok for r in calls)
        summary = [{k: v for k, v in h.items() if k.startswith(("rewards/", "reward", "tools/"))} for h in logs]
        print(summary)
        assert all(h.get("rewards/used_tool/mean", 0) > 0 for h in logs), summary
        assert any(h.get("rewards/correct/mean", 0) > 0 for h in logs), summary
    finally:
        tg.close()
        torch.set_num_threads(threads)
    print(f"two GRPO steps in {time.perf_counter() - t0:.1f}s")
