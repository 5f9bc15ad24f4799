"""Pydantic configs for `toolgym train` (GRPO) and `toolgym sft`. Every field is documented; bad values fail at load
time with a message naming the field, before any model is loaded or rollout played.

A config file is TOML or JSON (`base = "other.toml"` inherits another file); CLI overrides are `key=value` (dotted keys reach nested
dicts, e.g. `env_args.max_random_move_prob=0.25`).
"""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator


class ConfigError(ValueError):
    """A config that cannot run; the message names the field(s)."""


class LoraConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    r: int = Field(8, ge=1, description="LoRA rank.")
    alpha: float = Field(16.0, gt=0, description="LoRA alpha (scale = alpha / r).")
    dropout: float = Field(0.0, ge=0, lt=1, description="LoRA dropout.")
    target_modules: list[str] | str = Field("all-linear", description="Modules to adapt (peft `target_modules`).")


class ModelTrainConfig(BaseModel):
    """Fields shared by SFT and GRPO."""

    model_config = ConfigDict(extra="forbid")
    model: str = Field(..., description="Starting weights: a local HF folder (e.g. a tiny model or SFT output) or a hub name.")
    output_dir: Path = Field(..., description="Run folder: config.json, metrics.jsonl, checkpoints/, final/.")
    lora: LoraConfig | None = Field(None, description="Train a LoRA adapter instead of all weights (None = full fine-tune).")
    learning_rate: float = Field(1e-5, gt=0, le=1.0, description="Peak learning rate (AdamW).")
    lr_schedule: Literal["constant", "linear", "cosine"] = Field("constant", description="Decay after warm-up.")
    warmup_steps: int = Field(0, ge=0, description="Linear warm-up steps.")
    weight_decay: float = Field(0.0, ge=0, description="AdamW weight decay.")
    adam_betas: tuple[float, float] = Field((0.9, 0.99), description="AdamW betas.")
    max_grad_norm: float = Field(1.0, gt=0, description="Gradient clipping (global L2 norm).")
    micro_batch_size: int = Field(8, ge=1, description="Sequences per forward/backward; gradients accumulate over the step.")
    max_seq_len: int = Field(2048, ge=16, description="Sequences longer than this are cut (tail tokens dropped from the loss).")
    seed: int = Field(0, description="Seed for data order, sampling and init of new weights.")
    device: str = Field("auto", description="auto | cpu | cuda[:i].")
    dtype: str = Field("auto", description="auto (fp32 on CPU, bf16 on CUDA) | float32 | bfloat16 | float16.")
    num_threads: int | None = Field(None, ge=1, description="torch CPU threads (None = torch default).")
    save_every: int = Field(1, ge=1, description="Checkpoint every N optimizer steps (1 = a SIGKILL loses at most the step in flight).")
    keep_checkpoints: int = Field(2, ge=1, description="Checkpoints kept on disk (oldest deleted).")
    save_merged: bool = Field(True, description="With LoRA, also save merged full weights at the end (final/).")
    report_to: list[Literal["tensorboard", "wandb", "trackio"]] = Field(
        default_factory=list, description="Extra metric sinks besides metrics.jsonl.")


class TaskPhase(BaseModel):
    """One phase of a task schedule: from `from_step` on, the task pool is rebuilt with these env arguments."""

    model_config = ConfigDict(extra="forbid")
    from_step: int = Field(..., ge=0, description="First step (0-based) of this phase.")
    env_args: dict[str, Any] = Field(default_factory=dict, description="Overrides of the run's env_args for the pool "
        "of this phase (e.g. the opponent's random-move range).")


class Bounds(BaseModel):
    """A range a periodic-eval metric must lie in (`best_constraints`): `min` <= value <= `max`, either end open."""

    model_config = ConfigDict(extra="forbid")
    min: float | None = None
    max: float | None = None

    @model_validator(mode="after")
    def _check(self) -> Bounds:
        if self.min is None and self.max is None:
            raise ValueError("a constraint needs min, max or both")
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError(f"a constraint's min ({self.min}) is above its max ({self.max})")
        return self

    def holds(self, value: float) -> bool:
        return (self.min is None or value >= self.min) and (self.max is None or value <= self.max)


