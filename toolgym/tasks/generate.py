"""Verified task generation from an MCP server itself: `toolgym tasks generate ENV_OR_CONFIG -n N -o tasks.jsonl`.

How a task is made (nothing here knows a particular server):

1. **tools**: the env's visible tools with the schemas the model sees (hidden arguments removed);
2. **arguments**: drawn by `toolgym.tasks.sampling.ArgSampler` -- valid against the schema by construction, strings
   from the schema's examples, a built-in vocabulary and the values the server has returned so far;
3. **execution**: every attempt runs in its own episode (`env.episode(task)`: a fresh sandbox and server for a
   per-rollout server, the env's setup calls and hidden arguments, exactly what a rollout gets) through
   `Episode.execute`, the call path of every rollout (visibility, schema validation, hidden arguments, timeout).
   An attempt is kept only if every call succeeds (no MCP error flag, no text matching `error_patterns`);
4. **multi-step**: a two-call attempt draws the second call's strings from the first call's result (its entries,
   and those joined to the first call's path-like arguments: `notes` + `todo.txt`), sometimes referring to them
   instead of stating them ("the first entry of that result"; `ref_share` of the two-call tasks whose first result
   lists entries). With `listing_first` > 0 that share of two-call attempts starts with a tool whose results have
   listed entries so far in the run (a directory listing, a search), so more second calls can refer to one;
5. **answers**: the last call's result -- for a JSON object, its field whose value varies most over that tool's
   calls (the prompt asks for it by name); for text, the text (or its first line) when short;
6. **replay**: each kept task runs again in a fresh episode; a task whose calls fail there is dropped, and one whose
   results differ keeps its calls but loses its answer (`answer_stable: false`);
7. **no-tool tasks** (`expected_calls: []`, answer the quoted text) for abstention;
8. **prompts** from `toolgym.tasks.templates` (and, with a paraphrase endpoint, reworded by that model; a rewording
   that drops or changes a stated value is not used); a task that repeats another (or one of an extended set: every
   field but id and split, `toolgym.check.task_key`) is dropped (`distinct`; `duplicates_dropped` in the summary);
9. **held-out split**: each free value (strings not from an enum, numbers) is held out by a hash of the value
   (values in more than `common_share` of the tasks stay in training), each two-tool combination likewise; a task
   with any held-out value or combination is held out. No held-out value occurs in a training task's calls or
   prompt: `check_split` asserts it before anything is written. To grow an existing set without a leak, `avoid`
   (its held-out tasks) and `keep` (its training tasks) add the held-out values and tool combinations of that set --
   those its held-out tasks use and its training tasks do not -- to this run's held-out side, and no value or
   combination that set trains on is held out by its hash, so a new held-out task is held out of both sets' training.

Every expected call is validated against the live schema (`toolgym.accuracy.validate_args`) when it is drawn and
again before writing. Expected calls are written with exact values, BFCL-style (`{"a": [3]}`: one acceptable value
per argument).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
import re
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from toolgym.accuracy import validate_args
from toolgym.check import task_key
from toolgym.tasks import templates as T
from toolgym.tasks.sampling import ArgSampler, Pools, SchemaError, Vocabulary, children, entries, harvest
from toolgym.types import ToolCall

ANSWER_MAX_CHARS = 160
DEFAULT_ERROR_PATTERNS = (r"^\s*(error|exception|traceback)\b", r"^\s*(access denied|permission denied|not found)\b",
                          r"\berror\s*[-:]\s")


class GenerationError(RuntimeError):
    """Generation could not produce what was asked (no tool succeeds, too few tasks after the attempt budget ...)."""


@dataclass
class GenOptions:
    """Options of a generation run (the CLI flags of `toolgym tasks generate`)."""

    n_train: int = 200
    n_heldout: int = 60
    seed: int = 0
    no_tool_share: float = 0.15      # share of no-tool (abstention) tasks
    chain_share: float = 0.25        # share of two-call tasks among tool tasks
    ref_share: float = 0.4           # share of two-call tasks whose second value is referred to, not stated
    listing_first: float = 0.0       # share of two-call attempts that start with a tool seen to list entries
    avoid: list[dict[str, Any]] = field(default_factory=list)  # an earlier set's held-out tasks ...
    keep: list[dict[str, Any]] = field(default_factory=list)   # ... and its training tasks (see `avoided`)
    heldout_share: float = 0.2       # share of free values (and two-tool combinations) held out
    common_share: float = 0.05       # values used by more than this share of the tasks always stay in training
    tools: list[str] | None = None   # restrict to these tools (default: every visible tool)
    exclude: list[str] = field(default_factory=list)
    hints: dict[str, list[Any]] = field(default_factory=dict)   # parameter name -> values to try
    fields: dict[str, Any] = field(default_factory=dict)        # fields every task carries (fixtures, setup)
    error_patterns: tuple[str, ...] = DEFAULT_ERROR_PATTERNS
    concurrency: int = 4
    max_attempts: int | None = None  # default: 12 x the tasks wanted
    replay: bool = True
    answer_max_chars: int = ANSWER_MAX_CHARS
    paraphrase: Callable[[str], Any] | None = None   # async fn(prompt) -> reworded prompt (or None)


@dataclass
class Attempt:
    """One executed attempt: its calls (name, arguments, result text) and, for a reference, the step it refers to."""

    index: int
    steps: list[tuple[str, dict[str, Any], str]] = field(default_factory=list)
    refs: dict[str, str] = field(default_factory=dict)       # parameter of the last step -> phrase
    sources: list[tuple[str, dict[str, str]]] = field(default_factory=list)  # per planned call: (tool, param -> source)
    probe: tuple[str | None, int] | None = None  # a probe: (the parameter its crawl follows, depth)
    ok: bool = False
    failed_tool: str | None = None
    error: str | None = None


def sandbox_dirs(session: Any) -> list[str]:
    """The sandbox folders of an episode's session (one per server of a multi-server env that has one)."""
    parts = getattr(session, "parts", None)
    sessions = list(parts.values()) if isinstance(parts, dict) else [session]
    return [str(b.path) for s in sessions if (b := getattr(s, "sandbox", None)) is not None]


