#!/bin/bash
# bench/frames.sh: the largest connections x frames/s blaster sustains on one core with
# the broadcast sink on another (rooms of 10, 30 frames/s per connection), deviation
# p99 within one tick and the run valid; client CPU per frame received against the
# issue's 300 ns budget. Not a timed test; run under `flock /work/bench.lock`.
# Usage: bench/frames.sh [BIN] [CONNECTIONS...]
set -euo pipefail
BIN=${1:-./target/release/blaster}; shift || true
CONNS=${*:-1000 2000 4000 8000}
PORT=$(python3 -c "import socket;s=socket.socket();s.bind(('127.0.0.1',0));print(s.getsockname()[1])")
$BIN sink --listen 127.0.0.1:$PORT --cores 1 --mode broadcast --room-size 10 >/dev/null 2>&1 &
SINK=$!
trap 'kill $SINK 2>/dev/null' EXIT
sleep 0.5
printf "%-8s %-10s %-10s %-12s %-9s %-8s %-10s\n" conns up_fps down_fps dev_p99_ms retention valid cpu_ns/frame
for n in $CONNS; do
  out=$(mktemp)
  $BIN run --target 127.0.0.1:$PORT --cores 0 --workload frames --tick 33ms --frame-size 50 \
      --connections $n --room-size 10 --duration 10s --quiet --json $out >/dev/null 2>&1 || true
  python3 - "$out" "$n" <<'PY'
import json,sys
v=json.load(open(sys.argv[1])); f=v["frames"]
print(f"{sys.argv[2]:<8} {f['up_fps']:<10.0f} {f['down_fps']:<10.0f} {f['deviation_ns']['p99']/1e6:<12.2f} {f['retention']:<9.5f} {str(v['valid']):<8} {f['cpu_ns_per_frame_received']:<10.0f}")
PY
  rm -f $out
done
