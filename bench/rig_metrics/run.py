#!/usr/bin/env python3
"""What the rig metrics collector costs on the simulated rig (issue 27: under 1 % of one core).

On a rig the role provisioned (scripts/sim-rig.sh up, then `ansible-playbook site.yml -l sim`),
runs the collector RUNS times exactly as vllm-dual-fast-metrics.service does (the arguments of
/etc/vllm-dual-fast/rig-metrics.env), with the timer stopped meanwhile, and reads the CPU time
(user + system) of each run with its children from the kernel (getrusage); then the two
commands it runs (nvidia-smi, journalctl) alone, as many times. Prints the median CPU per run,
the interval, their ratio as a share of one core, and the same for the collector alone (the
whole run less those two: on this rig they are test doubles written in Python, which call the
real journalctl and Docker; a real rig's nvidia-smi and journalctl are C programs with costs of
their own). Writes
bench/results/rig-metrics-cost.json.

    .venv/bin/python bench/rig_metrics/run.py [--runs 20] [--rig vdf-sim-rig]

Run by hand on a quiet machine; no test runs it.
"""
import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# Runs on the rig: the collector as the unit runs it, each run's CPU with and without children.
ON_RIG = r"""
import json, resource, shlex, subprocess, sys, time
sys.path.insert(0, "/usr/local/lib/vllm-dual-fast")
import rig_metrics
env = open("/etc/vllm-dual-fast/rig-metrics.env").read()
args = shlex.split(env.split("RIG_METRICS_ARGS=", 1)[1].strip().strip('"'))
commands = {
    "collector": ["/usr/bin/python3", "/usr/local/lib/vllm-dual-fast/rig_metrics.py", *args],
    "nvidia-smi": ["nvidia-smi", "--query-gpu=" + rig_metrics.QUERY,
                   "--format=csv,noheader,nounits"],
    "journalctl": ["journalctl", "_TRANSPORT=kernel", "--boot=0", "--quiet", "--no-pager",
                   "--output=short-unix"],
}
runs = {name: [] for name in commands}
for _ in range(int(sys.argv[1])):
    for name, argv in commands.items():
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.monotonic()
        rc = subprocess.run(argv, stdout=subprocess.DEVNULL).returncode
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        runs[name].append({"wall_s": time.monotonic() - started, "rc": rc,
                           "cpu_s": (after.ru_utime - before.ru_utime)
                                    + (after.ru_stime - before.ru_stime)})
print(json.dumps(runs))
"""


def rig(name, *argv, **kw):
    return subprocess.run(["docker", "exec", name, *argv], capture_output=True, text=True,
                          check=True, **kw)


def median(values):
    values = sorted(values)
    return values[len(values) // 2]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--rig", default="vdf-sim-rig")
    args = parser.parse_args()
    env = rig(args.rig, "cat", "/etc/systemd/system/vllm-dual-fast-metrics.timer").stdout
    interval = float(env.split("OnUnitActiveSec=", 1)[1].split("s", 1)[0])
    rig(args.rig, "systemctl", "stop", "vllm-dual-fast-metrics.timer")
    try:
        runs = json.loads(rig(args.rig, "python3", "-c", ON_RIG, str(args.runs)).stdout)
    finally:
        rig(args.rig, "systemctl", "start", "vllm-dual-fast-metrics.timer")
    if any(run["rc"] for each in runs.values() for run in each):
        sys.exit(f"a run failed: {runs}")
    cpu = {name: median([r["cpu_s"] for r in each]) for name, each in runs.items()}
    total = cpu["collector"]
    alone = max(total - cpu["nvidia-smi"] - cpu["journalctl"], 0.0)
    result = {"runs": args.runs, "interval_s": interval,
              "median_cpu_s": {name: round(value, 4) for name, value in cpu.items()},
              "median_wall_s_per_run": round(median([r["wall_s"] for r in runs["collector"]]), 4),
              "share_of_one_core_pct": round(100 * total / interval, 3),
              "collector_alone_share_of_one_core_pct": round(100 * alone / interval, 3),
              "note": "nvidia-smi and journalctl are the simulated rig's doubles (Python); "
                      "collector_alone subtracts their medians from the whole run's"}
    out = ROOT / "bench/results/rig-metrics-cost.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"CPU per run {total:.3f} s every {interval:.0f} s: "
          f"{result['share_of_one_core_pct']} % of one core with the doubles it calls "
          f"(nvidia-smi {cpu['nvidia-smi']:.3f} s, journalctl {cpu['journalctl']:.3f} s); "
          f"the collector alone {alone:.3f} s, "
          f"{result['collector_alone_share_of_one_core_pct']} %; {out}")

if __name__ == "__main__":
    main()
