"""The GRPO loop, colocated: the in-process transformers engine samples with the very model object being trained
(no weight copy), then the trainer takes one optimizer step on the same weights. With `engine = "vllm"` an
in-process vLLM engine samples instead and gets the new weights in place after every step (`sync_sampler`).

One step:
  1. examples: `step_examples(step)` -- a stratified slice of the task pool (every difficulty group present);
  2. rollouts: `rollouts_per_example` per example through the env (`run_rollouts`, batched generation), sampling
     seeded by (seed, step) so a resumed step replays the same games;
  3. `update`, as named steps:
     a. `select_groups`: rewards from the env's rubric -> group-relative advantages (`loss.group_advantages`);
        groups with an errored rollout dropped, zero-advantage sequences optionally skipped;
     b. `micro_batches`: the exact sampled tokens (`Trajectory.tokens`: ids, assistant mask, sampler logprobs)
        padded into `MicroBatch`es, each token weighted with the whole step's normalisers (`loss.token_weights`);
        with `symmetry_images`, also each trained episode's images under the env's symmetries (`images`: rendered
        by the chat template, the episode's advantage, behaviour log-probs the trainer's own);
     c. `train_step`, per micro-batch: trainer log-probs, drift vs the sampler (first pass), the reference's
        log-probs for the KL, `loss.policy_loss`, backward (the gradients accumulate);
     d. `optimizer_step`: grad clip, AdamW, schedule, the weights' EMA if `ema_decay` (c and d run
        `updates_per_batch` times on the same batch);
     e. `sync_sampler`: hf -> `policy.weights_changed()` (drops KV the engine parked under the old weights);
        vllm -> `update_weights` in place; vllm-server -> reload from a safetensors folder;
  4. metrics line (rewards per function, win/draw/loss, tool-call validity, lengths, clip/KL, trainer-vs-sampler
     drift, timings) -> metrics.jsonl; checkpoint.
"""

from __future__ import annotations

import copy
import logging
import math
import random
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toolgym.env import StatefulToolEnv
from toolgym.train.config import GRPOConfig
from toolgym.train.data import answer_only, pad_batch, step_examples
from toolgym.train.ema import EMA_FILE, WeightEMA
from toolgym.train.loss import group_advantages, masked_logprobs, policy_loss, token_weights
from toolgym.train.runstate import (
    MetricsLog,
    load_model,
    load_trainer_state,
    make_optimizer,
    prepare_run,
    recover_swap,
    save_checkpoint,
    save_hf,
    swap_in,
)
from toolgym.types import TokenTrace, Trajectory

if TYPE_CHECKING:
    import torch

BEST_DIR = "best"  # best_metric's folder in the run's output_dir


def recover_best(folder: Path) -> None:
    """Finish a `write_best` swap a kill interrupted (`runstate.recover_swap`; best.json is written last)."""
    recover_swap(folder, "best.json")


RESUME_KEYS = ("model", "env", "env_args", "num_examples", "dataset_seed", "batch_size", "rollouts_per_example",
               "loss_type", "lora", "seed")


def rollout_metrics(trajs: list[Trajectory]) -> dict[str, float]:
    """Per-step means of rewards (per function), env metrics (win/draw/loss...), tool-call validity and lengths."""
    ok = [t for t in trajs if t.error is None]
    m: dict[str, float] = {"rollouts": len(trajs), "errors": len(trajs) - len(ok)}
    if not ok:
        return m
    rs = [t.reward for t in ok]
    m["reward"] = statistics.fmean(rs)
    m["reward_std"] = statistics.pstdev(rs)
    for k in sorted({k for t in ok for k in t.rewards}):
        m[f"rewards/{k}"] = statistics.fmean(t.rewards.get(k, 0.0) for t in ok)
    for k in sorted({k for t in ok for k in t.metrics}):  # over the rollouts a metric applies to
        m[f"metrics/{k}"] = statistics.fmean(t.metrics[k] for t in ok if k in t.metrics)
    calls = [c for t in ok for c in t.calls]
    m["tool_call_valid"] = sum(c.exec_ok for c in calls) / len(calls) if calls else 0.0
    m["invalid_rate"] = statistics.fmean(
        float(any(not c.exec_ok for c in t.calls) or any(not x.get("parse_ok", True) for x in t.turns) or not t.calls)
        for t in ok)
    m["turns"] = statistics.fmean(len(t.turns) for t in ok)
    toks = [t.tokens for t in ok if t.tokens is not None]
    if toks:
        m["completion_tokens"] = statistics.fmean(sum(x.mask) for x in toks)
        m["seq_len"] = statistics.fmean(len(x) for x in toks)
        m["seq_len_max"] = max(len(x) for x in toks)
    return m


def _lr_of(sched: Any) -> float:
    return float(sched.get_last_lr()[0])


@dataclass
class MicroBatch:
    """Sequences of one forward/backward, right-padded to a common length T (cut at max_seq_len). [B, T] unless
    noted; `pg_mask` and `sampled_mask` are 0 at position 0 (it has no prediction) and on padding."""

    ids: torch.Tensor  # token ids (pad id past each sequence's end)
    attn: torch.Tensor  # attention mask: 1 on real tokens
    pg_mask: torch.Tensor  # the policy gradient's tokens: every sampled token, or each turn's answer (pg_tokens)
    sampled_mask: torch.Tensor  # every sampled token: the log-prob window and the KL anchor's tokens
    sampler_logp: torch.Tensor  # the sampler's log-prob of each sampled token (0 elsewhere): the drift's baseline
    old_logp: torch.Tensor  # behaviour log-probs in the ratio: sampler_logp, or the trainer's before the update
    adv: torch.Tensor  # [B] group-relative advantage of each sequence
    pg_weights: torch.Tensor  # each token's weight in the policy term (token_weights over pg_mask, step normalisers)
    kl_weights: torch.Tensor  # each token's weight in the KL term (over sampled_mask; pg_weights when they agree)
    image: bool = False  # symmetric images (not sampled): old_logp is the trainer's before the update, no drift


