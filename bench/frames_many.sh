#!/bin/bash
# bench/frames_many.sh: frames with many connections on one generator core (issue 22):
# N connections (default 100000), tick 1 s, 50-byte frames, each frame echoed back to
# its sender (rooms of one, --echo-to-sender) by the sink in echo mode on core 1
# (--max-connections N; a broadcast sink holds one ring's table, 20,000 here, while the
# echo sink spreads N over several rings), from ceil(N / 12000) source addresses
# 127.0.0.2.. (the kernel's port search stays under half the ephemeral range per
# source). Prints the generator's CPU per second of the run (user and system, from
# /usr/bin/time), its dispatch lag p99, the retention, the rings per core and the
# verdict. Not a timed test; run under `flock /tmp/bench.lock`.
# Usage: N=100000 DUR=20 bench/frames_many.sh   (release build)
DUR=${DUR:-20}
N=${N:-100000}
source "$(dirname "$0")/lib.sh"
need /usr/bin/time time
SRC=$(( (N + 11999) / 12000 ))
if (( SRC == 1 )); then SRC_RANGE=127.0.0.2; else SRC_RANGE=127.0.0.2-127.0.0.$((1 + SRC)); fi
PORT=$(free_port)
taskset -c 1 "$B" sink --listen 127.0.0.1:$PORT --cores 1 --mode echo \
    --max-connections $((N + 1024)) >/dev/null 2>&1 &
PIDS+=($!)
sleep 1
echo "# $(date -u +%F) $(uname -r), $(nproc) cores; client on core 0, sink on core 1;" \
    "N=$N tick 1s, ${DUR}s, sources $SRC_RANGE"
/usr/bin/time -f '%U %S %e' -o "$OUT/time" taskset -c 0 "$B" run --target 127.0.0.1:$PORT \
    --cores 0 --workload frames --tick 1s --frame-size 50 --connections "$N" --room-size 1 \
    --echo-to-sender \
    --duration ${DUR}s --source-ip "$SRC_RANGE" --quiet --json "$OUT/f.json" \
    >/dev/null 2>"$OUT/err" || true
[ -s "$OUT/f.json" ] || { echo "bench: no report:"; tail -3 "$OUT/err"; exit 1; }
read -r user sys wall < <(tail -1 "$OUT/time")
python3 - "$OUT/f.json" "$user" "$sys" "$wall" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
user, sys_, wall = map(float, sys.argv[2:5])
fr = r["frames"]; c = r["connections"]
print(f"{'connections':>12} {'rings/core':>10} {'user s':>8} {'sys s':>8} {'wall s':>7} "
      f"{'cpu/s':>7} {'lag p99':>10} {'retention':>10} {'valid':>6}")
print(f"{c['established']:>12} {c.get('rings_per_core', 1):>10} {user:>8.2f} {sys_:>8.2f} "
      f"{wall:>7.1f} {(user + sys_) / wall:>7.3f} "
      f"{r['dispatch_lag_ns']['p99'] / 1e3:>8.0f}us {fr['retention']:>10.6f} {str(r['valid']):>6}")
PY
