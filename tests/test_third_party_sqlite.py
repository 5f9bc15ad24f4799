"""A real third-party PyPI server written for mcp 1.x -- `mcp-server-sqlite`, run from its own venv
(`scripts/setup_mcp1_venv.sh`, which setup.sh runs) -- plugged in by the config of `examples/third_party_sqlite/`:
a copy of the seed database per rollout, SQL errors answered as plain text (`error_patterns`), the mcp 1.x warning
kept off the terminal, `toolgym check` naming each kind of bad task, and a fault-playing OpenAI-compatible endpoint
(loopback) whose wrong calls score call_match 0 under exact matching -- and 1 under the old normalisation, which is
what let them through."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from fault_endpoint import FaultEndpoint

from tg_testutil import read_jsonl

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "third_party_sqlite"
SERVER = ROOT / ".venv-mcp1" / "bin" / "mcp-server-sqlite"
pytestmark = pytest.mark.skipif(
    not SERVER.exists(), reason=f"mcp-server-sqlite is not installed in {SERVER.parent.parent} (an mcp 1.x server: "
    "run scripts/setup_mcp1_venv.sh, which setup.sh runs; it skips with a WARNING when PyPI is unreachable)")


def toolgym(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """The CLI as a user runs it (its own process: what reaches the terminal, the exit code)."""
    return subprocess.run([sys.executable, "-m", "toolgym.cli", *args], capture_output=True, text=True,
                          timeout=300, cwd=cwd, env={**os.environ, "COLUMNS": "200"})


def _config(tmp_path: Path, replace: dict[str, str] | None = None) -> Path:
    """A copy of the example's config next to its files (paths in it stay valid), with some lines replaced."""
    text = (EXAMPLE / "env.toml").read_text()
    for old, new in (replace or {}).items():
        assert old in text
        text = text.replace(old, new)
    path = EXAMPLE / f".test-{tmp_path.name}.toml"
    path.write_text(text)
    return path


@pytest.fixture
def config(tmp_path: Path) -> Any:
    made: list[Path] = []

    def make(replace: dict[str, str] | None = None) -> Path:
        made.append(_config(tmp_path, replace))
        return made[-1]

    yield make
    for p in made:
        p.unlink(missing_ok=True)


def test_reference_player_through_the_mcp1_server_quietly(tmp_path: Path) -> None:
    """24 tasks, a server process and a database copy per rollout: the reference player scores 1.0 on all; the mcp
    1.x server's 94-line warning on the discover probe reaches neither the terminal nor more than the first session
    (later sessions connect with the legacy handshake); its stderr is in the run folder's per-server log."""
    out = tmp_path / "run"
    res = toolgym("eval", str(EXAMPLE / "env.toml"), "-n", "0", "-c", "4", "-o", str(out))
    assert res.returncode == 0, res.stdout + res.stderr
    assert "validation error" not in res.stdout + res.stderr and "Traceback" not in res.stdout + res.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["rollouts"] == 24 and summary["errors"] == 0 and summary["reward"]["mean"] == 1.0
    assert summary["tool_accuracy"]["*"]["call_match"] == 1.0 and summary["tool_accuracy"]["*"]["exec_ok"] == 1.0
    log = (out / "servers" / "sqlite-shop.log").read_text()
    assert log.count("Failed to validate request") <= 1 and len(log.splitlines()) < 120


def test_check_names_each_kind_of_bad_task_and_eval_refuses_them(tmp_path: Path) -> None:
    ok = {"prompt": "ok", "expected_calls": [{"name": "list_tables", "arguments": {}}]}
    bad = [
        ({"name": "read_qurey", "arguments": {"query": ["SELECT 1"]}}, "unknown tool 'read_qurey' (did you mean "
                                                                        "'read_query'?)"),
        ({"name": "read_query", "arguments": {"querry": ["SELECT 1"]}}, "unknown argument 'querry' (did you mean "
                                                                         "'query'?)"),
        ({"name": "read_query", "arguments": {"query": [1999]}}, "argument 'query': 1999 is not of type 'string'"),
        ({"name": "write_query", "arguments": {"query": ["DELETE FROM orders"]}}, "tool 'write_query' is hidden"),
        ({"name": "describe_table", "arguments": {}}, "required argument(s) 'table_name' missing"),
    ]
    tasks = [ok] + [{"prompt": f"bad {i}", "expected_calls": [call]} for i, (call, _) in enumerate(bad)] + [ok]
    path = tmp_path / "bad.jsonl"
    path.write_text("".join(json.dumps(t) + "\n" for t in tasks))
    res = toolgym("check", str(EXAMPLE / "env.toml"), "-a", f"tasks={path}")
    assert res.returncode == 2, res.stdout + res.stderr
    lines = res.stdout.splitlines()
    for line, (_, words) in enumerate(bad, start=2):
        assert any(x.startswith(f"{path}:{line}: ") and words in x for x in lines), (line, words, res.stdout)
    assert not any(x.startswith(f"{path}:1:") for x in lines)
    # the last task repeats the first: valid, named as a note (an eval would count its outcome twice)
    assert [x for x in lines if x.startswith(f"{path}:7:")] == [
        f"{path}:7: the same task as {path}:1 (every field but id, split and template_prompt): an eval counts this outcome twice (note)"]
    assert "7 tasks, 5 invalid" in lines[-1] and "1 repeated" in lines[-1]

    out = tmp_path / "run"
    res = toolgym("eval", str(EXAMPLE / "env.toml"), "-a", f"tasks={path}", "-o", str(out))
    assert res.returncode == 2 and "5 of 7 task(s) do not fit the servers' tool schemas" in res.stdout
    assert not (out / "results.jsonl").exists()


