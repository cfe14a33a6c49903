#!/usr/bin/env bash
# blaster --http2 vs h2load (nghttp2-client) against the same nginx (one worker,
# `listen ... http2`, h2c with prior knowledge, keepalive_requests raised so no GOAWAY
# interrupts), 8 connections x 16 streams, client on core 0, nginx on core 1.
# Both run closed loop, 8 connections x 16 streams each kept busy (h2load -c8 -m16,
# blaster --concurrency 8 --streams-per-connection 16): the goal's comparison (issue 35:
# <= 0.8x h2load's CPU per request). Then blaster open loop at the rate h2load achieved
# in the same round (8 connections, --streams-per-connection 16), the same work on a
# timetable. Prints requests/s and client CPU-seconds per million requests for each, and
# the ratios, then each one's CPU split into user space and kernel (system) time per 1M
# requests: the kernel part is the floor no user-space work can go under.
# blaster runs with its default pacing; SPIN=D passes --spin D.
# RATES="20000 100000" adds fixed-rate rounds: h2load --rps (rate / 8 per client) beside
# blaster --rate, same connections and streams.
source "$(dirname "$0")/lib.sh"
need h2load nghttp2-client; need nginx nginx-light
port=$(free_port); d=$OUT/nginx; mkdir -p "$d"
cat > "$d/nginx.conf" <<CONF
daemon off; master_process off; worker_processes 1; pid $d/nginx.pid; error_log $d/error.log;
events { worker_connections 4096; }
http { access_log off; keepalive_requests 100000000; http2_max_concurrent_streams 128;
  client_body_temp_path $d; proxy_temp_path $d; fastcgi_temp_path $d; uwsgi_temp_path $d;
  scgi_temp_path $d;
  server { listen 127.0.0.1:$port http2; location / { return 200 "hello\n"; } } }
CONF
taskset -c 1 nginx -c "$d/nginx.conf" -p "$d" >/dev/null 2>&1 &
PIDS+=($!)
sleep 0.5
header
H_RPS=""; H_CPU=""; B_RPS=""; B_CPU=""; B_BUSY=""; H_SYS=""; B_SYS=""; C_RPS=""; C_CPU=""; C_SYS=""
for i in $(seq "$RUNS"); do
    cpu=$(cpu_of taskset -c 0 h2load -t1 -c8 -m16 -D "$DUR" "http://127.0.0.1:$port/")
    read -r _ sys < "$OUT/time"
    rps=$(awk '/^finished in/ {print $4}' "$OUT/last.out")
    done=$(awk '/^requests:/ {print $8}' "$OUT/last.out")
    [[ -n $rps && -n $done && $done -gt 0 ]] || { cat "$OUT/last.out" "$OUT/last.err" >&2; exit 1; }
    H_RPS+="$rps "; H_CPU+="$(python3 -c "print($cpu/$done*1e6)") "
    H_SYS+="$(python3 -c "print($sys/$done*1e6)") "
    rate=$(python3 -c "print(int($rps))")
    cpu=$(cpu_of "$B" run --target 127.0.0.1:$port --cores 0 --concurrency 8 --http2 \
        --streams-per-connection 16 --http 'GET /' --duration "${DUR}s" --quiet --json "$OUT/c.json")
    read -r _ sys < "$OUT/time"
    read -r crps done < <(python3 -c "import json; r=json.load(open('$OUT/c.json')); print(r['rate']['achieved_rps'], r['requests']['completed'])")
    C_RPS+="$crps "; C_CPU+="$(python3 -c "print($cpu/$done*1e6)") "
    C_SYS+="$(python3 -c "print($sys/$done*1e6)") "
    cpu=$(cpu_of "$B" run --target 127.0.0.1:$port --cores 0 --connections 8 --http2 \
        --streams-per-connection 16 --http 'GET /' --rate "$rate" --duration "${DUR}s" \
        ${SPIN:+--spin "$SPIN"} --quiet --json "$OUT/b.json")
    read -r _ sys < "$OUT/time"
    read -r brps busy done < <(python3 -c "import json; r=json.load(open('$OUT/b.json')); w=r['workers'][0]; print(r['rate']['achieved_rps'], (w['cpu_ns']-w['spin_ns'])/1e9, r['requests']['completed'])")
    B_RPS+="$brps "; B_CPU+="$(python3 -c "print($cpu/$done*1e6)") "; B_BUSY+="$(python3 -c "print($busy/$done*1e6)") "
    B_SYS+="$(python3 -c "print($sys/$done*1e6)") "
