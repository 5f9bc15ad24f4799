"""The parts of task generation that need no server: schema-valid sampling (fuzzed over random schemas with
hypothesis), harvesting values from results, prompts that state every value as it will be written in the call, the
held-out split and its check, the `correct` reward of generated tasks, and the derived env config."""

from __future__ import annotations

import json
import random
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from toolgym.accuracy import validate_args
from toolgym.tasks import templates as T
from toolgym.tasks.generate import (
    Attempt,
    answer_fields,
    assign_split,
    avoided,
    check_split,
    distinct,
    free_values,
    pick_answer,
    sandbox_relative,
    task_key,
    task_values,
)
from toolgym.train.recipe import derive_config, trivial_baselines
from toolgym.tasks.rewards import correct
from toolgym.tasks.sampling import (
    ArgSampler,
    Pools,
    SchemaError,
    children,
    description_examples,
    entries,
    harvest,
    path_like,
)

SCHEMAS = [
    {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}, "required": ["a", "b"]},
    {"type": "object", "properties": {"mode": {"type": "string", "enum": ["fast", "slow"]},
                                      "n": {"type": "integer", "minimum": 3, "maximum": 7}}, "required": ["mode", "n"]},
    {"type": "object", "properties": {"when": {"type": "string", "format": "date-time"},
                                      "mail": {"type": "string", "format": "email"},
                                      "id": {"type": "string", "pattern": "^[a-z0-9-]+$", "minLength": 3}},
     "required": ["when", "mail", "id"]},
    {"type": "object", "properties": {"tags": {"type": "array", "items": {"type": "string"}, "minItems": 2,
                                               "maxItems": 4, "uniqueItems": True}}, "required": ["tags"]},
    {"type": "object", "$defs": {"P": {"type": "object", "properties": {"x": {"type": "integer", "multipleOf": 5}},
                                       "required": ["x"]}},
     "properties": {"point": {"$ref": "#/$defs/P"}, "opt": {"anyOf": [{"type": "string"}, {"type": "null"}]}},
     "required": ["point", "opt"]},
    {"type": "object", "properties": {"ratio": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1}},
     "required": ["ratio"], "additionalProperties": False},
    {"type": "object", "properties": {"zone": {"type": "string", "description":
                                               "IANA name (e.g., 'America/New_York', 'Europe/London')."}},
     "required": ["zone"]},
]


@pytest.mark.parametrize("schema", SCHEMAS)
def test_sampled_arguments_are_valid_against_the_schema(schema: dict) -> None:  # type: ignore[type-arg]
    sampler = ArgSampler(random.Random(0), Pools())
    for _ in range(50):
        args = sampler.sample(schema)
        assert validate_args(schema, args) is None, args
        assert set(schema["required"]) <= set(args)


