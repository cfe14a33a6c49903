#!/usr/bin/env bash
# No-regression check of two blaster builds, side by side in one run: bench/loopback.sh,
# bench/http.sh, bench/udp.sh and bench/frames.sh, each once per round with the OLD
# build then the NEW one (BLASTER=FILE, see lib.sh), ROUNDS rounds, so host noise hits
# both alike; prints the medians [min-max] of each script's headline figures and the
# ratio NEW/OLD. Run it alone, on a quiet machine (about 4 minutes per round).
#
# usage: [ROUNDS=3] [DUR=5] [FRAMES="1000 2000"] bench/regress.sh OLD_BINARY [NEW_BINARY]
#   NEW_BINARY defaults to this tree's release build. The raw outputs are kept in
#   $KEEP (default: a temporary directory, printed).
set -euo pipefail
cd "$(dirname "$0")/.."
OLD=${1:?usage: bench/regress.sh OLD_BINARY [NEW_BINARY]}
if [[ -n ${2:-} ]]; then NEW=$2; else cargo build --release -q; NEW=target/release/blaster; fi
for b in "$OLD" "$NEW"; do
    [[ -x $b ]] || { echo "bench: $b is not an executable" >&2; exit 1; }
done
OLD=$(realpath "$OLD"); NEW=$(realpath "$NEW")
ROUNDS=${ROUNDS:-3}
export DUR=${DUR:-5}
FRAMES=${FRAMES:-1000 2000}
KEEP=${KEEP:-$(mktemp -d)}
mkdir -p "$KEEP"
echo "# $(date -u '+%F %H:%M UTC') $(uname -r), $(nproc) cores; $ROUNDS rounds of old then new, ${DUR}s runs"
echo "# old: $OLD ($("$OLD" --version 2>/dev/null || echo '?'))"
echo "# new: $NEW ($("$NEW" --version 2>/dev/null || echo '?'))"
echo "# raw outputs: $KEEP"
for r in $(seq "$ROUNDS"); do
    for side in old new; do
        bin=$OLD; [[ $side == new ]] && bin=$NEW
        echo "bench: round $r, $side" >&2
        BLASTER=$bin bench/loopback.sh 1 > "$KEEP/loopback.$side.$r" 2>&1 || true
        BLASTER=$bin RUNS=1 bench/http.sh > "$KEEP/http.$side.$r" 2>&1 || true
        BLASTER=$bin RUNS=1 bench/udp.sh > "$KEEP/udp.$side.$r" 2>&1 || true
        # shellcheck disable=SC2086
        BLASTER=$bin bench/frames.sh $FRAMES > "$KEEP/frames.$side.$r" 2>&1 || true
    done
done
python3 - "$KEEP" "$ROUNDS" "$FRAMES" <<'PY'
import re, statistics, sys
keep, rounds, frames = sys.argv[1], int(sys.argv[2]), sys.argv[3].split()

def text(script, side, r):
    try:
        return open(f"{keep}/{script}.{side}.{r}").read()
    except OSError:
        return ""

def pick(script, side, r, key, col=0):
    """The col-th number after `key` on its line (a "median [min-max]" cell is three)."""
    for line in text(script, side, r).splitlines():
        if line.startswith(key):
            nums = re.findall(r"\d+(?:\.\d+)?", line[len(key):])
            return float(nums[col]) if len(nums) > col else None
    return None

def frames_row(side, r, conns, field):
    cols = None
    for line in text("frames", side, r).splitlines():
        parts = line.split()
        if parts and parts[0] == "conns":
            cols = parts
        elif cols and parts and parts[0] == conns and len(parts) >= len(cols) - 1:
            v = parts[cols.index(field)]
            return {"True": 1.0, "False": 0.0}.get(v, None) if field == "valid" else float(v)
    return None

figures = [
    ("loopback: ceiling requests/s per core", "up", lambda s, r: pick("loopback", s, r, "ceiling requests/s per client core (64B echo, 64 conns)")),
    ("loopback: busy CPU-s per 1M requests at ceiling", "down", lambda s, r: pick("loopback", s, r, "busy client CPU-s per million requests at ceiling")),
    ("loopback: lag p99 at 100k/s fixed (us)", "down", lambda s, r: pick("loopback", s, r, "dispatch lag p99 at 100k rps fixed (us)")),
    ("http: blaster CPU / wrk CPU per request", "down", lambda s, r: pick("http", s, r, "CPU per request, blaster / wrk:")),
    ("udp: blaster packets/s sent", "up", lambda s, r: pick("udp", s, r, "blaster --no-response --rate max")),
    ("udp: blaster packets/s received by the sink", "up", lambda s, r: pick("udp", s, r, "blaster --no-response --rate max", 3)),
]
for n in frames:
    figures.append((f"frames {n} conns: client ns per frame received", "down", lambda s, r, n=n: frames_row(s, r, n, "ns/frame_recv")))
    figures.append((f"frames {n} conns: lag p99 (ms)", "down", lambda s, r, n=n: frames_row(s, r, n, "lag_p99_ms")))
    figures.append((f"frames {n} conns: runs valid", "up", lambda s, r, n=n: frames_row(s, r, n, "valid")))

def summary(xs):
    xs = [x for x in xs if x is not None]
    if not xs:
        return None, "-"
    m = statistics.median(xs)
    f = lambda v: f"{v:.0f}" if abs(v) >= 100 else f"{v:.2f}"
    return m, f"{f(m)} [{f(min(xs))}-{f(max(xs))}]"

print(f"{'figure':<52} {'old':<26} {'new':<26} {'new/old':>8}")
for name, better, get in figures:
    mo, so = summary([get("old", r) for r in range(1, rounds + 1)])
    mn, sn = summary([get("new", r) for r in range(1, rounds + 1)])
    ratio = f"{mn / mo:.2f}" if mo and mn is not None else "-"
    print(f"{name:<52} {so:<26} {sn:<26} {ratio:>8}  ({better} is better)")
PY
