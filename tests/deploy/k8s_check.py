"""Checks a rendered deploy/k8s/job.yaml offline (no cluster): the shape the docs
promise, and the pod's wrapper script run with a stand-in `blaster`.

usage: python3 k8s_check.py JOB.yaml SHARDS FAKE_BIN_DIR
Prints one line per failed check and exits 1, or prints OK.
"""
import os
import subprocess
import sys

import yaml

path, shards, fake_dir = sys.argv[1], int(sys.argv[2]), sys.argv[3]
job = yaml.safe_load(open(path))
fails = []


def check(cond, what):
    if not cond:
        fails.append(what)


spec = job["spec"]
pod = spec["template"]["spec"]
check(job["kind"] == "Job" and job["apiVersion"] == "batch/v1", "a batch/v1 Job")
check(spec["completionMode"] == "Indexed", "completionMode Indexed")
check(spec["completions"] == shards == spec["parallelism"], "completions = parallelism = N")
check(pod["hostNetwork"] is True, "host networking")
check(pod["restartPolicy"] == "Never", "no restarts")
anti = pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
check(anti["topologyKey"] == "kubernetes.io/hostname", "one shard per node")
check(
    anti["labelSelector"]["matchLabels"] == {"blaster.dev/run-id": job["metadata"]["labels"]["blaster.dev/run-id"]},
    "anti-affinity selects this run's pods",
)
inits = [c["name"] for c in pod["initContainers"]]
check(inits == ["tune", "preflight"], "tune then preflight as init containers")
for c in pod["initContainers"] + pod["containers"]:
    r = c["resources"]
    check(r["requests"] == r["limits"], f"{c['name']}: requests = limits (Guaranteed QoS)")
    cpu = str(r["requests"]["cpu"])
    check(cpu.isdigit(), f"{c['name']}: integer CPU request, got {cpu}")
main = pod["containers"][0]
script = main["command"]
check(script[:2] == ["/bin/sh", "-c"], "a shell wrapper")

# Run the wrapper as the kubelet would (command + args, the index in the env), with a
# stand-in blaster that records its arguments as the JSON and exits 3 (invalid run).
env = dict(os.environ, JOB_COMPLETION_INDEX="1", PATH=fake_dir + ":" + os.environ["PATH"])
run = subprocess.run(script + main["args"], env=env, capture_output=True, text=True)
check(run.returncode == 0, f"an invalid run (exit 3) still leaves the pod succeeded: {run.returncode} {run.stderr}")
out = run.stdout
begin, end = "----- blaster shard json begin -----", "----- blaster shard json end -----"
check(begin in out and end in out, f"JSON between markers: {out!r}")
body = out.split(begin + "\n", 1)[-1].split("\n" + end, 1)[0].strip()
argv = body.split("\n")
at = next((argv[i + 1] for i, a in enumerate(argv) if a == "--start-at"), None)
check(argv[:3] == ["run", "--shard", f"1/{shards}"], f"--shard from the index: {argv}")
check(at is not None and at.endswith("Z"), f"one RFC 3339 start: {argv}")
check("--cores" in argv and "--control-core" in argv, f"cores from the CPU set: {argv}")
check(argv[-len(main["args"]):] == main["args"], f"the run's arguments passed on: {argv}")

if fails:
    for f in fails:
        print("FAIL", f)
    sys.exit(1)
print("OK")
