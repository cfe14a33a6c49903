#!/usr/bin/env bash
# TLS (issue 24), three figures against one nginx worker on core 1, client on core 0:
# 1. CPU per request over HTTPS, closed loop, 50 keep-alive connections: blaster
#    --concurrency 50 beside wrk -c50 over https://, medians of $RUNS (goal: blaster
#    <= 0.9x wrk; plain HTTP is 0.83-0.85x here).
# 2. Handshakes per second on one core, full and resumed, a connection per request
#    (blaster --connect-per-request at the rate openssl reached, --tls-resume 0 and 1)
#    beside `openssl s_time -new` and `-reuse` against the same server.
# 3. Memory per idle TLS connection: HELD (default 100000) connections held with
#    --hold, the report's user_bytes_per_connection, beside the same count in plain TCP.
#    They are held by a second nginx of ceil(HELD / 18000) workers on core 1 (each worker
#    is capped at 20,000 descriptors by RLIMIT_NOFILE; reuseport spreads the accepts),
#    client_header_timeout 600s (nginx closes a connection that sent no request within
#    60 s by default: earlier connections of a long connect phase), from
#    ceil(HELD / 20000) source addresses 127.0.0.2.. (the ephemeral port range);
#    TLS with resumed handshakes and --timeout 60s (a connect and its handshake queue
#    behind thousands of others at nginx: the default timeout failed half of them).
# Run only under `flock /tmp/bench.lock bench/tls.sh` on a shared machine.
source "$(dirname "$0")/lib.sh"
need wrk wrk; need nginx nginx-light; need openssl openssl
HELD=${HELD:-100000}
PARTS=${PARTS:-123}   # which of the three parts to run

# Certificates for localhost: a CA and a P-256 server certificate it signed.
mk_certs() {
    local d=$OUT/certs ec=(-newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes)
    mkdir -p "$d"
    (cd "$d" &&
        openssl req -x509 "${ec[@]}" -keyout ca.key -out ca.pem -days 2 -subj "/CN=bench CA" &&
        openssl req "${ec[@]}" -keyout srv.key -out srv.csr -subj "/CN=localhost" &&
        printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\n' >ext.cnf &&
        openssl x509 -req -in srv.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out srv.pem \
            -days 2 -extfile ext.cnf) >/dev/null 2>&1
    CERTS=$d
}

# start_nginx_tls: one worker on core 1, HTTPS on TLS_PORT and plain HTTP on PLAIN_PORT,
# session tickets on (nginx's default), keep-alive without limit.
start_nginx_tls() {
    local d=$OUT/nginx-tls
    mkdir -p "$d"
    TLS_PORT=$(free_port); PLAIN_PORT=$(free_port)
    cat >"$d/nginx.conf" <<CONF
daemon off; master_process off; worker_processes 1; worker_rlimit_nofile 4096;
pid $d/nginx.pid; error_log $d/error.log;
events { worker_connections 2048; }
http { access_log off; keepalive_requests 100000000; keepalive_timeout 600s;
  client_body_temp_path $d; proxy_temp_path $d; fastcgi_temp_path $d; uwsgi_temp_path $d;
  scgi_temp_path $d;
  server { listen 127.0.0.1:$TLS_PORT ssl; ssl_certificate $CERTS/srv.pem;
    ssl_certificate_key $CERTS/srv.key; location / { return 200 "hello\n"; } }
  server { listen 127.0.0.1:$PLAIN_PORT; location / { return 200 "hello\n"; } } }
CONF
    taskset -c 1 nginx -c "$d/nginx.conf" -p "$d" >/dev/null 2>&1 &
    PIDS+=($!)
    sleep 0.5
}

# start_nginx_held: HELD_WORKERS workers on core 1 holding HELD connections between
# them, HTTPS on HELD_TLS_PORT and plain HTTP on HELD_PLAIN_PORT (reuseport).
start_nginx_held() {
    local d=$OUT/nginx-held
    mkdir -p "$d"
    HELD_WORKERS=$(( (HELD + 17999) / 18000 ))
    HELD_TLS_PORT=$(free_port); HELD_PLAIN_PORT=$(free_port)
    cat >"$d/nginx.conf" <<CONF
daemon off; master_process on; worker_processes $HELD_WORKERS; worker_rlimit_nofile 20000;
pid $d/nginx.pid; error_log $d/error.log;
events { worker_connections 19500; }
http { access_log off; keepalive_requests 100000000; keepalive_timeout 600s;
  client_header_timeout 600s;
  client_body_temp_path $d; proxy_temp_path $d; fastcgi_temp_path $d; uwsgi_temp_path $d;
  scgi_temp_path $d;
  server { listen 127.0.0.1:$HELD_TLS_PORT ssl reuseport backlog=8192; ssl_certificate $CERTS/srv.pem;
    ssl_certificate_key $CERTS/srv.key; location / { return 200 "hello\n"; } }
  server { listen 127.0.0.1:$HELD_PLAIN_PORT reuseport backlog=8192; location / { return 200 "hello\n"; } } }
CONF
    taskset -c 1 nginx -c "$d/nginx.conf" -p "$d" >/dev/null 2>&1 &
    PIDS+=($!)
    sleep 1
}

