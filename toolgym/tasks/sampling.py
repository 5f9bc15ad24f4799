"""Schema-valid argument sampling for any tool: a JSON schema in, arguments out, drawn from value pools.

`ArgSampler.sample(schema)` walks a tool's `inputSchema`: `enum`/`const`, `anyOf`/`oneOf`/`type` lists (one branch),
`$ref` into `$defs`/`definitions`, strings (`format` date / date-time / time / email / uri / uuid, `pattern`,
`minLength`/`maxLength`), numbers and integers (`minimum`/`maximum`, exclusive bounds, `multipleOf`), booleans,
arrays (`items`, `minItems`/`maxItems`, `uniqueItems`) and objects (every required property, an optional one with
probability `optional_prob`). Every result is checked with `toolgym.accuracy.validate_args` (the check the episode
makes) and re-drawn when it fails, so what comes out is schema-valid by construction.

Where string values come from (`Pools`):
- the schema's own `examples`, `default` and values quoted in a description (`(e.g., 'America/New_York')`);
- values the server returned: `harvest(result_text)` takes the entries of a listing (lines without `[FILE] `-style
  tags or bullets), JSON string leaves and identifier-like tokens, and `children(parent, entry)` joins an earlier
  argument with an entry of its result (`notes` + `todo.txt` -> `notes/todo.txt`) -- so one tool's output feeds
  another tool's arguments; a path-like parameter takes such a value only when it reads as a path or a name
  (`path_like`: no timestamps, clock times or bare numbers);
- a built-in vocabulary (`Vocabulary`): words, phrases, file names, paths, ids, e-mail addresses, URLs, times and
  dates shaped by the parameter's name and description (`path`, `file`, `content`, `query`, `id`, `url`, `time` ...).
A `number` whose name or description says it counts (`first N lines`, `limit`, `max_results`) is drawn whole.

Nothing here knows a particular server; what succeeds is decided by executing the call (`toolgym.tasks.generate`).
"""

from __future__ import annotations

import json
import random
import re
import string
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from toolgym.accuracy import validate_args

# a compact built-in vocabulary: short concrete words that read naturally as names, contents and queries
WORDS = (
    "apple amber anchor arrow atlas autumn badge bamboo basket beacon berry bird blossom bottle breeze brick bridge "
    "bronze brook bubble cabin cactus camera candle canyon carbon castle cedar cherry cinema circle citrus cliff cloud "
    "clover cobalt comet copper coral cotton crane crystal dawn delta desert diamond dolphin dragon dune eagle ember "
    "engine falcon feather fern field flame flute forest fossil fountain garden garnet glacier globe granite grape "
    "harbor harvest hazel helmet heron hollow honey horizon island ivory jacket jade jasmine jungle kettle kite lagoon "
    "lantern lemon lily linen lotus magnet maple marble meadow melon mint mirror moss mountain needle nickel noodle "
    "oak ocean olive onion orbit orchid otter paddle palm panda paper parrot pearl pebble pepper piano pine planet "
    "plum pocket pond poppy prism pumpkin quartz quill rabbit radar rain raven reef ribbon river robin rocket rose "
    "saddle saffron salmon sand scarf shadow shell silver sky slate snow sparrow spice spruce star stone storm sugar "
    "summit sun swan tiger timber topaz tower trail tulip tunnel valley velvet violet walnut wave willow window "
    "winter wolf yarn zebra zephyr"
).split()
VERBS = ("add check clean copy draw fix keep list make mark move note open pack paint plan read send sort store "
         "tidy track wash write").split()
EXTENSIONS = ("txt", "md", "json", "csv", "log", "py", "yaml")
TLDS = ("com", "org", "net", "io")


def _syllable_word(rng: random.Random, lo: int = 2, hi: int = 3) -> str:
    cons, vow = "bcdfghjklmnprstvwz", "aeiou"
    return "".join(rng.choice(cons) + rng.choice(vow) + (rng.choice("nrslt") if rng.random() < 0.3 else "")
                   for _ in range(rng.randint(lo, hi)))


