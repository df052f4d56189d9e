#!/usr/bin/env bash
# Packages every published crate and builds each from its package, as crates.io would.
#
# About three minutes here; `.ci/run` packages without that build.
set -euo pipefail
cd "$(dirname "$0")/.."
# Cargo unpacks the packages it verifies into a local-registry cache and reuses that copy for
# the same version: drop our stale copies so a second run builds what is packaged now.
rm -rf target/package "${CARGO_HOME:-$HOME/.cargo}"/registry/src/-*/colloquy-*
cargo package --workspace --exclude colloquy-bench --exclude colloquy-replay "$@"
