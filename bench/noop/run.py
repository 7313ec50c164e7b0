#!/usr/bin/env python3
"""What an unchanged `site.yml` costs on the simulated rig (issue: a run that changes nothing).

A fresh simulated rig (scripts/sim-rig.sh down, up), the first converge, then RUNS unchanged runs
of `ansible-playbook site.yml -l sim`, each with Ansible's task profiler. Prints the first
converge, the median unchanged run, their ratio, the number of tasks an unchanged run runs and
the median time a task takes, and checks each unchanged run reported changed=0 with the same
engine container (same id, same start). Writes bench/results/noop-<label>.json.

    .venv/bin/python bench/noop/run.py [--label NAME] [--runs 3] [--keep] [--mitogen] [--reuse]

Run by hand on a quiet machine (needs `make setup`; about 6 minutes); no test runs it. --mitogen
runs every playbook under Mitogen's strategy (ANSIBLE_STRATEGY=mitogen_linear; the sim rig's
inventory then connects with mitogen_docker). --reuse skips the fresh rig and its first converge:
the unchanged runs go to the rig a --keep run left (the second strategy's figures, 5 minutes
sooner). Any environment you set reaches ansible-playbook. Each result names its date and machine.
"""
import argparse
import datetime
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RIG = "vdf-sim-rig"
TASK_LINE = re.compile(r"^(?P<name>.+?) -+ (?P<seconds>[0-9.]+)s$")
RECAP = re.compile(r"^" + re.escape(RIG) + r"\s+: ok=(\d+)\s+changed=(\d+)\s+"
                   r"unreachable=(\d+)\s+failed=(\d+)\s+skipped=(\d+)")


def environment() -> dict:
    env = dict(os.environ)
    env["PATH"] = f"{ROOT / '.venv' / 'bin'}:{env['PATH']}"
    env.setdefault("ANSIBLE_ROLES_PATH", str(ROOT / "roles"))
    env.setdefault("ANSIBLE_CONFIG", str(ROOT / "ansible.cfg"))
    env["ANSIBLE_CALLBACKS_ENABLED"] = "ansible.posix.profile_tasks"
    env["PROFILE_TASKS_TASK_OUTPUT_LIMIT"] = "all"
    env["PROFILE_TASKS_SORT_ORDER"] = "none"
    env["ANSIBLE_NOCOLOR"] = "1"
    return env


def task_times(output: str) -> list:
    """The profiler's summary: one (task, seconds) per task that ran, in run order."""
    summary = output.rsplit("=" * 20, 1)[-1]
    matches = map(TASK_LINE.match, summary.splitlines())
    return [(m["name"], float(m["seconds"])) for m in matches if m]


def recap(output: str) -> dict:
    found = [m for m in map(RECAP.match, output.splitlines()) if m]
    if not found:
        return {}
    ok, changed, unreachable, failed, skipped = map(int, found[-1].groups())
    return {"ok": ok, "changed": changed, "unreachable": unreachable, "failed": failed,
            "skipped": skipped}


def engine_identity() -> str:
    return subprocess.run(
        ["docker", "exec", RIG, "docker", "inspect", "--format", "{{.Id}} {{.State.StartedAt}}",
         "vllm-dual-fast"], capture_output=True, text=True, check=False).stdout.strip()


def timed_site(env: dict, log: Path) -> dict:
    start = time.monotonic()
    result = subprocess.run(["ansible-playbook", "site.yml", "-l", "sim"], cwd=ROOT, env=env,
                            capture_output=True, text=True, check=False)
    wall = time.monotonic() - start
    log.write_text(result.stdout + result.stderr)
    tasks = task_times(result.stdout)
    return {"wall_s": round(wall, 1), "rc": result.returncode, "recap": recap(result.stdout),
            "tasks": len(tasks), "task_median_s": round(statistics.median(t for _, t in tasks), 3)
            if tasks else None, "slowest": sorted(tasks, key=lambda t: -t[1])[:8]}


def machine() -> str:
    """This machine in a few words: its CPU model and count, and the host's name."""
    model = next((line.split(":", 1)[1].strip() for line in
                  Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), platform.machine())
    return f"{os.cpu_count()} x {model} ({platform.node()})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--label", default="now")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--keep", action="store_true", help="leave the simulated rig running")
    parser.add_argument("--mitogen", action="store_true", help="run under Mitogen's strategy")
    parser.add_argument("--reuse", action="store_true",
                        help="no fresh rig: the unchanged runs on the rig a --keep run left")
    args = parser.parse_args()
    env = environment()
    rig_env = dict(env)    # the rig is set up on stock Ansible either way (scripts/sim-rig.sh)
    if args.mitogen:
        env["ANSIBLE_STRATEGY"] = "mitogen_linear"
    logs = Path(tempfile.mkdtemp(prefix=f"vdf-bench-noop-{args.label}-"))
    first = None
    if not args.reuse:
        print("bench/noop: a fresh simulated rig", flush=True)
        subprocess.run([str(ROOT / "scripts/sim-rig.sh"), "down"], env=rig_env, check=True,
                       stdout=subprocess.DEVNULL)
        subprocess.run([str(ROOT / "scripts/sim-rig.sh"), "up"], env=rig_env, check=True,
                       stdout=subprocess.DEVNULL)
    try:
        if not args.reuse:
            first = timed_site(env, logs / "first.log")
            print(f"bench/noop: first converge {first['wall_s']} s, rc {first['rc']}", flush=True)
            if first["rc"] != 0:
                print(f"bench/noop: the first converge failed: {logs / 'first.log'}",
                      file=sys.stderr)
                return 1
        engine = engine_identity()
        unchanged = []
        for n in range(args.runs):
            run = timed_site(env, logs / f"unchanged-{n + 1}.log")
            run["same_engine"] = bool(engine) and engine_identity() == engine
            unchanged.append(run)
            print(f"bench/noop: unchanged run {n + 1}: {run['wall_s']} s, {run['tasks']} tasks, "
                  f"changed={run['recap'].get('changed')}, same engine {run['same_engine']}",
                  flush=True)
    finally:
        if not args.keep:
            subprocess.run([str(ROOT / "scripts/sim-rig.sh"), "down"], env=env, check=False,
                           stdout=subprocess.DEVNULL)
    median = statistics.median(r["wall_s"] for r in unchanged)
    clean = all(r["rc"] == 0 and r["recap"].get("changed") == 0 and r["same_engine"]
                for r in unchanged)
    result = {
        "label": args.label, "commit": subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
            check=False).stdout.strip(),
        "measured_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": machine(),
        "strategy": env.get("ANSIBLE_STRATEGY", "linear"), "first": first,
        "unchanged": unchanged, "unchanged_median_s": median,
        "ratio_unchanged_to_first": round(median / first["wall_s"], 3) if first else None,
        "unchanged_clean": clean,
    }
    out = ROOT / "bench" / "results" / f"noop-{args.label}.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"first converge {first['wall_s'] if first else '-'} s; unchanged median {median} s; "
          "ratio "
          f"{result['ratio_unchanged_to_first']}; tasks {unchanged[0]['tasks']}; median task "
          f"{statistics.median(r['task_median_s'] for r in unchanged)} s; changed=0 with the same "
          f"engine: {clean}")
    print(f"written: {out.relative_to(ROOT)}")
    return 0 if clean else 1


if __name__ == "__main__":
    sys.exit(main())
