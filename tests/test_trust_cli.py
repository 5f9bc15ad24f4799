"""Issue 30 through the command line as a user runs it (its own process): one-line errors naming the file, exit codes
and statistics that count every rollout, what a server's environment holds (allow-list, `${VAR}`, no secret in the
run folder), `error_patterns`, the reference player on an argument called `name`, and servers that die with a
SIGKILLed eval. Servers: the flaky test server (stdio, real MCP) and crashing/missing commands."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tg_testutil import FLAKY, read_jsonl

REWARDS = '''
def score(task):
    if task.get("boom"):
        raise KeyError("boom")
    return 1.0
'''


def toolgym(*args: str, env: dict[str, str] | None = None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "toolgym.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "COLUMNS": "100", **(env or {})})


def _config(tmp_path: Path, tasks: list[dict], server: str = "", extra: str = "", name: str = "env.toml") -> Path:
    (tmp_path / "tasks.jsonl").write_text("".join(json.dumps(t) + "\n" for t in tasks))
    (tmp_path / "rewards_mod.py").write_text(REWARDS)
    p = tmp_path / name
    p.write_text(f'name = "trust"\n[server]\ncommand = ["{sys.executable}", "{FLAKY}"]\n{server}'
                 '[tasks]\npath = "tasks.jsonl"\n[[rewards]]\ntype = "python"\nfunction = "rewards_mod:score"\n'
                 + extra)
    return p


# ------------------------------------------------------------------------------------------------ one-line errors
def _cases(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    """name -> (config, words the error must hold)"""
    (tmp_path / "tasks.jsonl").write_text('{"prompt": "hi"}\n')
    (tmp_path / "badline.jsonl").write_text('{"prompt": "a"}\n{"prompt": "b",\n')
    head = 'name = "e"\n[server]\n'
    tail = '[tasks]\npath = "{tasks}"\n[[rewards]]\ntype = "call_match"\n'
    files = {
        "no such command": (head + 'command = ["mcp-server-does-not-exist"]\n' + tail.format(tasks="tasks.jsonl"),
                            "env.toml:3: server.command: command 'mcp-server-does-not-exist' not found"),
        "crashes at start": (head + f'command = ["{sys.executable}", "-c", "import sys; print(\'bad config: no '
                                    'port\', file=sys.stderr); sys.exit(3)"]\n' + tail.format(tasks="tasks.jsonl"),
                             "exited while starting: bad config: no port (log: "),
        "bad tasks path": (head + f'command = ["{sys.executable}", "{FLAKY}"]\n' + tail.format(tasks="nope.jsonl"),
                           "env.toml:5: task file"),
        "bad JSONL line": (head + f'command = ["{sys.executable}", "{FLAKY}"]\n' + tail.format(tasks="badline.jsonl"),
                           "badline.jsonl:2: not valid JSON"),
        "malformed TOML": (head + 'command = ["x"\n' + tail.format(tasks="tasks.jsonl"),
                           "env.toml:4:1: invalid TOML: Unclosed array"),
        "unknown key": (head + 'comand = ["x"]\n' + tail.format(tasks="tasks.jsonl"),
                        "env.toml:3: server.comand: unknown key (did you mean 'command'?)"),
        "unset ${VAR}": (head + f'command = ["{sys.executable}", "{FLAKY}"]\nenv = {{ TOKEN = "${{TG_UNSET_VAR}}" }}\n'
                         + tail.format(tasks="tasks.jsonl"),
                         "env.toml:4: server.env.TOKEN: ${TG_UNSET_VAR} is not set in your environment"),
    }
    out = {}
    for i, (name, (text, words)) in enumerate(files.items()):
        d = tmp_path / f"case{i}"
        d.mkdir(exist_ok=True)
        for f in ("tasks.jsonl", "badline.jsonl"):
            (d / f).write_text((tmp_path / f).read_text())
        (d / "env.toml").write_text(text)
        out[name] = (d / "env.toml", words)
    return out


@pytest.mark.parametrize("command", ["eval", "check"])
def test_each_config_connection_and_task_file_failure_is_at_most_three_lines(tmp_path: Path, command: str) -> None:
    """Before: 313, 348, 24 and 75 lines of traceback (missing command, crash at start, bad tasks path, bad JSONL
    line), a TOML error without the file, a 6-line pydantic dump for an unknown key. Now each is at most 3 lines, the
    error line naming the file (and line), exit code 2, no traceback; `--debug` adds the traceback."""
    for name, (cfg, words) in _cases(tmp_path).items():
        res = toolgym(command, str(cfg), *(["-o", str(cfg.parent / "run")] if command == "eval" else []))
        text = (res.stdout + res.stderr).strip()
        assert res.returncode == 2, (name, text)
        assert len(text.splitlines()) <= 3, (name, text)
        assert "Traceback" not in text and "╭" not in text, (name, text)
        error = next(x for x in text.splitlines() if x.startswith("error: "))
        assert str(cfg.parent) in error and words in error, (name, error)
    cfg, _ = _cases(tmp_path)["bad JSONL line"]
    res = toolgym(command, str(cfg), "--debug", *(["-o", str(tmp_path / "dbg")] if command == "eval" else []))
    assert res.returncode == 2 and "Traceback" in res.stdout + res.stderr


# ------------------------------------------------------------------------------------------------ statistics
def test_one_errored_rollout_of_five_counts_as_a_failure(tmp_path: Path) -> None:
    tasks = [{"prompt": f"t{i}", "answer": "x", **({"boom": True} if i == 2 else {})} for i in range(5)]
    out = tmp_path / "run"
    res = toolgym("eval", str(_config(tmp_path, tasks)), "-o", str(out))
    assert res.returncode == 0, res.stdout + res.stderr
    s = json.loads((out / "summary.json").read_text())
    assert s["errors"] == 1 and s["error_rate"] == pytest.approx(0.2)
    assert s["reward"]["mean"] == pytest.approx(0.8) and s["reward"]["n"] == 5  # not 1.0 over n = 4
    assert s["pass_at_k"]["1"] == pytest.approx(0.8)
    assert "5 rollouts, 1 errored = 20.0 %" in res.stdout and "errored rollouts" in res.stdout
    # --fail-on-error: 20 % errored is above 10 %: exit 3, the results are written all the same
    res = toolgym("eval", str(_config(tmp_path, tasks)), "-o", str(tmp_path / "strict"), "--fail-on-error", "0.1")
    assert res.returncode == 3 and (tmp_path / "strict" / "summary.json").exists()
    assert res.stdout.strip().splitlines()[-1].startswith("error: 1 of 5 rollouts errored (20.0 % > --fail-on-error")


def test_every_rollout_errored_exits_non_zero_with_one_line(tmp_path: Path) -> None:
    tasks = [{"prompt": f"t{i}", "answer": "x", "boom": True} for i in range(4)]
    out = tmp_path / "run"
    res = toolgym("eval", str(_config(tmp_path, tasks)), "-o", str(out))
    assert res.returncode == 3, res.stdout + res.stderr
    last = res.stdout.strip().splitlines()[-1]
    assert last.startswith("error: all 4 rollouts errored: reward function 'score' raised KeyError x4"), last
    s = json.loads((out / "summary.json").read_text())
    assert s["reward"]["mean"] == 0.0 and s["error_rate"] == 1.0  # a number, not nan
    assert len(read_jsonl(out / "results.jsonl")) == 4
    # a user who expects failures can say so
    res = toolgym("eval", str(_config(tmp_path, tasks)), "-o", str(tmp_path / "ok"), "--fail-on-error", "1")
    assert res.returncode == 0


# ------------------------------------------------------------------------------------------------ environment
def test_server_environment_allow_list_var_expansion_and_no_secret_in_the_run_folder(tmp_path: Path) -> None:
    """A server gets the base variables only, unless `env_passthrough` names more; `${VAR}` in `env` is expanded from
    the caller's environment when the server starts; the secret's value is written nowhere in the run folder. The
    reference player calls `env_length(name=...)`: an argument called `name` (it crashed every rollout before)."""
    secret = "s3cr3t-Value-4242"
    tasks = [{"prompt": "t", "answer": "x", "var": v, "expected_calls": [{"name": "env_length",
                                                                          "arguments": {"name": [v]}}]}
             for v in ("TG_TEST_SECRET", "TG_TEST_OTHER", "TOKEN", "HOME")]
    caller = {"TG_TEST_SECRET": secret, "TG_TEST_OTHER": "abc"}

    def lengths(server: str, name: str) -> dict[str, str]:
        out = tmp_path / name
        res = toolgym("eval", str(_config(tmp_path, tasks, server=server, name=f"{name}.toml")), "-o", str(out),
                      env=caller)
        assert res.returncode == 0, res.stdout + res.stderr
        recs = read_jsonl(out / "results.jsonl")
        assert all(r["error"] is None for r in recs)
        for f in out.rglob("*"):
            if f.is_file():
                assert secret.encode() not in f.read_bytes(), f
        return {r["task"]["var"]: r["calls"][0]["result"] for r in recs}

    default = lengths("", "default")
    assert default == {"TG_TEST_SECRET": "unset", "TG_TEST_OTHER": "unset", "TOKEN": "unset",
                       "HOME": str(len(os.environ["HOME"]))}
    allowed = lengths('env_passthrough = ["TG_TEST_OTH*"]\nenv = { TOKEN = "${TG_TEST_SECRET}" }\n', "allowed")
    assert allowed == {"TG_TEST_SECRET": "unset", "TG_TEST_OTHER": "3", "TOKEN": str(len(secret)),
                       "HOME": str(len(os.environ["HOME"]))}


# ------------------------------------------------------------------------------------------------ error_patterns
def test_error_patterns_make_text_errors_failed_calls(tmp_path: Path) -> None:
    tasks = [{"prompt": "t", "answer": "x", "expected_calls": [{"name": "echo", "arguments": {"text": [t]}}]}
             for t in ("Error: no such table", "all good", "Database error: near FROM")]

    texts = [t["expected_calls"][0]["arguments"]["text"][0] for t in tasks]

    def exec_ok(server: str, name: str) -> list[bool]:
        """exec_ok per task, in task order (results.jsonl is written in completion order)."""
        out = tmp_path / name
        res = toolgym("eval", str(_config(tmp_path, tasks, server=server, name=f"{name}.toml")), "-o", str(out))
        assert res.returncode == 0, res.stdout + res.stderr
        recs = read_jsonl(out / "results.jsonl")
        by_text = {r["calls"][0]["arguments"]["text"]: r["calls"][0]["exec_ok"] for r in recs}
        return [by_text[t] for t in texts]

    assert exec_ok("", "plain") == [True, True, True]  # the server's error flag alone: every text "ran"
    assert exec_ok('error_patterns = ["^Error:", "^Database error"]\n', "patterns") == [False, True, False]


# ------------------------------------------------------------------------------------------------ SIGKILL
def _cmdline(p: psutil.Process) -> str:
    """A process's command line, or "" for one that exited meanwhile (gone, or a zombie not yet reaped)."""
    try:
        return " ".join(p.cmdline())
    except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
        return ""


