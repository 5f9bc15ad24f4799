"""One GRPO step of toolgym vs TRL's `GRPOTrainer` on identical work, measured side by side in one process.

Work: the same tiny model (built fresh with `init_tiny`, same seed), the same single-turn prompts (the digits toy
task: system + user message, reward = share of digits written), `--examples` prompts x `--group` completions per
step, `--max-tokens` new tokens, temperature 1, one optimizer step per batch, no KL, no checkpoints, 1 torch thread
for both (the shared 2-core box; see the Training section of README.md). Reports the median step time after `--warmup` steps,
and the ratio toolgym / TRL. Writes JSON to --out.

    python benchmarks/bench_grpo.py --steps 4 --examples 4 --group 8 --max-tokens 32
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--examples", type=int, default=4)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--out", type=Path, default=Path("runs/bench/bench_grpo.json"))
    args = ap.parse_args()
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