_leaf = st.sampled_from([
    {"type": "string"}, {"type": "number"}, {"type": "integer"}, {"type": "boolean"},
    {"type": "string", "enum": ["a", "b c"]}, {"type": "integer", "minimum": -5, "maximum": 5},
    {"type": "string", "format": "date"}, {"type": "string", "maxLength": 8},
    {"type": "number", "minimum": 0.5, "maximum": 2.5}, {"type": "integer", "multipleOf": 3},
])
_node = st.recursive(_leaf, lambda inner: st.one_of(
    st.builds(lambda i: {"type": "array", "items": i}, inner),
    st.dictionaries(st.from_regex(r"[a-z]{1,6}", fullmatch=True), inner, min_size=1, max_size=3).map(
        lambda p: {"type": "object", "properties": p, "required": sorted(p)[: len(p) // 2 + 1]})), max_leaves=6)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(props=st.dictionaries(st.from_regex(r"[a-z_]{1,8}", fullmatch=True), _node, max_size=4), seed=st.integers(0, 99))
@example(props={"_": {"type": "object", "properties": {"url": {"type": "string", "maxLength": 8}},
                          "required": ["url"]}}, seed=0)  # a name whose shape (a URL) cannot fit the length
def test_fuzzed_schemas_always_give_valid_arguments(props: dict, seed: int) -> None:  # type: ignore[type-arg]
    schema = {"type": "object", "properties": props, "required": sorted(props)[::2]}
    args = ArgSampler(random.Random(seed), Pools()).sample(schema)
    assert validate_args(schema, args) is None


def test_an_impossible_schema_is_a_clear_error() -> None:
    with pytest.raises(SchemaError, match="maximum"):
        ArgSampler(random.Random(0)).sample({"type": "object", "properties": {"n": {"type": "integer", "minimum": 9,
                                                                                  "maximum": 2}}, "required": ["n"]})
    with pytest.raises(SchemaError, match=r"\$ref"):
        ArgSampler(random.Random(0)).sample({"type": "object", "properties": {"p": {"$ref": "#/$defs/none"}},
                                             "required": ["p"]})


def test_description_examples_and_server_values_are_candidates() -> None:
    assert description_examples("Zone (e.g., 'America/New_York', 'Europe/London').") == ["America/New_York",
                                                                                      "Europe/London"]
    pools = Pools(server=["notes/todo.txt"], hints={"path": ["hinted.md"]})
    got = {ArgSampler(random.Random(i), pools, tool="read").sample(
        {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]})["path"] for i in range(60)}
    assert {"notes/todo.txt", "hinted.md"} <= got


def test_server_values_that_are_not_path_shaped_stay_out_of_path_parameters() -> None:
    """A metadata result's timestamp, clock time or permission bits is a server value, but not a destination a user
    would name; a free-text parameter may still take it."""
    odd = ["Thu Nov 26 2026 15:29:48 GMT+0000 (Coordinated Universal Time)", "15:51:26", "755", "62.983"]
    assert [path_like(v) for v in odd] == [False] * 4
    assert all(path_like(v) for v in ["library/work", "green-curry.md", "my notes.txt", "C:\\data\\x.csv"])
    pools = Pools(server=[*odd, "library/travel"], tokens=odd)
    dest = {"type": "object", "properties": {"destination": {"type": "string"}}, "required": ["destination"]}
    got = {ArgSampler(random.Random(i), pools, tool="move").sample(dest)["destination"] for i in range(200)}
    assert "library/travel" in got and not got & set(odd)
    note = {"type": "object", "properties": {"label": {"type": "string"}}, "required": ["label"]}
    got = {ArgSampler(random.Random(i), pools, tool="tag").sample(note)["label"] for i in range(200)}
    assert got & set(odd)


def test_a_count_parameter_is_a_whole_number() -> None:
    head = {"type": "object", "properties": {"head": {"type": "number", "description": "Return only the first N lines"}},
            "required": ["head"]}
    price = {"type": "object", "properties": {"price": {"type": "number", "description": "Price in euros"}},
             "required": ["price"]}
    heads = [ArgSampler(random.Random(i)).sample(head)["head"] for i in range(100)]
    prices = [ArgSampler(random.Random(i)).sample(price)["price"] for i in range(100)]
    assert all(float(v).is_integer() for v in heads)
    assert any(not float(v).is_integer() for v in prices)


def test_a_source_that_keeps_failing_is_drawn_less() -> None:
    schema = {"type": "object", "properties": {"zone": {"type": "string", "description": "Zone, e.g. 'UTC'."}},
              "required": ["zone"]}
    pools = Pools()
    for _ in range(40):
        pools.credit("conv", {"zone": "vocab"}, False)
        pools.credit("conv", {"zone": "examples"}, True)
    picks = [ArgSampler(random.Random(i), pools, tool="conv").sample(schema)["zone"] for i in range(100)]
    assert picks.count("UTC") > 80


def test_harvest_entries_and_children() -> None:
    listing = "[DIR] notes\n[FILE] todo.txt\n[FILE] inbox.txt"
    assert entries(listing) == ["notes", "todo.txt", "inbox.txt"]
    assert entries("[DIR] notes") == ["notes"]  # one tagged line is a listing
    assert entries("Successfully wrote to a.txt") == []  # an acknowledgement is not
    assert entries("size: 4096\nisFile: false") == []  # fields of one thing are not a list
    assert harvest(listing)[:3] == ["notes", "todo.txt", "inbox.txt"]
    tree = json.dumps([{"name": "notes", "type": "directory", "children": [{"name": "todo.txt", "type": "file"}]}])
    assert "notes/todo.txt" in harvest(tree)
    assert children("notes", "todo.txt") == "notes/todo.txt"
    assert children(".", "notes") == "notes"
    assert children("notes", "a b") is None
    assert sandbox_relative("wrote /tmp/box-1/notes/a.txt in /tmp/box-1", ["/tmp/box-1"]) == \
        "wrote notes/a.txt in {rollout_dir}"


TOOL = {"type": "function", "function": {
    "name": "convert_time", "description": "Convert time between timezones. Uses IANA names.",
    "parameters": {"type": "object", "properties": {
        "source_timezone": {"type": "string", "description": "Source IANA timezone name (e.g., 'America/New_York')."},
        "time": {"type": "string", "description": "Time to convert in 24-hour format (HH:MM)"},
        "say \"hi\"": {"type": "string"}, "n": {"type": "number"}, "flag": {"type": "boolean"}},
        "required": ["source_timezone", "time"]}}}


def test_every_prompt_style_states_each_value_as_the_call_writes_it() -> None:
    args = {"source_timezone": "Asia/Tokyo", "time": "09:30", "say \"hi\"": 'a "quoted" word', "n": 2.5, "flag": True}
    for style in range(5):
        p = T.call_prompt(TOOL, args, random.Random(style), style=style)
        for v in args.values():
            assert json.dumps(v, ensure_ascii=False) in p, (style, p)
    chain = T.chain_prompt([(TOOL, {"time": "01:00"}, {}), (TOOL, {"time": "x"}, {"time": T.ref_phrase(0, 3)})],
                           random.Random(0))
    assert chain.startswith("First, ") and "the first entry of that result" in chain and '"x"' not in chain
    assert T.imperative("Returns the sum of two numbers") == "return the sum of two numbers"
    assert T.imperative("Searches files") == "search files"
    assert T.first_clause("Source IANA timezone name (e.g., 'America/New_York').") == "Source IANA timezone name"


def _task(i: int, calls: list, answer: str | None = None) -> dict:  # type: ignore[type-arg]
    return {"id": f"t{i}", "prompt": " ".join(json.dumps(v[0]) for c in calls for v in c["arguments"].values()),
            "expected_calls": calls, "answer": answer, "kind": "+".join(c["name"] for c in calls) or "none"}


def test_split_holds_values_out_and_the_check_catches_a_leak() -> None:
    schemas = {"f": {"type": "object", "properties": {"s": {"type": "string"}, "m": {"type": "string", "enum": ["x"]}}},
               "g": {"type": "object", "properties": {"n": {"type": "number"}}}}
    tasks = [_task(i, [{"name": "f", "arguments": {"s": [f"v{i % 50}"], "m": ["x"]}}]) for i in range(300)]
    tasks += [_task(300 + i, [{"name": "g", "arguments": {"n": [i % 40]}}]) for i in range(200)]
    held, combos = assign_split(tasks, schemas, 0.25, 0.05, seed=0)
    train = [t for t in tasks if t["split"] == "train"]
    heldout = [t for t in tasks if t["split"] == "heldout"]
    assert train and heldout and "s:x" not in held  # enum values are never held out
    train_values = {v for t in train for v in task_values(t, schemas)}
    assert not train_values & {v for t in heldout for v in task_values(t, schemas) if v in held}
    check_split(train, heldout, held, combos, schemas)
    leaked = dict(heldout[0], id="leak")
    with pytest.raises(AssertionError, match="held-out value"):
        check_split([*train, leaked], heldout, held, combos, schemas)
    assert free_values({"s": "a", "m": "x", "l": [1, True]}, {"properties": {"m": {"enum": ["x"]}}}) == ["a", 1]


def test_repeated_tasks_are_dropped_once_and_against_an_extended_set() -> None:
    """A fixture with three folders gives the same call in the same template again and again; each task is written
    once, and a task an extended set already has is not written again."""
    call = [{"name": "f", "arguments": {"s": ["library/work"]}}]
    a, b = _task(0, call), _task(1, call)  # same prompt, same calls, other ids and splits
    b["split"] = "heldout"
    other_prompt = dict(_task(2, call), prompt="Call f with s = \"library/work\".")
    other_call = _task(3, [{"name": "f", "arguments": {"s": ["library/travel"]}}])
    kept, dropped = distinct([a, b, other_prompt, other_call, dict(a)])
    assert kept == [a, other_prompt, other_call] and dropped == 2
    kept, dropped = distinct([a, other_call], earlier={task_key(dict(other_call, id="train-9"))})
    assert kept == [a] and dropped == 1
    assert task_key(a) != task_key(dict(a, expected_calls=[{"name": "f", "arguments": {"s": ["library"]}}]))
    # an extended set's tasks were written with the --field values the new ones get only when written
    written = dict(other_call, id="train-9", fixture="shop")
    kept, dropped = distinct([a, other_call], earlier={task_key(written)}, fields={"fixture": "shop"})
    assert kept == [a] and dropped == 1
    assert distinct([other_call], earlier={task_key(written)})[1] == 0  # without that field it is another task


def test_an_earlier_held_out_file_stays_out_of_training_whatever_the_hash() -> None:
    """`--extend`: the held-out values and tool pairs of an existing set are held out on top of this run's own split."""
    schemas = {"f": {"type": "object", "properties": {"s": {"type": "string"}}},
               "g": {"type": "object", "properties": {"s": {"type": "string"}}}}
    tasks = [_task(i, [{"name": "f", "arguments": {"s": [f"v{i}"]}}]) for i in range(200)]
    tasks += [_task(200 + i, [{"name": "f", "arguments": {"s": [f"w{i}"]}},
                              {"name": "g", "arguments": {"s": [f"w{i}"]}}]) for i in range(40)]
    old = [_task(900, [{"name": "f", "arguments": {"s": ["v7"]}}]),
           _task(901, [{"name": "f", "arguments": {"s": ["v7x"]}}, {"name": "g", "arguments": {"s": ["v8x"]}}]),
           _task(902, [{"name": "f", "arguments": {"s": ["v5"]}}, {"name": "f", "arguments": {"s": ["v7"]}}])]
    old_train = [_task(903, [{"name": "f", "arguments": {"s": ["v5"]}}, {"name": "f", "arguments": {"s": ["v6"]}}])]
    fixed = avoided(old, old_train, schemas)  # v5 and the pair f, f were in the old training set: still usable
    assert fixed == ({"s:v7", "s:v7x", "s:v8x"}, {("f", "g")})
    quoting = dict(_task(950, [{"name": "f", "arguments": {"s": ["v9"]}}]), prompt='Use "v9", not "v7x".')
    tasks.append(quoting)
    plain_held, _ = assign_split(tasks, schemas, 0.01, 0.05, seed=0)
    assert "s:v7" not in plain_held and tasks[7]["split"] == "train"  # by its hash alone v7 would train
    held, combos = assign_split(tasks, schemas, 0.01, 0.05, seed=0, fixed=fixed)
    assert fixed[0] <= held and ("f", "g") in combos
    assert tasks[7]["split"] == "heldout" and quoting["split"] == "heldout"  # the value, and a prompt quoting one
    assert all(t["split"] == "heldout" for t in tasks[200:240])  # the pair f then g
    train = [t for t in tasks if t["split"] == "train"]
    assert len(train) >= 190
    check_split(train, [t for t in tasks if t["split"] == "heldout"], held, combos, schemas)
    # a value the earlier set trains on is not held out by its hash: the new held-out tasks hold out of both sets
    by_hash = sorted(plain_held)
    assert by_hash
    again, _ = assign_split(tasks, schemas, 0.01, 0.05, seed=0, fixed=fixed, seen=({by_hash[0]}, set()))
    assert by_hash[0] not in again and again == held - {by_hash[0]}


def test_answers_name_the_field_that_varies() -> None:
    atts = []
    for i in range(6):
        res = json.dumps({"source": {"tz": "UTC", "time": f"0{i}:00"}, "target": {"time": f"1{i}:30"}, "dst": False})
        atts.append(Attempt(i, steps=[("conv", {"time": f"0{i}:00"}, res)]))
    fields = answer_fields(atts)
    assert fields == {"conv": ("target", "time")}  # source.time echoes the argument, dst is a flag
    assert pick_answer(atts[2].steps[0][2], fields["conv"], 160) == ("12:30", "target time")
    assert pick_answer("line one\n" + "x" * 300, None, 160) == ("line one", None)
    assert pick_answer("y" * 300, None, 160) == (None, None)


def test_correct_reads_the_answer_from_this_rollouts_result() -> None:
    task = {"expected_calls": [{"name": "conv", "arguments": {"t": ["01:00"]}}], "answer": "2026-01-01T10:00",
            "answer_field": ["target", "datetime"]}
    call = SimpleNamespace(name="conv", arguments={"t": "01:00"}, exec_ok=True,
                           result=json.dumps({"target": {"datetime": "2026-01-02T10:00"}}))
    said = [{"role": "assistant", "content": "<answer>2026-01-02T10:00</answer>"}]
    assert correct(task, said, [call]) == 1.0  # the live result, not yesterday's stored answer
    wrong = SimpleNamespace(name="conv", arguments={"t": "02:00"}, exec_ok=True, result=call.result)
    assert correct(task, said, [wrong]) == 0.0
    none = {"expected_calls": [], "answer": "apple river"}
    assert correct(none, [{"role": "assistant", "content": "<answer>apple river</answer>"}], []) == 1.0
    unanswered = {"expected_calls": task["expected_calls"], "answer": None}
    assert correct(unanswered, [], [call]) == 1.0 and correct(unanswered, [], [wrong]) == 0.0


def test_derived_config_keeps_paths_working_from_another_folder(tmp_path: Path) -> None:
    src = Path(__file__).resolve().parents[1] / "examples" / "own_server" / "env.toml"
    tasks = tmp_path / "t.jsonl"
    tasks.write_text(json.dumps({"prompt": "x", "expected_calls": []}) + "\n")
    dest = derive_config(src, tmp_path / "sub" / "env.json", tasks, [{"type": "call_match", "weight": 1.0}])
    cfg = json.loads(dest.read_text())
    assert Path(cfg["server"]["command"][0]).is_absolute()
    assert cfg["server"]["command"][0].endswith("mcp-server-filesystem")
    assert Path(cfg["server"]["fixtures"][0]["src"]).is_dir()
    assert cfg["tasks"]["path"] == str(tasks.resolve()) and cfg["rewards"] == [{"type": "call_match", "weight": 1.0}]


def test_generated_rewards_take_exact_or_partial_call_credit(tmp_path: Path) -> None:
    """`toolgym tasks train --call-reward`: the derived env's call term is the one chosen; a wrong name is refused
    by the library and by the CLI (exit 2, naming the choices) before anything runs."""
    import subprocess
    import sys

    from toolgym.train.recipe import generated_rewards

    assert [r["type"] for r in generated_rewards()] == ["python", "call_match"]
    assert generated_rewards("call_similarity")[1] == {"type": "call_similarity", "weight": 0.5}
    with pytest.raises(ValueError, match="call_match, call_similarity"):
        generated_rewards("call_matches")
    cfg = tmp_path / "env.toml"
    cfg.write_text('[server]\ncommand = ["x"]\n[tasks]\npath = "t.jsonl"\n[[rewards]]\ntype = "call_match"\n')
    proc = subprocess.run([sys.executable, "-m", "toolgym.cli", "tasks", "train", str(cfg), "-o", str(tmp_path / "r"),
                           "--call-reward", "vibes"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "call_match, call_similarity" in proc.stdout + proc.stderr
    assert not (tmp_path / "r").exists()


def test_trivial_players_score_what_they_should() -> None:
    call = {"name": "f", "arguments": {"s": ["a"]}}
    train = [_task(i, [call]) for i in range(5)] + [_task(9, [])]
    held = [_task(10, [call]), _task(11, [{"name": "f", "arguments": {"s": ["b"]}}]), _task(12, [])]
    b = trivial_baselines(train, held)
    assert b["majority call"]["call_match"] == 0.5 and b["abstain"]["abstain_ok"] == 1.0
    assert b["_n"] == {"tool_tasks": 2, "none_tasks": 1}


def test_the_copy_player_reads_the_template_not_the_request() -> None:
    from toolgym.train.recipe import copy_player

    tools = [TOOL, {"type": "function", "function": {"name": "get-sum", "description": "Returns the sum of two numbers",
                                                       "parameters": {"properties": {"a": {}, "b": {}}}}}]
    task = {"prompt": 'Call get-sum with a = 3 and b = 4.5.', "expected_calls": [{"name": "get-sum", "arguments": {}}]}
    assert copy_player(task, tools, None) == [{"name": "get-sum", "arguments": {"a": 3, "b": 4.5}}]
    described = {"prompt": 'Returns the sum of two numbers: a 1, b 2.', "expected_calls": []}
    assert copy_player(described, tools, None)[0]["name"] == "get-sum"
    assert copy_player({"prompt": 'Say "hi".', "expected_calls": []}, tools, None) == []
    train = [{"prompt": "x", "expected_calls": [{"name": "get-sum", "arguments": {"a": [1], "b": [2]}}]}]
    held = [dict(task, expected_calls=[{"name": "get-sum", "arguments": {"a": [3], "b": [4.5]}}]),
            {"prompt": 'Say "hi".', "expected_calls": []}]
    assert trivial_baselines(train, held, tools)["copy"] == {"call_match": 1.0, "abstain_ok": 1.0}


def test_heldout_rates_count_errored_rollouts_as_failures() -> None:
    """An errored rollout is a failure in every rate its task falls under (never dropped from n); a rate over no
    task is null, so report.json stays valid JSON."""
    from toolgym.train.recipe import rates
    from toolgym.types import Trajectory

    call = {"name": "f", "arguments": {"s": ["new"]}}
    ok = Trajectory(example_id=0, task={"expected_calls": [call]}, metrics={"call_match": 1.0}, rewards={"correct": 1.0})
    bad = Trajectory(example_id=1, task={"expected_calls": [call]}, metrics={"call_match": 1.0}, error="KeyError: x")
    r = rates([ok, bad], seen={"old"})
    assert r["call_match"]["n"] == 2 and r["call_match"]["rate"] == 0.5
    assert r["unseen_string_call_match"]["n"] == 2 and r["correct"]["rate"] == 0.5
    assert r["errors"]["rate"] == 0.5 and r["errors"]["n"] == 2
    assert r["abstain_ok"] == {"rate": None, "n": 0, "lo": None, "hi": None}
    assert r["ref_calls"]["n"] == 0
    json.loads(json.dumps(r, allow_nan=False))
    ref = Trajectory(example_id=2, task={"expected_calls": [call, call], "kind": "f+f (ref)"}, metrics={"call_match": 0.0})
    r = rates([ok, bad, ref])
    assert r["ref_calls"] == {"rate": 0.0, "n": 1, "lo": 0.0, "hi": r["ref_calls"]["hi"]} and r["two_calls"]["n"] == 1


def test_extend_names_a_missing_or_wrong_tasks_file_before_generating(tmp_path: Path) -> None:
    """`--extend` reads the set's two files first: a missing one or rows without `expected_calls` exit 2 with the
    path (no server is started, nothing is written)."""
    from typer.testing import CliRunner

    from toolgym.tasks.cli import app

    env = Path(__file__).resolve().parents[1] / "examples" / "own_server" / "env.toml"
    out = tmp_path / "more.jsonl"
    res = CliRunner().invoke(app, ["generate", str(env), "-o", str(out), "--extend", str(tmp_path / "none.jsonl")])
    assert res.exit_code == 2 and "none.jsonl" in res.output and not out.exists()
    (tmp_path / "bad.jsonl").write_text('{"prompt": "hi"}\n')
    (tmp_path / "bad.heldout.jsonl").write_text("")
    res = CliRunner().invoke(app, ["generate", str(env), "-o", str(out), "--extend", str(tmp_path / "bad.jsonl")])
    assert res.exit_code == 2 and "not a tasks file" in res.output and not out.exists()


def test_the_committed_extra_tasks_keep_out_of_the_committed_held_out_set() -> None:
    """`examples/own_server/tasks.more.jsonl` (made with `--extend` on the committed set, docs: "Twice the generated
    tasks") joined to the committed training tasks: no held-out value or tool pair in training, ids unique. The
    filesystem server's schemas have no enums, so every argument counts as a free value here (no server needed)."""
    folder = Path(__file__).resolve().parents[1] / "examples" / "own_server"
    train, heldout, more = ([json.loads(x) for x in (folder / name).open() if x.strip()]
                            for name in ("tasks.jsonl", "tasks.heldout.jsonl", "tasks.more.jsonl"))
    assert len(more) == 2000 and all(t["split"] == "train" for t in more)
    values, combos = avoided(heldout, train, {})
    assert len(values) > 100 and combos  # the committed split holds values and tool pairs out
    check_split(train + more, heldout, values, combos, {})
    ids = [t["id"] for t in train + more + heldout]
    assert len(ids) == len(set(ids))


def test_request_steps_cuts_a_chain_prompt_into_one_piece_per_call() -> None:
    tool = {"type": "function", "function": {"name": "move_file", "description": "Move or rename files.",
                                             "parameters": {"type": "object", "properties": {
                                                 "source": {"type": "string"}, "destination": {"type": "string"}}}}}
    for seed in range(40):  # every phrasing of each step, with a ref step in the middle
        rng = random.Random(seed)
        steps = [(tool, {"source": "a. b.md", "destination": "x/y"}, {}),
                 (tool, {"source": "z", "destination": "w"}, {"destination": T.ref_phrase(1, 3)}),
                 (tool, {"source": "Then; 2", "destination": "q"}, {})]
        prompt = T.chain_prompt(steps, rng)
        calls = [{"name": "move_file", "arguments": {k: [v] for k, v in a.items()}} for _, a, _ in steps]
        pieces = T.request_steps(prompt, calls)
        assert pieces is not None and " ".join(pieces) == prompt, prompt
        assert pieces[0].startswith("First, ") and pieces[1].startswith("Then, "), pieces
        assert '"a. b.md"' in pieces[0] and '"x/y"' in pieces[0] and '"z"' in pieces[1] and '"w"' not in pieces[1]
        assert "that result" in pieces[1] and '"Then; 2"' in pieces[2] and '"q"' in pieces[2]
    one = [{"name": "f", "arguments": {"s": ["v"]}}]
    assert T.request_steps(' Call f with s = "v". ', one) == ['Call f with s = "v".']
    assert T.request_steps("", []) is None
    # nothing between two calls' values marks where one request ends: not cut
    two = [{"name": "f", "arguments": {"s": ["v"]}}, {"name": "f", "arguments": {"s": ["w"]}}]
    assert T.request_steps('Call f with "v" "w".', two) is None
    assert T.request_steps('Call f with "v", then with "w".', two) == ['Call f with "v"', 'then with "w".']


def test_quoting_teacher_thinks_each_calls_piece_before_the_call() -> None:
    import asyncio

    from toolgym.train.recipe import teacher_policy

    task = {"prompt": 'First, call f with s = "v". Then, call g (t "w"). Answer with it.', "answer": "ok",
            "expected_calls": [{"name": "f", "arguments": {"s": ["v"]}}, {"name": "g", "arguments": {"t": ["w"]}}]}

    async def play(quote: str) -> list:  # type: ignore[type-arg]
        session = teacher_policy(quote_steps=quote).open([], task)
        msgs: list = [{"role": "user", "content": task["prompt"]}]  # type: ignore[type-arg]
        turns = []
        for _ in range(3):
            turn = await session.act(msgs)
            turns.append(turn)
            msgs += [{"role": "assistant", "content": turn.content}, {"role": "tool", "content": "ok"}]
        return turns

    quoted, later, plain = asyncio.run(play("all")), asyncio.run(play("later")), asyncio.run(play("off"))
    assert [t.reasoning for t in quoted[:2]] == ['First, call f with s = "v".', 'Then, call g (t "w"). Answer with it.']
    assert [t.reasoning for t in later[:2]] == [None, 'Then, call g (t "w"). Answer with it.']
    assert not any(t.content for t in quoted[:2] + later[:2])
    assert [c.name for t in quoted[:2] for c in t.tool_calls] == ["f", "g"] and quoted[1].tool_calls[0].arguments == {"t": "w"}
    assert not quoted[2].tool_calls and quoted[2].content == "<answer>ok</answer>"
    assert [t.reasoning for t in plain[:2]] == [None, None] and plain[2].content == quoted[2].content
    with pytest.raises(ValueError, match="quote_steps must be one of"):
        teacher_policy(quote_steps="yes")


def test_paraphrases_through_an_endpoint_keep_values_and_make_no_repeats() -> None:
    """`--paraphrase` over real HTTP (`openai_stub`: a local OpenAI-compatible endpoint answering with the rewording
    this test gives it): a rewording is used when every stated value is still written exactly; one that drops a
    value, or that would make the task the same as another task of the run or of an extended set (`earlier`), is not
    used, and the task keeps its template prompt. `task_key` ignores `template_prompt`, so a repeat is found however
    each prompt was made."""
    import asyncio
    from collections import Counter
    from collections import defaultdict as dd

    from openai_stub import StubEndpoint

    from toolgym.tasks.generate import _paraphrase_all, openai_paraphraser

    def call(v: str) -> list[dict]:  # type: ignore[type-arg]
        return [{"name": "echo", "arguments": {"text": [v]}}]

    said = {'"a"': 'Please echo "a".', '"b"': 'Echo this for me: "b".', '"c"': "Echo the letter c."}

    def respond(n: int, body: dict) -> dict:  # type: ignore[type-arg]
        prompt = body["messages"][-1]["content"]
        text = next(v for k, v in said.items() if k in prompt)
        return {"choices": [{"index": 0, "message": {"role": "assistant", "content": text}}]}

    tasks = [{"prompt": 'Call echo with text = "a".', "expected_calls": call("a"), "kind": "echo"},
             {"prompt": 'Use the echo tool. Text: "a".', "expected_calls": call("a"), "kind": "echo"},  # same rewording
             {"prompt": 'Echo "b".', "expected_calls": call("b"), "kind": "echo"},  # an extended set has the rewording
             {"prompt": 'Echo "c".', "expected_calls": call("c"), "kind": "echo"}]  # the value is dropped
    earlier = {task_key({"prompt": 'Echo this for me: "b".', "expected_calls": call("b"), "kind": "echo",
                         "template_prompt": "anything", "id": "train-3"})}
    stats: dd[str, Counter[str]] = dd(Counter)
    with StubEndpoint(respond=respond) as ep:
        asyncio.run(_paraphrase_all(tasks, openai_paraphraser("m", ep.url), stats, earlier))
        assert len(ep.bodies) == 4 and ep.bodies[0]["model"] == "m"
    assert [t["prompt"] for t in tasks] == ['Please echo "a".', 'Use the echo tool. Text: "a".', 'Echo "b".', 'Echo "c".']
    assert tasks[0]["template_prompt"] == 'Call echo with text = "a".' and "template_prompt" not in tasks[1]
    assert stats["paraphrase"] == Counter(used=1, repeated=2, rejected=1)
    assert len({task_key(t) for t in tasks}) == 4