@dataclass
class Vocabulary:
    """The built-in source of free values. `words`: the word list; `novel`: the share of values made of invented
    (syllable) words instead of listed ones, so values are not limited to a closed set."""

    words: tuple[str, ...] = tuple(WORDS)
    novel: float = 0.3

    def word(self, rng: random.Random) -> str:
        return _syllable_word(rng) if rng.random() < self.novel else rng.choice(self.words)

    def words_(self, rng: random.Random, lo: int, hi: int) -> list[str]:
        return [self.word(rng) for _ in range(rng.randint(lo, hi))]

    def name(self, rng: random.Random) -> str:
        w = self.words_(rng, 1, 2)
        sep = rng.choice(["-", "_", ""]) if len(w) > 1 else ""
        s = sep.join(w)
        return s + (str(rng.randint(0, 99)) if rng.random() < 0.3 else "")

    def filename(self, rng: random.Random) -> str:
        return f"{self.name(rng)}.{rng.choice(EXTENSIONS)}"

    def path(self, rng: random.Random) -> str:
        parts = [self.name(rng) for _ in range(rng.randint(0, 2))]
        return "/".join([*parts, self.filename(rng)])

    def phrase(self, rng: random.Random, lo: int = 2, hi: int = 6) -> str:
        w = self.words_(rng, lo, hi)
        if rng.random() < 0.3:
            w.insert(0, rng.choice(VERBS))
        s = " ".join(w)
        return s[0].upper() + s[1:] if rng.random() < 0.5 else s

    def ident(self, rng: random.Random) -> str:
        alphabet = string.ascii_lowercase + string.digits
        if rng.random() < 0.5:
            return "".join(rng.choice(alphabet) for _ in range(rng.randint(4, 8)))
        return f"{self.word(rng)}-{rng.randint(1, 999)}"

    def email(self, rng: random.Random) -> str:
        return f"{self.word(rng)}@{self.word(rng)}.{rng.choice(TLDS)}"

    def url(self, rng: random.Random) -> str:
        return f"https://{self.word(rng)}.{rng.choice(TLDS)}/{self.name(rng)}"

    def time(self, rng: random.Random) -> str:
        return f"{rng.randrange(24):02d}:{rng.choice([0, 5, 10, 15, 20, 30, 40, 45, 50]):02d}"

    def date(self, rng: random.Random) -> str:
        return f"{rng.randint(1990, 2035)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"

    def datetime(self, rng: random.Random) -> str:
        return f"{self.date(rng)}T{self.time(rng)}:00"

    def uuid(self, rng: random.Random) -> str:
        h = "".join(rng.choice("0123456789abcdef") for _ in range(32))
        return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-a{h[17:20]}-{h[20:]}"

    def for_param(self, rng: random.Random, name: str, description: str = "") -> str:
        """A value shaped by the parameter's name (and description): paths for `path`, phrases for `content` ..."""
        key = f"{name} {description}".lower()
        n = name.lower()
        if re.search(r"hh:mm|24-hour|\btime\b", key) and "zone" not in n:
            return self.time(rng)
        if re.search(r"yyyy-mm-dd|\bdate\b", key):
            return self.date(rng)
        if "email" in n or "e-mail" in key:
            return self.email(rng)
        if "url" in n or "uri" in n or "link" in n:
            return self.url(rng)
        if "uuid" in n:
            return self.uuid(rng)
        if re.search(_PATH_PARAM, n):
            if rng.random() < 0.1:
                return "."  # the current folder: a listing tool's first success, whose entries seed the rest
            return self.path(rng) if "dir" not in n and "folder" not in n else self.name(rng)
        if re.search(_FREE_TEXT, n):
            return self.phrase(rng)
        if re.search(r"(^|_)id$|_ids?$|^id", n) or n.endswith("id"):
            return self.ident(rng)
        if rng.random() < 0.6:
            return self.name(rng)
        return self.phrase(rng, 1, 3)


_FREE_TEXT = r"content|text|body|message|note|comment|description|query|search|pattern|prompt|observ"
_QUOTED = re.compile(r"""['"`]([^'"`\n]{1,60})['"`]""")
_KEY = re.compile(r"^[A-Za-z][\w .-]{0,29}:\s")
_LIST_TAG = re.compile(r"^\s*(?:\[[^\]\n]{1,20}\]|[-*\u2022]|\d{1,3}[.)])\s+")
_TAG = re.compile(r"^\s*(?:\[[^\]\n]{1,20}\]|[-*\u2022]|\d{1,3}[.)]|[A-Za-z][\w .-]{0,29}:)\s+")
_TOKEN = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.@/:-]{1,79}")


