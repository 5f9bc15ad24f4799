"""In-process transformers engine (`hf:PATH_OR_NAME`): batched sampling with a KV cache, CPU or CUDA.

Concurrent `act` calls of many rollouts share one decode batch. By default (`batching="continuous"`,
`ContinuousQueue` + `HFEngine.run_until`, `toolgym.policies.continuous`) a request joins the running batch at the
next token boundary and leaves it when its row ends, and a conversation's next turn extends its previous turn's
parked KV; with `batching="static"` (`BatchQueue` + `HFEngine.generate_batch`) each left-padded batch runs until its
longest row ends. A custom sampling loop applies per-request temperature / top-p / top-k / max_tokens / seed, stops
each row on the template's end-of-turn tokens, and returns sampled ids with their logprobs (log-softmax of logits /
temperature). Position ids are per row, derived from its own tokens, so padding and a row's place in the batch do
not shift positions and results match an unpadded forward pass. The caches are in `toolgym.policies.kv_cache`.

`HFPolicy(model=..., tokenizer=...)` can wrap objects already in memory (e.g. the trainer's model, so rollouts see
the current weights without any copy); whoever changes those weights in place calls `policy.weights_changed()`
(`load_state_dict` does) so that KV computed with the old weights is not reused.
"""

from __future__ import annotations

import asyncio
import inspect
import random
from typing import Any

from toolgym.models.chat import ChatRenderer, load_chat_template
from toolgym.policies.batching import GenOutput, GenRequest
from toolgym.policies.continuous import ContinuousBatcher
from toolgym.policies.kv_cache import expand_prefix_cache, preallocate_cache, shared_prefix_len
from toolgym.policies.lean_decode import LeanDecoder
from toolgym.policies.ngram_draft import NgramDrafter
from toolgym.policies.model import ModelPolicy


def resolve_device_dtype(device: str | None = "auto", dtype: str | None = "auto") -> tuple[Any, Any]:
    """The torch device and dtype for "auto" (CUDA if present, bf16 where supported, fp32 on CPU) or given names."""
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


