"""Supervised fine-tuning on chat-with-tools rows with the assistant-only mask (the mask RL trains on).

Mean token cross-entropy over the assistant tokens of each optimizer batch (normalised by the batch's assistant
token count, so micro-batching does not change the gradient). Full or LoRA; checkpoints in plain HF format.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable
from typing import Any

from toolgym.train.config import SFTConfig
from toolgym.train.data import make_renderer, pad_batch, read_rows, tokenize_rows
from toolgym.train.loss import masked_logprobs
from toolgym.train.runstate import (
    MetricsLog,
    load_model,
    load_trainer_state,
    make_optimizer,
    prepare_run,
    save_checkpoint,
    save_hf,
)


def run_sft(cfg: SFTConfig, resume: bool = False, on_step: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    import torch

    rows = read_rows(cfg.data)
    if not rows:
        raise ValueError("no training rows")
    out = cfg.output_dir
    ckpt = prepare_run(out, cfg.model_dump(mode="json"), resume, ("model", "data", "lora", "seed", "batch_size"))
    random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    model, tok, _ = load_model(cfg, str(ckpt / "model") if ckpt else None)
    renderer = make_renderer(tok)
    traces = tokenize_rows(renderer, rows)
    pad = tok.pad_token_id if tok.pad_token_id is not None else 0
    steps_per_epoch = math.ceil(len(traces) / cfg.batch_size)
    total = max(1, int(round(cfg.epochs * steps_per_epoch)))
    opt, sched = make_optimizer(cfg, model, total)
    step = 0
    if ckpt is not None:
        step = load_trainer_state(ckpt, opt, sched)["step"]
    log = MetricsLog(out, step, cfg.report_to, cfg.model_dump(mode="json"))
    dev = next(model.parameters()).device
    last: dict[str, Any] = {}
    try:
        while step < total:
            epoch, k = divmod(step, steps_per_epoch)
            order = list(range(len(traces)))
            random.Random(f"sft:{cfg.seed}:{epoch}").shuffle(order)  # pure function of (seed, epoch): resumable
            idx = order[k * cfg.batch_size : (k + 1) * cfg.batch_size]
            t0 = time.perf_counter()
            model.train()
            n_tok = sum(min(sum(traces[i].mask), cfg.max_seq_len) for i in idx)
            loss_sum = 0.0
            # micro-batches of similar length (the batch's rows sorted by length): less padding, same gradient
            idx = sorted(idx, key=lambda i: (len(traces[i]), i))
            for j in range(0, len(idx), cfg.micro_batch_size):
                b = pad_batch([traces[i] for i in idx[j : j + cfg.micro_batch_size]], pad, cfg.max_seq_len)
                ids, attn, mask = b["ids"].to(dev), b["attn"].to(dev), b["mask"].to(dev)
                # the LM head runs from the first assistant token on (the prompt needs no logits)
                lp = masked_logprobs(model, ids, attn, mask)[:, 1:]
                loss = -(lp * mask[:, 1:]).sum() / max(n_tok, 1)
                loss.backward()
                loss_sum += float(loss.detach())
            gn = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.max_grad_norm)
            opt.step()
            sched.step()
            opt.zero_grad(set_to_none=True)
            step += 1
            last = {"step": step, "epoch": step / steps_per_epoch, "loss": loss_sum, "grad_norm": float(gn),
                    "lr": sched.get_last_lr()[0], "tokens": n_tok, "step_s": time.perf_counter() - t0}
            log.log(last)  # metrics first: a kill before the checkpoint re-runs the step and rewrites its line
            if step % cfg.save_every == 0 or step == total:
                save_checkpoint(out, step, model, tok, opt, sched, {}, cfg.keep_checkpoints)
            if on_step:
                on_step({**last, "total": total})
    finally:
        log.close()
    save_hf(model, tok, out / "final", cfg.save_merged)
    return {**last, "total_steps": total, "rows": len(rows), "final": str(out / "final")}
