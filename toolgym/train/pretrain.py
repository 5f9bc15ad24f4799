"""Pre-training the tool-calling base (`toolgym pretrain`): a tokenizer and a random model from `toolgym.models.tiny`,
then two stages on endless streams from `toolgym.models.toolcall`, each with its own warm-up and cosine schedule:

1. **copy drills** (`copy_drill`: a quoted value of any shape answered back, several per conversation, no tools): short
   and dense in copied tokens, the cheapest way for a tiny model to learn to copy an arbitrary string token by token.
   Measured on the `small` size (2 cores): after 300 drill steps of 32 conversations 13 % of fresh values come back
   exactly, after 1,200 (18 min) 78 % -- the loss falls from a plateau near 1.4 to 0.12 once copying forms; the same
   tokens in 2,400 steps of 16 end at 0.017, and the finished base answers 95 % of fresh drills exactly (64 % with
   steps of 32; the whole 3,200-step build: 28.7 min); on the mixed stream alone, 347 steps (25 min) copied nothing
   (0 % exact calls);
2. **random tool use** (one `scene` -- rows sharing their random tools -- per micro-batch, with a share of drills so
   copying is kept): where values go in a call, which tool a request names, answers copied from results, abstaining.

The loss is the assistant tokens' cross-entropy; AdamW; a budget of steps or wall time split between the stages by
`copy_share`. Then `eval_toolcall` on fresh conversations, recorded in `toolgym_tiny.json`."""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

from toolgym.models.toolcall import WORD_SPLIT, eval_toolcall, scene, toolcall_corpus
from toolgym.tasks.sampling import Vocabulary


COPY_SHARE = 0.75  # of the budget on copy drills: 2,400 of the shipped base's 3,200 steps (docs/models.md)
BATCH_SIZE = 16  # conversations per optimizer step: at the same tokens, twice the steps of 32 copy far better


