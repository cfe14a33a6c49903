#!/usr/bin/env bash
# The loopback baseline's spread (issue 33, benchmark 2): RUNS (default 5) runs of plain
# `blaster` (the defaults: --repeats 3, the host-noise probe first) on an idle host.
# Each run prints its ceiling as the median of the ceiling step's repeats with their
# range; this script checks what a user relies on when comparing two baselines:
#   - every two runs' ranges overlap,
#   - each run's range contains the other runs' medians,
#   - the host-noise probe costs under 1.5 s.
# Prints one line per run and a verdict per check; exits 1 when a check fails.
source "$(dirname "$0")/lib.sh"
RUNS=${RUNS:-5}
echo "# $(date -u +%F) $(uname -r), $(nproc) cores; $RUNS runs of: blaster --json FILE"
for i in $(seq "$RUNS"); do
    "$B" --json "$OUT/base$i.json" >"$OUT/base$i.out" 2>&1 || true
done
python3 - "$OUT" "$RUNS" <<'PY'
import json, sys
out, runs = sys.argv[1], int(sys.argv[2])
rows = []
for i in range(1, runs + 1):
    try:
        r = json.load(open(f"{out}/base{i}.json"))
    except (OSError, ValueError) as e:
        print(f"run {i}: no report ({e}); see {out}/base{i}.out")
        continue
    rep = r.get("repeats") or {}
    a = rep.get("achieved_rps")
    noise = r.get("host_noise") or {}
    probe_s = noise.get("probe_ns", 0) / 1e9
    if not a:
        print(f"run {i}: no ceiling ({r.get('verdict')}); probe {probe_s:.2f} s")
        continue
    c = rep.get("cpu_ns") or {}
    lo, hi = rep.get("ceiling_step_rps", 0), rep.get("above_step_rps") or float("inf")
    rows.append((i, a["median"], a["min"], a["max"], probe_s, rep.get("stable"), lo, hi,
                 c.get("median", 0), c.get("min", 0), c.get("max", 0)))
    print(f"run {i}: ceiling {a['median']:,.0f}/s [{a['min']:,.0f}-{a['max']:,.0f}] "
          f"between steps {lo:,.0f} and {hi:,.0f}/s, {'stable' if rep.get('stable') else 'UNSTABLE'}; "
          f"CPU/request {c.get('median', 0) / 1e3:.2f} us [{c.get('min', 0) / 1e3:.2f}-{c.get('max', 0) / 1e3:.2f}]; "
          f"probe {probe_s:.2f} s, timer late p99 {noise.get('timer_late_p99_ns', 0) / 1e3:.0f} us")
ok = len(rows) == runs
overlap = all(max(x[2], y[2]) <= min(x[3], y[3]) for x in rows for y in rows)
contains = all(x[2] <= y[1] <= x[3] for x in rows for y in rows)
# The search's own resolution: the ceiling lies between the step held and the step above.
bracket = all(max(x[6], y[6]) <= min(x[7], y[7]) for x in rows for y in rows)
cpus = [x[8] for x in rows]
cpu_spread = (max(cpus) / min(cpus) - 1) * 100 if cpus else 0
probe = all(x[4] < 1.5 for x in rows)
print(f"every run has a ceiling: {'yes' if ok else 'NO'}")
print(f"ranges overlap pairwise: {'yes' if overlap else 'NO'}")
print(f"each range contains the others' medians: {'yes' if contains else 'NO'}")
print(f"step brackets (held, above) overlap pairwise: {'yes' if bracket else 'NO'}")
print(f"CPU/request medians spread: {cpu_spread:.1f}% (max/min - 1)")
print(f"probe under 1.5 s: {'yes' if probe else 'NO'} (max {max((x[4] for x in rows), default=0):.2f} s)")
sys.exit(0 if ok and overlap and contains and probe else 1)
PY
