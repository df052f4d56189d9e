#!/usr/bin/env bash
# Refreshes docs/timeline.png: a scenario's timeline page, screenshot by headless Chromium.
#
# Needs Debian's chromium (apt-get install chromium). Not part of CI: the page itself is
# checked by `cargo test` (crates/colloquy-scenario/tests/timeline.rs).
#
#   scripts/screenshot-timeline.sh [SCENARIO.json] [OUT.png]
set -euo pipefail
cd "$(dirname "$0")/.."
scenario="${1:-tests/scenarios/c58_c59_session_scoped_across_handoff.json}"
out="${2:-docs/timeline.png}"
chromium="${CHROMIUM:-/usr/bin/chromium}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cargo run -q -p colloquy-cli -- run "$scenario" --timeline "$work/timeline.html" > /dev/null
"$chromium" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
  --disable-background-networking --disable-component-update --disable-sync \
  --user-data-dir="$work/profile" --hide-scrollbars --window-size=1240,420 \
  --screenshot="$work/shot.png" "file://$work/timeline.html" 2> "$work/chromium.log" || {
  cat "$work/chromium.log" >&2
  exit 1
}
cp "$work/shot.png" "$out"
echo "wrote $out"
