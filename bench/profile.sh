#!/usr/bin/env bash
# Where an HTTP request's client CPU goes: blaster against nginx (core 1) at a fixed
# rate (RATE, default 190000) for DUR seconds, under `perf stat` (io_uring_enter calls
# per request) and `perf record -e cpu-clock` (share of samples in blaster's own code,
# in io_uring, and in the kernel's network path). Needs linux-perf.
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
perf record -q -e cpu-clock -F 5000 -o "$OUT/perf.data" -- \
    "$B" run --target 127.0.0.1:$PORT --cores 0 --connections 64 --http 'GET /' \
    --rate "$RATE" --duration ${DUR}s --quiet >/dev/null 2>&1
perf report -i "$OUT/perf.data" --no-children --sort sym 2>/dev/null | grep -v '^#' | grep -v '^$' |
awk '{p=$1; sub("%","",p); s=$3;
  if ($2=="[.]") user+=p;
  else if (s ~ /^io_|__io_|io_uring/) io+=p;
  else if (s ~ /tcp|skb|sk_|sock|ip_|inet|dev_|netif|napi|net_|copy|bbr|lookup/) net+=p;
  else other+=p}
  END {printf "samples: blaster user space %.1f%%, io_uring %.1f%%, network path %.1f%%, other kernel %.1f%%\n", user, io, net, other}'
echo "(user space includes the TSC spin between due sends; the other-kernel share is mostly"
echo " syscall entry, wake-ups of nginx and irq-restore points where a VM's samples land)"
