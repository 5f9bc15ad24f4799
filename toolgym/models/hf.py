"""In-process transformers engine (`hf:PATH_OR_NAME`): batched sampling with a KV cache, CPU or CUDA.

Concurrent `act` calls of many rollouts are gathered by the `BatchQueue` into one left-padded batch; a custom
sampling loop (prefill, then one token per step with `DynamicCache`) applies per-request temperature / top-p /
top-k / max_tokens / seed, stops each row on the template's end-of-turn tokens, and returns sampled ids with their
logprobs (log-softmax of logits / temperature). Position ids are derived from the attention mask, so left padding
does not shift positions and results match an unpadded forward pass.

`HFPolicy(model=..., tokenizer=...)` can wrap objects already in memory (e.g. the trainer's model, so rollouts see
the current weights without any copy).
"""

from __future__ import annotations

import inspect
import random
from pathlib import Path
from typing import Any

from toolgym.models.chat import ChatRenderer
from toolgym.models.engine import GenOutput, GenRequest, ModelPolicy


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


def expand_prefix_cache(past: Any, batch: int) -> bool:
    """Make a one-row KV cache (of a shared prefix) serve `batch` rows, as a broadcast view (the next forward's
    concatenation materialises it; autograd sums the rows' gradients back into the prefix). Only plain
    `DynamicLayer` caches qualify -- sliding-window, convolution (LFM2) or offloaded caches return False and the
    caller runs the full forward instead."""
    try:
        from transformers.cache_utils import DynamicCache, DynamicLayer
    except ImportError:  # pragma: no cover - older transformers
        return False
    layers = getattr(past, "layers", None)
    if type(past) is not DynamicCache or not layers or any(type(la) is not DynamicLayer for la in layers):
        return False
    for la in layers:
        la.keys = la.keys.expand(batch, *la.keys.shape[1:])
        la.values = la.values.expand(batch, *la.values.shape[1:])
    return True


def preallocate_cache(past: Any, extra: int) -> bool:
    """Give each plain `DynamicLayer` of `past` room for `extra` more positions, written in place: a decode step
    then appends one token instead of concatenating (copying) the whole cache, which was a fifth of the sampling
    time of a tic-tac-toe batch. Returns False (cache untouched) for any other cache type."""
    try:
        from transformers.cache_utils import DynamicCache, DynamicLayer
    except ImportError:  # pragma: no cover - older transformers
        return False
    layers = getattr(past, "layers", None)
    if type(past) is not DynamicCache or not layers or any(type(la) is not DynamicLayer for la in layers):
        return False
    past.layers = [_PreallocatedLayer(la.keys, la.values, extra) for la in layers]
    return True


def _prealloc_layer_class() -> Any:
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


def _PreallocatedLayer(keys: Any, values: Any, extra: int) -> Any:  # noqa: N802 - a lazily built class
    global _PREALLOC_CLS
    if _PREALLOC_CLS is None:
        _PREALLOC_CLS = _prealloc_layer_class()
    return _PREALLOC_CLS(keys, values, extra)


_PREALLOC_CLS: Any = None


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
        keep = {"logits_to_keep": 1} if self._keeps_logits else {}  # the prefill needs the last position only
        # the prompts' shared prefix (system prompt + tools) is prefilled once and its cache broadcast to every row;
        # each row's own tail follows it, left-padded, so the pads sit between the prefix and the tail
        P = shared_prefix_len([reqs[i].prompt_ids for i in live]) if len(live) > 1 else 0
        P = min(P, min(lens[i] for i in live) - 1)
        past = None
        if P >= self.MIN_SHARED_PREFIX:
            head = torch.tensor([reqs[live[0]].prompt_ids[:P]], dtype=torch.long, device=dev)
            past = self.model(input_ids=head, use_cache=True, **keep).past_key_values
            if not expand_prefix_cache(past, len(live)):
                past, P = None, 0
        else:
            P = 0
        L = max(lens[i] for i in live) - P
        ids = torch.full((len(live), L), self.pad_id, dtype=torch.long)
        attn = torch.zeros((len(live), P + L), dtype=torch.long)
        attn[:, :P] = 1
        for j, i in enumerate(live):
            ids[j, L - (lens[i] - P) :] = torch.tensor(reqs[i].prompt_ids[P:], dtype=torch.long)
            attn[j, P + L - (lens[i] - P) :] = 1
        pos = (attn.cumsum(-1) - 1).clamp(min=0)[:, P:]
        ids, attn, pos = ids.to(dev), attn.to(dev), pos.to(dev)
        out = self.model(input_ids=ids, attention_mask=attn, position_ids=pos, past_key_values=past, use_cache=True,
                         **keep)
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
                if toks[j] in self.stop_ids or (sub[j].allowed and outs[i].token_ids in sub[j].allowed):
                    outs[i].finish_reason = "stop"
                    done[j] = True
                elif len(outs[i].token_ids) >= budget[i]:
                    done[j] = True
            if all(done) or step == steps - 1:
                break
            attn = torch.cat([attn, torch.ones((len(live), 1), dtype=attn.dtype, device=dev)], dim=1)
            cur = cur + 1
            nxt = torch.tensor(toks, dtype=torch.long, device=dev)[:, None]
            out = self.model(input_ids=nxt, attention_mask=attn, position_ids=cur[:, None], past_key_values=past, use_cache=True)
            past = out.past_key_values
            logits = out.logits[:, -1, :]
        return outs


class HFPolicy(ModelPolicy):
    """`hf:PATH_OR_NAME` -- a transformers model in this process.

    Options: temperature, top_p, top_k, max_tokens, seed, tool_format ("auto"|"hermes"|"pythonic"|"llama3"),
    device ("auto"|"cpu"|"cuda[:i]"), dtype ("auto"|"float32"|"bfloat16"|...), max_batch, batch_wait_s,
    batch_gather_s (with several rollouts in flight, wait up to this long for all of them to ask before a batch),
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
        options = {k: v for k, v in options.items() if k in _POLICY_OPTIONS}
        super().__init__(renderer, **options)

    def generate_batch(self, requests: list[GenRequest]) -> list[GenOutput]:
        return self.engine.generate_batch(requests)

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
    "max_batch", "batch_wait_s", "batch_gather_s",
}


def load_hf(target: str, env: Any = None, **options: Any) -> HFPolicy:
    """Scheme factory for `hf:PATH_OR_NAME`."""
    return HFPolicy(target, **options)
