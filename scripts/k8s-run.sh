#!/usr/bin/env bash
# Runs blaster as N shards on Kubernetes (an Indexed Job) and merges their results.
#
# usage: scripts/k8s-run.sh --shards N --image IMAGE [options] -- BLASTER-RUN-ARGS...
#   --shards N        shards (pods, one per node), 1..10000
#   --image IMAGE     the image of deploy/k8s/Dockerfile
#   --cpus C          whole CPUs per pod: 1 control core + C-1 workers (default 5)
#   --memory M        memory per pod, e.g. 8Gi (default 4Gi)
#   --lead DURATION   how far ahead the common start lies, seconds, long enough for
#                     every pod to be scheduled and pass its init containers (default 120)
#   --namespace NS    (default: default)
#   --run-id ID       (default: k8s-<start in Unix ms>)
#   --out DIR         where shard-I.json and merged.json go (default: ./blaster-<run id>)
#   --render-only     print the rendered Job and exit: no cluster needed
#   BLASTER-RUN-ARGS  the arguments of `blaster run` for the whole run (totals: --rate,
#                     --connections, --connect-rate are split over the shards), e.g.
#                     --target 10.0.0.5:9000 --rate 400000 --connections 20000 --duration 60s
#
# Steps: render deploy/k8s/job.yaml with one --start-at for every pod, apply it, wait
# for the Job, collect each pod's JSON from its log, run `blaster merge` on them.
# Exit: 0 when the merge is complete and valid, the merge's code otherwise, 1 when the
# cluster steps fail, 2 on a bad argument.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
template="$here/../deploy/k8s/job.yaml"

bad() { echo "k8s-run.sh: $*" >&2; exit 2; }
usage() { sed -n '2,/^set -e/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }

shards="" image="" cpus=5 memory=4Gi lead=120 namespace=default run_id="" out=""
render_only=0
while [ $# -gt 0 ]; do
    case $1 in
        --shards) [ $# -ge 2 ] || bad "--shards: needs a number"; shards=$2; shift 2 ;;
        --image) [ $# -ge 2 ] || bad "--image: needs an image"; image=$2; shift 2 ;;
        --cpus) [ $# -ge 2 ] || bad "--cpus: needs a number"; cpus=$2; shift 2 ;;
        --memory) [ $# -ge 2 ] || bad "--memory: needs a size"; memory=$2; shift 2 ;;
        --lead) [ $# -ge 2 ] || bad "--lead: needs seconds"; lead=$2; shift 2 ;;
        --namespace) [ $# -ge 2 ] || bad "--namespace: needs a name"; namespace=$2; shift 2 ;;
        --run-id) [ $# -ge 2 ] || bad "--run-id: needs an id"; run_id=$2; shift 2 ;;
        --out) [ $# -ge 2 ] || bad "--out: needs a directory"; out=$2; shift 2 ;;
        --render-only) render_only=1; shift ;;
        -h|--help) usage; exit 0 ;;
        --) shift; break ;;
        *) bad "unknown option $1 (blaster's own arguments go after --)" ;;
    esac
done
[[ $shards =~ ^[0-9]+$ ]] && [ "$shards" -ge 1 ] && [ "$shards" -le 10000 ] ||
    bad "--shards: must be between 1 and 10000, got '${shards}'"
[ -n "$image" ] || bad "--image: required (see deploy/k8s/Dockerfile)"
[[ $cpus =~ ^[0-9]+$ ]] && [ "$cpus" -ge 2 ] ||
    bad "--cpus: a whole number of CPUs, at least 2 (control + one worker), got '$cpus'"
[[ $lead =~ ^[0-9]+$ ]] && [ "$lead" -ge 10 ] || bad "--lead: at least 10 seconds, got '$lead'"
[ $# -gt 0 ] || bad "needs the blaster run arguments after --"
for a in "$@"; do
    case $a in
        --shard|--shard=*|--start-at|--start-at=*|--run-id|--run-id=*|--cores|--cores=*|--json|--json=*)
            bad "$a is set per pod by this script; leave it out" ;;
    esac
done

start_ms=$(( $(date +%s) * 1000 + lead * 1000 ))
start_at=$(date -u -d "@$(( start_ms / 1000 ))" +%Y-%m-%dT%H:%M:%SZ)
run_id=${run_id:-k8s-$start_ms}
[[ $run_id =~ ^[A-Za-z0-9._-]{1,63}$ ]] || bad "--run-id: 1 to 63 letters, digits, . _ -"
job=$(echo "blaster-$run_id" | tr 'A-Z_.' 'a-z--' | cut -c1-63 | sed 's/-*$//')
out=${out:-./blaster-$run_id}

# The run's duration bounds the Job: lead + duration + drain + a margin. Forms other
# than Ns / Nm / Nh / Nms fall back to a day.
duration_s=10
for (( k = 1; k <= $#; k++ )); do
    a=${!k}
    case $a in
        --duration) n=$(( k + 1 )); d=${!n:-10s} ;;
        --duration=*) d=${a#--duration=} ;;
        *) continue ;;
    esac
    case $d in
        *ms) duration_s=1 ;;
        *s) duration_s=${d%s} ;;
        *m) duration_s=$(( ${d%m} * 60 )) ;;
        *h) duration_s=$(( ${d%h} * 3600 )) ;;
        *) duration_s=86400 ;;
    esac
