"""Per-rollout sandboxes (`toolgym.sandbox`, `ServerSpec` placeholders and fixtures, config `[[setup]]`/`[[cleanup]]`,
the warm pool): real servers over real transports -- the npm knowledge-graph server
(`examples/sandboxes`, installed by setup.sh; those tests skip without it) and the test suite's Python stdio server
(`tests/servers/flaky_server.py`), launched as real processes."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
from tg_testutil import read_jsonl

from toolgym import ScriptedPolicy, ServerSpec, StatefulToolEnv, load_env, run_rollouts
from toolgym.mcp_bridge import SessionProvider
from toolgym.policies.scripted import call
from toolgym.sandbox import Fixture, Sandbox, SandboxError, sweep_stale
from toolgym.types import AssistantTurn

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples" / "sandboxes"
MEMORY_ENV = EXAMPLES / "memory" / "env.toml"
NPM = ROOT / "examples" / "npm" / "node_modules"
MEMORY_PKG = NPM / "@modelcontextprotocol" / "server-memory"
FLAKY = ROOT / "tests" / "servers" / "flaky_server.py"
need_memory = pytest.mark.skipif(not MEMORY_PKG.is_dir() or shutil.which("node") is None,
                                 reason="npm memory server not installed (setup.sh: npm install --prefix "
                                        "examples/sandboxes)")


@pytest.fixture
def sandbox_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("TOOLGYM_SANDBOX_DIR", str(tmp_path / "sbx"))
    monkeypatch.delenv("TOOLGYM_KEEP_SANDBOXES", raising=False)
    return tmp_path / "sbx" / "toolgym-sandboxes"


def _left(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir()) if root.is_dir() else []


def _tree_state(path: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(path)): (p.stat().st_size, p.stat().st_mtime_ns) for p in path.rglob("*")}


def _eval_config(cfg: Path, n: int, concurrency: int) -> list[Any]:
    env = load_env(str(cfg))

    async def go() -> list[Any]:
        await env.start()
        try:
            pol = env.scripted_players()["reference"](env)
            return await run_rollouts(env, pol, [(i, 0, t) for i, t in enumerate(env.build_dataset(n))], concurrency)
        finally:
            await env.aclose()

    return asyncio.run(go())


@need_memory
def test_memory_server_rollouts_are_isolated_and_leave_nothing(sandbox_root: Path, tmp_path: Path) -> None:
    before = _tree_state(MEMORY_PKG)
    trajs = _eval_config(MEMORY_ENV, 12, 4)
    assert len(trajs) == 12 and all(t.error is None for t in trajs), [t.error for t in trajs]
    assert [t.rewards["state"] for t in trajs] == [1.0] * 12  # each graph held only its own task's person
    assert _tree_state(MEMORY_PKG) == before  # nothing written in the server's package folder
    assert _left(sandbox_root) == []  # every sandbox removed (warm-pool leftovers too)

    # the same server and tasks with one shared graph file: rollouts see each other's entities (the test can fail)
    shared = tmp_path / "shared.toml"
    text = MEMORY_ENV.read_text().replace('scope = "rollout"', 'scope = "shared"').replace("prestart = 4", "")
    text = text.replace("{rollout_dir}/memory.jsonl", str(tmp_path / "shared-memory.jsonl"))
    shared.write_text(text.replace('"../../npm/node_modules', f'"{NPM}'))
    (tmp_path / "graph_check.py").write_text((MEMORY_ENV.parent / "graph_check.py").read_text())
    (tmp_path / "tasks.jsonl").write_text((MEMORY_ENV.parent / "tasks.jsonl").read_text())
    leaky = _eval_config(shared, 12, 4)
    assert sum(t.rewards["state"] for t in leaky) < 6


def _flaky_spec(**extra: Any) -> ServerSpec:
    return ServerSpec.stdio([sys.executable, str(FLAKY)], cwd="{rollout_dir}", env={"ROLLOUT": "{rollout_id}"},
                            **extra)


class _FilesEnv(StatefulToolEnv):
    """Rollouts that write a file into their sandbox, then do what the task says (nothing, crash, hang)."""

    name = "files"
    session_scope = "rollout"
    max_turns = 3
    tool_timeout = 2.0

    def build_dataset(self, n: int | None = None, seed: int = 0) -> list[dict[str, Any]]:
        return [{"prompt": "go", "i": i, "then": "none"} for i in range(n or 4)]


def _player() -> ScriptedPolicy:
    def act(messages: list[dict[str, Any]], memory: dict[str, Any]) -> AssistantTurn:
        task, step = memory["task"], memory.setdefault("step", 0)
        memory["step"] = step + 1
        if step == 0:
            return AssistantTurn(content="", tool_calls=[call("write_file", filename=f"mine-{task['i']}.txt", text="x")])
        if step == 1:
            then = task["then"]
            return AssistantTurn(content="", tool_calls=[call(then if then != "none" else "list_files")])
        return AssistantTurn(content="done")

    return ScriptedPolicy(act, "scripted:files")


def _server_procs() -> list[psutil.Process]:
    """Live (not zombie) server processes under this test process; one that exits while we look is not live."""
    live = []
    for p in psutil.Process().children(recursive=True):
        try:
            if "flaky_server.py" in " ".join(p.cmdline()) and p.status() != psutil.STATUS_ZOMBIE:
                live.append(p)
        except (psutil.NoSuchProcess, psutil.ZombieProcess):
            continue
    if live:  # a server told to stop may still be exiting on a loaded machine: give it 5 s, then it is a leak
        _, alive = psutil.wait_procs(live, timeout=5)
        live = []
        for p in alive:
            try:
                if p.status() != psutil.STATUS_ZOMBIE:
                    live.append(p)
            except psutil.NoSuchProcess:
                continue
    return live


def test_each_rollout_sees_only_its_sandbox_and_it_is_removed_after_crash_and_timeout(sandbox_root: Path) -> None:
    env = _FilesEnv(server=_flaky_spec())
    tasks = [{"prompt": "go", "i": i, "then": then} for i, then in enumerate(["none", "crash", "hang", "none"] * 2)]

    async def go() -> list[Any]:
        await env.start()
        try:
            return await run_rollouts(env, _player(), [(i, 0, t) for i, t in enumerate(tasks)], 4)
        finally:
            await env.aclose()

    trajs = asyncio.run(go())
    for t in trajs:
        if t.task["then"] == "none":
            assert t.error is None and t.calls[1].result == f"mine-{t.task['i']}.txt"  # only its own file
        else:
            assert t.error is not None  # the crashed or hung server fails this rollout only
    assert _left(sandbox_root) == []
    time.sleep(0.5)
    assert _server_procs() == []


def test_ctrl_c_removes_sandboxes_and_servers(sandbox_root: Path, tmp_path: Path) -> None:
    cfg = tmp_path / "env.toml"
    (tmp_path / "tasks.jsonl").write_text("".join(json.dumps(
        {"prompt": "go", "expected_calls": [{"name": "sleep", "arguments": {"seconds": [0.3]}}]}) + "\n"
        for _ in range(40)))
    cfg.write_text(f'name = "slow"\n[server]\ncommand = ["{sys.executable}", "{FLAKY}"]\ncwd = "{{rollout_dir}}"\n'
                   'scope = "rollout"\nprestart = 2\n[tasks]\npath = "tasks.jsonl"\n[[rewards]]\ntype = "call_match"\n')
    out = tmp_path / "run"
    err = tmp_path / "stderr.txt"  # a file, not a pipe: nothing here drains a pipe while the run goes on
    with err.open("wb") as err_file:
        proc = subprocess.Popen([sys.executable, "-m", "toolgym.cli", "eval", str(cfg), "-n", "40", "-c", "2", "-o",
                                 str(out)], stdout=subprocess.DEVNULL, stderr=err_file,
                                env={**os.environ, "TOOLGYM_SANDBOX_DIR": str(sandbox_root.parent),
                                     "PYTHONFAULTHANDLER": "1"})
    deadline = time.monotonic() + 90
    while len(read_jsonl(out / "results.jsonl")) < 2:
        assert proc.poll() is None, err.read_text()[-2000:]
        assert time.monotonic() < deadline
        time.sleep(0.05)
    children = psutil.Process(proc.pid).children(recursive=True)
    assert _left(sandbox_root), "sandboxes should exist mid-run"
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:  # seen under loaded suites (2026-12-02) before Ctrl-C was taken by the event
        # loop (toolgym.journal.run_interruptible); if it ever recurs, say where it hangs -- the asyncio
        proc.send_signal(signal.SIGUSR1)  # tasks' stacks (toolgym.journal.dump_tasks_on_sigusr1), then the threads'
        time.sleep(3)
        proc.send_signal(signal.SIGABRT)  # (faulthandler)
        proc.wait(10)
        pytest.fail("the run did not stop within 60 s of Ctrl-C; its tasks and threads:\n" + err.read_text()[-20000:])
    assert "SIGINT: stopping the eval" in err.read_text()  # the event loop took it (run_interruptible)
    _, alive = psutil.wait_procs(children, timeout=10)
    assert alive == []
    assert _left(sandbox_root) == []


def test_sigkilled_runs_sandboxes_are_swept_by_the_next(sandbox_root: Path) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    sandbox_root.mkdir(parents=True)
    (sandbox_root / f"{dead.pid}-0-deadbeef").mkdir()
    (sandbox_root / f"{os.getpid()}-999-live").mkdir()  # ours: kept
    assert sweep_stale(sandbox_root) == 1
    assert _left(sandbox_root) == [f"{os.getpid()}-999-live"]


def test_fixtures_are_copied_in_and_task_fields_choose_them(sandbox_root: Path, tmp_path: Path) -> None:
    (tmp_path / "fx" / "a").mkdir(parents=True)
    (tmp_path / "fx" / "a" / "seed.txt").write_text("A")
    (tmp_path / "fx" / "b").mkdir()
    (tmp_path / "fx" / "b" / "seed.txt").write_text("B")
    (tmp_path / "common.txt").write_text("C")
    spec = _flaky_spec(fixtures=[Fixture(str(tmp_path / "common.txt")), Fixture(str(tmp_path / "fx" / "{pick}"),
                                                                                "data")])

    async def go() -> list[str]:
        provider = SessionProvider(spec, "rollout")
        try:
            out = []
            for pick in ("a", "b"):
                s = await provider.acquire({"pick": pick})
                out.append((await s.call("list_files", {})).text)
                assert (s.sandbox.path / "data" / "seed.txt").read_text() == pick.upper()  # type: ignore[union-attr]
                await provider.release(s)
            return out
        finally:
            await provider.aclose()

    assert asyncio.run(go()) == ["common.txt,data", "common.txt,data"]
    assert _left(sandbox_root) == []
    with pytest.raises(SandboxError, match=r"server.fixtures\[1\]: .*nope does not exist"):
        Sandbox.create([Fixture(str(tmp_path / "common.txt")), Fixture(str(tmp_path / "nope"))])
    assert _left(sandbox_root) == []  # the half-made sandbox is removed too


def test_http_server_launched_per_rollout_on_its_own_port(sandbox_root: Path) -> None:
    spec = ServerSpec.http("http://127.0.0.1:{port}/mcp", cwd="{rollout_dir}",
                           launch=[sys.executable, str(FLAKY), "--transport", "streamable-http", "--port", "{port}"])

    async def go() -> tuple[set[str], set[int]]:
        provider = SessionProvider(spec, "rollout")
        try:
            sessions = [await provider.acquire() for _ in range(3)]
            urls = {s.spec.url for s in sessions}
            pids = {int((await s.call("pid", {})).text) for s in sessions}
            for i, s in enumerate(sessions):
                await s.call("write_file", {"filename": f"f{i}", "text": "x"})
            assert [(await s.call("list_files", {})).text for s in sessions] == ["f0", "f1", "f2"]
            for s in sessions:
                await provider.release(s)
            return urls, pids
        finally:
            await provider.aclose()

    urls, pids = asyncio.run(go())
    assert len(urls) == 3 and len(pids) == 3
    assert not any(psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE for p in pids)
    assert _left(sandbox_root) == []


def test_warm_pool_hands_out_prestarted_servers(sandbox_root: Path) -> None:
    env = _FilesEnv(server=_flaky_spec(prestart=3))

    async def go() -> tuple[int, int, list[Any]]:
        await env.start()
        assert len(env.provider._pool) == 3  # type: ignore[union-attr]  # full before the first rollout
        try:
            trajs = await run_rollouts(env, _player(), [(i, 0, t) for i, t in enumerate(env.build_dataset(6))], 2)
            return env.provider.pool_hits, len(_left(sandbox_root)), trajs  # type: ignore[union-attr]
        finally:
            await env.aclose()

    hits, live, trajs = asyncio.run(go())
    assert [t.error for t in trajs] == [None] * 6
    assert hits >= 3, hits
    assert live == 3  # the refilled pool, still warm at the end of the run
    assert _left(sandbox_root) == [] and _server_procs() == []


def test_closing_while_the_warm_pool_is_still_starting_leaves_no_server_running(sandbox_root: Path) -> None:
    """A run that ends (or fails) while its prestarted stdio servers are still connecting: `aclose` cancels the
    starts, and returns only once their children are reaped inside the loop -- before the fix, they were left
    running and collected after the loop closed (pytest's unraisable "Event loop is closed" warning)."""
    async def go(delay: float) -> list[psutil.Process]:
        provider = SessionProvider(_flaky_spec(prestart=2), scope="rollout")
        provider._refill()  # what acquire() and env.start() do: the starts run as background tasks
        await asyncio.sleep(delay)
        await provider.aclose()
        return _server_procs()

    for delay in (0.0, 0.05, 0.3):
        assert asyncio.run(go(delay)) == [], delay
    assert _left(sandbox_root) == []


def _config(tmp_path: Path, tasks: list[dict[str, Any]], server: str = "", extra: str = "",
            scope: str = "rollout") -> str:
    """A config env on the flaky stdio server; `server` lines go in `[server]` (from line 9), then `extra` tables."""
    (tmp_path / "tasks.jsonl").write_text("".join(json.dumps(t) + "\n" for t in tasks))
    p = tmp_path / "env.toml"
    p.write_text(f'name = "t"\n[tasks]\npath = "tasks.jsonl"\n[[rewards]]\ntype = "call_match"\n[server]\n'
                 f'command = ["{sys.executable}", "{FLAKY}"]\nscope = "{scope}"\n' + server + extra)
    return str(p)


def test_bad_placeholders_fixtures_and_setup_calls_name_the_entry(tmp_path: Path, sandbox_root: Path) -> None:
    """Each error names the config entry and, first, the file and line where the entry is."""
    tasks = [{"prompt": "go", "who": "x", "expected_calls": []}]

    def cfg(server: str, extra: str = "", scope: str = "rollout") -> str:
        return _config(tmp_path, tasks, server, extra, scope)

    with pytest.raises(SandboxError, match=r"env.toml:10: server.env.DB: unknown placeholder \{rollout_dri\}"):
        load_env(cfg('cwd = "."\nenv = { A = "a", DB = "{rollout_dri}/db" }\n'))
    with pytest.raises(SandboxError, match=r"env.toml:11: server.fixtures\[0\]: .*missing.db does not exist"):
        load_env(cfg('\n\nfixtures = ["missing.db"]\n'))
    with pytest.raises(ValueError, match="prestart .* needs scope"):
        load_env(cfg("prestart = 2\n", scope="shared"))
    env = load_env(cfg("", '[[setup]]\ntool = "fail"\narguments = { message = "{who}" }\n'
                           '[[setup]]\ntool = "echo"\narguments = { text = "{nobody}" }\n'))
    err = _run_reference(env)[0].error or ""
    assert "env.toml:9: setup[0] (tool 'fail') failed" in err and "fail: x" in err, err
    env = load_env(cfg("", '[[setup]]\ntool = "echo"\narguments = { text = "{nobody}" }\n'))
    assert "env.toml:9: setup[0] (tool 'echo').arguments: the task has no field 'nobody'" in \
        (_run_reference(env)[0].error or "")
    env = load_env(cfg("", '[[setup]]\ntool = "echo"\narguments = { text = "a" }\n[[cleanup]]\ntool = "echo"\n'
                           'arguments = { text = "b" }\n[[cleanup]]\ntool = "fail"\n'
                           'arguments = { message = "after {who}" }\n'))
    assert "env.toml:15: cleanup[1] (tool 'fail') failed: hidden call fail({'message': 'after x'})" in \
        (_run_reference(env)[0].error or "")  # cleanup calls run after scoring, with task placeholders
    assert _left(sandbox_root) == []


def test_config_line_of_an_entry() -> None:
    """The line an error names: table headers (the i-th `[[servers]]`), keys in inline tables, sub-tables."""
    from toolgym.config_env import toml_line

    text = ('name = "t"\n[server]\ncommand = ["x"]\n[server.env]\nA = "1"\nDB = "{x}"\n[[servers]]\nname = "a"\n'
            '[[servers]]\nname = "b"\nenv = { A = "1",\n  DB = "{x}" }\n[[setup]]\ntool = "t"\n')
    assert [toml_line(text, e) for e in ("server.env.DB", "server.command[0]", "servers[1].env.DB", "servers[1]",
                                         "setup[0]", "setup[1]", "cleanup[0]")] == [6, 3, 12, 9, 13, None, None]


def test_setup_and_cleanup_calls_run_hidden_from_the_model(tmp_path: Path, sandbox_root: Path) -> None:
    """`[[setup]]` writes a file into each rollout's sandbox before the model's first turn (the model's own
    `list_files` sees exactly it), `[[cleanup]]` writes one outside after scoring (it really runs, once per rollout);
    neither call shows up in the trajectory: not in its messages, turns or calls."""
    done = tmp_path / "cleaned"
    done.mkdir()
    tasks = [{"prompt": "go", "i": i, "expected_calls": [{"name": "list_files", "arguments": {}}]} for i in range(4)]
    env = load_env(_config(tmp_path, tasks, 'cwd = "{rollout_dir}"\n',
                           '[[setup]]\ntool = "write_file"\narguments = { filename = "setup-{i}.txt", text = "s" }\n'
                           f'[[cleanup]]\ntool = "write_file"\narguments = {{ filename = "{done}/{{i}}.txt", '
                           'text = "after {i}" }\n'))
    trajs = _run_reference(env, concurrency=2)
    for t in trajs:
        i = t.task["i"]
        assert t.error is None and t.reward == 1.0, t.error
        assert [(c.name, c.result) for c in t.calls] == [("list_files", f"setup-{i}.txt")]  # setup ran, before
        sent = [c["function"]["name"] for m in t.messages for c in m.get("tool_calls") or []]
        assert sent == ["list_files"]
        assert [m["content"] for m in t.messages if m["role"] == "tool"] == [f"setup-{i}.txt"]
        assert "write_file" not in json.dumps([t.messages, t.turns], default=str)
    assert sorted(p.name for p in done.iterdir()) == [f"{i}.txt" for i in range(4)]
    assert all((done / f"{i}.txt").read_text() == f"after {i}" for i in range(4))
    assert _left(sandbox_root) == []


def test_keep_sandboxes_keeps_each_rollouts_folder(tmp_path: Path, sandbox_root: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """`keep_sandboxes = true` (config) or TOOLGYM_KEEP_SANDBOXES=1 (environment) leaves exactly the rollouts'
    sandboxes, with what their servers wrote -- not the one that listed the tools nor warm-pool ones no rollout took
    (issue 30: 29 folders were kept for 24 rollouts); without either the same run leaves nothing."""
    tasks = [{"prompt": "go", "i": i, "expected_calls": [{"name": "write_file", "arguments": {
        "filename": [f"mine-{i}.txt"], "text": ["x"]}}]} for i in range(3)]
    server = 'cwd = "{rollout_dir}"\n'

    def kept() -> list[list[str]]:
        return sorted(sorted(p.name for p in d.iterdir()) for d in sandbox_root.iterdir()) \
            if sandbox_root.is_dir() else []

    mine = [[".keep", f"mine-{i}.txt"] for i in range(3)]
    trajs = _run_reference(load_env(_config(tmp_path, tasks, server + "keep_sandboxes = true\nprestart = 2\n")))
    assert [t.error for t in trajs] == [None] * 3
    assert kept() == mine
    assert sweep_stale(sandbox_root) == 0  # a kept sandbox is not swept either
    shutil.rmtree(sandbox_root)

    monkeypatch.setenv("TOOLGYM_KEEP_SANDBOXES", "1")
    _run_reference(load_env(_config(tmp_path, tasks, server)))
    assert kept() == mine
    shutil.rmtree(sandbox_root)

    monkeypatch.setenv("TOOLGYM_KEEP_SANDBOXES", "0")
    trajs = _run_reference(load_env(_config(tmp_path, tasks, server)))
    assert [t.error for t in trajs] == [None] * 3 and kept() == []


def test_a_kept_sandbox_whose_server_never_started_is_removed(tmp_path: Path, sandbox_root: Path) -> None:
    """`keep_sandboxes` keeps what rollouts' servers wrote; a sandbox whose session never opened -- a server that
    fails to start, or a warm-pool start cancelled when the env closes (the race that left an empty `.keep` folder
    under load) -- is removed like any other."""
    p = tmp_path / "env.toml"
    (tmp_path / "tasks.jsonl").write_text(json.dumps({"prompt": "go", "expected_calls": []}) + "\n")
    p.write_text(f'name = "t"\n[tasks]\npath = "tasks.jsonl"\n[[rewards]]\ntype = "call_match"\n[server]\n'
                 f'command = ["{sys.executable}", "-c", "import sys; sys.exit(3)"]\nscope = "rollout"\n'
                 'cwd = "{rollout_dir}"\nkeep_sandboxes = true\n')
    env = load_env(str(p))

    async def go() -> None:
        try:
            await env.start()
        finally:
            await env.aclose()

    with pytest.raises(Exception):  # noqa: B017 - the server exits at once: whatever the transport raises
        asyncio.run(go())
    assert _left(sandbox_root) == []


def test_rollout_id_is_what_each_server_receives(tmp_path: Path, sandbox_root: Path) -> None:
    """`{rollout_id}` in a server's env reaches the server process as the session's sandbox id (its directory's
    name), a different one per rollout; through a config env the model's own call reads it back."""
    rollout_id = re.compile(rf"{os.getpid()}-\d+-[0-9a-f]{{8}}")

    async def go() -> list[tuple[str, str, str]]:
        provider = SessionProvider(_flaky_spec(), "rollout")
        try:
            sessions = [await provider.acquire() for _ in range(3)]
            boxes = [s.sandbox for s in sessions]
            out = [((await s.call("get_value", {"key": "ROLLOUT"})).text, b.id, b.path.name)  # type: ignore[union-attr]
                   for s, b in zip(sessions, boxes, strict=True)]
            for s in sessions:
                await provider.release(s)
            return out
        finally:
            await provider.aclose()

    seen = asyncio.run(go())
    assert all(got == rid == name for got, rid, name in seen) and len({got for got, _, _ in seen}) == 3, seen
    assert all(rollout_id.fullmatch(got) for got, _, _ in seen)

    tasks = [{"prompt": "go", "expected_calls": [{"name": "get_value", "arguments": {"key": ["ROLLOUT"]}}]}] * 4
    got = [t.calls[0].result for t in _run_reference(load_env(_config(tmp_path, tasks,
                                                                      'env = { ROLLOUT = "{rollout_id}" }\n')))]
    assert len(set(got)) == 4 and all(rollout_id.fullmatch(g) for g in got), got
    assert _left(sandbox_root) == []


def _run_reference(env: StatefulToolEnv, concurrency: int = 1) -> list[Any]:
    async def go() -> list[Any]:
        await env.start()
        try:
            pol = env.scripted_players()["reference"](env)
            return await run_rollouts(env, pol, [(i, 0, t) for i, t in enumerate(env.build_dataset())], concurrency)
        finally:
            await env.aclose()

    return asyncio.run(go())


@need_memory
def test_filesystem_walkthrough_copies_fixtures_into_each_sandbox(sandbox_root: Path) -> None:
    fixtures = EXAMPLES / "filesystem" / "fixtures"
    before = _tree_state(fixtures)
    trajs = _eval_config(EXAMPLES / "filesystem" / "env.toml", 8, 4)
    assert all(t.error is None for t in trajs) and [t.rewards["state"] for t in trajs] == [1.0] * 8
    assert {t.task["kind"] for t in trajs} == {"write", "rename"}  # renames of the same fixture file do not clash
    assert _tree_state(fixtures) == before and _left(sandbox_root) == []