def pretrain(init_dir: str | Path, out: str | Path, steps: int | None = None, minutes: float | None = None,
             batch_size: int = BATCH_SIZE, micro_batch_size: int = 16, learning_rate: float = 3e-3, warmup_steps: int = 20,
             seed: int = 0, num_threads: int | None = None, drill_share: float = 0.3,
             requests: tuple[int, int] = (1, 3), copy_share: float = 0.0, copy_learning_rate: float | None = None,
             call_share: float = 0.0, unquoted_share: float = 0.0, ref_share: float = 0.0,
             ref_call_share: float = 0.0,
             on_step: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Pre-train the model in `init_dir` on endless streams of fresh random conversations -- no conversation is seen
    twice, so nothing can be memorised -- and save it to `out`. The first `copy_share` of the budget trains on copy
    drills only (at `copy_learning_rate`, default `learning_rate`), the rest on one `scene` (rows with the same random
    tools, a `drill_share` of them copy drills and a `call_share` call drills) per micro-batch; each stage warms up
    over `warmup_steps` and then follows a cosine down to a tenth of its rate. Stops after `steps` optimizer steps
    (reproducible) or `minutes` of wall time (the schedules then run on the elapsed share of it). From the second half
    of the copy stage on, an `unquoted_share` of the drills' values is written bare after a space (`copy_drill`), once
    copying has formed on quoted ones; likewise a `ref_share` of the drills' requests are reference drills (the n-th
    entry of a listing answered back, `ref_drill`), and a `ref_call_share` of the tool-use stage's scenes reference
    call drills (`ref_call_drill`: the second call's value "the n-th entry of that result"). Loss: mean cross-entropy over the assistant tokens (the masks `toolgym sft`
    trains on). Writes `out/metrics.jsonl` (one line per step, with its `stage`)."""
    import math
    import time

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from toolgym.models.chat import ChatRenderer, tokenize_conversation
    from toolgym.train.data import pad_batch
    from toolgym.train.loss import masked_logprobs

    if (steps is None) == (minutes is None):
        raise ValueError("give exactly one of steps or minutes")
    if not 0.0 <= copy_share < 1.0:
        raise ValueError(f"copy_share must be in [0, 1), got {copy_share}")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    if num_threads:
        torch.set_num_threads(num_threads)
    tok = AutoTokenizer.from_pretrained(str(init_dir))
    model = AutoModelForCausalLM.from_pretrained(str(init_dir), dtype=torch.float32)
    model.train()
    renderer = ChatRenderer(tok)
    rng = random.Random(f"toolcall-pretrain:{seed}")
    vocab = Vocabulary(novel=0.6)
    opt = torch.optim.AdamW(model.parameters(), lr=learning_rate, betas=(0.9, 0.99), weight_decay=0.0)
    pad = tok.pad_token_id if tok.pad_token_id is not None else 0
    t0, step, tokens, last = time.time(), 0, 0, {}
    stage, stage_step = ("copy", 0) if copy_share > 0 else ("tools", 0)
    log = (out / "metrics.jsonl").open("w")
    try:
        while True:
            frac = step / steps if steps is not None else (time.time() - t0) / (60 * float(minutes or 0))
            if frac >= 1.0:
                break
            if stage == "copy" and frac >= copy_share:
                stage, stage_step = "tools", 0
            lo, hi = (0.0, copy_share) if stage == "copy" else (copy_share, 1.0)
            within = (frac - lo) / (hi - lo)
            peak = (copy_learning_rate or learning_rate) if stage == "copy" else learning_rate
            lr = peak * min(1.0, (stage_step + 1) / warmup_steps) * (0.1 + 0.45 * (1 + math.cos(math.pi * within)))
            for g in opt.param_groups:
                g["lr"] = lr
            share = 1.0 if stage == "copy" else drill_share
            late = stage == "tools" or within >= 0.5
            bare, refs = (unquoted_share, ref_share) if late else (0.0, 0.0)
            groups = [sorted((tokenize_conversation(renderer, r["messages"], r["tools"] or None)
                              for r in scene(rng, vocab, micro_batch_size, share, requests,
                                             0.0 if stage == "copy" else call_share, bare, refs,
                                             0.0 if stage == "copy" else ref_call_share)), key=len)
                      for _ in range(max(1, batch_size // micro_batch_size))]
            n_tok = sum(sum(t.mask) for g in groups for t in g)
            loss_sum = 0.0
            for traces in groups:
                b = pad_batch(traces, pad, 4096)
                lp = masked_logprobs(model, b["ids"], b["attn"], b["mask"])[:, 1:]
                loss = -(lp * b["mask"][:, 1:]).sum() / max(n_tok, 1)
                loss.backward()
                loss_sum += float(loss.detach())
                tokens += int(b["attn"].sum())
            gn = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
            step += 1
            stage_step += 1
            last = {"step": step, "stage": stage, "loss": loss_sum, "lr": lr, "grad_norm": float(gn), "tokens": tokens,
                    "elapsed_s": round(time.time() - t0, 1), "frac": min(1.0, frac)}
            log.write(json.dumps(last) + "\n")
            log.flush()
            if on_step:
                on_step(last)
    finally:
        log.close()
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return last


def build_toolcall_base(out: str | Path, size: str = "small", steps: int | None = None, minutes: float | None = 30.0,
                        batch_size: int = BATCH_SIZE, learning_rate: float = 2e-3, seed: int = 0,
                        num_threads: int | None = None,
                        eval_n: int = 200, copy_share: float = COPY_SHARE, copy_learning_rate: float = 3e-3,
                        call_share: float = 0.0, unquoted_share: float = 0.0, ref_share: float = 0.0,
                        ref_call_share: float = 0.0, tokenizer_from: str | Path | None = None,
                        on_step: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Build the tool-calling base in `out` (see the module docstring): tokenizer + random `size` model, `pretrain`
    for `steps` or `minutes`, then `eval_toolcall` on `eval_n` fresh conversations; `toolgym_tiny.json` records the
    recipe, its wall time and the evaluation. `tokenizer_from`: reuse that model folder's tokenizer instead of training
    one (the shipped base's, to rebuild it: the tokenizer's corpus holds generated text, which changes with the task
    generator)."""
    import shutil
    import tempfile
    import time

    from toolgym.models.tiny import init_tiny

    t0 = time.time()
    out = Path(out)
    with tempfile.TemporaryDirectory(prefix="toolcall-init-") as tmp:
        init = init_tiny(Path(tmp) / "init", size=size, seed=seed, split=WORD_SPLIT, tokenizer_from=tokenizer_from,
                         corpus_sources=["chatml", lambda rng: toolcall_corpus(rng, 3000)])
        tiny = json.loads((init / "toolgym_tiny.json").read_text())
        if out.exists():
            shutil.rmtree(out)
        last = pretrain(init, out, steps=steps, minutes=None if steps else minutes, batch_size=batch_size,
                        learning_rate=learning_rate, seed=seed, num_threads=num_threads, copy_share=copy_share,
                        copy_learning_rate=copy_learning_rate, call_share=call_share,
                        unquoted_share=unquoted_share, ref_share=ref_share, ref_call_share=ref_call_share,
                        on_step=on_step)
    train_s = time.time() - t0
    info: dict[str, Any] = {
        "base": "toolcall", "size": size, "seed": seed, "vocab_size": tiny["vocab_size"], "params": tiny["params"],
        "tokenizer_from": str(tokenizer_from) if tokenizer_from else None,
        "steps": last.get("step"), "tokens": last.get("tokens"), "final_loss": last.get("loss"),
        "batch_size": batch_size, "num_threads": num_threads, "learning_rate": learning_rate, "copy_share": copy_share,
        "copy_learning_rate": copy_learning_rate, "call_share": call_share, "unquoted_share": unquoted_share,
        "ref_share": ref_share, "ref_call_share": ref_call_share,
        "budget": {"steps": steps} if steps else {"minutes": minutes}, "build_s": round(train_s, 1)}
    if eval_n:
        info["eval"] = eval_toolcall(out, n=eval_n)
    (out / "toolgym_tiny.json").write_text(json.dumps(info, indent=2))
    return info


__all__ = ["BATCH_SIZE", "COPY_SHARE", "build_toolcall_base", "pretrain"]