done
printf '%-40s %-26s %-24s\n' tool "requests/s" "client CPU-s per 1M req"
printf '%-40s %-26s %-24s\n' "h2load -t1 -c8 -m16" "$(med "$H_RPS")" "$(med "$H_CPU")"
printf '%-40s %-26s %-24s\n' "blaster --concurrency 8 (closed loop)" "$(med "$C_RPS")" "$(med "$C_CPU")"
echo "closed loop, CPU per request, blaster / h2load: $(ratio "$C_CPU" "$H_CPU") (goal <= 0.8)"
printf '%-40s %-26s %-24s\n' "blaster --http2 (same rate${SPIN:+, --spin $SPIN})" "$(med "$B_RPS")" "$(med "$B_CPU")"
printf '%-40s %-26s %-24s\n' "  of which busy (excl. spin)" "" "$(med "$B_BUSY")"
echo "open loop at h2load's rate, CPU per request, blaster / h2load: $(ratio "$B_CPU" "$H_CPU"); busy only: $(ratio "$B_BUSY" "$H_CPU")"
printf '%-40s %-26s %-24s\n' "kernel (system) CPU-s per 1M: h2load" "" "$(med "$H_SYS")"
printf '%-40s %-26s %-24s\n' "kernel (system) CPU-s per 1M: blaster closed" "" "$(med "$C_SYS")"
printf '%-40s %-26s %-24s\n' "kernel (system) CPU-s per 1M: blaster open" "" "$(med "$B_SYS")"
echo "blaster's kernel time alone / h2load's whole CPU, closed loop: $(ratio "$C_SYS" "$H_CPU"), open: $(ratio "$B_SYS" "$H_CPU") (with no user-space work at all, the ratio could not go below this)"
for rate in ${RATES:-}; do
    H_CPU=""; B_CPU=""; H_RPS=""
    for i in $(seq "$RUNS"); do
        cpu=$(cpu_of taskset -c 0 h2load -t1 -c8 -m16 --rps "$((rate / 8))" -D "$DUR" "http://127.0.0.1:$port/")
        done=$(awk '/^requests:/ {print $8}' "$OUT/last.out")
        rps=$(awk '/^finished in/ {print $4}' "$OUT/last.out")
        [[ -n $done && $done -gt 0 ]] || { cat "$OUT/last.out" "$OUT/last.err" >&2; exit 1; }
        H_CPU+="$(python3 -c "print($cpu/$done*1e6)") "; H_RPS+="$rps "
        cpu=$(cpu_of "$B" run --target 127.0.0.1:$port --cores 0 --connections 8 --http2 \
            --streams-per-connection 16 --http 'GET /' --rate "$rate" --duration "${DUR}s" \
            ${SPIN:+--spin "$SPIN"} --quiet --json "$OUT/b.json")
        done=$(python3 -c "import json; print(json.load(open('$OUT/b.json'))['requests']['completed'])")
        B_CPU+="$(python3 -c "print($cpu/$done*1e6)") "
    done
    echo "fixed $rate/s: h2load --rps $((rate / 8)) x 8 reached $(med "$H_RPS")/s at $(med "$H_CPU") CPU-s per 1M; blaster $(med "$B_CPU"); blaster / h2load: $(ratio "$B_CPU" "$H_CPU")"
done
