"""Wiki search: answer questions about a synthetic encyclopedia by searching and reading it through MCP tools.

Server: `mcp-server-wiki` (tools `search`, `open_page`, `read_section`, `find_in_page`); the env adds the
final-answer tool `answer(text)`. A model may instead end with a message containing `<answer>...</answer>`.

Dataset: questions generated from the bundled world's fact table (`mcp_server_wiki.world`): hops cycle 1, 2, 3
(easy / medium / hard); `seed=0` gives the bundled question set, other seeds other questions on the same corpus.
`questions=PATH` loads a user JSONL question set instead (`question`, `answer`, optional `aliases`, `id`,
`difficulty`), typically with `corpus=PATH` naming the user's corpus.

Rewards: `exact_match` (weight 1) and `f1` (token F1, weight `f1_weight`, default 0 = metric) against the answer
and its aliases, SQuAD-normalised; `turn_cost` (-turns, weight `turn_penalty`, default 0 = metric).
Metrics: `grounded` (the submitted answer occurs in a page the agent read in this rollout via open_page,
read_section or find_in_page — search snippets do not count), `answered`, `pages_read`; tool-call accuracy comes
from the framework.

Scripted players: `reference` follows the question's fact chain (search the subject, open its page, read the
section holding the fact, pull the object out of the returned text with the generator's sentence templates, repeat)
and answers only with text it read; `random` searches random words, opens random results and answers with a
random title it saw.
"""

from __future__ import annotations

import json
import random
import re
import string
from collections import Counter
from pathlib import Path
from typing import Annotated, Any, Literal

from mcp_server_wiki.world import extract_fact, generate_questions, generate_world, normalize_world_opts
from pydantic import Field
from typing_extensions import TypedDict

from toolgym import AssistantTurn, Rubric, ScriptedPolicy, ServerSpec, StatefulToolEnv, env_tool, stop
from toolgym.policies.scripted import call, rollout_rng

SYSTEM_PROMPT = (
    "You answer questions about an encyclopedia that you can only access through tools. Use search to find pages, "
    "open_page to see a page's sections, read_section to read one, find_in_page to look for words in a page. "
    "Facts are only in the encyclopedia: do not guess from memory. Questions may need several pages (follow one "
    "fact to the next page). When you know the answer, call answer(text) with just the answer (a name or a year), "
    "or reply with <answer>...</answer>."
)
READ_TOOLS = ("open_page", "read_section", "find_in_page")
_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.S | re.I)
_RESULT_LINE = re.compile(r"^\d+\. (.+?) \(section: .*\)$", re.M)


# ---------------------------------------------------------------- answer scoring (SQuAD normalisation)
def normalize_answer(s: str) -> str:
    s = s.casefold()
    s = "".join(" " if ch in string.punctuation else ch for ch in s)
    s = re.sub(r"\b(a|an|the)\b", " ", s)
    return " ".join(s.split())


def token_f1(pred: str, gold: str) -> float:
    p, g = normalize_answer(pred).split(), normalize_answer(gold).split()
    common = sum((Counter(p) & Counter(g)).values())
    if not p or not g or common == 0:
        return float(p == g)
    prec, rec = common / len(p), common / len(g)
    return 2 * prec * rec / (prec + rec)


def gold_answers(task: dict[str, Any]) -> list[str]:
    return [str(a) for a in [task["answer"], *task.get("aliases", [])] if str(a).strip()]


def final_answer(state: dict[str, Any], messages: list[dict[str, Any]]) -> str | None:
    """The answer given through the answer tool, else the last <answer> tag of the last assistant message."""
    if state.get("answer") is not None:
        return str(state["answer"])
    for m in reversed(messages):
        if m.get("role") == "assistant":
            found = _ANSWER_TAG.findall(m.get("content") or "")
            return found[-1].strip() if found else None
    return None


def exact_match(state, task, messages) -> float:  # type: ignore[no-untyped-def]
    """1 if the normalised answer equals the normalised gold answer or an alias."""
    ans = final_answer(state, messages)
    return float(ans is not None and any(normalize_answer(ans) == normalize_answer(g) for g in gold_answers(task)))


def f1(state, task, messages) -> float:  # type: ignore[no-untyped-def]
    """Best token F1 of the answer against the gold answer and aliases."""
    ans = final_answer(state, messages)
    return max((token_f1(ans, g) for g in gold_answers(task)), default=0.0) if ans is not None else 0.0


def read_text(calls) -> str:  # type: ignore[no-untyped-def]
    """Everything the agent read in this rollout (successful open_page / read_section / find_in_page results)."""
    return "\n".join(c.result for c in calls if c.name in READ_TOOLS and c.exec_ok)


def grounded(state, messages, calls) -> float:  # type: ignore[no-untyped-def]
    """1 if the submitted answer occurs (normalised, as whole words) in a page the agent read in this rollout."""
    ans = final_answer(state, messages)
    if not ans or not normalize_answer(ans):
        return 0.0
    return float(f" {normalize_answer(ans)} " in f" {normalize_answer(read_text(calls))} ")


