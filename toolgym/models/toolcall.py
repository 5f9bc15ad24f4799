"""The tiny tool-calling base: a tiny model pre-trained to call tools it has never seen, before any environment.

`toolgym pretrain` (`toolgym.train.pretrain.build_toolcall_base`) makes it in three steps, all offline:

1. **a tokenizer that keeps a value's tokens the same wherever it is written**: a byte-level BPE whose merges never
   join a letter with the punctuation before it (a space may still lead a word). transformers loads any `qwen2`
   tokenizer with Qwen2's own pre-tokenizer, which glues one punctuation character to the word after it (`"Nairobi`,
   `>apple`, `/todo`); with no such merges the word's pieces are the same after a quote, a slash or `<answer>`, so
   copying a value from a prompt into a JSON argument, or from a tool result into an answer, is copying tokens;
2. **a synthetic corpus of random tool use** (`conversation`): 1-5 tools per conversation with random names,
   descriptions and JSON schemas (strings, numbers, integers, booleans, enums, arrays, nested objects; MCP-shaped:
   titles, `$schema`, optional parameters), values drawn by the task generator's own sampler
   (`toolgym.tasks.sampling`) from invented words, ids, paths, numbers, times and dates that no closed list could
   memorise, prompts from the task generator's own templates (`toolgym.tasks.templates`), tool results (text,
   listings, JSON) and final answers that copy from them; two-call chains (some whose second value is "the first
   entry of that result"), and no-tool requests answered directly. A model trained on it must copy from the prompt
   into arguments, choose a tool by its description or name, and abstain, in general;
3. **pre-training** on an endless stream of those conversations (`toolgym pretrain`, `toolgym.train.pretrain`:
   assistant-only loss, the masks of every later fine-tuning), saved as a plain HF folder with `toolgym_tiny.json`
   saying what it is.

`eval_toolcall` (`toolgym model eval-base`) measures a model on fresh random conversations: exact calls,
abstention, answers.
"""

from __future__ import annotations

import json
import random
import re
import string
from collections.abc import Callable, Iterator
from functools import cache
from pathlib import Path
from typing import Any

from toolgym.tasks.sampling import ArgSampler, Pools, SchemaError, Vocabulary, entries
from toolgym.tasks.templates import (
    NO_TOOL_TEMPLATES,
    ORDINALS,
    answer_clause,
    call_prompt,
    chain_prompt,
    humanize,
    no_tool_prompt,
    ref_phrase,
)

SYSTEM_PROMPTS = (
    "You answer questions, using the tools when they help. Give the final answer inside <answer></answer>.",
    "Use the tools. Give the final answer as <answer>...</answer>.",
    "You are a helpful assistant with tools. Call a tool when the request needs one; put your final reply in "
    "<answer></answer>.",
    "Answer the user. When a tool is needed, call it; end with <answer>your answer</answer>.",
)
TOOL_VERBS = ("get", "set", "list", "read", "write", "create", "delete", "update", "find", "search", "convert",
              "compute", "send", "fetch", "add", "remove", "move", "copy", "rename", "check", "count", "open",
              "close", "start", "stop", "run", "make", "sum", "format", "parse", "load", "save", "lookup", "resolve")
PARAM_NAMES = ("path", "name", "query", "content", "text", "id", "source", "destination", "target", "count", "limit",
               "offset", "value", "key", "title", "message", "url", "time", "date", "zone", "mode", "format", "a", "b",
               "x", "y", "amount", "unit", "label", "tag", "owner", "repo", "branch", "city", "email", "user",
               "pattern", "page", "size", "level", "kind", "color", "note", "entity", "relation", "observation")


@cache
def english_words() -> tuple[str, ...]:
    """The base corpus's English word list (`toolcall_words.txt` beside this module)."""
    text = (Path(__file__).with_name("toolcall_words.txt")).read_text(encoding="utf-8")
    return tuple(w for w in text.split() if not w.startswith("#") and w.isalpha())


def _case(words: list[str], rng: random.Random) -> str:
    style = rng.randrange(4)
    if style == 0:
        return "_".join(words)
    if style == 1:
        return "-".join(words)
    if style == 2:
        return words[0] + "".join(w.capitalize() for w in words[1:])
    return "".join(words) if len(words) < 3 else "_".join(words)


def _sentence(rng: random.Random, lo: int, hi: int, verb: str | None = None) -> str:
    words = english_words()
    body = [rng.choice(words) for _ in range(rng.randint(lo, hi))]
    if verb:
        body.insert(0, verb)
    s = " ".join(body)
    return s[0].upper() + s[1:]


