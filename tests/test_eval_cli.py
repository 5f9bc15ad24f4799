"""`toolgym eval` end to end: a scripted player served through a local OpenAI-compatible endpoint (the real HTTP
policy path), retries with backoff, failover between base URLs, `--resume`, and the results folder."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from openai_stub import StubEndpoint, free_port
from typer.testing import CliRunner

from toolgym.cli import app
from tg_testutil import read_jsonl

runner = CliRunner()


def _eval(*args: str) -> tuple[int, str]:
    res = runner.invoke(app, ["eval", "tictactoe", *args], catch_exceptions=False)
    return res.exit_code, res.output


def test_eval_openai_endpoint_end_to_end(tmp_path: Path) -> None:
    out = tmp_path / "run"
    with StubEndpoint() as stub:
        code, text = _eval("-n", "3", "-r", "2", "-c", "3", "-m", "openai:stub-minimax", "--base-url", stub.url,
                           "-o", str(out), "-t", "0.7")
    assert code == 0, text
    assert "win/draw/loss: 0.0 / 100.0 / 0.0 %" in text
    recs = read_jsonl(out / "results.jsonl")
    assert sorted((r["example_id"], r["rollout_index"]) for r in recs) == [(i, r) for i in range(3) for r in range(2)]
    assert all(r["error"] is None and r["metrics"]["draw"] == 1.0 for r in recs)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["rollouts"] == 6 and summary["errors"] == 0
    assert summary["tool_accuracy"]["make_move"]["exec_ok"] == 1.0
    assert summary["policy_stats"]["requests"] == stub.served and summary["policy_stats"]["retries"] == 0
    assert (out / "rewards.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert json.loads((out / "run.json").read_text())["model"] == "openai:stub-minimax"
    # what went over the wire: the model-visible tools (no hidden tool, no game_id), sampling args, tool results
    body = stub.bodies[-1]
    assert body["model"] == "stub-minimax" and body["temperature"] == 0.7
    tools = {t["function"]["name"]: t["function"]["parameters"] for t in body["tools"]}
    assert set(tools) == {"make_move", "get_board"} and "game_id" not in tools["make_move"]["properties"]
    assert any(m["role"] == "tool" and "You played" in m["content"] for m in body["messages"])


def test_retries_with_backoff(tmp_path: Path) -> None:
    with StubEndpoint(fail_first=2) as stub:
        code, text = _eval("-n", "1", "-m", "openai:stub", "--base-url", stub.url, "-o", str(tmp_path / "r"),
                           "-a", "transport=inprocess", "--model-arg", "backoff_s=0.01")
    assert code == 0, text
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert summary["errors"] == 0 and summary["policy_stats"]["retries"] == 2
    assert stub.requests == stub.served + 2


def test_endpoint_errors_after_retries_are_rollout_errors(tmp_path: Path) -> None:
    with StubEndpoint(fail_first=10_000) as stub:
        code, text = _eval("-n", "2", "-m", "openai:stub", "--base-url", stub.url, "-o", str(tmp_path / "r"),
                           "-a", "transport=inprocess", "--model-arg", "backoff_s=0.001", "--model-arg", "max_retries=2")
    assert code == 3, text  # every rollout errored: the results are written, and the exit code says so
    assert text.strip().splitlines()[-1].startswith("error: all 2 rollouts errored: EndpointError x2")
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert summary["errors"] == 2 and summary["error_rate"] == 1.0 and stub.requests == 6
    assert "HTTP 503" in read_jsonl(tmp_path / "r" / "results.jsonl")[0]["error"]


def test_failover_to_live_endpoint(tmp_path: Path) -> None:
    dead = f"http://127.0.0.1:{free_port()}/v1"
    with StubEndpoint() as stub:
        code, text = _eval("-n", "4", "-c", "2", "-m", "openai:stub", "--base-url", f"{dead},{stub.url}",
                           "-o", str(tmp_path / "f"), "-a", "transport=inprocess", "--model-arg", "backoff_s=0.01")
    assert code == 0, text
    summary = json.loads((tmp_path / "f" / "summary.json").read_text())
    assert summary["rollouts"] == 4 and summary["errors"] == 0
    assert summary["policy_stats"]["failovers"] >= 1 and summary["policy_stats"]["endpoint_errors"] >= 1
    assert stub.served == summary["policy_stats"]["requests"] - summary["policy_stats"]["endpoint_errors"]


def test_an_overloaded_endpoint_fails_over_to_the_other(tmp_path: Path) -> None:
    """An endpoint that answers HTTP 503 (overloaded; a stub model, no real server) is retried on the other endpoint:
    that counts as a failover, though no transport error happened."""
    with StubEndpoint(fail_first=10_000) as busy, StubEndpoint() as ok:
        code, text = _eval("-n", "3", "-c", "1", "-m", "openai:stub", "--base-url", f"{busy.url},{ok.url}",
                           "-o", str(tmp_path / "o"), "-a", "transport=inprocess", "--model-arg", "backoff_s=0.01")
    assert code == 0, text
    stats = json.loads((tmp_path / "o" / "summary.json").read_text())["policy_stats"]
    assert busy.requests >= 1 and ok.served >= 3 and stats["endpoint_errors"] == 0
    assert stats["failovers"] >= 1 and stats["failovers"] <= stats["retries"]


def test_connect_failure_limit_is_set_from_the_command_line(tmp_path: Path) -> None:
    """`--model-arg max_connect_failures=N` reaches the policy: a refused endpoint listed before a live one stops the
    run at its first request with N=1 (the message counts the attempts), fails over and finishes with N=2, and N=0
    is a clear error."""
    dead = f"http://127.0.0.1:{free_port()}/v1"
    with StubEndpoint() as stub:
        args = ("-n", "2", "-c", "1", "-m", "openai:stub", "--base-url", f"{dead},{stub.url}", "-a",
                "transport=inprocess", "--model-arg", "backoff_s=0.01", "--model-arg")
        code, text = _eval(*args, "max_connect_failures=1", "-o", str(tmp_path / "one"))
        assert code == 2 and "1 connection attempts in a row failed" in text.replace("\n", " "), text
        assert stub.served == 0
        code, text = _eval(*args, "max_connect_failures=2", "-o", str(tmp_path / "two"))
        assert code == 0, text
        summary = json.loads((tmp_path / "two" / "summary.json").read_text())
        assert summary["errors"] == 0 and summary["policy_stats"]["failovers"] >= 1
        code, text = _eval(*args, "max_connect_failures=0", "-o", str(tmp_path / "zero"))
        assert code == 2 and "max_connect_failures must be >= 1" in text.replace("\n", " "), text


def test_resume_keeps_finished_rollouts(tmp_path: Path) -> None:
    out = tmp_path / "res"
    args = ("-n", "4", "-r", "1", "-m", "scripted:minimax", "-a", "transport=inprocess", "-o", str(out))
    code, text = _eval(*args)
    assert code == 0, text
    lines = (out / "results.jsonl").read_text().splitlines()
    recs = [json.loads(line) for line in lines]
    by_ex = {r["example_id"]: r for r in recs}
    # simulate a killed run: examples 0 and 1 finished (1 with an error, to be re-run), a torn line for example 2
    errored = dict(by_ex[1], error="RuntimeError: simulated")
    kept = [json.dumps(by_ex[0]), json.dumps(errored)]
    (out / "results.jsonl").write_text("\n".join(kept) + "\n" + json.dumps(by_ex[2])[:150])

    code, text = _eval(*args)  # without --resume: refuses to overwrite
    assert code == 2 and "--resume" in text

    code, text = _eval(*args, "--resume")
    assert code == 0, text
    after = (out / "results.jsonl").read_text().splitlines()
    assert after[0] == kept[0]  # the finished record untouched
    assert all(isinstance(json.loads(line), dict) for line in after)  # the torn line is gone: strict JSONL again
    new = read_jsonl(out / "results.jsonl")[1:]
    assert sorted(r["example_id"] for r in new) == [1, 2, 3]  # example 0 not re-run; the errored one is
    assert all(r["error"] is None for r in new)  # and its error record is gone: one record per rollout
    summary = json.loads((out / "summary.json").read_text())
    assert summary["rollouts"] == 4 and summary["errors"] == 0
    assert (out / "rewards.png").exists()

    code, text = _eval("-n", "5", "-r", "1", "-m", "scripted:minimax", "-a", "transport=inprocess", "-o", str(out),
                       "--resume")
    assert code == 2 and "different run" in text


def test_resume_checks_the_folder_before_loading_the_policy_and_says_what_is_done(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`--resume` of another run fails before any policy loads (no model load, no progress bar), with one line;
    `--resume` of a finished run says "N of M already done" first."""
    import toolgym.policies

    out = tmp_path / "res"
    args = ("-m", "scripted:minimax", "-a", "transport=inprocess", "-o", str(out))
    assert _eval("-n", "3", *args)[0] == 0
    loaded = []
    real = toolgym.policies.load_policy
    monkeypatch.setattr(toolgym.policies, "load_policy", lambda *a, **kw: loaded.append(a) or real(*a, **kw))
    for bad in (("-n", "4", *args, "--resume"), ("-n", "3", *args)):  # another run; results without --resume
        code, text = _eval(*bad)
        assert code == 2 and text.startswith("error: ") and len(text.strip().splitlines()) == 1, text
        assert "rollouts" not in text and "━" not in text  # no progress bar after the error
    assert loaded == []  # refused before the policy (a model: 9-15 s) was loaded
    code, text = _eval("-n", "3", *args, "--resume")
    assert code == 0 and text.startswith(f"--resume: 3 of 3 rollouts already done in {out}; running the other 0"), text
    lines = (out / "results.jsonl").read_text().splitlines()
    (out / "results.jsonl").write_text(lines[0] + "\n")
    code, text = _eval("-n", "3", *args, "--resume")
    assert code == 0 and "--resume: 1 of 3 rollouts already done" in text, text
    assert len((out / "results.jsonl").read_text().splitlines()) == 3