def sandbox_relative(text: str, boxes: list[str]) -> str:
    """`text` with each sandbox folder written `{rollout_dir}` (and `{rollout_dir}/x` as the relative `x` where it
    starts a value): a per-rollout folder is a different path in every rollout, so a value or an answer must not
    carry it."""
    for b in boxes:
        text = re.sub(re.escape(b) + r"/(?=\S)", "", text).replace(b, "{rollout_dir}")
    return text


_NAME = re.compile(r"^[\w@+-][\w.@+-]{0,99}$")


def _name_like(entry: str) -> bool:
    """Whether a listing entry reads as the name of a child (`todo.txt`, `garden`), not a value (`4096`, `true`)."""
    return bool(_NAME.match(entry)) and not entry.isdigit() and entry.lower() not in ("true", "false", "null", "none")


def _h(*key: Any) -> float:
    return int.from_bytes(hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).digest()[:8], "big") / 2**64


def free_values(args: dict[str, Any], schema: dict[str, Any]) -> list[Any]:
    """The values of `args` a held-out split is made over: strings not fixed by an `enum`/`const`, and numbers (not
    booleans), at any depth."""
    props = schema.get("properties") or {}
    out: list[Any] = []

    def walk(v: Any, node: dict[str, Any]) -> None:
        if isinstance(node, dict) and ("enum" in node or "const" in node):
            return
        if isinstance(v, bool) or v is None:
            return
        if isinstance(v, str | int | float):
            out.append(v)
        elif isinstance(v, list):
            item = node.get("items") if isinstance(node, dict) and isinstance(node.get("items"), dict) else {}
            for x in v:
                walk(x, item)
        elif isinstance(v, dict):
            sub = node.get("properties") or {} if isinstance(node, dict) else {}
            for k, x in v.items():
                walk(x, sub.get(k, {}))

    for k, v in args.items():
        walk(v, props.get(k, {}))
    return out


def _key(v: Any) -> str:
    """A value's identity for the split: strings as they are, numbers by value (3 == 3.0)."""
    if isinstance(v, int | float) and not isinstance(v, bool):
        return f"#{float(v)!r}"
    return f"s:{v}"