class GRPOConfig(ModelTrainConfig):
    """`toolgym train CONFIG`: the GRPO loop."""

    env: str = Field(..., description="Environment name (entry point) or env config path.")
    env_args: dict[str, Any] = Field(default_factory=dict, description="Keyword arguments of the environment.")
    num_examples: int = Field(1000, ge=1, description="Size of the task pool built by env.build_dataset (seeded).")
    dataset_seed: int = Field(0, description="Seed of env.build_dataset.")
    skip_invalid_tasks: bool = Field(False, description="Leave out tasks that fail `toolgym check` (their expected "
                                     "calls do not fit the servers' tool schemas) instead of refusing to start.")
    max_steps: int = Field(100, ge=1, description="Optimizer steps.")
    max_minutes: float | None = Field(None, gt=0, description="A wall-clock budget: stop after the first step that "
        "ends past this many minutes of the run (this process's; a periodic eval counts), with a checkpoint of that "
        "step and `final`, so that a run on a leased machine ends inside its lease; the learning-rate schedule still "
        "spans max_steps, and a resume (--resume) continues toward max_steps with a fresh budget. None = no budget.")
    batch_size: int = Field(8, ge=1, description="Examples (groups) per step; each gets rollouts_per_example rollouts.")
    rollouts_per_example: int = Field(8, ge=2, description="Group size G (>= 2: advantages are relative to the group).")
    loss_type: Literal["grpo", "dr_grpo", "dapo", "cispo", "gspo"] = Field(
        "grpo", description="Policy loss variant, see toolgym.train.loss.")
    epsilon: float = Field(0.2, gt=0, lt=1, description="Lower clip eps (ratio >= 1-eps).")
    epsilon_high: float | None = Field(None, gt=0, description="Upper clip eps (None = epsilon; dapo default 0.28).")
    epsilon_high_is: float = Field(5.0, gt=0, description="CISPO: the IS weight is clipped at 1+this.")
    scale_rewards: bool = Field(False, description="Divide advantages by the group's reward std (Dr.GRPO: False).")
    kl_coef: float = Field(0.0, ge=0, description="Weight of the k3 KL to the reference (the starting weights); 0 = no reference model.")
    old_logprobs: Literal["sampler", "trainer"] = Field(
        "sampler", description="Behaviour log-probs in the ratio: the sampler's (corrects off-policy drift) or the trainer's recomputed before the update.")
    pg_tokens: Literal["all", "answer"] = Field(
        "all", description="Tokens the policy-gradient loss covers: every sampled token, or each turn's answer only "
        "(what follows `reasoning_end`; the reasoning stays in the context, and the KL anchor, if any, still covers "
        "every sampled token). A sequence-level reward spread over a long reasoning is mostly noise at small "
        "batches; 'answer' puts it on the tokens that act (docs/training).")
    reasoning_end: str = Field("</think>", min_length=1, description="pg_tokens='answer': the text that ends a "
        "turn's reasoning (its first occurrence in the turn; e.g. a verdict's lead-in such as 'I play'); a turn "
        "without it is trained whole.")
    updates_per_batch: int = Field(1, ge=1, description="Optimizer steps per rollout batch (>1 re-uses the batch, PPO-style).")
    temperature: float = Field(1.0, gt=0, description="Sampling temperature (the trainer uses the same for log-probs).")
    top_p: float = Field(1.0, gt=0, le=1, description="Sampling top-p.")
    max_tokens: int = Field(128, ge=1, description="Max new tokens per assistant turn.")
    concurrency: int = Field(64, ge=1, description="Rollouts in flight (batched together by the engine).")
    drop_errored: bool = Field(True, description="Drop groups containing an errored rollout (else error = reward 0).")
    skip_constant_groups: bool = Field(False, description="Leave zero-advantage groups out of the backward pass (faster; same gradient except normalisers).")
    engine: Literal["hf", "vllm", "vllm-server"] = Field(
        "hf", description="Sampler: hf = in-process transformers sharing the trainer's weights (no copy; the sync drops its KV cache); "
        "vllm = in-process vLLM engine, its weights updated in place after every optimizer step; vllm-server = a "
        "vLLM OpenAI server (engine_args.base_url, started with VLLM_SERVER_DEV_MODE=1) sampling token-exact, "
        "weights pushed after every step through a safetensors folder both sides can read.")
    engine_args: dict[str, Any] = Field(default_factory=dict, description="Extra options of the sampler (checked by name): vllm -> "
        "toolgym.policies.vllm_engine.VLLMPolicy (gpu_memory_utilization, max_model_len, enable_sleep_mode...); "
        "vllm-server -> toolgym.policies.vllm_server.VLLMServerPolicy (base_url, served_model_name, api_key) plus "
        "sync_dir (default OUTPUT/weights_sync).")
    deterministic: bool = Field(False, description="hf engine: batch generation in lock-step (a batch starts once "
        "every game in flight has asked; rows never join a running batch) and seed each rollout by (seed, step, "
        "task, rollout), so a run's games and weights repeat to the last bit when it is run again on the same "
        "machine with the same num_threads. Without it a row's log-probabilities depend on which rows happened "
        "to decode beside it, and re-runs drift apart after some tens of steps.")
    sync_weights: bool = Field(True, description="vllm engine: push the trainer's weights after each step (False "
        "only to measure the drift of a stale sampler).")
    task_schedule: list[TaskPhase] = Field(default_factory=list, description="A curriculum: phases, each "
        "rebuilding the task pool from its from_step on with env_args overrides (seeded by dataset_seed + phase "
        "number), e.g. an opponent whose random-move probability is annealed from high to 0. Only the task rows "
        "change: the rollouts still run through the run's env, so the phase's arguments must be ones the env puts "
        "into its task rows (tic-tac-toe: min/max_random_move_prob, num_groups, starts).")
    restart_share: float = Field(0.0, ge=0, le=1, description="The share of each step's groups that restart "
        "from a state the previous step's rollouts reached (the env's restart_tasks hook; tic-tac-toe: a board a "
        "lost game showed the model) instead of a pool task: the group's samples then differ only from that "
        "decision on, so its advantage credits that decision. The first step of a run (and of a resume) has no "
        "previous rollouts and draws only pool tasks.")
    probe_games: int = Field(0, ge=0, description="With restart_share: each step first plays this many pool tasks "
        "greedily (temperature 0) with the current weights -- probes, never trained on -- and offers them to the "
        "env's restart_tasks before the previous step's rollouts, marked `probe` in their task, so the states "
        "greedy play reaches and loses on (the ones evals and users meet) get restarted even where the sampled "
        "games seldom go. Their metrics are logged as probe/...; 0: off.")
    save_rollouts: bool = Field(False, description="Append every rollout of every step (task, messages, calls, "
        "rewards, metrics; no tokens) to OUTPUT/rollouts.jsonl.gz, one gzip member per step: what the run's games "
        "visited, for analyses after training.")
    symmetry_images: int = Field(0, ge=0, le=7, description="Also train on up to this many images of each trained "
                                 "sequence under the env's symmetries (`env.symmetric_images`: a rotated or "
                                 "mirrored game, equally likely and scored the same), with its advantage -- every "
                                 "decision's credit in every orientation at once, as AlphaZero's symmetric "
                                 "augmentation. Images are re-rendered text, so their behaviour log-probs are the "
                                 "trainer's own before the update; 0: off.")
    ema_decay: float = Field(0.0, ge=0, lt=1, description="Keep an exponential moving average of the trained "
        "weights, updated after every optimizer step (ema = decay * ema + (1 - decay) * weights: about "
        "1 / (1 - decay) steps, 0.9 = ten); the sampler keeps the live weights, while periodic evals, `final/` and "
        "each checkpoint's `ema/` hold the average (`final_live/`: the last weights). 0 = off.")
    eval_every: int = Field(0, ge=0, description="Every N steps run a greedy eval on eval_examples fresh tasks (0 = off).")
    eval_examples: int = Field(32, ge=1, description="Tasks per periodic eval.")
    eval_env_args: dict[str, Any] = Field(default_factory=dict, description="Env argument overrides for periodic evals.")
    eval_exact: bool = Field(False, description="Make the periodic eval exact instead of sampled: the env's "
        "`exact_eval` (every episode the greedy policy can meet, weighted by its chance; tic-tac-toe: whole games "
        "against the optimal or the random opponent), logged as eval/exact/...; eval_examples is then unused. Needs "
        "eval_every.")
    eval_sets: dict[str, dict[str, Any]] = Field(default_factory=dict, description="More periodic evals, by name: "
        "each runs with every periodic eval, as it does (sampled on the same task seed, or exact), with these env "
        "argument overrides on top of eval_env_args, and logs eval/NAME/... (Hugging Face's eval_dataset as a "
        "dict). E.g. {random = {min_random_move_prob = 1, max_random_move_prob = 1}} beside an exact eval "
        "against the optimal opponent logs eval/random/exact/win; best_metric may name it. Names: letters, "
        "digits, _ and -, not exact, metrics or rewards.")
    best_metric: str | dict[str, float] | None = Field(None, description="Keep the best weights by this "
        "periodic-eval metric (as Hugging Face's metric_for_best_model), e.g. \"eval/exact/loss\" or "
        "\"eval/metrics/loss\", or by a weighted sum of several, {metric = weight, ...} (e.g. {\"eval/exact/loss\" "
        "= 1, \"eval/random/exact/win\" = -1}: losses against one opponent less wins against another): each eval "
        "that is at least as good as the best so far (a tie goes to the later step) writes OUTPUT/best/ (HF "
        "weights + best.json: step, metric, value). Needs eval_every. Lower is better unless greater_is_better.")
    greater_is_better: bool = Field(False, description="best_metric: higher values are better.")
    best_constraints: dict[str, Bounds] = Field(default_factory=dict, description="best_metric among the evals "
        "that meet these: {metric = {min = ..., max = ...}, ...}, each a periodic-eval metric as best_metric names "
        "them (e.g. {\"eval/exact/loss\" = {max = 0.05}} with best_metric = \"eval/random/exact/win\" and "
        "greater_is_better: the most wins against random play among the evals under 5 % losses). An eval that "
        "misses one is no candidate (logged best/infeasible = 1) and, with revert_to_best, is worse than any kept "
        "best.")
    best_from_step: int = Field(0, ge=0, description="best_metric: evals before this step neither count as best "
        "nor trigger revert_to_best (an early phase that is worse by design, e.g. an annealed opponent).")
    revert_to_best: bool = Field(False, description="With best_metric: when a periodic eval is worse than the best, "
        "put the best weights and optimizer state back and train on from them (population-based training's exploit "
        "step, with a population of one); the learning-rate schedule, the RNGs and the env's state (e.g. its restart "
        "buffer) go on. The run then ends on its best weights if its last step is an eval step. On a sampled eval "
        "this follows the eval's noise; on an exact one (eval_exact) it does not.")

    @model_validator(mode="after")
    def _check(self) -> GRPOConfig:
        if self.epsilon_high is None:
            self.epsilon_high = 0.28 if self.loss_type == "dapo" else self.epsilon
        if self.warmup_steps > self.max_steps:
            raise ValueError(f"warmup_steps ({self.warmup_steps}) > max_steps ({self.max_steps})")
        starts = [p.from_step for p in self.task_schedule]
        if starts and (starts[0] != 0 or any(b <= a for a, b in zip(starts, starts[1:], strict=False))):
            raise ValueError(f"task_schedule: from_step must start at 0 and increase (got {starts})")
        if self.eval_exact and not self.eval_every:
            raise ValueError("eval_exact makes the periodic eval exact: set eval_every too")
        for name in self.eval_sets:
            if not re.fullmatch(r"[A-Za-z0-9_-]+", name) or name in ("exact", "metrics", "rewards"):
                raise ValueError(f"eval_sets: {name!r} is not a name for an eval (letters, digits, _ and -; not "
                                 "exact, metrics or rewards, which the periodic eval logs itself)")
        if self.eval_sets and not self.eval_every:
            raise ValueError("eval_sets run with the periodic eval: set eval_every too")
        if self.best_metric is not None:
            if not self.eval_every:
                raise ValueError("best_metric reads the periodic eval: set eval_every too")
            names = [self.best_metric] if isinstance(self.best_metric, str) else list(self.best_metric)
            if not names:
                raise ValueError("best_metric: an empty weighted sum")
            for metric in [*names, *self.best_constraints]:
                parts = metric.split("/")
                if len(parts) > 2 and parts[1] in self.eval_sets:  # eval/NAME/...: that eval set's metric
                    parts = [parts[0], *parts[2:]]
                exact = parts[1:2] == ["exact"]
                if exact != self.eval_exact or parts[0] != "eval" or len(parts) < 2:
                    logs = "eval/[SET/]exact/..." if self.eval_exact else "eval/[SET/]... (eval_exact is off)"
                    label = "best_metric" if metric in names else "best_constraints"
                    raise ValueError(f"{label} {metric!r}: the periodic eval logs {logs}")
            if self.ema_decay:
                raise ValueError("best_metric with ema_decay: the eval scores the average while the optimizer "
                                 "steps the live weights; use one or the other")
        elif self.revert_to_best or self.best_from_step or self.greater_is_better or self.best_constraints:
            raise ValueError("revert_to_best, best_from_step, greater_is_better and best_constraints act on "
                             "best_metric: set it too")
        if self.deterministic and self.engine != "hf":
            raise ValueError(f"deterministic needs engine = \"hf\" (a vLLM sampler batches on its own), not "
                             f"{self.engine!r}")
        if self.engine_args:  # checked by name like --model-arg: a misspelled one fails here, not silently
            from toolgym.policies.base import check_policy_options

            if self.engine == "hf":
                raise ValueError("engine_args apply to engine = \"vllm\" or \"vllm-server\", not \"hf\"")
            if self.engine == "vllm":
                from toolgym.policies.vllm_engine import VLLMPolicy as sampler
            else:
                from toolgym.policies.vllm_server import VLLMServerPolicy as sampler
            args = {k: v for k, v in self.engine_args.items() if not (self.engine == "vllm-server" and k == "sync_dir")}
            check_policy_options(sampler, args, f"engine_args ({self.engine})")
        return self


