#!/usr/bin/env bash
# Counts the instructions per tool call of the benchmark workload under callgrind.
#
# Repeatable for the same binary whatever else the machine is doing, unlike wall or CPU time.
# Runs K = 100 sessions for T = 5 and T = 25 turns (tool_ms 0) and divides the difference by
# the 2,000 extra calls, so start-up, closing and the checks cancel out. Not part of CI
# (valgrind runs the bench about 50 times slower; the release build is whole-program LTO, a few
# minutes from scratch); see docs/benchmarks.md.
#
#   scripts/instructions-per-call.sh [TARGET_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
target="${1:-target/callgrind}"
CARGO_TARGET_DIR="$target" CARGO_PROFILE_RELEASE_DEBUG=line-tables-only \
  cargo build -q --release -p colloquy-bench --bin colloquy-bench
bench="$target/release/colloquy-bench"
count() {
  valgrind --tool=callgrind --callgrind-out-file="$target/callgrind.t$1.out" \
    "$bench" --sessions 100 --turns "$1" --tool-ms 0 2>&1 >/dev/null |
    awk '/I *refs:/ { gsub(",", "", $NF); print $NF }'
}
t5=$(count 5)
t25=$(count 25)
echo "instructions: T=5 $t5, T=25 $t25"
echo "per tool call: $(((t25 - t5) / 2000))"
echo "profiles: $target/callgrind.t5.out $target/callgrind.t25.out (callgrind_annotate)"