def description_examples(description: str | None) -> list[str]:
    """Values quoted in a parameter's description (`e.g. 'America/New_York'`): candidates for that parameter."""
    return [m.group(1).strip() for m in _QUOTED.finditer(description or "") if m.group(1).strip()]


def _json_values(data: Any) -> list[str]:
    """String leaves of a JSON value, and for a tree (objects whose list fields hold objects) each node's path from
    the root by its first string field (`{"name": "notes", "children": [{"name": "todo.txt"}]}` gives `notes` and
    `notes/todo.txt`)."""
    out: list[str] = []

    def label(node: dict[str, Any]) -> str | None:
        return next((v for v in node.values() if isinstance(v, str)), None)

    def walk(node: Any, prefix: str | None) -> None:
        if isinstance(node, list):
            for x in node:
                walk(x, prefix)
        elif isinstance(node, dict):
            name = label(node)
            here = f"{prefix}/{name}" if prefix and name else name
            if prefix and here:
                out.append(here)
            for v in node.values():
                if isinstance(v, list) and any(isinstance(x, dict) for x in v):
                    walk(v, here)
                elif isinstance(v, dict):
                    walk(v, None)
                elif isinstance(v, str):
                    out.append(v)
                elif isinstance(v, list):
                    out.extend(x for x in v if isinstance(x, str))
        elif isinstance(node, str):
            out.append(node)

    walk(data, None)
    return out


def harvest(text: str, limit: int = 200, tokens: bool = False) -> list[str]:
    """Whole values a tool result offers, in order: the entries of a list-like text (`entries`), or a JSON result's
    string leaves and tree paths; with `tokens`, the identifier-like words of the text instead. A one-line
    acknowledgement ("Successfully wrote to x") offers no whole value. Deduplicated, at most `limit`, each 1-100
    characters."""
    out: list[str] = []
    seen: set[str] = set()

    def add(v: Any) -> None:
        if isinstance(v, str):
            v = v.strip()
            if 0 < len(v) <= 100 and v not in seen and len(out) < limit:
                seen.add(v)
                out.append(v)

    if tokens:  # identifier-like words, and the values of `key: value` lines
        for ln in text.splitlines():
            if _KEY.match(ln.strip()):
                add(ln.strip().split(":", 1)[1])
        for tok in _TOKEN.findall(text):
            add(tok.rstrip(".:,;"))
        return out
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, ValueError):
        data = None
    if isinstance(data, dict | list):
        for v in _json_values(data):
            add(v)
        return out
    for e in entries(text):
        add(e)
    return out


def entries(text: str) -> list[str]:
    """The entries of a list-like result, in order (for "the first entry of that result" references): the lines of a
    text result (a leading tag such as `[FILE] `, a bullet or a number removed) when it has two or more lines or its
    line carries such a tag, or the scalar items of a top-level JSON array."""
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, ValueError):
        data = None
    if isinstance(data, list):
        return [str(v) for v in data if isinstance(v, str | int | float) and not isinstance(v, bool)]
    if data is not None:
        return []
    raw = [ln.strip() for ln in text.splitlines() if ln.strip()]
    lines = [_TAG.sub("", ln, count=1) for ln in raw]
    tagged = any(_LIST_TAG.match(ln) for ln in raw)
    if all(_KEY.match(ln) for ln in raw):  # `size: 4096` lines: fields of one thing, not a list of things
        return []
    return lines if (len(lines) >= 2 or tagged) and all(0 < len(ln) <= 100 for ln in lines) else []


@dataclass
class Pools:
    """Value pools shared across a generation run: `server` (whole values from successful results: listing entries,
    JSON strings, entries joined to the argument they were listed under), `tokens` (identifier-like words of text
    results), `by_param` (values that made a successful call, per tool and parameter), `hints` (user-given values per
    parameter name)."""

    server: list[str] = field(default_factory=list)
    tokens: list[str] = field(default_factory=list)
    by_param: dict[tuple[str, str], list[str]] = field(default_factory=dict)
    hints: dict[str, list[Any]] = field(default_factory=dict)
    # (tool, parameter) -> source -> [successes, tries]: which source of strings works for a parameter; an optional
    # parameter's presence is the source "present"
    sources: dict[tuple[str, str], dict[str, list[int]]] = field(default_factory=dict)
    _seen: set[Any] = field(default_factory=set)

    def credit(self, tool: str, used: dict[str, str], ok: bool) -> None:
        """Count a call whose string parameters came from `used` (parameter -> source) as a success or not."""
        for param, source in used.items():
            st = self.sources.setdefault((tool, param), {}).setdefault(source, [0, 0])
            st[0] += int(ok)
            st[1] += 1

    def rate(self, tool: str, param: str, source: str) -> float:
        """The Beta(1, 1) mean success rate of `source` for a parameter (0.5 before any try)."""
        ok, tries = self.sources.get((tool, param), {}).get(source, [0, 0])
        return (ok + 1) / (tries + 2)

    def add_server(self, values: Iterable[str], cap: int = 5000, pool: str = "server") -> None:
        target = self.tokens if pool == "tokens" else self.server
        for v in values:
            if (pool, v) not in self._seen and len(target) < cap:
                self._seen.add((pool, v))  # type: ignore[arg-type]
                target.append(v)

    def add_success(self, tool: str, args: dict[str, Any]) -> None:
        for k, v in args.items():
            if isinstance(v, str):
                lst = self.by_param.setdefault((tool, k), [])
                if v not in lst and len(lst) < 2000:
                    lst.append(v)