class Generator:
    """A generation run over a started env (see the module docstring)."""

    def __init__(self, env: Any, opts: GenOptions, on_progress: Callable[[dict[str, Any]], None] | None = None):
        self.env, self.opts, self.on_progress = env, opts, on_progress
        self.pools = Pools(hints=dict(opts.hints))
        self.vocab = Vocabulary()
        self.stats: dict[str, Counter[str]] = defaultdict(Counter)
        self.errors: dict[str, Counter[str]] = defaultdict(Counter)
        self._patterns = [re.compile(p, re.I) for p in opts.error_patterns]
        tools = {t["function"]["name"]: t for t in env.model_tools()}
        if opts.tools:
            unknown = sorted(set(opts.tools) - set(tools))
            if unknown:
                raise GenerationError(f"--tool {', '.join(unknown)}: not a visible tool (visible: {', '.join(sorted(tools))})")
            tools = {k: v for k, v in tools.items() if k in opts.tools}
        self.tools = {k: v for k, v in tools.items() if k not in set(opts.exclude)}
        if not self.tools:
            raise GenerationError("no visible tools to generate tasks for")
        self.schemas = {k: v["function"].get("parameters") or {"type": "object", "properties": {}}
                        for k, v in self.tools.items()}
        self._crawled: set[tuple[str, str]] = set()

    # ---------------------------------------------------------------------------------------------- execution
    def _failed(self, rec: Any, text: str) -> bool:
        return not rec.exec_ok or any(p.search(text) for p in self._patterns)

    async def _run(self, att: Attempt, plan: list[tuple[str, dict[str, Any] | None]], rng: random.Random) -> Attempt:
        """Execute a plan in a fresh episode; a step with arguments None draws them now (from the previous result).
        Results are kept with the episode's sandbox folder written `{rollout_dir}` (`sandbox_relative`)."""
        task = {"id": f"gen-{att.index}", "prompt": "", **self.opts.fields}
        async with self.env.episode(task, example_id=att.index) as ep:
            boxes = sandbox_dirs(ep.session)
            for i, (name, args) in enumerate(plan):
                if args is None:
                    args = self._follow_up(name, att, rng)
                    if args is None:
                        att.failed_tool, att.error = name, "no arguments"
                        return att
                res = await ep.execute(ToolCall(name=name, arguments=args, id=f"g{i}"), i)
                text = sandbox_relative(res.text, boxes)
                if self._failed(res.record, text):
                    att.failed_tool, att.error = name, sandbox_relative(res.record.error or res.text, boxes)[:200]
                    return att
                att.steps.append((name, args, text))
        att.ok = True
        return att

    def _follow_up(self, name: str, att: Attempt, rng: random.Random) -> dict[str, Any] | None:
        """Arguments of a second call drawn from the first call's result: a referred entry, or children/harvest."""
        first_name, first_args, first_text = att.steps[-1]
        schema = self.schemas[name]
        props = schema.get("properties") or {}
        items = entries(first_text)
        served = harvest(first_text)
        kids = [c for a in first_args.values() if isinstance(a, str) for e in items or served
                if (c := children(a, e)) is not None]
        strings = [k for k, p in props.items() if isinstance(p, dict) and p.get("type") == "string"
                   and "enum" not in p and "const" not in p]
        context = {k: kids + served for k in strings}
        sampler = ArgSampler(rng, self.pools, self.vocab, tool=name)
        try:
            args = sampler.sample(schema, context)
        except SchemaError:
            return None
        att.sources.append((name, dict(sampler.used)))
        if items and strings and rng.random() < self.opts.ref_share:
            k = rng.choice([s for s in strings if s in args] or strings)
            idx = rng.randrange(min(3, len(items)))
            trial = {**args, k: items[idx]}
            if validate_args(schema, trial) is None:
                args = trial
                att.refs = {k: T.ref_phrase(idx, len(items))}
        return args

    # ---------------------------------------------------------------------------------------------- planning
    def _plan(self, att: Attempt, rng: random.Random, chain: bool) -> list[tuple[str, dict[str, Any] | None]] | None:
        names = sorted(self.tools)
        ok = self.stats["ok"]
        # tools with fewer successes are tried more often (balance), every tool keeps a chance
        weights = [1.0 / (1 + ok[n]) ** 0.8 for n in names]
        lists = self.stats["lists"]
        if chain and self.opts.listing_first > 0 and any(lists[n] for n in names) \
                and rng.random() < self.opts.listing_first:
            # weighted by how often each tool's successful results listed entries
            weights = [w * lists[n] / max(1, ok[n]) for w, n in zip(weights, names, strict=True)]
        first = rng.choices(names, weights)[0]
        sampler = ArgSampler(rng, self.pools, self.vocab, tool=first)
        try:
            args = sampler.sample(self.schemas[first])
        except SchemaError as exc:
            self.errors[first][f"sampling: {exc}"] += 1
            return None
        att.sources.append((first, dict(sampler.used)))
        if not chain or len(names) < 2:
            return [(first, args)]
        return [(first, args), (rng.choice(names), None)]

    def probes(self) -> list[tuple[str, dict[str, Any], str | None, int]]:
        """First calls that need no knowledge of the server: each tool with its required arguments from the schema's
        own examples, defaults or enums where there are any, and a path-like string parameter set to `.` (the current
        folder). Each is `(tool, args, crawled parameter or None, depth)`: a probe whose result lists entries is
        followed into them (`crawl`)."""
        plans = []
        for name, schema in sorted(self.schemas.items()):
            props = schema.get("properties") or {}
            required = list(schema.get("required") or [])
            args: dict[str, Any] = {}
            crawl = None
            for k in required:
                p = props.get(k) or {}
                ex = [e for e in [*(p.get("examples") or []), p.get("default")] if e is not None] + \
                    ([*p["enum"]] if isinstance(p.get("enum"), list) else [])
                if ex:
                    args[k] = ex[0]
                elif p.get("type") == "string" and re.search(r"path|dir|folder|root|location|parent", k, re.I):
                    args[k], crawl = ".", k
            if set(args) == set(required) and validate_args(schema, args) is None:
                plans.append((name, args, crawl, 0))
        return plans

    def crawl(self, att: Attempt, param: str | None, depth: int) -> list[tuple[str, dict[str, Any], str | None, int]]:
        """Follow a successful probe into the entries its result lists: the same tool on each child value
        (`children(argument, entry)`), three levels deep at most, each value once."""
        if param is None or depth >= 3 or len(self._crawled) >= 30 * len(self.tools):
            return []
        name, args, text = att.steps[0]
        out = []
        for e in entries(text)[:40]:
            child = children(args[param], e) if _name_like(e) else None
            if child is not None and (name, child) not in self._crawled:
                trial = {**args, param: child}
                if validate_args(self.schemas[name], trial) is None:
                    self._crawled.add((name, child))
                    out.append((name, trial, param, depth + 1))
        return out

    async def attempts(self, target_ok: int, chain: bool, budget: int) -> list[Attempt]:
        """Run rounds of attempts (`concurrency` at a time; plans drawn before the round, results folded in after it,
        so a run is reproducible for deterministic servers) until `target_ok` succeeded or `budget` were tried. The
        first run starts with the probes and the crawl they lead to."""
        kept: list[Attempt] = []
        tried = 0
        base = self.stats["attempts"]["*"]
        queue = [] if chain or base else self.probes()
        while len(kept) < target_ok and tried < budget:
            batch = []
            for _ in range(min(self.opts.concurrency, budget - tried)):
                idx = base + tried
                rng = random.Random(f"{self.opts.seed}:{idx}")
                att = Attempt(idx)
                if queue:
                    name, args, param, depth = queue.pop(0)
                    plan: list[tuple[str, dict[str, Any] | None]] | None = [(name, args)]
                    att.probe = (param, depth)
                else:
                    plan = self._plan(att, rng, chain)
                tried += 1
                if plan is not None:
                    batch.append((att, plan, rng))
            results = await asyncio.gather(*(self._run(a, p, r) for a, p, r in batch))
            for att in results:
                self.stats["attempts"]["*"] += 1
                for i, (tool, used) in enumerate(att.sources):  # a call that ran and succeeded, or the one that failed
                    if i < len(att.steps) or tool == att.failed_tool:
                        self.pools.credit(tool, used, i < len(att.steps))
                if att.ok:
                    kept.append(att)
                    if att.probe is not None:
                        queue += self.crawl(att, *att.probe)
                    for name, args, text in att.steps:
                        listed = entries(text)
                        self.stats["ok"][name] += 1
                        self.stats["lists"][name] += bool(listed)
                        self.pools.add_success(name, args)
                        self.pools.add_server(harvest(text))
                        self.pools.add_server(harvest(text, tokens=True), pool="tokens")
                        for a in args.values():
                            if isinstance(a, str):
                                self.pools.add_server(c for e in listed
                                                      if _name_like(e) and (c := children(a, e)) is not None)
                elif att.failed_tool:
                    self.stats["failed"][att.failed_tool] += 1
                    self.errors[att.failed_tool][(att.error or "")[:80]] += 1
            if self.on_progress:
                self.on_progress({"tried": tried, "kept": len(kept), "target": target_ok, "chain": chain})
        return kept

    async def replay(self, att: Attempt) -> tuple[bool, bool]:
        """Re-run a kept attempt's calls in a fresh episode: (all succeeded, same results)."""
        plan = [(n, a) for n, a, _ in att.steps]
        again = await self._run(Attempt(att.index), plan, random.Random(0))
        return again.ok, again.ok and [t for *_, t in again.steps] == [t for *_, t in att.steps]


