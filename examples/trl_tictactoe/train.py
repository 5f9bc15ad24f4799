"""GRPO on tic-tac-toe with TRL's `GRPOTrainer` and toolgym's `TRLEnv`, in one process or many (accelerate).

    python examples/trl_tictactoe/train.py --max-steps 2                       # one process
    ACCELERATE_USE_CPU=1 accelerate launch --multi_gpu --num_processes 2 --num_machines 1 \
        --mixed_precision no --dynamo_backend no examples/trl_tictactoe/train.py --max-steps 4   # two, CPU + gloo

(`--multi_gpu` only picks accelerate's torchrun launcher; with `--cpu` accelerate 1.15 starts ONE process unless
it has an `mpirun` hostfile. The script trains on CPU whenever CUDA is absent or `--cpu` is given, and accelerate then
sets up DDP over gloo. See README.md beside this file for multi-node lines.)

Every process builds its own `TRLEnv` (its own `mcp-server-tictactoe` subprocess, MCP sessions and event loop); TRL
shards each step's rollouts over the processes, gathers the rewards for the group advantages and all-reduces the
gradients (DDP). What the run leaves in `--output-dir`:

* `checkpoint-N/` (every `--save-steps`): model, optimizer, scheduler, trainer state, one RNG state per rank.
  `--resume` continues from the latest one (raise `--max-steps` to go further).
* `metrics.jsonl`: TRL's log of every step (rewards per toolgym rubric entry, tool-call accuracy rates, lengths,
  loss), written by rank 0 only. TRL's logged values are already gathered over all ranks.
* `ranks/rank{R}.jsonl`: one line per rank at the start and after every optimizer step: a SHA-256 of the model's
  parameters (identical on every rank if the gradients were synchronised), a SHA-256 of this rank's rollouts of the
  step (tasks, calls, server replies: they differ between ranks), the MCP tool calls it made and the PIDs of the MCP
  servers it runs (its own). `tests/train/test_trl_multiprocess.py` reads them.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=None,
                    help="HF folder or hub name (default: the committed tiny tic-tac-toe model of toolgym-tictactoe)")
    ap.add_argument("--output-dir", type=Path, default=Path("runs/trl_tictactoe"))
    ap.add_argument("--max-steps", type=int, default=4)
    ap.add_argument("--per-device-batch", type=int, default=4, help="rollouts per process per step")
    ap.add_argument("--num-generations", type=int, default=4,
                    help="rollouts per prompt (group size); must divide per-device-batch x processes")
    ap.add_argument("--max-completion-length", type=int, default=1024,
                    help="tokens of a whole multi-turn completion (model turns + tool results)")
    ap.add_argument("--learning-rate", type=float, default=1e-4)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--min-random-move-prob", type=float, default=0.0)
    ap.add_argument("--max-random-move-prob", type=float, default=0.5)
    ap.add_argument("--num-examples", type=int, default=256)
    ap.add_argument("--save-steps", type=int, default=1)
    ap.add_argument("--resume", action="store_true", help="continue from the latest checkpoint in --output-dir")
    ap.add_argument("--cpu", action="store_true", help="train on CPU even if CUDA is available")
    ap.add_argument("--bf16", action="store_true", help="bf16 weights and autocast (GPUs; CPU training stays fp32)")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads per process (tiny models: 1)")
    ap.add_argument("--seed", type=int, default=0)
    return ap.parse_args(argv)


def weights_sha(model: Any) -> str:
    """SHA-256 over every parameter (name + fp32 bytes): equal on two ranks only if their weights are bit-identical."""
    h = hashlib.sha256()
    for name, p in sorted(model.named_parameters(), key=lambda x: x[0]):
        h.update(name.encode())
        h.update(p.detach().to("cpu").contiguous().numpy().tobytes())
    return h.hexdigest()


def mcp_server_pids() -> list[int]:
    """PIDs of the MCP server processes started by this process (its TRLEnv's stdio servers)."""
    import psutil

    out = []
    for child in psutil.Process().children(recursive=True):
        try:
            if any("mcp-server" in part for part in child.cmdline()):
                out.append(child.pid)
        except psutil.Error:
            continue
    return sorted(out)


def prepare_tokenizer(tok: Any) -> Any:
    """TRL parses tool calls with a response template it knows for the chat templates it ships. toolgym's tiny models
    use `toolgym.models.tiny.CHAT_TEMPLATE` (Qwen2.5-style, Hermes `<tool_call>` JSON, `<think>` kept in every turn,
    prefix-preserving): TRL's Qwen3 response template parses exactly that, so the model keeps its own template."""
    from trl.chat_template_utils import qwen3_template

    from toolgym.models.tiny import CHAT_TEMPLATE

    if getattr(tok, "response_template", None) is None and tok.chat_template == CHAT_TEMPLATE:
        tok.response_template = qwen3_template
    tok.padding_side = "left"
    return tok


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from toolgym.integrations.trl import TRLEnv

    torch.set_num_threads(args.threads)  # tiny models: more threads only thrash a shared CPU
    use_cpu = args.cpu or not torch.cuda.is_available()
    model_path = args.model
    if model_path is None:
        from toolgym_tictactoe import CHECKPOINT

        model_path = str(CHECKPOINT)

    # One TRLEnv per process: its own MCP server, sessions and event loop.
    tg = TRLEnv("tictactoe", min_random_move_prob=args.min_random_move_prob,
                max_random_move_prob=args.max_random_move_prob, num_groups=4)
    out: Path = args.output_dir

    class RunLog(TrainerCallback):
        """rank{R}.jsonl on every rank (weights hash, own MCP calls and servers); metrics.jsonl on rank 0 only."""

        def _rank_line(self, targs: Any, state: Any, model: Any, event: str) -> None:
            episodes = [ep for ep, _ in tg.episodes()]  # this step's rollouts (reset starts the next)
            calls = [c for ep in episodes for c in ep.calls]
            games = [[ep.task, [(c.name, c.arguments, c.result) for c in ep.calls]] for ep in episodes]
            line = {"event": event, "step": state.global_step, "rank": targs.process_index,
                    "world_size": targs.world_size, "pid": os.getpid(), "sha256": weights_sha(model),
                    "rollouts_sha256": hashlib.sha256(json.dumps(games, sort_keys=True).encode()).hexdigest(),
                    "mcp_calls": len(calls), "mcp_calls_ok": sum(c.exec_ok for c in calls),
                    "mcp_servers": mcp_server_pids(), "reward_errors": len(tg.errors), "time": time.time()}
            d = out / "ranks"
            d.mkdir(parents=True, exist_ok=True)
            with open(d / f"rank{targs.process_index}.jsonl", "a") as f:
                f.write(json.dumps(line) + "\n")

        def on_train_begin(self, targs, state, control, model=None, **kw):  # type: ignore[no-untyped-def]
            self._rank_line(targs, state, model, "begin")

        def on_step_end(self, targs, state, control, model=None, **kw):  # type: ignore[no-untyped-def]
            self._rank_line(targs, state, model, "step")

        def on_log(self, targs, state, control, logs=None, **kw):  # type: ignore[no-untyped-def]
            if state.is_world_process_zero and logs:
                with open(out / "metrics.jsonl", "a") as f:
                    f.write(json.dumps({"step": state.global_step, **logs}) + "\n")

    try:
        tok = prepare_tokenizer(AutoTokenizer.from_pretrained(model_path))
        bf16 = args.bf16 and not use_cpu
        model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.bfloat16 if bf16 else torch.float32)
        config = GRPOConfig(
            output_dir=str(out), use_cpu=use_cpu, bf16=bf16, seed=args.seed, max_steps=args.max_steps,
            learning_rate=args.learning_rate, per_device_train_batch_size=args.per_device_batch,
            num_generations=args.num_generations, gradient_accumulation_steps=1,
            max_completion_length=args.max_completion_length, temperature=args.temperature, beta=0.0,
            reward_weights=tg.reward_weights(), max_tool_calling_iterations=tg.max_turns,
            lr_scheduler_type="constant",  # a resumed run with a larger --max-steps keeps learning (linear decay
            # would have left the optimizer at lr 0 in the last checkpoint)
            logging_steps=1, report_to=[], disable_tqdm=True, save_strategy="steps", save_steps=args.save_steps,
            dataloader_num_workers=0,
        )
        trainer = GRPOTrainer(model=model, processing_class=tok, args=config, reward_funcs=tg.reward_funcs(),
                              train_dataset=tg.dataset(n=args.num_examples, seed=args.seed),
                              environment_factory=tg.environment_factory, callbacks=[RunLog()])
        trainer.train(resume_from_checkpoint=True if args.resume else None)
        if trainer.is_world_process_zero():
            print(f"done: step {trainer.state.global_step}, metrics in {out / 'metrics.jsonl'}", flush=True)
    finally:
        tg.close()


if __name__ == "__main__":
    main()
