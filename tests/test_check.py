"""`toolgym check` (`toolgym.check`): every kind of task that no model can match is found against the live schemas of
a real MCP server (the flaky test server over stdio), named with its file and line; valid tasks are not."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tg_testutil import FLAKY
from toolgym.check import InvalidTasksError, check_tasks, checked_tasks
from toolgym.cli import app
from toolgym.registry import load_env

GOOD = {"prompt": "add", "expected_calls": [{"name": "add", "arguments": {"a": [1], "b": [2.5]}}]}
# (task, the words the problem must contain)
BAD: list[tuple[dict[str, Any], str]] = [
    ({"prompt": "typo'd tool", "expected_calls": [{"name": "ad", "arguments": {"a": [1], "b": [2]}}]},
     "unknown tool 'ad' (did you mean 'add'?)"),
    ({"prompt": "typo'd argument", "expected_calls": [{"name": "echo", "arguments": {"txt": ["hi"]}}]},
     "unknown argument 'txt' (did you mean 'text'?)"),
    ({"prompt": "int for a string", "expected_calls": [{"name": "echo", "arguments": {"text": [5]}}]},
     "argument 'text': 5 is not of type 'string'"),
    ({"prompt": "hidden tool", "expected_calls": [{"name": "crash", "arguments": {}}]},
     "tool 'crash' is hidden from the model"),
    ({"prompt": "hidden argument", "expected_calls": [{"name": "set_value", "arguments": {"key": ["k"],
                                                                                       "value": ["v"]}}]},
     "argument 'key' is hidden from the model"),
    ({"prompt": "required missing", "expected_calls": [{"name": "add", "arguments": {"a": [1]}}]},
     "required argument(s) 'b' missing"),
    ({"prompt": "required marked optional", "expected_calls": [{"name": "add", "arguments": {"a": [1], "b": [""]}}]},
     "argument 'b' is required by the tool's schema but marked optional"),
    ({"prompt": "bad mode", "expected_calls": [{"name": "echo", "arguments": {"text": ["x"]},
                                                "match": {"text": "exakt"}}]},
     "match.text: unknown matching mode 'exakt' (did you mean 'exact'?)"),
    ({"prompt": "bad regex", "expected_calls": [{"name": "echo", "arguments": {"text": ["(unclosed"]},
                                                 "match": "regex", "reference": {"text": "x"}}]},
     "'(unclosed' is not a valid regex"),
    ({"prompt": "regex, no reference", "expected_calls": [{"name": "echo", "arguments": {"text": ["h.*"]},
                                                           "match": "regex"}]},
     "a regex argument needs a \"reference\""),
    ({"prompt": "reference not matching", "expected_calls": [{"name": "echo", "arguments": {"text": ["h.*"]},
                                                              "match": "regex", "reference": {"text": "bye"}}]},
     "the reference call {'text': 'bye'} does not match the expected call"),
    ({"prompt": "typo'd key", "expected_calls": [{"name": "echo", "argument": {"text": ["x"]}}]},
     "unknown key(s) 'argument' (did you mean 'arguments'?)"),
    ({"prompt": "not a list", "expected_calls": {"name": "echo"}}, "expected_calls must be a list of calls"),
    ({"prompt": "a string for a number", "expected_calls": [{"name": "sleep", "arguments": {"seconds": ["soon"]}}]},
     "argument 'seconds': 'soon' is not of type 'number'"),
]


def _env(tmp_path: Path, tasks: list[dict[str, Any]], extra: str = "") -> Path:
    (tmp_path / "tasks.jsonl").write_text("".join(json.dumps(t) + "\n" for t in tasks))
    p = tmp_path / "env.toml"
    p.write_text(f'name = "checked"\n[server]\ncommand = ["{sys.executable}", "{FLAKY}"]\n'
                 '[env]\nhidden_tools = ["crash", "hang"]\n[env.state]\nkey = "fixed"\n'
                 '[env.hidden_args]\nset_value = ["key"]\n'
                 '[tasks]\npath = "tasks.jsonl"\n[[rewards]]\ntype = "call_match"\n' + extra)
    return p


def _check(path: Path) -> Any:
    env = load_env(str(path))

    async def go() -> Any:
        try:
            await env.start()
            return check_tasks(env, env.build_dataset())
        finally:
            await env.aclose()

    return asyncio.run(go())


def test_each_kind_of_bad_task_is_named_with_its_line(tmp_path: Path) -> None:
    tasks = [GOOD] + [t for t, _ in BAD] + [GOOD, {"prompt": "no calls expected", "expected_calls": []},
                                            {"prompt": "no expected_calls at all"}]
    report = _check(_env(tmp_path, tasks))
    file = (tmp_path / "tasks.jsonl").resolve()
    assert report.invalid == list(range(1, len(BAD) + 1))  # the valid ones around them are not named
    for line, (_, words) in enumerate(BAD, start=2):
        found = [str(p) for p in report.problems if p.where == f"{file}:{line}"]
        assert found and any(words in f for f in found), (line, words, found)
    assert report.tasks == len(tasks) and report.tools >= 8


def test_valid_modes_and_reference_calls_pass(tmp_path: Path) -> None:
    tasks = [
        {"prompt": "ci", "expected_calls": [{"name": "echo", "arguments": {"text": ["Hi"]}, "match": "case_insensitive"}]},
        {"prompt": "re", "expected_calls": [{"name": "echo", "arguments": {"text": [r"h\w+"]}, "match": "regex",
                                             "reference": {"text": "hello"}}]},
        {"prompt": "num", "expected_calls": [{"name": "add", "arguments": {"a": [1], "b": [2.0]},
                                              "match": {"b": {"mode": "numeric", "tolerance": 0.1}}}]},
        {"prompt": "opt", "expected_calls": [{"name": "add", "arguments": {"a": [1], "b": [2], "round_to": ["", 2]}}]},
    ]
    report = _check(_env(tmp_path, tasks))
    assert report.problems == [], [str(p) for p in report.problems]


def test_checked_tasks_refuses_or_skips(tmp_path: Path) -> None:
    tasks = [GOOD, BAD[0][0], GOOD]
    env = load_env(str(_env(tmp_path, tasks)))

    async def go(skip: bool) -> Any:
        try:
            return await checked_tasks(env, env.build_dataset(), skip)
        finally:
            await env.aclose()

    with pytest.raises(InvalidTasksError, match=r"1 of 3 task\(s\) do not fit .* --skip-invalid-tasks") as info:
        asyncio.run(go(False))
    assert f"{(tmp_path / 'tasks.jsonl').resolve()}:2: expected_calls[0] (ad): unknown tool" in str(info.value)
    kept, report = asyncio.run(go(True))
    assert kept == [GOOD, GOOD] and report.invalid == [1]


def test_check_command_and_eval_refusal(tmp_path: Path) -> None:
    """The CLI: `toolgym check` prints each problem as FILE:LINE: reason and exits 2; `toolgym eval` refuses the same
    tasks with exit 2 before any rollout (no results), and with --skip-invalid-tasks runs the rest and reports the
    skipped ones in summary.json."""
    runner = CliRunner()
    cfg = _env(tmp_path, [GOOD, BAD[0][0], BAD[2][0], GOOD])
    res = runner.invoke(app, ["check", str(cfg)])
    lines = res.output.strip().splitlines()
    assert res.exit_code == 2, res.output
    assert lines[0].endswith(":2: expected_calls[0] (ad): unknown tool 'ad' (did you mean 'add'?)")
    assert lines[1].endswith(":3: expected_calls[0] (echo): argument 'text': 5 is not of type 'string'")
    assert "4 tasks, 2 invalid (2 problems)" in lines[-1]

    out = tmp_path / "run"
    res = runner.invoke(app, ["eval", str(cfg), "-o", str(out)])
    assert res.exit_code == 2 and "2 of 4 task(s) do not fit" in res.output and ":3: " in res.output
    assert not (out / "results.jsonl").exists()

    res = runner.invoke(app, ["eval", str(cfg), "-o", str(out), "--skip-invalid-tasks"])
    assert res.exit_code == 0, res.output
    assert "skipped 2 invalid task(s)" in res.output
    # the last task repeats the first: eval runs both and says their outcome counts twice
    assert "note: 1 task(s) repeat an earlier one" in " ".join(res.output.split()) and ":4 first" in res.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["rollouts"] == 2 and summary["reward"]["mean"] == 1.0
    assert summary["skipped_tasks"]["count"] == 2 and "unknown tool 'ad'" in summary["skipped_tasks"]["tasks"][0]


def test_a_good_task_file_checks_clean(tmp_path: Path) -> None:
    res = CliRunner().invoke(app, ["check", str(_env(tmp_path, [GOOD, dict(GOOD, prompt="again")]))])
    assert res.exit_code == 0 and "2 tasks, all valid;" in res.output, res.output


def test_repeated_tasks_are_valid_but_named(tmp_path: Path) -> None:
    """The same task three times: valid (exit 0), each later copy named as a note with the line of its first, and
    counted on the last line; a task that differs in any field but id and split (here a seed) is not a repeat."""
    res = CliRunner().invoke(app, ["check", str(_env(tmp_path, [GOOD, dict(GOOD, id="b", split="heldout"), GOOD,
                                                                dict(GOOD, seed=7)]))])
    lines = res.output.strip().splitlines()
    assert res.exit_code == 0, res.output
    notes = [x for x in lines if x.endswith("(note)")]
    assert len(notes) == 2 and all(":1 (every field but id, split and template_prompt): an eval counts this outcome twice" in x
                                   for x in notes), notes
    assert notes[0].split(": ")[0].endswith(":2") and notes[1].split(": ")[0].endswith(":3")
    assert "4 tasks, all valid, 2 repeated;" in lines[-1]


def test_synth_runs_the_same_check(tmp_path: Path) -> None:
    """`toolgym synth` refuses invalid tasks before playing (no data file); with --skip-invalid-tasks it plays the
    valid ones only."""
    runner = CliRunner()
    cfg = _env(tmp_path, [GOOD, BAD[1][0], GOOD])
    out = tmp_path / "data.jsonl"
    res = runner.invoke(app, ["synth", str(cfg), "-m", "scripted:reference", "-o", str(out)])
    assert res.exit_code == 2 and "1 of 3 task(s) do not fit" in res.output and ":2: " in res.output, res.output
    assert not out.exists()
    res = runner.invoke(app, ["synth", str(cfg), "-m", "scripted:reference", "-o", str(out), "--skip-invalid-tasks"])
    assert res.exit_code == 0, res.output
    assert "skipped 1 invalid task(s)" in res.output and "of 2 games" in res.output
    # the two valid tasks are one task twice: synth plays both and names the repeat
    assert "note: 1 task(s) repeat an earlier one" in " ".join(res.output.split()) and ":3 first" in res.output
    assert len(out.read_text().splitlines()) == 2


def test_repeat_note_names_the_first_repeat(tmp_path: Path) -> None:
    """`CheckReport.repeat_note`: None without repeats; else the count, the consequence given and the first repeat."""
    env = load_env(str(_env(tmp_path, [GOOD, dict(GOOD, prompt="again"), GOOD, GOOD])))

    async def go() -> Any:
        try:
            await env.start()
            return check_tasks(env, env.build_dataset()), check_tasks(env, env.build_dataset()[:2])
        finally:
            await env.aclose()

    repeated, clean = asyncio.run(go())
    assert clean.repeat_note("x") is None
    note = repeated.repeat_note("their rows weigh twice")
    assert note is not None and note.startswith("2 task(s) repeat an earlier one") and "their rows weigh twice" in note
    assert note.endswith(":3 first (toolgym check lists them)"), note
