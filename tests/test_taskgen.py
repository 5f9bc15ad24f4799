"""`toolgym tasks generate` on real servers: the npm filesystem server with a fixture folder per rollout
(`examples/own_server`, a sandbox and server process per episode) through the command line, and the two servers of
`examples/multi_server` (`mcp-server-time` from PyPI, the npm `server-everything`) through the Python API. Checked
independently of the generator: every expected call is valid against the schemas the live server reports and runs
without error when replayed in a fresh episode; no held-out value occurs in a training task (calls or prompt). Skips
without node and the npm servers (setup.sh installs them)."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from toolgym.accuracy import validate_args
from toolgym.registry import load_env
from toolgym.tasks.generate import GenOptions, free_values, generate
from toolgym.types import ToolCall

from tg_testutil import MULTI_SERVER_ENV
from tg_testutil import need_multi_servers

ROOT = Path(__file__).resolve().parents[1]
OWN = ROOT / "examples" / "own_server" / "env.toml"
FS = ROOT / "examples" / "npm" / "node_modules" / ".bin" / "mcp-server-filesystem"
need_fs = pytest.mark.skipif(not FS.exists() or shutil.which("node") is None, reason="npm filesystem server not installed")


def _values(tasks: list[dict[str, Any]], schemas: dict[str, dict[str, Any]]) -> set[str]:
    out = set()
    for t in tasks:
        if not t["expected_calls"]:
            out.add(f"s:{t['answer']}")
        for c in t["expected_calls"]:
            for v in free_values({k: x[0] for k, x in c["arguments"].items()}, schemas[c["name"]]):
                out.add(f"#{float(v)!r}" if isinstance(v, int | float) else f"s:{v}")
    return out


async def _replay(env_path: Path, tasks: list[dict[str, Any]]) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """The live schemas, and the failures of replaying every task's expected calls in a fresh episode each."""
    env = load_env(str(env_path))
    await env.start()
    failures: list[str] = []
    try:
        schemas = {t["function"]["name"]: t["function"]["parameters"] for t in env.model_tools()}
        for task in tasks:
            async with env.episode(task) as ep:
                for i, c in enumerate(task["expected_calls"]):
                    args = {k: v[0] for k, v in c["arguments"].items()}
                    res = await ep.execute(ToolCall(name=c["name"], arguments=args, id=f"r{i}"), i)
                    if not res.record.exec_ok or res.text.lower().startswith("error"):
                        failures.append(f"{task['id']} {c['name']}{args}: {res.text[:120]}")
                        break
    finally:
        await env.aclose()
    return schemas, failures


def _check(env_path: Path, train: list[dict[str, Any]], heldout: list[dict[str, Any]]) -> None:
    schemas, failures = asyncio.run(_replay(env_path, train + heldout))
    assert not failures, failures[:5]
    for t in train + heldout:
        for c in t["expected_calls"]:
            err = validate_args(schemas[c["name"]], {k: v[0] for k, v in c["arguments"].items()})
            assert err is None, (t["id"], c, err)
    shared = _values(train, schemas) & _values(heldout, schemas)
    held_only = _values(heldout, schemas) - _values(train, schemas)
    # every held-out task has a value or a tool combination no training task has, and no held-out value is in training
    train_combos = {tuple(c["name"] for c in t["expected_calls"]) for t in train}
    for t in heldout:
        assert _values([t], schemas) & held_only or tuple(c["name"] for c in t["expected_calls"]) not in train_combos, t
    for t in train:
        for v in _values([t], schemas) - shared:
            assert v not in held_only
    assert {t["split"] for t in train} == {"train"} and {t["split"] for t in heldout} == {"heldout"}
    assert any(not t["expected_calls"] for t in train) and any(not t["expected_calls"] for t in heldout)
    keys = [json.dumps([t["prompt"], t["expected_calls"]], sort_keys=True) for t in train + heldout]
    assert len(set(keys)) == len(keys)  # no task written twice (the same request and calls)