def random_param(rng: random.Random, vocab: Vocabulary, depth: int = 0) -> dict[str, Any]:
    """A random parameter schema, MCP-shaped (pydantic-style titles sometimes, descriptions often)."""
    r = rng.random()
    if r < 0.5:
        node: dict[str, Any] = {"type": "string"}
        if rng.random() < 0.05:
            node["format"] = rng.choice(["date", "email", "uri"])
    elif r < 0.63:
        node = {"type": "number"}
    elif r < 0.76:
        node = {"type": "integer"}
        if rng.random() < 0.3:
            node["minimum"] = rng.randint(0, 5)
            node["maximum"] = node["minimum"] + rng.randint(5, 500)
    elif r < 0.81:
        node = {"type": "boolean"}
    elif r < 0.89:
        node = {"type": "string", "enum": sorted({vocab.word(rng) for _ in range(rng.randint(2, 5))})}
    elif r < 0.95 or depth > 0:
        node = {"type": "array", "items": {"type": rng.choice(["string", "string", "number"])}}
    else:
        props = {rng.choice(PARAM_NAMES) + ("" if rng.random() < 0.6 else "_" + vocab.word(rng)): random_param(rng, vocab, 1)
                 for _ in range(rng.randint(1, 3))}
        node = {"type": "object", "properties": props, "required": sorted(props)}
    if rng.random() < 0.6:
        node["description"] = _sentence(rng, 2, 6) + rng.choice([".", "", "."])
    return node


def random_tool(rng: random.Random, vocab: Vocabulary, taken: set[str]) -> dict[str, Any]:
    """A random tool in OpenAI format: `{"type": "function", "function": {name, description, parameters}}`."""
    for _ in range(50):
        words = [rng.choice(TOOL_VERBS)] + [vocab.word(rng) if rng.random() < 0.5 else rng.choice(english_words())
                                           for _ in range(rng.randint(0, 2))]
        name = _case(words, rng)
        if name not in taken and re.fullmatch(r"[A-Za-z][A-Za-z0-9_-]{0,63}", name):
            break
    taken.add(name)
    props: dict[str, Any] = {}
    for _ in range(rng.choice([0, 1, 1, 2, 2, 2, 3, 3])):
        key = rng.choice(PARAM_NAMES) if rng.random() < 0.6 else _case([vocab.word(rng), rng.choice(english_words())][: rng.randint(1, 2)], rng)
        if key not in props:
            p = random_param(rng, vocab)
            if rng.random() < 0.2:
                p["title"] = humanize(key).title()
            props[key] = p
    required = [k for k in props if rng.random() < 0.8]
    params: dict[str, Any] = {"type": "object", "properties": props, "required": required}
    if rng.random() < 0.2:
        params = {"$schema": "http://json-schema.org/draft-07/schema#", **params}
    desc = _sentence(rng, 1, 7, verb=words[0]) + "." + (" " + _sentence(rng, 3, 10) + "." if rng.random() < 0.1 else "")
    return {"type": "function", "function": {"name": name, "description": desc, "parameters": params}}


