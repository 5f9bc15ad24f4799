"""In-process transformers engine (`hf:PATH_OR_NAME`): batched sampling with a KV cache, CPU or CUDA.

Concurrent `act` calls of many rollouts share one decode batch. By default (`batching="continuous"`,
`ContinuousQueue` + `HFEngine.run_until`) a request joins the running batch at the next token boundary and leaves
it when its row ends, and a conversation's next turn extends its previous turn's parked KV; with
`batching="static"` (`BatchQueue` + `HFEngine.generate_batch`) each left-padded batch runs until its longest row
ends. A custom sampling loop applies per-request temperature / top-p / top-k / max_tokens / seed, stops each row on
the template's end-of-turn tokens, and returns sampled ids with their logprobs (log-softmax of logits /
temperature). Position ids are per row, derived from its own tokens, so padding and a row's place in the batch do
not shift positions and results match an unpadded forward pass.

`HFPolicy(model=..., tokenizer=...)` can wrap objects already in memory (e.g. the trainer's model, so rollouts see
the current weights without any copy).
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import random
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toolgym.models.chat import ChatRenderer
from toolgym.models.engine import ContinuousUnsupported, GenOutput, GenRequest, ModelPolicy


def resolve_device_dtype(device: str | None = "auto", dtype: str | None = "auto") -> tuple[Any, Any]:
    import torch

    if device in (None, "auto"):
        device = "cuda" if torch.cuda.is_available() else "cpu"
    dev = torch.device(device)
    if dtype in (None, "auto"):
        if dev.type == "cuda":
            dt = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        else:
            dt = torch.float32  # these CPUs have no bf16: fp32 is fastest and exact
    else:
        dt = getattr(torch, dtype) if isinstance(dtype, str) else dtype
    return dev, dt


def supports_logits_to_keep(model: Any) -> bool:
    """Whether the causal LM's forward takes `logits_to_keep` (transformers >= 4.45 models; checked on the base
    model under a peft wrapper): then the LM head can skip positions nobody reads."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return "logits_to_keep" in inspect.signature(base.forward).parameters


def shared_prefix_len(rows: Any, attn: Any | None = None) -> int:
    """Length of the token prefix that every row of `rows` ([B, T] ids, right-padded; or a list of id lists) shares,
    counting only attended positions: the system prompt and tool schemas every rollout of an env starts with."""
    import torch

    if not isinstance(rows, torch.Tensor):
        n = min((len(r) for r in rows), default=0)
        if n == 0 or len(rows) < 2:
            return n if len(rows) == 1 else 0
        t = torch.tensor([list(r[:n]) for r in rows])
        return shared_prefix_len(t)
    same = (rows == rows[:1]).all(0)
    if attn is not None:
        same &= (attn > 0).all(0)
    diff = (~same).nonzero()
    return int(diff[0]) if len(diff) else rows.shape[1]


def _plain_dynamic(past: Any) -> bool:
    """Whether `past` is a plain `DynamicCache` of `DynamicLayer`s -- the only cache whose keys/values the engine
    reshapes (prefix broadcast, preallocation, continuous batching); sliding-window, convolution (LFM2) or offloaded
    caches are not."""
    try:
        from transformers.cache_utils import DynamicCache, DynamicLayer
    except ImportError:  # pragma: no cover - older transformers
        return False
    layers = getattr(past, "layers", None)
    return type(past) is DynamicCache and bool(layers) and all(type(la) is DynamicLayer for la in layers)


def expand_prefix_cache(past: Any, batch: int) -> bool:
    """Make a one-row KV cache (of a shared prefix) serve `batch` rows, as a broadcast view (the next forward's
    concatenation materialises it; autograd sums the rows' gradients back into the prefix). Only plain
    `DynamicLayer` caches qualify -- sliding-window, convolution (LFM2) or offloaded caches return False and the
    caller runs the full forward instead."""
    if not _plain_dynamic(past):
        return False
    for la in past.layers:
        la.keys = la.keys.expand(batch, *la.keys.shape[1:])
        la.values = la.values.expand(batch, *la.values.shape[1:])
    return True


def preallocate_cache(past: Any, extra: int) -> bool:
    """Give each plain `DynamicLayer` of `past` room for `extra` more positions, written in place: a decode step
    then appends one token instead of concatenating (copying) the whole cache, which was a fifth of the sampling
    time of a tic-tac-toe batch. Returns False (cache untouched) for any other cache type."""
    if not _plain_dynamic(past):
        return False
    past.layers = [_prealloc_layer_class()(la.keys, la.values, extra) for la in past.layers]
    return True


