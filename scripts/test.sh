#!/usr/bin/env bash
# The project's one test command (the README's, and exactly what .ci/run calls). On a
# fresh Debian or Ubuntu machine with a Rust toolchain it:
#   1. installs the Debian packages the tests start or call, when they are missing;
#   2. runs the whole suite under the `assert` profile (release code generation with
#      debug assertions and overflow checks on), two test threads, and keeps going
#      after a failing test binary so every binary reports;
#   3. prints how many tests were skipped and why (a test that cannot run here, e.g.
#      without permission for network namespaces, prints a `SKIP name: reason` line),
#      and fails when more than 3 were, naming them;
#   4. checks formatting and clippy -D warnings;
#   5. runs the unit tests of the kernel-shared buffer type (src/engine/iobuf.rs) and
#      of its piecemeal lenders (engine/buf_ring.rs, sink/send_queue.rs) under Miri,
#      adding the nightly miri component when it is missing;
#   6. runs the fuzz smoke when bench/fuzz.sh exists.
# Every step runs even when an earlier one failed; the summary names the failed steps
# and the exit status is 0 only when all passed.
#
# Environment:
#   BLASTER_TEST_LOCK=FILE   run the test step under `flock FILE` (a shared machine's
#                            benchmark lock), and each fuzz target of the smoke; the
#                            builds before them run unlocked.
#   BLASTER_TEST_ARGS="..."  extra arguments for the test binaries (e.g. a name filter).
#   BLASTER_NO_INSTALL=1     never call apt-get; report what is missing instead.
set -uo pipefail
cd "$(dirname "$0")/.."
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"

failed=()
step() {
    local name=$1
    shift
    echo "== $name: $*"
    if ! "$@"; then
        failed+=("$name")
        echo "== $name: FAILED"
    fi
}

if ! command -v cargo >/dev/null; then
    echo "cargo is required (install a Rust toolchain with rustup)" >&2
    exit 1
fi
if command -v rustup >/dev/null; then
    rustup component add rustfmt clippy >/dev/null 2>&1 || true
fi

# --- 1. Debian packages -------------------------------------------------------------
# command:package. Real servers the end-to-end tests start on loopback ports
# (tests/real_servers.rs: nginx, redis-server, memcached, socat); ss to count sockets
# by state and source address, ip and tc for the namespace tests (iproute2); taskset
# for the core hog and unshare for the throwaway namespace (util-linux); sysctl for
# scripts/tune.sh and kill for the signal tests (procps); chromium (headless) for the
# HTML report tests; ansible, sshd and ssh-keygen for the Ansible playbook test
# (tests/deploy_ansible.rs: namespace hosts running Debian's sshd); prometheus scraping
# --metrics-listen (tests/prometheus.rs); tmux, the pseudo-terminal the progress bar is
# read from (tests/progress.rs); nats-server, mosquitto and Python's websockets module
# (Debian's python3-websockets, for /usr/bin/python3), the real servers the frame
# adapters are checked against (tests/frame_protos.rs); stunnel4 (TLS in front of
# redis-server) and openssl (the certificates the tests make) for tests/tls.rs; nft,
# the rule that makes a namespace's traffic tracked by conntrack
# (tests/kernel_counters.rs); h2load and nghttp (nghttp2-client), the HTTP/2 peers
# of `blaster sink --http2` (tests/sink_http2.rs); nghttpd (nghttp2-server), an
# HTTP/2 server for `--http2` (tests/http2.rs); tshark, the wire capture a replay is
# checked against and the capture it replays (tests/replay.rs).
need=()
for pair in nginx:nginx-light redis-server:redis-server memcached:memcached socat:socat \
    ss:iproute2 ip:iproute2 tc:iproute2 taskset:util-linux unshare:util-linux prlimit:util-linux \
    sysctl:procps kill:procps chromium:chromium ansible-playbook:ansible \
    sshd:openssh-server ssh-keygen:openssh-client prometheus:prometheus tmux:tmux \
    nats-server:nats-server mosquitto:mosquitto stunnel4:stunnel4 openssl:openssl nft:nftables \
    h2load:nghttp2-client nghttp:nghttp2-client nghttpd:nghttp2-server tshark:tshark; do
    cmd=${pair%%:*}
    command -v "$cmd" >/dev/null 2>&1 || [ -x "/usr/sbin/$cmd" ] || [ -x "/sbin/$cmd" ] ||
        need+=("${pair#*:}")
