#!/usr/bin/env bash
# Set up toolgym on a fresh machine: a .venv with toolgym (train, trl, dev, examples and docs extras) and every bundled
# MCP server and environment package (servers/*, envs/*) installed editable, plus the example servers (npm, and the
# mcp 1.x ones in .venv-mcp1). Idempotent. Needs python3 >= 3.11.
set -euo pipefail
cd "$(dirname "$0")"
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
# torch 2.13.0: a CPU wheel on our CI machines; elsewhere pip picks the build for your platform.
if [ -z "${TOOLGYM_NO_TORCH:-}" ]; then .venv/bin/python -m pip install -q "torch==2.13.0"; fi
args=(-e ".[dev,examples,docs]")
[ -z "${TOOLGYM_NO_TORCH:-}" ] && args=(-e ".[train,trl,dev,examples,docs]")
for d in servers/*/ envs/*/; do
  [ -f "$d/pyproject.toml" ] && args+=(-e "$d")
done
.venv/bin/python -m pip install -q "${args[@]}"
# the npm MCP servers of the examples/ walkthroughs (examples/npm, pinned by its package-lock.json); optional:
# without npm those examples and their tests are skipped
if command -v npm >/dev/null 2>&1; then
  npm ci --prefix examples/npm --no-audit --no-fund --loglevel=error \
    || echo "WARNING: npm ci in examples/npm failed; the tests of the npm-server examples will skip"
fi
# third-party MCP servers written for mcp 1.x (mcp-server-sqlite), in their own venv .venv-mcp1: they do not start on
# the mcp 2.x toolgym pins. Optional: without it examples/third_party_sqlite and its tests are skipped
PYTHON="$PY" scripts/setup_mcp1_venv.sh \
  || echo "WARNING: scripts/setup_mcp1_venv.sh failed; the tests of examples/third_party_sqlite will skip"
echo "toolgym is installed in .venv (activate: . .venv/bin/activate)"
