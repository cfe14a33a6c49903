#!/usr/bin/env bash
# The Ansible playbook run for real, on hosts made of network namespaces.
#
# usage: tests/deploy/ansible_netns.sh WORKDIR BLASTER_BIN [bad-preflight]
#
# Builds, inside namespaces this script creates and deletes:
#   a switch namespace with a bridge; a control namespace (where ansible-playbook
#   runs); three generator "hosts", each running Debian's sshd with a host key and an
#   authorized key generated here; a sink namespace running `blaster sink`.
# Addresses come from 10.253.X.0/24 (X from this process id), used only on the veths
# inside these namespaces; nothing is routed out of them and the root namespace gets
# no address. Then it writes an inventory and runs deploy/ansible/blaster.yml for 3
# shards against the sink. With `bad-preflight`, host h2 asks for a core that does
# not exist, so its preflight fails and the play must stop before any shard runs. With
# `frames`, the shards are one frames run of 6 rooms against a broadcast sink.
#
# Exit 0 when the playbook succeeded (or, with bad-preflight, failed as it should),
# 77 with a `SKIP reason` line when this machine cannot make namespaces or lacks a
# tool, 1 otherwise. The playbook's output is in WORKDIR/ansible.log.
set -euo pipefail

work=$1 bin=$2 mode=${3:-good}
root=$(cd "$(dirname "$0")/../.." && pwd)
skip() { echo "SKIP $*"; exit 77; }

[ "$(id -u)" = 0 ] || skip "needs root for ip netns"
for t in ip ansible-playbook ssh-keygen /usr/sbin/sshd /usr/bin/python3; do
    command -v "$t" >/dev/null || skip "$t not installed (apt-get install iproute2 ansible openssh-server)"
done

id=$$
net=10.253.$(( id % 250 + 1 ))
p=bf$id                     # namespace and interface prefix, unique per run
hosts=(h0 h1 h2)
all=(ctl sink "${hosts[@]}")

cleanup() {
    set +e
    for f in "$work"/*.pid; do [ -s "$f" ] && kill "$(cat "$f")" 2>/dev/null; done
    for n in sw "${all[@]}"; do ip netns del "$p-$n" 2>/dev/null; done
}
trap cleanup EXIT

ip netns add "$p-sw" 2>/dev/null || skip "cannot create network namespaces here"
ip -n "$p-sw" link add br0 type bridge
ip -n "$p-sw" link set br0 up
ip -n "$p-sw" link set lo up
addr_of() {
    case $1 in ctl) echo "$net.2" ;; sink) echo "$net.100" ;; h*) echo "$net.$(( 10 + ${1#h} ))" ;; esac
}
for n in "${all[@]}"; do
    ip netns add "$p-$n"
    # Created directly inside the namespaces: the root namespace never holds them.
    ip -n "$p-sw" link add "p-$n" type veth peer name eth0 netns "$p-$n"
    ip -n "$p-sw" link set "p-$n" master br0 up
    ip -n "$p-$n" link set lo up
    ip -n "$p-$n" addr add "$(addr_of "$n")/24" dev eth0
    ip -n "$p-$n" link set eth0 up
done

# Keys: one host key for every sshd, one client key for ansible.
ssh-keygen -q -t ed25519 -N '' -f "$work/host_key"
ssh-keygen -q -t ed25519 -N '' -f "$work/id"
cp "$work/id.pub" "$work/authorized_keys"
chmod 600 "$work/host_key" "$work/id"
mkdir -p /run/sshd
for h in "${hosts[@]}"; do
    cat > "$work/sshd-$h.conf" <<EOF
ListenAddress $(addr_of "$h")
Port 22
HostKey $work/host_key
AuthorizedKeysFile $work/authorized_keys
PidFile $work/sshd-$h.pid
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
Subsystem sftp /usr/lib/openssh/sftp-server
EOF
    ip netns exec "$p-$h" /usr/sbin/sshd -f "$work/sshd-$h.conf" -E "$work/sshd-$h.log"
done

# The sink the shards load, in its own namespace (`frames`: a broadcast sink).
sink_args=()
[ "$mode" = frames ] && sink_args=(--mode broadcast --room-size 10)
ip netns exec "$p-sink" "$bin" sink --listen "$(addr_of sink):9000" --cores 1 "${sink_args[@]}" \
    > "$work/sink.log" 2>&1 &
echo $! > "$work/sink.pid"

# Wait until every sshd answers and the sink listens (from the control namespace).
ready=0
for _ in $(seq 100); do
    ok=1
    for h in "${hosts[@]}"; do
        ip netns exec "$p-ctl" bash -c "exec 3<>/dev/tcp/$(addr_of "$h")/22" 2>/dev/null || ok=0
    done
    ip netns exec "$p-ctl" bash -c "exec 3<>/dev/tcp/$(addr_of sink)/9000" 2>/dev/null || ok=0
    [ $ok = 1 ] && { ready=1; break; }
    sleep 0.1
done
[ $ready = 1 ] || { echo "sshd or sink did not come up"; cat "$work"/sshd-*.log "$work/sink.log"; exit 1; }

{
    echo "[generators]"
    for h in "${hosts[@]}"; do
        extra=""
        [ "$mode" = bad-preflight ] && [ "$h" = h2 ] && extra=" blaster_cores=4095"
        echo "$h ansible_host=$(addr_of "$h") blaster_dir=$work/$h$extra"
    done
    echo "[generators:vars]"
    echo "ansible_user=root"
    echo "ansible_ssh_private_key_file=$work/id"
    echo "ansible_ssh_common_args='-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR'"
    echo "ansible_python_interpreter=/usr/bin/python3"
} > "$work/inventory.ini"

# 3 shards x 1,000 requests/s for 3 s, 2 connections each; the shards share core 0
# with each other, so they sleep to each send (--spin 0) instead of spinning.
# `frames`: one frames run of 60 connections in rooms of 10 (6 rooms, 2 per shard).
args='"--rate", "3000", "--connections", "6", "--duration", "3s", "--spin", "0"'
[ "$mode" = frames ] && args='"--workload", "frames", "--connections", "60", "--room-size", "10",
               "--tick", "20ms", "--duration", "2s"'
cat > "$work/vars.yml" <<EOF
blaster_args: ["--target", "$(addr_of sink):9000", $args]
blaster_bin: $bin
blaster_merge_bin: $bin
blaster_results: $work/results
blaster_lead_s: 20
blaster_run_timeout: 60
EOF

set +e
ip netns exec "$p-ctl" env ANSIBLE_HOST_KEY_CHECKING=False ANSIBLE_NOCOLOR=1 \
    ANSIBLE_LOCAL_TEMP="$work/ansible-local" ANSIBLE_REMOTE_TEMP="$work/ansible-remote" \
    ansible-playbook -i "$work/inventory.ini" -e "@$work/vars.yml" \
    ${BLASTER_ANSIBLE_EXTRA:-} "$root/deploy/ansible/blaster.yml" > "$work/ansible.log" 2>&1
rc=$?
set -e
echo "ansible-playbook exit $rc"
if [ "$mode" = bad-preflight ]; then
    [ $rc != 0 ] || { echo "the play went on past a failed preflight"; exit 1; }
    exit 0
fi
exit $rc