done
# A Python module, not a command: checked by importing it.
/usr/bin/python3 -c 'import websockets' >/dev/null 2>&1 || need+=(python3-websockets)
if [ ${#need[@]} -gt 0 ]; then
    mapfile -t need < <(printf '%s\n' "${need[@]}" | sort -u)
    echo "== packages: installing ${need[*]}"
    sudo=()
    [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null && sudo=(sudo)
    if [ "${BLASTER_NO_INSTALL:-0}" = 1 ] || ! command -v apt-get >/dev/null; then
        echo "== packages: missing ${need[*]}; the tests that need them will fail" >&2
        failed+=("packages")
    elif ! { DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get update -qq &&
        DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq \
            --no-install-recommends "${need[@]}" >/dev/null; }; then
        echo "== packages: apt-get failed; the tests that need ${need[*]} will fail" >&2
        failed+=("packages")
    fi
fi

# kubernetes-validate (PyPI) for tests/deploy_k8s.rs: the Indexed Job checked against
# the Kubernetes schemas offline (it brings PyYAML, which the test's checker reads).
if ! command -v kubernetes-validate >/dev/null 2>&1 && [ "${BLASTER_NO_INSTALL:-0}" != 1 ]; then
    echo "== packages: pip install kubernetes-validate"
    python3 -m pip install -q kubernetes-validate >/dev/null 2>&1 ||
        { echo "== packages: pip failed; deploy_k8s will fail under CI" >&2; failed+=("packages"); }
fi

# grpcio (PyPI) for tests/sink_http2.rs and tests/http2.rs: a gRPC unary client and
# server in another implementation than blaster (calling `blaster sink --http2`, and
# called by `blaster run --grpc`).
if ! python3 -c 'import grpc' >/dev/null 2>&1 && [ "${BLASTER_NO_INSTALL:-0}" != 1 ]; then
    echo "== packages: pip install grpcio"
    python3 -m pip install -q grpcio >/dev/null 2>&1 ||
        { echo "== packages: pip failed; sink_http2 and http2 will fail" >&2; failed+=("packages"); }
fi

# --- 2. the suite under the assertion profile ---------------------------------------
skips=$(mktemp)
trap 'rm -f "$skips"' EXIT
export BLASTER_SKIP_LOG="$skips"
lock=()
[ -n "${BLASTER_TEST_LOCK:-}" ] && lock=(flock "$BLASTER_TEST_LOCK")
# shellcheck disable=SC2086 # BLASTER_TEST_ARGS is a list of words on purpose
if step build cargo test --profile assert --no-run; then
    step tests "${lock[@]}" cargo test --profile assert --no-fail-fast -- --test-threads 2 \
        ${BLASTER_TEST_ARGS:-}
fi

# --- 3. skips -----------------------------------------------------------------------
# A skip is a test that did not test anything: a few are the machine's (no network
# namespaces, a host too busy for a timing check), more than SKIPS_MAX is a suite that
# no longer tests what it claims, and fails this step with their names. Every skip
# counts, a timing check's too: it skips only when what was measured during each of
# its attempts (hypervisor steal, another process's load) could explain that attempt's
# miss (tests/common/mod.rs `excuse`, docs/testing.md), and even then tested nothing.
SKIPS_MAX=3
nskip=$(grep -c '^SKIP' "$skips" || true)
echo "== skipped: $nskip test(s)"
sed 's/^/   /' "$skips"
if [ "$nskip" -gt "$SKIPS_MAX" ]; then
    echo "== skips: $nskip tests skipped, more than $SKIPS_MAX:" \
        "$(sed -n 's/^SKIP \([^:]*\):.*/\1/p' "$skips" | paste -sd, - | sed 's/,/, /g')"
    failed+=("skips")
fi

# --- 4. format and lints ------------------------------------------------------------
step fmt cargo fmt --check
step clippy cargo clippy --release --all-targets -- -D warnings

# --- 5. Miri: the aliasing rules of kernel-shared memory ----------------------------
# The tests of IoBuf and of the two users that lend it out piecemeal (the provided-
# buffer ring, the sink's send queues) make no syscall (no io_uring), so Miri can run
# them: a pointer lent to the "kernel" must survive the worker's use of other regions.
# About a minute the first time (Miri builds the dependencies), seconds after; bounded
# at 20 minutes.
miri_ready() {
    cargo +nightly miri --version >/dev/null 2>&1 && return 0
    command -v rustup >/dev/null || return 1
    if ! cargo +nightly --version >/dev/null 2>&1; then
        rustup toolchain install nightly --profile minimal -c miri -c rust-src || return 1
    fi
    rustup component add --toolchain nightly miri rust-src || return 1
}
if miri_ready; then
    step miri timeout 1200 cargo +nightly miri test --lib -- engine::iobuf:: engine::buf_ring:: sink::send_queue::
else
    failed+=(miri)
    echo "== miri: FAILED (no nightly toolchain with the miri component, and rustup could not add it)"
fi

# --- 6. fuzz smoke (HOOK: the fuzz helper owns bench/fuzz.sh and its smoke mode) -----
# CPU for about two and a half minutes: under BLASTER_TEST_LOCK too, one target per hold.
if [ -x bench/fuzz.sh ]; then
    step fuzz-smoke env FUZZ_LOCK="${BLASTER_TEST_LOCK:-}" bench/fuzz.sh smoke
else
    echo "== fuzz-smoke: bench/fuzz.sh not present, not run"
fi

# Again at the end, with the lines: a CI log cut to its tail still says which.
echo "== skipped: $nskip test(s)"
sed 's/^/   /' "$skips"
if [ ${#failed[@]} -gt 0 ]; then
    echo "== FAILED: ${failed[*]}"
    exit 1
fi
echo "== all steps passed"