# ---------------------------------------------------------------------------------------------------- answers
def _leaves(node: Any, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    if isinstance(node, dict):
        return [x for k, v in node.items() for x in _leaves(v, (*path, str(k)))]
    if isinstance(node, list):
        return []
    return [(path, node)]


def answer_fields(attempts: list[Attempt]) -> dict[str, tuple[str, ...]]:
    """Per tool, the JSON field its answers report: the leaf (of object results) with the most distinct values over
    the tool's calls where it does not echo an argument (equal to one, or containing one); a leaf that echoes an
    argument in four calls of five or more is never chosen."""
    seen: dict[str, dict[tuple[str, ...], set[str]]] = defaultdict(lambda: defaultdict(set))
    echo: dict[str, Counter[tuple[str, ...]]] = defaultdict(Counter)
    calls: Counter[str] = Counter()
    for att in attempts:
        name, args, text = att.steps[-1]
        try:
            obj = json.loads(text)
        except (json.JSONDecodeError, ValueError):
            continue
        if not isinstance(obj, dict):
            continue
        calls[name] += 1
        argvals = {str(v) for v in args.values()}
        for path, v in _leaves(obj):
            if v is None or isinstance(v, bool):
                continue
            if str(v) in argvals or any(len(a) >= 3 and a in str(v) for a in argvals):
                echo[name][path] += 1
            else:
                seen[name][path].add(str(v))
    out = {}
    for name, paths in seen.items():
        best = sorted(((len(vals), p) for p, vals in paths.items() if echo[name][p] < 0.8 * calls[name]),
                      key=lambda x: (-x[0], x[1]))
        if best:
            out[name] = best[0][1]
    return out


def pick_answer(text: str, field_path: tuple[str, ...] | None, max_chars: int) -> tuple[str | None, str | None]:
    """`(answer, label)` of a result: the named JSON field (label: the field's path made readable), else the text or
    its first line when at most `max_chars` long; `(None, None)` when the result carries no short answer."""
    if field_path:
        try:
            node: Any = json.loads(text)
            for p in field_path:
                node = node[p]
            if not isinstance(node, dict | list):
                return str(node), " ".join(T.humanize(p) for p in field_path)
        except (json.JSONDecodeError, ValueError, KeyError, TypeError):
            pass
    s = text.strip()
    if 0 < len(s) <= max_chars:
        return s, None
    line = s.splitlines()[0].strip() if s else ""
    if 0 < len(line) <= max_chars:
        return line, None
    return None, None


# ---------------------------------------------------------------------------------------------------- split
def task_values(task: dict[str, Any], schemas: dict[str, dict[str, Any]]) -> list[str]:
    """The split keys of a task's free values (`_key`): its calls' arguments, or a no-tool task's quoted text."""
    if not task["expected_calls"]:
        return [_key(task["answer"])] if task.get("answer") is not None else []
    out = []
    for c in task["expected_calls"]:
        args = {k: v[0] for k, v in c["arguments"].items()}
        out += [_key(v) for v in free_values(args, schemas.get(c["name"], {}))]
    return out


def combo(task: dict[str, Any]) -> tuple[str, ...]:
    return tuple(c["name"] for c in task["expected_calls"])


def used(tasks: list[dict[str, Any]], schemas: dict[str, dict[str, Any]]) -> tuple[set[str], set[tuple[str, ...]]]:
    """The free values (split keys) and tool combinations that `tasks` use."""
    return {v for t in tasks for v in task_values(t, schemas)}, {combo(t) for t in tasks}


def avoided(heldout: list[dict[str, Any]], train: list[dict[str, Any]], schemas: dict[str, dict[str, Any]]
            ) -> tuple[set[str], set[tuple[str, ...]]]:
    """The held-out side of an existing split: the free values (split keys) and tool combinations that its held-out
    tasks use and its training tasks do not (values common to both, like `.`, stay usable)."""
    held_values, held_combos = used(heldout, schemas)
    train_values, train_combos = used(train, schemas)
    return held_values - train_values, {c for c in held_combos if len(c) > 1} - train_combos


def _quotes(prompt: str, values: set[str]) -> bool:
    return any(v.startswith("s:") and len(v) > 4 and T.show(v[2:]) in prompt for v in values)


def assign_split(tasks: list[dict[str, Any]], schemas: dict[str, dict[str, Any]], share: float, common: float,
                 seed: int, fixed: tuple[set[str], set[tuple[str, ...]]] = (set(), set()),
                 seen: tuple[set[str], set[tuple[str, ...]]] = (set(), set())
                 ) -> tuple[set[str], set[tuple[str, ...]]]:
    """Mark each task's `split` (train / heldout) in place; returns the held-out values and tool combinations.
    `fixed`: values and combinations held out whatever their hash (`avoided`); a task quoting such a value in its
    prompt is held out too. `seen`: values and combinations an earlier set trains on (`--extend`), never held out by
    their hash, so every new held-out task holds something out of that set's training tasks as well."""
    counts: Counter[str] = Counter(v for t in tasks for v in set(task_values(t, schemas)))
    limit = max(2, common * len(tasks))
    held = {v for v in counts if counts[v] <= limit and v not in seen[0] and _h("value", seed, v) < share} | fixed[0]
    combos = {combo(t) for t in tasks if len(combo(t)) > 1}
    held_combos = {c for c in combos if len(combos) >= 4 and c not in seen[1] and _h("combo", seed, c) < share} \
        | fixed[1]
    for t in tasks:
        out = any(v in held for v in task_values(t, schemas)) or combo(t) in held_combos \
            or (bool(fixed[0]) and _quotes(t["prompt"], fixed[0]))
        t["split"] = "heldout" if out else "train"
    return held, held_combos


def check_split(train: list[dict[str, Any]], heldout: list[dict[str, Any]], held: set[str],
                held_combos: set[tuple[str, ...]], schemas: dict[str, dict[str, Any]]) -> None:
    """Assert that no held-out value occurs in a training task's calls or prompt, and no held-out tool combination
    in a training task (raises `AssertionError` naming the first leak)."""
    for t in train:
        for v in task_values(t, schemas):
            if v in held:
                raise AssertionError(f"held-out value {v[2:]!r} in training task {t['id']}")
        if combo(t) in held_combos:
            raise AssertionError(f"held-out tool combination {combo(t)} in training task {t['id']}")
        for v in held:
            if _quotes(t["prompt"], {v}):
                raise AssertionError(f"held-out value {v[2:]!r} quoted in the prompt of training task {t['id']}")


# ---------------------------------------------------------------------------------------------------- tasks
def _expected(name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "arguments": {k: [v] for k, v in args.items()}}


def build_task(att: Attempt, tools: dict[str, dict[str, Any]], fields: dict[str, tuple[str, ...]], rng: random.Random,
               max_chars: int, stable: bool) -> dict[str, Any]:
    name, _, text = att.steps[-1]
    answer, label = pick_answer(text, fields.get(name), max_chars) if stable else (None, None)
    if len(att.steps) == 1:
        n, args, _ = att.steps[0]
        prompt = T.call_prompt(tools[n], args, rng)
        kind = n
    else:
        steps = [(tools[n], a, att.refs if i == len(att.steps) - 1 else {}) for i, (n, a, _) in enumerate(att.steps)]
        prompt = T.chain_prompt(steps, rng)
        kind = "+".join(n for n, _, _ in att.steps) + (" (ref)" if att.refs else "")
    task = {"prompt": prompt + T.answer_clause(label if answer is not None else None), "answer": answer,
            "expected_calls": [_expected(n, a) for n, a, _ in att.steps], "kind": kind}
    if label and answer is not None:
        task["answer_field"] = list(fields[name])
    if not stable:
        task["answer_stable"] = False
    return task


def _prompt_rng(opts: GenOptions, att: Attempt) -> random.Random:
    """The prompt template draws of one attempt: the same whenever its task is built."""
    return random.Random(f"{opts.seed}:prompt:{att.index}")


def distinct(tasks: list[dict[str, Any]], earlier: set[str] | None = None, fields: dict[str, Any] | None = None
             ) -> tuple[list[dict[str, Any]], int]:
    """`tasks` without repeats (the first of each kept) and without tasks already in `earlier` (`task_key`s of
    written tasks); returns them and how many were dropped. `fields`: what every task will carry when written
    (`--field`), compared as if already there. A server with few valid values (a fixture's three folders) gives the
    same call and the same template again and again: a repeated held-out task counts one outcome twice and narrows
    every interval it is in."""
    seen = set(earlier or ())
    out = []
    for t in tasks:
        k = task_key({**(fields or {}), **t})
        if k not in seen:
            seen.add(k)
            out.append(t)
    return out, len(tasks) - len(out)


def no_tool_task(vocab: Vocabulary, rng: random.Random) -> dict[str, Any]:
    text = rng.choice([vocab.phrase(rng, 1, 3), vocab.name(rng), vocab.ident(rng)])
    return {"prompt": T.no_tool_prompt(text, rng), "answer": text, "expected_calls": [], "kind": "none"}


async def generate(env: Any, opts: GenOptions,
                   on_progress: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Generate training and held-out tasks for an env (started here if it is not); returns `{"train", "heldout",
    "summary"}`. Raises `GenerationError` when the attempt budget ends before enough tasks are found."""
    await env.start()
    gen = Generator(env, opts, on_progress)
    fixed = avoided(opts.avoid, opts.keep, gen.schemas)
    seen = used(opts.keep, gen.schemas)
    total = opts.n_train + opts.n_heldout
    none_share = opts.no_tool_share
    need = {"train": opts.n_train, "heldout": opts.n_heldout}
    chain_share = opts.chain_share if len(gen.tools) > 1 else 0.0
    budget = opts.max_attempts or 12 * total
    singles: list[Attempt] = []
    chains: list[Attempt] = []
    fields: dict[str, tuple[str, ...]] = {}
    earlier = {task_key(t) for t in opts.keep + opts.avoid}  # an extended set's tasks are not written again
    want_s = int(total * (1 - none_share) * (1 - chain_share) * 1.3) + 1
    want_c = int(total * (1 - none_share) * chain_share * 1.3)
    for _ in range(8):  # draw, split, and draw more of what a split is short of
        left = budget - gen.stats["attempts"]["*"]
        singles += await gen.attempts(want_s - len(singles), chain=False, budget=max(0, left))
        left = budget - gen.stats["attempts"]["*"]
        if want_c > len(chains):
            chains += await gen.attempts(want_c - len(chains), chain=True, budget=max(0, left))
        fields = answer_fields(singles + chains)
        tasks = distinct([build_task(a, gen.tools, fields, _prompt_rng(opts, a), opts.answer_max_chars, True)
                          for a in singles + chains], earlier, opts.fields)[0]
        assign_split(tasks, gen.schemas, opts.heldout_share, opts.common_share, opts.seed, fixed, seen)
        short = max(need[s] * (1 - none_share) / max(1, sum(t["split"] == s for t in tasks)) for s in need)
        if short <= 1.0 or gen.stats["attempts"]["*"] >= budget:
            break
        want_s = int(max(want_s, len(singles)) * min(3.0, short * 1.15)) + 1
        want_c = int(max(want_c, len(chains)) * min(3.0, short * 1.15)) if chain_share else 0
    kept = singles + chains
    if not kept:
        raise GenerationError("no call succeeded. " + _error_summary(gen))
    replays = await _replay_all(gen, kept) if opts.replay else [(True, True)] * len(kept)
    tasks = []
    stable_count = 0
    for att, (ok, same) in zip(kept, replays, strict=True):
        if not ok:
            gen.stats["replay_failed"][att.steps[-1][0]] += 1
            continue
        stable_count += same
        tasks.append(build_task(att, gen.tools, fields, _prompt_rng(opts, att), opts.answer_max_chars, same))
    tasks, duplicates = distinct(tasks, earlier, opts.fields)
    n_tool = len(tasks)
    rng = random.Random(f"{opts.seed}:none")
    seen_text: set[str] = set()
    want_none = {s: round(need[s] * none_share) for s in need}
    for _ in range(100 * total):  # no-tool tasks until each split has its share (their text decides their split)
        t = no_tool_task(gen.vocab, rng)
        if t["answer"] in seen_text or task_key({**opts.fields, **t}) in earlier:
            continue
        seen_text.add(t["answer"])
        tasks.append(t)
        assign_split(tasks[n_tool:], gen.schemas, opts.heldout_share, 1.0, opts.seed, fixed)
        if all(sum(x["split"] == s for x in tasks[n_tool:]) >= want_none[s] for s in need):
            break
    for t in tasks:  # schema validity of every expected call, once more, before anything is written
        for c in t["expected_calls"]:
            err = validate_args(gen.schemas[c["name"]], {k: v[0] for k, v in c["arguments"].items()})
            if err:
                raise AssertionError(f"generated call {c['name']} is not valid against the live schema: {err}")
    held, held_combos = assign_split(tasks, gen.schemas, opts.heldout_share, opts.common_share, opts.seed, fixed)
    train = _pick([t for t in tasks if t["split"] == "train"], opts.n_train, none_share, chain_share, opts.seed)
    heldout = _pick([t for t in tasks if t["split"] == "heldout"], opts.n_heldout, none_share, chain_share, opts.seed + 1)
    if opts.paraphrase is not None:
        await _paraphrase_all(train + heldout, opts.paraphrase, gen.stats, earlier, opts.fields)
    for split, rows, start in (("train", train, len(opts.keep)), ("heldout", heldout, len(opts.avoid))):
        for i, t in enumerate(rows, start):  # ids continue an extended set's, so the files can be joined
            t["id"] = f"{split}-{i}"
            t.update({k: v for k, v in opts.fields.items() if k not in t})
    check_split(train, heldout, held, held_combos, gen.schemas)
    summary = {
        "tools": sorted(gen.tools), "attempts": gen.stats["attempts"]["*"],
        "succeeded_calls": dict(gen.stats["ok"]), "failed_attempts": dict(gen.stats["failed"]),
        "replay_failed": dict(gen.stats["replay_failed"]), "answers_stable": stable_count, "kept_attempts": len(kept),
        "duplicates_dropped": duplicates,
        "tools_never_succeeded": sorted(set(gen.tools) - set(gen.stats["ok"])),
        "listing_results": {k: v for k, v in gen.stats["lists"].items() if v},
        "avoided": {"values": len(fixed[0]), "combos": len(fixed[1])},
        "errors": {k: dict(v.most_common(3)) for k, v in gen.errors.items()},
        "answer_fields": {k: ".".join(v) for k, v in fields.items()},
        "heldout_values": len(held), "heldout_combos": [list(c) for c in held_combos],
        "train": len(train), "heldout": len(heldout), "kinds": {
            "train": dict(Counter(t["kind"] for t in train)), "heldout": dict(Counter(t["kind"] for t in heldout))},
        "paraphrased": gen.stats["paraphrase"]["used"], "paraphrase_rejected": gen.stats["paraphrase"]["rejected"],
        "paraphrase_repeats": gen.stats["paraphrase"]["repeated"],
    }
    if len(train) < opts.n_train or len(heldout) < opts.n_heldout:
        raise GenerationError(f"only {len(train)} training and {len(heldout)} held-out tasks (asked {opts.n_train} and "
                              f"{opts.n_heldout}) after {summary['attempts']} attempts; raise --max-attempts, lower "
                              f"--heldout-share or add --hint values. " + _error_summary(gen))
    return {"train": train, "heldout": heldout, "summary": summary}


def _pick(tasks: list[dict[str, Any]], n: int, none_share: float, chain_share: float, seed: int) -> list[dict[str, Any]]:
    """`n` tasks: the no-tool share, the two-call share of the tool tasks, and within each the kinds (tools, tool
    pairs) spread evenly (round-robin)."""
    rng = random.Random(f"pick:{seed}")
    none = [t for t in tasks if t["kind"] == "none"]
    singles = [t for t in tasks if t["kind"] != "none" and len(t["expected_calls"]) == 1]
    chains = [t for t in tasks if len(t["expected_calls"]) > 1]
    n_none = min(len(none), round(n * none_share))
    n_chain = min(len(chains), round((n - n_none) * chain_share))
    n_single = min(len(singles), n - n_none - n_chain)
    n_chain = min(len(chains), n - n_none - n_single)

    def spread(group: list[dict[str, Any]], k: int) -> list[dict[str, Any]]:
        by_kind: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for t in group:
            by_kind[t["kind"]].append(t)
        out: list[dict[str, Any]] = []
        while len(out) < k and any(by_kind.values()):
            for kind in sorted(by_kind):
                if by_kind[kind] and len(out) < k:
                    out.append(by_kind[kind].pop(0))
        return out

    picked = spread(singles, n_single) + spread(chains, n_chain) + none[:n_none]
    rng.shuffle(picked)
    return picked


async def _replay_all(gen: Generator, kept: list[Attempt]) -> list[tuple[bool, bool]]:
    sem = asyncio.Semaphore(gen.opts.concurrency)

    async def one(a: Attempt) -> tuple[bool, bool]:
        async with sem:
            return await gen.replay(a)

    return list(await asyncio.gather(*(one(a) for a in kept)))


def stated_values(task: dict[str, Any]) -> list[str]:
    """The values a prompt states, as written in it (JSON): every argument not referred to, or the no-tool text."""
    if not task["expected_calls"]:
        return [T.show(task["answer"])]
    return [T.show(v[0]) for c in task["expected_calls"] for v in c["arguments"].values() if T.show(v[0]) in task["prompt"]]


async def _paraphrase_all(tasks: list[dict[str, Any]], fn: Callable[[str], Any],
                          stats: dict[str, Counter[str]], earlier: set[str] | None = None,
                          fields: dict[str, Any] | None = None) -> None:
    """Reword each prompt with `fn`; a rewording is used only if every stated value is still written exactly and it
    does not make the task another one's repeat (two templates reworded alike, or a task of `earlier`, the
    `task_key`s of an extended set; `fields` as in `distinct`): those keep their template prompt and are counted as
    `repeated`."""
    def key(t: dict[str, Any]) -> str:
        return task_key({**(fields or {}), **t})

    seen = set(earlier or ()) | {key(t) for t in tasks}
    for t in tasks:
        try:
            new = await fn(t["prompt"])
        except Exception:  # noqa: BLE001 - an endpoint failure keeps the template prompt
            new = None
        if not (isinstance(new, str) and new.strip() and all(v in new for v in stated_values(t))):
            stats["paraphrase"]["rejected"] += 1
            continue
        reworded = key({**t, "prompt": new.strip()})
        if reworded != key(t) and reworded in seen:
            stats["paraphrase"]["repeated"] += 1
            continue
        seen.discard(key(t))
        seen.add(reworded)
        t["template_prompt"], t["prompt"] = t["prompt"], new.strip()
        stats["paraphrase"]["used"] += 1


def _error_summary(gen: Generator) -> str:
    parts = []
    for tool in sorted(gen.tools):
        errs = gen.errors.get(tool)
        if errs and not gen.stats["ok"][tool]:
            parts.append(f"{tool}: {errs.most_common(1)[0][0]!r}")
    return ("Tools that never succeeded and their most common error: " + "; ".join(parts)) if parts else ""


def openai_paraphraser(model: str, base_url: str, api_key: str | None = None, temperature: float = 0.7,
                       timeout: float = 60.0) -> Callable[[str], Any]:
    """An async `fn(prompt) -> str` asking an OpenAI-compatible chat endpoint to reword a task prompt, keeping every
    quoted value and number exactly."""
    import httpx

    url = base_url.rstrip("/") + "/chat/completions"
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    instruction = ("Rewrite the user's request in different words, as a person would ask it. Keep every quoted value "
                   "and every number exactly as written, quotes included. Reply with the rewritten request only.")

    async def fn(prompt: str) -> str | None:
        async with httpx.AsyncClient(timeout=timeout) as client:
            r = await client.post(url, headers=headers, json={
                "model": model, "temperature": temperature, "max_tokens": 256,
                "messages": [{"role": "system", "content": instruction}, {"role": "user", "content": prompt}]})
            r.raise_for_status()
            return r.json()["choices"][0]["message"]["content"]

    return fn


__all__ = ["sandbox_dirs", "sandbox_relative", "ANSWER_MAX_CHARS", "DEFAULT_ERROR_PATTERNS", "GenOptions", "GenerationError", "Generator", "answer_fields", "assign_split",
           "check_split", "free_values", "generate", "openai_paraphraser", "pick_answer", "stated_values", "task_values"]
