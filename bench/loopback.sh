#!/usr/bin/env bash
# Loopback baseline benchmark: the generator's own ceiling on this machine.
#
# Runs `blaster` with no target (generator on core 0, built-in sink on core 1) RUNS
# times and prints the median and spread of requests/s per client core and of busy
# client CPU-seconds per million requests; then a fixed 100,000 requests/s run for the
# dispatch-lag target. Run it alone: two benchmarks at once on two cores measure
# each other.
#
# usage: [BLASTER=FILE] bench/loopback.sh [RUNS]   (default 3)
RUNS_ARG=${1:-3}
source "$(dirname "$0")/lib.sh"   # B (this tree's build, or BLASTER=FILE), OUT, PIDS
RUNS=$RUNS_ARG

echo "# $(uname -r), $(nproc) cores, $(rustc --version)"
echo "# $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
for i in $(seq 1 "$RUNS"); do
    "$B" --cores 0 --connections 64 --payload-size 64 --start-rate 60000 \
        --step-duration 2s --json "$OUT/baseline-$i.json" --quiet >/dev/null 2>"$OUT/baseline-$i.err"
done

PORT=$(free_port)
"$B" sink --listen 127.0.0.1:$PORT --cores 1 2>/dev/null &
SINK=$!
PIDS+=($SINK)
sleep 0.5
for i in $(seq 1 "$RUNS"); do
    "$B" run --target 127.0.0.1:$PORT --cores 0 --connections 64 --rate 100000 \
        --duration 5s --json "$OUT/fixed-$i.json" --quiet >/dev/null 2>&1 || true
done
kill $SINK 2>/dev/null || true

python3 - "$OUT" "$RUNS" <<'PY'
import json, statistics, sys
out, runs = sys.argv[1], int(sys.argv[2])
def med(xs): return statistics.median(xs), min(xs), max(xs)
b = [json.load(open(f"{out}/baseline-{i}.json")) for i in range(1, runs + 1)]
per_core = [x["ceiling_rps_per_core"] for x in b]
cpu = [x["busy_cpu_ns_per_request_at_ceiling"] / 1000 for x in b]   # CPU-s per 1e6 requests
lag_c = [x["dispatch_lag_p99_ns_at_ceiling"] / 1000 for x in b]
f = [json.load(open(f"{out}/fixed-{i}.json")) for i in range(1, runs + 1)]
lag = [x["dispatch_lag_ns"]["p99"] / 1000 for x in f]
lag999 = [x["dispatch_lag_ns"]["p999"] / 1000 for x in f]
ach = [x["rate"]["achieved_rps"] for x in f]
valid = [x["valid"] for x in f]
print(f"{'metric':<48} {'median':>10} {'min':>10} {'max':>10}")
for name, xs in [
    ("ceiling requests/s per client core (64B echo, 64 conns)", per_core),
    ("busy client CPU-s per million requests at ceiling", cpu),
    ("dispatch lag p99 at ceiling (us)", lag_c),
    ("dispatch lag p99 at 100k rps fixed (us)", lag),
    ("dispatch lag p99.9 at 100k rps fixed (us)", lag999),
    ("achieved rps at 100k rps fixed", ach),
]:
    m, lo, hi = med(xs)
    print(f"{name:<48} {m:>10.1f} {lo:>10.1f} {hi:>10.1f}")
print(f"targets: >= 180000 req/s per core; lag p99 < 50 us at 100k; valid runs at 100k: {valid}")
PY
