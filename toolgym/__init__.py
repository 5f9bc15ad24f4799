"""toolgym: train and evaluate tool-using language models with RL, where the environments are MCP servers.

The public surface:

| names | what |
|---|---|
| `ServerSpec`, `StatefulToolEnv`, `stop`, `env_tool` | wrap an MCP server as a multi-turn environment |
| `Rubric` | weighted reward functions |
| `Policy`, `PolicySession`, `load_policy` | what writes the assistant turns |
| `PolicyUnavailable` | raised when a policy cannot answer at all (stops a run) |
| `ScriptedPolicy` | a policy from a Python function |
| `run_rollout`, `run_rollouts` | the rollout engine |
| `load_env` | an env by name (entry point) or config file |
| `Trajectory`, `AssistantTurn`, `ToolCall`, `CallRecord`, `TokenTrace` | the records |
"""

from toolgym.env import HiddenCallError, StatefulToolEnv, env_tool, stop
from toolgym.mcp_bridge import MCPSession, ServerSpec, ToolCallError, ToolInfo, ToolResult
from toolgym.policies import Policy, PolicySession, PolicyUnavailable, load_policy
from toolgym.policies.scripted import ScriptedPolicy
from toolgym.registry import load_env
from toolgym.rollout import run_rollout, run_rollouts
from toolgym.rubric import Rubric, RewardError
from toolgym.types import AssistantTurn, CallRecord, TokenTrace, ToolCall, Trajectory

__version__ = "0.1.0"

__all__ = [
    "AssistantTurn", "CallRecord", "HiddenCallError", "MCPSession", "Policy", "PolicySession", "PolicyUnavailable",
    "RewardError", "Rubric", "ScriptedPolicy", "ServerSpec", "StatefulToolEnv", "TokenTrace", "ToolCall", "ToolCallError",
    "ToolInfo", "ToolResult", "Trajectory", "env_tool", "load_env", "load_policy", "run_rollout", "run_rollouts",
    "stop",
]