# Wrong calls a model makes that BFCL-style normalisation (case, spaces and punctuation ignored) accepted
FAULTS = {
    "Wool Rug": ("SELECT price FROM products WHERE name = 'Wool Rug'",
                 "SELECT price FROM products WHERE name = 'wool-rug'"),  # the query finds nothing
    "priced 19.99": ("SELECT name FROM products WHERE price = 19.99",
                     "SELECT name FROM products WHERE price = 1999"),  # another number
    "name and price": ("SELECT name, price FROM products",
                       "SELECT name price FROM products"),  # a comma dropped: another query
    "Oak Shelf": ("SELECT price FROM products WHERE name = 'Oak Shelf'",
                  "SELECT price, FROM products WHERE name = 'Oak Shelf'"),  # a syntax error
    "Desk Lamp": ("SELECT price FROM products WHERE name = 'Desk Lamp'",
                  "SELECT price FROM products WHERE name = 'DeskLamp'"),  # a space dropped
}


def _fault_run(tmp_path: Path, config_path: Path, name: str) -> dict[str, dict[str, Any]]:
    tasks = [{"prompt": f"Query: {key}", "answer": "x", "expected_calls": [{"name": "read_query",
                                                                            "arguments": {"query": [good]}}]}
             for key, (good, _) in FAULTS.items()]
    path = tmp_path / "fault_tasks.jsonl"
    path.write_text("".join(json.dumps(t) + "\n" for t in tasks))
    out = tmp_path / name
    with FaultEndpoint({key: ("read_query", {"query": wrong}) for key, (_, wrong) in FAULTS.items()}) as ep:
        res = toolgym("eval", str(config_path), "-a", f"tasks={path}", "-m", "openai:fault", "--base-url", ep.url,
                      "--api-key", "x", "-o", str(out))
    assert res.returncode == 0, res.stdout + res.stderr
    recs = read_jsonl(out / "results.jsonl")
    assert len(recs) == len(FAULTS) and all(r["error"] is None for r in recs)
    return {r["task"]["prompt"].removeprefix("Query: "): r for r in recs}


def test_fault_endpoint_wrong_calls_score_zero_under_exact_matching(tmp_path: Path, config) -> None:  # type: ignore[no-untyped-def]
    exact = _fault_run(tmp_path, EXAMPLE / "env.toml", "exact")
    for key, rec in exact.items():
        assert rec["calls"][0]["arguments"]["query"] == FAULTS[key][1]  # the endpoint's wrong call was made
        assert rec["metrics"]["call_match"] == 0.0 and rec["calls"][0]["call_match"] is False, key
    # the SQL error came back as plain text: error_patterns makes it a failed call
    assert exact["Oak Shelf"]["calls"][0]["exec_ok"] is False
    assert exact["Oak Shelf"]["calls"][0]["result"].startswith("Error: Database error")
    assert all(r["calls"][0]["exec_ok"] for k, r in exact.items() if k != "Oak Shelf")

    # the same calls under the old normalisation all "match" (what issue 30 measured), and without error_patterns
    # the syntax error counts as executed
    loose = _fault_run(tmp_path, config({'match = "exact"': 'match = "normalized"',
                                         'error_patterns = ["^Database error", "^Error:"]': ""}), "normalized")
    assert all(r["metrics"]["call_match"] == 1.0 for r in loose.values())
    assert loose["Oak Shelf"]["calls"][0]["exec_ok"] is True
