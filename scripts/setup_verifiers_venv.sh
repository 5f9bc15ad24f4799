#!/usr/bin/env bash
# The verifiers venv: verifiers 0.4.0 (pins mcp==2.0.0, so it cannot share .venv, which runs mcp 2.3) + toolgym
# (without its deps: toolgym supports mcp 2.0.0, and its light deps come with verifiers or are listed here) + the
# MCP servers the exported examples use. Used by `toolgym export verifiers` packages and tests/test_export_verifiers.py.
#   scripts/setup_verifiers_venv.sh            # creates /work/main/.venv-verifiers (VENV=... to change)
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VENV:-.venv-verifiers}"
PY="${PYTHON:-python3}"
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
"$VENV/bin/pip" install -q --upgrade pip >/dev/null 2>&1 || true
"$VENV/bin/pip" install -q "verifiers==0.4.0"
# toolgym's own runtime deps (those verifiers does not already bring); pinned like pyproject.toml
"$VENV/bin/pip" install -q "mcp==2.0.0" "httpx>=0.27" "jsonschema>=4.20" "pydantic>=2.7" "typer>=0.12" "rich>=13" \
  "numpy>=1.26"
"$VENV/bin/pip" install -q --no-deps -e .
# servers the exported examples talk to (pure-python; --no-deps keeps mcp at 2.0.0)
"$VENV/bin/pip" install -q --no-deps -e servers/tictactoe
"$VENV/bin/pip" install -q --no-deps -e envs/tictactoe
# mcp-server-time 2026.10.19 declares mcp>=2.3 but runs on 2.0.0 (measured): install it without its deps
"$VENV/bin/pip" install -q tzdata tzlocal
"$VENV/bin/pip" install -q --no-deps "mcp-server-time==2026.10.19"
"$VENV/bin/python" - <<'PY'
import importlib.metadata as md
import mcp, verifiers.v1, toolgym  # noqa: F401
assert md.version("mcp") == "2.0.0", md.version("mcp")
print(f"verifiers {md.version('verifiers')}, mcp {md.version('mcp')}, toolgym {md.version('toolgym')}: ok")
PY