@functools.cache
def _prealloc_layer_class() -> Any:
    """The layer class, built on first use (transformers is imported lazily)."""
    from transformers.cache_utils import DynamicLayer

    class PreallocatedLayer(DynamicLayer):
        """A `DynamicLayer` whose `keys`/`values` are views of buffers with spare room: appends write in place
        (and grow the buffers by copying only when full)."""

        def __init__(self, keys: Any, values: Any, extra: int) -> None:
            super().__init__()
            self.dtype, self.device, self.is_initialized = keys.dtype, keys.device, True
            self.kbuf, self.vbuf = self._room(keys, extra), self._room(values, extra)
            self._view(keys.shape[-2])

        @staticmethod
        def _room(x: Any, extra: int) -> Any:
            buf = x.new_empty(*x.shape[:-2], x.shape[-2] + extra, x.shape[-1])
            buf[..., : x.shape[-2], :] = x
            return buf

        def _view(self, n: int) -> None:
            self.keys, self.values = self.kbuf[..., :n, :], self.vbuf[..., :n, :]

        def update(self, key_states: Any, value_states: Any, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
            n = self.keys.shape[-2]
            end = n + key_states.shape[-2]
            if end > self.kbuf.shape[-2]:
                self.kbuf, self.vbuf = self._room(self.keys, max(end - n, n)), self._room(self.values, max(end - n, n))
            self.kbuf[..., n:end, :] = key_states
            self.vbuf[..., n:end, :] = value_states
            self._view(end)
            return self.keys, self.values

    return PreallocatedLayer


@functools.cache
def _slot_layer_class() -> Any:
    """The layer class, built on first use (transformers is imported lazily)."""
    from transformers.cache_utils import DynamicLayer

    class SlotLayer(DynamicLayer):
        """One layer of the continuous batch's KV cache: `kbuf`/`vbuf` are [slots, heads, columns, head_dim]
        buffers; a forward sees rows [0, n) and columns [s, e) and appends its keys/values at column e in place."""

        def __init__(self, kbuf: Any, vbuf: Any) -> None:
            super().__init__()
            self.dtype, self.device, self.is_initialized = kbuf.dtype, kbuf.device, True
            self.kbuf, self.vbuf = kbuf, vbuf
            self.set_view(0, 0, 0)

        def set_view(self, n: int, s: int, e: int) -> None:
            self.n, self.s, self.e = n, s, e
            self.keys, self.values = self.kbuf[:n, :, s:e], self.vbuf[:n, :, s:e]

        def update(self, key_states: Any, value_states: Any, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
            end = self.e + key_states.shape[-2]
            self.kbuf[: self.n, :, self.e : end] = key_states
            self.vbuf[: self.n, :, self.e : end] = value_states
            self.set_view(self.n, self.s, end)
            return self.keys, self.values

    return SlotLayer


@dataclass
class _Row:
    """A request decoding in the continuous batch."""

    tag: int
    req: GenRequest
    out: GenOutput
    gen: random.Random
    budget: int
    pos: int  # position id of `next_tok`
    next_tok: int  # sampled (and in `out`), not yet fed to the model
    start: int  # first column of this row in the slot buffers


def load_chat_template(value: str | None) -> str | None:
    """A template given inline or as a path to a .jinja file."""
    if value and "{" not in value and Path(value).is_file():
        return Path(value).read_text(encoding="utf-8")
    return value


class HFEngine:
    """Blocking batched generation with a transformers causal LM."""

    def __init__(self, model: Any, pad_id: int, stop_ids: list[int], max_len: int | None = None, num_threads: int | None = None):
        import torch

        self.torch = torch
        self.num_threads = num_threads
        self.model = model
        self.pad_id = pad_id
        self.stop_ids = set(stop_ids)
        cfg = getattr(model, "config", None)
        self.max_len = max_len or getattr(cfg, "max_position_embeddings", None) or 4096
        self._rng = random.Random(0)
        self._keeps_logits = supports_logits_to_keep(model)
        self._sdpa = getattr(getattr(model, "config", None), "_attn_implementation", None) == "sdpa"
        # continuous batching state (`run_until`): rows in slots [0, len(rows)), columns [s, e) in use
        self._lock = threading.Lock()
        self._rows: list[_Row] = []
        self._kb: list[Any] = []
        self._vb: list[Any] = []
        self._mask: Any = None
        self._cache: Any = None
        self._s = self._e = 0
        self._parked: list[tuple[Any, int]] = []  # ((tokens, keys, values, mask), bytes), oldest first
        self._parked_version = -1
        self._counts = {"prefill_tokens": 0, "reused_tokens": 0}

    MIN_SHARED_PREFIX = 16  # shorter shared prompt prefixes are prefilled with the rest

    @property
    def device(self) -> Any:
        return next(self.model.parameters()).device

    def _sample(
        self, logits: Any, reqs: list[GenRequest], gens: list[Any], so_far: list[list[int]] | None = None
    ) -> tuple[list[int], list[float]]:
        torch = self.torch
        logits = logits.float()
        temps = torch.tensor([max(r.params.temperature, 0.0) for r in reqs], device=logits.device)
        greedy = temps <= 0
        scaled = logits / torch.where(greedy, torch.ones_like(temps), temps)[:, None]
        logp = torch.log_softmax(scaled, dim=-1)
        probs = logp.exp()
        need_trunc = [(r.params.top_p < 1.0 or r.params.top_k > 0) for r in reqs]
        if any(need_trunc):
            probs = probs.clone()
            for i, r in enumerate(reqs):
                if not need_trunc[i]:
                    continue
                p = probs[i]
                if r.params.top_k > 0 and r.params.top_k < p.numel():
                    kth = torch.topk(p, r.params.top_k).values[-1]
                    p = torch.where(p < kth, torch.zeros_like(p), p)
                if r.params.top_p < 1.0:
                    sp, si = torch.sort(p, descending=True)
                    cum = torch.cumsum(sp, 0)
                    drop = (cum - sp) > r.params.top_p * cum[-1]
                    sp = torch.where(drop, torch.zeros_like(sp), sp)
                    p = torch.zeros_like(p).scatter(0, si, sp)
                probs[i] = p
        if so_far is not None and any(r.allowed for r in reqs):
            probs = probs.clone()
            for i, r in enumerate(reqs):
                if not r.allowed:
                    continue
                n = len(so_far[i])
                ok = sorted({seq[n] for seq in r.allowed if len(seq) > n and seq[:n] == so_far[i]})
                keep = torch.zeros_like(probs[i])
                if ok:
                    keep[ok] = 1.0
                    greedy_ok = ok
                else:  # no allowed continuation (cannot happen unless sequences are inconsistent): end the turn
                    greedy_ok = sorted(self.stop_ids)[:1]
                    keep[greedy_ok] = 1.0
                probs[i] = probs[i] * keep + keep * 1e-30
                if bool(greedy[i]):
                    logp_masked = torch.where(keep > 0, logp[i], torch.full_like(logp[i], -float("inf")))
                    probs[i] = torch.zeros_like(probs[i])
                    probs[i][int(logp_masked.argmax())] = 1.0
        # inverse-CDF sampling with one uniform per row from that request's own RNG: vectorised, and a seeded
        # request draws the same tokens whatever batch it lands in
        u = torch.tensor([g.random() for g in gens], dtype=probs.dtype, device=probs.device)
        cum = torch.cumsum(probs, dim=-1)
        drawn = torch.searchsorted(cum, (u * cum[:, -1])[:, None]).clamp(max=probs.shape[-1] - 1)[:, 0]
        constrained = torch.tensor([bool(r.allowed) for r in reqs], device=probs.device)
        toks = torch.where(greedy & ~constrained, logp.argmax(-1), drawn).tolist()
        idx = torch.tensor(toks, device=logp.device)
        lps = logp.gather(1, idx[:, None])[:, 0].tolist()
        return toks, lps

    def generate_batch(self, reqs: list[GenRequest]) -> list[GenOutput]:
        torch = self.torch
        if self.num_threads and torch.get_num_threads() != self.num_threads:
            torch.set_num_threads(self.num_threads)  # per calling thread under OpenMP: set it in the worker too
        with torch.inference_mode():
            return self._generate(reqs)

    def _prefill(self, prompts: list[list[int]]) -> tuple[Any, Any, Any]:
        """One forward over the prompts: (model output with its KV cache, attention mask [B, W], position ids of the
        rows' tails). The prompts' shared prefix (system prompt + tools) is prefilled once and its cache broadcast
        to every row; each row's own tail follows it, left-padded, so the pads sit between the prefix and the tail."""
        torch = self.torch
        dev = self.device
        keep = {"logits_to_keep": 1} if self._keeps_logits else {}  # the prefill needs the last position only
        lens = [len(p) for p in prompts]
        P = shared_prefix_len(prompts) if len(prompts) > 1 else 0
        P = min(P, min(lens) - 1)
        past = None
        if P >= self.MIN_SHARED_PREFIX:
            head = torch.tensor([prompts[0][:P]], dtype=torch.long, device=dev)
            past = self.model(input_ids=head, use_cache=True, **keep).past_key_values
            if not expand_prefix_cache(past, len(prompts)):
                past, P = None, 0
        else:
            P = 0
        L = max(lens) - P
        ids = torch.full((len(prompts), L), self.pad_id, dtype=torch.long)
        attn = torch.zeros((len(prompts), P + L), dtype=torch.long)
        attn[:, :P] = 1
        for j, p in enumerate(prompts):
            ids[j, L - (lens[j] - P) :] = torch.tensor(p[P:], dtype=torch.long)
            attn[j, P + L - (lens[j] - P) :] = 1
        pos = (attn.cumsum(-1) - 1).clamp(min=0)[:, P:]
        ids, attn, pos = ids.to(dev), attn.to(dev), pos.to(dev)
        out = self.model(input_ids=ids, attention_mask=attn, position_ids=pos, past_key_values=past, use_cache=True,
                         **keep)
        return out, attn, pos

    def _finished(self, req: GenRequest, out: GenOutput, budget: int) -> bool:
        tok = out.token_ids[-1]
        if tok in self.stop_ids or (req.allowed and out.token_ids in req.allowed):
            out.finish_reason = "stop"
            return True
        return len(out.token_ids) >= budget

    def _generate(self, reqs: list[GenRequest]) -> list[GenOutput]:
        torch = self.torch
        dev = self.device
        B = len(reqs)
        lens = [len(r.prompt_ids) for r in reqs]
        budget = [max(0, min(r.params.max_tokens, self.max_len - n)) for r, n in zip(reqs, lens)]
        outs = [GenOutput([], [], "length") for _ in reqs]
        live = [i for i in range(B) if budget[i] > 0 and lens[i] > 0]
        if not live:
            return outs
        sub = [reqs[i] for i in live]
        gens = []
        for r in sub:
            gens.append(self._rng if r.params.seed is None else random.Random(int(r.params.seed)))
        out, attn, pos = self._prefill([reqs[i].prompt_ids for i in live])
        past = out.past_key_values
        steps = max(budget[i] for i in live)
        preallocate_cache(past, steps)
        logits = out.logits[:, -1, :]
        cur = pos[:, -1]
        done = [False] * len(live)
        for step in range(steps):
            toks, lps = self._sample(logits, sub, gens, [outs[i].token_ids for i in live])
            for j, i in enumerate(live):
                if done[j]:
                    continue
                outs[i].token_ids.append(toks[j])
                outs[i].logprobs.append(lps[j])
                done[j] = self._finished(sub[j], outs[i], budget[i])
            if all(done) or step == steps - 1:
                break
            attn = torch.cat([attn, torch.ones((len(live), 1), dtype=attn.dtype, device=dev)], dim=1)
            cur = cur + 1
            nxt = torch.tensor(toks, dtype=torch.long, device=dev)[:, None]
            out = self.model(input_ids=nxt, attention_mask=attn, position_ids=cur[:, None], past_key_values=past, use_cache=True)
            past = out.past_key_values
            logits = out.logits[:, -1, :]
        return outs


    # -- continuous batching (`toolgym.models.engine.ContinuousQueue`) ------------------------------------------
    # Rows live in slots [0, n) of per-layer [slots, kv_heads, columns, head_dim] buffers; every decode step writes
    # column e for all rows, so a row occupies columns [start, e) and a joining row's prefill is right-aligned at e.
    # Position ids are per row (from its own token count), and the attention mask hides columns a row does not own,
    # so results match a solo forward. A finished row's slot is filled by the last row (one row's KV copied).

    # spare columns per (re)allocation, right for decoding and left for longer prompts joining: rows join without
    # moving the batch until they run out (attention only reads the live window, so empty columns cost memory only)
    SLACK_COLUMNS = 512

    def running(self) -> int:
        return len(self._rows)

    def reset(self, parked: bool = False) -> None:
        """Forget every row (after an error, or a worker cancelled mid-batch); with `parked`, the parked KV too."""
        with self._lock:
            self._rows = []
            self._free()
            if parked:
                self._parked.clear()

    def run_until(self, admit: list[tuple[int, GenRequest]], drop: list[int], should_yield: Any
                  ) -> tuple[list[tuple[int, GenOutput]], dict[str, int]]:
        """Admit `(tag, request)` rows, forget `drop` tags, then decode until a row finishes or `should_yield()`."""
        torch = self.torch
        with self._lock:
            if self.num_threads and torch.get_num_threads() != self.num_threads:
                torch.set_num_threads(self.num_threads)
            with torch.inference_mode():
                dropped = set(drop)
                self._remove([j for j, r in enumerate(self._rows) if r.tag in dropped], park=False)
                t0 = time.perf_counter()
                self._counts = {"prefill_tokens": 0, "reused_tokens": 0}
                done = self._admit(admit) if admit else []
                t1 = time.perf_counter()
                steps = rows = 0
                while self._rows and not done and not (steps and should_yield()):
                    rows += len(self._rows)
                    done = self._step()
                    steps += 1
                return done, {"steps": steps, "rows": rows, "prefill_s": t1 - t0,
                              "decode_s": time.perf_counter() - t1, **self._counts}

    def _free(self) -> None:
        self._kb, self._vb, self._mask, self._cache = [], [], None, None
        self._s = self._e = 0

    def _admit(self, items: list[tuple[int, GenRequest]]) -> list[tuple[int, GenOutput]]:
        torch = self.torch
        done: list[tuple[int, GenOutput]] = []
        new: list[tuple[int, GenRequest, int]] = []
        for tag, r in items:
            n = len(r.prompt_ids)
            budget = max(0, min(r.params.max_tokens, self.max_len - n))
            if budget == 0 or n == 0:
                done.append((tag, GenOutput([], [], "length")))
            else:
                new.append((tag, r, budget))
        if not new:
            return done
        # each new row's KV ([1, H, W, D] per layer), mask [W] and last logits: a continued conversation extends a
        # parked row's KV by its new tokens only; the rest share one batched prefill
        parts: list[Any] = [None] * len(new)
        version = self._weights_version()
        if version != self._parked_version:
            self._parked.clear()
            self._parked_version = version
        plain, hits = [], []
        for j, (_, r, _) in enumerate(new):
            hit = self._take_parked(r.prompt_ids)
            if hit is None:
                plain.append(j)
                self._counts["prefill_tokens"] += len(r.prompt_ids)
            else:
                hits.append((j, hit))
                self._counts["prefill_tokens"] += len(r.prompt_ids) - len(hit[0])
                self._counts["reused_tokens"] += len(hit[0])
        if hits:
            for (j, _), part in zip(hits, self._extend([(hit, new[j][1].prompt_ids) for j, hit in hits])):
                parts[j] = part
        if plain:
            out, attn, _ = self._prefill([new[j][1].prompt_ids for j in plain])
            past = out.past_key_values
            if not _plain_dynamic(past):
                if self._rows:  # pragma: no cover - the first admission already raised
                    raise RuntimeError("continuous batching: the KV cache type changed between calls")
                raise ContinuousUnsupported(
                    f"continuous batching needs a plain DynamicCache, not {type(past).__name__}")
            for x, j in enumerate(plain):
                parts[j] = ([la.keys[x : x + 1] for la in past.layers], [la.values[x : x + 1] for la in past.layers],
                            attn[x], out.logits[x, -1])
        b = len(new)
        self._make_room(b, max(p[2].shape[0] for p in parts), parts[0][0], max(bud for _, _, bud in new))
        n0, e = len(self._rows), self._e
        self._mask[n0 : n0 + b] = 0
        starts = []
        for j, (ks, vs, m, _) in enumerate(parts):
            W = m.shape[0]
            for kb, vb, k, v in zip(self._kb, self._vb, ks, vs):
                kb[n0 + j, :, e - W : e] = k[0]
                vb[n0 + j, :, e - W : e] = v[0]
            self._mask[n0 + j, e - W : e] = m
            starts.append(e - W)
        reqs = [r for _, r, _ in new]
        gens = [self._rng if r.params.seed is None else random.Random(int(r.params.seed)) for r in reqs]
        outs = [GenOutput([], [], "length") for _ in new]
        logits = torch.stack([p[3] for p in parts])
        toks, lps = self._sample(logits, reqs, gens, [o.token_ids for o in outs])
        for j, (tag, r, budget) in enumerate(new):
            outs[j].token_ids.append(toks[j])
            outs[j].logprobs.append(lps[j])
            self._rows.append(_Row(tag, r, outs[j], gens[j], budget, len(r.prompt_ids), toks[j], starts[j]))
        self._s = min(r.start for r in self._rows)
        return done + self._remove([n0 + j for j, (_, r, bud) in enumerate(new)
                                    if self._finished(r, outs[j], bud)])

    # -- parked rows: a finished row's KV, kept for the same conversation's next turn --------------------------
    PARKED_BYTES = 256 * 2**20  # KV kept for conversations to continue (oldest dropped first; HFPolicy parked_kv_mb)

    def _weights_version(self) -> int:
        """Changes whenever a parameter is modified in place (optimizer step, load_state_dict): parked KV computed
        with other weights must not be reused."""
        return sum(p._version for p in self.model.parameters())

    def _park(self, row: _Row, j: int) -> None:
        s, e = row.start, self._e
        key = tuple(row.req.prompt_ids) + tuple(row.out.token_ids[:-1])  # tokens whose KV exists (last not fed)
        ks = [kb[j : j + 1, :, s:e].clone() for kb in self._kb]
        vs = [vb[j : j + 1, :, s:e].clone() for vb in self._vb]
        entry = (key, ks, vs, self._mask[j, s:e].clone())
        size = sum(k.numel() * k.element_size() for k in ks) * 2
        if size > self.PARKED_BYTES:
            return
        self._parked.append((entry, size))
        total = sum(sz for _, sz in self._parked)
        while total > self.PARKED_BYTES:
            total -= self._parked.pop(0)[1]

    def _take_parked(self, prompt: list[int]) -> Any:
        """The parked row whose tokens the prompt extends (longest; removed from the pool), or None."""
        best = None
        for x, ((key, *_), _) in enumerate(self._parked):
            n = len(key)
            if n < len(prompt) and (best is None or n > len(self._parked[best][0][0])) \
                    and prompt[n - 1] == key[-1] and tuple(prompt[:n]) == key:
                best = x
        return None if best is None else self._parked.pop(best)[0]

    def _extend(self, items: list[tuple[Any, list[int]]]) -> list[tuple[Any, Any, Any, Any]]:
        """Run each prompt's new tokens past its parked row's KV, all rows in one forward: per row (keys, values,
        mask, last logits) of the whole prompt. Each row's parked KV is right-aligned in the batch's past and its new
        tokens left-padded, so the pads are holes the mask hides; leading columns no row of its own uses are cut."""
        torch = self.torch
        from transformers.cache_utils import DynamicCache

        dev = self.device
        b = len(items)
        Lp = max(entry[3].shape[0] for entry, _ in items)
        Ld = max(len(prompt) - len(entry[0]) for entry, prompt in items)
        ids = torch.full((b, Ld), self.pad_id, dtype=torch.long, device=dev)
        pos = torch.zeros((b, Ld), dtype=torch.long, device=dev)
        mask = torch.zeros((b, Lp + Ld), dtype=torch.bool, device=dev)
        cache = DynamicCache()
        for li in range(len(items[0][0][1])):
            k0 = items[0][0][1][li]
            keys = k0.new_zeros(b, k0.shape[1], Lp, k0.shape[3])
            values = k0.new_zeros(b, k0.shape[1], Lp, k0.shape[3])
            for r, ((_, ks, vs, m), _) in enumerate(items):
                keys[r, :, Lp - m.shape[0] :] = ks[li][0]
                values[r, :, Lp - m.shape[0] :] = vs[li][0]
            cache.update(keys, values, li)
        for r, ((key, _, _, m), prompt) in enumerate(items):
            d = len(prompt) - len(key)
            mask[r, Lp - m.shape[0] : Lp] = m
            mask[r, Lp + Ld - d :] = True
            ids[r, Ld - d :] = torch.tensor(prompt[len(key) :], dtype=torch.long)
            pos[r, Ld - d :] = torch.arange(len(key), len(prompt))
        keep = {"logits_to_keep": 1} if self._keeps_logits else {}
        out = self.model(input_ids=ids, attention_mask=mask, position_ids=pos, past_key_values=cache, use_cache=True,
                         **keep)
        layers = out.past_key_values.layers
        res = []
        for r, ((_, _, _, m), _) in enumerate(items):
            a = Lp - m.shape[0]
            res.append(([la.keys[r : r + 1, :, a:] for la in layers], [la.values[r : r + 1, :, a:] for la in layers],
                        mask[r, a:], out.logits[r, -1]))
        return res

    def _make_room(self, b: int, W: int, keys: list[Any], budget: int) -> None:
        """Slots for `b` more rows and columns for a `W`-wide prefill right-aligned at e plus every row's remaining
        budget; (re)allocates and moves the window [s, e) when they do not fit."""
        torch = self.torch
        n = len(self._rows)
        span = self._e - self._s if n else 0
        rem = max([r.budget - len(r.out.token_ids) for r in self._rows] + [budget])
        slots = self._kb[0].shape[0] if self._kb else 0
        cols = self._kb[0].shape[2] if self._kb else 0
        if self._kb and n + b <= slots and self._e >= W and self._e + rem <= cols:
            return
        new_e = max(span, W) + self.SLACK_COLUMNS
        slots2 = max(n + b, slots if n + b <= slots else 2 * slots, 4)
        cols2 = new_e + rem + self.SLACK_COLUMNS
        off = new_e - span  # the live window moves to [off, new_e)
        kb2, vb2 = [], []
        for k in keys:
            _, H, _, D = k.shape
            kb2.append(k.new_zeros(slots2, H, cols2, D))  # zeros: masked columns must not hold NaN/inf
            vb2.append(k.new_zeros(slots2, H, cols2, D))
        mask2 = torch.zeros((slots2, cols2), dtype=torch.bool, device=self.device)
        if n:
            for k2, v2, k, v in zip(kb2, vb2, self._kb, self._vb):
                k2[:n, :, off:new_e] = k[:n, :, self._s : self._e]
                v2[:n, :, off:new_e] = v[:n, :, self._s : self._e]
            mask2[:n, off:new_e] = self._mask[:n, self._s : self._e]
            for r in self._rows:
                r.start += off - self._s
        self._kb, self._vb, self._mask = kb2, vb2, mask2
        self._s, self._e = (off if n else new_e), new_e
        from transformers.cache_utils import DynamicCache

        self._cache = DynamicCache()
        self._cache.layers = [_slot_layer_class()(k, v) for k, v in zip(kb2, vb2)]

    def _step(self) -> list[tuple[int, GenOutput]]:
        torch = self.torch
        rows, s, e = self._rows, self._s, self._e
        n = len(rows)
        self._mask[:n, e] = 1
        for la in self._cache.layers:
            la.set_view(n, s, e)
        dev = self.device
        ids = torch.tensor([[r.next_tok] for r in rows], dtype=torch.long, device=dev)
        pos = torch.tensor([[r.pos] for r in rows], dtype=torch.long, device=dev)
        # sdpa takes the boolean mask as a ready 4D mask: transformers then skips building one every step
        attn = self._mask[:n, None, None, s : e + 1] if self._sdpa else self._mask[:n, s : e + 1]
        out = self.model(input_ids=ids, attention_mask=attn, position_ids=pos, past_key_values=self._cache,
                         use_cache=True)
        self._e = e + 1
        toks, lps = self._sample(out.logits[:, -1, :], [r.req for r in rows], [r.gen for r in rows],
                                 [r.out.token_ids for r in rows])
        fin = []
        for j, r in enumerate(rows):
            r.out.token_ids.append(toks[j])
            r.out.logprobs.append(lps[j])
            r.next_tok, r.pos = toks[j], r.pos + 1
            if self._finished(r.req, r.out, r.budget):
                fin.append(j)
        return self._remove(fin)

    def _remove(self, idx: list[int], park: bool = True) -> list[tuple[int, GenOutput]]:
        """Take rows out (their outputs returned; their KV parked unless `park` is False); the last row moves into
        each freed slot."""
        res = []
        rows, s, e = self._rows, self._s, self._e
        for j in sorted(idx, reverse=True):
            res.append((rows[j].tag, rows[j].out))
            if park:
                self._park(rows[j], j)
            last = len(rows) - 1
            if j != last:
                for kb, vb in zip(self._kb, self._vb):
                    kb[j, :, s:e] = kb[last, :, s:e]
                    vb[j, :, s:e] = vb[last, :, s:e]
                self._mask[j] = self._mask[last]
                rows[j] = rows[last]
            rows.pop()
        if not rows:
            self._free()
        elif idx:
            self._s = min(r.start for r in rows)
        return res[::-1]


class HFPolicy(ModelPolicy):
    """`hf:PATH_OR_NAME` -- a transformers model in this process.

    Options: temperature, top_p, top_k, max_tokens, seed, tool_format ("auto"|"hermes"|"pythonic"|"llama3"),
    device ("auto"|"cpu"|"cuda[:i]"), dtype ("auto"|"float32"|"bfloat16"|...), max_batch, batch_wait_s,
    batch_gather_s (with several rollouts in flight, wait up to this long for all of them to ask before a batch),
    batching ("continuous": rows join and leave the running decode batch, the default; "static": one batch at a
    time, each running until its longest row ends), parked_kv_mb (finished turns' KV kept for the conversation's
    next turn, continuous batching; 0 = off),
    chat_template (inline text or .jinja path), template_kwargs (e.g. {"enable_thinking": False}),
    check_template ("strict"|"tools"|False), trust_remote_code, num_threads ("auto"|int),
    model / tokenizer (objects already loaded).
    """

    name = "hf"

    def __init__(
        self,
        target: str | None = None,
        *,
        model: Any = None,
        tokenizer: Any = None,
        device: str | None = "auto",
        dtype: str | None = "auto",
        chat_template: str | None = None,
        template_kwargs: dict[str, Any] | None = None,
        trust_remote_code: bool = False,
        num_threads: int | str | None = "auto",
        parked_kv_mb: float = 256,
        **options: Any,
    ) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.target = target
        if tokenizer is None:
            tokenizer = AutoTokenizer.from_pretrained(target, trust_remote_code=trust_remote_code)
        if model is None:
            dev, dt = resolve_device_dtype(device, dtype)
            model = AutoModelForCausalLM.from_pretrained(target, dtype=dt, trust_remote_code=trust_remote_code)
            model.to(dev)
        model.eval()
        self.model, self.tokenizer = model, tokenizer
        renderer = ChatRenderer(tokenizer, load_chat_template(chat_template), template_kwargs)
        stop = set(renderer.stop_ids)
        gen_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
        if gen_eos is not None:
            stop.update(gen_eos if isinstance(gen_eos, list) else [gen_eos])
        renderer.stop_ids = sorted(stop)
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else renderer.stop_ids[0]
        self.engine = HFEngine(model, pad, renderer.stop_ids, num_threads=_threads(model, num_threads))
        if parked_kv_mb < 0:
            raise ValueError(f"parked_kv_mb must be >= 0, not {parked_kv_mb}")
        self.engine.PARKED_BYTES = int(parked_kv_mb * 2**20)
        options = {k: v for k, v in options.items() if k in _POLICY_OPTIONS}
        options.setdefault("batching", "continuous")
        super().__init__(renderer, **options)

    def generate_batch(self, requests: list[GenRequest]) -> list[GenOutput]:
        return self.engine.generate_batch(requests)

    def continuous_stepper(self) -> Any:
        return self.engine

    async def aclose(self) -> None:
        await super().aclose()
        await asyncio.to_thread(self.engine.reset, True)  # parked KV back; waits for a cancelled worker's last step

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Copy new weights into the model in place (for a trainer holding a separate copy)."""
        self.model.load_state_dict(state_dict, strict=False)


def _threads(model: Any, num_threads: int | str | None) -> int | None:
    """CPU intra-op threads for generation. "auto": 1 for models under 20M parameters on CPU -- their matmuls are
    too small to split, and on a shared 2-core machine OpenMP spinning made a 0.2M model ~100x slower with 2
    threads (measured) -- else torch's default. Note `torch.set_num_threads` is process-wide."""
    if num_threads in (None, "auto"):
        p = next(model.parameters())
        if p.device.type == "cpu" and sum(x.numel() for x in model.parameters()) < 20_000_000:
            return 1
        return None
    return int(num_threads)


_POLICY_OPTIONS = {
    "allowed_outputs", "temperature", "top_p", "top_k", "max_tokens", "seed", "tool_format", "check_template",
    "max_batch", "batch_wait_s", "batch_gather_s", "batching",
}


def load_hf(target: str, env: Any = None, **options: Any) -> HFPolicy:
    """Scheme factory for `hf:PATH_OR_NAME`."""
    return HFPolicy(target, **options)
