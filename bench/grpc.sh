#!/usr/bin/env bash
# gRPC unary calls at fixed rates (RATES, default "2000 20000"), blaster --grpc beside a
# fixed-rate Python grpcio client (bench/grpc_peer.py: each call issued at its absolute
# instant with future(), so it is open-model too), both against `blaster sink --http2`
# (gRPC echo) on core 1, client on core 0, 4 connections, empty messages. Prints each
# client's achieved calls/s and CPU microseconds per call (process user + system), and
# the ratio blaster / grpcio. RUNS rounds of DUR seconds; medians [min-max].
# Then (STALL=0 skips it) the open-loop truth: a fresh sink per run freezing 1 s every
# 10 s (`--stall 1s --every 10s`), 2,000 calls/s for 10 s from each client: 10% of the
# calls wait uniformly on (0, 1 s], so the analytic p99, counted from each call's
# intended instant, is 0.9 s; both clients' p99 printed beside it.
source "$(dirname "$0")/lib.sh"
python3 -c 'import grpc' 2>/dev/null || { echo "bench: python3 -m pip install grpcio" >&2; exit 1; }
RATES=${RATES:-"2000 20000"}
port=$(free_port)
taskset -c 1 "$B" sink --http2 --listen 127.0.0.1:"$port" --cores 1 --duration 1h >/dev/null 2>&1 &
PIDS+=($!)
sleep 0.5
header
printf '%-8s %-30s %-22s %-22s\n' rate client "calls/s" "CPU us per call"
for rate in $RATES; do
    P_RPS=""; P_CPU=""; B_RPS=""; B_CPU=""
    for i in $(seq "$RUNS"); do
        cpu=$(cpu_of taskset -c 0 python3 bench/grpc_peer.py 127.0.0.1:"$port" "$rate" "$DUR" 4)
        read -r _ calls _ ok _ ach _ < "$OUT/last.out" || { cat "$OUT/last.err" >&2; exit 1; }
        P_RPS+="$ach "; P_CPU+="$(python3 -c "print($cpu/max($ok,1)*1e6)") "
        cpu=$(cpu_of "$B" run --target 127.0.0.1:"$port" --cores 0 --connections 4 \
            --grpc blaster.Echo/Say --rate "$rate" --duration "${DUR}s" --quiet --json "$OUT/b.json")
        read -r brps done < <(python3 -c "import json; r=json.load(open('$OUT/b.json')); print(r['rate']['achieved_rps'], r['requests']['completed'])")
        B_RPS+="$brps "; B_CPU+="$(python3 -c "print($cpu/max($done,1)*1e6)") "
    done
    printf '%-8s %-30s %-22s %-22s\n' "$rate" "grpcio (Python, future())" "$(med "$P_RPS")" "$(med "$P_CPU")"
    printf '%-8s %-30s %-22s %-22s\n' "$rate" "blaster --grpc" "$(med "$B_RPS")" "$(med "$B_CPU")"
    echo "$rate/s: CPU per call, blaster / grpcio: $(ratio "$B_CPU" "$P_CPU")"
done

[[ ${STALL:-1} == 0 ]] && exit 0
echo "open-loop truth: sink --stall 1s --every 10s, 2000 calls/s for 10 s, 16 connections; analytic p99 900 ms"
P_P99=""; B_P99=""
for i in $(seq "$RUNS"); do
    for client in grpcio blaster; do
        sp=$(free_port)
        taskset -c 1 "$B" sink --http2 --stall 1s --every 10s --listen 127.0.0.1:"$sp" --cores 1 --duration 1m >/dev/null 2>&1 &
        spid=$!; PIDS+=("$spid")
        sleep 0.5
        if [[ $client == grpcio ]]; then
            taskset -c 0 python3 bench/grpc_peer.py 127.0.0.1:"$sp" 2000 10 16 > "$OUT/last.out"
            read -r _ _ _ _ _ _ _ p99 < "$OUT/last.out"
            P_P99+="$p99 "
        else
            "$B" run --target 127.0.0.1:"$sp" --cores 0 --connections 16 --grpc blaster.Echo/Say \
                --rate 2000 --duration 10s --quiet --json "$OUT/s.json" >/dev/null 2>&1 || true
            B_P99+="$(python3 -c "import json; r=json.load(open('$OUT/s.json')); print(r['latency_ns']['p99']/1e6, 'valid' if r['valid'] else 'INVALID')" | tee -a "$OUT/valid" | cut -d' ' -f1) "
        fi
        kill "$spid" 2>/dev/null || true
    done
done
printf '%-30s %s\n' "grpcio (Python, future()) p99 ms" "$(med "$P_P99")"
printf '%-30s %s\n' "blaster --grpc p99 ms" "$(med "$B_P99")  ($(grep -c INVALID "$OUT/valid" || true) of $RUNS runs invalid)"
