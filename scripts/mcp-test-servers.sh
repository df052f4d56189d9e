#!/usr/bin/env bash
# Installs the MCP servers the tests talk to, pinned, under target/mcp/.
#
# Idempotent, serialised by a lock (test binaries running at once install once): the MCP
# project's reference server from the npm registry, and the official Python SDK (`mcp` from
# PyPI) in a venv for the tests' own small server (tests/it/mcp_server.py). Prints nothing on
# success.
set -euo pipefail
cd "$(dirname "$0")/.."
EVERYTHING="@modelcontextprotocol/server-everything@2026.8.31"
PYTHON_MCP="mcp==1.30.0"
dir=target/mcp
mkdir -p "$dir"
exec 9>"$dir/.lock"
flock 9
if [ ! -f "$dir/npm/node_modules/@modelcontextprotocol/server-everything/dist/index.js" ]; then
  command -v npm >/dev/null || { echo "npm is needed to install $EVERYTHING" >&2; exit 1; }
  npm install --prefix "$dir/npm" --no-audit --no-fund --silent "$EVERYTHING" >&2
fi
if [ ! -f "$dir/venv/.installed-$PYTHON_MCP" ]; then
  command -v python3 >/dev/null || { echo "python3 is needed to install $PYTHON_MCP" >&2; exit 1; }
  python3 -m venv "$dir/venv" >&2
  "$dir/venv/bin/pip" install --quiet --disable-pip-version-check "$PYTHON_MCP" >&2
  touch "$dir/venv/.installed-$PYTHON_MCP"
fi
