"""One GRPO step of toolgym vs TRL's `GRPOTrainer` on identical work, measured side by side in one process.

Two workloads: `--env toy` (default, below) and `--env tictactoe` (the mission workload: multi-turn tool-calling
games against the MCP tic-tac-toe server; see the comment above `bench_toolgym_ttt`).

Toy work: the same tiny model (built fresh with `init_tiny`, same seed), the same single-turn prompts (the digits toy
task: system + user message, reward = share of digits written), `--examples` prompts x `--group` completions per
step, `--max-tokens` new tokens, temperature 1, one optimizer step per batch, no KL, no checkpoints, 1 torch thread
for both (the shared 2-core box; see the Training section of README.md). Reports the median step time after `--warmup` steps,
and the ratio toolgym / TRL. Writes JSON to --out.

    python benchmarks/bench_grpo.py --steps 4 --examples 4 --group 8 --max-tokens 32
    python benchmarks/bench_grpo.py --env tictactoe --steps 3 --examples 2 --group 4 --max-tokens 200
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "train"))


def _env():  # type: ignore[no-untyped-def]
    """The digits toy env with its tool hidden: the prompt renders exactly as TRL renders the same messages."""
    from toy_env import DigitsEnv

    class NoToolDigits(DigitsEnv):
        hidden_tools = {"submit"}

    return NoToolDigits()


def bench_toolgym(model: Path, args: argparse.Namespace, tmp: Path) -> dict:

    from toolgym.train.config import GRPOConfig
    from toolgym.train.grpo import run_grpo
    from toolgym.train.runstate import read_metrics

    cfg = GRPOConfig(model=str(model), output_dir=str(tmp / "toolgym"), env="digits", num_examples=64,
                     batch_size=args.examples, rollouts_per_example=args.group, max_tokens=args.max_tokens,
                     micro_batch_size=args.examples * args.group, max_steps=args.steps + args.warmup,
                     learning_rate=1e-5, save_every=10_000, num_threads=1, concurrency=args.examples * args.group)
    run_grpo(cfg, env=_env())
    m = read_metrics(tmp / "toolgym")[args.warmup :]
    return {"step_s": [r["step_s"] for r in m], "rollout_s": [r["rollout_s"] for r in m],
            "train_s": [r["train_s"] for r in m], "completion_tokens": statistics.fmean(r["completion_tokens"] for r in m),
            "seq_len": statistics.fmean(r["seq_len"] for r in m)}


def bench_trl(model: Path, args: argparse.Namespace, tmp: Path) -> dict:
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    torch.set_num_threads(1)
    env = _env()
    tasks = env.build_dataset(64)
    ds = Dataset.from_list([{"prompt": env.initial_messages(t, {})} for t in tasks])

    def digits(completions, **kw):  # type: ignore[no-untyped-def]
        texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
        return [sum(ch.isdigit() for ch in t) / max(1, len(t)) for t in texts]

    times: list[float] = []
    lens: list[float] = []

    class Timer(TrainerCallback):
        def on_step_begin(self, a, s, c, **kw):  # type: ignore[no-untyped-def]
            self.t0 = time.perf_counter()

        def on_step_end(self, a, s, c, **kw):  # type: ignore[no-untyped-def]
            times.append(time.perf_counter() - self.t0)

        def on_log(self, a, s, c, logs=None, **kw):  # type: ignore[no-untyped-def]
            if logs and "completions/mean_length" in logs:
                lens.append(logs["completions/mean_length"])

    n = args.examples * args.group
    cfg = GRPOConfig(output_dir=str(tmp / "trl"), per_device_train_batch_size=n, num_generations=args.group,
                     gradient_accumulation_steps=1, max_completion_length=args.max_tokens, temperature=1.0,
                     learning_rate=1e-5, beta=0.0, max_steps=args.steps + args.warmup, logging_steps=1,
                     save_strategy="no", report_to=[], use_cpu=True, bf16=False, seed=0, dataloader_num_workers=0)
    tok = AutoTokenizer.from_pretrained(model)
    trainer = GRPOTrainer(model=AutoModelForCausalLM.from_pretrained(model), reward_funcs=digits, args=cfg,
                          train_dataset=ds, processing_class=tok, callbacks=[Timer()])
    trainer.train()
    return {"step_s": times[args.warmup :], "completion_tokens": statistics.fmean(lens) if lens else None}


# ------------------------------------------------------------------------------------------ tic-tac-toe (mission)
# Identical work on both sides:
#   model      the committed tiny tic-tac-toe model (toolgym_tictactoe.CHECKPOINT, 0.9M params, fp32), its own chat
#              template on both sides (TRL parses its Hermes calls with TRL's Qwen3 response template);
#   prompts    the env's tasks (same env args, same dataset seed), the system prompt + the opening board from the
#              hidden `new_game`; tools: the schemas TRL derives from `TRLEnv`'s generated methods are given to the
#              toolgym env too, so both render byte-identical prompts (checked before timing);
#   games      multi-turn `make_move` calls against `mcp-server-tictactoe` over stdio (one server per side, its own
#              process), hidden `game_id`, rewards from the env's rubric (a `game_result` call);
#   batch      `--examples` prompts x `--group` rollouts per step, sampled at temperature 1, `--max-tokens` per model
#              turn for toolgym and `--max-tokens` x max_turns for TRL's whole multi-turn completion;
#   update     loss `grpo` (PPO clip 0.2, no KL, no reference model, rewards not std-scaled), one optimizer step
#              per batch, all rollouts in one forward/backward, AdamW (0.9, 0.99), lr 1e-5 constant, grad clip 1.0,
#              no gradient checkpointing (TRL's default is on: it recomputes the forward in the backward);
#   threads    1 torch thread each, one side after the other in this process.
# Work check: sampled tokens and MCP tool calls per step must agree within `--tolerance`, else no ratio is printed.
TTT_ENV_ARGS = {"min_random_move_prob": 0.0, "max_random_move_prob": 0.5, "num_groups": 4}
TTT_NUM_EXAMPLES = 64  # task pool (dataset seed 0); both sides play the same tasks in the same steps


def _trl_tool_methods(inst: Any) -> list[Any]:
    """The tools TRL exposes for an environment instance (the same filter as `GRPOTrainer`)."""
    import inspect

    return [getattr(inst, n) for n, _ in inspect.getmembers(type(inst), predicate=inspect.isfunction)
            if n not in ("reset", "get_reward") and not n.startswith("_")]


def _ttt_tokenizer(model: Path) -> Any:
    from transformers import AutoTokenizer
    from trl.chat_template_utils import qwen3_template

    tok = AutoTokenizer.from_pretrained(model)
    tok.response_template = qwen3_template  # the tiny template's Hermes `<tool_call>` JSON + `<think>`
    tok.padding_side = "left"
    return tok


def _ttt_env_and_check(model: Path) -> tuple[Any, dict]:
    """The toolgym env with TRL's tool schemas, and a check that both sides render the same prompt tokens."""
    from transformers.utils import get_json_schema

    from toolgym.integrations.trl import TRLEnv
    from toolgym.registry import load_env

    tok = _ttt_tokenizer(model)
    with TRLEnv("tictactoe", **TTT_ENV_ARGS) as tg:
        probe = tg.environment_factory()
        methods = _trl_tool_methods(probe)
        schemas = [get_json_schema(m) for m in methods]
        row = tg.dataset(n=1, as_list=True)[0]
        obs = probe.reset(**row)
        trl_ids = tok.apply_chat_template(row["prompt"][:-1] + [{"role": "user", "content": obs}], tools=methods,
                                          add_generation_prompt=True, tokenize=True, return_dict=False)
        tg_ids = tok.apply_chat_template(tg.episode_of(probe).messages, tools=schemas, add_generation_prompt=True, tokenize=True,
                                         return_dict=False)
    env = load_env("tictactoe", **TTT_ENV_ARGS)
    env.model_tools = lambda: json.loads(json.dumps(schemas))  # what the model sees; validation stays MCP's schema
    if trl_ids != tg_ids:
        raise SystemExit("the two sides render different prompts; fix the schemas before timing")
    return env, {"prompt_tokens_first_task": len(tg_ids), "tools": [s["function"]["name"] for s in schemas]}


