"""Continuous batching for the transformers engine: rows join and leave a running decode batch at token boundaries
(driven by `toolgym.policies.batching.ContinuousQueue` through `run_until`).

Rows live in slots [0, n) of per-layer [slots, kv_heads, columns, head_dim] buffers (`SlotBuffers`); every decode
step writes column `end` for all rows, so a row occupies columns [row.start, end) and a joining row's prefill is
right-aligned at `end`. Position ids are per row (from its own token count), and the attention mask hides columns a
row does not own, so results match a solo forward. A finished row's slot is filled by the last row (one row's KV
copied). A finished row's KV is parked (`toolgym.policies.kv_cache.ParkedPool`): when the same conversation's next
turn arrives, only its new tokens are run past the parked KV (`_extend`, all such rows in one forward). When the
engine has a drafter (`toolgym.policies.ngram_draft`), a step runs each row's next token and its drafted continuation
in one forward (`_spec_step`) and keeps the drafted tokens that equal what the row draws at their positions (the
tokens of plain decoding); the columns a row does not keep are holes its mask hides, and a parked row keeps only the
columns it attends.

`ContinuousBatcher` is the base of `toolgym.policies.hf.HFEngine`, which supplies the model-facing primitives:
`model`, `device`, `torch`, `pad_id`, `max_len`, `num_threads`, `rng` (for unseeded requests), `keeps_logits`,
`sdpa`, and the methods `prefill(prompts)`, `sample(logits, requests, generators, so_far)` and
`finished(request, output, budget)`.
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from toolgym.policies.batching import ContinuousUnsupported, GenOutput, GenRequest
from toolgym.policies.kv_cache import ParkedKV, ParkedPool, plain_dynamic, slot_layer_class


@dataclass
class Row:
    """A request decoding in the continuous batch."""

    tag: int
    req: GenRequest
    out: GenOutput
    gen: random.Random
    budget: int
    pos: int  # position id of `next_tok`
    next_tok: int  # sampled (and in `out`), not yet fed to the model
    start: int  # first column of this row in the slot buffers


@dataclass
class RowPrefill:
    """A joining row's KV over its whole prompt (per layer [1, kv_heads, W, head_dim]), the mask of its W columns
    and the logits of its last position (which sample its first token)."""

    keys: list[Any]
    values: list[Any]
    mask: Any
    logits: Any


@dataclass
class SlotBuffers:
    """The running batch's KV: per-layer `keys`/`values` buffers [slots, kv_heads, columns, head_dim], the attention
    `mask` [slots, columns], a `DynamicCache` of `SlotLayer`s viewing the buffers, and the live columns
    [start, end). Empty (no buffers) while no row runs."""

    keys: list[Any] = field(default_factory=list)
    values: list[Any] = field(default_factory=list)
    mask: Any = None
    cache: Any = None
    start: int = 0
    end: int = 0


class ContinuousBatcher:
    """The `run_until` stepper of `ContinuousQueue` (see the module docstring for what a subclass supplies)."""

    # spare columns per (re)allocation, right for decoding and left for longer prompts joining: rows join without
    # moving the batch until they run out (attention only reads the live window, so empty columns cost memory only)
    SLACK_COLUMNS = 512

    # supplied by the subclass (`HFEngine`)
    torch: Any
    model: Any
    device: Any
    pad_id: int
    max_len: int
    num_threads: int | None
    rng: random.Random
    keeps_logits: bool
    sdpa: bool
    lean: Any = None  # a `toolgym.policies.lean_decode.LeanDecoder` where the model supports one
    drafter: Any = None  # a `toolgym.policies.ngram_draft.NgramDrafter`: speculative steps (needs `lean`)

    # per-`run_until` counters, returned with its step counts
    COUNTERS = ("prefill_tokens", "reused_tokens", "drafted_tokens", "accepted_tokens")

    def __init__(self, parked_bytes: int, prefix_min: int = 0) -> None:
        self._lock = threading.Lock()
        self.rows: list[Row] = []
        self.slots = SlotBuffers()
        self.parked = ParkedPool(parked_bytes, prefix_min)
        self._counts = dict.fromkeys(self.COUNTERS, 0)

    def prefill(self, prompts: list[list[int]]) -> tuple[Any, Any, Any]:  # pragma: no cover - supplied by HFEngine
        raise NotImplementedError

    def sample(self, logits: Any, reqs: list[GenRequest], gens: list[Any], so_far: list[list[int]] | None = None
               ) -> tuple[list[int], list[float]]:  # pragma: no cover - supplied by HFEngine
        raise NotImplementedError

    def finished(self, req: GenRequest, out: GenOutput, budget: int) -> bool:  # pragma: no cover - supplied
        raise NotImplementedError

    # -- the stepper (`ContinuousQueue`) ---------------------------------------------------------------------------
    def running(self) -> int:
        return len(self.rows)

    def reset(self, parked: bool = False) -> None:
        """Forget every row (after an error, or a worker cancelled mid-batch); with `parked`, the parked KV too."""
        with self._lock:
            self.rows = []
            self._free()
            if parked:
                self.parked.clear()

    def weights_changed(self) -> None:
        """The model's weights changed: parked KV computed with the old ones must not be reused."""
        with self._lock:
            self.parked.clear()

    def run_until(self, admit: list[tuple[int, GenRequest]], drop: list[int], should_yield: Any
                  ) -> tuple[list[tuple[int, GenOutput]], dict[str, int]]:
        """Admit `(tag, request)` rows, forget `drop` tags, then decode until a row finishes or `should_yield()`."""
        torch = self.torch
        with self._lock:
            if self.num_threads and torch.get_num_threads() != self.num_threads:
                torch.set_num_threads(self.num_threads)
            with torch.inference_mode():
                dropped = set(drop)
                self._remove([j for j, r in enumerate(self.rows) if r.tag in dropped], park=False)
                t0 = time.perf_counter()
                self._counts = dict.fromkeys(self.COUNTERS, 0)
                done = self._admit(admit) if admit else []
                t1 = time.perf_counter()
                steps = rows = 0
                while self.rows and not done and not (steps and should_yield()):
                    rows += len(self.rows)
                    done = self._step()
                    steps += 1
                return done, {"steps": steps, "rows": rows, "prefill_s": t1 - t0,
                              "decode_s": time.perf_counter() - t1, **self._counts}

    # -- rows joining ----------------------------------------------------------------------------------------------
    def _free(self) -> None:
        self.slots = SlotBuffers()

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
        # each new row's KV, mask and last logits: a continued conversation extends a parked row's KV by its new
        # tokens only; the rest share one batched prefill
        parts: list[Any] = [None] * len(new)
        plain, hits = [], []
        for j, (_, r, _) in enumerate(new):
            hit = self.parked.take(r.prompt_ids)
            if hit is None:
                plain.append(j)
                self._counts["prefill_tokens"] += len(r.prompt_ids)
            else:
                hits.append((j, hit))
                self._counts["prefill_tokens"] += len(r.prompt_ids) - len(hit.tokens)
                self._counts["reused_tokens"] += len(hit.tokens)
        if hits:
            for (j, _), part in zip(hits, self._extend([(hit, new[j][1].prompt_ids) for j, hit in hits])):
                parts[j] = part
        if plain:
            out, attn, _ = self.prefill([new[j][1].prompt_ids for j in plain])
            past = out.past_key_values
            if not plain_dynamic(past):
                if self.rows:  # pragma: no cover - the first admission already raised
                    raise RuntimeError("continuous batching: the KV cache type changed between calls")
                raise ContinuousUnsupported(
                    f"continuous batching needs a plain DynamicCache, not {type(past).__name__}")
            for x, j in enumerate(plain):
                parts[j] = RowPrefill([la.keys[x : x + 1] for la in past.layers],
                                      [la.values[x : x + 1] for la in past.layers], attn[x], out.logits[x, -1])
        b = len(new)
        self._make_room(b, max(p.mask.shape[0] for p in parts), parts[0].keys, max(bud for _, _, bud in new))
        sl = self.slots
        n0, e = len(self.rows), sl.end
        sl.mask[n0 : n0 + b] = 0
        starts = []
        for j, part in enumerate(parts):
            W = part.mask.shape[0]
            for kb, vb, k, v in zip(sl.keys, sl.values, part.keys, part.values):
                kb[n0 + j, :, e - W : e] = k[0]
                vb[n0 + j, :, e - W : e] = v[0]
            sl.mask[n0 + j, e - W : e] = part.mask
            starts.append(e - W)
        reqs = [r for _, r, _ in new]
        gens = [self.rng if r.params.seed is None else random.Random(int(r.params.seed)) for r in reqs]
        outs = [GenOutput([], [], "length") for _ in new]
        logits = torch.stack([p.logits for p in parts])
        toks, lps = self.sample(logits, reqs, gens, [o.token_ids for o in outs])
        for j, (tag, r, budget) in enumerate(new):
            outs[j].token_ids.append(toks[j])
            outs[j].logprobs.append(lps[j])
            self.rows.append(Row(tag, r, outs[j], gens[j], budget, len(r.prompt_ids), toks[j], starts[j]))
        sl.start = min(r.start for r in self.rows)
        return done + self._remove([n0 + j for j, (_, r, bud) in enumerate(new)
                                    if self.finished(r, outs[j], bud)])

    def _extend(self, items: list[tuple[ParkedKV, list[int]]]) -> list[RowPrefill]:
        """Run each prompt's new tokens past its parked row's KV, all rows in one forward: per row the KV, mask and
        last logits of the whole prompt. Each row's parked KV is right-aligned in the batch's past and its new
        tokens left-padded, so the pads are holes the mask hides; leading columns no row of its own uses are cut."""
        torch = self.torch
        from transformers.cache_utils import DynamicCache

        dev = self.device
        b = len(items)
        Lp = max(entry.width for entry, _ in items)
        Ld = max(len(prompt) - len(entry.tokens) for entry, prompt in items)
        ids = torch.full((b, Ld), self.pad_id, dtype=torch.long, device=dev)
        pos = torch.zeros((b, Ld), dtype=torch.long, device=dev)
        mask = torch.zeros((b, Lp + Ld), dtype=torch.bool, device=dev)
        cache = DynamicCache()
        first = items[0][0]
        for li in range(len(first.keys)):
            k0 = first.keys[li]
            keys = k0.new_zeros(b, k0.shape[1], Lp, k0.shape[3])
            values = k0.new_zeros(b, k0.shape[1], Lp, k0.shape[3])
            for r, (entry, _) in enumerate(items):
                keys[r, :, Lp - entry.width :] = entry.keys[li][0]
                values[r, :, Lp - entry.width :] = entry.values[li][0]
            cache.update(keys, values, li)
        for r, (entry, prompt) in enumerate(items):
            n = len(entry.tokens)
            d = len(prompt) - n
            mask[r, Lp - entry.width : Lp] = entry.mask
            mask[r, Lp + Ld - d :] = True
            ids[r, Ld - d :] = torch.tensor(prompt[n:], dtype=torch.long)
            pos[r, Ld - d :] = torch.arange(n, len(prompt))
        keep = {"logits_to_keep": 1} if self.keeps_logits else {}
        out = self.model(input_ids=ids, attention_mask=mask, position_ids=pos, past_key_values=cache, use_cache=True,
                         **keep)
        layers = out.past_key_values.layers
        res = []
        for r, (entry, _) in enumerate(items):
            a = Lp - entry.width
            res.append(RowPrefill([la.keys[r : r + 1, :, a:] for la in layers],
                                  [la.values[r : r + 1, :, a:] for la in layers], mask[r, a:], out.logits[r, -1]))
        return res

    def _make_room(self, b: int, W: int, keys: list[Any], budget: int) -> None:
        """Slots for `b` more rows and columns for a `W`-wide prefill right-aligned at `end` plus every row's
        remaining budget; (re)allocates and moves the window [start, end) when they do not fit."""
        torch = self.torch
        sl = self.slots
        n = len(self.rows)
        span = sl.end - sl.start if n else 0
        rem = max([r.budget - len(r.out.token_ids) for r in self.rows] + [budget])
        slots = sl.keys[0].shape[0] if sl.keys else 0
        cols = sl.keys[0].shape[2] if sl.keys else 0
        if sl.keys and n + b <= slots and sl.end >= W and sl.end + rem <= cols:
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
            for k2, v2, k, v in zip(kb2, vb2, sl.keys, sl.values):
                k2[:n, :, off:new_e] = k[:n, :, sl.start : sl.end]
                v2[:n, :, off:new_e] = v[:n, :, sl.start : sl.end]
            mask2[:n, off:new_e] = sl.mask[:n, sl.start : sl.end]
            for r in self.rows:
                r.start += off - sl.start
        from transformers.cache_utils import DynamicCache

        cache = DynamicCache()
        layer = slot_layer_class()
        cache.layers = [layer(k, v) for k, v in zip(kb2, vb2)]
        self.slots = SlotBuffers(kb2, vb2, mask2, cache, off if n else new_e, new_e)

    # -- decoding and rows leaving ---------------------------------------------------------------------------------
    def _step(self) -> list[tuple[int, GenOutput]]:
        torch = self.torch
        rows, sl = self.rows, self.slots
        s, e = sl.start, sl.end
        n = len(rows)
        if self.drafter is not None and self.lean is not None and not self.model.training:
            drafts = self._drafts()
            if drafts is not None:
                return self._spec_step(drafts)
        sl.mask[:n, e] = 1
        dev = self.device
        ids = torch.tensor([[r.next_tok] for r in rows], dtype=torch.long, device=dev)
        pos = torch.tensor([[r.pos] for r in rows], dtype=torch.long, device=dev)
        if self.lean is not None and not self.model.training:
            # the same arithmetic as the model's forward in fewer Python steps (`toolgym.policies.lean_decode`)
            logits = self.lean.step(ids, pos, sl.keys, sl.values, sl.mask[:n, None, None, s : e + 1], n, s, e)
        else:
            for la in sl.cache.layers:
                la.set_view(n, s, e)
            # sdpa takes the boolean mask as a ready 4D mask: transformers then skips building one every step
            attn = sl.mask[:n, None, None, s : e + 1] if self.sdpa else sl.mask[:n, s : e + 1]
            out = self.model(input_ids=ids, attention_mask=attn, position_ids=pos, past_key_values=sl.cache,
                             use_cache=True)
            logits = out.logits[:, -1, :]
        sl.end = e + 1
        toks, lps = self.sample(logits, [r.req for r in rows], [r.gen for r in rows],
                                [r.out.token_ids for r in rows])
        fin = []
        for j, r in enumerate(rows):
            r.out.token_ids.append(toks[j])
            r.out.logprobs.append(lps[j])
            r.next_tok, r.pos = toks[j], r.pos + 1
            if self.drafter is not None:
                self._learn(r, 1)
            if self.finished(r.req, r.out, r.budget):
                fin.append(j)
        return self._remove(fin)

    # -- speculative steps (`toolgym.policies.ngram_draft`) --------------------------------------------------------
    def _history(self, r: Row, n: int) -> list[int]:
        """The last `n` tokens of row `r`'s prompt + output."""
        out = r.out.token_ids
        if len(out) >= n:
            return out[len(out) - n :]
        return list(r.req.prompt_ids[max(0, len(r.req.prompt_ids) - (n - len(out))) :]) + out

    def _learn(self, r: Row, new: int) -> None:
        """Teach the drafter row `r`'s last `new` tokens (after their contexts)."""
        seq = self._history(r, self.drafter.longest + new)  # shorter when prompt + output are
        self.drafter.learn(seq, len(seq) - new)

    def _drafts(self) -> list[list[int]] | None:
        """Each row's draft (its tokens after `next_tok`, within its budget), or None when no row has one or the
        slot buffers lack the columns for a wider step (a step writes 1 + the longest draft columns for every row,
        and the plain steps after it still need a column per remaining token)."""
        drafts = []
        for r in self.rows:
            left = r.budget - len(r.out.token_ids)  # tokens this row may still generate after next_tok's
            drafts.append(self.drafter.draft(self._history(r, self.drafter.longest), max(0, left - 1))
                          if left > 1 else [])
        width = 1 + max(len(d) for d in drafts)
        if width == 1:
            return None
        sl = self.slots
        rem = max(r.budget - len(r.out.token_ids) for r in self.rows)
        if sl.end + width + rem > sl.keys[0].shape[2]:
            return None
        return drafts

    def _spec_step(self, drafts: list[list[int]]) -> list[tuple[int, GenOutput]]:
        """One forward over every row's `next_tok` and its draft, then each row's tokens drawn position by position
        as a plain step draws them (`sample`, one uniform from the row's own generator per token): a row keeps its
        drafted tokens while each equals the token drawn at its position, and the token drawn where one differs.
        So a row generates exactly the tokens of plain step-by-step decoding -- greedy or seeded sampling alike --
        in fewer forwards when drafts are right. The step takes 1 + the longest draft columns; the columns a row
        does not keep are holes its mask hides."""
        torch = self.torch
        rows, sl = self.rows, self.slots
        s, e = sl.start, sl.end
        n = len(rows)
        T = 1 + max(len(d) for d in drafts)
        dev = self.device
        ids = torch.tensor([[r.next_tok] + d + [self.pad_id] * (T - 1 - len(d)) for r, d in zip(rows, drafts)],
                           dtype=torch.long, device=dev)
        pos = torch.tensor([[r.pos] for r in rows], dtype=torch.long, device=dev) + torch.arange(T, device=dev)
        mask = torch.empty((n, 1, T, e + T - s), dtype=torch.bool, device=dev)
        mask[:, 0, :, : e - s] = sl.mask[:n, None, s:e]
        # causal among the new tokens; a padding query attends like a real one (never an empty row: NaN-free KV)
        mask[:, 0, :, e - s :] = torch.ones((T, T), dtype=torch.bool, device=dev).tril()
        logits = self.lean.forward(ids, pos, sl.keys, sl.values, mask, n, s, e)
        sl.end = e + T
        kept = [0] * n
        fin: list[int] = []
        if all(r.req.params.temperature <= 0 and not r.req.constrained for r in rows):
            self._keep_greedy(logits, drafts, kept, fin)
        else:
            live = list(range(n))  # rows whose tokens so far all equalled their drafts
            for t in range(T):
                if not live:
                    break
                idx = torch.tensor(live, dtype=torch.long, device=dev)
                toks, lps = self.sample(logits[idx, t], [rows[j].req for j in live], [rows[j].gen for j in live],
                                        [rows[j].out.token_ids for j in live])
                still = []
                for x, j in enumerate(live):
                    r = rows[j]
                    r.out.token_ids.append(toks[x])
                    r.out.logprobs.append(lps[x])
                    kept[j] += 1
                    if self.finished(r.req, r.out, r.budget):
                        fin.append(j)
                    elif t < len(drafts[j]) and drafts[j][t] == toks[x]:
                        still.append(j)
                live = still
        for j, r in enumerate(rows):
            self._counts["drafted_tokens"] += len(drafts[j])
            self._counts["accepted_tokens"] += kept[j] - 1
            # columns e .. e + kept - 1 hold the KV of next_tok and the kept drafted tokens before the last one
            sl.mask[j, e : e + kept[j]] = True
            r.next_tok, r.pos = r.out.token_ids[-1], r.pos + kept[j]
            self._learn(r, kept[j])
        return self._remove(fin)

    def _keep_greedy(self, logits: Any, drafts: list[list[int]], kept: list[int], fin: list[int]) -> None:
        """`_spec_step`'s draws when every row is greedy and unconstrained, in a few tensor ops for all positions:
        the argmax (and its log-prob) at each position, a row's uniform still drawn per token as a plain greedy
        step draws it (an unseeded request sharing the engine's generator then draws as before)."""
        torch = self.torch
        logp = torch.log_softmax(logits.float(), dim=-1)
        best = logp.argmax(-1)
        lps = logp.gather(2, best[..., None])[..., 0].tolist()
        best = best.tolist()
        for j, (r, d) in enumerate(zip(self.rows, drafts)):
            a = 0
            while a < len(d) and d[a] == best[j][a]:
                a += 1
            for t in range(a + 1):
                r.gen.random()
                r.out.token_ids.append(best[j][t])
                r.out.logprobs.append(lps[j][t])
                kept[j] += 1
                if self.finished(r.req, r.out, r.budget):
                    fin.append(j)
                    break

    def _remove(self, idx: list[int], park: bool = True) -> list[tuple[int, GenOutput]]:
        """Take rows out (their outputs returned; their KV parked unless `park` is False); the last row moves into
        each freed slot."""
        res = []
        rows, sl = self.rows, self.slots
        s, e = sl.start, sl.end
        for j in sorted(idx, reverse=True):
            res.append((rows[j].tag, rows[j].out))
            if park:
                self._park(rows[j], j)
            last = len(rows) - 1
            if j != last:
                for kb, vb in zip(sl.keys, sl.values):
                    kb[j, :, s:e] = kb[last, :, s:e]
                    vb[j, :, s:e] = vb[last, :, s:e]
                sl.mask[j] = sl.mask[last]
                rows[j] = rows[last]
            rows.pop()
        if not rows:
            self._free()
        elif idx:
            sl.start = min(r.start for r in rows)
        return res[::-1]

    def _park(self, row: Row, j: int) -> None:
        """Keep the KV of row `row` (in slot `j`) for its conversation's next turn."""
        sl = self.slots
        s, e = row.start, sl.end
        tokens = tuple(row.req.prompt_ids) + tuple(row.out.token_ids[:-1])  # tokens whose KV exists (last not fed)
        mask = sl.mask[j, s:e]
        if bool(mask.all()):
            ks = [kb[j : j + 1, :, s:e].clone() for kb in sl.keys]
            vs = [vb[j : j + 1, :, s:e].clone() for vb in sl.values]
            mask = mask.clone()
        else:  # only the columns the row attends (the holes of padding and of speculative steps dropped)
            cols = mask.nonzero().flatten() + s
            ks = [kb[j : j + 1, :, cols] for kb in sl.keys]
            vs = [vb[j : j + 1, :, cols] for vb in sl.values]
            mask = mask.new_ones(len(cols))
        size = sum(k.numel() * k.element_size() for k in ks) * 2
        self.parked.park(ParkedKV(tokens, ks, vs, mask, size))
