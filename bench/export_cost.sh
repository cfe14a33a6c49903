#!/usr/bin/env bash
# The cost of recording and exporting (issue 12): the same saturated run with and
# without the exporters, alternately, RUNS times each.
#
#   plain:   blaster run --target SINK --cores 0 --concurrency 64 --payload-size 64
#   exports: the same + --hdr-log FILE + --metrics-listen 127.0.0.1:PORT, scraped every
#            second by a curl loop (a Prometheus scrape is one such GET)
#
# The closed loop (--concurrency) runs as fast as the generator (core 0) and the sink
# (core 1) allow, so its throughput is the pair's ceiling; the generator's CPU per
# request (user + sys of the blaster process: workers, collector, exporters, metrics
# server) is the cost that sets the generator's own ceiling (ceiling = 1 / CPU per
# request on a saturated core). Prints medians [min-max] and the ratios exports/plain.
# Target: throughput no more than 2% lower, CPU per request no more than 2% higher.
# Set CONTROL_CORE=0 to put the collector and the metrics server on the worker's core
# (the default control core is the spare core 1, the sink's here). Run it alone, under
# `flock /work/bench.lock`.
#
# usage: [RUNS=5] [DUR=5] [CONTROL_CORE=N] bench/export_cost.sh
source "$(dirname "$0")/lib.sh"
need curl curl
header
CC=()
[ -n "${CONTROL_CORE:-}" ] && CC=(--control-core "$CONTROL_CORE")
echo "# closed loop, 64 connections, 64-byte echo; control core ${CONTROL_CORE:-default}"
SINK_PORT=$(free_port)
"$B" sink --listen 127.0.0.1:$SINK_PORT --cores 1 >/dev/null 2>&1 &
PIDS+=($!)
sleep 0.5
run_one() { # run_one NAME I [extra args...]: prints "rps cpu_us_per_request"
    local name=$1 i=$2; shift 2
    local cpu
    cpu=$(cpu_of "$B" run --target 127.0.0.1:$SINK_PORT --cores 0 "${CC[@]}" \
        --concurrency 64 --payload-size 64 --duration "${DUR}s" --quiet \
        --json "$OUT/$name-$i.json" "$@")
    python3 - "$OUT/$name-$i.json" "$cpu" <<'PY'
import json, sys
r = json.load(open(sys.argv[1])); cpu = float(sys.argv[2])
n = r["requests"]["completed"]
print(f'{r["rate"]["achieved_rps"]:.1f} {cpu / n * 1e6:.4f}')
PY
}
# Finer than lib.sh's med/ratio: a 2% target needs three decimals.
med3() { python3 -c 'import statistics,sys; x=[float(v) for v in sys.argv[1:]]; print(f"{statistics.median(x):.3f} [{min(x):.3f}-{max(x):.3f}]")' $1; }
ratio3() { python3 -c "import statistics as s; a=[float(v) for v in '$1'.split()]; b=[float(v) for v in '$2'.split()]; print(f'{s.median(a)/s.median(b):.3f}')"; }
declare -A RPS CPU
for i in $(seq 1 "$RUNS"); do
    read -r r c < <(run_one plain "$i")
    RPS[plain]+=" $r"; CPU[plain]+=" $c"
    MPORT=$(free_port)
    ( while sleep 1; do curl -s -o /dev/null "http://127.0.0.1:$MPORT/metrics" || true; done ) &
    SCRAPER=$!
    read -r r c < <(run_one exports "$i" --hdr-log "$OUT/run-$i.hlog" \
        --metrics-listen 127.0.0.1:$MPORT)
    kill $SCRAPER 2>/dev/null || true; wait $SCRAPER 2>/dev/null || true
    RPS[exports]+=" $r"; CPU[exports]+=" $c"
    echo "# run $i: plain ${RPS[plain]##* } rps ${CPU[plain]##* } us/req; exports ${RPS[exports]##* } rps ${CPU[exports]##* } us/req"
done
printf '%-40s %-28s %-28s %s\n' metric plain exports ratio
printf '%-40s %-28s %-28s %s\n' "achieved requests/s (closed loop)" "$(med3 "${RPS[plain]}")" "$(med3 "${RPS[exports]}")" "$(ratio3 "${RPS[exports]}" "${RPS[plain]}")"
printf '%-40s %-28s %-28s %s\n' "blaster CPU-us per request" "$(med3 "${CPU[plain]}")" "$(med3 "${CPU[exports]}")" "$(ratio3 "${CPU[exports]}" "${CPU[plain]}")"
