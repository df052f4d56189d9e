#!/usr/bin/env bash
# Packages every published crate and builds each from its package, as crates.io would (about
# three minutes here). `.ci/run` packages without that build.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo package --workspace --exclude colloquy-bench --exclude colloquy-replay "$@"