@pytest.mark.parametrize("env_name, model, key", [("sql", None, True), ("sql", "scripted:wrong", False),
                                                  ("tictactoe", "scripted:minimax", False)])
def test_every_summary_names_the_policy_and_flags_an_answer_key(tmp_path: Path, env_name: str, model: str | None,
                                                                  key: bool) -> None:
    """`toolgym eval sql` without -m runs the env's reference player, which reads each task's answer: the summary
    says so (output and summary.json), so its 1.0 is not mistaken for a model's score."""
    out = tmp_path / "ev"
    argv = ["eval", env_name, "-n", "2", "-o", str(out), *(["-m", model] if model else [])]
    if env_name == "tictactoe":
        argv += ["-a", "transport=inprocess"]
    res = runner.invoke(app, argv, catch_exceptions=False)
    assert res.exit_code == 0, res.output
    text = " ".join(res.output.split())
    name = model or "scripted:reference"
    assert f"policy: {name} sampling: none (a scripted player)" in text
    assert ("the env default" in text) == (model is None)
    assert ("answer key: this policy reads each task's expected answer, so these scores are the environment's "
            "ceiling, not a model's" in text) == key
    summary = json.loads((out / "summary.json").read_text())
    assert summary["policy"] == name and summary["answer_key"] is key


