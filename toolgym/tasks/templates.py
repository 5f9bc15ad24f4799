"""Task prompts from templates over a tool's description and its parameters' descriptions, for any server.

A prompt states every argument value, so a model can copy it: strings are written as JSON strings (in double
quotes, escaped the way the call's JSON argument will be), numbers, booleans, lists and objects as JSON. A value's
label is the parameter's description cut to its first clause (`Source IANA timezone name`), its title, or its name
made readable (`source timezone`). Several phrasings are drawn at random (the tool named or only described; labels
from descriptions or parameter names), so a model trained on them learns to read a request rather than one layout.

- `call_prompt(tool, args)`: one call;
- `chain_prompt([...])`: several calls in order (`First, ... Then, ...`); a later call may take a value from the
  result of the one before (`ref`: "the first entry of that result");
- `no_tool_prompt(text)`: a request no tool serves (repeat these words), for abstention;
- `answer_clause(label)`: what to report at the end ("Answer with its target datetime.");
- `request_steps(prompt, calls)`: the inverse of `chain_prompt` for any request that states its calls' values in
  order -- the request cut into one consecutive piece per call (what the recipe's quoting teacher writes before
  each call).

The tiny tool-calling base (`toolgym.models.toolcall`) is pre-trained on prompts from these same functions over
random tools, so its first fine-tuning on a real server starts from prompts it already knows how to read.
"""

from __future__ import annotations

import json
import random
import re
from typing import Any

ORDINALS = ("first", "second", "third", "fourth", "fifth")


def humanize(name: str) -> str:
    """`source_timezone` / `sourceTimezone` / `get-sum` -> `source timezone` / `get sum`."""
    s = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", name)
    return re.sub(r"[_\-.]+", " ", s).strip().lower() or name


def first_clause(text: str | None, max_words: int = 8) -> str:
    """The description up to its first `(`, `.`, `;`, `:` or ` - `, at most `max_words` words; "" if none."""
    if not text:
        return ""
    s = re.split(r"\s*(?:\(|\.\s|\.$|;|:\s|\s-\s|\n)", text.strip(), maxsplit=1)[0].strip()
    words = s.split()
    if not words or len(words) > max_words:
        return ""
    return " ".join(words)


def tool_sentence(tool: dict[str, Any], max_words: int = 16) -> str:
    """The tool's description's first sentence (at most `max_words` words, no trailing period), else its name made
    readable."""
    fn = tool.get("function", tool)
    desc = str(fn.get("description") or "").strip()
    s = re.split(r"(?<=[a-z0-9)])\.(?:\s|$)|\n", desc, maxsplit=1)[0].strip().rstrip(".")
    words = s.split()
    if not words:
        return humanize(fn["name"]).capitalize()
    if len(words) > max_words:
        s = " ".join(words[:max_words])
    return s


def param_label(name: str, prop: dict[str, Any] | None, rng: random.Random | None = None) -> str:
    """A readable label for a parameter: its description's first clause or title (when short), else its name made
    readable; with `rng`, the plain name sometimes."""
    prop = prop or {}
    options = [x for x in (first_clause(prop.get("description"), 6), str(prop.get("title") or "")) if x]
    if rng is not None and (not options or rng.random() < 0.35):
        return rng.choice([name, humanize(name)])
    return _lower_first(options[0].rstrip(".")) if options else humanize(name)


def show(value: Any) -> str:
    """How a value is written in a prompt: JSON (strings in double quotes, escaped as in the call's arguments)."""
    return json.dumps(value, ensure_ascii=False)


def imperative(sentence: str) -> str:
    """`Returns the sum` -> `return the sum`, `Searches files` -> `search files`: a description's leading
    third-person verb made imperative, the first letter lower-cased (for "Please ...")."""
    first, _, rest = sentence.partition(" ")
    w = first.lower()
    if len(w) > 3 and w.endswith("s") and not w.endswith("ss") and first[:1].isupper():
        if re.search(r"(ch|sh|x|ss|z)es$", w):
            w = w[:-2]
        elif w.endswith("ies"):
            w = w[:-3] + "y"
        else:
            w = w[:-1]
        return (w + " " + rest).strip()
    return _lower_first(sentence)


def _lower_first(s: str) -> str:
    return s[:1].lower() + s[1:] if s[:2] != s[:2].upper() else s


def _join(parts: list[str]) -> str:
    if len(parts) <= 1:
        return "".join(parts)
    return ", ".join(parts[:-1]) + " and " + parts[-1]


def call_prompt(tool: dict[str, Any], args: dict[str, Any], rng: random.Random, style: int | None = None) -> str:
    """A request for one call of `tool` with exactly `args` (see the module docstring)."""
    fn = tool.get("function", tool)
    name = fn["name"]
    props = (fn.get("parameters") or {}).get("properties") or {}
    labels = {k: param_label(k, props.get(k), rng) for k in args}
    sentence = tool_sentence(tool)
    style = rng.randrange(5) if style is None else style
    pairs = [f"{labels[k]} {show(v)}" for k, v in args.items()]
    if style == 0:  # Call NAME with a = 1 and b = "x".
        if not args:
            return f"Call {name}."
        return f"Call {name} with " + _join([f"{k} = {show(v)}" for k, v in args.items()]) + "."
    if style == 1:  # Description: label "x", label 2.
        return sentence + (": " + ", ".join(pairs) if pairs else "") + "."
    if style == 2:  # Use the NAME tool. Label: "x". Label: 2.
        body = " ".join(f"{labels[k][:1].upper() + labels[k][1:]}: {show(v)}." for k, v in args.items())
        return f"Use the {name} tool." + (" " + body if body else "")
    if style == 3:  # Please describe, where the label is "x" and the label is 2.
        where = _join([f"the {labels[k]} is {show(v)}" for k, v in args.items()])
        return f"Please {imperative(sentence)}" + (f", where {where}" if where else "") + "."
    # style 4: Description (label "x", label 2).
    return sentence + (f" ({', '.join(pairs)})" if pairs else "") + "."