@need_fs
def test_generate_cli_on_the_filesystem_server_with_a_sandbox_per_rollout(tmp_path: Path) -> None:
    out = tmp_path / "tasks.jsonl"
    proc = subprocess.run([sys.executable, "-m", "toolgym.cli", "tasks", "generate", str(OWN), "-n", "20",
                           "--heldout", "8", "-o", str(out), "-c", "4", "--seed", "3"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    train = [json.loads(x) for x in out.read_text().splitlines()]
    heldout = [json.loads(x) for x in (tmp_path / "tasks.heldout.jsonl").read_text().splitlines()]
    summary = json.loads((tmp_path / "tasks.summary.json").read_text())
    assert len(train) == 20 and len(heldout) == 8
    assert f"{summary['duplicates_dropped']} repeated tasks dropped" in " ".join(proc.stdout.split())
    assert not summary["tools_never_succeeded"]  # the crawl reaches the fixture's files: every tool works
    assert any(len(t["expected_calls"]) == 2 for t in train)  # multi-step tasks
    reads = [c for t in train + heldout for c in t["expected_calls"] if c["name"] == "read_text_file"]
    assert reads and all("library/" in c["arguments"]["path"][0] for c in reads)  # the crawl found the files
    _check(OWN, train, heldout)
    for path in (out, tmp_path / "tasks.heldout.jsonl"):  # `toolgym check`, written by others, agrees
        chk = subprocess.run([sys.executable, "-m", "toolgym.cli", "check", str(OWN), "-a", f"tasks={path}"],
                             capture_output=True, text=True, timeout=300)
        assert chk.returncode == 0 and "all valid" in chk.stdout, chk.stdout[-2000:]
    # more tasks for the same set (`--extend`): two-call tasks that start from a listing and refer to its entries,
    # none of them using a value or a tool pair the first run held out
    more = tmp_path / "more.jsonl"
    proc = subprocess.run([sys.executable, "-m", "toolgym.cli", "tasks", "generate", str(OWN), "-n", "6",
                           "--heldout", "0", "--no-tool-share", "0", "--chain-share", "1", "--ref-share", "1",
                           "--listing-first", "1", "--extend", str(out), "-o", str(more), "-c", "4", "--seed", "4"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    added = [json.loads(x) for x in more.read_text().splitlines()]
    # the attempt loop stops once the split has its task count: a few one-call tasks (the probes) may fill it
    assert len(added) == 6 and sum(len(t["expected_calls"]) == 2 for t in added) >= 4
    assert [t["id"] for t in added] == [f"train-{i}" for i in range(20, 26)]  # ids continue the set's: files join
    refs = [t for t in added if t["kind"].endswith("(ref)")]
    assert len(refs) >= 3 and all("entry of that result" in t["prompt"] for t in refs), [t["kind"] for t in added]
    schemas, failures = asyncio.run(_replay(OWN, added))
    assert not failures, failures[:5]
    held_values = _values(heldout, schemas) - _values(train, schemas)
    pairs = [{tuple(c["name"] for c in t["expected_calls"]) for t in rows if len(t["expected_calls"]) > 1}
             for rows in (heldout, train)]
    held_pairs = pairs[0] - pairs[1]
    before = {json.dumps([t["prompt"], t["expected_calls"]]) for t in train + heldout}
    assert not {json.dumps([t["prompt"], t["expected_calls"]]) for t in added} & before  # no task of the set again
    for t in added:
        assert not _values([t], schemas) & held_values, t
        assert tuple(c["name"] for c in t["expected_calls"]) not in held_pairs, t


@need_multi_servers
def test_generate_on_two_servers_states_values_and_splits_them() -> None:
    env = load_env(str(MULTI_SERVER_ENV))

    async def go() -> dict[str, Any]:
        try:
            return await generate(env, GenOptions(n_train=40, n_heldout=16, seed=1, concurrency=4))
        finally:
            await env.aclose()

    res = asyncio.run(go())
    train, heldout = res["train"], res["heldout"]
    assert {k.split("+")[0] for k in res["summary"]["kinds"]["train"]} >= {"get-sum", "convert_time", "none"}
    for t in train + heldout:  # the prompt states every argument value as the call writes it
        for c in t["expected_calls"]:
            for v in c["arguments"].values():
                assert json.dumps(v[0], ensure_ascii=False) in t["prompt"], t
        if t["kind"] == "convert_time":
            assert t["answer_field"] == ["target", "datetime"] and t["answer"]
    _check(MULTI_SERVER_ENV, train, heldout)


def test_generation_fails_clearly_when_no_call_can_succeed(tmp_path: Path) -> None:
    """A stdio server whose only tool always reports an error: generation stops with the tool's error, no file."""
    server = tmp_path / "server.py"
    server.write_text(
        "from mcp.server.mcpserver import MCPServer\nsrv = MCPServer('x')\n"
        "@srv.tool()\ndef fetch(key: str) -> str:\n    '''Fetch a key.'''\n    raise ValueError('no such key: ' + key)\n"
        "srv.run('stdio')\n")
    cfg = tmp_path / "env.toml"
    cfg.write_text(f'name = "x"\n[server]\ncommand = ["{sys.executable}", "{server}"]\n[tasks]\npath = "t.jsonl"\n'
                   '[[rewards]]\ntype = "call_match"\n')
    proc = subprocess.run([sys.executable, "-m", "toolgym.cli", "tasks", "generate", str(cfg), "-n", "4", "--heldout",
                           "2", "-o", str(tmp_path / "out.jsonl"), "--max-attempts", "12"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2
    assert "fetch" in proc.stdout and "Error executing tool fetch" in proc.stdout  # the server's own error text
    assert "Traceback" not in proc.stdout and not (tmp_path / "out.jsonl").exists()  # (stderr: the server's own log)