def test_resume_replaces_errored_rollouts_one_record_each(tmp_path: Path) -> None:
    """A run whose endpoint answered 503 to some rollouts (errors recorded), then --resume against a healthy one:
    results.jsonl ends with exactly one record per (example, rollout) -- the error rows superseded by the re-runs are
    gone, not left beside them -- every line is JSON, and the summary counts each rollout once."""
    out = tmp_path / "res"
    args = ("-n", "3", "-r", "2", "-c", "1", "-m", "openai:stub", "-a", "transport=inprocess", "-o", str(out),
            "--model-arg", "max_retries=0")
    with StubEndpoint(fail_first=2) as stub:  # the first two requests fail: the first two rollouts error
        code, text = _eval(*args, "--base-url", stub.url)
    assert code == 0, text
    first = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert len(first) == 6 and sum(r["error"] is not None for r in first) == 2
    with (out / "results.jsonl").open("a") as f:
        f.write(json.dumps(first[-1])[:120])  # and a torn line, as a killed writer leaves
    with StubEndpoint() as stub:
        code, text = _eval(*args, "--base-url", stub.url, "--resume")
    assert code == 0, text
    recs = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]  # strict: no torn line
    keys = [(r["example_id"], r["rollout_index"]) for r in recs]
    assert sorted(keys) == [(i, r) for i in range(3) for r in range(2)]  # each pair exactly once
    assert all(r["error"] is None for r in recs) and stub.served > 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["rollouts"] == 6 and summary["errors"] == 0


