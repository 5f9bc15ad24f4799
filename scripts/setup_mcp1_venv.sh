#!/usr/bin/env bash
# The mcp 1.x venv: third-party MCP servers written against mcp 1.x, which do not run on the mcp 2.x that toolgym pins
# (they import APIs 2.x removed). Each server gets its console script in .venv-mcp1/bin; a config env runs it by path
# (examples/third_party_sqlite/env.toml: command = ["../../.venv-mcp1/bin/mcp-server-sqlite", ...]). toolgym talks
# to it over stdio like to any other server: the two venvs share nothing but the protocol.
#   scripts/setup_mcp1_venv.sh            # creates .venv-mcp1 (VENV=... to change)
# setup.sh runs this and goes on with a WARNING if it fails (the tests that need these servers then skip).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VENV:-.venv-mcp1}"
PY="${PYTHON:-python3}"
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
"$VENV/bin/pip" install -q --upgrade pip >/dev/null 2>&1 || true
# mcp-server-sqlite 2025.4.25 declares mcp[cli]>=1.6.0 but fails to start on mcp 2.x (measured): pin the last 1.x
"$VENV/bin/pip" install -q "mcp[cli]==1.30.0" "mcp-server-sqlite==2025.4.25"
"$VENV/bin/python" - <<'PY'
import importlib.metadata as md
import mcp_server_sqlite  # noqa: F401
print(f"mcp-server-sqlite {md.version('mcp-server-sqlite')}, mcp {md.version('mcp')}: ok")
PY
