#!/usr/bin/env bash
# Connection scale (issue 4's benchmark): hold N concurrent loopback TCP connections
# with blaster --hold (client on core 0, one worker; sockets in io_uring file tables, so
# past the 20,000-fd cap) against `blaster sink` on core 1 in another process, then the
# same N with bench/epoll_hold.c (a simple epoll holder: nonblocking connects, at most
# EPOLL_PENDING pending per process, held in epoll), run as ceil(N/19000) processes on
# core 0 because of the fd cap, against a fresh sink. Prints both side by side:
# established, failed, time to establish all and the rate, generator user-space memory
# per connection (RSS growth over the connect phase / established), and the kernel's
# memory per connection (peak Slab growth and MemAvailable drop from /proc/meminfo
# during the run, both ends and the sink included, over established).
# Goal: >= 500,000 held (1,000,000), >= 50,000 established/s, <= 512 B per connection.
#
# usage: [N=500000] [RUNS=1] [DUR=10] bench/connections.sh
# knobs: N connections; RUNS; DUR hold seconds; SRC source addresses 127.0.0.2.. (default
#   ceil(N/11000): ip_local_port_range 32768-60999 gives 28,232 ports per source and
#   destination, and connect() gets slow past half of them, see below); PORT first sink port (default: a free port per sink); SINKS=1 one sink
#   process (needs the sink to hold N), or K / auto (ceil(N/18000)): K sink processes on K
#   ports, blaster gets K --target and the epoll processes are spread over them;
#   CONNECT_RATE (blaster --connect-rate; default none: 512 pending per worker, as the
#   epoll holder's window); EPOLL_PENDING (512); CONNECT_TIMEOUT seconds for the connect
#   phase (default 60 + N/5000); TUNE=1 raises net.core.somaxconn and
#   net.ipv4.tcp_max_syn_backlog to 65535 (printed, restored on exit), TUNE=0 leaves them.
#   HEARTBEAT (e.g. 10s): blaster sends --heartbeat on every held connection once per that
#   period; the worker's busy CPU per second of the hold (the scan that finds what is
#   due, and the heartbeats) is printed per run.
#   EPOLL=0 skips the epoll holder (its column shows -), e.g. for a before/after of two
#   blaster builds (BLASTER=FILE, see lib.sh).
# Heavy: run it alone, on a quiet machine. Every wait is bounded; all addresses are in
# 127.0.0.0/8.
RUNS=${RUNS:-1}
DUR=${DUR:-10}
source "$(dirname "$0")/lib.sh"
need cc gcc
need taskset util-linux
need timeout coreutils
need ss iproute2

N=${N:-500000}
# At most 11,000 connections per source address: connect() picks even ports first and
# scans every even port before an odd one, so past half of the 28,232-port range each
# connect costs a scan of ~14,000 ports and establishment drops to ~300/s (measured).
SRC=${SRC:-$(( (N + 10999) / 11000 ))}
SINKS=${SINKS:-1}
[[ $SINKS == auto ]] && SINKS=$(( (N + 17999) / 18000 ))
PORT=${PORT:-}
CONNECT_RATE=${CONNECT_RATE:-}
EPOLL_PENDING=${EPOLL_PENDING:-512}
CT=${CONNECT_TIMEOUT:-$(( 60 + N / 5000 ))}
TUNE=${TUNE:-1}
EPOLL=${EPOLL:-1}
PER_PROC=19000   # epoll_hold sockets per process, under the 20,000 RLIMIT_NOFILE cap
(( N >= 1 && SRC >= 1 && SRC <= 254 && SINKS >= 1 )) || {
    echo "bench: need N >= 1, 1 <= SRC <= 254 (127.0.0.2-127.0.0.255), SINKS >= 1" >&2; exit 1; }
