"""The import graph of toolgym, the bundled servers and the bundled environments: no circles, arrows one way.

Read with `ast` (nothing is imported). The modules: every `.py` below `toolgym/`, `servers/*/mcp_server_*/` and
`envs/*/toolgym_*/`. An edge A -> B is any `import` / `from ... import` statement in A that names B, wherever it
stands (module level, inside a function, under `if TYPE_CHECKING:`): a lazy import is still a dependency.
`from pkg import name` is an edge to `pkg.name` when that is a module of the walk, else to `pkg`; the parent
packages Python initialises on the way (`toolgym/__init__.py` for `toolgym.env`) are not edges.

The rules:

1. no circle between modules;
2. **core** -- every `toolgym` module except the command-line front end `toolgym.cli` (it mounts the optional
   sub-apps) and the layers built on top of the core, `toolgym.train`, `toolgym.export` and `toolgym.integrations`
   -- imports none of those layers;
3. no `toolgym` module imports an environment package (`toolgym_*`: they are found through the `toolgym.envs`
   entry points) or a server package (`mcp_server_*`: servers are reached over MCP);
4. servers import neither `toolgym` nor an environment package (they know nothing of RL);
5. environments use the core only (not `toolgym.train`, `toolgym.export`, `toolgym.integrations`, `toolgym.cli`).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LAYERS = ("toolgym.cli", "toolgym.train", "toolgym.export", "toolgym.integrations")


def _in(mod: str, prefix: str) -> bool:
    return mod == prefix or mod.startswith(prefix + ".")


def package_dirs() -> list[Path]:
    return [ROOT / "toolgym", *sorted(ROOT.glob("servers/*/mcp_server_*")), *sorted(ROOT.glob("envs/*/toolgym_*"))]


def module_files() -> dict[str, Path]:
    mods: dict[str, Path] = {}
    for pkg in package_dirs():
        for f in sorted(pkg.rglob("*.py")):
            parts = list(f.relative_to(pkg.parent).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            mods[".".join(parts)] = f
    return mods


def import_graph(mods: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the modules of the walk it imports (see the module docstring for what counts)."""

    def resolve(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {m: set() for m in mods}
    for mod, path in mods.items():
        is_pkg = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:  # relative: from the module's package, one level up per extra dot
                    base = mod.split(".") if is_pkg else mod.split(".")[:-1]
                    base = base[: len(base) - (node.level - 1)]
                    src = ".".join(base + ([node.module] if node.module else []))
                else:
                    src = node.module or ""
                names = [f"{src}.{a.name}" if f"{src}.{a.name}" in mods else src for a in node.names]
            else:
                continue
            for name in names:
                target = resolve(name)
                if target is not None and target != mod:
                    graph[mod].add(target)
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            v, children = work[-1]
            for w in children:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        found.append(sorted(comp))
    return found


def _explain(graph: dict[str, set[str]], comp: list[str]) -> str:
    members = set(comp)
    return "; ".join(f"{m} -> {', '.join(sorted(graph[m] & members))}" for m in comp)


GRAPH = import_graph(module_files())


def test_walk_sees_the_packages():
    mods = set(GRAPH)
    for expected in ("toolgym.env", "toolgym.policies", "toolgym.policies.base", "toolgym.policies.model",
                     "mcp_server_tictactoe.server", "mcp_server_wiki.world", "toolgym_sql"):
        assert expected in mods
    assert "toolgym.policies.base" in GRAPH["toolgym.policies.model"]
    assert "mcp_server_wiki.article" in GRAPH["mcp_server_wiki.world"]


def test_circle_finder_finds_circles():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert circles(graph) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_no_import_circles():
    found = circles(GRAPH)
    assert not found, "import circles:\n" + "\n".join(_explain(GRAPH, c) for c in found)


def test_core_does_not_import_the_layers_above_it():
    bad = [f"{m} -> {t}" for m, ts in GRAPH.items() if _in(m, "toolgym") and not any(_in(m, p) for p in LAYERS)
           for t in ts if any(_in(t, p) for p in LAYERS)]
    assert not bad, "core imports a layer built on it:\n" + "\n".join(sorted(bad))


def test_toolgym_imports_no_env_or_server_package():
    bad = [f"{m} -> {t}" for m, ts in GRAPH.items() if _in(m, "toolgym")
           for t in ts if t.startswith(("toolgym_", "mcp_server_"))]
    assert not bad, "\n".join(sorted(bad))


def test_servers_know_nothing_of_rl():
    bad = [f"{m} -> {t}" for m, ts in GRAPH.items() if m.startswith("mcp_server_")
           for t in ts if _in(t, "toolgym") or t.startswith("toolgym_")]
    assert not bad, "\n".join(sorted(bad))
    for m, path in module_files().items():  # also no import of toolgym that the walk could not resolve
        if m.startswith("mcp_server_"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Import):
                    assert not any(_in(a.name, "toolgym") for a in node.names), m
                elif isinstance(node, ast.ImportFrom) and node.module:
                    assert not _in(node.module, "toolgym"), m


def test_environments_use_the_core_only():
    bad = [f"{m} -> {t}" for m, ts in GRAPH.items() if m.startswith("toolgym_")
           for t in ts if any(_in(t, p) for p in LAYERS)]
    assert not bad, "\n".join(sorted(bad))
