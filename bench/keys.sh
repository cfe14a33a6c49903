#!/usr/bin/env bash
# The cost of keys, feeders and replay (issue 37's benchmark: CPU per request with
# placeholders and from a replay file vs the plain template at 100k/s, goal <= 1.1x). One nginx worker on core 1, blaster
# on core 0 at RATE requests/s (default 100000) over 64 connections, HTTP/1.1 GETs:
#   plain    GET /k/1
#   zipf     GET /k/{zipf:100000:1.1}
#   uniform  GET /k/{uniform:100000}
#   line     GET /k/{line:FILE}  (a file of 100,000 keys)
#   replay   --replay FILE: a recording of GET /k/1 every 1/RATE s for the run's length
#            (the same request as plain: the difference is the replay's reading,
#            dealing and copying)
# Each round runs every variant in turn; prints each one's achieved rate and client
# CPU-seconds per million requests (process user+system, and the workers' busy time,
# spinning excluded), medians [min-max] of RUNS rounds, and each one's ratio to plain.
source "$(dirname "$0")/lib.sh"
start_nginx; PORT=$NGINX_PORT
RATE=${RATE:-100000}
seq 1 100000 | sed 's/^/key-/' > "$OUT/keys.txt"
python3 -c "
import sys
rate, dur = $RATE, $DUR
with open('$OUT/rec.txt', 'w') as f:
    for i in range(int(rate * dur)):
        f.write(f'{i * 1_000_000_000 // rate}ns GET /k/1\\n')
"
header
echo "# $RATE requests/s, 64 connections"
declare -A CPU BUSY RPS
VARIANTS=(plain zipf uniform line replay)
path_of() {
    case $1 in
        plain) echo "/k/1" ;;
        zipf) echo "/k/{zipf:100000:1.1}" ;;
        uniform) echo "/k/{uniform:100000}" ;;
        line) echo "/k/{line:$OUT/keys.txt}" ;;
    esac
}
# What each variant sends: a template at the rate, or the recording.
traffic_of() {
    case $1 in
        replay) echo "--replay $OUT/rec.txt" ;;
        *) echo "--http 'GET $(path_of "$1")' --rate $RATE --duration ${DUR}s" ;;
    esac
}
for i in $(seq "$RUNS"); do
    for v in "${VARIANTS[@]}"; do
        eval "args=($(traffic_of "$v"))"
        cpu=$(cpu_of "$B" run --target 127.0.0.1:$PORT --cores 0 --connections 64 \
            "${args[@]}" --quiet --json "$OUT/b.json")
        read -r rps busy done < <(python3 -c "import json; r=json.load(open('$OUT/b.json')); w=r['workers'][0]; print(r['rate']['achieved_rps'], (w['cpu_ns']-w['spin_ns'])/1e9, r['requests']['completed'])")
        [[ $done -gt 0 ]] || { cat "$OUT/last.err" >&2; exit 1; }
        CPU[$v]+="$(python3 -c "print($cpu/$done*1e6)") "
        BUSY[$v]+="$(python3 -c "print($busy/$done*1e6)") "
        RPS[$v]+="$rps "
    done
done
printf '%-10s %-26s %-26s %-26s %s\n' variant "requests/s" "CPU-s per 1M req" "busy CPU-s per 1M" "/ plain (CPU, busy)"
for v in "${VARIANTS[@]}"; do
    printf '%-10s %-26s %-26s %-26s %s\n' "$v" "$(med "${RPS[$v]}")" "$(med "${CPU[$v]}")" \
        "$(med "${BUSY[$v]}")" "$(ratio "${CPU[$v]}" "${CPU[plain]}"), $(ratio "${BUSY[$v]}" "${BUSY[plain]}")"
done
echo "goal: each <= 1.1x plain"