def bench_toolgym_ttt(model: Path, env: Any, args: argparse.Namespace, tmp: Path) -> dict:
    from toolgym.train.config import GRPOConfig
    from toolgym.train.grpo import GRPOTrainer
    from toolgym.train.runstate import read_metrics

    n = args.examples * args.group
    cfg = GRPOConfig(model=str(model), output_dir=str(tmp / "toolgym"), env="tictactoe", env_args=TTT_ENV_ARGS,
                     num_examples=TTT_NUM_EXAMPLES, batch_size=args.examples, rollouts_per_example=args.group,
                     max_tokens=args.max_tokens, temperature=1.0, micro_batch_size=n, concurrency=n,
                     max_steps=args.steps + args.warmup, learning_rate=1e-5, adam_betas=(0.9, 0.99),
                     lr_schedule="constant", loss_type="grpo", kl_coef=0.0, scale_rewards=False, max_grad_norm=1.0,
                     save_every=10_000, num_threads=1, seed=0)
    tr = GRPOTrainer(cfg, env=env)
    steps: list[dict] = []
    rollouts, update = tr.rollouts, tr.update

    async def timed_rollouts(step: int) -> Any:
        trajs = await rollouts(step)
        q = tr.policy.queue.stats()
        ok = [t for t in trajs if t.error is None]
        steps.append({"generate_s": q["generate_s"], "sampled_tokens": q["generated_tokens"],
                      "gen_batches": q["batches"], "gen_rows": q["requests"],
                      "decode_steps": q.get("decode_steps", 0), "mean_decode_rows": q.get("mean_decode_rows", 0.0),
                      "prefill_s": q.get("prefill_s", 0.0),
                      "mcp_calls": sum(len(t.calls) for t in trajs),
                      "mcp_call_latency_sum_s": sum(c.latency_s for t in trajs for c in t.calls),
                      "setup_scoring_sum_s": sum(t.timings.get("setup_s", 0) + t.timings.get("scoring_s", 0)
                                                         for t in trajs),
                      "model_turns": sum(len(t.turns) for t in trajs), "errors": len(trajs) - len(ok),
                      "games_over": sum(t.stop_reason == "game_over" for t in ok),
                      "reward": statistics.fmean(t.reward for t in ok) if ok else None})
        return trajs

    def timed_update(trajs: Any) -> Any:
        t0 = time.perf_counter()
        st = update(trajs)
        steps[-1]["update_s"] = time.perf_counter() - t0
        return st

    tr.rollouts, tr.update = timed_rollouts, timed_update  # type: ignore[method-assign]
    if args.toolgym_batch_wait is not None:  # the engine's batch-gathering window (HFPolicy option batch_wait_s)
        tr.policy.queue.max_wait_s = args.toolgym_batch_wait
    prof = _profiler(args)
    tr.run()
    prof_top = _profile_top(prof, args, tmp / "toolgym.prof")
    m = read_metrics(tmp / "toolgym")
    for s, r in zip(steps, m, strict=True):
        s.update(step_s=r["step_s"], rollout_s=r["rollout_s"], train_s=r["train_s"])
    return {"steps": steps[args.warmup :], "profile_top": prof_top}


