#!/usr/bin/env bash
# A/B two blaster binaries in the same minutes, alternating, against one built-in sink:
# bench/ab.sh OLD_BINARY NEW_BINARY [RATE]. Prints dispatch lag p50/p99/p999 and busy
# CPU per request for each round, so host noise hits both alike.
source "$(dirname "$0")/lib.sh"
OLD=$1; NEW=$2; RATE=${3:-100000}
PORT=$(free_port)
"$B" sink --listen 127.0.0.1:$PORT --cores 1 2>/dev/null & PIDS+=($!)
sleep 0.5
header
printf '%-4s %-5s %10s %10s %10s %14s\n' run bin "lag p50" "lag p99" "lag p999" "busy ns/req"
for i in $(seq "$RUNS"); do
    for name in OLD NEW; do
        bin=${!name}
        "$bin" run --target 127.0.0.1:$PORT --cores 0 --connections 64 --rate "$RATE" \
            --duration ${DUR}s --quiet --json "$OUT/ab.json" >/dev/null 2>&1 || true
        python3 -c "
import json; r=json.load(open('$OUT/ab.json')); l=r['dispatch_lag_ns']; w=r['workers'][0]
print(f\"{$i:<4} {'$name':<5} {l['p50']:>10} {l['p99']:>10} {l['p999']:>10} {w['busy_cpu_ns_per_request']:>14.0f}\")"
    done
done