if (( SRC == 1 )); then SRC_RANGE=127.0.0.2; else SRC_RANGE=127.0.0.2-127.0.0.$((1 + SRC)); fi
SINK_MAX=$(( (N + SINKS - 1) / SINKS + 1024 ))
# epoll processes: a multiple of SINKS, so that every sink gets the same share.
EPROCS=$(( (N + PER_PROC - 1) / PER_PROC ))
EPROCS=$(( (EPROCS + SINKS - 1) / SINKS * SINKS ))

# Process bookkeeping: PIDS (lib.sh's cleanup kills them) only holds live children.
forget() { local keep=() p q; for p in "${PIDS[@]}"; do for q; do [[ $p == "$q" ]] && continue 2; done; keep+=("$p"); done; PIDS=("${keep[@]}"); }
# wait_bounded SECS PID...: waits for the PIDs; any still alive after SECS gets SIGKILL.
wait_bounded() {
    local end=$((SECONDS + $1)) p; shift
    for p; do
        while kill -0 "$p" 2>/dev/null && (( SECONDS < end )); do sleep 0.2; done
        kill -KILL "$p" 2>/dev/null && echo "bench: pid $p killed after the time bound" >&2
        wait "$p" 2>/dev/null || true
    done
    forget "$@"
}

# Limits and sysctls.
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
RESTORE=()
restore_sysctls() {
    local e
    for e in "${RESTORE[@]}"; do echo "${e##*=}" > "${e%=*}" 2>/dev/null || true; done
    (( ${#RESTORE[@]} )) && echo "bench: sysctls restored" >&2
    RESTORE=()
}
trap 'restore_sysctls; cleanup' EXIT
trap 'exit 130' INT TERM
TUNING=""
tune() {  # tune KEY VALUE: raise /proc/sys/KEY to VALUE, remembering the old value
    local f=/proc/sys/${1//.//} prev
    prev=$(<"$f")
    if (( prev >= $2 )); then TUNING+="$1=$prev (kept); "
    elif echo "$2" > "$f" 2>/dev/null; then RESTORE+=("$f=$prev"); TUNING+="$1: $prev -> $2 (restored on exit); "
    else TUNING+="$1=$prev (could not raise to $2); "; fi
}
if [[ $TUNE == 1 ]]; then
    tune net.core.somaxconn 65535
    tune net.ipv4.tcp_max_syn_backlog 65535
else
    TUNING="net.core.somaxconn=$(</proc/sys/net/core/somaxconn) net.ipv4.tcp_max_syn_backlog=$(</proc/sys/net/ipv4/tcp_max_syn_backlog) (TUNE=0, untouched); "
fi

cc -O2 -o "$OUT/epoll_hold" bench/epoll_hold.c

header
echo "# N=$N held ${DUR}s; sources $SRC_RANGE ($SRC); sink: $SINKS process(es) on core 1, --max-connections $SINK_MAX each;" \
     "blaster: 1 worker on core 0${CONNECT_RATE:+, --connect-rate $CONNECT_RATE}; epoll_hold: $EPROCS processes on core 0, $EPOLL_PENDING pending each"
echo "# RLIMIT_NOFILE $(ulimit -n)/$(ulimit -Hn); ip_local_port_range $(xargs < /proc/sys/net/ipv4/ip_local_port_range); tcp_tw_reuse $(</proc/sys/net/ipv4/tcp_tw_reuse); $TUNING"
echo "# time bound: connect phase ${CT}s per tool; whole script at most ~$(( RUNS * 2 * (75 + 20 + CT + DUR + 60 + 60) ))s"

sockstat() { local a b c d e f g rest i=0 t=0; while read -r a b c d e f g rest; do [[ $a == TCP: ]] && i=$c t=$g; done < /proc/net/sockstat; echo "$i $t"; }  # inuse tw
meminfo() { local k v u s=0 m=0; while read -r k v u; do case $k in Slab:) s=$v;; MemAvailable:) m=$v;; esac; done < /proc/meminfo; echo "$s $m"; }
# sampler FILE: Slab and MemAvailable (kB) and TCP sockets in use, twice a second.
sampler() { while :; do echo "$(meminfo) $(sockstat)" >> "$1"; sleep 0.5; done; }
# settle: wait (<= 75 s) until the previous run's TIME_WAIT sockets are gone (60 s), down
# to 2000 above the count at the start (TW0).
settle() {
    local end=$((SECONDS + 75)) inuse tw
    while read -r inuse tw < <(sockstat); (( tw > TW0 + 2000 )); do
        if (( SECONDS >= end )); then echo "bench: still $tw sockets in TIME_WAIT after 75 s; measuring anyway" >&2; return; fi
        sleep 1
    done
}
read -r INUSE0 TW0 < <(sockstat)
if (( INUSE0 > 10000 )); then
    echo "# warning: $INUSE0 TCP sockets already in use by other processes: the machine is not quiet, the kernel memory figures include their changes"
fi
# start_sinks TAG: SINKS sink processes on core 1; sets SPORTS and SPIDS.
start_sinks() {
    local k p end
    SPORTS=(); SPIDS=()
    for (( k = 0; k < SINKS; k++ )); do
        if [[ -n $PORT ]]; then p=$((PORT + k)); else p=$(free_port); fi
        taskset -c 1 "$B" sink --listen 127.0.0.1:$p --cores 1 --max-connections "$SINK_MAX" \
            --duration $(( CT + DUR + 180 ))s --json "$OUT/sink.$1.$k.json" > "$OUT/sink.$1.$k.out" 2>&1 &
        PIDS+=($!); SPIDS+=($!); SPORTS+=("$p")
        end=$((SECONDS + 10))
        until ss -Hltn "sport = :$p" | grep -q .; do   # not /proc/net/tcp: slow with 1M sockets
            if (( SECONDS >= end )) || ! kill -0 "${SPIDS[-1]}" 2>/dev/null; then
                echo "bench: the sink on port $p is not listening:" >&2; tail -3 "$OUT/sink.$1.$k.out" >&2; exit 1
            fi
            sleep 0.1
        done
    done
}
# stop_sinks TAG: stops them (bounded); sets SINK_PEAK (sum of the sinks' peak connections
# held), SINK_REJ (accepts beyond --max-connections) and SINK_MEM (their user bytes per
# connection, "-" when not reported).
stop_sinks() {
    kill -INT "${SPIDS[@]}" 2>/dev/null || true
    wait_bounded 60 "${SPIDS[@]}"
    read -r SINK_PEAK SINK_REJ SINK_MEM SINK_INFO < <(python3 - "$OUT"/sink."$1".*.json <<'PY'
import json, sys
peak = rej = 0; mem = []; info = "-"
for f in sys.argv[1:]:
    try:
        r = json.load(open(f))
    except Exception:
        continue
    peak += r["connections"]["peak"]; rej += r["connections"]["rejected"]
    m = r.get("memory", {}).get("user_bytes_per_connection")
    if m is not None: mem.append(m)
    info = (f"direct descriptors {str(r.get('direct_descriptors')).lower()}, {r.get('rings')} ring(s)"
            f"{', fallback ' + str(r['fallback']) if r.get('fallback') else ''}")
print(peak, rej, f"{sum(mem) / len(mem):.0f}" if mem else "-", info)
PY
)
}
# kernel_per_conn FILE BASE_SLAB BASE_AVAIL ESTABLISHED: peak Slab growth and
# MemAvailable drop per established connection (bytes), and the peak of TCP sockets in use.
kernel_per_conn() {
    python3 - "$@" <<'PY'
import sys
f, slab0, avail0, est = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
rows = [[int(x) for x in l.split()] for l in open(f) if len(l.split()) == 4]
if not rows or est == 0: print("0 0 0"); sys.exit()
slab = max(r[0] for r in rows); avail = min(r[1] for r in rows); inuse = max(r[2] for r in rows)
print(f"{(slab - slab0) * 1024 / est:.0f} {(avail0 - avail) * 1024 / est:.0f} {inuse}")
PY
}

B_EST=""; B_FAIL=""; B_S=""; B_RATE=""; B_MEM=""; B_SLAB=""; B_AVAIL=""; B_SOCK=""; B_PEAK=""; B_REJ=""; B_SMEM=""
E_EST=""; E_FAIL=""; E_S=""; E_RATE=""; E_MEM=""; E_SLAB=""; E_AVAIL=""; E_SOCK=""; E_PEAK=""; E_REJ=""; E_SMEM=""
B_ERRNO="{}"; E_ERRNO="{}"; B_CT="-"; E_CLOSED=0
for i in $(seq "$RUNS"); do
    # blaster --hold
    settle
    read -r slab0 avail0 < <(meminfo)
    start_sinks b$i
    sampler "$OUT/mem.b.$i" & SAMP=$!; PIDS+=($SAMP)
    targets=(); for p in "${SPORTS[@]}"; do targets+=(--target 127.0.0.1:$p); done
    echo "bench: run $i: blaster --hold, $N connections" >&2
    rc=0   # in the background so that Ctrl-C (trap, cleanup) does not wait for it
    timeout -k 5 $(( CT + DUR + 60 )) taskset -c 0 "$B" run "${targets[@]}" --source-ip "$SRC_RANGE" --cores 0 \
        --connections "$N" --hold --duration "${DUR}s" ${CONNECT_RATE:+--connect-rate "$CONNECT_RATE"} \
        ${HEARTBEAT:+--heartbeat "$HEARTBEAT"} \
        --json "$OUT/b.$i.json" --quiet > "$OUT/b.$i.out" 2> "$OUT/b.$i.err" &
    BP=$!; PIDS+=($BP); wait "$BP" || rc=$?; forget "$BP"
    kill "$SAMP" 2>/dev/null || true; wait_bounded 5 "$SAMP"
    stop_sinks b$i
    if [[ ! -s $OUT/b.$i.json ]]; then echo "bench: blaster exited $rc without a report:" >&2; tail -5 "$OUT/b.$i.err" >&2; fi
    read -r est fail secs rate mem ct errno < <(python3 - "$OUT/b.$i.json" <<'PY'
import json, sys
try:
    r = json.load(open(sys.argv[1]))
except Exception:
    print("0 0 0 0 0 - {}"); sys.exit()
c, t = r["connections"], r["connect_time_ns"]
s = c["establish_all_ns"] / 1e9
cpu = sum(w["busy_cpu_ns"] for w in r["workers"]) / 1e9
print(f"blaster hold: busy CPU {cpu:.3f} s over {r['duration_s']:.1f} s ({cpu / max(r['duration_s'], 1e-9):.4f} core), "
      f"{r['requests']['sent']} heartbeats sent", file=sys.stderr)
print(c["established"], c["failed"], f"{s:.3f}", f"{c['established'] / s if s > 0 else 0:.0f}",
      f"{r['memory']['user_bytes_per_connection']:.1f}",
      f"{t['p50'] / 1e6:.2f}/{t['p99'] / 1e6:.2f}/{t['max'] / 1e6:.2f}",
      json.dumps(c["failed_by_errno"], separators=(",", ":")))
PY
)
    read -r kslab kavail ksock < <(kernel_per_conn "$OUT/mem.b.$i" "$slab0" "$avail0" "$est")
    B_EST+="$est "; B_FAIL+="$fail "; B_S+="$secs "; B_RATE+="$rate "; B_MEM+="$mem "
    B_SLAB+="$kslab "; B_AVAIL+="$kavail "; B_SOCK+="$ksock "; B_PEAK+="$SINK_PEAK "; B_REJ+="$SINK_REJ "; B_SMEM+="$SINK_MEM "; B_ERRNO=$errno; B_CT=$ct
    echo "bench: run $i: blaster established $est, failed $fail $errno, in ${secs}s ($rate/s), $mem B/conn user, $kslab B/conn Slab" >&2

    # epoll_hold, EPROCS processes started together, against fresh sinks
    [[ $EPOLL == 0 ]] && continue
    settle
    read -r slab0 avail0 < <(meminfo)
    start_sinks e$i
    sampler "$OUT/mem.e.$i" & SAMP=$!; PIDS+=($SAMP)
    echo "bench: run $i: epoll_hold, $N connections in $EPROCS processes" >&2
    rm -f "$OUT/go"; mkfifo "$OUT/go"; exec 3<>"$OUT/go"
    EP=()
    for (( j = 0; j < EPROCS; j++ )); do
        nj=$(( N / EPROCS + (j < N % EPROCS ? 1 : 0) ))
        EPOLL_HOLD_WAIT_STDIN=1 EPOLL_HOLD_PENDING=$EPOLL_PENDING timeout -k 5 $(( CT + DUR + 60 )) \
            taskset -c 0 "$OUT/epoll_hold" 127.0.0.1 "${SPORTS[j % SINKS]}" "$nj" 127.0.0.2 "$SRC" "$DUR" "$CT" \
            <&3 > "$OUT/e.$i.$j.json" 2> "$OUT/e.$i.$j.err" &
        PIDS+=($!); EP+=($!)
    done
    sleep 1                                   # all started and set up: go
    head -c "$EPROCS" /dev/zero >&3
    wait_bounded $(( CT + DUR + 70 )) "${EP[@]}"
    exec 3>&-
    kill "$SAMP" 2>/dev/null || true; wait_bounded 5 "$SAMP"
    stop_sinks e$i
    read -r est fail secs slowest rate mem closed errno < <(python3 - "$OUT" "$i" "$EPROCS" "$N" <<'PY'
import json, sys
out, i, procs, n = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
est = fail = growth = closed = 0; errs = {}; first = []; last = []; slowest = 0.0
for j in range(procs):
    nj = n // procs + (1 if j < n % procs else 0)
    try:
        r = json.loads(open(f"{out}/e.{i}.{j}.json").read())
    except Exception:
        fail += nj; errs["NO_REPORT"] = errs.get("NO_REPORT", 0) + nj
        continue
    est += r["established"]; fail += r["failed"]; growth += r["rss_growth_bytes"]; closed += r["closed_during_hold"]
    for k, v in r["failed_by_errno"].items(): errs[k] = errs.get(k, 0) + v
    first.append(r["first_connect_ns"])
    if r["last_established_ns"]: last.append(r["last_established_ns"])
    slowest = max(slowest, r["establish_s"])
span = (max(last) - min(first)) / 1e9 if last else 0.0
print(est, fail, f"{span:.3f}", f"{slowest:.3f}", f"{est / span if span > 0 else 0:.0f}",
      f"{growth / est if est else 0:.1f}", closed, json.dumps(errs, separators=(",", ":")))
PY
)
    for f in "$OUT"/e."$i".*.err; do [[ -s $f ]] && { echo "bench: epoll_hold: $(head -2 "$f")" >&2; break; }; done
    read -r kslab kavail ksock < <(kernel_per_conn "$OUT/mem.e.$i" "$slab0" "$avail0" "$est")
    E_EST+="$est "; E_FAIL+="$fail "; E_S+="$secs "; E_RATE+="$rate "; E_MEM+="$mem "
    E_SLAB+="$kslab "; E_AVAIL+="$kavail "; E_SOCK+="$ksock "; E_PEAK+="$SINK_PEAK "; E_REJ+="$SINK_REJ "; E_SMEM+="$SINK_MEM "; E_ERRNO=$errno; E_CLOSED=$closed
    echo "bench: run $i: epoll_hold established $est, failed $fail $errno, in ${secs}s ($rate/s; slowest process ${slowest}s), $mem B/conn user, $kslab B/conn Slab" >&2
done

# m "LIST": the value for one run, else median [min-max]; integers unless a fraction matters.
m() { python3 -c 'import statistics,sys
x=[float(v) for v in sys.argv[1:] if v != "-"]; f=lambda v: f"{v:.0f}" if v == int(v) or abs(v) >= 100 else f"{v:.3f}" if abs(v) < 10 else f"{v:.1f}"
print("-" if not x else f(x[0]) if len(set(x)) == 1 else f"{f(statistics.median(x))} [{f(min(x))}-{f(max(x))}]")' $1; }
r() { [[ -n $2 ]] || { echo "n/a"; return; }; python3 -c 'import statistics as s,sys
a=s.median(float(v) for v in sys.argv[1].split()); b=s.median(float(v) for v in sys.argv[2].split())
print(f"{a/b:.2f}" if b > 0 else "n/a")' "$1" "$2"; }
row() { printf '%-44s %-30s %-30s\n' "$@"; }
row "" "blaster --hold" "epoll_hold ($EPROCS processes)"
row "connections requested" "$N" "$N"
row "established" "$(m "$B_EST")" "$(m "$E_EST")"
row "failed" "$(m "$B_FAIL")" "$(m "$E_FAIL")"
row "failed by errno (last run)" "$B_ERRNO" "$E_ERRNO"
row "time to establish all (s)" "$(m "$B_S")" "$(m "$E_S")"
row "establish rate (connections/s)" "$(m "$B_RATE")" "$(m "$E_RATE")"
row "connect time p50/p99/max ms (last run)" "$B_CT" "-"
row "user memory per connection (B, RSS growth)" "$(m "$B_MEM")" "$(m "$E_MEM")"
row "kernel Slab growth per connection (B)" "$(m "$B_SLAB")" "$(m "$E_SLAB")"
row "MemAvailable drop per connection (B)" "$(m "$B_AVAIL")" "$(m "$E_AVAIL")"
row "peak TCP sockets in use (both ends)" "$(m "$B_SOCK")" "$(m "$E_SOCK")"
row "sink: peak connections held" "$(m "$B_PEAK")" "$(m "$E_PEAK")"
row "sink: accepts rejected (over --max-conn.)" "$(m "$B_REJ")" "$(m "$E_REJ")"
row "sink: user memory per connection (B)" "$(m "$B_SMEM")" "$(m "$E_SMEM")"
echo "sink (each of $SINKS, last run): $SINK_INFO"
echo "kernel figures: peak Slab / lowest MemAvailable during the run minus the value before the sink started, over established; both ends (client and sink sockets) and, in MemAvailable, both processes' user memory"
(( E_CLOSED > 0 )) && echo "epoll_hold: $E_CLOSED connections closed by the sink during the hold (last run)"
echo "establish rate, blaster / epoll_hold: $(r "$B_RATE" "$E_RATE")"
echo "user memory per connection, blaster / epoll_hold: $(r "$B_MEM" "$E_MEM")"
python3 - "$(m "$B_EST")" "$(m "$B_RATE")" "$(m "$B_MEM")" <<'PY'
import sys
est, rate, mem = (float(a.split()[0]) for a in sys.argv[1:])
ok = lambda c: "ok" if c else "MISSED"
print(f"goals (blaster): held {est:.0f} >= 500000 (goal 1000000): {ok(est >= 500000)}; "
      f"{rate:.0f}/s >= 50000/s: {ok(rate >= 50000)}; {mem:.0f} B/conn <= 512: {ok(mem <= 512)}")
PY
if [[ $SINKS == 1 ]] && python3 -c "import sys; sys.exit(0 if min(float(v) for v in '$B_EST $E_EST'.split()) < $N else 1)"; then
    echo "note: fewer than N established with one sink process; if the sink is the wall (see its peak and rejected counts), try SINKS=auto"
fi