def _leaves(node: Any, prefix: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _leaves(v, (*prefix, k))
    elif not isinstance(node, list):
        yield prefix, node


def random_result(rng: random.Random, vocab: Vocabulary, args: dict[str, Any]) -> tuple[str, str, str | None]:
    """A random tool result: `(text, answer, label)` -- the answer is what a final reply copies from it (a JSON
    result's field, asked for by `label`, or the text itself), the rules of `toolgym.tasks.generate.pick_answer`."""
    echo = [v for v in args.values() if isinstance(v, str | int | float) and not isinstance(v, bool)]
    r = rng.random()
    if r < 0.35:  # a JSON object
        obj: dict[str, Any] = {}
        for _ in range(rng.randint(1, 4)):
            key = _case([rng.choice(english_words()) if rng.random() < 0.5 else vocab.word(rng)], rng)
            kind = rng.random()
            if kind < 0.3 and echo:
                obj[key] = rng.choice(echo)
            elif kind < 0.55:
                obj[key] = rng.randint(0, 9999) if rng.random() < 0.7 else round(rng.uniform(0, 100), 2)
            elif kind < 0.7:
                obj[key] = {vocab.word(rng): vocab.name(rng), vocab.word(rng): rng.randint(0, 99)}
            else:
                obj[key] = rng.choice([vocab.name(rng), vocab.phrase(rng, 1, 3), vocab.datetime(rng), vocab.ident(rng)])
        leaves = [(p, v) for p, v in _leaves(obj) if not isinstance(v, bool) and v not in echo]
        text = json.dumps(obj, indent=2 if rng.random() < 0.5 else None)
        if leaves:
            path, value = rng.choice(leaves)
            return text, str(value), " ".join(humanize(p) for p in path)
        return text, text, None
    if r < 0.55:
        return random_listing(rng, vocab)
    if r < 0.85:  # a sentence
        parts = [str(v) for v in echo[:2]]
        filler = rng.choice(["Done", "Result", "Stored", "Found", "Updated", "The value is", "Created"])
        new = rng.choice([str(rng.randint(0, 9999)), vocab.name(rng), vocab.phrase(rng, 1, 3)])
        text = f"{filler}: {new}" + (f" ({', '.join(parts)})" if parts and rng.random() < 0.5 else "") + "."
        return text, text, None
    text = str(rng.randint(-999, 99999)) if rng.random() < 0.5 else vocab.phrase(rng, 1, 4)
    return text, text, None


def random_listing(rng: random.Random, vocab: Vocabulary) -> tuple[str, str, None]:
    """A list-like result (`[FILE] x.txt` lines, bullets, bare lines): `(text, text, None)`."""
    tag = rng.choice(["[FILE] ", "[DIR] ", "- ", "* ", "", ""])
    items = [rng.choice([vocab.filename(rng), vocab.name(rng), vocab.ident(rng)]) for _ in range(rng.randint(2, 5))]
    text = "\n".join(f"{tag}{x}" for x in items)
    return text, text, None


def _call_msg(i: int, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"role": "assistant", "content": "",
            "tool_calls": [{"id": f"call_{i}", "type": "function", "function": {"name": name, "arguments": args}}]}


def _request(rng: random.Random, vocab: Vocabulary, tools: list[dict[str, Any]], sampler: ArgSampler,
             n: int) -> tuple[str, list[dict[str, Any]]]:
    """One user request and its answer (messages), call ids from `n` on: kind `call`, `chain`, `chain_ref`, `none`."""
    r = rng.random()
    if r < 0.15:
        text = rng.choice([vocab.phrase(rng, 1, 4), vocab.name(rng), vocab.ident(rng), str(rng.randint(0, 9999))])
        return "none", [{"role": "user", "content": no_tool_prompt(text, rng)},
                        {"role": "assistant", "content": f"<answer>{text}</answer>"}]

    def args_of(tool: dict[str, Any]) -> dict[str, Any]:
        try:
            return sampler.sample(tool["function"]["parameters"])
        except SchemaError:
            return {}

    if r < 0.75 or len(tools) < 2:
        tool = rng.choice(tools)
        args = args_of(tool)
        text, answer, label = random_result(rng, vocab, args)
        return "call", [{"role": "user", "content": call_prompt(tool, args, rng) + answer_clause(label)},
                        _call_msg(n, tool["function"]["name"], args),
                        {"role": "tool", "tool_call_id": f"call_{n}", "content": text},
                        {"role": "assistant", "content": f"<answer>{answer}</answer>"}]
    a, b = rng.sample(tools, 2)
    args_a, args_b = args_of(a), args_of(b)
    text_a, _, _ = random_listing(rng, vocab) if rng.random() < 0.4 else random_result(rng, vocab, args_a)
    refs: dict[str, str] = {}
    items = entries(text_a)
    props = b["function"]["parameters"].get("properties", {})
    strings = [k for k, v in args_b.items() if isinstance(v, str) and "enum" not in props.get(k, {})]
    if items and strings and rng.random() < 0.5:
        k = rng.choice(strings)
        idx = rng.randrange(min(len(items), 3))
        args_b[k] = items[idx]
        refs[k] = ref_phrase(idx, len(items))
    text_b, answer, label = random_result(rng, vocab, args_b)
    prompt = chain_prompt([(a, args_a, {}), (b, args_b, refs)], rng) + answer_clause(label)
    return "chain_ref" if refs else "chain", [
        {"role": "user", "content": prompt},
        _call_msg(n, a["function"]["name"], args_a), {"role": "tool", "tool_call_id": f"call_{n}", "content": text_a},
        _call_msg(n + 1, b["function"]["name"], args_b),
        {"role": "tool", "tool_call_id": f"call_{n + 1}", "content": text_b},
        {"role": "assistant", "content": f"<answer>{answer}</answer>"}]


def conversation(rng: random.Random, vocab: Vocabulary | None = None, requests: int = 1,
                 tools: list[dict[str, Any]] | None = None, system: str | None = None) -> dict[str, Any]:
    """A random tool-use conversation (a chat-with-tools row, `{"messages", "tools", "kinds"}`): 1-4 random tools,
    then `requests` user requests in turn, each of kind `call` (one call, then an answer copied from its result),
    `chain` (two calls), `chain_ref` (two calls, the second value "the first entry of that result") or `none` (no
    tool: answer directly). Several requests share one tool list, which pre-training uses to spend less compute on
    the schemas (a request sees the earlier ones, and must act on its own). `tools`/`system`: given ones instead of
    random ones (`scene`)."""
    vocab = vocab or Vocabulary(novel=0.6)
    if tools is None:
        taken: set[str] = set()
        tools = [random_tool(rng, vocab, taken) for _ in range(rng.choice([1, 2, 2, 3, 3]))]
    sampler = ArgSampler(rng, Pools(), vocab, optional_prob=0.4, server_prob=0.0, example_prob=0.2)
    msgs: list[dict[str, Any]] = [{"role": "system", "content": system or rng.choice(SYSTEM_PROMPTS)}]
    kinds = []
    for _ in range(requests):
        kind, part = _request(rng, vocab, tools, sampler, sum(1 for m in msgs if m.get("tool_calls")))
        kinds.append(kind)
        msgs += part
    return {"messages": msgs, "tools": tools, "kinds": kinds}


def drill_value(rng: random.Random, vocab: Vocabulary) -> str:
    """A value of any shape a request may state: words, invented names, ids, paths, e-mail addresses, URLs, times,
    dates, digit strings (copy drills and call drills)."""
    return rng.choice([vocab.phrase(rng, 1, 5), vocab.name(rng), vocab.ident(rng), vocab.path(rng), vocab.email(rng),
                       vocab.time(rng), vocab.date(rng), str(rng.randint(0, 10**rng.randint(1, 6))), vocab.url(rng)])


COPY_TEMPLATES = ("Repeat {v} back to me.", "Say {v}.", "Reply with exactly {v}.", "The value is {v}. What is it?",
                  "Copy this: {v}", "What did I write? {v}", "Answer with {v} and nothing else.")


def copy_drill(rng: random.Random, vocab: Vocabulary | None = None, requests: int = 8,
               system: str | None = None, unquoted: float = 0.0, ref: float = 0.0) -> dict[str, Any]:
    """A conversation without tools of `requests` copy requests: a value of any shape (words, invented names, ids,
    paths, numbers, e-mail addresses, times) quoted in the request and answered exactly. Short and dense in copied
    tokens: the cheapest way to make a tiny model copy before it learns where values go in a call. An `unquoted`
    share of the values is written bare after a space (`Say lisbon.md.`): with the `word` split a name after a space
    is other tokens (`Ġl is bon`) than in the answer (`>lis bon`), as a listing's entry is than the same name in a
    call's JSON string -- these drills ask for that mapping. A `ref` share of the requests are reference drills
    instead (`ref_drill`: the n-th entry of a listing answered back). 0 draws nothing extra (the shipped base's
    stream)."""
    vocab = vocab or Vocabulary(novel=0.6)
    msgs: list[dict[str, Any]] = [{"role": "system", "content": system or rng.choice(SYSTEM_PROMPTS)}]
    kinds = []
    for _ in range(requests):
        if ref and rng.random() < ref:
            msgs += ref_drill(rng, vocab)
            kinds.append("ref")
            continue
        kinds.append("copy")
        v = drill_value(rng, vocab)
        quoted = json.dumps(v, ensure_ascii=False) if rng.random() < 0.8 else f"'{v}'"
        if unquoted and rng.random() < unquoted:
            quoted = v
        prompt = rng.choice(COPY_TEMPLATES + NO_TOOL_TEMPLATES).format(v=quoted)
        msgs += [{"role": "user", "content": prompt}, {"role": "assistant", "content": f"<answer>{v}</answer>"}]
    return {"messages": msgs, "tools": [], "kinds": kinds}


REF_NOUNS = ("result", "result", "list", "listing")
REF_TEMPLATES = ("{items}\nReply with {ref}.", "Here is a result:\n{items}\nWhat is {ref}?",
                 "Answer with {ref}:\n{items}", "{items}\nSay {ref} and nothing else.",
                 "Which is {ref}?\n{items}")


def ref_listing(rng: random.Random, vocab: Vocabulary) -> tuple[str, list[str], int]:
    """A list-like text as tools return them (`[FILE] x.md` lines, `[DIR]`, bullets, numbers, bare lines), its
    entries as `toolgym.tasks.sampling.entries` reads them, and the index of one of them (among the first five, the
    ones `ref_phrase` names by an ordinal). Entries are names, file names, ids and short phrases ("Rain jacket")."""
    tag = rng.choice(["[FILE] ", "[DIR] ", "- ", "* ", "", "", "num"])
    items: list[str] = []
    for _ in range(rng.randint(2, 6)):
        x = rng.choice([vocab.filename(rng), vocab.name(rng), vocab.ident(rng), vocab.phrase(rng, 1, 3)])
        if x not in items:
            items.append(x)
    if len(items) < 2:
        items.append(vocab.filename(rng) + "2")
    lines = [f"{i + 1}. {x}" if tag == "num" else f"{tag}{x}" for i, x in enumerate(items)]
    return "\n".join(lines), items, rng.randrange(min(len(items), len(ORDINALS)))


def ref_drill(rng: random.Random, vocab: Vocabulary) -> list[dict[str, Any]]:
    """One tool-less request that names an entry of a list by its place ("Reply with the second entry of that
    list.") and its answer (the entry, exactly): reading *which* entry a request names, and carrying a name that a
    listing writes after a tag and a space into an answer, where it is other tokens (`[FILE] lisbon.md`:
    `Ġl is bon`; `<answer>lisbon.md`: `lis bon`) -- the step of a generated task's `(ref)` call."""
    text, items, idx = ref_listing(rng, vocab)
    ref = ref_phrase(idx, len(items)).replace("result", rng.choice(REF_NOUNS))
    return [{"role": "user", "content": rng.choice(REF_TEMPLATES).format(items=text, ref=ref)},
            {"role": "assistant", "content": f"<answer>{items[idx]}</answer>"}]


def _drill_args(rng: random.Random, vocab: Vocabulary, tool: dict[str, Any]) -> dict[str, Any]:
    return {k: drill_value(rng, vocab) if p["type"] == "string" else rng.randint(0, 10**rng.randint(1, 5))
            for k, p in tool["function"]["parameters"]["properties"].items()}


def ref_call_drill(rng: random.Random, vocab: Vocabulary, tools: list[dict[str, Any]], requests: int = 3,
                   system: str | None = None) -> dict[str, Any]:
    """A conversation of `requests` two-call requests to `tools` (`drill_tool`s, at least two, each with a string
    parameter), each written as the task generator writes a `(ref)` task: the first call's values stated, one string
    of the second call "the n-th entry of that result" -- the first call returns a listing (`ref_listing`) and the
    second carries that entry into its JSON argument. Dense in exactly what a `(ref)` task asks; the answer copies
    the second result."""
    msgs: list[dict[str, Any]] = [{"role": "system", "content": system or rng.choice(SYSTEM_PROMPTS)}]
    for i in range(requests):
        a, b = rng.sample(tools, 2)
        args_a, args_b = _drill_args(rng, vocab, a), _drill_args(rng, vocab, b)
        props = b["function"]["parameters"]["properties"]
        k = rng.choice([name for name, p in props.items() if p["type"] == "string"])
        text, items, idx = ref_listing(rng, vocab)
        args_b[k] = items[idx]
        prompt = chain_prompt([(a, args_a, {}), (b, args_b, {k: ref_phrase(idx, len(items))})], rng)
        result = rng.choice(DRILL_RESULTS)
        msgs += [{"role": "user", "content": prompt}, _call_msg(2 * i, a["function"]["name"], args_a),
                 {"role": "tool", "tool_call_id": f"call_{2 * i}", "content": text},
                 _call_msg(2 * i + 1, b["function"]["name"], args_b),
                 {"role": "tool", "tool_call_id": f"call_{2 * i + 1}", "content": result},
                 {"role": "assistant", "content": f"<answer>{result}</answer>"}]
    return {"messages": msgs, "tools": tools, "kinds": ["ref_call_drill"] * requests}


def ref_drill_tools(rng: random.Random, vocab: Vocabulary, n: int) -> list[dict[str, Any]]:
    """`n` `drill_tool`s for `ref_call_drill`, each given a string parameter if it drew none (the entry goes there)."""
    taken: set[str] = set()
    tools = [drill_tool(rng, vocab, taken) for _ in range(n)]
    for t in tools:
        params = t["function"]["parameters"]
        if not any(p["type"] == "string" for p in params["properties"].values()):
            params["properties"][rng.choice(["name", "path", "target", "value"])] = {"type": "string"}
            params["required"] = list(params["properties"])
    return tools


def drill_tool(rng: random.Random, vocab: Vocabulary, taken: set[str]) -> dict[str, Any]:
    """A small random tool for call drills: a random name and a short description, 1-3 required parameters, most of
    them free strings (the rest integers)."""
    tool = random_tool(rng, vocab, taken)
    fn = tool["function"]
    fn["description"] = _sentence(rng, 1, 4, verb=re.split(r"[_\-]|(?=[A-Z])", fn["name"])[0].lower()) + "."
    props: dict[str, Any] = {}
    for _ in range(rng.choice([1, 1, 2, 2, 3])):
        key = rng.choice(PARAM_NAMES) if rng.random() < 0.5 else _case(
            [vocab.word(rng), rng.choice(english_words())][: rng.randint(1, 2)], rng)
        props[key] = {"type": "string" if rng.random() < 0.8 else "integer"}
        if rng.random() < 0.3:
            props[key]["description"] = _sentence(rng, 2, 4) + "."
    fn["parameters"] = {"type": "object", "properties": props, "required": list(props)}
    return tool


DRILL_RESULTS = ("ok", "Done.", "Saved.", "Stored.", "Updated.", "true", "Created.", "Sent.")


def call_drill(rng: random.Random, vocab: Vocabulary, tools: list[dict[str, Any]], requests: int = 6,
               system: str | None = None) -> dict[str, Any]:
    """A conversation of `requests` one-call requests to `tools` (`drill_tool`s) whose every string argument is a
    fresh value stated in the request: short and dense in values copied into tool-call JSON -- the copy drill of
    calls, where `copy_drill` copies into answers. Half the requests name the tool and parameters plainly ("Call
    NAME with key = "v""), the rest use the task generator's other phrasings; results are short ("Saved.") and the
    answer repeats them."""
    msgs: list[dict[str, Any]] = [{"role": "system", "content": system or rng.choice(SYSTEM_PROMPTS)}]
    for i in range(requests):
        tool = rng.choice(tools)
        props = tool["function"]["parameters"]["properties"]
        args = {k: drill_value(rng, vocab) if p["type"] == "string" else rng.randint(0, 10**rng.randint(1, 5))
                for k, p in props.items()}
        prompt = call_prompt(tool, args, rng, style=0 if rng.random() < 0.5 else None)
        result = rng.choice(DRILL_RESULTS)
        msgs += [{"role": "user", "content": prompt}, _call_msg(i, tool["function"]["name"], args),
                 {"role": "tool", "tool_call_id": f"call_{i}", "content": result},
                 {"role": "assistant", "content": f"<answer>{result}</answer>"}]
    return {"messages": msgs, "tools": tools, "kinds": ["call_drill"] * requests}


def scene(rng: random.Random, vocab: Vocabulary, rows: int, drill_share: float = 0.3,
          requests: tuple[int, int] = (1, 3), call_share: float = 0.0, unquoted: float = 0.0, ref: float = 0.0,
          ref_call_share: float = 0.0) -> list[dict[str, Any]]:
    """`rows` conversations that share their system prompt and tools (random ones) and differ in their requests:
    what one micro-batch of pre-training holds. A batch whose rows start alike computes that prefix (the tool
    schemas) once (`toolgym.train.loss.masked_logprobs`), so requests cost little more than their own tokens -- as
    in fine-tuning on one env, where every row has the same tools. A `drill_share` of scenes are copy drills, a
    `call_share` call drills (`call_drill`, 3-8 requests each, on 1-3 `drill_tool`s), a `ref_call_share` reference
    call drills (`ref_call_drill`, 2-4 two-call requests on 2-3 tools); `unquoted`, `ref`: see `copy_drill`."""
    system = rng.choice(SYSTEM_PROMPTS)
    r = rng.random()
    if r < drill_share:
        return [copy_drill(rng, vocab, rng.randint(2, 6), system, unquoted, ref) for _ in range(rows)]
    taken: set[str] = set()
    if r < drill_share + call_share:
        tools = [drill_tool(rng, vocab, taken) for _ in range(rng.choice([1, 2, 2, 3]))]
        return [call_drill(rng, vocab, tools, rng.randint(3, 8), system) for _ in range(rows)]
    if r < drill_share + call_share + ref_call_share:
        tools = ref_drill_tools(rng, vocab, rng.choice([2, 2, 3]))
        return [ref_call_drill(rng, vocab, tools, rng.randint(2, 4), system) for _ in range(rows)]
    tools = [random_tool(rng, vocab, taken) for _ in range(rng.choice([1, 2, 2, 3, 3, 4]))]
    return [conversation(rng, vocab, rng.randint(*requests), tools, system) for _ in range(rows)]


def toolcall_corpus(rng: random.Random, n: int = 3000) -> Iterator[str]:
    """Tokenizer-training text: the English word list, invented values, and rendered random conversations."""
    words = english_words()
    for i in range(0, len(words), 20):
        yield " ".join(words[i : i + 20])
    vocab = Vocabulary(novel=0.6)
    for _ in range(n):
        row = conversation(rng, vocab)
        yield json.dumps(row["tools"])
        for m in row["messages"]:
            yield m.get("content") or ""
            for c in m.get("tool_calls") or []:
                yield json.dumps({"name": c["function"]["name"], "arguments": c["function"]["arguments"]})
    yield string.printable


# Qwen2's pre-tokenizer regex with one change: a word may take a leading space but no other character. Merges
# learned under it never join punctuation and letters, so Qwen2's own split (which transformers applies on load)
# yields the same word pieces after a quote, a slash, `>` or a space-free start (see the module docstring).
WORD_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)| ?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def write_corpus(path: Path, n: int, seed: int, requests: tuple[int, int] = (2, 6), drill_share: float = 0.3,
                 on_row: Callable[[int], None] | None = None) -> dict[str, int]:
    """Write `n` random conversations to `path` (chat-with-tools rows): a `drill_share` of copy drills
    (`copy_drill`, 6-12 requests), the rest tool conversations of `requests` = (min, max) requests each. Returns the
    count of requests per kind."""
    rng = random.Random(f"toolcall-corpus:{seed}")
    vocab = Vocabulary(novel=0.6)
    kinds: dict[str, int] = {}
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as f:
        for i in range(n):
            if rng.random() < drill_share:
                row = copy_drill(rng, vocab, rng.randint(6, 12))
            else:
                row = conversation(rng, vocab, rng.randint(*requests))
            for k in row["kinds"]:
                kinds[k] = kinds.get(k, 0) + 1
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
            if on_row and i % 1000 == 0:
                on_row(i)
    return kinds