@pytest.mark.parametrize(("args", "message"), [
    (("-m", "nosuch:thing"), "unknown policy scheme"),
    (("-m", "scripted:nobody"), "unknown scripted player"),
    (("-n", "-1"), "must be >= 0"),
    (("-r", "0"), "-r and -c >= 1"),
    (("-a", "transport=pigeon"), "transport='pigeon': Input should be"),
    (("-m", "hf:/nonexistent/model"), "no such model folder"),
    (("-m", "hf:./runs/no-such-run/final"), "no such model folder"),
    (("-m", "hf:not a model!"), "neither a local model folder nor a hub id"),
])
def test_eval_bad_options_fail_clearly(tmp_path: Path, args: tuple[str, ...], message: str) -> None:
    code, text = _eval(*args, "-o", str(tmp_path / "x"))
    assert code == 2 and message in text.replace("\n", " ")


CHECKPOINT = Path(__file__).resolve().parents[1] / "envs/tictactoe/toolgym_tictactoe/checkpoint"


@pytest.mark.parametrize(("uri", "arg", "closest"), [
    (f"hf:{CHECKPOINT}", "tempreature=0.5", "temperature"),
    (f"vllm:{CHECKPOINT}", "max_model_length=512", "max_model_len"),
    ("vllm-server:some-model", "served_name=x", "served_model_name"),
    ("openai:some-model", "max_retires=1", "max_retries"),
    ("scripted:minimax", "tempreature=0.5", "temperature"),  # sampling options: accepted by every policy
    ("scripted:imperfect", "mistake_pro=0.3", "mistake_prob"),
    ("scripted:minimax", "base_url=http://x", None),  # an endpoint option means nothing to a scripted player
])
def test_an_unknown_policy_option_fails_naming_the_closest(tmp_path: Path, uri: str, arg: str,
                                                           closest: str | None) -> None:
    """A misspelled `--model-arg` is an error on one line naming the closest valid option, for every scheme (checked
    before any model loads or endpoint is called), not an option silently dropped."""
    url = ("--base-url", "http://127.0.0.1:9/v1") if uri.startswith(("openai:", "vllm-server:")) else ()
    code, text = _eval("-m", uri, "--model-arg", arg, *url, "-o", str(tmp_path / "x"), "-a", "transport=inprocess")
    line = next(x for x in text.splitlines() if "error:" in x)
    hint = f"; did you mean {closest!r}?" if closest else ". Valid options: max_tokens, seed, temperature, think"
    assert code == 2 and f"unknown option {arg.split('=')[0]!r}{hint}" in line, text
    assert not (tmp_path / "x").exists()


def test_sampling_flags_reach_a_scripted_player_harmlessly(tmp_path: Path) -> None:
    """The flags the command line passes (-t, --top-p, --max-tokens, --seed) are sampling options every policy
    accepts: a scripted player that does not sample ignores them, and its own options still work."""
    code, text = _eval("-m", "scripted:imperfect", "-t", "0.7", "--top-p", "0.9", "--max-tokens", "50", "--seed", "3",
                       "--model-arg", "mistake_prob=0", "-n", "2", "-a", "transport=inprocess", "-o", str(tmp_path / "r"))
    assert code == 0, text
    assert "win/draw/loss" in text


def test_unknown_env_fails_clearly() -> None:
    res = runner.invoke(app, ["eval", "no-such-env"])
    assert res.exit_code == 2 and "unknown environment" in res.output


