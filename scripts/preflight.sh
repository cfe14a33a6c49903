#!/usr/bin/env bash
# Checks the walls a load test hits, in the order it hits them, before it wastes an hour.
#
# usage: scripts/preflight.sh [blaster run's flags] [--iface IF] [--json]
#
# The plan flags are blaster run's, in its spelling, so the same words go to both:
#   sudo ./scripts/preflight.sh --cores 4-11 --connections 100000 --target 10.0.0.5:9000 \
#       --source-ip 10.0.0.2-10.0.0.9 && blaster --cores 4-11 --connections 100000 ...
#   --cores LIST          generator cores, e.g. 4-11 or 0,2,4-6 (default 0)
#   --connections N       connections the run holds in total (default 64)
#   --target HOST:PORT    a destination, repeatable (default none: the loopback baseline,
#                         whose built-in sink holds the other end of every connection here)
#   --source-ip SPEC      source addresses: 10.0.0.2, 10.0.0.2-10.0.0.9, 10.0.0.2-9,
#                         10.0.0.0/29, or a comma list of those (default: the kernel's one)
#   --control-core N      the core of blaster's main thread (checked online with --cores)
#   --proto tcp|udp       udp: each source address is one pair for the port space
#   --shard I/N           this machine holds its share of --connections
#   --concurrency N       closed loop over N connections (instead of --connections)
#   --connect-per-request connection per request: checks TIME_WAIT against the port range
#   --rate R              requests per second; with --connect-per-request also new
#                         connections per second (a number; shapes are accepted otherwise)
#   --sockbuf SIZE        socket buffer the run asks for, e.g. 4096, 64KiB, 1MiB
#                         (checked against rmem/wmem_max)
#   Every other flag of blaster run is accepted and changes nothing here. Without plan
#   flags the script checks blaster's default plan (--cores 0, --connections 64, no
#   --target) and says so on its first line.
# The script's own flags:
#   --iface IF            interface for the NIC checks (default: the interface of the
#                         route to the first target, from `ip route get`; loopback: lo)
#   --json                print a JSON array of {status, check, saw, need, fix} instead
#                         (`--json FILE`, a path after it, is blaster's and ignored)
# Older spellings, kept: --targets HOST:PORT,... (comma separated), --source-ips N (a
# count), --short-connections (= --connect-per-request).
#
# One line per check: PASS / WARN / FAIL / INFO, the check name, what it saw, what the
# plan needs and the exact command that fixes it. Exit 0 when nothing FAILs, 1 when
# something does, 2 on a bad or unknown argument (one line on stderr).
#
# sudo is not needed to check: the files read are world-readable (sudo helps where /proc
# hides other users' processes, and the fixes printed need root). Under sudo, the
# limits blaster will run with are those of the shell that ran sudo: fd.limit and
# io_uring.memlock read that shell's /proc/PID/limits (the first ancestor owned by
# SUDO_UID), or say plainly that they checked root's.
#
# Environment (for tests; every default is the real machine):
#   PREFLIGHT_ROOT          prefix of every /proc and /sys path read (default: empty = /)
#   PREFLIGHT_ULIMIT_SOFT   soft RLIMIT_NOFILE instead of `ulimit -Sn`
#   PREFLIGHT_ULIMIT_HARD   hard RLIMIT_NOFILE instead of `ulimit -Hn`
#   PREFLIGHT_ULIMIT_MEMLOCK  RLIMIT_MEMLOCK in bytes instead of `ulimit -l`
#   PREFLIGHT_UID           user id the script runs as instead of `id -u`
#   PREFLIGHT_IP            command run as `$PREFLIGHT_IP route get ADDR` (default ip)
#   PREFLIGHT_ETHTOOL       command run as `$PREFLIGHT_ETHTOOL -l IF` (default ethtool;
#                           when it is missing or fails, queues are counted in sysfs)
#   PREFLIGHT_PAGE_SIZE     page size in bytes for tcp_mem (default `getconf PAGESIZE`)
set -euo pipefail
export LC_ALL=C

ROOT=${PREFLIGHT_ROOT:-}
IP_CMD=${PREFLIGHT_IP:-ip}
ETHTOOL_CMD=${PREFLIGHT_ETHTOOL:-ethtool}

usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; }
bad() { echo "preflight: $*" >&2; exit 2; }

CONNECTIONS=64
CORES=0
TARGETS=
SOURCE_IPS=1
SOURCES_GIVEN=
IFACE=
SHORT=0
SHORT_FLAG=--connect-per-request
RATE=
RATE_GIVEN=
SOCKBUF=
JSON=0
CONTROL_CORE=
PROTO=tcp
SHARD=
CONCURRENCY=
PLAN_GIVEN=0

# blaster run's flags that change nothing this script checks: accepted (with their value)
# so the same words go to both. tests/preflight_script.rs holds this list to
# `blaster run --help`.
RUN_VALUE_FLAGS=" --reconnect-backoff --keepalive --arrivals --max-response --spin --resolution --seed \
--pipeline --payload-size --payload --payload-file --framing --http -H --header --body \
--body-file --mix --timeout --max-lag --workload --tick --frame-size --room-size \
--frame-budget --down-size --connect-rate --heartbeat --heartbeat-payload --link-speed \
--duration --hdr-log --percentiles --csv --metrics-listen --metrics-linger --slo --abort-if --expect \
--start-at --run-id --step-duration --start-rate --repeats --confidence --warmup --error-status --frame-proto \
--frame-topic --ws-path --senders-per-room --members-per-connection --room-layout --slow-readers --tls-sni --tls-ca --alpn --tls-version --tls-resume --tls-cert --tls-key --grpc --grpc-message --grpc-proto --grpc-json --grpc-metadata --h2-keepalive --streams-per-connection --conn-max-age --conn-max-requests --server-time --replay --replay-as --replay-format --replay-speed --replay-port "
RUN_SWITCHES=" --linger0 --no-reconnect --echo-to-sender --aggregate --hold --no-response \
--progress --quiet --tls --tls-insecure --http2 --replay-loop "

