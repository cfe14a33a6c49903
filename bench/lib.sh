# Shared helpers for the bench scripts (sourced).
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-3}
DUR=${DUR:-5}
# BLASTER=FILE runs that binary (e.g. an earlier commit's release build, for a
# before/after comparison) instead of building this tree's.
if [[ -n ${BLASTER:-} ]]; then
    [[ -x $BLASTER ]] || { echo "bench: BLASTER=$BLASTER is not an executable" >&2; exit 1; }
    B=$(realpath "$BLASTER")
else
    cargo build --release -q
    B=$PWD/target/release/blaster
fi
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
# perf_split DATA N UNIT WHAT: CPU per WHAT (N of them) recorded in DATA by `perf record
# -e cpu-clock`, in UNIT (us or ns), split into user space, io_uring, the kernel's
# network path and the rest of the kernel (syscall entry, wake-ups, irq-restore).
perf_split() {
    local ns scale
    ns=$(perf report -i "$1" --stdio --no-children --sort sym 2>/dev/null | awk '/Event count/ {print $NF}')
    scale=$([ "$3" = us ] && echo 1000 || echo 1)
    perf report -i "$1" --no-children --sort sym -g none 2>/dev/null | grep -v '^#' | grep -v '^$' |
    awk -v ns="$ns" -v n="$2" -v sc="$scale" -v u="$3" -v what="$4" '{p=$1; sub("%","",p); s=$3;
      if ($2=="[.]") user+=p;
      else if (s ~ /^io_|__io_|io_uring/) io+=p;
      else if (s ~ /tcp|skb|sk_|sock|ip_|inet|dev_|netif|napi|net_|copy|bbr|lookup/) net+=p;
      else other+=p}
      END {x=ns/n/sc/100; printf "%.2f %s/%s: user space %.2f, io_uring %.2f, network path %.2f, other kernel %.2f\n", x*100, u, what, user*x, io*x, net*x, other*x}'
}
# perf_top_user DATA N K: the K user-space symbols with the most CPU in DATA, in ns per
# one of N items.
perf_top_user() {
    local ns
    ns=$(perf report -i "$1" --stdio --no-children --sort sym 2>/dev/null | awk '/Event count/ {print $NF}')
    perf report -i "$1" --no-children --sort sym -g none 2>/dev/null | grep '\[\.\]' | head -"$3" |
    awk -v ns="$ns" -v n="$2" '{p=$1; sub("%","",p); $1=""; $2=""; printf "  %7.1f ns  %s\n", p/100*ns/n, $0}'
}
