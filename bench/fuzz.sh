#!/usr/bin/env bash
# Runs the cargo-fuzz targets in fuzz/ and prints one row per target.
#
# usage: bench/fuzz.sh [SECONDS_PER_TARGET | smoke] [TARGET...]
#   SECONDS_PER_TARGET  how long each target runs (default 60)
#   smoke               15 s per target: the CI check that no parser crashes
#   TARGET...           targets to run (default: all, as `cargo fuzz list` prints them)
#
# Environment:
#   RUNS=N         run each target for N executions instead of for a time
#   FUZZ_LOCK=F    hold `flock F` around each target's run, so a long campaign lets
#                  other jobs that take the same lock (benchmarks) in between targets
#
# Table: target, executions, crashes, corpus (files in fuzz/corpus/TARGET after the
# run), seconds (wall, from when the lock is held). libFuzzer stops a target at its
# first crash, panic, hang (-timeout=10 s per input) or out-of-memory, so crashes is 0
# or 1 per run; the input is saved under fuzz/artifacts/TARGET/ and the panic printed.
# A run that ends without a crash input (a build error, a signal from outside) shows
# "stopped" and the executions it reached. Exit 1 when any target crashed or stopped,
# 2 on a bad argument.
#
# Seeds: fuzz/seeds/TARGET/ (hand-written, in git) are read with the corpus, and
# fuzz/dicts/TARGET.dict (the grammar's tokens) is passed as -dict; what the fuzzer
# finds goes to fuzz/corpus/TARGET/ (not in git). Builds with the nightly
# toolchain, installing it and cargo-fuzz when missing. The targets are built with
# overflow checks and debug assertions on (-a) and no sanitizer (-s none): the parsers
# are safe Rust, where an out-of-bounds access is a panic already, and without ASan
# the campaign runs about twice the executions.
set -euo pipefail
export LC_ALL=C
cd "$(dirname "$0")/.."

usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; }
bad() { echo "fuzz: $*" >&2; exit 2; }

SECONDS_PER=60
case "${1:-}" in
    -h|--help) usage; exit 0 ;;
    smoke) SECONDS_PER=15; shift ;;
    ''|*[!0-9]*) ;;
    *) SECONDS_PER=$1; shift; [ "$SECONDS_PER" -gt 0 ] || bad "SECONDS_PER_TARGET must be > 0" ;;
esac
if [ -n "${RUNS:-}" ]; then
    case $RUNS in ''|*[!0-9]*) bad "RUNS must be a number of executions, got $RUNS" ;; esac
fi

command -v cargo >/dev/null || { echo "fuzz: cargo is required (rustup)" >&2; exit 1; }
if ! rustup toolchain list | grep -q '^nightly'; then
    rustup toolchain install nightly --profile minimal >&2
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
    cargo install cargo-fuzz --locked >&2
fi

FLAGS=(-s none -a)
cd fuzz
ALL=$(cargo +nightly fuzz list)
TARGETS=("$@")
[ ${#TARGETS[@]} -gt 0 ] || mapfile -t TARGETS <<<"$ALL"
for t in "${TARGETS[@]}"; do
    grep -qx -- "$t" <<<"$ALL" || bad "unknown target $t (targets: $(echo $ALL))"
done
cargo +nightly fuzz build "${FLAGS[@]}" >&2

if [ -n "${RUNS:-}" ]; then LIMIT=(-runs="$RUNS"); WHAT="$RUNS executions"
else LIMIT=(-max_total_time="$SECONDS_PER"); WHAT="$SECONDS_PER s"; fi
LOG=$(mktemp -d)
trap 'rm -rf "$LOG"' EXIT

echo "# $(date -u '+%F %H:%M') UTC, $(cargo fuzz --version), $(rustc +nightly --version | cut -d' ' -f1-2)," \
    "$(nproc) cores; $WHAT per target; cargo fuzz run ${FLAGS[*]} TARGET -- ${LIMIT[*]}"
printf '%-16s %12s %8s %8s %8s\n' target executions crashes corpus seconds
failed=0
for t in "${TARGETS[@]}"; do
    mkdir -p "corpus/$t" "artifacts/$t"
    seeds=(); [ -d "seeds/$t" ] && seeds=("seeds/$t")
    dict=(); [ -f "dicts/$t.dict" ] && dict=(-dict="dicts/$t.dict")
    touch "$LOG/$t.start"
    # The clock starts inside the lock: seconds are the run's, not the wait for it.
    run=(sh -c 'date +%s.%N >"$0"; exec "$@"' "$LOG/$t.t0"
        cargo +nightly fuzz run "${FLAGS[@]}" "$t" "corpus/$t" "${seeds[@]}" --
        "${LIMIT[@]}" "${dict[@]}" -timeout=10 -print_final_stats=1)
    [ -z "${FUZZ_LOCK:-}" ] || run=(flock "$FUZZ_LOCK" "${run[@]}")
    rc=0; "${run[@]}" >"$LOG/$t" 2>&1 || rc=$?
    secs=$(awk -v b="$(date +%s.%N)" '{ print b - $1 }' "$LOG/$t.t0" 2>/dev/null || echo 0)
    # The final stats, or for a run that did not finish, its last progress line (#N).
    execs=$(awk '/^#[0-9]+/ { n = substr($1, 2) } /^stat::number_of_executed_units:/ {
        n = $NF } END { print n + 0 }' "$LOG/$t")
    crashes=$(find "artifacts/$t" -type f -newer "$LOG/$t.start" | wc -l)
    shown=$crashes
    # Stopped without saving an input: a build error, or a signal from outside (exit
    # 128 + N). Not a crash of the target, but not a clean run either.
    [ "$rc" -eq 0 ] || [ "$crashes" -gt 0 ] || shown=stopped
    printf '%-16s %12s %8s %8s %8.1f\n' "$t" "$execs" "$shown" \
        "$(find "corpus/$t" -type f | wc -l)" "$secs"
    if [ "$crashes" -gt 0 ]; then
        failed=1
        { echo "fuzz: $t crashed (exit $rc):"
          grep -E -m4 -A2 'panicked at|==ERROR|ERROR: libFuzzer' "$LOG/$t" || tail -n 40 "$LOG/$t"
          find "artifacts/$t" -type f -newer "$LOG/$t.start" -printf 'fuzz: input saved as fuzz/%p\n'; } >&2
    elif [ "$rc" -ne 0 ]; then
        failed=1
        { echo "fuzz: $t stopped (exit $rc) without a crash input; the end of its log:"
          tail -n 20 "$LOG/$t"; } >&2
    fi
done
exit "$failed"
