#!/usr/bin/env bash
# Checks the walls a run hits first, before it wastes an hour.
# usage: scripts/preflight.sh [--connections N] [--cores LIST]
# One line per check: PASS / WARN / FAIL, what it saw, what the plan needs, the fix.
# Exit 0 when nothing FAILs, 1 otherwise. Reads /proc and /sys under PREFLIGHT_ROOT
# (default /), so tests can point it at fixture files.
set -euo pipefail
ROOT=${PREFLIGHT_ROOT:-}
CONNECTIONS=64
CORES=0
while [ $# -gt 0 ]; do
    case "$1" in
        --connections) CONNECTIONS=$2; shift 2 ;;
        --cores) CORES=$2; shift 2 ;;
        -h|--help) sed -n '2,6p' "$0"; exit 0 ;;
        *) echo "preflight: unknown argument $1" >&2; exit 2 ;;
    esac
done
FAILED=0
say() { printf '%-5s %-22s %s\n' "$1" "$2" "$3"; [ "$1" = FAIL ] && FAILED=1 || true; }

# File descriptors: connections + 64 for the process.
need=$((CONNECTIONS + 64))
soft=$(ulimit -Sn); hard=$(ulimit -Hn)
nr_open=$(cat "$ROOT/proc/sys/fs/nr_open" 2>/dev/null || echo unknown)
if [ "$hard" != unlimited ] && [ "$hard" -lt "$need" ]; then
    say FAIL fd.limit "hard RLIMIT_NOFILE $hard < $need needed; fix: ulimit -Hn $need (as root; fs.nr_open=$nr_open is the ceiling)"
elif [ "$soft" != unlimited ] && [ "$soft" -lt "$need" ]; then
    say PASS fd.limit "soft $soft < $need but hard $hard allows it; blaster raises the soft limit itself"
else
    say PASS fd.limit "soft $soft, hard $hard >= $need needed"
fi

# Ephemeral ports per (source IP, destination) pair.
read -r lo hi < "$ROOT/proc/sys/net/ipv4/ip_local_port_range"
ports=$((hi - lo + 1))
if [ "$ports" -lt "$CONNECTIONS" ]; then
    say FAIL ports "ip_local_port_range $lo-$hi gives $ports ports < $CONNECTIONS connections to one destination; fix: sysctl -w net.ipv4.ip_local_port_range='1024 65535', or more source IPs / destinations"
else
    say PASS ports "ip_local_port_range $lo-$hi gives $ports ports >= $CONNECTIONS"
fi

# Cores: every listed core online.
online=$(cat "$ROOT/sys/devices/system/cpu/online" 2>/dev/null || echo 0)
expand() { local out=() p a b; IFS=, read -ra parts <<< "$1"; for p in "${parts[@]}"; do
    if [[ $p == *-* ]]; then a=${p%-*}; b=${p#*-}; for ((i=a;i<=b;i++)); do out+=("$i"); done
    else out+=("$p"); fi; done; echo "${out[@]}"; }
on=" $(expand "$online") "
missing=()
for c in $(expand "$CORES"); do [[ $on == *" $c "* ]] || missing+=("$c"); done
if [ ${#missing[@]} -gt 0 ]; then
    say FAIL cores.online "cores ${missing[*]} are not online (online: $online)"
else
    say PASS cores.online "cores $CORES online (online: $online)"
fi
exit $FAILED