mk_certs
start_nginx_tls
start_nginx_held
SRC=$(( (HELD + 19999) / 20000 ))
if (( SRC == 1 )); then SRC_RANGE=127.0.0.2; else SRC_RANGE=127.0.0.2-127.0.0.$((1 + SRC)); fi
header
T=(--tls --tls-ca "$CERTS/ca.pem")

# --- 1. CPU per request over HTTPS, closed loop, 50 connections ----------------------
if [[ $PARTS == *1* ]]; then
W_CPU=""; W_RPS=""; B_CPU=""; B_RPS=""
for i in $(seq "$RUNS"); do
    cpu=$(cpu_of taskset -c 0 wrk -t1 -c50 -d${DUR}s "https://localhost:$TLS_PORT/")
    rps=$(awk '/Requests\/sec/ {print $2}' "$OUT/last.out")
    W_RPS+="$rps "; W_CPU+="$(python3 -c "print($cpu/($rps*$DUR)*1e6)") "
    cpu=$(cpu_of "$B" run --target "localhost:$TLS_PORT" "${T[@]}" --cores 0 --concurrency 50 \
        --http 'GET /' --duration ${DUR}s --quiet --json "$OUT/b.json")
    read -r brps done < <(python3 -c "import json; r=json.load(open('$OUT/b.json')); print(r['rate']['achieved_rps'], r['requests']['completed'])")
    B_RPS+="$brps "; B_CPU+="$(python3 -c "print($cpu/$done*1e6)") "
done
printf '%-40s %-24s %-24s\n' "HTTPS, closed loop, 50 connections" "requests/s" "client CPU-s per 1M req"
printf '%-40s %-24s %-24s\n' "wrk -t1 -c50" "$(med "$W_RPS")" "$(med "$W_CPU")"
printf '%-40s %-24s %-24s\n' "blaster --tls --concurrency 50" "$(med "$B_RPS")" "$(med "$B_CPU")"
echo "CPU per request, blaster / wrk: $(ratio "$B_CPU" "$W_CPU") (goal <= 0.9)"
echo

fi
# --- 2. Handshakes per second, full and resumed ---------------------------------------
if [[ $PARTS == *2* ]]; then
for mode in new reuse; do
    O_HS=""; B_HS=""
    resume=$([ $mode = reuse ] && echo 1 || echo 0)
    for i in $(seq "$RUNS"); do
        taskset -c 0 openssl s_time -connect "127.0.0.1:$TLS_PORT" -$mode -time "$DUR" \
            >"$OUT/st.out" 2>&1 || true
        hs=$(awk '/connections in .* real seconds/ {print $1/$4}' "$OUT/st.out" | tail -1)
        O_HS+="${hs:-0} "
        rate=$(python3 -c "print(max(1, int(${hs:-0})))")
        "$B" run --target "localhost:$TLS_PORT" "${T[@]}" --tls-resume $resume --cores 0 \
            --connect-per-request --connections 64 --http 'GET /' --rate "$rate" \
            --duration ${DUR}s --quiet --json "$OUT/h.json" >/dev/null 2>&1 || true
        B_HS+="$(python3 -c "import json; r=json.load(open('$OUT/h.json')); t=r['tls']; print((t['handshakes_full']+t['handshakes_resumed'])/r['elapsed_s'])") "
    done
    printf '%-40s %-24s\n' "handshakes/s, one core ($mode)" "median [min-max]"
    printf '%-40s %-24s\n' "openssl s_time -$mode" "$(med "$O_HS")"
    printf '%-40s %-24s\n' "blaster --tls-resume $resume" "$(med "$B_HS")"
done
echo

fi
# --- 3. Memory per idle TLS connection --------------------------------------------------
printf '%-40s %-24s\n' "held connections ($HELD; nginx x$HELD_WORKERS, $SRC_RANGE)" "user bytes per connection"
for kind in plain tls; do
    if [ $kind = tls ]; then args=(--target "localhost:$HELD_TLS_PORT" "${T[@]}" --tls-resume 1 --timeout 60s); else args=(--target "127.0.0.1:$HELD_PLAIN_PORT"); fi
    "$B" run "${args[@]}" --cores 0 --source-ip "$SRC_RANGE" --hold --connections "$HELD" --duration 5s --quiet \
        --json "$OUT/m.json" >/dev/null 2>&1 || true
    cp "$OUT/m.json" "/tmp/tls-held-$kind.json" 2>/dev/null || true
    printf '%-40s %-24s\n' "$kind" "$(python3 -c "import json; r = json.load(open('$OUT/m.json')); print(round(r['memory']['user_bytes_per_connection']), 'B of', r['connections']['established'], 'established')" 2>/dev/null || echo failed)"
done