done
[[ $duration_s =~ ^[0-9]+$ ]] || duration_s=86400
deadline=$(( lead + duration_s + 300 ))

# Arguments as a YAML flow list of double-quoted strings.
yaml_list() {
    local first=1 s
    for s in "$@"; do
        s=${s//\\/\\\\}; s=${s//\"/\\\"}
        [ $first = 1 ] || printf ', '
        printf '"%s"' "$s"
        first=0
    done
}
# The preflight gets the pod's share of the connections and the blaster targets.
connections=64 targets=""
prev=""
for a in "$@"; do
    case $prev in
        --connections) connections=$a ;;
        --target) targets="${targets:+$targets,}$a" ;;
    esac
    prev=$a
done
per_pod=$(( (connections + shards - 1) / shards ))
preflight=(--connections "$per_pod" --cores "0-$(( cpus - 2 ))")
[ -z "$targets" ] || preflight+=(--targets "$targets")

# Literal substitution (values through the environment, awk index/substr): no
# character of a value is special.
render() {
    R_JOB=$job R_NS=$namespace R_ID=$run_id R_N=$shards R_AT=$start_at R_IMG=$image \
    R_CPUS=$cpus R_MEM=$memory R_DL=$deadline R_PF=$(yaml_list "${preflight[@]}") \
    R_ARGS=$(yaml_list "$@") awk '
        function sub_all(line, key, val,    i, outs) {
            outs = ""
            while ((i = index(line, key)) > 0) {
                outs = outs substr(line, 1, i - 1) val
                line = substr(line, i + length(key))
            }
            return outs line
        }
        BEGIN {
            job = ENVIRON["R_JOB"]; ns = ENVIRON["R_NS"]; id = ENVIRON["R_ID"]
            n = ENVIRON["R_N"]; at = ENVIRON["R_AT"]; img = ENVIRON["R_IMG"]
            cpus = ENVIRON["R_CPUS"]; mem = ENVIRON["R_MEM"]; dl = ENVIRON["R_DL"]
            pf = ENVIRON["R_PF"]; args = ENVIRON["R_ARGS"]
        }
        {
            l = $0
            l = sub_all(l, "@@JOB@@", job); l = sub_all(l, "@@NAMESPACE@@", ns)
            l = sub_all(l, "@@RUN_ID@@", id); l = sub_all(l, "@@SHARDS@@", n)
            l = sub_all(l, "@@START_AT@@", at); l = sub_all(l, "@@IMAGE@@", img)
            l = sub_all(l, "@@CPUS@@", cpus); l = sub_all(l, "@@MEMORY@@", mem)
            l = sub_all(l, "@@DEADLINE_S@@", dl)
            l = sub_all(l, "@@PREFLIGHT_ARGS@@", pf); l = sub_all(l, "@@ARGS@@", args)
            print l
        }' "$template"
}

if [ $render_only = 1 ]; then
    render "$@"
    exit 0
fi

command -v kubectl >/dev/null || { echo "k8s-run.sh: kubectl not found" >&2; exit 1; }
command -v blaster >/dev/null || { echo "k8s-run.sh: blaster (for merge) not on PATH" >&2; exit 1; }
mkdir -p "$out"
render "$@" > "$out/job.yaml"
echo "run $run_id: $shards shards start at $start_at (in ${lead}s); Job $job" >&2
kubectl apply -f "$out/job.yaml"
# Complete or failed, whichever comes first; the merge then tells what is missing.
kubectl -n "$namespace" wait --for=condition=complete --timeout="${deadline}s" "job/$job" &
w1=$!
kubectl -n "$namespace" wait --for=condition=failed --timeout="${deadline}s" "job/$job" &
w2=$!
wait -n "$w1" "$w2" || true
kill "$w1" "$w2" 2>/dev/null || true

files=()
for (( i = 0; i < shards; i++ )); do
    pod=$(kubectl -n "$namespace" get pods \
        -l "job-name=$job,batch.kubernetes.io/job-completion-index=$i" \
        -o jsonpath='{.items[0].metadata.name}' 2>/dev/null || true)
    [ -n "$pod" ] || { echo "shard $i: no pod" >&2; continue; }
    kubectl -n "$namespace" logs "$pod" -c blaster |
        sed -n '/^----- blaster shard json begin -----$/,/^----- blaster shard json end -----$/p' |
        sed '1d;$d' > "$out/shard-$i.json" || true
    if [ -s "$out/shard-$i.json" ]; then
        files+=("$out/shard-$i.json")
    else
        rm -f "$out/shard-$i.json"
        echo "shard $i: pod $pod left no JSON (kubectl -n $namespace logs $pod --all-containers)" >&2
    fi
done
[ ${#files[@]} -gt 0 ] || { echo "k8s-run.sh: no shard left a JSON report" >&2; exit 1; }
# Every file names its shard i/N, so the merge names the shards that left nothing.
blaster merge "${files[@]}" --json "$out/merged.json"
