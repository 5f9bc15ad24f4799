"""An environment from a config file alone: wrap any MCP server without writing Python.

    # env.toml
    name = "calculator"
    [server]
    command = ["mcp-server-calculator"]     # or: url = "http://127.0.0.1:8000/mcp" (+ launch = [...])
    scope = "shared"                          # "rollout": a fresh session (process) per rollout
    [env]
    system_prompt = "Use the tools. Give the final answer as <answer>...</answer>."
    max_turns = 6
    hidden_tools = []                         # server tools the model must not see
    report_by = ["kind"]                      # task fields eval breaks results down by (tables + breakdown.png)
    [env.state]                               # each rollout's state keys: {task field}, {rollout_dir}, {rollout_id}
    repo = "{rollout_dir}/repo"
    [env.hidden_args]                         # arguments hidden from the model, filled from a state key
    git_status = { repo_path = "repo" }       # (or a list of names: each filled from the state key of its name)
    [tasks]
    path = "tasks.jsonl"                      # rows: {"prompt": ..., "answer": ..., "expected_calls": [...]}
    [[rewards]]
    type = "answer"                           # final answer (inside <answer> tags, else the last message)
    field = "answer"                          # compared with task[field]
    mode = "numeric"                          # exact | contains | numeric | regex
    weight = 1.0
    [[rewards]]
    type = "call_match"                       # the calls equal task.expected_calls (BFCL AST rules)
    weight = 0.0

Reward types: `answer`, `call_match`, `call_similarity` (partial credit in [0, 1]: a near-copy of an argument
scores near 1, `toolgym.accuracy.call_similarity` -- a denser signal for RL), `called` (the model called `tool` successfully, optionally with `args`: those
arguments must match, BFCL rules, others are free),
`tool_result` (after the rollout, call `tool` with `args` — `{field}` placeholders filled from the task — and compare
its output with `task[field]`: verifies server state, not the transcript), `python` (`function = "module:attr"`, a
reward function taking what it names). JSON config files with the same keys work too.

State: `[env.state]` values are filled per rollout from the task's fields and the rollout's sandbox (`{rollout_dir}`,
`{rollout_id}`, with one server); a `[[setup]]` call with `save = "key"` stores its result (parsed JSON, else the
text) under that key. `[env.hidden_args]` fills model-hidden arguments from those keys, as a Python env's
`hidden_args` does.
"""

from __future__ import annotations

import importlib
import json
import math
import os
import re
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import pydantic

from toolgym.accuracy import call_matches, call_similarity, calls_match, check_mode, is_optional_marker
from toolgym.env import HiddenCallError, StatefulToolEnv
from toolgym.episode import current_episode
from toolgym.mcp_bridge import ServerBinding, ServerSpec
from toolgym.rubric import Rubric
from toolgym.sandbox import Fixture, SandboxError, placeholders

_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.S | re.I)
_NUM = re.compile(r"-?\d+(?:\.\d+)?(?:e-?\d+)?", re.I)