def _exact(value: Any, want: Any) -> bool:
    """Exact equality of argument values (JSON types; an int equals the same float)."""
    if isinstance(want, bool) or isinstance(value, bool):
        return value is want
    if isinstance(want, int | float) and isinstance(value, int | float):
        return float(value) == float(want)
    if isinstance(want, list) and isinstance(value, list):
        return len(value) == len(want) and all(_exact(v, w) for v, w in zip(value, want, strict=True))
    if isinstance(want, dict) and isinstance(value, dict):
        return set(value) == set(want) and all(_exact(value[k], want[k]) for k in want)
    return bool(value == want)


def _generate(model: Any, tok: Any, prompts: list[str], max_new_tokens: int, batch: int = 16) -> list[str]:
    """Greedy completions of rendered prompts (left-padded batches)."""
    import torch

    eos = tok.convert_tokens_to_ids("<|im_end|>")
    out: list[str] = []
    tok.padding_side = "left"
    for i in range(0, len(prompts), batch):
        enc = tok(prompts[i : i + batch], return_tensors="pt", padding=True, add_special_tokens=False)
        with torch.no_grad():
            gen = model.generate(**enc, max_new_tokens=max_new_tokens, do_sample=False, eos_token_id=eos,
                                 pad_token_id=tok.pad_token_id)
        out += tok.batch_decode(gen[:, enc["input_ids"].shape[1]:], skip_special_tokens=False)
    return [o.split("<|im_end|>")[0] for o in out]