def chain_prompt(steps: list[tuple[dict[str, Any], dict[str, Any], dict[str, str]]], rng: random.Random) -> str:
    """A request for several calls in order. Each step is `(tool, args, refs)`; `refs` maps a parameter to a phrase
    that says where its value comes from instead of stating it (`"the first entry of that result"`)."""
    parts = []
    for i, (tool, args, refs) in enumerate(steps):
        stated = {k: v for k, v in args.items() if k not in refs}
        text = call_prompt(tool, stated, rng)
        if refs:
            fn = tool.get("function", tool)
            props = (fn.get("parameters") or {}).get("properties") or {}
            text = text.rstrip(".") + ", with " + _join(
                [f"{param_label(k, props.get(k), rng)} set to {phrase}" for k, phrase in refs.items()]) + "."
        lead = "First, " if i == 0 else "Then, " if i < len(steps) - 1 else rng.choice(["Then, ", "Finally, "])
        parts.append(lead + _lower_first(text))
    return " ".join(parts)


def ref_phrase(index: int, count: int) -> str:
    """'the first entry of that result' / 'the last entry of that result'."""
    word = "last" if index == count - 1 and index >= len(ORDINALS) else ORDINALS[index] if index < len(ORDINALS) \
        else f"entry number {index + 1}"
    return f"the {word} entry of that result"


def answer_clause(label: str | None) -> str:
    """The sentence asking for the answer: a named field of a JSON result, else the result itself."""
    return f" Answer with its {label}." if label else ""


NO_TOOL_TEMPLATES = (
    "Repeat {v} back to me. No tool is needed.",
    "Without using any tool, reply with {v}.",
    "Say {v} and nothing else; do not call a tool.",
    "No tools please: just answer {v}.",
)


def no_tool_prompt(text: str, rng: random.Random) -> str:
    """A request that needs no tool: answer with `text` (quoted in the prompt)."""
    return rng.choice(NO_TOOL_TEMPLATES).format(v=show(text))


_STEP_BREAK = re.compile(r"(?<=[.!?;])\s+(?=\S)|,?\s+(?=(?:and\s+)?then\b)", re.IGNORECASE)


def request_steps(prompt: str, calls: list[dict[str, Any]]) -> list[str] | None:
    """`prompt` cut into one consecutive piece per call of `calls` (expected calls: `{"name", "arguments"}`, each
    argument a list of acceptable values whose first is the one stated), so that piece i is the part of the request
    that asks for call i: "First, move ... "skip"." / "Finally, list ... (path ".")."; or None when the cut is not
    determined by the text. Each call's stated values (written as `show` writes them) are found in the prompt in
    order; the cut before call i+1 is the first sentence end (or `, then` / `and then`) after call i's last stated
    value, and before the first value call i+1 states. A value not stated (a `(ref)` argument: "the first entry of
    that result") is skipped; a call that states none is cut at the first break after the previous piece. One call:
    the whole prompt. Used by the quoting teacher (`toolgym.train.recipe.teacher_policy(quote_steps="later")`): a
    tiny model that first copies the piece of the request for this call, continuing where its previous piece ended,
    then copies the call's values from the text it has just written, finds a later step's values more often than one
    that must pick them out of the whole request after a long tool result."""
    if not calls:
        return None
    if len(calls) == 1:
        return [prompt.strip()]
    spans: list[tuple[int, int] | None] = []  # (first value's start, last value's end) of each call, or None
    pos = 0
    for c in calls:
        first = last = None
        for v in (c.get("arguments") or {}).values():
            value = v[0] if isinstance(v, list) and v else v
            at = prompt.find(show(value), pos)
            if at < 0:
                continue  # not stated (a ref), or written differently: skipped
            first = at if first is None else first
            last = at + len(show(value))
            pos = last
        spans.append(None if first is None else (first, last))
    starts, ends, prev = [0], [], 0
    for i in range(1, len(calls)):
        after = spans[i - 1][1] if spans[i - 1] else prev + 1
        before = spans[i][0] if spans[i] else len(prompt)
        brk = next((m for m in _STEP_BREAK.finditer(prompt, after) if m.end() <= before), None)
        if brk is None:
            return None
        ends.append(brk.start())
        starts.append(brk.end())
        prev = brk.end()
    ends.append(len(prompt))
    pieces = [prompt[a:b].strip() for a, b in zip(starts, ends)]
    return pieces if all(pieces) else None


__all__ = ["NO_TOOL_TEMPLATES", "answer_clause", "call_prompt", "chain_prompt", "first_clause", "humanize", "imperative", "no_tool_prompt",
           "param_label", "ref_phrase", "request_steps", "show", "tool_sentence"]
