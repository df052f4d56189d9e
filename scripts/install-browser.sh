#!/usr/bin/env bash
# Installs Debian's chromium (if /usr/bin/chromium is missing) and the pinned playwright-core under tests/browser/ (npm ci; never a browser download).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"; dir="$root/tests/browser"
if [[ ! -x /usr/bin/chromium ]]; then
  command -v apt-get >/dev/null || { echo "install-browser: /usr/bin/chromium is missing and there is no apt-get" >&2; exit 1; }
  sudo=(); [[ "$(id -u)" == 0 ]] || sudo=(sudo)
  "${sudo[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends chromium >/dev/null
fi
command -v npm >/dev/null || { echo "install-browser: node and npm are needed (Debian's nodejs and npm)" >&2; exit 1; }
want="$(node -p "require('$dir/package.json').dependencies['playwright-core']")"
have="$(node -p "try { require('$dir/node_modules/playwright-core/package.json').version } catch { '' }")"
if [[ "$have" != "$want" ]]; then
  # --ignore-scripts: no install script may fetch anything (playwright-core has none today).
  (cd "$dir" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error)
fi
echo "/usr/bin/chromium $(/usr/bin/chromium --version 2>/dev/null | awk '{print $2}'), playwright-core $want"
