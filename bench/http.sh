#!/usr/bin/env bash
# blaster vs wrk against the same nginx (one worker, keepalive_requests raised), 64
# connections, one request in flight per connection, client on core 0, nginx on core 1.
# Prints requests/s and client CPU-seconds per million requests for each, and the ratio.
# blaster runs open-loop at the rate wrk achieved in the same round, so both do the same
# work; its CPU includes the time it spins on the TSC before due sends.
# SPIN=0 bench/http.sh runs blaster with --spin 0 (sleep instead of spinning).
source "$(dirname "$0")/lib.sh"
need wrk wrk; need nginx nginx-light
start_nginx; PORT=$NGINX_PORT
header
W_RPS=""; W_CPU=""; B_RPS=""; B_CPU=""; B_BUSY=""
for i in $(seq "$RUNS"); do
    cpu=$(cpu_of taskset -c 0 wrk -t1 -c64 -d${DUR}s "http://127.0.0.1:$PORT/")
    rps=$(awk '/Requests\/sec/ {print $2}' "$OUT/last.out")
    W_RPS+="$rps "; W_CPU+="$(python3 -c "print($cpu/($rps*$DUR)*1e6)") "
    rate=$(python3 -c "print(int($rps))")
    cpu=$(cpu_of "$B" run --target 127.0.0.1:$PORT --cores 0 --connections 64 --http 'GET /' \
        --rate "$rate" --duration ${DUR}s --spin "${SPIN:-2ms}" --quiet --json "$OUT/b.json")
    read -r brps busy done < <(python3 -c "import json; r=json.load(open('$OUT/b.json')); w=r['workers'][0]; print(r['rate']['achieved_rps'], (w['cpu_ns']-w['spin_ns'])/1e9, r['requests']['completed'])")
    B_RPS+="$brps "; B_CPU+="$(python3 -c "print($cpu/$done*1e6)") "; B_BUSY+="$(python3 -c "print($busy/$done*1e6)") "
done
printf '%-34s %-24s %-24s\n' tool "requests/s" "client CPU-s per 1M req"
printf '%-34s %-24s %-24s\n' "wrk -t1 -c64" "$(med "$W_RPS")" "$(med "$W_CPU")"
printf '%-34s %-24s %-24s\n' "blaster (same rate, --spin ${SPIN:-2ms})" "$(med "$B_RPS")" "$(med "$B_CPU")"
printf '%-34s %-24s %-24s\n' "  of which busy (excl. spin)" "" "$(med "$B_BUSY")"
echo "CPU per request, blaster / wrk: $(ratio "$B_CPU" "$W_CPU") (target <= 0.6); busy only: $(ratio "$B_BUSY" "$W_CPU")"
