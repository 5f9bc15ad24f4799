"""The env's surface is declared: every attribute or method the framework (`toolgym/`) reads from an env object --
`env.x`, `self.env.x`, `getattr(env, "x")` -- is declared on `StatefulToolEnv`, and every class attribute an env may
set has a one-line docstring there. (Functions whose `env` parameter is annotated `ConfigEnv` read that subclass's
own attributes, declared on it.)"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

from toolgym.config_env import ConfigEnv
from toolgym.env import StatefulToolEnv

ROOT = Path(__file__).resolve().parents[1]


def _is_env(node: ast.AST) -> bool:
    return (isinstance(node, ast.Name) and node.id == "env") or (
        isinstance(node, ast.Attribute) and node.attr == "env" and isinstance(node.value, ast.Name)
        and node.value.id == "self")


def reads(path: Path) -> list[tuple[str, int, str]]:
    """(file, line, attribute) for each attribute the module reads from an env."""
    tree = ast.parse(path.read_text())
    config_scopes: set[int] = set()
    for fn in ast.walk(tree):
        if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            for a in fn.args.args:
                if a.arg == "env" and a.annotation is not None and "ConfigEnv" in ast.unparse(a.annotation):
                    config_scopes.update(id(n) for n in ast.walk(fn))
    out = []
    for node in ast.walk(tree):
        if id(node) in config_scopes:
            continue
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load) and _is_env(node.value):
            out.append((str(path.relative_to(ROOT)), node.lineno, node.attr))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr") \
                and len(node.args) >= 2 and _is_env(node.args[0]) and isinstance(node.args[1], ast.Constant):
            out.append((str(path.relative_to(ROOT)), node.lineno, str(node.args[1].value)))
    return out


def test_every_env_attribute_the_framework_reads_is_declared() -> None:
    declared = set(dir(StatefulToolEnv)) | set(StatefulToolEnv.__annotations__)
    below = {"mcp_bridge.py", "sandbox.py"}  # below the env: their `env` is a server's environment variables
    found = [r for p in sorted((ROOT / "toolgym").rglob("*.py")) if p.name not in below for r in reads(p)]
    assert len(found) > 50  # the scan sees the framework's reads
    undeclared = [f"{f}:{line}: env.{a}" for f, line, a in found if a not in declared]
    assert not undeclared, "read from an env but not declared on StatefulToolEnv:\n" + "\n".join(undeclared)


def test_config_env_reads_are_declared_on_config_env() -> None:
    src = (ROOT / "toolgym" / "export" / "verifiers.py").read_text()
    assert "env: ConfigEnv" in src  # the scan above skips that function because of this annotation
    for attr in ("config", "base_dir", "tasks_path"):
        assert hasattr(ConfigEnv, attr) or attr in inspect.getsource(ConfigEnv.__init__)


def test_every_settable_class_attribute_has_a_docstring() -> None:
    src = inspect.getsource(StatefulToolEnv)
    tree = ast.parse(src).body[0]
    assert isinstance(tree, ast.ClassDef)
    body = tree.body
    missing = []
    for i, stmt in enumerate(body):
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            nxt = body[i + 1] if i + 1 < len(body) else None
            if not (isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant) and
                    isinstance(nxt.value.value, str) and nxt.value.value.strip()):
                missing.append(stmt.target.id)
    assert not missing, f"attributes without a docstring: {missing}"
    assert {"serve_tools", "num_groups", "hidden_args", "episode"} <= set(dir(StatefulToolEnv))