def test_servers_die_with_a_sigkilled_eval(tmp_path: Path) -> None:
    """Issue 30: after SIGKILL of the eval its servers were orphaned. A stdio server notices its closed stdin, but
    not while it is busy in a blocking call (`block`: 60 s); the kernel now SIGTERMs each server when the eval dies
    (PR_SET_PDEATHSIG): none is alive 10 s later."""
    tasks = [{"prompt": f"t{i}", "answer": "x", "expected_calls": [{"name": "block", "arguments": {"seconds": [60]}}]}
             for i in range(6)]
    cfg = _config(tmp_path, tasks, server='scope = "rollout"\nprestart = 2\n')
    proc = subprocess.Popen([sys.executable, "-m", "toolgym.cli", "eval", str(cfg), "-c", "4", "-o",
                             str(tmp_path / "run")], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        servers: list[psutil.Process] = []
        while time.monotonic() < deadline:
            servers = [p for p in psutil.Process(proc.pid).children(recursive=True) if str(FLAKY) in _cmdline(p)]
            if len(servers) >= 5:  # 4 rollouts in flight + the warm pool
                break
            time.sleep(0.2)
        assert len(servers) >= 5, "the eval did not start its servers"
        time.sleep(0.5)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    gone, alive = psutil.wait_procs(servers, timeout=10)
    assert not alive, [p.pid for p in alive]
