# Shared helpers for the bench scripts (sourced).
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-3}
DUR=${DUR:-5}
cargo build --release -q
B=$PWD/target/release/blaster
OUT=$(mktemp -d)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$OUT"; }
trap cleanup EXIT

need() { command -v "$1" >/dev/null || { echo "bench: $1 missing: apt-get install $2" >&2; exit 1; }; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
header() {
    echo "# $(date -u +%F) $(uname -r), $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
    echo "# client on core 0, server on core 1; $RUNS runs of ${DUR}s each; medians [min-max]"
}
# cpu_of CMD...: runs CMD (output in $OUT/last.out), prints its user+sys CPU seconds.
cpu_of() {
    TIMEFORMAT='%U %S'
    { time "$@" >"$OUT/last.out" 2>"$OUT/last.err" ; } 2>"$OUT/time" || true
    awk '{print $1+$2}' "$OUT/time"
}
# med "1 2 3": median min max of whitespace-separated numbers.
med() { python3 -c 'import statistics,sys; x=[float(v) for v in sys.argv[1:]]; print(f"{statistics.median(x):.1f} [{min(x):.1f}-{max(x):.1f}]")' $1; }
ratio() { python3 -c "import statistics as s; a=[float(v) for v in '$1'.split()]; b=[float(v) for v in '$2'.split()]; print(f'{s.median(a)/s.median(b):.2f}')"; }
# start_nginx: one nginx worker on core 1 returning a 6-byte body, keep-alive without
# limit; sets NGINX_PORT (not a subshell: the cleanup trap must see its pid).
start_nginx() {
    need nginx nginx-light
    local port d
    port=$(free_port); d=$OUT/nginx; mkdir -p "$d"
    cat > "$d/nginx.conf" <<CONF
daemon off; master_process off; worker_processes 1; pid $d/nginx.pid; error_log $d/error.log;
events { worker_connections 4096; }
http { access_log off; keepalive_requests 100000000; client_body_temp_path $d; proxy_temp_path $d;
  fastcgi_temp_path $d; uwsgi_temp_path $d; scgi_temp_path $d;
  server { listen 127.0.0.1:$port; location / { return 200 "hello\n"; } } }
CONF
    taskset -c 1 nginx -c "$d/nginx.conf" -p "$d" >/dev/null 2>&1 &
    PIDS+=($!)
    sleep 0.5
    NGINX_PORT=$port
}
