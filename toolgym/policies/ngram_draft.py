"""Draft tokens for speculative decoding from the n-grams the engine has already generated.

A tool-calling model's turns repeat themselves: the tic-tac-toe model writes the same eight line labels, the same
"No threats. X forks: none." and the same `<tool_call>` scaffolding in every turn, and a call's JSON keys are the same
from call to call. `NgramDrafter` remembers, for the last N tokens of every sequence it has seen (N = 8, 5, 3, 2),
the token that came next (the most recent one), and drafts a row's next tokens by following those continuations from
the row's own last tokens, longest context first. There is no draft model: a draft costs a few dictionary lookups.

The continuous batch (`toolgym.policies.continuous`) runs each row's next token and its draft through the model in
one forward, draws each position's token as a plain step would (argmax, or one uniform from the row's own generator),
and keeps the drafted tokens while each equals the token drawn at its position, plus the token drawn where one
differs: the row's tokens are those of step-by-step decoding (up to floating-point rounding between a one-token and a
many-token forward), in fewer forwards when drafts are right. A deterministic draft accepted exactly when it equals
the token drawn is the special case of speculative sampling with a one-hot draft distribution. In the literature:
prompt-lookup / n-gram speculative decoding, with the lookup table spanning past outputs as in suffix decoding.
"""

from __future__ import annotations

from collections.abc import Sequence

ORDERS = (8, 5, 3, 2)  # context lengths looked up, longest first
MAX_ENTRIES = 1 << 18  # per order; a table that grows past it starts afresh (bounded memory for a long-running server)


class NgramDrafter:
    """Up to `max_draft` tokens per draft from continuations seen before (see the module docstring)."""

    def __init__(self, max_draft: int, orders: Sequence[int] = ORDERS, max_entries: int = MAX_ENTRIES) -> None:
        if max_draft < 1:
            raise ValueError(f"max_draft must be >= 1, not {max_draft}")
        if not orders or any(o < 1 for o in orders):
            raise ValueError(f"orders must be positive context lengths, not {tuple(orders)}")
        self.max_draft = max_draft
        self.orders = tuple(sorted(set(orders), reverse=True))
        self.max_entries = max_entries
        self.tables: dict[int, dict[tuple[int, ...], int]] = {o: {} for o in self.orders}
        self.longest = self.orders[0]

    def learn(self, seq: Sequence[int], first: int) -> None:
        """Record the continuation of every token `seq[i]`, i >= `first`, after its preceding contexts."""
        for i in range(max(first, 1), len(seq)):
            tok = seq[i]
            for o in self.orders:
                if i >= o:
                    table = self.tables[o]
                    if len(table) >= self.max_entries:
                        table.clear()
                    table[tuple(seq[i - o : i])] = tok

    def draft(self, context: Sequence[int], limit: int | None = None) -> list[int]:
        """Tokens likely to follow `context` (its last `max(orders)` tokens are enough), at most `limit`
        (default `max_draft`); [] when no context of any order has been seen."""
        k = self.max_draft if limit is None else min(limit, self.max_draft)
        ctx = list(context[-self.longest :])
        out: list[int] = []
        while len(out) < k:
            nxt = None
            for o in self.orders:
                if len(ctx) >= o:
                    nxt = self.tables[o].get(tuple(ctx[-o:]))
                    if nxt is not None:
                        break
            if nxt is None:
                break
            out.append(nxt)
            ctx.append(nxt)
        return out

    def clear(self) -> None:
        for table in self.tables.values():
            table.clear()


__all__ = ["NgramDrafter"]