def test_backoff_grows_between_retries() -> None:
    """Three 503s on a single endpoint: the waits (backoff_s * 2**attempt * [0.5, 1.5)) add up to >= 0.35 s."""
    import asyncio
    import time

    from toolgym.policies.openai_http import OpenAIPolicy

    board = " 0 | 1 | 2\n---+---+---\n 3 | 4 | 5\n---+---+---\n 6 | 7 | 8\nYou are X."
    tools = [{"type": "function", "function": {"name": "make_move", "parameters": {"type": "object"}}}]

    async def go(url: str) -> tuple[dict, float, dict]:
        policy = OpenAIPolicy("stub", base_url=url, backoff_s=0.1, max_retries=3)
        t0 = time.perf_counter()
        try:
            data = await policy.complete([{"role": "user", "content": board}], tools)
        finally:
            await policy.aclose()
        return data, time.perf_counter() - t0, policy.stats

    with StubEndpoint(fail_first=3) as stub:
        data, elapsed, stats = asyncio.run(go(stub.url))
    assert data["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "make_move"
    assert stats["retries"] == 3 and stats["requests"] == 4 and elapsed >= 0.35


def test_envs_and_tools_commands() -> None:
    res = runner.invoke(app, ["envs"])
    assert res.exit_code == 0 and "tictactoe" in res.output.split()
    res = runner.invoke(app, ["tools", "tictactoe", "-a", "transport=inprocess"])
    assert res.exit_code == 0, res.output
    tools = {t["function"]["name"]: t["function"] for t in json.loads(res.output)}
    assert set(tools) == {"make_move", "get_board"} and "game_id" not in json.dumps(tools)


@pytest.mark.parametrize("command", [["serve", "tictactoe"], ["eval", "tictactoe", "-n", "1"]])
def test_missing_model_folder_is_named_not_a_hub_error(command: list[str]) -> None:
    """A local path that does not exist is 'no such model folder' in eval and serve (before: the hub client's
    complaint about repo-id characters, and a traceback from serve)."""
    res = runner.invoke(app, [*command, "-m", "hf:/nonexistent/model", "-a", "transport=inprocess"])
    assert res.exit_code == 2 and "no such model folder" in res.output.replace("\n", " "), res.output


def test_unreachable_endpoint_fails_the_run_at_once(tmp_path: Path) -> None:
    """Nothing listens at --base-url: one clear error, exit 2, no results folder full of errors."""
    out = tmp_path / "dead"
    code, text = _eval("-n", "6", "-m", "openai:some-model", "--base-url", f"http://127.0.0.1:{free_port()}/v1",
                       "-o", str(out))
    assert code == 2 and "cannot be reached" in text and "--base-url" in text
    assert not out.exists()
    dead = f"http://127.0.0.1:{free_port()}/v1"
    for argv in (["synth", "tictactoe", "-m", "openai:m", "--base-url", dead, "-o", str(tmp_path / "d.jsonl")],
                 ["serve", "tictactoe", "-m", "openai:m", "--base-url", dead]):  # fails before serving
        res = runner.invoke(app, argv)
        assert res.exit_code == 2 and "cannot be reached" in res.output, (argv, res.output)
    assert not (tmp_path / "d.jsonl").exists()


@pytest.mark.slow  # a benchmark, docs build or resume run: CI runs it (-m slow), the default suite not
def test_endpoint_dying_mid_run_stops_it_and_resume_completes_it(tmp_path: Path) -> None:
    """A real local endpoint serves a few games, then stops listening: the run stops with PolicyUnavailable after
    `max_connect_failures` refused connections (not one error per remaining rollout); a new endpoint on the same
    port and `evaluate(resume=True)` finish the run with every rollout present exactly once."""
    import asyncio

    from toolgym.eval import evaluate, read_results
    from toolgym.policies import PolicyUnavailable
    from toolgym.policies.openai_http import OpenAIPolicy
    from toolgym.registry import load_env

    out = tmp_path / "run"
    env = load_env("tictactoe", transport="inprocess")
    tasks = env.build_dataset(12, seed=0)
    stub = StubEndpoint()
    port, finished = stub.port, []

    def policy() -> OpenAIPolicy:
        return OpenAIPolicy("stub", base_url=f"http://127.0.0.1:{port}/v1", max_retries=3, backoff_s=0.01,
                            max_connect_failures=3, unavailable_after_s=0.0)

    def on_done(t: object) -> None:
        finished.append(t)
        if len(finished) == 4:
            stub.__exit__(None, None, None)  # the endpoint goes away mid-run (stopped and joined before going on)

    async def run(pol: OpenAIPolicy, resume: bool, cb: object = None) -> object:
        try:
            return await evaluate(env, pol, tasks, 1, 2, out, resume, {"env": "tictactoe"}, on_progress=cb)
        finally:
            await pol.aclose()
            await env.aclose()

    stub.__enter__()
    with pytest.raises(PolicyUnavailable, match="cannot be reached"):
        asyncio.run(run(policy(), False, on_done))
    first = read_results(out / "results.jsonl")
    assert 4 <= len(first) < 12 and all(t.error is None for t in first.values())  # no rows of errors
    with StubEndpoint(port=port):
        _, summary = asyncio.run(run(policy(), True))
    lines = (out / "results.jsonl").read_text().splitlines()
    assert all(isinstance(json.loads(line), dict) for line in lines)
    done = read_results(out / "results.jsonl")
    assert sorted(done) == [(i, 0) for i in range(12)] and all(t.error is None for t in done.values())
    ok_keys = [(r["example_id"], r["rollout_index"]) for r in map(json.loads, lines) if r["error"] is None]
    assert len(ok_keys) == len(set(ok_keys)) == 12  # none lost, none run twice
    assert summary["rollouts"] == 12 and summary["errors"] == 0
