"""Public seams, no reach-ins: no module of the project (toolgym, the bundled servers and envs, examples, benchmarks,
scripts; tests excluded) imports an underscore name from another module, or reads or sets an underscore attribute
(`obj._x`, not `self._x` / `cls._x`) that the module itself does not define. What crosses a module boundary is
public; a third-party private API that must be used is listed in `ALLOWED` with the reason."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ["toolgym", "servers", "envs", "examples", "benchmarks", "scripts"]
ALLOWED = {
    # verifiers' MCP server exposes no public way to set a tool's exact JSON schema or to hand the model's
    # arguments over unchanged (the Toolset must validate them as toolgym does): toolgym.export.vf_runtime
    ("toolgym/export/vf_runtime.py", "_tool_manager"),
    # the verifiers Toolset publishes state through the per-call context variable of its MCP server
    ("toolgym/export/vf_runtime.py", "_call_state"),
    # the vf Toolset base class's own helpers, called from our subclass (inherited names, not another module's)
    ("toolgym/export/vf_runtime.py", "_push_state"), ("toolgym/export/vf_runtime.py", "_with_state"),
    ("toolgym/export/vf_runtime.py", "_exit_stack"),
}


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def project_files() -> list[Path]:
    files = []
    for top in SOURCES:
        for p in (ROOT / top).rglob("*.py"):
            if "node_modules" in p.parts or ".venv" in str(p):
                continue
            files.append(p)
    return files


def defined_names(tree: ast.AST) -> set[str]:
    """Underscore names a module defines itself: functions, classes, methods, assigned names and attributes
    (`self._x = ...`), parameters."""
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            out.add(node.name)
            if not isinstance(node, ast.ClassDef):
                out.update(a.arg for a in node.args.args + node.args.kwonlyargs)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            out.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and \
                isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
            out.add(node.attr)
        elif isinstance(node, ast.keyword) and node.arg:
            out.add(node.arg)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.isidentifier():
            out.add(node.value)  # a name set through a dict of methods, getattr/setattr by name
    return {n for n in out if _private(n)}


def reach_ins(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    own = defined_names(tree)
    rel = str(path.relative_to(ROOT))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                if _private(alias.name) and (rel, alias.name) not in ALLOWED:
                    found.append(f"{rel}:{node.lineno}: imports {alias.name} from {node.module}")
        elif isinstance(node, ast.Attribute) and _private(node.attr):
            base = node.value
            if isinstance(base, ast.Name) and base.id in ("self", "cls"):
                continue
            if isinstance(base, ast.Call) and isinstance(base.func, ast.Name) and base.func.id == "super":
                continue
            if node.attr in own or (rel, node.attr) in ALLOWED:
                continue
            verb = "sets" if isinstance(node.ctx, ast.Store) else "reads"
            found.append(f"{rel}:{node.lineno}: {verb} {ast.unparse(node)}")
    return found


def test_the_checker_finds_reach_ins(tmp_path: Path) -> None:
    src = ("from toolgym.rollout import _execute_call\n"
           "def f(env, policy):\n    policy._sessions = 1\n    return env._env_tools\n"
           "class A:\n    def g(self, other):\n        self._mine = 1\n        return other._mine\n")
    p = ROOT / "toolgym" / "_checker_probe.py"
    try:
        p.write_text(src)
        got = reach_ins(p)
    finally:
        p.unlink()
    assert [g.split(": ", 1)[1] for g in got] == [
        "imports _execute_call from toolgym.rollout", "sets policy._sessions", "reads env._env_tools"]


def test_no_module_reaches_into_another() -> None:
    found = [f for p in project_files() for f in reach_ins(p)]
    assert not found, "reach-ins across modules:\n" + "\n".join(found)
