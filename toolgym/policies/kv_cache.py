"""The KV caches of the transformers engine (`toolgym.policies.hf`), as transformers' `DynamicCache` layers and
plain dataclasses.

- `plain_dynamic(past)`: whether a cache is a plain `DynamicCache` of `DynamicLayer`s, the only kind whose
  keys/values the engine reshapes (sliding-window, convolution (LFM2) or offloaded caches are not).
- `shared_prefix_len` / `expand_prefix_cache`: the prompt prefix every row shares (system prompt + tool schemas) is
  prefilled once and its one-row cache broadcast to the batch (the trainer's loss uses them too).
- `preallocate_cache` (`PreallocatedLayer`): a static batch's decode appends each token into spare room in place
  instead of concatenating (copying) the whole cache.
- `slot_layer_class()` (`SlotLayer`): one layer of the continuous batch's slot buffers
  (`toolgym.policies.continuous`).
- `ParkedKV` / `ParkedPool`: a finished row's KV, kept (within a byte budget) for the same conversation's next
  turn, which then prefills only its new tokens.

The layer classes subclass transformers' `DynamicLayer`; they are built on first use (`functools.cache`) so that
importing this module does not import transformers.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any


def plain_dynamic(past: Any) -> bool:
    """Whether `past` is a plain `DynamicCache` of `DynamicLayer`s -- the only cache whose keys/values the engine
    reshapes (prefix broadcast, preallocation, continuous batching); sliding-window, convolution (LFM2) or offloaded
    caches are not."""
    try:
        from transformers.cache_utils import DynamicCache, DynamicLayer
    except ImportError:  # pragma: no cover - older transformers
        return False
    layers = getattr(past, "layers", None)
    return type(past) is DynamicCache and bool(layers) and all(type(la) is DynamicLayer for la in layers)


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
    if not plain_dynamic(past):
        return False
    for la in past.layers:
        la.keys = la.keys.expand(batch, *la.keys.shape[1:])
        la.values = la.values.expand(batch, *la.values.shape[1:])
    return True


def preallocate_cache(past: Any, extra: int) -> bool:
    """Give each plain `DynamicLayer` of `past` room for `extra` more positions, written in place: a decode step
    then appends one token instead of concatenating (copying) the whole cache, which was a fifth of the sampling
    time of a tic-tac-toe batch. Returns False (cache untouched) for any other cache type."""
    if not plain_dynamic(past):
        return False
    layer = preallocated_layer_class()
    past.layers = [layer(la.keys, la.values, extra) for la in past.layers]
    return True


@functools.cache
def preallocated_layer_class() -> Any:
    """`PreallocatedLayer`, built on first use (transformers is imported lazily)."""
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
def slot_layer_class() -> Any:
    """`SlotLayer`, built on first use (transformers is imported lazily)."""
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
class ParkedKV:
    """A finished row's KV, kept for the same conversation's next turn."""

    tokens: tuple[int, ...]  # the tokens whose KV this holds: the prompt and every sampled token but the last
    keys: list[Any]  # per layer, [1, kv_heads, W, head_dim]
    values: list[Any]  # per layer, like `keys`
    mask: Any  # [W] bool: the columns the row attends (a shared-prefix prefill leaves padding holes)
    nbytes: int  # of keys and values together

    @property
    def width(self) -> int:
        """W, the columns the row occupies."""
        return int(self.mask.shape[0])


class ParkedPool:
    """Parked rows, oldest first, within `budget` bytes (the oldest are dropped to make room; a row larger than the
    whole budget is not kept). `take(prompt)`: a prompt that extends a parked row's tokens takes that row out (the
    same conversation's next turn); otherwise, with `prefix_min` > 0, a copy of the longest parked prefix the prompt
    shares (at least `prefix_min` tokens: the system prompt and tool schemas every new conversation of an env starts
    with) comes back and the row stays parked for others."""

    PREFIX_SCAN = 64  # the most recent rows searched for a shared prefix (bounds the lookup's cost)

    def __init__(self, budget: int, prefix_min: int = 0) -> None:
        self.budget = budget
        self.prefix_min = prefix_min
        self.entries: list[ParkedKV] = []

    def __len__(self) -> int:
        return len(self.entries)

    def park(self, entry: ParkedKV) -> None:
        if entry.nbytes > self.budget:
            return
        self.entries.append(entry)
        total = sum(e.nbytes for e in self.entries)
        while total > self.budget:
            total -= self.entries.pop(0).nbytes

    def take(self, prompt: list[int]) -> ParkedKV | None:
        """The parked row whose tokens `prompt` extends (the longest; removed from the pool), else a shared prefix
        (see the class docstring), else None."""
        best = None
        for x, entry in enumerate(self.entries):
            n = len(entry.tokens)
            if n < len(prompt) and (best is None or n > len(self.entries[best].tokens)) \
                    and prompt[n - 1] == entry.tokens[-1] and tuple(prompt[:n]) == entry.tokens:
                best = x
        if best is not None:
            return self.entries.pop(best)
        return self.shared_prefix(prompt) if self.prefix_min > 0 else None

    def shared_prefix(self, prompt: list[int]) -> ParkedKV | None:
        """A copy of the longest prefix (>= `prefix_min` tokens, shorter than the prompt) that `prompt` shares with a
        recent parked row: its first L tokens' KV columns (views: the caller copies them into its own buffers)."""
        best, best_len = None, self.prefix_min - 1
        limit = len(prompt) - 1  # at least one new token to run
        if limit < self.prefix_min:
            return None
        for entry in self.entries[-self.PREFIX_SCAN:]:
            tokens = entry.tokens
            if len(tokens) <= best_len or tokens[best_len] != prompt[best_len]:
                continue
            n = 0
            top = min(len(tokens), limit)
            while n < top and tokens[n] == prompt[n]:
                n += 1
            if n > best_len:
                best, best_len = entry, n
        if best is None:
            return None
        cols = best.mask.nonzero().flatten()
        cut = int(cols[best_len - 1]) + 1  # the columns holding the first best_len tokens (and padding holes)
        keys = [k[:, :, :cut] for k in best.keys]
        values = [v[:, :, :cut] for v in best.values]
        size = sum(k.numel() * k.element_size() for k in keys) * 2
        return ParkedKV(tuple(prompt[:best_len]), keys, values, best.mask[:cut], size)

    def clear(self) -> None:
        self.entries.clear()