class HFEngine(ContinuousBatcher):
    """Blocking batched generation with a transformers causal LM: static batches (`generate_batch`) and the
    continuous-batching stepper (`run_until`, from `ContinuousBatcher`); `parked_bytes` bounds the KV kept for
    conversations to continue."""

    PARKED_BYTES = 256 * 2**20  # default KV kept for conversations to continue (HFPolicy's parked_kv_mb)

    def __init__(self, model: Any, pad_id: int, stop_ids: list[int], max_len: int | None = None,
                 num_threads: int | None = None, parked_bytes: int = PARKED_BYTES, prefix_min: int = 0,
                 lean_decode: bool = True, draft_tokens: int = 0):
        import torch

        super().__init__(parked_bytes, prefix_min)
        self.torch = torch
        self.num_threads = num_threads
        self.model = model
        self.pad_id = pad_id
        self.stop_ids = set(stop_ids)
        cfg = getattr(model, "config", None)
        self.max_len = max_len or getattr(cfg, "max_position_embeddings", None) or 4096
        self.rng = random.Random(0)  # draws of unseeded requests
        self.keeps_logits = supports_logits_to_keep(model)
        self.sdpa = getattr(getattr(model, "config", None), "_attn_implementation", None) == "sdpa"
        self.lean = LeanDecoder(model) if lean_decode and LeanDecoder.supports(model) else None
        if draft_tokens < 0:
            raise ValueError(f"draft_tokens must be >= 0, not {draft_tokens}")
        self.drafter = NgramDrafter(draft_tokens) if draft_tokens and self.lean is not None else None

    MIN_SHARED_PREFIX = 16  # shorter shared prompt prefixes are prefilled with the rest

    @property
    def device(self) -> Any:
        return next(self.model.parameters()).device

    def sample(
        self, logits: Any, reqs: list[GenRequest], gens: list[Any], so_far: list[list[int]] | None = None
    ) -> tuple[list[int], list[float]]:
        """One token per row from `logits` [B, V] with each request's sampling params and its own generator (and,
        for constrained requests, only continuations of `allowed` given the tokens `so_far`): (tokens, logprobs)."""
        torch = self.torch
        logits = logits.float()
        if all(r.params.temperature <= 0 and not r.constrained for r in reqs):
            # all greedy and unconstrained: what the general path below gives, in 3 tensor ops instead of ~20 (each
            # row's uniform is still drawn, so an unseeded request sharing the engine's generator draws as before)
            for g in gens:
                g.random()
            logp = torch.log_softmax(logits, dim=-1)
            idx = logp.argmax(-1)
            return idx.tolist(), logp.gather(1, idx[:, None])[:, 0].tolist()
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
        masked = [False] * len(reqs)
        if so_far is not None and any(r.constrained for r in reqs):
            probs = probs.clone()
            for i, r in enumerate(reqs):
                if r.allowed:
                    n = len(so_far[i])
                    ok = sorted({seq[n] for seq in r.allowed if len(seq) > n and seq[:n] == so_far[i]})
                elif r.constraint is not None:
                    nxt = r.constraint.allowed(so_far[i])
                    if nxt is None:  # free here (outside a tool call)
                        continue
                    ok = sorted(t for t in nxt if t < probs.shape[-1])
                else:
                    continue
                masked[i] = True
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
        # request draws the same tokens whatever batch it lands in. In float64: a float32 cumsum stops growing in the
        # tail, so a uniform near 1 picked among tail tokens by rounding -- a batch's last-bit differences then
        # changed a seeded draw (an eval at concurrency 1 vs 6, measured)
        p64 = probs.to("cpu" if probs.device.type == "mps" else probs.device, torch.float64)  # MPS has no float64
        u = torch.tensor([g.random() for g in gens], dtype=torch.float64, device=p64.device)
        cum = torch.cumsum(p64, dim=-1)
        drawn = torch.searchsorted(cum, (u * cum[:, -1])[:, None]).clamp(max=probs.shape[-1] - 1)[:, 0]
        drawn = drawn.to(probs.device)
        constrained = torch.tensor(masked, device=probs.device)
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

    def prefill(self, prompts: list[list[int]]) -> tuple[Any, Any, Any]:
        """One forward over the prompts: (model output with its KV cache, attention mask [B, W], position ids of the
        rows' tails). The prompts' shared prefix (system prompt + tools) is prefilled once and its cache broadcast
        to every row; each row's own tail follows it, left-padded, so the pads sit between the prefix and the tail."""
        torch = self.torch
        dev = self.device
        keep = {"logits_to_keep": 1} if self.keeps_logits else {}  # the prefill needs the last position only
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

    def finished(self, req: GenRequest, out: GenOutput, budget: int) -> bool:
        """Whether a row ends with its last token (an end-of-turn token, a complete allowed output, or its budget);
        sets `finish_reason` to "stop" for the first two."""
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
            gens.append(self.rng if r.params.seed is None else random.Random(int(r.params.seed)))
        out, attn, pos = self.prefill([reqs[i].prompt_ids for i in live])
        past = out.past_key_values
        steps = max(budget[i] for i in live)
        preallocate_cache(past, steps)
        logits = out.logits[:, -1, :]
        cur = pos[:, -1]
        done = [False] * len(live)
        for step in range(steps):
            toks, lps = self.sample(logits, sub, gens, [outs[i].token_ids for i in live])
            for j, i in enumerate(live):
                if done[j]:
                    continue
                outs[i].token_ids.append(toks[j])
                outs[i].logprobs.append(lps[j])
                done[j] = self.finished(sub[j], outs[i], budget[i])
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
    """`hf:PATH_OR_NAME` -- a transformers model in this process. Takes the options of `ModelPolicy` (sampling,
    tool format, batching; `batching` defaults to "continuous" here) and:

    Args:
        model: A model object already loaded (e.g. the trainer's: rollouts then see its current weights).
        tokenizer: A tokenizer object already loaded.
        device: "auto", "cpu" or "cuda[:i]".
        dtype: "auto", "float32", "bfloat16", ...
        chat_template: A chat template, inline text or a .jinja path (default: the tokenizer's).
        template_kwargs: Extra chat-template variables, e.g. {"enable_thinking": False}.
        trust_remote_code: Let transformers run the model repository's own code.
        num_threads: CPU threads for generation: "auto" or a number.
        parked_kv_mb: KV of finished turns kept for the conversation's next turn (continuous batching; 0: off).
        prefix_kv_min: A new conversation reuses the parked KV of the longest prompt prefix it shares with a finished
            one (the system prompt and tool schemas), when at least this many tokens (0: off).
        lean_decode: Decode steps of continuous batching run the model's arithmetic in fewer Python steps than a
            transformers forward, for the architectures `toolgym.policies.lean_decode` supports (Llama, Qwen2/3,
            Mistral without sliding windows; others keep the transformers forward). False: always transformers.
        draft_tokens: Speculative decoding (continuous batching, lean decode step): up to this many tokens per row
            and step are drafted from n-grams the engine generated before (`toolgym.policies.ngram_draft`) and
            checked in one forward; a row keeps the drafted tokens equal to what it draws at their positions, so
            its tokens are those of plain decoding, greedy or seeded sampling alike. 0: off.
    """

    name = "hf"

    def __init__(
        self,
        target: str | None = None,
        /,
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
        prefix_kv_min: int = 32,
        lean_decode: bool = True,
        draft_tokens: int = 6,
        **options: Any,
    ) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if parked_kv_mb < 0:
            raise ValueError(f"parked_kv_mb must be >= 0, not {parked_kv_mb}")
        if prefix_kv_min < 0:
            raise ValueError(f"prefix_kv_min must be >= 0, not {prefix_kv_min}")
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
        self.engine = HFEngine(model, pad, renderer.stop_ids, num_threads=_threads(model, num_threads),
                               parked_bytes=int(parked_kv_mb * 2**20), prefix_min=prefix_kv_min,
                               lean_decode=lean_decode, draft_tokens=draft_tokens)
        options.setdefault("batching", "continuous")
        super().__init__(renderer, **options)

    def generate_batch(self, requests: list[GenRequest]) -> list[GenOutput]:
        return self.engine.generate_batch(requests)

    def continuous_stepper(self) -> Any:
        return self.engine

    def weights_changed(self) -> None:
        """The model's weights were modified in place: the parked KV (computed with the old ones) is dropped."""
        self.engine.weights_changed()

    async def aclose(self) -> None:
        await super().aclose()
        await asyncio.to_thread(self.engine.reset, True)  # parked KV back; waits for a cancelled worker's last step

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Copy new weights into the model in place (for a trainer holding a separate copy)."""
        self.model.load_state_dict(state_dict, strict=False)
        self.weights_changed()


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