posint() { [[ $1 =~ ^[0-9]{1,12}$ ]] && [ "$((10#$1))" -gt 0 ]; }
value() { [ "$2" -ge 2 ] || bad "$1: needs a value"; }
hostport() {
    [[ $2 =~ ^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+):([0-9]+)$ ]] \
        && [ "$((10#${BASH_REMATCH[2]}))" -ge 1 ] \
        && [ "$((10#${BASH_REMATCH[2]}))" -le 65535 ] \
        || bad "$1: '$2' is not HOST:PORT with a port from 1 to 65535"
}
# ip4 ADDR -> the address as a number; false when ADDR is not dotted IPv4.
ip4() {
    [[ $1 =~ ^([0-9]{1,3})\.([0-9]{1,3})\.([0-9]{1,3})\.([0-9]{1,3})$ ]] || return 1
    local o n=0
    for o in "${BASH_REMATCH[@]:1}"; do
        [ "$((10#$o))" -le 255 ] || return 1
        n=$((n * 256 + 10#$o))
    done
    echo "$n"
}
# ip6 ADDR -> its last 32 bits as a number, after its first 96 bits as 24 hex digits
# ("PREFIX LOW"); false when ADDR is not IPv6 (embedded IPv4 is not supported).
ip6() {
    local a=$1 head tail n i g out=() H=() T=()
    [[ $a =~ ^[0-9A-Fa-f:]+$ && $a == *:* ]] || return 1
    if [[ $a == *::* ]]; then
        head=${a%%::*}; tail=${a#*::}
        [[ $tail != *::* ]] || return 1
        [ -z "$head" ] || IFS=: read -ra H <<< "$head"
        [ -z "$tail" ] || IFS=: read -ra T <<< "$tail"
        n=$((8 - ${#H[@]} - ${#T[@]}))
        [ "$n" -ge 1 ] || return 1
        out=("${H[@]}")
        for ((i = 0; i < n; i++)); do out+=(0); done
        out+=("${T[@]}")
    else
        IFS=: read -ra out <<< "$a"
    fi
    [ ${#out[@]} -eq 8 ] || return 1
    for g in "${out[@]}"; do [[ $g =~ ^[0-9A-Fa-f]{1,4}$ ]] || return 1; done
    printf '%04x%04x%04x%04x%04x%04x %d\n' "0x${out[0]}" "0x${out[1]}" "0x${out[2]}" \
        "0x${out[3]}" "0x${out[4]}" "0x${out[5]}" $(( (0x${out[6]} << 16) + 0x${out[7]} ))
}
# count_sources SPEC -> how many addresses blaster's --source-ip SPEC names (as
# src/ports.rs parses it: addresses, ranges A-B or A-LASTOCTET, CIDR blocks, lists).
count_sources() {
    local spec=$1 item a b n total=0 lo hi p6 q6 l6 h6 bits
    [ -n "$spec" ] || return 1
    IFS=, read -ra _items <<< "$spec,"
    for item in "${_items[@]}"; do
        item=${item// /}
        [ -n "$item" ] || return 1
        if [[ $item == */* ]]; then
            a=${item%/*}; b=${item#*/}
            [[ $b =~ ^[0-9]{1,3}$ ]] || return 1
            if lo=$(ip4 "$a"); then
                [ "$b" -le 32 ] || return 1
                n=$((1 << (32 - b)))
                [ $((lo % n)) -eq 0 ] || return 1
            elif ip6 "$a" > /dev/null; then
                [ "$b" -ge 112 ] && [ "$b" -le 128 ] || return 1
                n=$((1 << (128 - b)))
            else
                return 1
            fi
        elif [[ $item == *-* ]]; then
            a=${item%%-*}; b=${item#*-}
            if lo=$(ip4 "$a"); then
                if [[ $b =~ ^[0-9]{1,3}$ ]]; then
                    [ "$((10#$b))" -le 255 ] || return 1
                    hi=$(( (lo / 256) * 256 + 10#$b ))
                else
                    hi=$(ip4 "$b") || return 1
                fi
            elif read -r p6 l6 < <(ip6 "$a") && read -r q6 h6 < <(ip6 "$b"); then
                # Counted within the last 32 bits (blaster takes at most 65536 anyway).
                [ "$p6" = "$q6" ] || return 1
                lo=$l6; hi=$h6
            else
                return 1
            fi
            [ "$hi" -ge "$lo" ] || return 1
            n=$((hi - lo + 1))
        else
            ip4 "$item" > /dev/null || ip6 "$item" > /dev/null || return 1
            n=1
        fi
        total=$((total + n))
    done
    [ "$total" -le 65536 ] || return 1
    echo "$total"
}
# size BYTES|4k|64KiB|1MiB -> bytes (blaster's --sockbuf sizes); false when not one.
size() {
    [[ $1 =~ ^([0-9]{1,10})(B|k|K|KiB|kB|M|MiB|MB)?$ ]] || return 1
    local n=$((10#${BASH_REMATCH[1]}))
    case "${BASH_REMATCH[2]}" in
        k|K|KiB|kB) n=$((n << 10)) ;;
        M|MiB|MB) n=$((n << 20)) ;;
    esac
    [ "$n" -gt 0 ] && echo "$n"
}

[ "${1:-}" = run ] && shift   # `blaster run`'s words, `run` included
while [ $# -gt 0 ]; do
    # --flag=value, as clap takes it.
    if [[ $1 == --*=* ]]; then set -- "${1%%=*}" "${1#*=}" "${@:2}"; fi
    case "$1" in
        --connections|--concurrency)
            value "$1" $#
            posint "$2" || bad "$1: must be a positive integer, got '$2'"
            if [ "$1" = --connections ]; then CONNECTIONS=$((10#$2)); else CONCURRENCY=$((10#$2)); fi
            PLAN_GIVEN=1; shift 2 ;;
        --cores)
            value "$1" $#
            [[ $2 =~ ^[0-9]{1,5}(-[0-9]{1,5})?(,[0-9]{1,5}(-[0-9]{1,5})?)*$ ]] \
                || bad "--cores: must be a list like 3, 4-11 or 0,2,4-6, got '$2'"
            IFS=, read -ra _r <<< "$2"
            for r in "${_r[@]}"; do
                [[ $r != *-* ]] || [ "$((10#${r%-*}))" -le "$((10#${r#*-}))" ] \
                    || bad "--cores: range '$r' runs backwards"
            done
            CORES=$2; PLAN_GIVEN=1; shift 2 ;;
        --control-core)
            value "$1" $#
            [[ $2 =~ ^[0-9]{1,5}$ ]] || bad "--control-core: must be a core number, got '$2'"
            CONTROL_CORE=$((10#$2)); PLAN_GIVEN=1; shift 2 ;;
        --target)
            value "$1" $#
            hostport --target "$2"
            TARGETS=${TARGETS:+$TARGETS,}$2; PLAN_GIVEN=1; shift 2 ;;
        --targets)
            value "$1" $#
            IFS=, read -ra _t <<< "$2"
            [ ${#_t[@]} -gt 0 ] || bad "--targets: must be HOST:PORT[,HOST:PORT...], got '$2'"
            for t in "${_t[@]}"; do hostport --targets "$t"; done
            TARGETS=${TARGETS:+$TARGETS,}$2; PLAN_GIVEN=1; shift 2 ;;
        --source-ip)
            value "$1" $#
            n=$(count_sources "$2") \
                || bad "--source-ip: expected addresses such as 10.0.0.2, 10.0.0.2-10.0.0.9 or 10.0.0.0/29 (at most 65536), got '$2'"
            SOURCE_IPS=$n; SOURCES_GIVEN="--source-ip $2"; PLAN_GIVEN=1; shift 2 ;;
        --source-ips)
            value "$1" $#
            posint "$2" || bad "--source-ips: must be a positive integer, got '$2'"
            SOURCE_IPS=$((10#$2)); SOURCES_GIVEN="--source-ips $2"; PLAN_GIVEN=1; shift 2 ;;
        --proto)
            value "$1" $#
            [[ $2 == tcp || $2 == udp ]] || bad "--proto: expected tcp or udp, got '$2'"
            PROTO=$2; PLAN_GIVEN=1; shift 2 ;;
        --shard)
            value "$1" $#
            [[ $2 =~ ^([0-9]{1,5})/([0-9]{1,5})$ ]] \
                && [ "$((10#${BASH_REMATCH[2]}))" -ge 1 ] \
                && [ "$((10#${BASH_REMATCH[1]}))" -lt "$((10#${BASH_REMATCH[2]}))" ] \
                || bad "--shard: expected I/N with I < N, e.g. 2/8, got '$2'"
            SHARD=$2; PLAN_GIVEN=1; shift 2 ;;
        --iface)
            value "$1" $#
            [[ $2 =~ ^[A-Za-z0-9_.:@-]{1,15}$ ]] || bad "--iface: not an interface name: '$2'"
            IFACE=$2; shift 2 ;;
        --short-connections|--connect-per-request) SHORT=1; SHORT_FLAG=$1; PLAN_GIVEN=1; shift ;;
        --rate)
            value "$1" $#
            if [[ $2 =~ ^[0-9]+$ ]]; then
                posint "$2" || bad "--rate: must be a positive integer (per second), got '$2'"
                RATE=$((10#$2))
            elif [[ $2 =~ ^([0-9]{1,12})\.[0-9]+$ ]]; then
                RATE=$((10#${BASH_REMATCH[1]} + 1))
            elif [[ $2 == max || $2 =~ ^[a-z]+: ]]; then
                RATE=
            else
                bad "--rate: expected requests per second or a shape such as ramp:0..50000/60s, got '$2'"
            fi
            RATE_GIVEN=$2; PLAN_GIVEN=1; shift 2 ;;
        --sockbuf)
            value "$1" $#
            SOCKBUF=$(size "$2") || bad "--sockbuf: expected a size such as 4096, 64KiB or 1MiB, got '$2'"
            PLAN_GIVEN=1; shift 2 ;;
        --json)
            # blaster's --json FILE takes a path; the script's --json takes nothing.
            if [ $# -ge 2 ] && [[ $2 != --* ]]; then shift 2; else JSON=1; shift; fi ;;
        -h|--help) usage; exit 0 ;;
        *)
            if [[ $RUN_VALUE_FLAGS == *" $1 "* ]]; then
                value "$1" $#; shift 2
            elif [[ $RUN_SWITCHES == *" $1 "* ]]; then
                shift
            else
                bad "unknown argument '$1' (neither this script's nor blaster run's; see --help)"
            fi ;;
    esac
done
if [ "$SHORT" = 1 ] && [ -z "$RATE" ]; then
    bad "$SHORT_FLAG: needs --rate R (new connections per second, a number) for the TIME_WAIT check"
fi
# What this machine holds: closed loop's --concurrency, a shard's part.
TOTAL_CONNECTIONS=${CONCURRENCY:-$CONNECTIONS}
CONNECTIONS=$TOTAL_CONNECTIONS
if [ -n "$SHARD" ]; then
    si=$((10#${SHARD%/*})); sn=$((10#${SHARD#*/}))
    CONNECTIONS=$(( TOTAL_CONNECTIONS / sn + (si < TOTAL_CONNECTIONS % sn ? 1 : 0) ))
    [ "$CONNECTIONS" -gt 0 ] || bad "--shard: shard $SHARD gets none of the $TOTAL_CONNECTIONS connections"
fi
# No target: the loopback baseline, whose in-process sink holds the other end of every
# connection on this host.
BASELINE=0
[ -n "$TARGETS" ] || BASELINE=1
SOCKETS=$CONNECTIONS
[ "$BASELINE" = 1 ] && SOCKETS=$((2 * CONNECTIONS))

# ---------------------------------------------------------------- helpers

FAILED=0
JSON_ITEMS=()
json_str() {
    local s=$1
    s=${s//\\/\\\\}; s=${s//\"/\\\"}
    s=${s//$'\t'/\\t}; s=${s//$'\n'/\\n}; s=${s//$'\r'/\\r}
    s=${s//[$'\001'-$'\037']/}
    printf '"%s"' "$s"
}
# emit STATUS CHECK SAW NEED FIX
emit() {
    local status=$1 check=$2 saw=$3 need=$4 fix=$5
    if [ "$status" = FAIL ]; then FAILED=1; fi
    if [ "$JSON" = 1 ]; then
        JSON_ITEMS+=("{\"status\":$(json_str "$status"),\"check\":$(json_str "$check"),\"saw\":$(json_str "$saw"),\"need\":$(json_str "$need"),\"fix\":$(json_str "$fix")}")
        return 0
    fi
    local line
    line=$(printf '%-5s %-19s saw: %s' "$status" "$check" "$saw")
    [ -n "$need" ] && line+="; need: $need"
    [ -n "$fix" ] && line+="; fix: $fix"
    printf '%s\n' "$line"
}

# rd VAR PATH: the first line of $ROOT$PATH into VAR; false when it cannot be read.
rd() {
    local -n _rd_out=$1
    _rd_out=
    [ -r "$ROOT$2" ] || return 1
    { IFS= read -r _rd_out || [ -n "$_rd_out" ]; } 2>/dev/null < "$ROOT$2"
}
# rdint VAR PATH: like rd, and the value must be an integer.
rdint() { rd "$1" "$2" && [[ ${!1} =~ ^-?[0-9]+$ ]]; }
unreadable() { emit INFO "$1" "cannot read $ROOT$2" "" ""; }

# expand "0,2,4-6" -> "0 2 4 5 6"
expand() {
    local out=() p a b i parts
    IFS=, read -ra parts <<< "$1"
    for p in "${parts[@]}"; do
        [ -n "$p" ] || continue
        if [[ $p == *-* ]]; then
            a=$((10#${p%-*})); b=$((10#${p#*-}))
            for ((i = a; i <= b; i++)); do out+=("$i"); done
        else
            out+=("$((10#$p))")
        fi
    done
    echo "${out[*]}"
}
# compress "0 1 2 5" -> "0-2,5" (sorted, duplicates dropped)
compress() {
    local out=() start=-1 prev=-1 c
    for c in $(printf '%s\n' "$@" | sort -n -u); do
        if [ "$start" -lt 0 ]; then start=$c
        elif [ "$c" -ne $((prev + 1)) ]; then
            if [ "$start" = "$prev" ]; then out+=("$start"); else out+=("$start-$prev"); fi
            start=$c
        fi
        prev=$c
    done
    if [ "$start" -ge 0 ]; then
        if [ "$start" = "$prev" ]; then out+=("$start"); else out+=("$start-$prev"); fi
    fi
    local IFS=,; echo "${out[*]}"
}
# human BYTES -> "1.5 GiB"
human() { awk -v b="$1" 'BEGIN { split("B KiB MiB GiB TiB", u, " "); i = 1
    while (b >= 1024 && i < 5) { b /= 1024; i++ }
    if (i == 1) printf "%d %s", b, u[i]; else printf "%.1f %s", b, u[i] }'; }
pow2_at_least() { local v=1; while [ "$v" -lt "$1" ]; do v=$((v * 2)); done; echo "$v"; }
ceil_div() { echo $(( ($1 + $2 - 1) / $2 )); }
min() { if [ "$1" -lt "$2" ]; then echo "$1"; else echo "$2"; fi; }
# cpumask for rps_cpus: comma-separated 32-bit hex words, highest first.
cpumask() {
    local c max=0 words=() w i out=()
    for c in "$@"; do [ "$c" -gt "$max" ] && max=$c; done
    for ((i = 0; i <= max / 32; i++)); do words[i]=0; done
    for c in "$@"; do w=$((c / 32)); words[w]=$(( words[w] | (1 << (c % 32)) )); done
    for ((i = max / 32; i >= 0; i--)); do out+=("$(printf '%08x' "${words[i]}")"); done
    local IFS=,; echo "${out[*]}"
}

read -ra SEL <<< "$(expand "$CORES")"
SEL_SET=" ${SEL[*]} "
NCORES=${#SEL[@]}
CORES_C=$(compress "${SEL[@]}")

# Destinations: distinct HOST:PORT pairs; hosts for the route lookup.
HOSTS=()
DESTS=1
ALL_LOOPBACK=0
if [ -n "$TARGETS" ]; then
    IFS=, read -ra _t <<< "$TARGETS"
    DESTS=$(printf '%s\n' "${_t[@]}" | sort -u | wc -l)
    ALL_LOOPBACK=1
    for t in "${_t[@]}"; do
        h=${t%:*}; h=${h#[}; h=${h%]}
        HOSTS+=("$h")
        [[ $h =~ ^127\. || $h == localhost || $h == ::1 ]] || ALL_LOOPBACK=0
    done
fi
# A connected UDP socket holds its port for every destination: one pair per source.
PORT_DESTS=$DESTS
[ "$PROTO" = tcp ] || PORT_DESTS=1

# ---------------------------------------------------------------- the plan

plan="--cores $CORES_C --connections $TOTAL_CONNECTIONS"
[ -n "$CONCURRENCY" ] && plan="--cores $CORES_C --concurrency $CONCURRENCY"
[ -n "$CONTROL_CORE" ] && plan+=" --control-core $CONTROL_CORE"
[ "$PROTO" = udp ] && plan+=" --proto udp"
if [ -n "$TARGETS" ]; then
    IFS=, read -ra _t <<< "$TARGETS"
    for t in "${_t[@]}"; do plan+=" --target $t"; done
fi
[ -n "$SOURCES_GIVEN" ] && plan+=" $SOURCES_GIVEN ($SOURCE_IPS addresses)"
[ -n "$SHARD" ] && plan+=" --shard $SHARD (this machine: $CONNECTIONS connections)"
[ "$SHORT" = 1 ] && plan+=" --connect-per-request"
[ -n "$RATE_GIVEN" ] && plan+=" --rate $RATE_GIVEN"
[ -n "$SOCKBUF" ] && plan+=" --sockbuf $SOCKBUF"
if [ "$BASELINE" = 1 ]; then
    plan+=", no --target: the loopback baseline (its built-in sink holds the other end of each connection on this host: $SOCKETS sockets)"
fi
if [ "$PLAN_GIVEN" = 0 ]; then
    emit INFO plan "no plan flags: checked blaster's default plan, $plan" \
        "the plan of the run that follows" \
        "give this script the flags you give blaster, e.g. scripts/preflight.sh --cores 4-11 --connections 100000 --target HOST:PORT"
else
    emit INFO plan "$plan" "" ""
fi

# ---------------------------------------------------------------- whose limits

# Under sudo this script runs as root, but blaster runs after `&&` in the shell that ran
# sudo, as its user: read that shell's limits (the first ancestor owned by SUDO_UID).
RUN_UID=${PREFLIGHT_UID:-$(id -u)}
BLASTER_UID=$RUN_UID
LIMITS_FILE=
WHOSE=
ROOTS=
if [ "$RUN_UID" = 0 ] && [ -n "${SUDO_USER:-}" ] && [[ ${SUDO_UID:-} =~ ^[0-9]+$ ]]; then
    BLASTER_UID=$SUDO_UID
    pid=$PPID
    for _ in 1 2 3 4 5 6 7 8; do
        [ -r "$ROOT/proc/$pid/status" ] || break
        uid=$(awk '$1 == "Uid:" { print $2; exit }' "$ROOT/proc/$pid/status")
        if [ "$uid" = "$SUDO_UID" ] && [ -r "$ROOT/proc/$pid/limits" ]; then
            LIMITS_FILE=$ROOT/proc/$pid/limits
            WHOSE="$SUDO_USER's shell (pid $pid, which ran sudo and starts blaster)"
            break
        fi
        pid=$(awk '$1 == "PPid:" { print $2; exit }' "$ROOT/proc/$pid/status")
        [[ $pid =~ ^[0-9]+$ ]] && [ "$pid" -gt 1 ] || break
    done
    ROOTS="root's, under sudo: $SUDO_USER's shell or its limits were not found, and blaster started by $SUDO_USER gets that user's limits (check there with ulimit)"
fi
# limit NAME -> "SOFT HARD" of the /proc/PID/limits line NAME (e.g. "Max open files").
limit() { awk -v n="$1" 'index($0, n) == 1 { $0 = substr($0, length(n) + 1); print $1, $2; exit }' "$LIMITS_FILE"; }

# ---------------------------------------------------------------- io_uring

kver=
if rd osrelease /proc/sys/kernel/osrelease && [[ $osrelease =~ ^([0-9]+)\.([0-9]+) ]]; then
    kmaj=$((10#${BASH_REMATCH[1]})); kmin=$((10#${BASH_REMATCH[2]}))
    kver=$((kmaj * 1000 + kmin))
    if [ "$kver" -lt 5011 ]; then
        emit FAIL io_uring.kernel "kernel $osrelease" ">= 5.11 (blaster needs IORING_FEAT_EXT_ARG)" \
            "run on kernel 5.11 or later (6.0+ for multishot receive)"
    elif [ "$kver" -lt 6000 ]; then
        emit PASS io_uring.kernel "kernel $osrelease (no multishot receive before 6.0: blaster re-arms single-shot receives, more submissions per response)" \
            ">= 5.11 (6.0+ for multishot receive)" ""
    else
        emit PASS io_uring.kernel "kernel $osrelease" ">= 5.11 (6.0+ for multishot receive)" ""
    fi
else
    unreadable io_uring.kernel /proc/sys/kernel/osrelease
fi

if rdint iou_off /proc/sys/kernel/io_uring_disabled; then
    rdint iou_gid /proc/sys/kernel/io_uring_group || iou_gid=-1
    who="uid $BLASTER_UID"
    [ -n "${SUDO_USER:-}" ] && [ "$BLASTER_UID" = "${SUDO_UID:-}" ] && who=$SUDO_USER
    case "$iou_off" in
        0) emit PASS io_uring.disabled "kernel.io_uring_disabled=0" "0 (io_uring for every process)" "" ;;
        1)
            member=0
            if [ "$iou_gid" -ge 0 ] && id -G "$BLASTER_UID" 2> /dev/null | tr ' ' '\n' | grep -qx "$iou_gid"; then member=1; fi
            if [ "$BLASTER_UID" = 0 ] || [ "$member" = 1 ]; then
                emit PASS io_uring.disabled "kernel.io_uring_disabled=1 (root and group $iou_gid only); blaster runs as $who" \
                    "io_uring allowed for the user running blaster" ""
            else
                emit FAIL io_uring.disabled "kernel.io_uring_disabled=1: only root and kernel.io_uring_group ($iou_gid) may create rings; blaster runs as $who" \
                    "io_uring allowed for the user running blaster" \
                    "sysctl -w kernel.io_uring_disabled=0 (or add $who to a group and sysctl -w kernel.io_uring_group=GID)"
            fi ;;
        *) emit FAIL io_uring.disabled "kernel.io_uring_disabled=$iou_off: io_uring is off for every process" \
            "0 (io_uring for every process)" "sysctl -w kernel.io_uring_disabled=0" ;;
    esac
elif [ -n "$kver" ] && [ "$kver" -lt 6006 ]; then
    emit PASS io_uring.disabled "no kernel.io_uring_disabled before kernel 6.6: io_uring is on" "" ""
else
    unreadable io_uring.disabled /proc/sys/kernel/io_uring_disabled
fi

# Before 5.12 each ring's memory counts against RLIMIT_MEMLOCK (since, the memory cgroup).
RING_BYTES=$((512 * 1024))   # 4096 SQEs (256 KiB), 8192 CQEs (128 KiB), the rings' arrays
rings=$NCORES
[ "$BASELINE" = 1 ] && rings=$((2 * NCORES))   # the built-in sink's rings too
if [ -z "$kver" ]; then
    unreadable io_uring.memlock /proc/sys/kernel/osrelease
elif [ "$kver" -ge 5012 ]; then
    emit PASS io_uring.memlock "kernel $osrelease charges io_uring memory to the memory cgroup, not RLIMIT_MEMLOCK" "" ""
else
    ml_whose= memlock=
    if [ -n "${PREFLIGHT_ULIMIT_MEMLOCK:-}" ]; then
        memlock=$PREFLIGHT_ULIMIT_MEMLOCK
    elif [ -n "$LIMITS_FILE" ] && read -r memlock _ < <(limit "Max locked memory") && [ -n "$memlock" ]; then
        ml_whose="$WHOSE: "
    fi
    if [ -z "$memlock" ]; then
        memlock=$(ulimit -l); [ "$memlock" = unlimited ] || memlock=$((memlock * 1024))
        if [ -n "$ROOTS" ]; then ml_whose="$ROOTS: "; fi
    fi
    ml_need=$((rings * RING_BYTES))
    if [ "$memlock" != unlimited ] && [ "$memlock" -lt "$ml_need" ]; then
        emit FAIL io_uring.memlock "kernel $osrelease (before 5.12 rings count against RLIMIT_MEMLOCK); ${ml_whose}RLIMIT_MEMLOCK $(human "$memlock")" \
            ">= $(human "$ml_need") ($rings rings x $(human "$RING_BYTES"))" \
            "ulimit -l unlimited (as root, in the shell that starts blaster; to persist: '* - memlock unlimited' in /etc/security/limits.conf)"
    else
        emit PASS io_uring.memlock "kernel $osrelease; ${ml_whose}RLIMIT_MEMLOCK $memlock" \
            ">= $(human "$ml_need") ($rings rings x $(human "$RING_BYTES"))" ""
    fi
fi

# ---------------------------------------------------------------- file descriptors

FD_NEED=$((SOCKETS + 64))
if [ -n "${PREFLIGHT_ULIMIT_SOFT:-}${PREFLIGHT_ULIMIT_HARD:-}" ]; then
    soft=${PREFLIGHT_ULIMIT_SOFT:-$(ulimit -Sn)}
    hard=${PREFLIGHT_ULIMIT_HARD:-$(ulimit -Hn)}
    lim="RLIMIT_NOFILE"
elif [ -n "$LIMITS_FILE" ] && read -r soft hard < <(limit "Max open files") && [ -n "$hard" ]; then
    lim="RLIMIT_NOFILE of $WHOSE:"
else
    soft=$(ulimit -Sn); hard=$(ulimit -Hn)
    lim="RLIMIT_NOFILE"
    [ -n "$ROOTS" ] && lim="RLIMIT_NOFILE ($ROOTS):"
fi
rdint nr_open /proc/sys/fs/nr_open || nr_open=unknown
if [ "$BASELINE" = 1 ]; then
    need="$FD_NEED ($SOCKETS sockets: $CONNECTIONS connections with both ends on this host, + 64 for the process)"
else
    need="$FD_NEED ($CONNECTIONS connections + 64 for the process)"
fi
if [ "$hard" != unlimited ] && [ "$hard" -lt "$FD_NEED" ]; then
    emit FAIL fd.limit "$lim soft $soft, hard $hard" "$need" \
        "ulimit -Hn $FD_NEED && ulimit -Sn $FD_NEED (as root, in the shell that starts blaster; to persist: '* hard nofile $FD_NEED' in /etc/security/limits.conf; fs.nr_open=$nr_open is the ceiling)"
elif [ "$soft" != unlimited ] && [ "$soft" -lt "$FD_NEED" ]; then
    emit PASS fd.limit "$lim soft $soft, hard $hard (blaster raises the soft limit to the hard one itself)" "$need" ""
else
    emit PASS fd.limit "$lim soft $soft, hard $hard" "$need" ""
fi

if [ "$nr_open" = unknown ]; then
    unreadable fd.nr_open /proc/sys/fs/nr_open
elif [ "$nr_open" -lt "$FD_NEED" ]; then
    emit FAIL fd.nr_open "fs.nr_open $nr_open (no process may hold more)" ">= $FD_NEED" \
        "sysctl -w fs.nr_open=$FD_NEED"
else
    emit PASS fd.nr_open "fs.nr_open $nr_open" ">= $FD_NEED" ""
fi

if rdint file_max /proc/sys/fs/file-max; then
    used=0
    if rd file_nr /proc/sys/fs/file-nr; then read -r used _ <<< "$file_nr"; fi
    free=$((file_max - used))
    if [ "$free" -lt "$FD_NEED" ]; then
        emit FAIL fd.file_max "fs.file-max $file_max, $used open system-wide: $free left" \
            ">= $FD_NEED free" "sysctl -w fs.file-max=$((used + 2 * FD_NEED))"
    else
        emit PASS fd.file_max "fs.file-max $file_max, $used open system-wide: $free left" \
            ">= $FD_NEED free" ""
    fi
else
    unreadable fd.file_max /proc/sys/fs/file-max
fi

# ---------------------------------------------------------------- ephemeral ports

WIDE_PORTS=64512    # 1024-65535
PORTS=0
if rd range /proc/sys/net/ipv4/ip_local_port_range && read -r plo phi <<< "$range" \
        && [[ $plo =~ ^[0-9]+$ && $phi =~ ^[0-9]+$ ]]; then
    PORTS=$((phi - plo + 1))
    pairs=$((SOURCE_IPS * PORT_DESTS))
    per_pair=$(ceil_div "$CONNECTIONS" "$pairs")
    saw="ip_local_port_range $plo-$phi = $PORTS ports per (source IP, destination); $SOURCE_IPS source IP(s) x $PORT_DESTS destination(s)"
    [ "$PROTO" = udp ] && saw+=" (UDP: a connected socket holds its port for every destination)"
    need="$per_pair ports per pair ($CONNECTIONS connections over $pairs pair(s))"
    if [ "$PORTS" -lt "$per_pair" ]; then
        if [ "$per_pair" -le "$WIDE_PORTS" ]; then
            fix="sysctl -w net.ipv4.ip_local_port_range='1024 65535'"
        else
            more=$(ceil_div "$CONNECTIONS" $((WIDE_PORTS * PORT_DESTS)))
            fix="sysctl -w net.ipv4.ip_local_port_range='1024 65535' and --source-ip with $more addresses (on the interface) or more destinations"
        fi
        emit FAIL ports.range "$saw" "$need" "$fix"
    else
        emit PASS ports.range "$saw" "$need" ""
    fi
else
    unreadable ports.range /proc/sys/net/ipv4/ip_local_port_range
fi

if [ "$SHORT" = 1 ] && [ "$PORTS" = 0 ]; then
    unreadable ports.time_wait /proc/sys/net/ipv4/ip_local_port_range
elif [ "$SHORT" = 1 ]; then
    rdint tw_reuse /proc/sys/net/ipv4/tcp_tw_reuse || tw_reuse=unknown
    # 1 = on; 2 (the default) = loopback only.
    reuse_on=0
    if [ "$tw_reuse" = 1 ] || { [ "$tw_reuse" = 2 ] && [ "$ALL_LOOPBACK" = 1 ]; }; then reuse_on=1; fi
    capacity=$((PORTS * SOURCE_IPS * PORT_DESTS))
    tw=$((RATE * 60))
    saw="$RATE connections/s x 60 s TIME_WAIT = $tw sockets holding ports (if blaster closes first); $capacity ports over all pairs; tcp_tw_reuse=$tw_reuse"
    more=$(ceil_div "$RATE" $((WIDE_PORTS * PORT_DESTS)))
    if [ "$tw" -le "$capacity" ]; then
        emit PASS ports.time_wait "$saw" ">= $tw ports" ""
    elif [ "$reuse_on" = 1 ] && [ "$RATE" -le "$capacity" ]; then
        emit WARN ports.time_wait "$saw" ">= $tw ports, or tcp_tw_reuse (ports come back after 1 s)" \
            "sysctl -w net.ipv4.ip_local_port_range='1024 65535' (the run now depends on tcp_tw_reuse)"
    elif [ "$RATE" -le "$capacity" ]; then
        emit FAIL ports.time_wait "$saw" ">= $tw ports, or tcp_tw_reuse=1 and >= $RATE ports" \
            "sysctl -w net.ipv4.tcp_tw_reuse=1"
    else
        emit FAIL ports.time_wait "$saw" ">= $RATE ports even with tcp_tw_reuse" \
            "sysctl -w net.ipv4.tcp_tw_reuse=1 net.ipv4.ip_local_port_range='1024 65535' and --source-ip with $more addresses"
    fi

    if [ "$tw_reuse" = unknown ]; then
        unreadable ports.tw_reuse /proc/sys/net/ipv4/tcp_tw_reuse
    elif [ "$reuse_on" = 1 ]; then
        emit PASS ports.tw_reuse "tcp_tw_reuse=$tw_reuse" "1 (2 covers loopback only)" ""
    else
        emit WARN ports.tw_reuse "tcp_tw_reuse=$tw_reuse (0 = off, 2 = loopback only)" \
            "1, so connect() may take a port from a TIME_WAIT socket" "sysctl -w net.ipv4.tcp_tw_reuse=1"
    fi

    if rdint fin /proc/sys/net/ipv4/tcp_fin_timeout; then
        if [ "$fin" -gt 30 ]; then
            emit WARN ports.fin_timeout "tcp_fin_timeout=$fin s (FIN_WAIT2 holds the port that long)" \
                "<= 30 s" "sysctl -w net.ipv4.tcp_fin_timeout=15"
        else
            emit PASS ports.fin_timeout "tcp_fin_timeout=$fin s" "<= 30 s" ""
        fi
    else
        unreadable ports.fin_timeout /proc/sys/net/ipv4/tcp_fin_timeout
    fi
fi

# ---------------------------------------------------------------- conntrack

NF=/proc/sys/net/netfilter
if [ ! -e "$ROOT$NF/nf_conntrack_max" ]; then
    emit PASS conntrack.table "nf_conntrack not loaded: no table to fill" "" ""
elif rdint ct_max "$NF/nf_conntrack_max"; then
    rdint ct_count "$NF/nf_conntrack_count" || ct_count=0
    ct_need=$CONNECTIONS
    why="$CONNECTIONS connections"
    if [ "$SHORT" = 1 ]; then
        rdint ct_tw "$NF/nf_conntrack_tcp_timeout_time_wait" || ct_tw=120
        ct_need=$((ct_need + RATE * ct_tw))
        why+=" + $RATE/s x ${ct_tw} s in TIME_WAIT"
    fi
    ct_total=$((ct_count + ct_need))
    saw="nf_conntrack loaded: nf_conntrack_max $ct_max, $ct_count entries in use"
    if [ "$ct_total" -gt "$ct_max" ]; then
        emit FAIL conntrack.table "$saw" ">= $ct_total entries ($ct_count in use + $why)" \
            "sysctl -w net.netfilter.nf_conntrack_max=$(pow2_at_least $((ct_total + ct_total / 4)))"
    else
        emit PASS conntrack.table "$saw" ">= $ct_total entries ($ct_count in use + $why)" ""
    fi
    if rdint buckets "$NF/nf_conntrack_buckets" || rdint buckets /sys/module/nf_conntrack/parameters/hashsize; then
        entries=$(( ct_total > ct_max ? ct_total : ct_max ))
        if [ "$buckets" -gt 0 ] && [ "$entries" -gt $((4 * buckets)) ]; then
            emit WARN conntrack.hashsize "$buckets hash buckets for up to $entries entries ($((entries / buckets)) per bucket: every packet walks the chain)" \
                "<= 4 entries per bucket" \
                "echo $(pow2_at_least $(ceil_div "$entries" 2)) > /sys/module/nf_conntrack/parameters/hashsize"
        else
            emit PASS conntrack.hashsize "$buckets hash buckets for up to $entries entries" "<= 4 entries per bucket" ""
        fi
    else
        unreadable conntrack.hashsize "$NF/nf_conntrack_buckets"
    fi
else
    unreadable conntrack.table "$NF/nf_conntrack_max"
fi

# ---------------------------------------------------------------- memory

PAGE=${PREFLIGHT_PAGE_SIZE:-$(getconf PAGESIZE 2>/dev/null || echo 4096)}
SOCK_OVERHEAD=4096  # struct tcp_sock, file, dentry, epoll/ring bookkeeping, roughly
SOCKET_WORD=connection
SIDES=$((SOCKETS / CONNECTIONS))   # 2 for the baseline: both ends on this host
[ "$BASELINE" = 1 ] && SOCKET_WORD="socket (the baseline: both ends on this host)"
if rd rmem /proc/sys/net/ipv4/tcp_rmem && rd wmem /proc/sys/net/ipv4/tcp_wmem; then
    read -r rmin rdef rmax <<< "$rmem"
    read -r wmin wdef wmax <<< "$wmem"
    avail_kb= avail=0
    if [ -r "$ROOT/proc/meminfo" ]; then
        avail_kb=$(awk '$1 == "MemAvailable:" { print $2 }' "$ROOT/proc/meminfo")
    fi
    if [[ $avail_kb =~ ^[0-9]+$ ]]; then
        avail=$((avail_kb * 1024))
        per_def=$((rdef + wdef))
        per_min=$((rmin + wmin + SOCK_OVERHEAD))
        full=$((SOCKETS * per_def))
        floor=$((SOCKETS * per_min))
        saw="tcp_rmem default $rdef + tcp_wmem default $wdef = $(human "$per_def") per $SOCKET_WORD x $SOCKETS = $(human "$full") if every buffer fills ($(human "$floor") at the minimums); MemAvailable $(human "$avail")"
        budget=$((avail / 2 / SOCKETS))
        each=$(( (budget / 2) / 4096 * 4096 ))
        if [ "$floor" -gt "$avail" ]; then
            emit FAIL mem.tcp "$saw" "$(human "$floor") at least, <= MemAvailable" \
                "fewer connections on this machine: at most $((avail / per_min / SIDES)) (or add memory)"
        elif [ "$full" -gt "$avail" ]; then
            if [ "$each" -ge 4096 ]; then
                fix="sysctl -w net.ipv4.tcp_rmem='$rmin $each $rmax' net.ipv4.tcp_wmem='$wmin $each $wmax' (defaults that fit in half of MemAvailable)"
            else
                fix="fewer connections on this machine: at most $((avail / 2 / 8192 / SIDES)) with 4 KiB default buffers"
            fi
            emit WARN mem.tcp "$saw" "<= $(human "$avail") if every buffer fills" "$fix"
        else
            emit PASS mem.tcp "$saw" "<= $(human "$avail") if every buffer fills" ""
        fi
    else
        unreadable mem.tcp /proc/meminfo
    fi
    if rd tmem /proc/sys/net/ipv4/tcp_mem; then
        read -r mlow mpress mhigh <<< "$tmem"
        need_def=$(ceil_div $((SOCKETS * (rdef + wdef))) "$PAGE")
        need_min=$(ceil_div $((SOCKETS * (rmin + wmin))) "$PAGE")
        saw="tcp_mem $mlow $mpress $mhigh pages (pressure $(human $((mpress * PAGE))), limit $(human $((mhigh * PAGE)))); $SOCKETS sockets need $need_min pages at the minimums, $need_def at the defaults"
        # Raise tcp_mem only as far as memory allows; beyond that, smaller buffers.
        fits=$(( avail > 0 ? avail / PAGE : need_def ))
        if [ "$need_min" -gt "$mhigh" ]; then
            if [ "$need_min" -le "$fits" ]; then
                fix="sysctl -w net.ipv4.tcp_mem='$mlow $need_min $((need_min + need_min / 2))'"
            else
                fix="fewer connections on this machine: the buffers' minimums alone exceed MemAvailable"
            fi
            emit FAIL mem.tcp_mem "$saw" "limit >= $need_min pages" "$fix"
        elif [ "$need_def" -gt "$mpress" ]; then
            if [ "$((need_def + need_def / 2))" -le "$fits" ]; then
                fix="sysctl -w net.ipv4.tcp_mem='$mlow $need_def $((need_def + need_def / 2))'"
            else
                each=$(( (mhigh * PAGE / SOCKETS / 2) / 4096 * 4096 ))
                [ "$each" -ge 4096 ] || each=4096
                fix="sysctl -w net.ipv4.tcp_rmem='$rmin $each $rmax' net.ipv4.tcp_wmem='$wmin $each $wmax' (defaults that fit under the tcp_mem limit)"
            fi
            emit WARN mem.tcp_mem "$saw (past pressure the kernel shrinks every buffer)" \
                "pressure >= $need_def pages" "$fix"
        else
            emit PASS mem.tcp_mem "$saw" "pressure >= $need_def pages" ""
        fi
    else
        unreadable mem.tcp_mem /proc/sys/net/ipv4/tcp_mem
    fi
else
    unreadable mem.tcp /proc/sys/net/ipv4/tcp_rmem
fi

# ---------------------------------------------------------------- cores

CPU=/sys/devices/system/cpu
WANTED=("${SEL[@]}")
if [ -n "$CONTROL_CORE" ] && [[ $SEL_SET != *" $CONTROL_CORE "* ]]; then WANTED+=("$CONTROL_CORE"); fi
WANTED_C=$(compress "${WANTED[@]}")
need_cores="cores $WANTED_C online"
[ -n "$CONTROL_CORE" ] && need_cores+=" (workers $CORES_C, control core $CONTROL_CORE)"
# The affinity of this process, which blaster started from the same shell inherits.
allowed=
if [ -r "$ROOT/proc/self/status" ]; then
    allowed=$(awk '$1 == "Cpus_allowed_list:" { print $2; exit }' "$ROOT/proc/self/status")
fi
if rd online "$CPU/online"; then
    on=" $(expand "$online") "
    missing=() unusable=()
    for c in "${WANTED[@]}"; do [[ $on == *" $c "* ]] || missing+=("$c"); done
    if [ -n "$allowed" ]; then
        usable=" $(expand "$allowed") "
        need_cores+=" and usable"
        for c in "${WANTED[@]}"; do
            [[ $on != *" $c "* || $usable == *" $c "* ]] || unusable+=("$c")
        done
    fi
    if [ ${#missing[@]} -gt 0 ]; then
        m=$(compress "${missing[@]}")
        emit FAIL cores.online "cores $m are not online (online: $online)" "$need_cores" \
            "for c in ${missing[*]}; do echo 1 > $CPU/cpu\$c/online; done (or choose --cores within $online)"
    elif [ ${#unusable[@]} -gt 0 ]; then
        m=$(compress "${unusable[@]}")
        # A WARN, not a FAIL: a preflight in a container of its own (deploy/k8s) runs
        # with another cpuset than the blaster it checks for.
        emit WARN cores.online "cores $m are online but outside this shell's affinity (Cpus_allowed_list $allowed; online: $online): blaster started from here cannot run on them" \
            "$need_cores" \
            "choose --cores within $allowed, or widen the affinity of the shell that starts blaster (taskset -a -p -c $online PID, or the cgroup's cpuset.cpus)"
    else
        saw="online: $online"
        [ -n "$allowed" ] && saw+="; usable here: $allowed"
        emit PASS cores.online "$saw" "$need_cores" ""
    fi
else
    unreadable cores.online "$CPU/online"
fi

# The host's noise floor (issue 33): timer lateness of a pinned sleeper, steal and other
# load on the run's cores, measured for about a second. A shell cannot time a sleeper to
# microseconds; blaster's own preflight does it with the same flags.
emit INFO host.noise "measured by blaster itself: \`blaster preflight\` with the same flags (about 1 s on the run's cores)" "" ""

# SMT: a worker per hyperthread of one physical core shares its execution units.
pairs=()
keep=()
declare -A seen_group=()
smt_known=0
for c in "${SEL[@]}"; do
    if rd sib "$CPU/cpu$c/topology/thread_siblings_list"; then
        smt_known=1
        group=$(expand "$sib")
        for s in $group; do
            if [ "$s" != "$c" ] && [[ $SEL_SET == *" $s "* ]] && [ "$s" -gt "$c" ]; then pairs+=("$c+$s"); fi
        done
        if [ -z "${seen_group[$group]:-}" ]; then seen_group[$group]=1; keep+=("$c"); fi
    else
        keep+=("$c")
    fi
done
if [ "$smt_known" = 0 ]; then
    unreadable cores.smt "$CPU/cpu${SEL[0]}/topology/thread_siblings_list"
elif [ ${#pairs[@]} -gt 0 ]; then
    emit WARN cores.smt "SMT siblings both selected: ${pairs[*]} (each pair shares one physical core)" \
        "one thread per physical core" "--cores $(compress "${keep[@]}")"
else
    emit PASS cores.smt "no two selected cores are SMT siblings" "one thread per physical core" ""
fi

if rd cmdline /proc/cmdline; then
    iso= nohz=
    for w in $cmdline; do
        case "$w" in
            isolcpus=*) iso=${w#isolcpus=} ;;
            nohz_full=*) nohz=${w#nohz_full=} ;;
        esac
    done
    if [ -n "$iso$nohz" ]; then
        emit INFO cores.isolation "isolcpus=${iso:-none} nohz_full=${nohz:-none}" "--cores $CORES_C kept free of other work" ""
    else
        emit INFO cores.isolation "no isolcpus or nohz_full on the kernel command line: other tasks may run on --cores" \
            "--cores $CORES_C kept free of other work" \
            "add isolcpus=$CORES_C nohz_full=$CORES_C to the kernel command line and reboot (optional)"
    fi
else
    unreadable cores.isolation /proc/cmdline
fi

slow=()
govs=()
for c in "${SEL[@]}"; do
    if rd g "$CPU/cpu$c/cpufreq/scaling_governor"; then
        govs+=("cpu$c=$g")
        [ "$g" = performance ] || slow+=("$c")
    fi
done
if [ ${#govs[@]} -eq 0 ]; then
    emit INFO cores.governor "no cpufreq governor (frequency set by firmware or hypervisor)" "performance" ""
elif [ ${#slow[@]} -gt 0 ]; then
    emit WARN cores.governor "${govs[*]}" "performance on every generator core (ramping frequency adds latency)" \
        "for c in ${slow[*]}; do echo performance > $CPU/cpu\$c/cpufreq/scaling_governor; done"
else
    emit PASS cores.governor "${govs[*]}" "performance" ""
fi

# ---------------------------------------------------------------- clock

if [ -r "$ROOT/proc/cpuinfo" ]; then
    flags=$(awk -F: '/^flags/ { print $2; exit }' "$ROOT/proc/cpuinfo")
    if [ -z "$flags" ]; then
        emit INFO clock.tsc "no x86 flags line in /proc/cpuinfo (not x86): TSC checks do not apply" "" ""
    else
        lack=()
        for f in constant_tsc nonstop_tsc; do [[ " $flags " == *" $f "* ]] || lack+=("$f"); done
        if [ ${#lack[@]} -gt 0 ]; then
            emit WARN clock.tsc "CPU flags lack ${lack[*]}: the TSC rate may change with frequency or stop in idle" \
                "constant_tsc and nonstop_tsc (blaster times every request with the TSC)" \
                "run on hardware with an invariant TSC (or a hypervisor that exposes it, e.g. KVM -cpu host,+invtsc)"
        else
            emit PASS clock.tsc "constant_tsc nonstop_tsc" "constant_tsc and nonstop_tsc" ""
        fi
    fi
else
    unreadable clock.tsc /proc/cpuinfo
fi

CS=/sys/devices/system/clocksource/clocksource0
if rd cs "$CS/current_clocksource"; then
    rd avail_cs "$CS/available_clocksource" || avail_cs=
    case "$cs" in
        tsc) emit PASS clock.source "clocksource $cs" "tsc (or a paravirtual clock)" "" ;;
        kvm-clock|hyperv_clocksource_tsc_page|xen|arch_sys_counter)
            emit INFO clock.source "clocksource $cs (available: ${avail_cs:-unknown}); clock_gettime stays in the vDSO" "tsc (or a paravirtual clock)" "" ;;
        *)
            if [[ " $avail_cs " == *" tsc "* ]]; then fix="echo tsc > $CS/current_clocksource"
            else fix="none on this machine: the kernel rejected the TSC (see dmesg | grep -i tsc)"; fi
            emit WARN clock.source "clocksource $cs (available: ${avail_cs:-unknown}): every clock_gettime is a slow read" \
                "tsc (or a paravirtual clock)" "$fix" ;;
    esac
else
    unreadable clock.source "$CS/current_clocksource"
fi

# ---------------------------------------------------------------- NIC

irqbalance_pid=
for f in "$ROOT"/proc/[0-9]*/comm; do
    [ -r "$f" ] || continue
    # The process may exit between the listing and this read: then the
    # redirection fails, and under `set -e` that must not end the script.
    comm=
    { IFS= read -r comm < "$f"; } 2>/dev/null || true
    if [ "$comm" = irqbalance ]; then irqbalance_pid=${f%/comm}; irqbalance_pid=${irqbalance_pid##*/}; break; fi
done
nic_irqbalance() {
    if [ -n "$irqbalance_pid" ]; then
        emit WARN nic.irqbalance "irqbalance running (pid $irqbalance_pid): it rewrites every IRQ's smp_affinity" \
            "IRQ placement that stays put" \
            "systemctl stop irqbalance (or IRQBALANCE_BANNED_CPULIST=$CORES_C in /etc/default/irqbalance)"
    else
        emit PASS nic.irqbalance "irqbalance not running" "IRQ placement that stays put" ""
    fi
}

route_note=
if [ -z "$IFACE" ] && [ ${#HOSTS[@]} -gt 0 ]; then
    h=${HOSTS[0]}
    if [[ $h =~ ^127\. || $h == localhost || $h == ::1 ]]; then
        IFACE=lo; route_note="loopback target $h"
    else
        addr=$h
        if ! [[ $h =~ ^[0-9.]+$ || $h == *:* ]]; then
            addr=$(getent ahosts "$h" 2>/dev/null | awk '{ print $1; exit }') || addr=
        fi
        if [ -z "$addr" ]; then
            emit FAIL nic.iface "cannot resolve $h" "an address for the first target" "check the name, or pass --iface IF"
        elif ! command -v "$IP_CMD" > /dev/null; then
            emit FAIL nic.iface "cannot run '$IP_CMD' to find the route to $addr" "the interface toward the first target" \
                "apt-get install iproute2, or pass --iface IF"
        else
            route=$("$IP_CMD" route get "$addr" 2>/dev/null) || route=
            IFACE=$(awk '{ for (i = 1; i < NF; i++) if ($i == "dev") { print $(i + 1); exit } }' <<< "$route")
            if [ -z "$IFACE" ]; then
                emit FAIL nic.iface "no route to $addr ($IP_CMD route get $addr)" "a route to the first target" \
                    "ip route add $addr via GATEWAY (or pass --iface IF)"
            fi
            route_note="route to $addr"
        fi
    fi
elif [ -n "$IFACE" ]; then
    route_note="--iface"
elif [ "$BASELINE" = 1 ]; then
    IFACE=lo; route_note="the loopback baseline: generator and sink on this host"
fi

NET=/sys/class/net
if [ -z "$IFACE" ]; then
    nic_irqbalance
elif [ ! -e "$ROOT$NET/$IFACE" ]; then
    emit FAIL nic.iface "no interface $IFACE ($route_note)" "an existing interface" "ip link show (and pass --iface IF)"
    nic_irqbalance
else
    virtual=0
    [ -e "$ROOT$NET/$IFACE/device" ] || virtual=1
    kind=physical; [ "$virtual" = 1 ] && kind="virtual (no device)"
    [ "$IFACE" = lo ] && kind=loopback
    emit PASS nic.iface "$IFACE, $kind ($route_note)" "" ""

    # IRQs of the interface's queues.
    if [ "$virtual" = 1 ]; then
        emit INFO nic.irq_affinity "$IFACE is $kind: no IRQs" "" ""
    elif [ ! -r "$ROOT/proc/interrupts" ]; then
        unreadable nic.irq_affinity /proc/interrupts
    else
        devname=
        if [ -L "$ROOT$NET/$IFACE/device" ]; then devname=$(basename "$(readlink "$ROOT$NET/$IFACE/device")"); fi
        msi=" "
        if [ -d "$ROOT$NET/$IFACE/device/msi_irqs" ]; then
            for f in "$ROOT$NET/$IFACE/device/msi_irqs"/*; do [ -e "$f" ] && msi+="${f##*/} "; done
        fi
        irqs=()
        while read -r num name; do
            irqs+=("$num")
        done < <(awk -v ifc="$IFACE" -v dev="$devname" -v msi="$msi" '
            NR == 1 { next }
            { n = $1; sub(/:$/, "", n); if (n !~ /^[0-9]+$/) next
              name = $NF
              if (name ~ /config|async|ctrl|-mgmt/) next
              q = ifc; gsub(/\./, "\\.", q)
              if (name ~ ("(^|[-_])" q "([-_@.]|$)") || (dev != "" && index(name, dev "-") == 1) || index(msi, " " n " ") > 0)
                  print n, name }' "$ROOT/proc/interrupts")
        if [ ${#irqs[@]} -eq 0 ]; then
            emit INFO nic.irq_affinity "no IRQs of $IFACE found in /proc/interrupts" "" ""
        else
            inside=() outside=() straddle=() unknown=() shown=()
            for q in "${irqs[@]}"; do
                if rd aff "/proc/irq/$q/smp_affinity_list"; then
                    shown+=("$q:$aff")
                    nin=0 nout=0
                    for c in $(expand "$aff"); do
                        if [[ $SEL_SET == *" $c "* ]]; then nin=$((nin + 1)); else nout=$((nout + 1)); fi
                    done
                    if [ "$nin" -gt 0 ] && [ "$nout" -gt 0 ]; then straddle+=("$q")
                    elif [ "$nin" -gt 0 ]; then inside+=("$q")
                    else outside+=("$q"); fi
                else
                    unknown+=("$q")
                fi
            done
            saw="${#irqs[@]} IRQs of $IFACE (irq:cores) ${shown[*]}"
            [ ${#unknown[@]} -gt 0 ] && saw+="; unreadable affinity: ${unknown[*]}"
            need="each IRQ either on one generator core (queue i -> core i) or off --cores $CORES_C entirely"
            if [ ${#straddle[@]} -gt 0 ]; then
                fix=
                i=0
                for q in "${irqs[@]}"; do
                    fix+="echo ${SEL[$((i % NCORES))]} > /proc/irq/$q/smp_affinity_list; "
                    i=$((i + 1))
                done
                emit WARN nic.irq_affinity "$saw; IRQs ${straddle[*]} may fire on generator and other cores alike" "$need" \
                    "systemctl stop irqbalance; ${fix%; }"
            else
                emit PASS nic.irq_affinity "$saw (${#inside[@]} on --cores, ${#outside[@]} off them)" "$need" ""
            fi
        fi
    fi

    nic_irqbalance

    # RSS: receive queues that spread incoming packets over cores.
    if [ "$virtual" = 1 ]; then
        emit INFO nic.rss_queues "$IFACE is $kind: no hardware queues" "" ""
    else
        cur= max= src=
        if out=$("$ETHTOOL_CMD" -l "$IFACE" 2>/dev/null); then
            read -r cur max < <(awk -F: '
                /maximums/ { s = "max"; next } /Current/ { s = "cur"; next }
                $1 ~ /^(RX|Combined)$/ { v = $2; gsub(/[ \t]/, "", v); if (v ~ /^[0-9]+$/) n[s] += v }
                END { print n["cur"] + 0, n["max"] + 0 }' <<< "$out") || true
            src="ethtool -l $IFACE"
        fi
        if [ -z "$cur" ] || [ "$cur" = 0 ]; then
            cur=0
            for f in "$ROOT$NET/$IFACE/queues"/rx-*; do [ -e "$f" ] && cur=$((cur + 1)); done
            max= src="$NET/$IFACE/queues/rx-*"
        fi
        saw="$cur RX queues ($src)"; [ -n "$max" ] && [ "$max" != 0 ] && saw+=", hardware maximum $max"
        if [ "$cur" -lt "$NCORES" ]; then
            if [ -n "$max" ] && [ "$max" -ge "$NCORES" ]; then
                fix="ethtool -L $IFACE combined $NCORES"
            else
                fix="for q in $NET/$IFACE/queues/rx-*; do echo $(cpumask "${SEL[@]}") > \$q/rps_cpus; done (RPS: the NIC has too few queues)"
            fi
            emit WARN nic.rss_queues "$saw" ">= $NCORES (one per generator core, so replies are spread)" "$fix"
        else
            emit PASS nic.rss_queues "$saw" ">= $NCORES (one per generator core)" ""
        fi
    fi

    # NUMA: the NIC's node against the cores' nodes.
    if [ "$virtual" = 1 ]; then
        emit INFO nic.numa "$IFACE is $kind: no NUMA node" "" ""
    elif rdint nic_node "$NET/$IFACE/device/numa_node" && [ "$nic_node" -ge 0 ]; then
        far=()
        for c in "${SEL[@]}"; do
            node=
            for n in "$ROOT$CPU/cpu$c"/node[0-9]*; do [ -e "$n" ] && node=${n##*/node}; done
            [ -n "$node" ] && [ "$node" != "$nic_node" ] && far+=("$c")
        done
        if [ ${#far[@]} -gt 0 ]; then
            rd near "/sys/devices/system/node/node$nic_node/cpulist" || near="the cores of node $nic_node"
            emit WARN nic.numa "$IFACE on NUMA node $nic_node; cores $(compress "${far[@]}") on another node (every packet crosses the interconnect)" \
                "--cores on node $nic_node" "--cores from $near"
        else
            emit PASS nic.numa "$IFACE and cores $CORES_C on NUMA node $nic_node" "--cores on node $nic_node" ""
        fi
    else
        emit INFO nic.numa "$IFACE reports no NUMA node (single node, or not known)" "" ""
    fi

    # Link speed.
    rd oper "$NET/$IFACE/operstate" || oper=unknown
    if [ "$oper" = down ]; then
        emit FAIL nic.speed "$IFACE operstate down" "link up" "ip link set $IFACE up (and check the cable/peer)"
    elif rdint speed "$NET/$IFACE/speed" && [ "$speed" -gt 0 ]; then
        emit PASS nic.speed "$IFACE link $speed Mb/s, $oper" "" ""
    else
        emit INFO nic.speed "$IFACE: no link speed ($kind); blaster reports the byte rate only" "" ""
    fi
fi

# ---------------------------------------------------------------- backlogs and buffers

BACKLOG=$(min "$CONNECTIONS" 65535)
if rdint somax /proc/sys/net/core/somaxconn; then
    if [ "$somax" -lt "$BACKLOG" ]; then
        emit WARN net.somaxconn "net.core.somaxconn $somax (caps every listen backlog)" \
            ">= $BACKLOG if the sink or target runs here and $CONNECTIONS connections arrive at once" \
            "sysctl -w net.core.somaxconn=65535"
    else
        emit PASS net.somaxconn "net.core.somaxconn $somax" ">= $BACKLOG" ""
    fi
else
    unreadable net.somaxconn /proc/sys/net/core/somaxconn
fi
if rdint synb /proc/sys/net/ipv4/tcp_max_syn_backlog; then
    if [ "$synb" -lt "$BACKLOG" ]; then
        emit WARN net.syn_backlog "net.ipv4.tcp_max_syn_backlog $synb (half-open connections a listener keeps)" \
            ">= $BACKLOG if the sink or target runs here" "sysctl -w net.ipv4.tcp_max_syn_backlog=65535"
    else
        emit PASS net.syn_backlog "net.ipv4.tcp_max_syn_backlog $synb" ">= $BACKLOG" ""
    fi
else
    unreadable net.syn_backlog /proc/sys/net/ipv4/tcp_max_syn_backlog
fi
for dir in rmem wmem; do
    if rdint bmax "/proc/sys/net/core/${dir}_max"; then
        if [ -n "$SOCKBUF" ] && [ "$bmax" -lt "$SOCKBUF" ]; then
            opt=SO_RCVBUF; [ "$dir" = wmem ] && opt=SO_SNDBUF
            emit FAIL "net.${dir}_max" "net.core.${dir}_max $bmax ($opt is clamped to it)" \
                ">= $SOCKBUF (--sockbuf)" "sysctl -w net.core.${dir}_max=$SOCKBUF"
        elif [ -n "$SOCKBUF" ]; then
            emit PASS "net.${dir}_max" "net.core.${dir}_max $bmax" ">= $SOCKBUF (--sockbuf)" ""
        else
            emit PASS "net.${dir}_max" "net.core.${dir}_max $bmax (the ceiling for --sockbuf)" "" ""
        fi
    else
        unreadable "net.${dir}_max" "/proc/sys/net/core/${dir}_max"
    fi
done

if [ "$JSON" = 1 ]; then
    printf '['
    sep=
    for item in "${JSON_ITEMS[@]}"; do printf '%s\n%s' "$sep" "$item"; sep=,; done
    printf '\n]\n'
fi
exit "$FAILED"