def answered(state, messages) -> float:  # type: ignore[no-untyped-def]
    return float(final_answer(state, messages) is not None)


def pages_read(calls) -> float:  # type: ignore[no-untyped-def]
    return float(len({str((c.arguments or {}).get("title", "")).casefold() for c in calls
                      if c.name in READ_TOOLS and c.exec_ok}))


def turn_cost(turns) -> float:  # type: ignore[no-untyped-def]
    """-(number of assistant turns); weighted by the env's `turn_penalty` (0 = reported only)."""
    return -float(len(turns))


class WikiAnswer(TypedDict):
    """What a served wiki question returns beside the generic fields."""

    answer: Annotated[str, Field(description="The agent's answer as it submitted it (empty: it gave none).")]


# ---------------------------------------------------------------- the environment
class WikiEnv(StatefulToolEnv):
    name = "wiki"
    session_scope = "shared"  # the server is stateless: one session serves every rollout
    system_prompt = SYSTEM_PROMPT
    default_policy = "scripted:reference"
    max_turns = 12

    def __init__(
        self,
        corpus: str = "world",
        questions: str | None = None,
        index_dir: str | None = None,
        transport: Literal["stdio", "http", "inprocess"] = "stdio",
        f1_weight: Annotated[float, Field(ge=0)] = 0.0,
        turn_penalty: Annotated[float, Field(ge=0)] = 0.0,
        **options: Any,
    ) -> None:
        """
        Args:
            corpus: The encyclopedia: `world` (bundled), a world spec, or a path to a user corpus.
            questions: A JSONL question set to use instead of the generated questions.
            index_dir: Where the search index is cached (default: the user cache folder).
            transport: How the wiki server runs: a stdio subprocess, streamable HTTP or in this process.
            f1_weight: Weight of the token-F1 reward (0: a metric only).
            turn_penalty: Weight of the per-turn cost (0: a metric only).
        """
        self.corpus, self.questions_path, self.index_dir = corpus, questions, index_dir
        self.f1_weight, self.turn_penalty = float(f1_weight), float(turn_penalty)
        server = options.pop("server", None) or self._server_for(transport)
        super().__init__(server=server, **options)

    def _server_for(self, transport: str) -> ServerSpec:
        from mcp_server_wiki.index import ensure_index

        path = ensure_index(self.corpus, self.index_dir)  # build once here, so servers start on a warm cache
        if transport == "stdio":
            return ServerSpec.stdio(["mcp-server-wiki", "--index", str(path)])
        if transport == "inprocess":
            from mcp_server_wiki import build_server

            return ServerSpec.inprocess(build_server(index_path=path))
        if transport == "http":
            from toolgym.sandbox import free_port

            port = free_port()
            return ServerSpec.http(f"http://127.0.0.1:{port}/mcp", launch=[
                "mcp-server-wiki", "--index", str(path), "--transport", "streamable-http", "--port", str(port)])
        raise ValueError(f"unknown transport {transport!r}: use stdio, http or inprocess")

    # ------------------------------------------------------------ data
    def world_opts(self) -> dict[str, int]:
        from mcp_server_wiki.corpus import parse_world_spec

        opts = parse_world_spec(self.corpus)
        if opts is None:
            raise ValueError(f"corpus {self.corpus!r} is not a generated world: pass questions=PATH (JSONL)")
        return normalize_world_opts(**opts)

    def build_dataset(self, n: int | None = None, seed: int = 0) -> list[dict[str, Any]]:
        if self.questions_path:
            rows = load_questions(self.questions_path)
            if seed:
                random.Random(seed).shuffle(rows)
            return rows[:n] if n is not None else rows
        world = generate_world(**self.world_opts())
        qs = generate_questions(world, 300 if n is None else n, seed=world.seed + seed)
        return [_row(q) for q in qs]

    # ------------------------------------------------------------ the final answer
    @env_tool
    async def answer(self, state: dict[str, Any],
                     text: Annotated[str, Field(description="The answer: just the name or the year.")]) -> str:
        """Submit your final answer (just the name or year); this ends the episode."""
        state["answer"] = text
        return f"Answer recorded: {text}"

    @stop
    def answered(self, state: dict[str, Any]) -> bool:
        return state.get("answer") is not None

    # ------------------------------------------------------------ serving (`toolgym serve`)
    serve_defaults = {"transport": "inprocess"}  # a served request starts no server process

    def serve_result(self, trajectory: Any) -> WikiAnswer:
        """The answer the agent submitted (through `answer`, or an `<answer>` tag)."""
        return {"answer": final_answer(trajectory.info, trajectory.messages) or ""}

    # ------------------------------------------------------------ rewards
    def build_rubric(self) -> Rubric:
        return Rubric([
            (exact_match, 1.0),
            (f1, self.f1_weight),
            (turn_cost, self.turn_penalty),
            (grounded, 0.0),
            (answered, 0.0),
            (pages_read, 0.0),
        ])

    def scripted_players(self) -> dict[str, Any]:
        return {  # options: random's seed (`toolgym.policies.scripted`)
            "reference": lambda env, /: ScriptedPolicy(reference_player(), "scripted:reference", answer_key=True),
            "random": lambda env, /, seed=None: ScriptedPolicy(random_player(seed), "scripted:random"),
        }


