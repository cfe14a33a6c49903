#!/usr/bin/env bash
# Applies the blaster tuning profile (sysctl/blaster.conf) and takes it back.
#
# usage: scripts/tune.sh apply|revert [--state FILE] [--profile FILE]
#   apply    saves the current value of every key it is about to change to the state
#            file, then writes the profile's values with `sysctl -w`
#   revert   writes the saved values back and removes the state file
#   --state FILE    where the previous values go (default /var/tmp/blaster-sysctl.state)
#   --profile FILE  the profile to apply (default: sysctl/blaster.conf next to this script)
#
# Keys this kernel lacks (nf_conntrack not loaded, say) and keys that are read-only here
# (global keys inside a network namespace) are skipped with a note. A ceiling that is
# already higher than the profile's (fs.file-max, somaxconn, ...) is kept, not lowered,
# and so is a larger maximum in tcp_rmem/tcp_wmem.
# apply refuses to run twice: the state file would otherwise end up holding the tuned
# values instead of the originals. Exit 0 on success, 1 on an error, 2 on bad arguments.
set -euo pipefail
export LC_ALL=C

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
STATE=/var/tmp/blaster-sysctl.state
PROFILE=$HERE/../sysctl/blaster.conf
# Keys where a larger value is only more headroom: never lowered.
CEILINGS=" fs.nr_open fs.file-max net.netfilter.nf_conntrack_max net.core.rmem_max
  net.core.wmem_max net.core.somaxconn net.ipv4.tcp_max_syn_backlog net.core.netdev_max_backlog "

usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; }
bad() { echo "tune: $*" >&2; exit 2; }
die() { echo "tune: $*" >&2; exit 1; }

[ $# -ge 1 ] || bad "needs apply or revert (see --help)"
case "$1" in
    apply|revert) MODE=$1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) bad "unknown mode '$1': use apply or revert" ;;
esac
while [ $# -gt 0 ]; do
    case "$1" in
        --state) [ $# -ge 2 ] || bad "--state: needs a file"; STATE=$2; shift 2 ;;
        --profile) [ $# -ge 2 ] || bad "--profile: needs a file"; PROFILE=$2; shift 2 ;;
        -h|--help) usage; exit 0 ;;
        *) bad "unknown argument '$1' (see --help)" ;;
    esac
done
command -v sysctl > /dev/null || die "sysctl not found (procps); cannot write kernel settings"
[ "$(id -u)" = 0 ] || die "$MODE needs root to write sysctls; run it with sudo"

KEYS=()
VALUES=()
# load FILE: its `key = value` lines into KEYS/VALUES (whitespace in values normalized).
load() {
    local file=$1 n=0 line key val parts
    KEYS=(); VALUES=()
    while IFS= read -r line || [ -n "$line" ]; do
        n=$((n + 1))
        line=${line%%#*}
        [[ $line =~ ^[[:space:]]*$ ]] && continue
        [[ $line =~ ^[[:space:]]*([A-Za-z0-9_.-]+)[[:space:]]*=[[:space:]]*(.*[^[:space:]])[[:space:]]*$ ]] \
            || die "$file:$n: not a 'key = value' line: $line"
        key=${BASH_REMATCH[1]}
        read -ra parts <<< "${BASH_REMATCH[2]}"
        val="${parts[*]}"
        KEYS+=("$key"); VALUES+=("$val")
    done < "$file"
}
path_of() { echo "/proc/sys/${1//.//}"; }
current() { local parts; read -ra parts < "$(path_of "$1")"; echo "${parts[*]}"; }
# set_key KEY VALUE: sysctl -w, with its error message on failure.
set_key() {
    local err
    if ! err=$(sysctl -q -w "$1=$2" 2>&1 > /dev/null); then
        echo "tune: cannot set $1 = $2: ${err:-sysctl failed}" >&2
        return 1
    fi
}

if [ "$MODE" = apply ]; then
    [ -r "$PROFILE" ] || die "cannot read the profile $PROFILE"
    [ ! -e "$STATE" ] || die "$STATE exists: the profile is already applied (run 'tune.sh revert' first, or remove the file if it is stale)"
    load "$PROFILE"
    change_k=(); change_v=(); saved=()
    for i in "${!KEYS[@]}"; do
        k=${KEYS[i]} v=${VALUES[i]} p=$(path_of "${KEYS[i]}")
        if [ ! -e "$p" ]; then
            echo "skip  $k: not on this machine (module not loaded, older kernel, or not per-namespace)"
            continue
        fi
        if [ ! -w "$p" ]; then
            echo "skip  $k: read-only here (a global key seen from a network namespace?)"
            continue
        fi
        cur=$(current "$k")
        if [ "$cur" = "$v" ]; then
            echo "keep  $k = $cur (already the profile's value)"
            continue
        fi
        if [[ $CEILINGS == *" $k "* && $cur =~ ^[0-9]+$ && $v =~ ^[0-9]+$ ]] && [ "$cur" -ge "$v" ]; then
            echo "keep  $k = $cur (already >= $v)"
            continue
        fi
        # tcp_rmem/tcp_wmem: take the profile's min and default, keep a larger max.
        if [[ $k == net.ipv4.tcp_[rw]mem ]]; then
            read -r _ _ cmax <<< "$cur"
            read -r pmin pdef pmax <<< "$v"
            if [[ $cmax =~ ^[0-9]+$ && $pmax =~ ^[0-9]+$ ]] && [ "$cmax" -gt "$pmax" ]; then
                v="$pmin $pdef $cmax"
                [ "$cur" != "$v" ] || { echo "keep  $k = $cur (already the profile's value)"; continue; }
            fi
        fi
        change_k+=("$k"); change_v+=("$v"); saved+=("$k = $cur")
    done
    if [ ${#change_k[@]} -eq 0 ]; then
        echo "nothing to change; no state written"
        exit 0
    fi
    mkdir -p "$(dirname "$STATE")"
    tmp=$(mktemp "$STATE.XXXXXX")
    { echo "# values before 'tune.sh apply' on $(date -u +%Y-%m-%dT%H:%M:%SZ); 'tune.sh revert' restores them"
      printf '%s\n' "${saved[@]}"; } > "$tmp" || { rm -f "$tmp"; die "cannot write $STATE"; }
    mv "$tmp" "$STATE"
    failed=0
    for i in "${!change_k[@]}"; do
        if set_key "${change_k[i]}" "${change_v[i]}"; then
            echo "set   ${change_k[i]} = ${change_v[i]} (was ${saved[i]#* = })"
        else
            failed=1
        fi
    done
    echo "previous values saved in $STATE"
    [ "$failed" = 0 ] || die "some keys were not set (see above); 'tune.sh revert' restores the rest"
else
    [ -e "$STATE" ] || die "no saved state in $STATE: nothing to revert ('tune.sh apply' writes it)"
    load "$STATE"
    failed=0
    for i in "${!KEYS[@]}"; do
        k=${KEYS[i]} v=${VALUES[i]}
        if [ ! -e "$(path_of "$k")" ]; then
            echo "skip  $k: no longer on this machine"
            continue
        fi
        if set_key "$k" "$v"; then echo "set   $k = $v"; else failed=1; fi
    done
    [ "$failed" = 0 ] || die "some keys were not restored (see above); $STATE is kept"
    rm -f "$STATE"
    echo "restored ${#KEYS[@]} values from $STATE"
fi
