#!/usr/bin/env bash
# Where an HTTP request's client CPU goes: blaster against nginx (core 1) at a fixed
# rate (RATE, default 190000) for DUR seconds, under `perf stat` (io_uring_enter calls
# per request) and `perf record -e cpu-clock` for blaster and for wrk at its own maximum
# (CPU per request split into user space, io_uring, the kernel network path and the rest;
# the network path is the floor both tools share). Needs linux-perf and wrk.
source "$(dirname "$0")/lib.sh"
need perf linux-perf
RATE=${RATE:-190000}
start_nginx; PORT=$NGINX_PORT
header
perf stat -x, -e syscalls:sys_enter_io_uring_enter -o "$OUT/stat.csv" -- \
    "$B" run --target 127.0.0.1:$PORT --cores 0 --connections 64 --http 'GET /' \
    --rate "$RATE" --duration ${DUR}s --quiet --json "$OUT/s.json" >/dev/null
enters=$(grep io_uring_enter "$OUT/stat.csv" | cut -d, -f1)
done_=$(python3 -c "import json; print(json.load(open('$OUT/s.json'))['requests']['completed'])")
echo "io_uring_enter calls per request: $(python3 -c "print(round($enters/$done_, 2))") ($enters / $done_)"
perf record -q -e cpu-clock -F 5000 -g -o "$OUT/perf.data" -- \
    taskset -c 0 "$B" run --target 127.0.0.1:$PORT --cores 0 --connections 64 --http 'GET /' \
    --rate "$RATE" --duration ${DUR}s --spin 0 --quiet --json "$OUT/b.json" >/dev/null 2>&1 || true
B_N=$(python3 -c "import json; print(json.load(open('$OUT/b.json'))['requests']['completed'])")
perf record -q -e cpu-clock -F 5000 -g -o "$OUT/perfw.data" -- \
    taskset -c 0 wrk -t1 -c64 -d${DUR}s "http://127.0.0.1:$PORT/" >"$OUT/w.txt" 2>&1
W_N=$(awk '/requests in/ {print $1}' "$OUT/w.txt")
echo "blaster --spin 0: $(perf_split "$OUT/perf.data" "$B_N" us request)"
echo "wrk -t1 -c64:     $(perf_split "$OUT/perfw.data" "$W_N" us request)"
echo "(the network path is the kernel's TCP/IP work for one request and its response, which"
echo " both tools pay; a CPU ratio below network-path / wrk-total needs a cheaper kernel path)"