def children(parent: str, entry: str) -> str | None:
    """`parent/entry` when `entry` reads as a child of a path-like `parent` (an earlier argument), else None."""
    if not parent or not entry or "/" in entry or " " in entry or len(parent) + len(entry) > 200:
        return None
    if parent in (".", "./"):
        return entry
    return parent.rstrip("/") + "/" + entry


class SchemaError(ValueError):
    """A schema the sampler cannot draw a valid value for (an unresolvable `$ref`, an impossible range ...)."""


class ArgSampler:
    """Draws schema-valid arguments (see the module docstring). `rng`: the run's random source; `pools`: shared
    value pools; `vocab`: the built-in values; `server_prob`/`example_prob`: how often a string comes from the server's
    values / the schema's examples when there are any."""

    def __init__(self, rng: random.Random, pools: Pools | None = None, vocab: Vocabulary | None = None,
                 optional_prob: float = 0.3, server_prob: float = 0.45, example_prob: float = 0.5,
                 max_tries: int = 20, tool: str = "") -> None:
        self.rng, self.pools, self.vocab = rng, pools or Pools(), vocab or Vocabulary()
        self.optional_prob, self.server_prob, self.example_prob = optional_prob, server_prob, example_prob
        self.max_tries = max_tries
        self.tool = tool
        self.used: dict[str, str] = {}  # top-level string parameter -> the source its value came from

    # ---------------------------------------------------------------------------------------------- entry point
    def sample(self, schema: dict[str, Any], context: dict[str, Any] | None = None) -> dict[str, Any]:
        """Arguments for a tool whose `inputSchema` is `schema`, valid against it; `context` maps a parameter name to
        preferred values (e.g. children of an earlier call's result). Raises `SchemaError` after `max_tries`."""
        last = None
        for _ in range(self.max_tries):
            self.used = {}
            args = self._object(schema, schema, "", context or {}, top=True)
            if not isinstance(args, dict):
                args = {}
            last = validate_args(schema, args)
            if last is None:
                return args
        raise SchemaError(f"no valid arguments after {self.max_tries} tries: {last}")

    # ---------------------------------------------------------------------------------------------- walkers
    def _resolve(self, node: dict[str, Any], root: dict[str, Any]) -> dict[str, Any]:
        seen = 0
        while isinstance(node, dict) and "$ref" in node:
            ref = node["$ref"]
            if not isinstance(ref, str) or not ref.startswith("#/"):
                raise SchemaError(f"unsupported $ref {ref!r}")
            target: Any = root
            for part in ref[2:].split("/"):
                target = target.get(part.replace("~1", "/").replace("~0", "~")) if isinstance(target, dict) else None
            if not isinstance(target, dict):
                raise SchemaError(f"unresolvable $ref {ref!r}")
            node = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
            seen += 1
            if seen > 20:
                raise SchemaError("$ref cycle")
        return node

    def value(self, node: dict[str, Any], root: dict[str, Any], name: str = "",
              context: dict[str, Any] | None = None) -> Any:
        node = self._resolve(node, root)
        rng = self.rng
        if "const" in node:
            return node["const"]
        if isinstance(node.get("enum"), list) and node["enum"]:
            return rng.choice(node["enum"])
        for key in ("anyOf", "oneOf"):
            if isinstance(node.get(key), list) and node[key]:
                branches = [b for b in node[key] if isinstance(b, dict) and self._resolve(b, root).get("type") != "null"]
                branch = rng.choice(branches or node[key])
                merged = {**{k: v for k, v in node.items() if k != key}, **self._resolve(branch, root)}
                return self.value(merged, root, name, context)
        if isinstance(node.get("allOf"), list):
            merged = {k: v for k, v in node.items() if k != "allOf"}
            for part in node["allOf"]:
                merged.update(self._resolve(part, root))
            return self.value(merged, root, name, context)
        t = node.get("type")
        if isinstance(t, list):
            t = rng.choice([x for x in t if x != "null"] or t)
        if t is None:
            t = "object" if "properties" in node else "array" if "items" in node else "string"
        hinted = (self.pools.hints.get(name) or []) + ((context or {}).get(name) or [])
        if hinted and rng.random() < 0.8:
            self.used[name] = "hint"
            return rng.choice(hinted)
        if t == "string":
            return self._string(node, name)
        if t == "integer":
            return int(self._number(node, integer=True))
        if t == "number":  # a count (`first N lines`, `limit`, `max results`) is whole; other numbers may not be
            count = re.search(_COUNT, f"{name} {node.get('description') or ''}".lower()) is not None
            return self._number(node, integer=count or rng.random() < 0.7)
        if t == "boolean":
            return rng.random() < 0.5
        if t == "array":
            return self._array(node, root, name)
        if t == "object":
            return self._object(node, root, name, context or {})
        if t == "null":
            return None
        raise SchemaError(f"unsupported type {t!r}")

    def _object(self, node: dict[str, Any], root: dict[str, Any], name: str, context: dict[str, Any],
                top: bool = False) -> dict[str, Any]:
        node = self._resolve(node, root)
        props = node.get("properties") or {}
        required = set(node.get("required") or [])
        out: dict[str, Any] = {}
        for key, sub in props.items():
            # an optional parameter is included less often the more its presence went with failed calls
            p = self.optional_prob * (2 * self.pools.rate(self.tool, f"{key}?", "present") if top else 1.0)
            if key in required or self.rng.random() < min(self.optional_prob, p):
                out[key] = self.value(sub if isinstance(sub, dict) else {}, root, key, context if top else None)
                if top and key not in required:
                    self.used[f"{key}?"] = "present"
        if not props and isinstance(node.get("additionalProperties"), dict):
            for _ in range(self.rng.randint(1, 2)):
                out[self.vocab.name(self.rng)] = self.value(node["additionalProperties"], root, "value")
        return out

    def _array(self, node: dict[str, Any], root: dict[str, Any], name: str) -> list[Any]:
        lo = int(node.get("minItems", 1))
        hi = int(node.get("maxItems", max(lo, 3)))
        if hi < lo:
            raise SchemaError(f"{name}: maxItems < minItems")
        items = node.get("items") if isinstance(node.get("items"), dict) else {}
        n = self.rng.randint(lo, min(hi, lo + 3))
        out: list[Any] = []
        for _ in range(n * 4):
            if len(out) >= n:
                break
            v = self.value(items, root, _singular(name))
            if node.get("uniqueItems") and v in out:
                continue
            out.append(v)
        return out

    def _number(self, node: dict[str, Any], integer: bool) -> float | int:
        rng = self.rng
        lo = node.get("minimum", node.get("exclusiveMinimum"))
        hi = node.get("maximum", node.get("exclusiveMaximum"))
        if isinstance(node.get("exclusiveMinimum"), bool):  # draft 4
            lo = node.get("minimum")
        lo = 0 if lo is None else lo
        hi = (lo + 100 if lo >= 0 else lo + 200) if hi is None else hi
        if hi < lo:
            raise SchemaError(f"maximum {hi} < minimum {lo}")
        step = node.get("multipleOf")
        for i in range(60):
            if step or (integer and (i < 20 or node.get("type") == "integer")):
                a, b = int(-(-lo // 1)), int(hi // 1)
                if b < a:
                    if node.get("type") == "integer":
                        break
                    integer = False
                    continue
                v: float | int = rng.randint(a, min(b, a + 10_000))
                if step:
                    v = round(round(v / step) * step, 10)
                    v = int(v) if float(v).is_integer() else v
            else:
                v = round(rng.uniform(lo, min(hi, lo + 10_000)), rng.choice([1, 2, 3]))
            if validate_args({"type": "object", "properties": {"v": {k: node[k] for k in node if k in _NUM_KEYS}}},
                             {"v": v}) is None:
                return v
        raise SchemaError(f"no number in [{lo}, {hi}] (multipleOf {step})")

    def _string(self, node: dict[str, Any], name: str) -> str:
        rng, vocab = self.rng, self.vocab
        fmt = node.get("format")
        desc = str(node.get("description") or "")
        lo, hi = int(node.get("minLength", 0)), int(node.get("maxLength", 10_000))
        pattern = node.get("pattern")

        def ok(s: str) -> bool:
            if not isinstance(s, str) or not lo <= len(s) <= hi:
                return False
            try:
                return not pattern or re.search(pattern, s) is not None
            except re.error:
                return True

        if fmt in _FORMATS:
            v = _FORMATS[fmt](vocab, rng)
            if ok(v):
                return v
        examples = [e for e in [*(node.get("examples") or []), node.get("default"), *description_examples(desc)]
                    if isinstance(e, str) and ok(e)]
        mine = [v for v in self.pools.by_param.get((self.tool, name), []) if ok(v)]
        # a value the server returned goes into a path-like parameter only when it reads as a path or a name: a
        # listing's entries do, a metadata field's timestamp, time or permission bits (`755`) do not
        fits = path_like if re.search(_PATH_PARAM, name.lower()) and not fmt else (lambda v: True)
        served = mine if mine and rng.random() < 0.25 else mine + [v for v in self.pools.server if ok(v) and fits(v)]
        words = [v for v in self.pools.tokens if ok(v) and fits(v)]
        options: dict[str, list[str] | None] = {"vocab": None}
        if examples:
            options["examples"] = examples
        if served:
            options["server"] = served
        if words:
            options["tokens"] = words
        free_text = re.search(_FREE_TEXT, name.lower()) is not None  # contents and messages: made up, not looked up
        server = self.server_prob / 4 if free_text else self.server_prob
        prior = {"examples": self.example_prob, "server": server, "vocab": 1.0 - server, "tokens": 0.15 * server}
        # each source weighted by its prior times its success rate so far (a Beta(1, 1) mean): what works is drawn more
        weights = [prior[src] * self.pools.rate(self.tool, name, src) for src in options]
        src = rng.choices(list(options), weights)[0]
        self.used[name] = src
        if src != "vocab":
            return rng.choice(options[src] or [""])
        for _ in range(20):
            v = vocab.for_param(rng, name, desc)
            if ok(v):
                return v
        if examples:
            return rng.choice(examples)
        if not pattern and lo <= hi:
            # the name's shape cannot fit (a `url` of at most 8 characters): plain words, cut to the length allowed
            v = ""
            while len(v) < max(lo, 1):
                v += vocab.word(rng)
            return v[:hi]
        raise SchemaError(f"{name}: no string fits (pattern {pattern!r}, length {lo}..{hi})")


_PATH_PARAM = r"path|file|dest|source|src|target|dir|folder"
_PATH_VALUE = re.compile(r"^(?:[A-Za-z]:[\\/])?[\w.~\\/-]+(?: [\w.~\\/-]+){0,2}$")
_COUNT = (r"\b(?:count|limit|lines?|rows?|items?|results?|top|page|offset|index|size|depth|retries|first n|last n|"
          r"number of|how many|max|min)\b|^n$|^k$|(?:^|_)(?:n|num|max|min|top|head|tail|limit|count)(?:_|$)")


def path_like(value: str) -> bool:
    """Whether a value reads as a file path or a name (`notes/todo.txt`, `library`, `C:\\data\\x.csv`): word
    characters, dots, dashes, slashes, at most two inner spaces, at least one letter; not a timestamp, a clock time or
    a bare number."""
    return bool(_PATH_VALUE.match(value)) and any(c.isalpha() for c in value)


_NUM_KEYS = ("type", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf")
_FORMATS = {
    "date": Vocabulary.date, "date-time": Vocabulary.datetime, "time": lambda v, r: Vocabulary.time(v, r) + ":00",
    "email": Vocabulary.email, "uri": Vocabulary.url, "url": Vocabulary.url, "uuid": Vocabulary.uuid,
}


def _singular(name: str) -> str:
    return name[:-1] if name.endswith("s") and len(name) > 3 else name


__all__ = ["ArgSampler", "Pools", "SchemaError", "Vocabulary", "children", "description_examples", "entries",
           "harvest", "path_like"]
