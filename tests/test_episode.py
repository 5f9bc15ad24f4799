"""`Episode` on its own (`toolgym.episode`): the documented loop, an env tool that receives the running episode (and
whose `Episode` parameter the model never sees), the turn cap, clear errors for misuse, and cleanup + release after
a cancellation."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from tg_testutil import flaky_command

from toolgym import AssistantTurn, ServerSpec, StatefulToolEnv, ToolCall, env_tool, stop
from toolgym.episode import Episode


class Notes(StatefulToolEnv):
    """No server: two env tools, one of which reads the episode."""

    name = "notes"
    max_turns = 3

    def build_dataset(self, n: int | None = None, seed: int = 0) -> list[dict[str, Any]]:
        return [{"prompt": "write two notes"}]

    @env_tool
    def write(self, state: dict[str, Any], text: str, ep: Episode) -> str:
        """Write a note.

        Args:
            text: The note.
        """
        state.setdefault("notes", []).append(text)
        return f"note {len(state['notes'])} after {len(ep.calls)} earlier calls"

    @stop
    def two_notes(self, state: dict[str, Any]) -> bool:
        return len(state.get("notes", [])) >= 2

    async def cleanup(self, state: dict[str, Any]) -> None:
        state["cleaned"] = True


def turn(*calls: tuple[str, dict[str, Any]]) -> AssistantTurn:
    return AssistantTurn(content="", tool_calls=[ToolCall(n, a, id=f"c{i}") for i, (n, a) in enumerate(calls)])


def test_the_documented_loop_with_an_injected_episode() -> None:
    env = Notes()
    assert set(env.tool_schema("write")["properties"]) == {"text"}  # the Episode parameter is not shown

    async def go() -> Any:
        async with env:
            async with env.episode(env.build_dataset()[0]) as ep:
                added = await ep.run_turn(turn(("write", {"text": "a"})))
                assert [m["role"] for m in added] == ["assistant", "tool"] and not ep.done
                await ep.run_turn(turn(("write", {"text": "b"})))
                assert ep.done and ep.stop_reason == "two_notes"
                with pytest.raises(RuntimeError, match="episode is over"):
                    ep.begin_turn(turn())
                traj = await ep.finish()
            return ep, traj

    ep, traj = asyncio.run(go())
    assert [c.result for c in traj.calls] == ["note 1 after 0 earlier calls", "note 2 after 1 earlier calls"]
    assert traj.metrics["tool_exec_ok"] == 1.0 and traj.stop_reason == "two_notes"
    assert ep.state["cleaned"] is True  # leaving the block ran cleanup


def test_the_turn_cap_and_misuse_errors() -> None:
    env = Notes()

    async def go() -> Episode:
        async with env:
            async with env.episode({"prompt": "x"}, max_turns=1) as ep:
                with pytest.raises(RuntimeError, match="outside a turn"):
                    await ep.call(ToolCall("write", {"text": "a"}))
                await ep.run_turn(turn())  # no call: on_no_call="stop"
                assert ep.stop_reason == "no_tool_call"
            return ep

    assert asyncio.run(go()).done
    with pytest.raises(ValueError, match="max_turns"):
        env.episode({}, max_turns=0)
    with pytest.raises(RuntimeError, match="only available inside an episode"):
        asyncio.run(env.call("anything"))


class Flaky(StatefulToolEnv):
    name = "flaky"
    server = ServerSpec.stdio(flaky_command())
    session_scope = "rollout"

    async def cleanup(self, state: dict[str, Any]) -> None:
        state["cleaned"] = True


def test_an_episode_needs_a_started_env_and_releases_its_session_when_cancelled() -> None:
    env = Flaky()

    async def unstarted() -> None:
        async with env.episode({}):
            pass

    with pytest.raises(RuntimeError, match="start the env"):
        asyncio.run(unstarted())

    async def cancelled() -> tuple[Episode, int]:
        async with env:
            ep = env.episode({"prompt": "hang"})

            async def run() -> None:
                async with ep:
                    ep.begin_turn(turn(("hang", {})))
                    await ep.call(ToolCall("hang", {}))

            task = asyncio.create_task(run())
            await asyncio.sleep(1.0)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            return ep, env.provider.open_sessions  # type: ignore[union-attr]

    ep, still_open = asyncio.run(cancelled())
    assert ep.state.get("cleaned") is True and ep.session is None and still_open == 0
