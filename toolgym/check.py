"""`toolgym check ENV`: validate an env's tasks against the live tool schemas of its servers, before any rollout.

A task whose `expected_calls` name a tool the model cannot call, an argument it cannot pass or a value the schema
refuses can never be matched by a real model -- while a reference player that replays the expected calls scores 1.0
on it. `check_tasks` finds those tasks, each problem as `FILE:LINE: reason` (`env.task_source`):

- `expected_calls` is a list of `{"name", "arguments", "match"}` objects (nothing else: a typo'd key is named);
- the tool exists (else the closest names) and the model sees it (not in `hidden_tools`, within `visible_tools`);
- each argument is one the model's schema lists (not unknown, not a hidden argument the env fills itself);
- each acceptable value is valid for its argument's schema (type, enum, range, pattern...) under the argument's
  matching mode (`toolgym.accuracy`: a `regex` value must compile, `numeric` values are numbers, `set` values lists);
- every required argument is given, and not marked optional (`""`/None);
- the call the reference player sends -- the expected call's `reference` arguments, else the first acceptable
  values -- validates as a whole, and (`reference`) matches the expected call.

`toolgym eval`, `toolgym synth` and `toolgym train` run the same check after connecting to the servers and refuse to
start on an invalid task unless told to skip them (`--skip-invalid-tasks`; the skipped tasks are counted and
reported).
"""

from __future__ import annotations

import difflib
import json
import re
import time
from dataclasses import dataclass, field
from typing import Any

import jsonschema

from toolgym.accuracy import argument_modes, call_matches, check_mode, is_optional_marker, validate_args
from toolgym.env import StatefulToolEnv

_CALL_KEYS = ("name", "arguments", "match", "reference")


@dataclass
class TaskProblem:
    """One invalid task: its index in the task list, where it comes from (`FILE:LINE` or `task #i`) and why."""

    index: int
    where: str
    reason: str

    def __str__(self) -> str:
        return f"{self.where}: {self.reason}"


