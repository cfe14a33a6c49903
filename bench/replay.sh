#!/usr/bin/env bash
# Replay memory (issue 37's benchmark: memory flat over a 10 GB-equivalent recording,
# streamed). For each size in SIZES_GB (default "1 10"), a text recording of that many
# bytes is generated here (and deleted after): lines of --replay-as payload, each
# LINE_KB KiB (default 64) of `x`, at RATE lines/s (default 4000, about 256 MB/s),
# replayed in full against the built-in sink on core 1 (echoing each request)
# from core 0. Prints per size the requests sent and completed, the run's seconds, and
# the blaster process's peak resident memory (GNU time's maximum resident set size);
# the goal: the 10 GB peak within 10% of the 1 GB peak.
source "$(dirname "$0")/lib.sh"
need /usr/bin/time time
SIZES_GB=${SIZES_GB:-"1 10"}
LINE_KB=${LINE_KB:-64}
RATE=${RATE:-4000}
SINK_PORT=$(free_port)
taskset -c 1 "$B" sink --listen 127.0.0.1:$SINK_PORT --cores 1 --mode echo >/dev/null 2>&1 &
PIDS+=($!)
sleep 0.5
echo "# $(date -u +%F) $(uname -r), $(nproc) cores; lines of $LINE_KB KiB at $RATE/s against the sink (echo)"
printf '%-8s %-10s %-10s %-10s %s\n' GB requests completed seconds "peak RSS (MiB)"
for gb in $SIZES_GB; do
    lines=$((gb * 1024 * 1024 / LINE_KB))
    # Generated, never stored: written here, deleted after the run.
    python3 - "$OUT/rec.txt" "$lines" "$LINE_KB" "$RATE" <<'PY'
import sys
path, lines, kb, rate = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
payload = "x" * (kb * 1024 - 16)
with open(path, "w", buffering=1 << 22) as f:
    for i in range(lines):
        f.write(f"{i * 1_000_000 // rate}us {payload}\n")
PY
    /usr/bin/time -f '%M' -o "$OUT/rss" "$B" run --target 127.0.0.1:$SINK_PORT --cores 0 \
        --connections 16 --replay "$OUT/rec.txt" --replay-as payload --framing echo \
        --quiet --json "$OUT/r.json" >"$OUT/last.out" 2>"$OUT/last.err" || true
    rm -f "$OUT/rec.txt"
    grep -q "\"valid\": *true" "$OUT/r.json" || echo "# run of $gb GB invalid: $(python3 -c "import json; print([d['message'] for d in json.load(open('$OUT/r.json'))['invalid_reasons']])")"
    [[ -s $OUT/r.json ]] || { cat "$OUT/last.err" >&2; exit 1; }
    read -r sent done secs < <(python3 -c "import json; r=json.load(open('$OUT/r.json')); q=r['requests']; print(q['sent'], q['completed'], round(r['elapsed_s'], 1))")
    printf '%-8s %-10s %-10s %-10s %s\n' "$gb" "$sent" "$done" "$secs" "$(( $(tail -1 "$OUT/rss") / 1024 ))"
done
echo "goal: peak RSS flat (the largest within 10% of the smallest)"
