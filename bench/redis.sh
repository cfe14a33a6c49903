#!/usr/bin/env bash
# blaster vs redis-benchmark (-t ping_mbulk) against the same redis-server, 64
# connections, pipelining 1 and 16; client on core 0, redis on core 1. Prints the rate
# and client CPU-seconds per million requests for each, and the ratios. blaster runs at
# the rate redis-benchmark achieved in the same round.
source "$(dirname "$0")/lib.sh"
need redis-server redis-server; need redis-benchmark redis-tools
PORT=$(free_port)
taskset -c 1 redis-server --port "$PORT" --bind 127.0.0.1 --save '' --appendonly no --daemonize no >/dev/null & PIDS+=($!)
sleep 0.5
header
for P in 1 16; do
    R_RPS=""; R_CPU=""; B_RPS=""; B_CPU=""; B_BUSY=""
    for i in $(seq "$RUNS"); do
        N=$((P == 1 ? 500000 : 3000000))
        cpu=$(cpu_of taskset -c 0 redis-benchmark -p "$PORT" -c 64 -n $N -P $P -t ping_mbulk -q)
        rps=$(grep -o '[0-9.]* requests per second' "$OUT/last.out" | tail -1 | awk '{print $1}')
        R_RPS+="$rps "; R_CPU+="$(python3 -c "print($cpu/$N*1e6)") "
        cpu=$(cpu_of "$B" run --target 127.0.0.1:$PORT --cores 0 --connections 64 --pipeline $P \
            --payload '*1\r\n$4\r\nPING\r\n' --framing resp --rate "$(python3 -c "print(int($rps))")" \
            --duration ${DUR}s --quiet --json "$OUT/b.json")
        read -r brps busy done < <(python3 -c "import json; r=json.load(open('$OUT/b.json')); w=r['workers'][0]; print(r['rate']['achieved_rps'], (w['cpu_ns']-w['spin_ns'])/1e9, r['requests']['completed'])")
        B_RPS+="$brps "; B_CPU+="$(python3 -c "print($cpu/$done*1e6)") "; B_BUSY+="$(python3 -c "print($busy/$done*1e6)") "
    done
    echo "pipelining $P"
    printf '  %-32s %-24s %-24s\n' tool "requests/s" "client CPU-s per 1M req"
    printf '  %-32s %-24s %-24s\n' "redis-benchmark -c64 -P$P" "$(med "$R_RPS")" "$(med "$R_CPU")"
    printf '  %-32s %-24s %-24s\n' "blaster (same rate)" "$(med "$B_RPS")" "$(med "$B_CPU")"
    printf '  %-32s %-24s %-24s\n' "  of which busy (excl. spin)" "" "$(med "$B_BUSY")"
    echo "  CPU per request, blaster / redis-benchmark: $(ratio "$B_CPU" "$R_CPU") (busy only: $(ratio "$B_BUSY" "$R_CPU"))"
done