def eval_toolcall(model_dir: str | Path, n: int = 200, seed: int = 12345, seen: set[str] | None = None,
                  max_new_tokens: int = 96) -> dict[str, Any]:
    """What a tool-calling base does on `n` fresh random single-request conversations (greedy, from the gold history):
    `call_match` (first turn: exactly the expected call -- name and every argument equal, no extra ones),
    `name_ok`, `abstain_ok` (no-tool requests: no call), `answer_ok` (the final turn's `<answer>` equals the
    expected one, given the gold calls and results), `chain_ref_ok` (the second call of a `chain_ref` request,
    whose value is copied from the first result), `copy_ok` (`n` fresh one-request copy drills of every value shape:
    the answer is exactly the quoted value -- the base's copying precision, which caps what fine-tuning reaches on
    unseen strings), `copy_unquoted_ok` (the same with the value written bare after a space, as a listing shows a
    name: other tokens than in the answer with the `word` split), `ref_ok` (`n` fresh reference drills: the n-th
    entry of a listing answered back exactly, `ref_drill`), `ref_call_ok` (`n` fresh two-call requests whose second
    value is "the n-th entry of that result", `ref_call_drill`: the second call exactly, given the gold first call
    and its listing), and `string_args_unseen` -- the share of string
    argument values not in `seen` (e.g. every string value of the pre-training corpus). Rates with 95 % Wilson
    intervals."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from toolgym.models.formats import HermesFormat
    from toolgym.stats import wilson

    tok = AutoTokenizer.from_pretrained(str(model_dir))
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()
    rng = random.Random(f"toolcall-eval:{seed}")
    vocab = Vocabulary(novel=0.6)
    rows = [conversation(rng, vocab, 1) for _ in range(n)]
    fmt = HermesFormat()

    def prompt(row: dict[str, Any], upto: int) -> str:
        return tok.apply_chat_template(row["messages"][:upto], tools=row["tools"], add_generation_prompt=True,
                                       tokenize=False)

    first = _generate(model, tok, [prompt(r, 2) for r in rows], max_new_tokens)
    last = _generate(model, tok, [prompt(r, len(r["messages"]) - 1) for r in rows], max_new_tokens)
    refs = [r for r in rows if r["kinds"][0] == "chain_ref"]
    second = _generate(model, tok, [prompt(r, 4) for r in refs], max_new_tokens)
    flags: dict[str, list[bool]] = {k: [] for k in ("call_match", "name_ok", "abstain_ok", "answer_ok", "chain_ref_ok",
                                                     "copy_ok", "copy_unquoted_ok", "ref_ok", "ref_call_ok")}
    # each kind of drill on its own stream, so the other rates keep their rows
    for key, stream, unquoted in (("copy_ok", "copy", 0.0), ("copy_unquoted_ok", "bare", 1.0)):
        drill_rng = random.Random(f"toolcall-eval-{stream}:{seed}")
        drills = [copy_drill(drill_rng, vocab, 1, unquoted=unquoted) for _ in range(n)]
        copied = _generate(model, tok, [prompt(d, 2) for d in drills], max_new_tokens)
        flags[key] = [text.strip() == d["messages"][2]["content"] for d, text in zip(drills, copied, strict=True)]
    ref_rng = random.Random(f"toolcall-eval-ref:{seed}")
    ref_rows = [{"messages": [{"role": "system", "content": ref_rng.choice(SYSTEM_PROMPTS)}, *ref_drill(ref_rng, vocab)],
                 "tools": []} for _ in range(n)]
    answered = _generate(model, tok, [prompt(d, 2) for d in ref_rows], max_new_tokens)
    flags["ref_ok"] = [text.strip() == d["messages"][2]["content"] for d, text in zip(ref_rows, answered, strict=True)]
    call_rng = random.Random(f"toolcall-eval-refcall:{seed}")
    ref_calls = [ref_call_drill(call_rng, vocab, ref_drill_tools(call_rng, vocab, 2), 1) for _ in range(n)]
    seconds = _generate(model, tok, [prompt(d, 4) for d in ref_calls], max_new_tokens)
    for d, text in zip(ref_calls, seconds, strict=True):
        fn = d["messages"][4]["tool_calls"][0]["function"]
        got = fmt.parse(text).tool_calls
        flags["ref_call_ok"].append(len(got) == 1 and got[0].name == fn["name"]
                                    and _exact(got[0].arguments, fn["arguments"]))
    strings: list[str] = []
    for row, text, fin in zip(rows, first, last, strict=True):
        msgs = row["messages"]
        turn = fmt.parse(text)
        want = msgs[2].get("tool_calls")
        if want is None:
            flags["abstain_ok"].append(not turn.tool_calls)
        else:
            fn = want[0]["function"]
            strings += [v for v in fn["arguments"].values() if isinstance(v, str)]
            got = turn.tool_calls[0] if len(turn.tool_calls) == 1 else None
            flags["name_ok"].append(got is not None and got.name == fn["name"])
            flags["call_match"].append(got is not None and got.name == fn["name"] and _exact(got.arguments, fn["arguments"]))
        flags["answer_ok"].append(fin.strip() == msgs[-1]["content"].strip())
    for row, text in zip(refs, second, strict=True):
        fn = row["messages"][4]["tool_calls"][0]["function"]
        turn = fmt.parse(text)
        got = turn.tool_calls[0] if len(turn.tool_calls) == 1 else None
        flags["chain_ref_ok"].append(got is not None and got.name == fn["name"] and _exact(got.arguments, fn["arguments"]))
    res: dict[str, Any] = {"n": n, "seed": seed}
    for k, v in flags.items():
        lo, hi = wilson(sum(v), len(v)) if v else (0.0, 1.0)
        res[k] = {"rate": sum(v) / len(v) if v else None, "n": len(v), "lo": lo, "hi": hi}
    if seen is not None and strings:
        res["string_args_unseen"] = sum(s not in seen for s in strings) / len(strings)
    return res


def corpus_strings(path: Path) -> set[str]:
    """Every string argument value of a corpus file's calls (what `eval_toolcall(seen=...)` compares against)."""
    out: set[str] = set()
    with path.open(encoding="utf-8") as f:
        for line in f:
            for m in json.loads(line)["messages"]:
                for c in m.get("tool_calls") or []:
                    out.update(v for v in c["function"]["arguments"].values() if isinstance(v, str))
    return out


__all__ = ["COPY_TEMPLATES", "DRILL_RESULTS", "REF_TEMPLATES", "call_drill", "copy_drill", "ref_call_drill", "ref_drill",
           "ref_drill_tools", "ref_listing", "drill_tool", "drill_value", "scene", "corpus_strings", "eval_toolcall", "SYSTEM_PROMPTS", "WORD_SPLIT", "conversation", "english_words", "random_listing", "random_param", "random_result",
           "random_tool", "toolcall_corpus", "write_corpus"]