class FixtureConfig(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid")
    src: str
    dest: str = ""


class ServerConfig(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid")
    command: list[str] | None = None
    url: str | None = None
    launch: list[str] | None = None
    env: dict[str, str] | None = None
    cwd: str | None = None
    scope: Literal["rollout", "shared"] = "shared"
    fixtures: list[str | FixtureConfig] = []
    prestart: int = pydantic.Field(0, ge=0, le=256)
    keep_sandboxes: bool = False
    error_patterns: list[str] = []  # regexes: a result text matching one is an error (exec_ok false)
    env_passthrough: list[str] = []  # the caller's environment variables (globs) the server gets beyond the base set

    @pydantic.model_validator(mode="after")
    def _one_target(self) -> ServerConfig:
        if bool(self.command) == bool(self.url):
            raise ValueError("[server] needs exactly one of `command` (stdio) or `url` (streamable HTTP)")
        if self.prestart and self.scope != "rollout":
            raise ValueError("[server] prestart (a warm pool of per-rollout servers) needs scope = \"rollout\"")
        return self


class NamedServerConfig(ServerConfig):
    """One `[[servers]]` entry of a multi-server env: a `[server]` plus its name, tool-name prefix and hidden tools."""

    name: str = pydantic.Field(pattern=r"^[A-Za-z0-9_.-]+$")
    prefix: str = ""
    hidden_tools: list[str] = []


class CallConfig(pydantic.BaseModel):
    """A hidden tool call of `[[setup]]` (before the model's first turn) or `[[cleanup]]` (after scoring);
    `{field}` placeholders in `arguments` are filled from the task."""

    model_config = pydantic.ConfigDict(extra="forbid")
    tool: str
    arguments: dict[str, Any] = {}
    save: str | None = None  # [[setup]] only: store the call's result (parsed JSON, else its text) in state[save]


class SamplingConfig(pydantic.BaseModel):
    """`[env.sampling]`: how `toolgym eval` and `toolgym serve` sample a model given with `-m` (or the default
    policy) when their flags do not say (`StatefulToolEnv.default_policy_options`)."""

    model_config = pydantic.ConfigDict(extra="forbid")
    temperature: float | None = pydantic.Field(None, ge=0)
    top_p: float | None = pydantic.Field(None, gt=0, le=1)
    max_tokens: int | None = pydantic.Field(None, ge=1)
    seed: int | None = None


class EnvSection(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid")
    system_prompt: str | None = None
    max_turns: int = pydantic.Field(8, ge=1, le=1000)
    hidden_tools: list[str] = []
    visible_tools: list[str] | None = None
    tool_descriptions: Literal["full", "brief"] = "full"  # "brief": each description's first sentence (env.py)
    on_no_call: Literal["stop", "nudge"] = "stop"
    tool_timeout: float = pydantic.Field(30.0, gt=0)
    report_by: list[str] = []  # task fields `toolgym eval` breaks results down by (e.g. ["kind"])
    state: dict[str, Any] = {}  # state key -> value ({task field} and sandbox placeholders filled per rollout)
    hidden_args: dict[str, list[str] | dict[str, str]] = {}  # tool -> arguments hidden from the model (see the doc)
    sampling: SamplingConfig = SamplingConfig()  # eval/serve sampling where their flags give none


class TasksConfig(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid")
    path: str
    match: str | dict[str, Any] = "exact"  # matching mode of expected_calls arguments that do not name one

    @pydantic.field_validator("match")
    @classmethod
    def _known_mode(cls, v: Any) -> Any:
        why = check_mode(v)
        if why:
            raise ValueError(why)
        return v


class RewardConfig(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid")
    type: Literal["answer", "call_match", "call_similarity", "called", "tool_result", "python"]
    name: str | None = None
    weight: float = 1.0
    field: str = "answer"
    mode: Literal["exact", "contains", "numeric", "regex"] = "exact"
    tool: str | None = None
    args: dict[str, Any] = {}
    function: str | None = None
    tolerance: float = 1e-6


class EnvConfig(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid")
    name: str = "config-env"
    server: ServerConfig | None = None
    servers: list[NamedServerConfig] = []
    env: EnvSection = EnvSection()
    tasks: TasksConfig
    rewards: list[RewardConfig] = pydantic.Field(min_length=1)
    setup: list[CallConfig] = []
    cleanup: list[CallConfig] = []

    @pydantic.model_validator(mode="after")
    def _one_server_section(self) -> EnvConfig:
        if (self.server is None) == (not self.servers):
            raise ValueError("give either one [server] or several [[servers]] (each with a name)")
        return self


def final_answer(messages: list[dict[str, Any]]) -> str:
    """The text inside the last `<answer>` tags of the assistant's messages, else its last message's content."""
    for m in reversed(messages):
        if m.get("role") == "assistant" and m.get("content"):
            found = _ANSWER.findall(m["content"])
            return (found[-1] if found else m["content"]).strip()
    return ""


def compare(value: str, expected: Any, mode: str, tolerance: float = 1e-6) -> bool:
    if mode == "numeric":
        nums = _NUM.findall(value.replace(",", ""))
        try:
            target = float(expected)
        except (TypeError, ValueError):
            return False
        return bool(nums) and math.isclose(float(nums[-1]), target, rel_tol=tolerance, abs_tol=tolerance)
    options = expected if isinstance(expected, list) else [expected]
    for opt in options:
        opt = str(opt)
        if mode == "exact" and value.strip().lower() == opt.strip().lower():
            return True
        if mode == "contains" and opt.strip().lower() in value.lower():
            return True
        if mode == "regex" and re.search(opt, value):
            return True
    return False


def _fill(template: Any, task: dict[str, Any]) -> Any:
    if isinstance(template, str):
        m = re.fullmatch(r"\{(\w+)\}", template)
        if m:
            return task[m.group(1)]
        return template.format(**task)
    if isinstance(template, dict):
        return {k: _fill(v, task) for k, v in template.items()}
    if isinstance(template, list):
        return [_fill(v, task) for v in template]
    return template


def _fill_named(template: Any, task: dict[str, Any], where: str) -> Any:
    """`_fill` with a clear error naming the config entry when the task lacks a placeholder's field."""
    try:
        return _fill(template, task)
    except KeyError as exc:
        raise HiddenCallError(f"{where}: the task has no field {exc.args[0]!r} (fields: {', '.join(task)})") from None
    except (ValueError, IndexError) as exc:
        raise HiddenCallError(f"{where}: bad placeholder: {exc}") from None


_HEADER = re.compile(r"^\s*(\[\[?)\s*([^\]]+?)\s*\]")
_PART = re.compile(r"([^.\[\]]+)(?:\[(\d+)\])?")


def toml_line(text: str, entry: str) -> int | None:
    """Best effort: the 1-based line of config entry `entry` (`server.env.DB`, `setup[1]`, `servers[0].fixtures[2]`)
    in TOML `text`, else None. The first part is a table header (`[server]`, the i-th `[[setup]]`); each further part
    a key of that table (`env = { DB = ... }`: inline tables count, on the same line or later) or a sub-table header
    (`[server.env]`). The deepest part found gives the line; list indices past the first part are not followed."""
    lines = text.splitlines()
    heads = [(n, m.group(1) == "[[", re.sub(r'[\s"]', "", m.group(2)))
             for n, line in enumerate(lines) if (m := _HEADER.match(line))]
    parts = [(m.group(1).strip(), m.group(2)) for m in _PART.finditer(entry)]
    if not parts:
        return None
    (table, idx), rest = parts[0], parts[1:]
    tables = [n for n, is_array, name in heads if name == table and is_array == (idx is not None)]
    if int(idx or 0) >= len(tables):
        return None
    at = tables[int(idx or 0)]  # the header of the table searched
    line, start = at, at + 1  # the deepest line found; where the next key is searched from (inline tables: same line)
    for name, _ in rest:
        end = next((n for n, _, _ in heads if n > at), len(lines))
        key = re.compile(rf'(?:^|[\s{{,])"?{re.escape(name)}"?\s*=')
        table = f"{table}.{name}"
        found = next((n for n in range(start, end) if key.search(lines[n])), None)
        if found is not None:
            line = start = found
            continue
        sub = next((n for n, is_array, h in heads if h == table and not is_array), None)
        if sub is None:
            break
        line = at = sub
        start = sub + 1
    return line + 1


def config_location(path: Path | None, entry: str) -> str:
    """`"FILE:LINE: "` of entry `entry` in a TOML config file, for the front of an error message; "" when it is not
    found (or for a JSON config or an env built without a file)."""
    if path is None or path.suffix != ".toml" or not path.is_file():
        return ""
    line = toml_line(path.read_text(), entry)
    return f"{path}:{line}: " if line else ""


def _server_location(env: ConfigEnv, server: str | None) -> str:
    """`FILE:LINE: ` of the `[server]` (or the named `[[servers]]`) entry's command, launch or url."""
    if env.config.server is not None:
        s: ServerConfig = env.config.server
        entry = "server"
    else:
        i = next((i for i, b in enumerate(env.config.servers) if b.name == server), 0)
        s, entry = env.config.servers[i], f"servers[{i}]"
    key = "command" if s.command else ("launch" if s.launch else "url")
    return config_location(env.source, f"{entry}.{key}")


def start_error_message(env: Any, exc: BaseException) -> str:
    """A server that did not start (`ServerStartError`), prefixed with `FILE:LINE: ` of its config entry when `env`
    is a config env."""
    where = _server_location(env, getattr(exc, "server", None)) if isinstance(env, ConfigEnv) else ""
    return f"{where}{exc}"


def _server_spec(s: ServerConfig, base: Path, where: str = "server") -> ServerSpec:
    """The `ServerSpec` of a `[server]` section: paths relative to the config folder (a command given as a relative
    path, fixtures), placeholders checked now (a bad one is an error naming its entry)."""
    fixtures = []
    for i, fx in enumerate(s.fixtures):
        fc = FixtureConfig(src=fx) if isinstance(fx, str) else fx
        src = fc.src if Path(fc.src).is_absolute() else str(base / fc.src)
        if not placeholders(src) and not Path(src).exists():
            raise SandboxError(f"{where}.fixtures[{i}]: {src} does not exist", f"{where}.fixtures[{i}]")
        fixtures.append(Fixture(src, fc.dest))
    sandbox = {"fixtures": fixtures, "prestart": s.prestart, "keep_sandboxes": s.keep_sandboxes,
               "error_patterns": list(s.error_patterns), "env_passthrough": list(s.env_passthrough)}
    if s.command:
        cmd = list(s.command)
        if os.sep in cmd[0] and not Path(cmd[0]).is_absolute() and (base / cmd[0]).exists():
            cmd[0] = os.path.normpath(base / cmd[0])  # a server installed beside the config (node_modules/.bin/...)
        spec = ServerSpec.stdio(cmd, env=s.env, cwd=s.cwd or str(base), **sandbox)
    else:
        spec = ServerSpec.http(s.url or "", launch=s.launch, env=s.env, cwd=s.cwd, **sandbox)
    spec.check(where)
    return spec


def _make_reward(rc: RewardConfig, base: Path, mode: Any = "exact") -> Any:
    """The reward function of a `[[rewards]]` entry (`mode`: the default argument matching mode, `[tasks] match`)."""
    if rc.type == "answer":
        def fn(task, messages):  # type: ignore[no-untyped-def]
            if rc.field not in task:
                raise KeyError(f"task has no field {rc.field!r} for the answer reward")
            return float(compare(final_answer(messages), task[rc.field], rc.mode, rc.tolerance))
    elif rc.type == "call_match":
        def fn(task, calls):  # type: ignore[no-untyped-def]
            expected = task.get("expected_calls")
            if expected is None:
                raise KeyError("task has no expected_calls for the call_match reward")
            return float(calls_match([(c.name, c.arguments) for c in calls], expected, mode))
    elif rc.type == "call_similarity":
        def fn(task, calls):  # type: ignore[no-untyped-def]
            expected = task.get("expected_calls")
            if expected is None:
                raise KeyError("task has no expected_calls for the call_similarity reward")
            return call_similarity([(c.name, c.arguments) for c in calls], expected, mode)
    elif rc.type == "called":
        if not rc.tool:
            raise ValueError("reward type 'called' needs `tool`")

        def fn(task, calls):  # type: ignore[no-untyped-def]
            want = {"name": rc.tool, "arguments": _fill(rc.args, task)} if rc.args else None
            def named(c):  # type: ignore[no-untyped-def]  # only the arguments the reward names are compared
                return {k: v for k, v in (c.arguments or {}).items() if k in rc.args}

            return float(any(c.exec_ok and c.name == rc.tool and
                             (want is None or call_matches(c.name, named(c), want, mode)) for c in calls))
    elif rc.type == "tool_result":
        if not rc.tool:
            raise ValueError("reward type 'tool_result' needs `tool`")

        async def fn(env, task):  # type: ignore[no-untyped-def]
            res = await env.call(rc.tool, **_fill(rc.args, task))
            return float(compare(res.text, task[rc.field], rc.mode, rc.tolerance))
    else:
        if not rc.function or ":" not in rc.function:
            raise ValueError("reward type 'python' needs `function = \"module:attr\"`")
        mod, _, attr = rc.function.partition(":")
        import sys

        if str(base) not in sys.path:
            sys.path.insert(0, str(base))
        fn = getattr(importlib.import_module(mod), attr)
    fn.__name__ = rc.name or (rc.type if rc.type != "python" else fn.__name__)
    return fn


def next_expected_call(task: dict[str, Any], memory: dict[str, Any]) -> Any:
    """The next of the task's `expected_calls` as an assistant turn with that one call (its `reference` arguments,
    else the first acceptable value of each argument, optional ones left out), or None once all were made; counts in
    `memory["next"]`. The replay step of answer-key players (`scripted:reference`, the recipe's teacher)."""
    from toolgym.policies.scripted import call
    from toolgym.types import AssistantTurn

    expected = task.get("expected_calls") or []
    i = memory.setdefault("next", 0)
    if i >= len(expected):
        return None
    memory["next"] = i + 1
    args = expected[i].get("reference")
    if args is None:
        args = {k: (v[0] if isinstance(v, list) and v else v) for k, v in (expected[i].get("arguments") or {}).items()
                if not (isinstance(v, list) and v and is_optional_marker(v[0]))}
    return AssistantTurn(content="", tool_calls=[call(expected[i]["name"], dict(args))])


def evidence_line(output: str, answer: str) -> str | None:
    """The last line of a tool output that contains `answer` (stripped), or None (no such line, or no answer)."""
    if not answer:
        return None
    return next((line.strip() for line in reversed(output.splitlines()) if answer in line), None)


def _reference_player(env: Any, /, answer_from: str = "tool") -> Any:
    """Replays the task's `expected_calls` (an expected call's `reference` arguments, else the first acceptable value
    of each argument; any argument names, `name` included), then answers with the last
    tool output inside <answer> tags (or the task's `answer` when the task has no expected calls). Validates a
    config env's plumbing and rewards; it is an oracle, not a baseline. `answer_from="task"` answers with the
    task's `answer` after the calls instead (concise teacher data for `toolgym synth --teacher-arg
    answer_from=task`); `answer_from="quote"` does the same after quoting the line of the last tool output that
    holds that answer (the last such line), so the answer is copied from a line the turn has just written rather than
    found in a long result (a step a small model can learn: docs/envs/multi-server.md)."""
    if answer_from not in ("tool", "task", "quote"):
        raise ValueError(f"answer_from must be 'tool', 'task' or 'quote', not {answer_from!r}")
    from toolgym.policies.scripted import ScriptedPolicy
    from toolgym.types import AssistantTurn

    def act(messages: list[dict[str, Any]], memory: dict[str, Any]) -> AssistantTurn:
        task = memory["task"]
        turn = next_expected_call(task, memory)
        if turn is not None:
            return turn
        last = next((m["content"] for m in reversed(messages) if m.get("role") == "tool"), None)
        answer = last if last is not None and answer_from == "tool" else str(task.get("answer", ""))
        quote = evidence_line(last, answer) if answer_from == "quote" and last is not None else None
        return AssistantTurn(content=(f"{quote}\n" if quote else "") + f"<answer>{answer}</answer>")

    return ScriptedPolicy(act, "scripted:reference", answer_key=True)


class ConfigEnv(StatefulToolEnv):
    """A `StatefulToolEnv` whose server, tasks and rewards come from an `EnvConfig`. Ships one scripted player,
    `reference` (see `_reference_player`)."""

    default_policy = "scripted:reference"
    source: Path | None = None  # the config file (set by `load_config_env`): errors of setup/cleanup name its line

    def scripted_players(self) -> dict[str, Any]:
        return {"reference": _reference_player}

    def __init__(self, config: EnvConfig, base_dir: Path, /, tasks: str | None = None, **options: Any) -> None:
        """
        Args:
            tasks: A task file to use instead of the config's `[tasks] path` (relative to the config's folder), e.g.
                a held-out split.
        """
        self.config, self.base_dir = config, base_dir
        self.tasks_path = tasks or config.tasks.path
        self.name = config.name  # type: ignore[misc]
        e = config.env
        if config.server is not None:
            options.setdefault("server", _server_spec(config.server, base_dir))
            self.session_scope = config.server.scope  # type: ignore[misc]
        else:
            options.setdefault("servers", [
                ServerBinding(s.name, _server_spec(s, base_dir, f"servers[{i}]"), s.scope, s.prefix,
                              tuple(s.hidden_tools)) for i, s in enumerate(config.servers)])
        self.system_prompt = e.system_prompt  # type: ignore[misc]
        self.hidden_tools = set(e.hidden_tools)  # type: ignore[misc]
        self.visible_tools = set(e.visible_tools) if e.visible_tools is not None else None  # type: ignore[misc]
        self.report_by = tuple(e.report_by)  # type: ignore[misc]
        self.default_policy_options = e.sampling.model_dump(exclude_none=True)  # type: ignore[misc]
        self.call_match_mode = config.tasks.match
        self.task_lines: list[tuple[Path, int]] = []  # (file, line) of each task of the last build_dataset
        self.hidden_args = dict(e.hidden_args)  # type: ignore[misc]
        known = set(e.state) | {c.save for c in config.setup if c.save}
        for tool in e.hidden_args:
            unknown = sorted(set(self.hidden_arg_sources(tool).values()) - known)
            if unknown:
                raise SandboxError(f"env.hidden_args.{tool}: no state key {', '.join(map(repr, unknown))} (define "
                                   "it under [env.state] or save it from a [[setup]] call)", "env.hidden_args")
        options.setdefault("max_turns", e.max_turns)
        options.setdefault("on_no_call", e.on_no_call)
        options.setdefault("tool_timeout", e.tool_timeout)
        options.setdefault("tool_descriptions", e.tool_descriptions)
        super().__init__(**options)

    def build_rubric(self) -> Rubric:
        return Rubric([(_make_reward(rc, self.base_dir, self.config.tasks.match), rc.weight)
                       for rc in self.config.rewards])

    async def _hidden_calls(self, section: str, calls: list[CallConfig], task: dict[str, Any],
                            state: dict[str, Any] | None = None) -> None:
        for i, c in enumerate(calls):
            where = f"{section}[{i}] (tool {c.tool!r})"
            try:
                args = _fill_named(c.arguments, task, f"{where}.arguments")
            except HiddenCallError as exc:  # the file's line is looked up only for the message
                raise HiddenCallError(f"{config_location(self.source, f'{section}[{i}]')}{exc}") from None
            try:
                res = await self.call(c.tool, **args)
            except HiddenCallError as exc:
                raise HiddenCallError(f"{config_location(self.source, f'{section}[{i}]')}{where} failed: {exc}") \
                    from None
            if c.save and state is not None:
                try:
                    state[c.save] = res.json()
                except ValueError:
                    state[c.save] = res.text

    async def setup_state(self, state: dict[str, Any], task: dict[str, Any]) -> None:
        values = dict(task)
        episode = current_episode()
        box = getattr(episode.session, "sandbox", None) if episode is not None else None
        if box is not None:
            values.update(rollout_dir=str(box.path), rollout_id=box.id)
        for key, template in self.config.env.state.items():
            state[key] = _fill_named(template, values, f"env.state.{key}")
        await self._hidden_calls("setup", self.config.setup, task, state)

    async def cleanup(self, state: dict[str, Any]) -> None:
        await self._hidden_calls("cleanup", self.config.cleanup, state.get("task") or {})

    def build_dataset(self, n: int | None = None, seed: int = 0) -> list[dict[str, Any]]:
        """The task file's rows (the first `n`). A missing file or a bad line raises `TaskFileError` (`FILE:LINE:
        what, and how to fix`)."""
        path = (self.base_dir / self.tasks_path).resolve()
        if not path.is_file():
            where = "" if self.tasks_path != self.config.tasks.path else config_location(self.source, "tasks.path")
            fix = "fix [tasks] path" if where else "fix the tasks option"
            raise TaskFileError(f"{where}task file {path} not found ({fix}; paths are relative to {self.base_dir})")
        rows, lines = [], []
        with path.open() as f:
            for lineno, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise TaskFileError(f"{path}:{lineno}: not valid JSON ({exc.msg} at column {exc.colno}); each "
                                        "line must be one JSON object") from None
                if not isinstance(row, dict) or "prompt" not in row:
                    raise TaskFileError(f"{path}:{lineno}: each task needs a 'prompt' (a JSON object with a "
                                        "\"prompt\" key)")
                rows.append(row)
                lines.append((path, lineno))
        self.task_lines = lines if n is None else lines[:n]
        return rows if n is None else rows[:n]

    def task_source(self, index: int) -> str:
        if 0 <= index < len(self.task_lines):
            path, line = self.task_lines[index]
            return f"{path}:{line}"
        return super().task_source(index)


class TaskFileError(ValueError):
    """A task file that is missing or holds a bad line; the message starts with `FILE:LINE:`."""


class ConfigError(ValueError):
    """An env config file that cannot be read (bad TOML/JSON, unknown keys, bad values): one line per problem, each
    `FILE:LINE: entry: what, and how to fix`."""


def _pydantic_errors(path: Path, text: str, exc: pydantic.ValidationError) -> str:
    """One line per validation error: the entry's file and line, what is wrong and, for an unknown key, the closest
    known one."""
    import difflib

    out = []
    for err in exc.errors()[:5]:
        loc = [p for p in err["loc"] if not (isinstance(p, str) and p.startswith(("function-", "tagged-union")))]
        entry = ""
        for part in loc:
            entry += f"[{part}]" if isinstance(part, int) else (f".{part}" if entry else str(part))
        where = config_location(path, entry) or f"{path}: "
        if err["type"] == "extra_forbidden":
            parent: Any = EnvConfig
            for part in loc[:-1]:
                if isinstance(part, int):
                    continue
                fields = getattr(parent, "model_fields", {})
                ann = fields[part].annotation if part in fields else None
                parent = next((a for a in getattr(ann, "__args__", (ann,)) if hasattr(a, "model_fields")), ann)
            known = sorted(getattr(parent, "model_fields", {}))
            close = difflib.get_close_matches(str(loc[-1]), known, 1)
            hint = f"did you mean {close[0]!r}?" if close else f"known keys: {', '.join(known)}"
            out.append(f"{where}{entry}: unknown key ({hint})")
        else:
            msg = err["msg"].removeprefix("Value error, ")
            got = f" (got {err['input']!r})" if err["type"] not in ("missing",) and not isinstance(
                err.get("input"), dict | list) else ""
            out.append(f"{where}{entry or 'config'}: {msg}{got}")
    if len(exc.errors()) > 5:
        out.append(f"{path}: ... and {len(exc.errors()) - 5} more problems")
    return "\n".join(out)


def load_config_env(path: str | Path, /, **options: Any) -> ConfigEnv:
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the env config ({exc.strerror})") from None
    try:
        raw = tomllib.loads(text) if path.suffix == ".toml" else json.loads(text)
    except tomllib.TOMLDecodeError as exc:
        m = re.search(r"\(at line (\d+), column (\d+)\)", str(exc))
        msg = re.sub(r"\s*\(at line \d+, column \d+\)", "", str(exc))
        loc = f"{path}:{m.group(1)}:{m.group(2)}" if m else str(path)
        raise ConfigError(f"{loc}: invalid TOML: {msg} (fix the syntax there)") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}:{exc.lineno}:{exc.colno}: invalid JSON: {exc.msg}") from None
    try:
        config = EnvConfig.model_validate(raw)
    except pydantic.ValidationError as exc:
        raise ConfigError(_pydantic_errors(path, text, exc)) from None
    try:
        env = ConfigEnv(config, path.parent.resolve(), **options)
    except SandboxError as exc:  # a bad placeholder, fixture or hidden argument: name the file's line too
        raise SandboxError(f"{config_location(path, exc.where)}{exc}", exc.where) from None
    env.source = path.resolve()
    return env


def config_env_factory(path: str | Path) -> Callable[..., ConfigEnv]:
    """A factory for the env in config file `path`; its options are `StatefulToolEnv`'s (what `load_env` checks)."""

    def build(**options: Any) -> ConfigEnv:
        return load_config_env(path, **options)

    return build