def bench_trl_ttt(model: Path, args: argparse.Namespace, tmp: Path) -> dict:
    import torch
    from transformers import AutoModelForCausalLM, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from toolgym.integrations.trl import TRLEnv

    torch.set_num_threads(1)
    tg = TRLEnv("tictactoe", **TTT_ENV_ARGS)
    steps: list[dict] = []
    cur: dict[str, float] = {}

    def add(k: str, v: float) -> None:
        cur[k] = cur.get(k, 0.0) + v

    reset = tg.env_class.reset

    def timed_reset(self: Any, **row: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return reset(self, **row)
        finally:
            add("reset_s", time.perf_counter() - t0)

    tg.env_class.reset = timed_reset  # type: ignore[method-assign]

    class Timed(GRPOTrainer):
        def _generate_single_turn(self, *a: Any, **k: Any) -> Any:
            t0 = time.perf_counter()
            out = super()._generate_single_turn(*a, **k)
            add("generate_s", time.perf_counter() - t0)
            add("gen_batches", 1)
            add("gen_rows", len(a[0]))
            return out

        def _tool_call_loop(self, *a: Any, **k: Any) -> Any:
            t0, g0 = time.perf_counter(), cur.get("generate_s", 0.0)
            out = super()._tool_call_loop(*a, **k)
            add("tool_loop_minus_generate_s", time.perf_counter() - t0 - (cur.get("generate_s", 0.0) - g0))
            return out

        def _generate(self, prompts: Any) -> Any:
            out = super()._generate(prompts)
            completion_ids, tool_mask, completions = out[1], out[2], out[3]
            add("sampled_tokens", sum(sum(m) for m in tool_mask) if tool_mask is not None
                else sum(len(c) for c in completion_ids))
            add("completion_tokens_incl_tool_results", sum(len(c) for c in completion_ids))
            msgs = [m for c in completions for m in c if isinstance(m, dict)]
            add("model_turns", sum(m.get("role") == "assistant" for m in msgs))
            add("trl_tool_calls", sum(len(m.get("tool_calls") or []) for m in msgs if m.get("role") == "assistant"))
            return out

        def _calculate_rewards(self, *a: Any, **k: Any) -> Any:
            t0 = time.perf_counter()
            out = super()._calculate_rewards(*a, **k)
            add("rewards_s", time.perf_counter() - t0)
            live = {id(tg.episode_of(e)) for e in self.environments or []}
            rollouts = [(ep, score) for ep, score in tg.episodes() if id(ep) in live]
            add("mcp_calls", sum(len(ep.calls) for ep, _ in rollouts))
            add("mcp_call_latency_sum_s", sum(c.latency_s for ep, _ in rollouts for c in ep.calls))
            add("games_over", sum(ep.done and ep.stop_reason != "max_turns" for ep, _ in rollouts))
            scores = [score[2] for _, score in rollouts if score is not None]
            cur["reward"] = statistics.fmean(scores) if scores else float("nan")
            return out

        def _generate_and_score_completions(self, *a: Any, **k: Any) -> Any:
            t0 = time.perf_counter()
            out = super()._generate_and_score_completions(*a, **k)
            add("rollout_s", time.perf_counter() - t0)
            return out

    class StepTimer(TrainerCallback):
        def on_step_begin(self, a, s, c, **kw):  # type: ignore[no-untyped-def]
            cur.clear()
            self.t0 = time.perf_counter()

        def on_step_end(self, a, s, c, **kw):  # type: ignore[no-untyped-def]
            step_s = time.perf_counter() - self.t0
            steps.append({**cur, "step_s": step_s, "train_s": step_s - cur.get("rollout_s", 0.0)})

    n = args.examples * args.group
    cfg = GRPOConfig(output_dir=str(tmp / "trl"), per_device_train_batch_size=n, num_generations=args.group,
                     gradient_accumulation_steps=1, max_completion_length=args.max_tokens * tg.max_turns,
                     max_tool_calling_iterations=tg.max_turns, temperature=1.0, learning_rate=1e-5,
                     lr_scheduler_type="constant", adam_beta1=0.9, adam_beta2=0.99, weight_decay=0.0, max_grad_norm=1.0,
                     loss_type="grpo", epsilon=0.2, scale_rewards="none", beta=0.0, num_iterations=1,
                     gradient_checkpointing=False,  # TRL's default True recomputes the forward; toolgym does not
                     reward_weights=tg.reward_weights(), max_steps=args.steps + args.warmup, logging_steps=1,
                     save_strategy="no", report_to=[], disable_tqdm=True, use_cpu=True, bf16=False, seed=0,
                     dataloader_num_workers=0, shuffle_dataset=False)
    # the same tasks in the same steps as toolgym's runner (its stratified `step_examples` order)
    from toolgym.train.data import step_examples

    pool = tg.dataset(n=TTT_NUM_EXAMPLES, as_list=True)
    rows = [pool[i] for step in range(args.steps + args.warmup)
            for i in step_examples(step, args.examples, len(pool), TTT_ENV_ARGS["num_groups"], 0)]
    from datasets import Dataset

    try:
        trainer = Timed(model=AutoModelForCausalLM.from_pretrained(model), processing_class=_ttt_tokenizer(model),
                        args=cfg, reward_funcs=tg.reward_funcs(), train_dataset=Dataset.from_list(rows),
                        environment_factory=tg.environment_factory, callbacks=[StepTimer()])
        from transformers.trainer_callback import PrinterCallback

        trainer.remove_callback(PrinterCallback)  # TRL's per-step log dicts: the table below says what matters
        prof = _profiler(args)
        trainer.train()
        prof_top = _profile_top(prof, args, tmp / "trl.prof")
    finally:
        tg.close()
    return {"steps": steps[args.warmup :], "profile_top": prof_top, "reward_errors": len(tg.errors)}


def _profiler(args: argparse.Namespace) -> Any:
    if not args.profile:
        return None
    import cProfile

    prof = cProfile.Profile()
    prof.enable()
    return prof


def _profile_top(prof: Any, args: argparse.Namespace, path: Path) -> list[list[Any]] | None:
    """The 25 functions with the most self time (warm-up included; main thread only, so toolgym's generation,
    which runs in a worker thread, is absent: the timers cover it); the .prof file goes beside --out."""
    if prof is None:
        return None
    import pstats

    prof.disable()
    dest = args.out.parent / f"{args.out.stem}_{path.stem}.prof"
    dest.parent.mkdir(parents=True, exist_ok=True)
    prof.dump_stats(dest)
    st = pstats.Stats(prof)
    rows = sorted(st.stats.items(), key=lambda kv: kv[1][2], reverse=True)[:25]  # type: ignore[attr-defined]
    return [[f"{Path(f).name}:{line}({fn})", round(v[2], 3), round(v[3], 3), v[1]] for (f, line, fn), v in rows]


def _mean(steps: list[dict], key: str) -> float:
    vals = [s.get(key, 0.0) for s in steps]
    return statistics.fmean(vals) if vals else float("nan")


WORK_KEYS = ("sampled_tokens_per_step", "mcp_calls_per_step")


def work_check(summary: dict[str, dict[str, float]], tolerance: float) -> dict[str, Any]:
    """Whether both sides did the same work: sampled tokens and MCP tool calls per step within `tolerance`
    (relative to the larger side). A ratio is printed only when `same_work` is true."""
    checks: dict[str, Any] = {}
    for key in WORK_KEYS:
        a, b = summary["toolgym"][key], summary["trl"][key]
        checks[key] = {"toolgym": a, "trl": b, "rel_diff": abs(a - b) / max(a, b, 1e-9)}
    same = all(c["rel_diff"] <= tolerance for c in checks.values()) and all(
        c["toolgym"] > 0 and c["trl"] > 0 for c in checks.values())
    return {"tolerance": tolerance, "same_work": same, **checks}


def paired_ratio_ci(a: list[float], b: list[float], n: int = 4000, seed: int = 0) -> tuple[float, float]:
    """95 % percentile-bootstrap interval of mean(a) / mean(b), resampling the paired steps (the same tasks on
    both sides, so step difficulty cancels out)."""
    import random

    rng = random.Random(seed)
    k = len(a)
    ratios = []
    for _ in range(n):
        idx = [rng.randrange(k) for _ in range(k)]
        ratios.append(sum(a[i] for i in idx) / sum(b[i] for i in idx))
    ratios.sort()
    return ratios[int(0.025 * n)], ratios[int(0.975 * n) - 1]


def main_tictactoe(args: argparse.Namespace) -> None:
    from rich.console import Console
    from rich.table import Table

    from toolgym_tictactoe import CHECKPOINT

    res: dict[str, Any] = {"config": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}
                           | {"env_args": TTT_ENV_ARGS, "model": "toolgym_tictactoe checkpoint (0.9M, fp32)"}}
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        model = tmp / "model"
        shutil.copytree(CHECKPOINT, model)
        env, res["prompt"] = _ttt_env_and_check(model)
        res["toolgym"] = bench_toolgym_ttt(model, env, args, tmp)
        res["trl"] = bench_trl_ttt(model, args, tmp)
    tg, tr = res["toolgym"]["steps"], res["trl"]["steps"]
    summary: dict[str, dict[str, float]] = {}
    for side, steps in (("toolgym", tg), ("trl", tr)):
        med = statistics.median(s["step_s"] for s in steps)
        tok = _mean(steps, "sampled_tokens")
        summary[side] = {"median_step_s": med, "mean_step_s": _mean(steps, "step_s"),
                         "sampled_tokens_per_step": tok,
                         "tokens_per_s": sum(s["sampled_tokens"] for s in steps) / sum(s["step_s"] for s in steps),
                         "mcp_calls_per_step": _mean(steps, "mcp_calls"),
                         "model_turns_per_step": _mean(steps, "model_turns"),
                         "rollout_s": _mean(steps, "rollout_s"), "generate_s": _mean(steps, "generate_s"),
                         "train_s": _mean(steps, "train_s" if side == "trl" else "update_s"),
                         "mcp_call_latency_sum_s": _mean(steps, "mcp_call_latency_sum_s"),
                         "games_over_per_step": _mean(steps, "games_over"), "reward": _mean(steps, "reward")}
        summary[side]["rollout_minus_generate_s"] = summary[side]["rollout_s"] - summary[side]["generate_s"]
        summary[side]["gen_tokens_per_s"] = (sum(s["sampled_tokens"] for s in steps)
                                             / max(sum(s["generate_s"] for s in steps), 1e-9))
        summary[side]["gen_batches_per_step"] = _mean(steps, "gen_batches")
        summary[side]["gen_mean_batch"] = (sum(s["gen_rows"] for s in steps)
                                           / max(sum(s["gen_batches"] for s in steps), 1))
    # toolgym's continuous batching: rows per decode step (TRL's generate keeps every row of a call in each step)
    summary["toolgym"]["decode_steps_per_step"] = _mean(tg, "decode_steps")
    summary["toolgym"]["mean_decode_rows"] = (sum(s.get("mean_decode_rows", 0) * s.get("decode_steps", 0) for s in tg)
                                              / max(sum(s.get("decode_steps", 0) for s in tg), 1))
    summary["toolgym"]["prefill_s"] = _mean(tg, "prefill_s")
    summary["trl"]["trl_tool_calls_per_step"] = _mean(tr, "trl_tool_calls")
    for k in ("reset_s", "tool_loop_minus_generate_s", "rewards_s"):
        summary["trl"][k] = _mean(tr, k)
    res["summary"] = summary
    res["work_check"] = work_check(summary, args.tolerance)
    same = res["work_check"]["same_work"]

    t = Table(title=f"GRPO step on tic-tac-toe: {args.examples} prompts x {args.group} games, "
                    f"{args.steps} steps after {args.warmup} warm-up, 1 thread")
    for col in ("", "toolgym", "TRL GRPOTrainer"):
        t.add_column(col, justify="right" if col else "left")
    rows = [("median step s", "median_step_s", "{:.2f}"),
            ("mean step s (same tasks per step)", "mean_step_s", "{:.2f}"),
            ("sampled tokens / step", "sampled_tokens_per_step", "{:.0f}"),
            ("sampled tokens / s (whole step)", "tokens_per_s", "{:.0f}"),
            ("MCP tool calls / step", "mcp_calls_per_step", "{:.1f}"),
            ("model turns / step", "model_turns_per_step", "{:.1f}"),
            ("games over / step", "games_over_per_step", "{:.1f}"),
            ("rollout s (mean)", "rollout_s", "{:.2f}"), ("  generation s", "generate_s", "{:.2f}"),
            ("    generate calls / step", "gen_batches_per_step", "{:.1f}"),
            ("    mean rows per generate call", "gen_mean_batch", "{:.1f}"),
            ("    sampled tokens / generation s", "gen_tokens_per_s", "{:.0f}"),
            ("  rest of rollout s (MCP, parsing, scoring)", "rollout_minus_generate_s", "{:.2f}"),
            ("  sum of MCP call latencies s", "mcp_call_latency_sum_s", "{:.3f}"),
            ("forward/backward + optimizer s", "train_s", "{:.2f}"), ("mean reward", "reward", "{:.3f}")]
    for label, key, fmt in rows:
        t.add_row(label, fmt.format(summary["toolgym"][key]), fmt.format(summary["trl"][key]))
    t.add_row("TRL tool calls / step (incl. after game over)", "", f"{summary['trl']['trl_tool_calls_per_step']:.1f}")
    tgs = summary["toolgym"]
    t.add_row("toolgym decode steps / step (rows per step)", f"{tgs['decode_steps_per_step']:.0f} "
              f"({tgs['mean_decode_rows']:.1f})", "")
    t.add_row("toolgym prefill s (in generation s)", f"{tgs['prefill_s']:.2f}", "")
    con = Console()
    con.print(t)
    if same:  # both sides play the same tasks in the same steps: the mean is the paired, whole-run ratio
        ratio = summary["toolgym"]["mean_step_s"] / summary["trl"]["mean_step_s"]
        res["ratio_toolgym_over_trl"] = ratio
        res["ratio_median_step"] = summary["toolgym"]["median_step_s"] / summary["trl"]["median_step_s"]
        res["ratio_per_step"] = [a["step_s"] / b["step_s"] for a, b in zip(tg, tr, strict=True)]
        lo, hi = paired_ratio_ci([a["step_s"] for a in tg], [b["step_s"] for b in tr])
        res["ratio_ci95"] = [lo, hi]
        # each side samples its own games: step time per sampled token corrects for the tokens drawn
        res["ratio_per_sampled_token"] = ((summary["toolgym"]["mean_step_s"] / summary["toolgym"]["sampled_tokens_per_step"])
                                          / (summary["trl"]["mean_step_s"] / summary["trl"]["sampled_tokens_per_step"]))
        per_step = ", ".join(f"{x:.2f}" for x in res["ratio_per_step"])
        con.print(f"ratio toolgym / TRL step time = {ratio:.2f} (mean step, 95 % CI {lo:.2f}-{hi:.2f} over the paired "
                  f"steps; median step {res['ratio_median_step']:.2f}; per sampled token "
                  f"{res['ratio_per_sampled_token']:.2f}; per step {per_step}) -- target <= 0.6")
    else:
        con.print(f"[bold red]not the same work[/] (tolerance {args.tolerance:.0%}): "
                  + ", ".join(f"{k} toolgym {res['work_check'][k]['toolgym']:.1f} vs TRL "
                              f"{res['work_check'][k]['trl']:.1f}" for k in WORK_KEYS)
                  + " -- no ratio printed")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(res, indent=2))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--env", choices=["toy", "tictactoe"], default="toy")
    ap.add_argument("--steps", type=int, default=None, help="measured steps (toy 4, tictactoe 3)")
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--examples", type=int, default=None, help="prompts per step (toy 4, tictactoe 2)")
    ap.add_argument("--group", type=int, default=None, help="rollouts per prompt (toy 8, tictactoe 4)")
    ap.add_argument("--max-tokens", type=int, default=None, help="new tokens per model turn (toy 32, tictactoe 200)")
    ap.add_argument("--tolerance", type=float, default=0.25, help="tictactoe: largest relative difference in "
                    "sampled tokens and MCP calls per step for which a ratio is printed")
    ap.add_argument("--toolgym-batch-wait", type=float, default=None, help="tictactoe: override the toolgym "
                    "engine's batch-gathering window in seconds (HFPolicy batch_wait_s; default: toolgym's 0.005)")
    ap.add_argument("--profile", action="store_true", help="tictactoe: cProfile each side (.prof files beside --out)")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    toy = args.env == "toy"
    for k, toy_v, ttt_v in (("steps", 4, 3), ("examples", 4, 2), ("group", 8, 4), ("max_tokens", 32, 200)):
        if getattr(args, k) is None:
            setattr(args, k, toy_v if toy else ttt_v)
    if args.out is None:
        args.out = Path("runs/bench/bench_grpo.json" if toy else "runs/bench/bench_grpo_tictactoe.json")
    if not toy:
        main_tictactoe(args)
        return
    from toolgym.models.tiny import init_tiny

    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        model = init_tiny(tmp / "tiny", size="tiny", seed=0)
        res = {"config": vars(args) | {"out": str(args.out)}}
        res["toolgym"] = bench_toolgym(model, args, tmp)
        try:
            res["trl"] = bench_trl(model, args, tmp)
        except ImportError as exc:
            res["trl"] = {"error": f"TRL not installed ({exc}); pip install trl==1.16.0"}
    tg = statistics.median(res["toolgym"]["step_s"])
    print("| framework | median step s | completion tokens/seq |")
    print("|---|---|---|")
    print(f"| toolgym | {tg:.2f} | {res['toolgym']['completion_tokens']:.1f} |")
    if "step_s" in res["trl"] and res["trl"]["step_s"]:
        tr = statistics.median(res["trl"]["step_s"])
        print(f"| TRL GRPOTrainer | {tr:.2f} | {res['trl']['completion_tokens'] or float('nan'):.1f} |")
        res["ratio_toolgym_over_trl"] = tg / tr
        print(f"ratio toolgym / TRL = {tg / tr:.2f}")
    else:
        print(res["trl"])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