def _row(q: dict[str, Any]) -> dict[str, Any]:
    return {**q, "prompt": q["question"]}


def load_questions(path: str | Path) -> list[dict[str, Any]]:
    """User questions from JSONL: `question` (or `prompt`), `answer`, optional `aliases`, `id`, `difficulty`."""
    rows = []
    with open(path, encoding="utf-8") as f:
        for i, line in enumerate(f):
            if not line.strip():
                continue
            rec = json.loads(line)
            q = rec.get("question") or rec.get("prompt")
            if not q or "answer" not in rec:
                raise ValueError(f"{path}:{i + 1}: a question row needs 'question' and 'answer'")
            aliases = rec.get("aliases") or []
            if isinstance(aliases, str):
                aliases = [aliases]
            rows.append(_row({**rec, "id": rec.get("id", f"q{i}"), "question": q, "answer": str(rec["answer"]),
                              "aliases": [str(a) for a in aliases], "difficulty": rec.get("difficulty", "unknown")}))
    return rows


# ---------------------------------------------------------------- scripted players
def _last_tool_text(messages: list[dict[str, Any]]) -> str:
    for m in reversed(messages):
        if m.get("role") == "tool":
            return str(m.get("content") or "")
    return ""


def reference_player():  # type: ignore[no-untyped-def]
    """Follow the task's fact chain through the tools; every name it uses after the first comes from tool output.

    Per hop: search(subject) -> check the subject is a result -> open_page -> read_section(the fact's section) ->
    extract the object from the section text. The last object is the answer. If anything is missing from a tool
    result it answers "unknown" (and scores 0), so a broken corpus or server shows up as a failed question.
    """

    def act(messages: list[dict[str, Any]], mem: dict[str, Any]) -> AssistantTurn:
        chain = mem["task"].get("chain") or []
        if not chain:
            return AssistantTurn(tool_calls=[call("answer", text="unknown")])
        if "hop" not in mem:
            mem.update(hop=0, subject=chain[0]["subject"], phase="search")
        hop = chain[mem["hop"]]
        text = _last_tool_text(messages)
        phase = mem["phase"]
        if phase == "search":
            mem["phase"] = "check"
            return AssistantTurn(tool_calls=[call("search", query=mem["subject"], k=5)])
        if phase == "check":
            titles = _RESULT_LINE.findall(text)
            if mem["subject"] not in titles:
                return AssistantTurn(content="The page was not found.", tool_calls=[call("answer", text="unknown")])
            mem["phase"] = "open"
            return AssistantTurn(tool_calls=[call("open_page", title=mem["subject"])])
        if phase == "open":
            mem["phase"] = "read"
            return AssistantTurn(tool_calls=[call("read_section", title=mem["subject"], section=hop["section"])])
        found = extract_fact(hop["kind"], hop["relation"], mem["subject"], text)
        if found is None:
            return AssistantTurn(content="The fact is not on the page.", tool_calls=[call("answer", text="unknown")])
        if mem["hop"] == len(chain) - 1:
            return AssistantTurn(content=f"The answer is {found}.", tool_calls=[call("answer", text=found)])
        mem.update(hop=mem["hop"] + 1, subject=found, phase="search")
        return act(messages, mem)

    return act


_WORDS = ["river", "city", "founded", "mayor", "university", "born", "society", "treaty", "capital", "married",
          "museum", "festival", "company", "student", "history"]


def random_player(seed: int | None = None):  # type: ignore[no-untyped-def]
    """Random tool use: 1-4 random searches / page opens, then a random title seen so far (or a random year)."""

    def act(messages: list[dict[str, Any]], mem: dict[str, Any]) -> AssistantTurn:
        rng = rollout_rng(mem, f"wiki-random:{seed}")
        seen = mem.setdefault("seen", [])
        seen.extend(t for t in _RESULT_LINE.findall(_last_tool_text(messages)) if t not in seen)
        steps = mem.setdefault("steps", rng.randint(1, 4))
        mem["n"] = mem.get("n", 0) + 1
        if mem["n"] > steps:
            guess = rng.choice(seen) if seen and rng.random() < 0.8 else str(rng.randint(1700, 1990))
            return AssistantTurn(tool_calls=[call("answer", text=guess)])
        if seen and rng.random() < 0.5:
            return AssistantTurn(tool_calls=[call("open_page", title=rng.choice(seen))])
        return AssistantTurn(tool_calls=[call("search", query=" ".join(rng.sample(_WORDS, 2)))])

    return act


def load_environment(**kwargs: Any) -> WikiEnv:
    return WikiEnv(**kwargs)
