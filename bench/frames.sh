#!/bin/bash
# bench/frames.sh: the largest connections x frames/s blaster sustains on one core with
# the broadcast sink on another (rooms of 10, 30 frames/s per connection), deviation
# p99 within one tick and the run valid; client CPU per frame received against the
# issue's 300 ns budget. Not a timed test; run under `flock /work/bench.lock`.
# Usage: bench/frames.sh [CONNECTIONS...]   (release build; DUR seconds each, default 10)
# PROFILE=N: also run N connections under `perf record -e cpu-clock` and split the
# client's CPU per frame received into user space (blaster's own work: decoding,
# accounting, histogram recording, encoding, the ring) and the kernel's parts.
DUR=${DUR:-10}
source "$(dirname "$0")/lib.sh"
CONNS=${*:-1000 2000 4000 8000}
PORT=$(free_port)
taskset -c 1 "$B" sink --listen 127.0.0.1:$PORT --cores 1 --mode broadcast --room-size 10 >/dev/null 2>&1 &
PIDS+=($!)
sleep 0.5
header
frames_run() { # N JSON [WRAPPER...]
    local n=$1 json=$2; shift 2
    "$@" "$B" run --target 127.0.0.1:$PORT --cores 0 --workload frames --tick 33ms \
        --frame-size 50 --connections "$n" --room-size 10 --duration ${DUR}s --quiet \
        --json "$json" >/dev/null 2>&1 || true
}
printf "%-8s %-10s %-10s %-12s %-10s %-9s %-8s %-13s %-11s %s\n" conns up_fps down_fps dev_p99_ms lag_p99_ms retention valid ns/frame_recv ns/frame cpu_basis
for n in $CONNS; do
  frames_run "$n" "$OUT/f.json"
  python3 - "$OUT/f.json" "$n" <<'PY'
import json,sys
v=json.load(open(sys.argv[1])); f=v["frames"]
lag=(v.get('dispatch_lag_ns') or {}).get('p99',0)/1e6
print(f"{sys.argv[2]:<8} {f['up_fps']:<10.0f} {f['down_fps']:<10.0f} {f['deviation_ns']['p99']/1e6:<12.2f} {lag:<10.2f} {f['retention']:<9.5f} {str(v['valid']):<8} {f['cpu_ns_per_frame_received']:<13.0f} {f['cpu_ns_per_frame']:<11.0f} {f['cpu_basis']}")
PY
done
if [ -n "${PROFILE:-}" ]; then
  need perf linux-perf
  frames_run "$PROFILE" "$OUT/p.json" perf record -q -e cpu-clock -F 5000 -g -o "$OUT/perf.data" -- taskset -c 0
  R=$(python3 -c "import json; print(json.load(open('$OUT/p.json'))['frames']['received'])")
  echo "perf, $PROFILE connections ($R frames received, spinning included, as perf sees it):"
  echo "  $(perf_split "$OUT/perf.data" "$R" ns frame)"
  echo "  user-space symbols, ns per frame received:"
  perf_top_user "$OUT/perf.data" "$R" 12
fi