@dataclass
class CheckReport:
    """What `check_tasks` found: the tasks checked, the tools seen, one `TaskProblem` per problem, seconds taken, and
    the tasks that repeat an earlier one (`task_key`: not invalid, but an eval counts their outcome twice)."""

    tasks: int
    tools: int
    problems: list[TaskProblem] = field(default_factory=list)
    seconds: float = 0.0
    repeats: list[TaskProblem] = field(default_factory=list)  # valid, but the same task as an earlier one (task_key)

    @property
    def invalid(self) -> list[int]:
        """Indices of the invalid tasks."""
        return sorted({p.index for p in self.problems})

    def valid(self, tasks: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """`tasks` without the invalid ones."""
        bad = set(self.invalid)
        return [t for i, t in enumerate(tasks) if i not in bad]

    def repeat_note(self, consequence: str) -> str | None:
        """One line naming the repeated tasks and what they do to the run (`consequence`: "their outcomes count
        twice" for an eval, "their rows weigh twice" for teacher data), or None when no task repeats another."""
        if not self.repeats:
            return None
        return (f"{len(self.repeats)} task(s) repeat an earlier one ({SAME_TASK}), so "
                f"{consequence}: {self.repeats[0].where} first (toolgym check lists them)")


class InvalidTasksError(ValueError):
    """Tasks that failed the check; the message lists them (`FILE:LINE: reason`, one a line, at most `shown`)."""

    def __init__(self, report: CheckReport, shown: int = 20) -> None:
        self.report = report
        lines = [str(p) for p in report.problems[:shown]]
        more = len(report.problems) - shown
        if more > 0:
            lines.append(f"... and {more} more (toolgym check lists them all)")
        n = len(report.invalid)
        head = (f"{n} of {report.tasks} task(s) do not fit the servers' tool schemas; fix them, or pass "
                "--skip-invalid-tasks to leave them out")
        super().__init__("\n".join([head, *lines]))


def _value_schema(root: dict[str, Any], prop: dict[str, Any]) -> dict[str, Any]:
    """A property's schema with the root's definitions beside it, so `$ref`s resolve."""
    defs = {k: root[k] for k in ("$defs", "definitions") if k in root}
    return {**defs, **prop}


def _value_problem(schema: dict[str, Any], value: Any, mode: Any) -> str | None:
    name = mode if isinstance(mode, str) else mode.get("mode")
    if name == "regex":
        if not isinstance(value, str):
            return f"a regex value must be a string, not {value!r}"
        try:
            re.compile(value)
        except re.error as exc:
            return f"{value!r} is not a valid regex: {exc}"
        return None
    if name == "numeric" and not (isinstance(value, int | float) and not isinstance(value, bool)):
        return f"numeric matching needs a number, not {value!r}"
    if name == "set" and not isinstance(value, list):
        return f"set matching needs a list, not {value!r}"
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    err = next(iter(sorted(cls(schema).iter_errors(value), key=lambda e: list(e.path))), None)
    return None if err is None else err.message


def check_call(env: StatefulToolEnv, call: Any, default_mode: Any = "exact") -> list[str]:
    """Why one expected call cannot be made by the model (empty: it can)."""
    if not isinstance(call, dict):
        return [f"must be an object {{\"name\": ..., \"arguments\": {{...}}}}, not {call!r}"]
    out = []
    extra = [k for k in call if k not in _CALL_KEYS]
    if extra:
        close = [difflib.get_close_matches(k, _CALL_KEYS, 1) for k in extra]
        hints = [f"{k!r}" + (f" (did you mean {c[0]!r}?)" if c else "") for k, c in zip(extra, close, strict=True)]
        out.append(f"unknown key(s) {', '.join(hints)}; an expected call has {', '.join(_CALL_KEYS)}")
    name = call.get("name")
    if not isinstance(name, str) or not name:
        return [*out, "has no tool \"name\""]
    if not env.is_visible(name):
        if name in env.tools:
            return [*out, f"tool {name!r} is hidden from the model (hidden_tools / visible_tools): the model cannot "
                          "call it"]
        offered = sorted(t["function"]["name"] for t in env.model_tools())
        close = difflib.get_close_matches(name, offered, 1)
        hint = f"did you mean {close[0]!r}?" if close else f"the model's tools: {', '.join(offered) or 'none'}"
        return [*out, f"unknown tool {name!r} ({hint})"]
    args = call.get("arguments", {})
    if args is None:
        args = {}
    if not isinstance(args, dict):
        return [*out, f"\"arguments\" must be an object, not {args!r}"]
    schema = env.tool_schema(name)
    props: dict[str, Any] = schema.get("properties") or {}
    required = [r for r in schema.get("required") or [] if r in props]
    hidden = env.hidden_arg_sources(name)
    spec = call.get("match")
    if spec is not None:
        if isinstance(spec, dict) and "mode" not in spec:
            for arg, mode in spec.items():
                why = check_mode(mode)
                if why:
                    out.append(f"match.{arg}: {why}")
                elif arg not in args:
                    out.append(f"match.{arg}: names no argument of this expected call")
        elif check_mode(spec):
            out.append(f"match: {check_mode(spec)}")
    why = check_mode(default_mode)
    if why:
        out.append(f"default matching mode: {why}")
    if out:
        return out
    modes = argument_modes(call, default_mode)
    open_schema = "additionalProperties" in schema
    reference: dict[str, Any] = {}
    for arg, accepted in args.items():
        if arg in hidden:
            out.append(f"argument {arg!r} is hidden from the model (filled from state {hidden[arg]!r}); remove it from "
                       "the expected call")
            continue
        if arg not in props and not open_schema:
            close = difflib.get_close_matches(arg, list(props), 1)
            hint = f"did you mean {close[0]!r}?" if close else f"the tool takes: {', '.join(sorted(props)) or 'none'}"
            out.append(f"unknown argument {arg!r} ({hint})")
            continue
        options = accepted if isinstance(accepted, list) else [accepted]
        values = [o for o in options if not is_optional_marker(o)]
        if len(values) < len(options) and arg in required:
            out.append(f"argument {arg!r} is required by the tool's schema but marked optional (\"\"/null)")
        if arg in props:
            for v in values:
                problem = _value_problem(_value_schema(schema, props[arg]), v, modes[arg])
                if problem:
                    out.append(f"argument {arg!r}: {problem}")
        if options and not is_optional_marker(options[0]):
            reference[arg] = options[0]
    missing = [r for r in required if r not in args and r not in hidden]
    if missing:
        out.append(f"required argument(s) {', '.join(map(repr, missing))} missing")
    given = call.get("reference")
    if given is not None and not isinstance(given, dict):
        out.append(f"\"reference\" must be an object of arguments, not {given!r}")
    elif out:
        pass
    elif given is not None:
        whole = validate_args(schema, given)
        if whole:
            out.append(f"the reference call is invalid: {whole}")
        elif not call_matches(name, given, call, default_mode):
            out.append(f"the reference call {given} does not match the expected call")
    else:
        whole = validate_args(schema, reference)
        if whole and all(modes.get(a) in ("exact", "case_insensitive", "normalized", "set") for a in reference):
            out.append(f"the call with the first acceptable values is invalid: {whole}")
        elif any(modes.get(a) == "regex" or isinstance(modes.get(a), dict) and modes[a].get("mode") == "regex"
                 for a in reference):
            out.append("a regex argument needs a \"reference\" (the arguments the reference player sends)")
    return out


def check_task(env: StatefulToolEnv, task: dict[str, Any]) -> list[str]:
    """Why a task's `expected_calls` cannot be made by the model (empty: it can, or the task has none)."""
    if "expected_calls" not in task:
        return []
    expected = task["expected_calls"]
    if expected is None:
        return []
    if not isinstance(expected, list):
        return [f"expected_calls must be a list of calls, not {type(expected).__name__}"]
    out = []
    for i, call in enumerate(expected):
        label = f"expected_calls[{i}]" + (f" ({call['name']})" if isinstance(call, dict) and
                                         isinstance(call.get("name"), str) else "")
        out += [f"{label}: {why}" for why in check_call(env, call, env.call_match_mode)]
    return out


SAME_TASK = "every field but id, split and template_prompt"
"""What two tasks share when one repeats the other (`task_key`), as the repeat notes say it."""


def task_key(task: dict[str, Any]) -> str:
    """What makes two tasks the same task: every field but `id`, `split` and `template_prompt` (the template a
    paraphrased prompt was reworded from, which no model sees): the request, the calls it expects, and whatever else
    an env reads from a task (a fixture, a seed, a board)."""
    return json.dumps({k: v for k, v in task.items() if k not in ("id", "split", "template_prompt")}, sort_keys=True,
                      ensure_ascii=False, default=str)


def check_tasks(env: StatefulToolEnv, tasks: list[dict[str, Any]]) -> CheckReport:
    """Check every task against the env's tools (the env must be started: `await env.start()`)."""
    t0 = time.perf_counter()
    report = CheckReport(tasks=len(tasks), tools=len(env.model_tools()))
    first: dict[str, int] = {}
    for i, task in enumerate(tasks):
        for why in check_task(env, task):
            report.problems.append(TaskProblem(i, env.task_source(i), why))
        j = first.setdefault(task_key(task), i)
        if j != i:
            report.repeats.append(TaskProblem(i, env.task_source(i), f"the same task as {env.task_source(j)} "
                                              f"({SAME_TASK}): an eval counts this outcome twice"))
    report.seconds = time.perf_counter() - t0
    return report


async def checked_tasks(env: StatefulToolEnv, tasks: list[dict[str, Any]], skip_invalid: bool = False,
                        ) -> tuple[list[dict[str, Any]], CheckReport]:
    """Start the env, check `tasks`; return the valid ones and the report. Invalid tasks raise `InvalidTasksError`
    unless `skip_invalid` (then they are left out and listed in the report)."""
    await env.start()
    report = check_tasks(env, tasks)
    if report.problems and (not skip_invalid or len(report.invalid) == report.tasks):
        raise InvalidTasksError(report)  # skipping every task would leave nothing to run
    return report.valid(tasks), report


__all__ = ["CheckReport", "InvalidTasksError", "TaskProblem", "check_call", "check_task", "check_tasks",
           "checked_tasks", "task_key"]