@dataclass
class Totals:
    """Sums over the micro-batches of every pass of one update: loss stats weighted by policy-gradient tokens; the
    drift (trainer before the update vs sampler, over the policy-gradient tokens) from the first pass only."""

    tokens: float = 0.0
    clip_frac_sum: float = 0.0
    kl_sum: float = 0.0
    ratio_sum: float = 0.0
    drift_abs_sum: float = 0.0
    drift_max: float = 0.0
    drift_kl_sum: float = 0.0  # k1 estimate of KL(sampler || trainer)
    drift_tokens: float = 0.0  # the policy-gradient tokens the drift was measured on (sampled sequences only)

    def add_loss_stats(self, st: dict[str, Any]) -> None:
        self.clip_frac_sum += st["clip_frac"] * st["tokens"]
        self.kl_sum += st["kl"] * st["tokens"]
        self.ratio_sum += st["ratio_mean"] * st["tokens"]
        self.tokens += st["tokens"]

    def add_drift(self, logp: torch.Tensor, b: MicroBatch) -> None:
        d = (logp - b.sampler_logp) * b.pg_mask
        self.drift_abs_sum += float(d.abs().sum())
        self.drift_max = max(self.drift_max, float(d.abs().max()))
        self.drift_kl_sum += float((-d).sum())
        self.drift_tokens += float(b.pg_mask.sum())

    def stats(self, passes: int) -> dict[str, float]:
        tok = max(self.tokens, 1.0)
        n0 = tok / passes  # tokens of one pass
        nd = max(self.drift_tokens, 1.0)
        return {"clip_frac": self.clip_frac_sum / tok, "kl_ref": self.kl_sum / tok, "ratio_mean": self.ratio_sum / tok,
                "drift_abs": self.drift_abs_sum / nd, "drift_max": self.drift_max,
                "drift_kl": self.drift_kl_sum / nd, "train_tokens": n0}


def inert_phase_args(cfg: GRPOConfig) -> list[str]:
    """The `task_schedule[k].env_args.KEY` entries that change no task row. A phase rebuilds only the task pool, from
    an env built with its arguments; the rollouts keep the run's env, so an option that acts in the env's hooks
    (a reward weight, a transport) and not through the rows it builds would silently do nothing. A key counts as
    inert when the phase's pool is the same with the key at the run's value (its `env_args` entry, else the env's
    declared default); one whose run value makes the env refuse the other arguments is not inert."""
    from toolgym.options import EMPTY, declared_options
    from toolgym.registry import env_factory, load_env

    declared = declared_options(env_factory(cfg.env)) or {}
    out = []
    for k, phase in enumerate(cfg.task_schedule):
        args = {**cfg.env_args, **phase.env_args}
        rows: list[dict[str, Any]] | None = None
        for key, value in phase.env_args.items():
            run = dict(args)
            if key in cfg.env_args:
                run[key] = cfg.env_args[key]
            elif key in declared and declared[key].default is not EMPTY:
                run.pop(key)
                if declared[key].default == value:
                    continue  # the default said again
            else:
                continue
            if run == args:
                continue
            try:
                other = load_env(cfg.env, **run).build_dataset(cfg.num_examples, seed=cfg.dataset_seed + k)
            except (ValueError, TypeError):
                continue  # the phase's value is needed for its other arguments to be accepted
            if rows is None:
                rows = load_env(cfg.env, **args).build_dataset(cfg.num_examples, seed=cfg.dataset_seed + k)
            if other == rows:
                out.append(f"task_schedule[{k}].env_args.{key}")
    return out


