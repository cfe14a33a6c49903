#!/usr/bin/env bash
# Two blaster builds closed loop, alternating round by round (host noise hits both
# alike): bench/ab_closed.sh OLD_BINARY NEW_BINARY.
#   client: each build's `run --concurrency 64 --payload-size 64` against one sink (the
#           new build's) on core 1; its process CPU (user + system) per request.
#   sink:   the new build's client against each build's sink on core 1; the sink's
#           CPU (from /proc) per request.
# ROUNDS (default 5) rounds of DUR seconds (default 5); medians [min-max] and new/old.
source "$(dirname "$0")/lib.sh"
OLD=${1:?usage: bench/ab_closed.sh OLD_BINARY NEW_BINARY}; NEW=${2:?usage: bench/ab_closed.sh OLD_BINARY NEW_BINARY}
ROUNDS=${ROUNDS:-5}
client_run() { # BINARY PORT: prints CPU us per request of the client process
    local cpu
    cpu=$(cpu_of taskset -c 0 "$1" run --target 127.0.0.1:"$2" --cores 0 --concurrency 64 \
        --payload-size 64 --duration "${DUR}s" --quiet --json "$OUT/c.json")
    python3 -c "import json; r=json.load(open('$OUT/c.json')); print($cpu / r['requests']['completed'] * 1e6)"
}
start_sink() { # BINARY: starts it on core 1, sets SINK_PID and SINK_PORT
    SINK_PORT=$(free_port)
    "$1" sink --listen 127.0.0.1:"$SINK_PORT" --cores 1 >/dev/null 2>&1 & SINK_PID=$!; PIDS+=($SINK_PID)
    sleep 0.5
}
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
header
declare -A CLIENT SINK
start_sink "$NEW"; shared=$SINK_PID; shared_port=$SINK_PORT
for i in $(seq "$ROUNDS"); do
    for side in OLD NEW; do
        CLIENT[$side]+="$(client_run "${!side}" "$shared_port") "
    done
done
kill "$shared"
for i in $(seq "$ROUNDS"); do
    for side in OLD NEW; do
        start_sink "${!side}"
        t0=$(ticks "$SINK_PID")
        client_run "$NEW" "$SINK_PORT" > /dev/null
        t1=$(ticks "$SINK_PID")
        kill "$SINK_PID"; wait "$SINK_PID" 2>/dev/null || true
        SINK[$side]+="$(python3 -c "import json; r=json.load(open('$OUT/c.json')); print(($t1 - $t0) / $(getconf CLK_TCK) / r['requests']['completed'] * 1e6)") "
    done
done
printf '%-44s %-24s %-24s %s\n' "CPU us per request, closed loop" old new new/old
printf '%-44s %-24s %-24s %s\n' "client (against the new build's sink)" "$(med "${CLIENT[OLD]}")" "$(med "${CLIENT[NEW]}")" "$(ratio "${CLIENT[NEW]}" "${CLIENT[OLD]}")"
printf '%-44s %-24s %-24s %s\n' "sink (the new build's client)" "$(med "${SINK[OLD]}")" "$(med "${SINK[NEW]}")" "$(ratio "${SINK[NEW]}" "${SINK[OLD]}")"
