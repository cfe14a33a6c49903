#!/usr/bin/env bash
# bench/frames_peer.sh: frames CPU per message beside a minimal epoll client (issue 22:
# "<= 0.8x tcpkali's CPU per frame at 1,500 connections x 30 frames/s"; tcpkali is not
# packaged here, so bench/epoll_frames.c stands in: per message it does what tcpkali
# does, a write when the message is due (1 ms timer) and an epoll wait plus a read per
# readable connection, and it measures nothing per frame). Both drive N connections
# (default 1500) x one 50-byte frame per TICK (33ms, 30/s) through `blaster sink --mode
# echo` on core 1, which sends every frame back to its sender; the client on core 0.
# Per round, alternating: the epoll client, blaster's default (`--spin auto
# --resolution 500us`) and blaster `--resolution 1ms`. Prints the client CPU (user +
# system, from bash time, connect phase included) per frame sent (each one also
# received back) and its kernel (system) part, medians [min-max] of RUNS rounds, and
# the ratios.
# Usage: [N=1500] [TICK=33ms] [RUNS=3] [DUR=10] bench/frames_peer.sh   (alone, quiet host)
DUR=${DUR:-10}
source "$(dirname "$0")/lib.sh"
need cc gcc
N=${N:-1500}
TICK=${TICK:-33ms}
TICK_MS=${TICK%ms}
[[ $TICK_MS =~ ^[0-9]+$ ]] || { echo "bench: TICK must be in ms (e.g. 33ms)" >&2; exit 1; }
cc -O2 -o "$OUT/epoll_frames" bench/epoll_frames.c
PORT=$(free_port)
taskset -c 1 "$B" sink --listen 127.0.0.1:$PORT --cores 1 --mode echo \
    --max-connections $((N + 1024)) >/dev/null 2>&1 &
PIDS+=($!)
sleep 1
header
echo "# N=$N connections, one 50-byte frame each per $TICK, echoed back by blaster sink --mode echo"
declare -A CPU SYS
modes=("epoll|" "default|--spin auto --resolution 500us" "res1ms|--spin auto --resolution 1ms")
for i in $(seq "$RUNS"); do
    for m in "${modes[@]}"; do
        name=${m%%|*}; flags=${m#*|}
        if [[ $name == epoll ]]; then
            cpu=$(cpu_of taskset -c 0 "$OUT/epoll_frames" 127.0.0.1 "$PORT" "$N" "$TICK_MS" 50 "$DUR")
            [[ -s $OUT/last.out ]] || { cat "$OUT/last.err" >&2; exit 1; }
            read -r sent recv < <(python3 -c "import json; r=json.load(open('$OUT/last.out')); print(r['sent'], r['received'])")
            lag="-"
        else
            rm -f "$OUT/f.json"
            # shellcheck disable=SC2086
            cpu=$(cpu_of taskset -c 0 "$B" run --target 127.0.0.1:$PORT \
                --cores 0 --workload frames --tick "$TICK" --frame-size 50 --connections "$N" \
                --room-size 1 --echo-to-sender --duration "${DUR}s" $flags --quiet \
                --json "$OUT/f.json")
            [[ -s $OUT/f.json ]] || { echo "bench: blaster gave no report:" >&2; tail -3 "$OUT/last.err" >&2; exit 1; }
            read -r sent recv lag < <(python3 -c "import json; r=json.load(open('$OUT/f.json')); f=r['frames']; print(f['sent'], f['received'], r['dispatch_lag_ns']['p99']/1e3)")
        fi
        sys=$(awk '{print $2}' "$OUT/time")
        echo "bench: round $i $name: sent $sent, received $recv, CPU ${cpu}s (system ${sys}s), lag p99 ${lag}us" >&2
        CPU[$name]+="$(python3 -c "print($cpu / max($sent, 1) * 1e6)") "
        SYS[$name]+="$(python3 -c "print($sys / max($sent, 1) * 1e6)") "
    done
done
printf '%-46s %-22s %-22s %s\n' client "CPU us per frame" "of which system" "vs epoll"
printf '%-46s %-22s %-22s %s\n' "epoll_frames (1 ms timer)" "$(med "${CPU[epoll]}")" "$(med "${SYS[epoll]}")" 1
for m in "${modes[@]:1}"; do
    name=${m%%|*}; flags=${m#*|}
    printf '%-46s %-22s %-22s %s\n' "blaster frames $flags" "$(med "${CPU[$name]}")" "$(med "${SYS[$name]}")" \
        "$(ratio "${CPU[$name]}" "${CPU[epoll]}")"
done
echo "issue 22's reference: blaster (--spin 0) 9.7 CPU-us per message, tcpkali 4.7 (2.1x); goal <= 0.8x the peer"