class GRPOTrainer:
    """State of one run; `run()` drives the loop. Small on purpose: rollouts are the env/engine's job, the loss is
    `toolgym.train.loss`, persistence is `toolgym.train.runstate`."""

    def __init__(self, cfg: GRPOConfig, resume: bool = False, on_step: Callable[[dict[str, Any]], None] | None = None,
                 env: Any = None):
        import torch

        from toolgym.policies.hf import HFPolicy
        from toolgym.registry import load_env

        self.cfg, self.on_step = cfg, on_step
        if env is None:  # fails fast on bad env args (the periodic evals' too), before any model is loaded
            from toolgym.registry import check_env_args

            checks = [("env_args", cfg.env_args), ("eval_env_args", {**cfg.env_args, **cfg.eval_env_args})]
            checks += [(f"eval_sets.{name}", {**cfg.env_args, **cfg.eval_env_args, **args})
                       for name, args in cfg.eval_sets.items()]
            checks += [(f"task_schedule[{k}].env_args", {**cfg.env_args, **p.env_args})
                       for k, p in enumerate(cfg.task_schedule)]
            for field, args in checks:
                try:
                    check_env_args(cfg.env, args)
                except ValueError as exc:
                    raise ValueError(f"config {field}: {exc}") from None
            idle = inert_phase_args(cfg)
            if idle:
                raise ValueError(f"config {', '.join(idle)}: changes no task row, so it would have no effect -- a "
                                 "task_schedule phase only rebuilds the task pool (the rollouts keep the run's env); "
                                 "set it in env_args, or make the env carry it in its task rows")
        from toolgym.models import check_model_source

        check_model_source(str(cfg.model))  # a missing folder is named before the env starts or the run folder is made
        self.env = env if env is not None else load_env(cfg.env, **cfg.env_args)
        self.phase = -1  # the task_schedule phase self.tasks was built for (-1: no schedule)
        self.tasks = self.env.build_dataset(cfg.num_examples, seed=cfg.dataset_seed)
        if cfg.restart_share and type(self.env).restart_tasks is StatefulToolEnv.restart_tasks:
            raise ValueError(f"config restart_share: the env {cfg.env!r} cannot restart episodes from a reached state "
                             "(it does not implement restart_tasks)")
        if cfg.symmetry_images and type(self.env).symmetric_images is StatefulToolEnv.symmetric_images:
            raise ValueError(f"config symmetry_images: the env {cfg.env!r} declares no symmetries (it does not "
                             "implement symmetric_images)")
        idle_restart = [] if cfg.restart_share else self.env.restart_options()
        if idle_restart:
            raise ValueError(f"config env_args {', '.join(idle_restart)}: acts only on restarted groups, and "
                             "restart_share is 0 -- set restart_share, or leave the option out")
        if cfg.eval_exact and type(self.env).exact_eval is StatefulToolEnv.exact_eval:
            raise ValueError(f"config eval_exact: the env {cfg.env!r} has no exact evaluation (it does not implement "
                             "exact_eval)")
        if cfg.eval_exact:  # every walk's env config, so a refused one fails now, not at the first eval
            sets = [("eval_env_args", {})] + [(f"eval_sets.{name}", args) for name, args in cfg.eval_sets.items()]
            for field, args in sets:
                try:
                    load_env(cfg.env, **{**cfg.env_args, **cfg.eval_env_args, **args}).check_exact_eval()
                except ValueError as exc:
                    raise ValueError(f"config {field} (eval_exact): {exc}") from None
        if cfg.probe_games and not cfg.restart_share:
            raise ValueError("config probe_games: probes only choose restarts, and restart_share is 0 -- set "
                             "restart_share (for a greedy curve alone, use eval_every)")
        self.restart_from: list[Trajectory] = []  # the previous step's rollouts (restart_share)
        self.probe_stats: dict[str, float] = {}  # the current step's probe games (probe_games), as probe/... metrics
        self.restarts = 0  # restarted groups in the current step
        self.num_groups = int(getattr(self.env, "num_groups", 1) or 1)
        out = cfg.output_dir
        ckpt = prepare_run(out, cfg.model_dump(mode="json"), resume, RESUME_KEYS)
        random.seed(cfg.seed)
        torch.manual_seed(cfg.seed)
        self.model, self.tok, self.is_lora = load_model(cfg, str(ckpt / "model") if ckpt else None)
        self.ema = WeightEMA(self.model, cfg.ema_decay) if cfg.ema_decay > 0 else None  # (the sampler's are live)
        if ckpt is not None and self.ema is not None:
            self.ema.load(ckpt)
        elif ckpt is not None and (ckpt / EMA_FILE).is_file():
            raise ValueError(f"--resume: the checkpoint {ckpt} holds an EMA of the weights (the run was started with "
                             "ema_decay); resume with the same ema_decay")
        self.ref = None
        if cfg.kl_coef > 0 and not self.is_lora:  # LoRA: the reference is the base with the adapter disabled
            self.ref = load_model(cfg.model_copy(update={"lora": None}))[0] if ckpt else copy.deepcopy(self.model)
            self.ref.eval().requires_grad_(False)
        sampling = dict(temperature=cfg.temperature, top_p=cfg.top_p, max_tokens=cfg.max_tokens, seed=cfg.seed,
                        max_batch=cfg.concurrency)
        if cfg.engine == "vllm":  # a second copy of the weights, inside vLLM, synced after every optimizer step
            from toolgym.policies.vllm_engine import VLLMPolicy

            self.policy: Any = VLLMPolicy(cfg.model, **{**sampling, **cfg.engine_args})
            if ckpt is not None:  # resumed: the engine loaded the starting weights, push the checkpoint's
                self.sync_sampler()
        elif cfg.engine == "vllm-server":  # a remote vLLM server; weights go through a folder it can read
            from toolgym.policies.vllm_server import VLLMServerPolicy

            args = dict(cfg.engine_args)
            self.sync_dir = Path(args.pop("sync_dir", cfg.output_dir / "weights_sync"))
            self.policy = VLLMServerPolicy(cfg.model, tokenizer=self.tok, **{**sampling, **args})
            self.sync_sampler()  # the server may hold other weights (an earlier run): start from ours
        else:
            self.policy = HFPolicy(model=self.model, tokenizer=self.tok, num_threads=cfg.num_threads or "auto",
                                   lockstep=cfg.deterministic, **sampling)
        self.opt, self.sched = make_optimizer(cfg, self.model, cfg.max_steps * cfg.updates_per_batch)
        self.step = 0
        self._eval_noted = False  # the periodic eval's repeated tasks are named once per run
        if ckpt is not None:
            state = load_trainer_state(ckpt, self.opt, self.sched)
            self.step = state["step"]
            self.load_restart_extra(state.get("extra") or {})
        self.pad = self.tok.pad_token_id if self.tok.pad_token_id is not None else 0
        self.reasoning_end_ids = self.tok.encode(cfg.reasoning_end, add_special_tokens=False)
        self.dev = next(self.model.parameters()).device
        # best_metric: the best eval so far (best/best.json; a resume keeps it) and, for revert_to_best, its weights
        # and optimizer state in memory (best/revert.pt on disk, for a resume)
        import json

        self.best: dict[str, Any] | None = None
        self.best_state: dict[str, Any] | None = None
        if ckpt is not None:
            recover_best(out / BEST_DIR)
        if ckpt is not None and (out / BEST_DIR / "best.json").is_file():
            self.best = json.loads((out / BEST_DIR / "best.json").read_text())
            if cfg.revert_to_best:
                if not (out / BEST_DIR / "revert.pt").is_file():
                    raise ValueError(f"--resume with revert_to_best: {out / BEST_DIR} holds no revert.pt (the run kept "
                                     "its best without revert_to_best, so there is no optimizer state to go back to); "
                                     "resume without revert_to_best, or start a new run")
                self.best_state = torch.load(out / BEST_DIR / "revert.pt", weights_only=False)
        self.log = MetricsLog(out, self.step, cfg.report_to, cfg.model_dump(mode="json"))
        self.resumed_from = self.step

    # ------------------------------------------------------------------------------------------------ sampler
    def sync_sampler(self) -> float:
        """Bring the sampler up to the trainer's current weights; returns seconds taken. hf: the sampler runs the
        trained module itself, so only what depends on the weights goes (`weights_changed`: the engine's parked KV
        cache). vllm: the weights are copied into the engine in place (`update_weights`); vllm-server: written to a
        folder the server reloads from. `sync_weights = False` skips the copy (only to measure a stale sampler's
        drift). LoRA: the adapter is merged for the copy (HF names, `base_layer` unwrapped) and unmerged again."""
        t0 = time.perf_counter()
        if self.cfg.engine == "hf":
            self.policy.weights_changed()
            return time.perf_counter() - t0
        if not self.cfg.sync_weights:
            return 0.0
        if self.is_lora:
            self.model.merge_adapter()
            try:
                sd = {k.replace(".base_layer", ""): v.detach().clone()
                      for k, v in self.model.get_base_model().state_dict().items() if "lora_" not in k}
            finally:
                self.model.unmerge_adapter()
        else:
            sd = self.model.state_dict()
        if self.cfg.engine == "vllm":
            self.policy.update_weights(sd)
        else:
            self._push_to_server(sd)
        return time.perf_counter() - t0

    def _push_to_server(self, sd: dict[str, Any]) -> None:
        """Write the weights as one safetensors file into a fresh folder, have the server reload from it, then
        delete older folders."""
        import shutil

        from safetensors.torch import save_file

        seen: set[int] = set()
        flat = {}
        for k, v in sd.items():  # tied tensors (embeddings = lm_head) are copied: vLLM reloads each name it knows
            v = v.detach().to("cpu").contiguous()
            flat[k] = v.clone() if v.data_ptr() in seen else v
            seen.add(v.data_ptr())
        self.syncs = getattr(self, "syncs", 0) + 1
        d = self.sync_dir / f"v{self.syncs}"
        d.mkdir(parents=True, exist_ok=True)
        save_file(flat, str(d / "model.safetensors"))
        self.policy.reload_weights(str(d))
        for old in self.sync_dir.glob("v*"):
            if old != d:
                shutil.rmtree(old, ignore_errors=True)

    # ------------------------------------------------------------------------------------------------ rollouts
    def schedule_tasks(self, step: int) -> None:
        """With a `task_schedule`: (re)build the task pool of the phase `step` falls in, from an env loaded with the
        phase's env_args (its dataset only; the rollouts keep the run's env), seeded by dataset_seed + phase."""
        from toolgym.registry import load_env

        cfg = self.cfg
        if not cfg.task_schedule:
            return
        k = max(i for i, p in enumerate(cfg.task_schedule) if p.from_step <= step)
        if k == self.phase:
            return
        builder = load_env(cfg.env, **{**cfg.env_args, **cfg.task_schedule[k].env_args})
        self.tasks = builder.build_dataset(cfg.num_examples, seed=cfg.dataset_seed + k)
        self.num_groups = int(getattr(builder, "num_groups", 1) or 1)
        self.phase = k

    async def rollouts(self, step: int) -> list[Trajectory]:
        from toolgym.rollout import run_rollouts

        cfg = self.cfg
        self.schedule_tasks(step)
        ex = step_examples(step, cfg.batch_size, len(self.tasks), self.num_groups, cfg.dataset_seed + cfg.seed)
        tasks = [(i, self.tasks[i]) for i in ex]
        offered = await self.probes(step) + self.restart_from
        n_restart = round(cfg.restart_share * cfg.batch_size) if offered else 0
        self.restarts = 0
        if n_restart:  # the last groups restart from states the previous step reached (ids past the pool's)
            rng = random.Random(f"restart:{cfg.seed}:{step}")
            rows = self.env.restart_tasks(offered, n_restart, rng)[:n_restart]
            base = len(self.tasks) + step * cfg.batch_size
            tasks[len(tasks) - len(rows):] = [(base + j, row) for j, row in enumerate(rows)]
            self.restarts = len(rows)
        jobs = [(i, r, task) for i, task in tasks for r in range(cfg.rollouts_per_example)]
        self.policy.seed = cfg.seed * 1_000_003 + step  # sampling is a function of (seed, step, job): resumable
        self.policy.reset_sessions()
        self.model.eval()
        # deterministic: each rollout seeded by its job, whichever order the sessions open in
        trajs = await run_rollouts(self.env, self.policy, jobs, cfg.concurrency,
                                   seed=self.policy.seed if cfg.deterministic else None)
        if cfg.restart_share:
            self.restart_from = trajs
        return trajs

    def restart_extra(self) -> dict[str, Any]:
        """With `restart_share`, what the next step's restarts are drawn from, for the checkpoint: the last step's
        rollouts (without their token traces) and the env's `restart_state` (a replay buffer). A resume then draws
        the same restarts as an unbroken run."""
        if not self.cfg.restart_share:
            return {}
        import dataclasses
        import pickle

        extra = {"restart_from": [dataclasses.replace(t, tokens=None) for t in self.restart_from],
                 "env_restart_state": self.env.restart_state()}
        try:
            pickle.dumps(extra)
        except Exception as e:  # an env's trajectory info or state that cannot be saved: the checkpoint goes without
            logging.getLogger("toolgym.train").warning(
                "step %d: the restart state cannot be saved in the checkpoint (%s: %s); a resume from it starts "
                "without previous rollouts", self.step, type(e).__name__, e)
            return {}
        return extra

    def load_restart_extra(self, extra: dict[str, Any]) -> None:
        """Put back what `restart_extra` saved (a checkpoint written before it existed has none: the first step
        after such a resume has no restarts, and the env starts its state afresh)."""
        if self.cfg.restart_share and "restart_from" in extra:
            self.restart_from = list(extra["restart_from"])
            self.env.load_restart_state(extra["env_restart_state"])

    async def probes(self, step: int) -> list[Trajectory]:
        """`probe_games` pool tasks (drawn per step, seeded) played greedily by the current weights and marked
        `probe` in their task; not trained on. Their rollout metrics go to `self.probe_stats`."""
        from toolgym.rollout import run_rollouts

        cfg = self.cfg
        self.probe_stats = {}
        if not cfg.probe_games:
            return []
        rng = random.Random(f"probe:{cfg.dataset_seed + cfg.seed}:{step}")
        picks = rng.sample(range(len(self.tasks)), min(cfg.probe_games, len(self.tasks)))
        pol = self._greedy_policy(num_threads=cfg.num_threads or "auto")
        self.model.eval()
        try:
            trajs = await run_rollouts(self.env, pol, [(i, 0, {**self.tasks[i], "probe": True}) for i in picks],
                                       cfg.concurrency)
        finally:
            await pol.aclose()
        self.probe_stats = {f"probe/{k}": v for k, v in rollout_metrics(trajs).items()}
        return trajs

    # ------------------------------------------------------------------------------------------------ update
    def update(self, trajs: list[Trajectory]) -> dict[str, float]:
        """One learning step on a rollout batch: select groups -> micro-batches -> `updates_per_batch` x (train step,
        optimizer step) -> sync the sampler. Returns the stats (metrics.jsonl keys, and `sync_s`)."""
        seqs, adv, stats, used = self.select_groups(trajs)
        if seqs:
            images, image_adv = [], adv[:0]
            if self.cfg.symmetry_images:
                images, image_adv = self.images(used, adv)
                stats["image_seqs"] = float(len(images))
            batches, stats["truncated"] = self.micro_batches(seqs, adv, images, image_adv)
            totals = Totals()
            for it in range(self.cfg.updates_per_batch):
                stats["loss"] = self.train_step(batches, totals, first=it == 0)
                stats["grad_norm"] = self.optimizer_step()
            stats.update(totals.stats(self.cfg.updates_per_batch))
        stats["sync_s"] = self.sync_sampler()
        return stats

    def select_groups(self, trajs: list[Trajectory]
                      ) -> tuple[list[TokenTrace], Any, dict[str, float], list[Trajectory]]:
        """The sequences to train on, their group-relative advantages, stats, and the trajectories they are (in the
        same order). A group with an errored or token-less rollout is dropped (`drop_errored`; else that rollout
        counts as reward 0); `skip_constant_groups` leaves out the sequences whose advantage is 0."""
        import torch

        cfg, G = self.cfg, self.cfg.rollouts_per_example
        groups = [trajs[i : i + G] for i in range(0, len(trajs), G)]
        kept: list[Trajectory] = []
        rewards: list[float] = []
        for g in groups:
            bad = [t for t in g if t.error is not None or t.tokens is None or not any(t.tokens.mask)]
            if bad and cfg.drop_errored:
                continue
            kept.extend(g)
            rewards.extend(0.0 if t in bad else t.reward for t in g)
        stats: dict[str, float] = {"groups_used": len(kept) // G, "groups_dropped": len(groups) - len(kept) // G}
        if not kept:
            return [], None, stats, []
        adv = group_advantages(torch.tensor(rewards, dtype=torch.float64), G, scale=cfg.scale_rewards)
        stats["zero_adv_groups"] = float(sum(1 for i in range(0, len(adv), G) if not adv[i : i + G].any()))
        stats["adv_abs_mean"] = float(adv.abs().mean())
        idx = list(range(len(kept)))
        if cfg.skip_constant_groups:
            idx = [i for i in idx if float(adv[i]) != 0.0]  # exactly 0 in a constant group (group_advantages)
        return [kept[i].tokens for i in idx], adv[idx], stats, [kept[i] for i in idx]

    def images(self, used: list[Trajectory], adv: Any) -> tuple[list[TokenTrace], Any]:
        """`symmetry_images`: each trained episode's images under the env's symmetries (`env.symmetric_images`, up
        to `symmetry_images` each, drawn with a per-step rng), tokenized by the chat template up to the last
        assistant turn, as the sampled trace ends, each with its episode's advantage."""
        import torch

        from toolgym.models.chat import ChatRenderer, tokenize_conversation

        renderer = getattr(self, "_renderer", None) or ChatRenderer(self.tok)
        self._renderer = renderer
        rng = random.Random(f"images:{self.cfg.seed}:{self.step}")
        tools = self.env.model_tools()
        traces, owners = [], []
        for i, t in enumerate(used):
            for msgs in self.env.symmetric_images(t.messages, self.cfg.symmetry_images, rng):
                last = max(k for k, m in enumerate(msgs) if m.get("role") == "assistant")
                traces.append(tokenize_conversation(renderer, msgs[: last + 1], tools or None))
                owners.append(i)
        return traces, adv[torch.tensor(owners, dtype=torch.long)] if owners else adv[:0]

    def micro_batches(self, sampled: list[TokenTrace], adv: Any, images: list[TokenTrace] | None = None,
                      image_adv: Any = None) -> tuple[list[MicroBatch], float]:
        """The step's sequences cut into micro-batches of padded tensors, each token weighted with the whole step's
        normalisers (`token_weights`: accumulating the micro-batches' gradients gives the one-batch gradient);
        also the number of sequences cut at max_seq_len. Sequences are grouped by length (longest first), so a
        micro-batch pads little: whole games of 900-2,000 tokens in one step otherwise pad each micro-batch to its
        longest game. `images` (symmetric images, with `image_adv`) get micro-batches of their own, weighted with
        the same normalisers over sampled and image sequences together."""
        cfg, images = self.cfg, images or []
        parts = [(sampled, adv, False), (images, image_adv, True)] if images else [(sampled, adv, False)]
        ordered = []
        for seqs, a, image in parts:
            order = sorted(range(len(seqs)), key=lambda i: -len(seqs[i]))
            seqs = [seqs[i] for i in order]
            pg = seqs  # the policy gradient's tokens: every sampled token, or each turn's answer only
            if cfg.pg_tokens == "answer":
                pg = [answer_only(t, self.reasoning_end_ids) for t in seqs]
            ordered.append((seqs, pg, a[order], image))
        max_len = cfg.max_tokens * int(getattr(self.env, "max_turns", 1))  # dr_grpo's constant normaliser

        def n_loss_tokens(ts: list[TokenTrace]) -> int:
            return sum(sum(t.mask[1 : min(len(t), cfg.max_seq_len)]) for t in ts)

        n_seqs = sum(len(seqs) for seqs, _, _, _ in ordered)
        n_pg = sum(n_loss_tokens(pg) for _, pg, _, _ in ordered)
        n_sampled = sum(n_loss_tokens(seqs) for seqs, _, _, _ in ordered)
        batches = []
        for seqs, pg, a, image in ordered:
            for j in range(0, len(seqs), cfg.micro_batch_size):
                part = slice(j, j + cfg.micro_batch_size)
                t = {k: v.to(self.dev) for k, v in pad_batch(pg[part], self.pad, cfg.max_seq_len).items()}
                pg_weights = token_weights(t["mask"], cfg.loss_type, n_seqs, n_pg, max_len)
                sampled_mask, kl_weights = t["mask"], pg_weights
                if pg is not seqs:  # log-probs (and the KL) over every sampled token, the gradient on the answer
                    sampled_mask = pad_batch(seqs[part], self.pad, cfg.max_seq_len)["mask"].to(self.dev)
                    kl_weights = token_weights(sampled_mask, cfg.loss_type, n_seqs, n_sampled, max_len)
                batches.append(MicroBatch(ids=t["ids"], attn=t["attn"], pg_mask=t["mask"], sampled_mask=sampled_mask,
                                          sampler_logp=t["sampler_logp"], old_logp=t["sampler_logp"],
                                          adv=a[part].to(self.dev), pg_weights=pg_weights, kl_weights=kl_weights,
                                          image=image))
        return batches, float(sum(len(t) > cfg.max_seq_len for seqs, _, _, _ in ordered for t in seqs))

    def train_step(self, batches: list[MicroBatch], totals: Totals, first: bool) -> float:
        """Forward and backward over every micro-batch (the gradients accumulate); returns the step's loss. The
        first pass also measures the drift (trainer before the update vs sampler) and, with `old_logprobs =
        "trainer"`, first sets the behaviour log-probs to the trainer's own."""
        import torch

        cfg = self.cfg
        self.model.train()
        if first and cfg.old_logprobs == "trainer":
            with torch.no_grad():
                for b in batches:
                    b.old_logp = self._logp(self.model, b)
        loss_total = 0.0
        for b in batches:
            logp = self._logp(self.model, b)
            if first and b.image and cfg.old_logprobs != "trainer":  # no sampler: the weights before this update
                b.old_logp = logp.detach()
            if first and not b.image:
                totals.add_drift(logp.detach(), b)
            loss, st = policy_loss(logp, b.old_logp, b.adv, b.pg_weights, cfg.loss_type, cfg.epsilon,
                                   cfg.epsilon_high, cfg.epsilon_high_is, self.ref_logprobs(b), cfg.kl_coef,
                                   b.kl_weights)
            loss.backward()
            loss_total += float(loss.detach())
            totals.add_loss_stats(st)
        return loss_total

    def optimizer_step(self) -> float:
        """Clip the accumulated gradient, step AdamW and the schedule, zero the gradient; returns the grad norm."""
        import torch

        gn = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.max_grad_norm)
        self.opt.step()
        self.sched.step()
        self.opt.zero_grad(set_to_none=True)
        if self.ema is not None:
            self.ema.update(self.model)
        return float(gn)

    def _logp(self, model: Any, b: MicroBatch) -> Any:
        """Log-probs of the sampled tokens (the window from the first sampled token on; 0 before it)."""
        return masked_logprobs(model, b.ids, b.attn, b.sampled_mask, self.cfg.temperature)

    def ref_logprobs(self, b: MicroBatch) -> Any:
        """The reference's log-probs for the KL anchor (None without one): the starting weights, or with LoRA the
        base model (adapter disabled)."""
        import torch

        if self.cfg.kl_coef <= 0:
            return None
        with torch.no_grad():
            if self.is_lora:
                with self.model.disable_adapter():
                    return self._logp(self.model, b)
            return self._logp(self.ref, b)

    # ------------------------------------------------------------------------------------------------ loop
    async def _run(self) -> dict[str, Any]:
        from toolgym.check import checked_tasks

        cfg = self.cfg
        last: dict[str, Any] = {}
        started = time.perf_counter()
        try:
            # the tasks against the servers' tool schemas (`toolgym check`): refused, or skipped and counted
            self.tasks, report = await checked_tasks(self.env, self.tasks, cfg.skip_invalid_tasks)
            if report.problems:
                logging.getLogger("toolgym.train").warning(
                    "skipped %d invalid task(s) of %d (skip_invalid_tasks); first: %s", len(report.invalid),
                    report.tasks, report.problems[0])
            if note := report.repeat_note("they are sampled more often"):
                logging.getLogger("toolgym.train").info("training tasks: %s", note)
            while self.step < cfg.max_steps:
                t0 = time.perf_counter()
                self.policy.queue.reset_stats()  # (vllm-server: the server batches; stats stay 0)
                trajs = await self.rollouts(self.step)
                if cfg.save_rollouts:
                    self.save_rollouts(self.step + 1, trajs)
                t1 = time.perf_counter()
                gen = self.policy.queue.stats()
                st = self.update(trajs)  # ... optimizer step, then the sampler's sync
                sync_s = st.pop("sync_s")
                t2 = time.perf_counter()
                self.step += 1
                rec = {"step": self.step, **rollout_metrics(trajs), **st, "lr": _lr_of(self.sched),
                       "rollout_s": t1 - t0, "train_s": t2 - t1 - sync_s,
                       "gen_tokens_per_s": gen["generated_tokens"] / max(gen["generate_s"], 1e-9),
                       "gen_mean_batch": gen.get("mean_decode_rows") or gen["mean_batch_size"], "sync_s": sync_s}
                if cfg.task_schedule:
                    rec["phase"] = self.phase
                if cfg.restart_share:
                    rec["restart_groups"] = self.restarts
                rec.update(self.probe_stats)
                if self.ema is not None:
                    rec["ema_gap"] = self.ema.gap(self.model)
                if cfg.eval_every and self.step % cfg.eval_every == 0:
                    rec.update(await self.periodic_eval())
                    if cfg.best_metric is not None:
                        rec.update(self.keep_best(rec))
                rec["step_s"] = time.perf_counter() - t0
                out_of_time = (cfg.max_minutes is not None and self.step < cfg.max_steps
                               and time.perf_counter() - started >= 60 * cfg.max_minutes)
                if out_of_time:
                    rec["stopped"] = "max_minutes"
                self.log.log(rec)  # metrics before the checkpoint: a kill in between replays the step
                if self.step % cfg.save_every == 0 or self.step == cfg.max_steps or out_of_time:
                    t3 = time.perf_counter()
                    save_checkpoint(cfg.output_dir, self.step, self.model, self.tok, self.opt, self.sched,
                                    self.restart_extra(), cfg.keep_checkpoints,
                                    self.write_ema if self.ema is not None else None)
                    rec["save_s"] = time.perf_counter() - t3
                last = rec
                if self.on_step:
                    self.on_step(rec)
                if out_of_time:
                    logging.getLogger("toolgym.train").warning(
                        "stopped at step %d of %d: max_minutes (%g) spent; resume with --resume to go on",
                        self.step, cfg.max_steps, cfg.max_minutes)
                    break
        finally:
            self.log.close()
            await self.policy.aclose()
            await self.env.aclose()
        if self.ema is None:
            save_hf(self.model, self.tok, cfg.output_dir / "final", cfg.save_merged)
        else:  # the run delivers the average; the sampler's last weights stay beside it
            save_hf(self.model, self.tok, cfg.output_dir / "final_live", cfg.save_merged)
            with self.ema.swapped(self.model):
                save_hf(self.model, self.tok, cfg.output_dir / "final", cfg.save_merged)
        return last

    def keep_best(self, rec: dict[str, Any]) -> dict[str, Any]:
        """`best_metric`: compare this step's eval with the best so far. At least as good (a tie goes to the later
        step): write OUTPUT/best/ (and keep the weights and optimizer state in memory for `revert_to_best`). Worse,
        with `revert_to_best`: put the best's weights and optimizer state back. A value that is not a number (NaN, inf)
        changes nothing and is logged best/nonfinite = 1. An eval outside `best_constraints` is no candidate (logged
        best/infeasible = 1) and counts as worse for `revert_to_best`. Returns the metrics to log: best/step,
        best/value and, where it happened, best/reverted = 1."""
        cfg = self.cfg
        name = cfg.best_metric
        assert name is not None
        weights = {name: 1.0} if isinstance(name, str) else name
        for metric in [*weights, *cfg.best_constraints]:
            if metric not in rec:
                have = sorted(k for k in rec if k.startswith("eval/"))
                label = "best_metric" if metric in weights else "best_constraints"
                raise ValueError(f"{label} {metric!r}: the periodic eval logged no such metric (it logged: "
                                 f"{', '.join(have)})")
        if self.step < cfg.best_from_step:
            return {}
        missed = [m for m, bounds in cfg.best_constraints.items() if not bounds.holds(float(rec[m]))]
        if missed:
            logging.getLogger("toolgym.train").info("step %d: %s outside best_constraints: not a candidate",
                                                    self.step, ", ".join(f"{m} = {float(rec[m]):g}" for m in missed))
            return {"best/infeasible": 1.0, **self._revert(name, None), **self._best_log()}
        value = sum(w * float(rec[metric]) for metric, w in weights.items())
        if not math.isfinite(value):  # an eval that measured nothing (0 / 0): neither a best nor a reason to go back
            logging.getLogger("toolgym.train").warning("step %d: %s = %g is not a number: not compared with the best",
                                                       self.step, name, value)
            return {"best/nonfinite": 1.0, **self._best_log()}
        best = self.best
        better = best is None or (value >= best["value"] if cfg.greater_is_better else value <= best["value"])
        if better:
            self.best = {"step": self.step, "metric": name, "value": value}
            if cfg.best_constraints:
                self.best["constraints"] = {m: float(rec[m]) for m in cfg.best_constraints}
            self.write_best()
            return self._best_log()
        return {**self._revert(name, value), **self._best_log()}

    def _revert(self, name: Any, value: float | None) -> dict[str, float]:
        """`revert_to_best` after an eval worse than the best kept (`value`; None: outside `best_constraints`): put
        the best's weights and optimizer state back. Nothing without revert_to_best or a best kept."""
        if not self.cfg.revert_to_best or self.best is None:
            return {}
        assert self.best_state is not None
        self.model.load_state_dict(self.best_state["model"])
        # the optimizer copies nothing it can share: a deep copy keeps the kept state unchanged
        self.opt.load_state_dict(copy.deepcopy(self.best_state["optimizer"]))
        self.sync_sampler()
        logging.getLogger("toolgym.train").info("step %d: %s = %s, worse than step %d's %g: back to its weights",
                                                self.step, name, "outside best_constraints" if value is None
                                                else f"{value:g}", self.best["step"], self.best["value"])
        return {"best/reverted": 1.0}

    def _best_log(self) -> dict[str, float]:
        """best/step and best/value of the best so far (nothing before the first)."""
        if self.best is None:
            return {}
        return {"best/step": float(self.best["step"]), "best/value": float(self.best["value"])}

    def write_best(self) -> None:
        """OUTPUT/best/: the weights in HF format, best.json and (revert_to_best) revert.pt, the weights and the
        optimizer state to go back to; written to best.tmp/ (best.json last), then swapped in through best.old/, so a
        kill at any instant leaves a whole best that `recover_best` puts back in place."""
        import json
        import shutil

        import torch

        out = self.cfg.output_dir / BEST_DIR
        tmp = out.with_name(out.name + ".tmp")
        if tmp.exists():
            shutil.rmtree(tmp)
        save_hf(self.model, self.tok, tmp, self.cfg.save_merged)
        if self.cfg.revert_to_best:
            self.best_state = {"model": {k: v.detach().clone() for k, v in self.model.state_dict().items()},
                               "optimizer": copy.deepcopy(self.opt.state_dict())}
            torch.save(self.best_state, tmp / "revert.pt")
        (tmp / "best.json").write_text(json.dumps(self.best, indent=2))
        swap_in(tmp, out)

    def write_ema(self, folder: Path) -> None:
        """A checkpoint's EMA: the float32 shadow (resume) and an HF folder `ema/` laid out like `model/` (evals)."""
        assert self.ema is not None
        self.ema.save(folder)
        with self.ema.swapped(self.model):
            self.model.save_pretrained(folder / "ema", safe_serialization=True)
        self.tok.save_pretrained(folder / "ema")

    def save_rollouts(self, step: int, trajs: list[Trajectory]) -> None:
        """Append the step's rollouts (no tokens, no per-turn records) as one gzip member of rollouts.jsonl.gz. A
        resumed run appends the replayed step again: readers keep the last record of each (step, example, rollout)."""
        import gzip
        import json

        lines = []
        for t in trajs:
            d = t.to_dict()
            d.pop("tokens", None)
            d.pop("turns", None)
            lines.append(json.dumps({"step": step, **d}, default=str))
        with gzip.open(self.cfg.output_dir / "rollouts.jsonl.gz", "at") as f:
            f.write("\n".join(lines) + "\n")

    async def periodic_eval(self) -> dict[str, float]:
        """A greedy eval of the weights the run delivers (with `ema_decay`: the average, swapped in for it)."""
        if self.ema is None:
            return await self._greedy_eval()
        with self.ema.swapped(self.model):
            out = await self._greedy_eval()
        if self.cfg.engine == "hf":  # nothing the sampler parked may outlive the swap
            self.policy.weights_changed()
        return out

    def _greedy_policy(self, **kwargs: Any) -> Any:
        """A greedy `HFPolicy` on the trainer's own model (the probes' and the periodic eval's player); `kwargs` go
        to `HFPolicy` (the probes pass the run's `num_threads`; the periodic eval keeps the policy's default)."""
        from toolgym.policies.hf import HFPolicy

        return HFPolicy(model=self.model, tokenizer=self.tok, temperature=0.0, max_tokens=self.cfg.max_tokens,
                        max_batch=self.cfg.concurrency, lockstep=self.cfg.deterministic, **kwargs)

    async def _greedy_eval(self) -> dict[str, float]:
        """The periodic eval (eval/...) and each of `eval_sets` (eval/NAME/...), greedy."""
        out = await self._greedy_eval_one("eval/", {})
        for name, args in self.cfg.eval_sets.items():
            out.update(await self._greedy_eval_one(f"eval/{name}/", args))
        return out

    async def _greedy_eval_one(self, prefix: str, env_args: dict[str, Any]) -> dict[str, float]:
        from toolgym.registry import load_env
        from toolgym.rollout import run_rollouts

        cfg = self.cfg
        env = load_env(cfg.env, **{**cfg.env_args, **cfg.eval_env_args, **env_args})
        pol = self._greedy_policy()
        self.model.eval()
        if cfg.eval_exact:
            try:
                await env.start()
                return {f"{prefix}exact/{k}": float(v) for k, v in (await env.exact_eval(pol)).items()}
            finally:
                await pol.aclose()
                await env.aclose()
        try:
            from toolgym.check import checked_tasks

            tasks = env.build_dataset(cfg.eval_examples, seed=cfg.dataset_seed + 7919)

            tasks, report = await checked_tasks(env, tasks, cfg.skip_invalid_tasks)
            if (note := report.repeat_note("the periodic eval counts their outcomes twice")) and not self._eval_noted:
                self._eval_noted = True
                logging.getLogger("toolgym.train").warning("eval tasks: %s", note)
            trajs = await run_rollouts(env, pol, [(i, 0, t) for i, t in enumerate(tasks)], cfg.concurrency)
        finally:
            await pol.aclose()
            await env.aclose()
        return {f"{prefix}{k}": v for k, v in rollout_metrics(trajs).items()}

    def run(self) -> dict[str, Any]:
        """Run the loop. The first SIGINT (Ctrl-C) or SIGTERM cancels it where the event loop next runs (between
        rollouts, or once a running update returns): the metrics log is closed and the servers and sandboxes stopped,
        then KeyboardInterrupt; the last checkpoint stays for `--resume` (`toolgym.journal.run_interruptible`)."""
        from toolgym.journal import run_interruptible

        return run_interruptible(self._run(), "the GRPO run")


def run_grpo(cfg: GRPOConfig, resume: bool = False, on_step: Callable[[dict[str, Any]], None] | None = None,
             env: Any = None) -> dict[str, Any]:
    """Run (or resume) the loop; `env` overrides `cfg.env` with an env object (tests, notebooks)."""
    return GRPOTrainer(cfg, resume, on_step, env).run()


__all__ = ["GRPOTrainer", "inert_phase_args", "rollout_metrics", "run_grpo"]