class SFTConfig(ModelTrainConfig):
    """`toolgym sft`: supervised fine-tuning on chat-with-tools rows (assistant-only loss)."""

    data: list[Path] = Field(..., min_length=1, description="JSONL files (from `toolgym synth`) or HF dataset folders.")
    epochs: float = Field(3.0, gt=0, description="Passes over the data.")
    batch_size: int = Field(16, ge=1, description="Sequences per optimizer step (split into micro-batches).")
    learning_rate: float = Field(1e-3, gt=0, le=1.0, description="Peak learning rate (AdamW).")


def _set_dotted(d: dict[str, Any], key: str, value: Any) -> None:
    parts = key.split(".")
    for p in parts[:-1]:
        d = d.setdefault(p, {})
        if not isinstance(d, dict):
            raise ConfigError(f"override {key!r}: {p!r} is not a table")
    d[parts[-1]] = value


def parse_overrides(pairs: list[str] | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for p in pairs or []:
        if "=" not in p:
            raise ConfigError(f"override {p!r}: expected key=value")
        k, v = p.split("=", 1)
        try:
            val = json.loads(v)
        except json.JSONDecodeError:
            val = v
        _set_dotted(out, k.strip(), val)
    return out


def _merge(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    out = dict(a)
    for k, v in b.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def read_config_file(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise ConfigError(f"config file {path} not found")
    text = path.read_text()
    try:
        data = json.loads(text) if path.suffix == ".json" else tomllib.loads(text)
    except (json.JSONDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{path}: cannot parse: {exc}") from exc
    base = data.pop("base", None)  # `base = "other.toml"`: inherit, then override
    if base:
        data = _merge(read_config_file((path.parent / base).resolve()), data)
    return data


def load_config(cls: type[BaseModel], path: Path | None, overrides: list[str] | dict[str, Any] | None = None) -> Any:
    """File + overrides -> validated config, or ConfigError listing every bad field."""
    data = read_config_file(path) if path is not None else {}
    ov = overrides if isinstance(overrides, dict) else parse_overrides(overrides)
    data = _merge(data, ov)
    try:
        return cls.model_validate(data)
    except ValidationError as exc:
        lines = []
        for e in exc.errors():
            loc = ".".join(str(x) for x in e["loc"]) or "(config)"
            lines.append(f"  {loc}: {e['msg']}" + (f" (got {e['input']!r})" if "input" in e and not isinstance(e["input"], dict) else ""))
        raise ConfigError(f"invalid {cls.__name__}" + (f" in {path}" if path else "") + ":\n" + "\n".join(lines)) from None


def describe(cls: type[BaseModel]) -> str:
    """Every field with its default and description (for `--help-config` and the docs)."""
    rows = []
    for name, f in cls.model_fields.items():
        default = "required" if f.is_required() else repr(f.get_default(call_default_factory=True))
        rows.append(f"{name} = {default}\n    {f.description or ''}")
    return "\n".join(rows)
