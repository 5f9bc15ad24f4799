"""Fresh-value copies of teacher conversations: SFT data that cannot be memorised, only copied.

A tiny model fine-tuned for a few epochs on a few hundred generated tasks learns the tasks' own values (a title, a
path, a user name) instead of copying whatever value a request states: on held-out tasks whose strings no training
task has, it writes a near-copy or a memorised name. `augment_rows` makes `k` copies of each teacher conversation in
which every value the model has to copy -- a free string argument of an expected call (schema type string, no enum,
const, pattern or format) that the user's request states, or that a tool result before the call states (a second
call that uses "the first entry of that result") -- is replaced by a fresh invented value of the same shape
(`toolgym.tasks.sampling.Vocabulary.for_param`), everywhere in the conversation: the request, the call's arguments,
the tool's result, a turn's think block and the final answer. Each copy is then one more demonstration of copying a value nobody has seen.
Its words are drawn as the task generator draws them (`NOVEL`: 30 % invented syllable words, the rest from the
built-in word list): with invented words only, a fine-tuned model copied invented words but wrote a training word in
place of a listed one it was asked for (`dragon` for `sky`): 51.9 % exact on unseen strings, 66.7 % with half the
words listed (notes server, `benchmarks/augment_notes.py`).

What a copy claims is what the server would have answered for the new value only where its result merely echoes
the value (a note saved under a title, a user looked up by name); a server whose result depends on the value (a file
that exists in the fixture) answers the copy with the original's content. For the copying the model is to learn
this does not matter, but it is not a record of the server: keep `k` small beside the real rows (`toolgym tasks
train --augment K`). Values equal to any of `exclude` (the held-out tasks' values) are never drawn.
"""

from __future__ import annotations

import copy
import json
import random
import re
from collections.abc import Iterable
from typing import Any

from toolgym.tasks.sampling import Vocabulary

MIN_CHARS = 3  # shorter values are too likely to occur inside other text
NOVEL = 0.3  # share of invented words in fresh values: the task generator's own (`Vocabulary.novel`)


def free_string_params(tools: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, Any]]]:
    """{tool: {param: schema}} for the string parameters a value of any text satisfies."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for t in tools:
        fn = t.get("function", t)
        props = (fn.get("parameters") or fn.get("inputSchema") or {}).get("properties") or {}
        free = {p: s for p, s in props.items() if isinstance(s, dict) and s.get("type") == "string"
                and not any(k in s for k in ("enum", "const", "pattern", "format"))}
        out[fn.get("name", "")] = free
    return out


def _bounded(value: str) -> re.Pattern[str]:
    """`value` where it is not part of a longer word or number."""
    return re.compile(r"(?<![A-Za-z0-9])" + re.escape(value) + r"(?![A-Za-z0-9])")


def copied_values(row: dict[str, Any]) -> dict[str, tuple[str, dict[str, Any]]]:
    """{value: (param, its schema)} of the free string arguments in the row's calls that its first user message or
    a tool result before the call states (values with letters: a time or a number means something to the server, a
    name is only copied)."""
    free = free_string_params(row.get("tools") or [])
    user = next((m.get("content") or "" for m in row["messages"] if m.get("role") == "user"), "")
    stated = [user]  # the request, then each tool result as the conversation reaches it
    found: dict[str, tuple[str, dict[str, Any]]] = {}
    for m in row["messages"]:
        if m.get("role") == "tool" and isinstance(m.get("content"), str):
            stated.append(m["content"])
        for call in m.get("tool_calls") or []:
            fn = call["function"]
            args = fn["arguments"]
            args = json.loads(args) if isinstance(args, str) else args
            for p, v in (args or {}).items():
                if isinstance(v, str) and p in free.get(fn["name"], {}) and len(v) >= MIN_CHARS \
                        and re.search(r"[A-Za-z]{2}", v) and any(_bounded(v).search(t) for t in stated):
                    found.setdefault(v, (p, free[fn["name"]][p]))
    return found


def _fresh(rng: random.Random, vocab: Vocabulary, old: str, param: str, schema: dict[str, Any],
           taken: set[str]) -> str:
    for _ in range(100):
        new = vocab.for_param(rng, param, str(schema.get("description") or ""))
        if new not in taken and len(new) >= MIN_CHARS and new != old:
            return new
    raise RuntimeError(f"augment: no fresh value for {param!r} after 100 draws")


def _replace(text: str, subs: list[tuple[re.Pattern[str], str]]) -> str:
    for pat, new in subs:
        text = pat.sub(lambda _m, n=new: n, text)  # type: ignore[misc]
    return text


def augment_row(row: dict[str, Any], rng: random.Random, vocab: Vocabulary, exclude: set[str]
                ) -> dict[str, Any] | None:
    """One copy of `row` with every copied value replaced (see the module docstring); None if it has none."""
    values = copied_values(row)
    if not values:
        return None
    taken = set(exclude) | set(values)
    mapping: dict[str, str] = {}
    for old, (param, schema) in sorted(values.items(), key=lambda kv: -len(kv[0])):  # longest first
        mapping[old] = _fresh(rng, vocab, old, param, schema, taken)
        taken.add(mapping[old])
    subs = [(_bounded(old), new) for old, new in mapping.items()]
    out = copy.deepcopy(row)
    for m in out["messages"]:
        for key in ("content", "reasoning_content"):  # the text and the think block of a turn
            if isinstance(m.get(key), str):
                m[key] = _replace(m[key], subs)
        for call in m.get("tool_calls") or []:
            fn = call["function"]
            args = json.loads(fn["arguments"]) if isinstance(fn["arguments"], str) else fn["arguments"]
            args = {k: (mapping.get(v, _replace(v, subs)) if isinstance(v, str) else v) for k, v in args.items()}
            fn["arguments"] = json.dumps(args, ensure_ascii=False) if isinstance(fn["arguments"], str) else args
    out["augmented"] = {"from": row.get("example_id"), "values": mapping}
    return out


def augment_rows(rows: Iterable[dict[str, Any]], k: int, seed: int = 0, exclude: Iterable[str] = (),
                 novel: float = NOVEL) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """The rows, each followed by `k` fresh-value copies (rows with no value to copy stay single): (rows, counts).
    `novel`: the share of fresh words that are invented (the rest from the built-in word list)."""
    if k < 0:
        raise ValueError(f"augment: k must be >= 0, not {k}")
    rng = random.Random(seed)
    vocab = Vocabulary(novel=novel)
    ex = set(exclude)
    out: list[dict[str, Any]] = []
    counts = {"rows": 0, "with_values": 0, "copies": 0}
    for row in rows:
        counts["rows"] += 1
        out.append(row)
        made = [c for c in (augment_row(row, rng, vocab, ex) for _ in range(k)) if c is not None]
        counts["with_values"] += bool(made)
        counts["copies"] += len(made)
        out.extend(made)
    return out, counts


__all__ = ["NOVEL", "augment_row", "augment_rows", "copied_values", "free_string_params"]
