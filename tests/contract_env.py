"""The env of the episode contract test (`tests/test_episode_contract.py`): two servers -- `notes`, one process per
rollout whose sandbox gets the fixture folder named by the task's `variant` field, and `counter`, one process shared
by all rollouts -- a hidden argument filled from the state by the default `update_tool_args`, an `env_response`
that counts its calls, a stop condition, server-side and transcript rewards. Loadable by reference
(`contract_env:ContractEnv`) with `tests/` on the path, as the verifiers export's toolset process does."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from toolgym import Rubric, ServerSpec, StatefulToolEnv, stop
from toolgym.mcp_bridge import ServerBinding
from toolgym.sandbox import Fixture

HERE = Path(__file__).resolve().parent
SERVER = str(HERE / "servers" / "contract_server.py")
FIXTURES = HERE / "fixtures" / "contract"

TASKS = [
    {"prompt": "task 0", "variant": "alpha", "plan": "two_calls_then_done",
     "expected_calls": [{"name": "read", "arguments": {"name": ["a.txt"]}}, {"name": "add", "arguments": {"n": [2]}},
                        {"name": "add", "arguments": {"n": [3]}}]},
    {"prompt": "task 1", "variant": "beta", "plan": "two_calls_then_answer",
     "expected_calls": [{"name": "read", "arguments": {"name": ["a.txt"]}}, {"name": "add", "arguments": {"n": [1]}}]},
    {"prompt": "task 2", "variant": "alpha", "plan": "faults", "expected_calls": []},
]


class ContractEnv(StatefulToolEnv):
    name = "contract"
    servers = [
        ServerBinding("notes", ServerSpec.stdio([sys.executable, SERVER, "notes"], cwd="{rollout_dir}",
                                                fixtures=[Fixture(str(FIXTURES / "{variant}"), "notes")]),
                      scope="rollout"),
        ServerBinding("counter", ServerSpec.stdio([sys.executable, SERVER, "counter"]), scope="shared",
                      hidden_tools=("reset", "value", "counter_pid")),
    ]
    hidden_args = {"add": {"key": "counter_key"}}
    system_prompt = "Read the note, then count to five."
    max_turns = 4

    def build_dataset(self, n: int | None = None, seed: int = 0) -> list[dict[str, Any]]:
        return [dict(t) for t in TASKS[: n or len(TASKS)]]

    async def setup_state(self, state: dict[str, Any], task: dict[str, Any]) -> None:
        state["counter_key"] = "k" + task["prompt"].split()[-1]
        await self.call("reset", key=state["counter_key"])
        state["counter_pid"] = (await self.call("counter_pid")).json()
        state["responses"] = 0
        state["calls_per_response"] = []

    async def env_response(self, state, turn, records):  # type: ignore[no-untyped-def]
        state["responses"] += 1
        state["calls_per_response"] = [*state["calls_per_response"], len(records)]
        if any("DONE" in r.result for r in records):
            state["finished"] = True
        return None

    @stop
    def finished(self, state: dict[str, Any]) -> bool:
        return bool(state.get("finished"))

    def build_rubric(self) -> Rubric:
        async def counted(env, state) -> float:  # type: ignore[no-untyped-def]  # server side: a hidden call
            return float((await env.call("value", key=state["counter_key"])).json())

        def env_responses(state) -> float:  # type: ignore[no-untyped-def]
            return float(state["responses"])

        def read_ok(calls) -> float:  # type: ignore[no-untyped-def]
            return float(any(c.name == "read" and c.exec_ok for c in calls))

        def never(task) -> float | None:  # type: ignore[no-untyped-def]  # a metric that never applies
            return None

        return Rubric([(counted, 0.2), (read_ok, 1.0), (env_responses, 0.0), (never, 0.0)])


def plan(messages: list[dict[str, Any]]) -> dict[str, Any]:
    """The scripted model of the contract test: the next turn `{"content", "tool_calls": [(name, args)]}` from the
    conversation so far (the task is named in the first user message; the turn index is the assistant turns so far).
    """
    def text(c: Any) -> str:
        return c if isinstance(c, str) else "".join(p.get("text", "") for p in c or [] if isinstance(p, dict))

    user = next(text(m.get("content")) for m in messages if m.get("role") == "user")
    task = next(t for t in TASKS if t["prompt"] in user)
    turn = sum(1 for m in messages if m.get("role") == "assistant")
    if task["plan"] == "two_calls_then_done":
        turns = [[("read", {"name": "a.txt"}), ("add", {"n": 2})], [("add", {"n": 3})]]
    elif task["plan"] == "two_calls_then_answer":
        turns = [[("read", {"name": "a.txt"}), ("add", {"n": 1})]]
    else:  # an unknown tool, a bad argument type and a smuggled hidden argument, then a missing note
        turns = [[("nope", {}), ("add", {"n": "two"})], [("add", {"n": 1, "key": "other"}), ("read", {"name": "z"})]]
    if turn < len(turns):
        return {"content": "", "tool_calls": turns[turn]}
    return {"content": "<answer>done</answer>", "tool_calls": []}
