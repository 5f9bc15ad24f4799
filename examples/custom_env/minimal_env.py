"""The README's 30-line environment, runnable: wrap the tic-tac-toe MCP server by hand and play it with a scripted
player that takes the first free cell.  Run: `python examples/custom_env/minimal_env.py`."""

import asyncio
import re

from toolgym import AssistantTurn, Rubric, ScriptedPolicy, ServerSpec, StatefulToolEnv, run_rollouts, stop
from toolgym.policies.scripted import call


class TicTacToe(StatefulToolEnv):
    name = "tictactoe"
    server = ServerSpec.stdio(["mcp-server-tictactoe"])
    session_scope = "shared"                                   # games are keyed by id
    hidden_tools = {"new_game", "game_result", "end_game"}     # setup/grading tools the model never sees
    hidden_args = {"make_move": ["game_id"], "get_board": ["game_id"]}   # hidden; filled from state["game_id"]
    max_turns = 8

    def build_dataset(self, n=None, seed=0):
        return [{"seed": seed * 1000 + i} for i in range(n or 100)]

    async def setup_state(self, state, task):                  # one state dict per rollout
        res = await self.call("new_game", seed=task["seed"])  # a hidden call on this rollout's session
        state["game_id"], state["board"] = res.json()["game_id"], res.json()["board"]

    def initial_messages(self, task, state):
        return [{"role": "user", "content": "Play X. Call make_move(position).\n" + state["board"]}]

    async def env_response(self, state, turn, records):        # after the turn's tool calls ran
        state["over"] = any("Game over" in r.result for r in records)

    @stop
    def game_over(self, state):
        return state.get("over", False)

    def build_rubric(self):
        async def won(env, state):                             # reward functions take what they name
            return float((await env.call("game_result", game_id=state["game_id"])).json()["status"] == "win")
        return Rubric([(won, 1.0)])


def first_free_cell(messages, memory):
    """Play the lowest-numbered free cell listed in the last board."""
    free = re.findall(r"Free cells: ([\d, ]+)", messages[-1]["content"])
    cell = int(free[-1].split(",")[0]) if free else 0
    return AssistantTurn(content="", tool_calls=[call("make_move", position=cell)])


async def main(n: int = 10) -> list:
    env = TicTacToe()
    async with env:
        trajs = await run_rollouts(env, ScriptedPolicy(first_free_cell), [(i, 0, t) for i, t in
                                                                         enumerate(env.build_dataset(n))])
    for t in trajs:
        print(t.example_id, t.stop_reason, t.reward, t.error or "")
    return trajs


if __name__ == "__main__":
    asyncio.run(main())
