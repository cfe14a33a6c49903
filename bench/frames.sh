#!/bin/bash
# bench/frames.sh: the largest connections x frames/s blaster sustains on one core with
# the broadcast sink on another (rooms of 10, 30 frames/s per connection), deviation
# p99 within one tick and the run valid; client CPU per frame received against the
# issue's 300 ns budget. Not a timed test; run under `flock /work/bench.lock`.
# Usage: bench/frames.sh [CONNECTIONS...]   (release build; DUR seconds each, default 10)
# MEMBERS=M: each connection carries M members (--members-per-connection, the sink too):
# the frames per second are then CONNECTIONS x M x 30 up, and 9 times that down.
# SERVER=nats: against nats-server on core 1 instead (`--frame-proto nats`), with the
# server's CPU (user + system, from /proc) beside each step: server_cpu is its share of
# one core over the run, server_ns/msg its CPU per message it delivered.
# SERVER=grpc: members are gRPC bidi calls (`--frame-proto grpc`, 100 calls per h2c
# connection with MEMBERS=100) against the sink's gRPC rooms (`--mode broadcast
# --http2`), the figure issue 35 asks for (goal: 2,000,000 frames received per second).
# PROFILE=N: also run N connections under `perf record -e cpu-clock` and split the
# client's CPU per frame received into user space (blaster's own work: decoding,
# accounting, histogram recording, encoding, the ring) and the kernel's parts.
DUR=${DUR:-10}
source "$(dirname "$0")/lib.sh"
CONNS=${*:-1000 2000 4000 8000}
MEMBERS=${MEMBERS:-1}
# Named only when asked for, so a build from before the flag (BLASTER=FILE) runs too.
MEMBER_ARGS=(); [[ $MEMBERS == 1 ]] || MEMBER_ARGS=(--members-per-connection "$MEMBERS")
PORT=$(free_port)
PROTO=()
if [ "${SERVER:-}" = nats ]; then
  need nats-server nats-server
  taskset -c 1 nats-server -a 127.0.0.1 -p "$PORT" >/dev/null 2>&1 &
  PROTO=(--frame-proto nats)
else
  SINK_ARGS=()
  if [ "${SERVER:-}" = grpc ]; then
    SINK_ARGS=(--http2)
    PROTO=(--frame-proto grpc --grpc blaster.Room/Join)
  fi
  taskset -c 1 "$B" sink --listen 127.0.0.1:$PORT --cores 1 --mode broadcast --room-size 10 \
      "${MEMBER_ARGS[@]}" "${SINK_ARGS[@]}" >/dev/null 2>&1 &
fi
SERVER_PID=$!
PIDS+=($SERVER_PID)
sleep 0.5
echo "# $(date -u +%F) $(uname -r), $(nproc) cores; client on core 0, server on core 1; one run of ${DUR}s per step"
frames_run() { # N JSON [WRAPPER...]
    local n=$1 json=$2; shift 2
    "$@" "$B" run --target 127.0.0.1:$PORT --cores 0 --workload frames --tick 33ms \
        --frame-size 50 --connections "$n" --room-size 10 --duration ${DUR}s --quiet \
        "${MEMBER_ARGS[@]}" \
        "${PROTO[@]}" --json "$json" >/dev/null 2>&1 || true
}
# The server's CPU so far, in clock ticks (user + system).
server_ticks() { awk '{print $14 + $15}' "/proc/$SERVER_PID/stat"; }
echo "server: ${SERVER:-sink}; members per connection: $MEMBERS"
printf "%-8s %-10s %-10s %-12s %-10s %-9s %-8s %-13s %-11s %-12s %-10s %s\n" conns up_fps down_fps dev_p99_ms lag_p99_ms retention valid ns/frame_recv ns/frame cpu_basis server_cpu server_ns/msg
for n in $CONNS; do
  t0=$(server_ticks); w0=$(date +%s.%N)
  frames_run "$n" "$OUT/f.json"
  t1=$(server_ticks); w1=$(date +%s.%N)
  python3 - "$OUT/f.json" "$n" "$((t1 - t0))" "$(getconf CLK_TCK)" "$w0" "$w1" <<'PY'
import json,sys
v=json.load(open(sys.argv[1])); f=v["frames"]
lag=(v.get('dispatch_lag_ns') or {}).get('p99',0)/1e6
cpu=int(sys.argv[3])/int(sys.argv[4]); wall=float(sys.argv[6])-float(sys.argv[5])
msgs=f['received']+f['sent']
print(f"{sys.argv[2]:<8} {f['up_fps']:<10.0f} {f['down_fps']:<10.0f} {f['deviation_ns']['p99']/1e6:<12.2f} {lag:<10.2f} {f['retention']:<9.5f} {str(v['valid']):<8} {f['cpu_ns_per_frame_received']:<13.0f} {f['cpu_ns_per_frame']:<11.0f} {f['cpu_basis']:<12} {cpu/wall:<10.2f} {cpu/max(msgs,1)*1e9:.0f}")
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
