#!/usr/bin/env python3
"""What compiling the project's Ansible plugins once (`make bytecode`) saves the controller.

Ansible forks a worker for each task and loads the plugins a task's templates use inside it; the
role's filter plugins are not installed by pip, so where PYTHONDONTWRITEBYTECODE is set (as on the
machines make test runs on) Python compiles them from source in every such worker. This runs the
same unchanged `playbooks/deploy.yml -l sim` under Mitogen's strategy (as verify runs it), RUNS
times each way, alternating: with the plugin folders' __pycache__ removed, and after `python -m
compileall` on them; PYTHONDONTWRITEBYTECODE=1 in both. It prints the median controller CPU
(user + system seconds of ansible-playbook and its workers) and wall time of each, and their
ratios, checks every run reported changed=0, and writes bench/results/plugin-bytecode.json.
Leaves the plugins compiled.

    .venv/bin/python bench/bytecode/run.py [--runs 3]

Run by hand on a quiet machine with the simulated rig up and converged (`make demo`); no test
runs it."""
import argparse
import importlib.util
import json
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PLUGIN_DIRS = ["roles/vllm_dual_fast/filter_plugins", "plugins", "molecule/shared"]
# The no-change bench's environment and recap reader (bench/noop/run.py), not copies of them.
_spec = importlib.util.spec_from_file_location("noop_bench", ROOT / "bench/noop/run.py")
noop = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(noop)


def environment() -> dict:
    env = noop.environment()
    env.pop("ANSIBLE_CALLBACKS_ENABLED")    # no task profiler: its own work would be counted
    env["ANSIBLE_STRATEGY"] = "mitogen_linear"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def set_compiled(compiled: bool) -> None:
    for folder in PLUGIN_DIRS:
        for cache in (ROOT / folder).rglob("__pycache__"):
            shutil.rmtree(cache)
    if compiled:
        subprocess.run([sys.executable, "-m", "compileall", "-q", *PLUGIN_DIRS], cwd=ROOT,
                       check=True, stdout=subprocess.DEVNULL)


def one_run(env: dict) -> dict:
    """Wall and controller CPU seconds of one unchanged deploy.yml, and its recap."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    run = subprocess.run([str(ROOT / ".venv/bin/ansible-playbook"), "playbooks/deploy.yml",
                          "-l", "sim"], cwd=ROOT, env=env, capture_output=True, text=True,
                         check=False)
    wall = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    counts = noop.recap(run.stdout)
    if run.returncode or counts.get("changed", 1) or counts.get("unreachable", 1) \
            or counts.get("failed", 1):
        sys.exit(f"bench: deploy.yml rc {run.returncode}, recap {counts}:\n"
                 f"{run.stdout[-2000:]}{run.stderr[-1000:]}")
    return {"wall_s": round(wall, 2), "cpu_s": round(cpu, 2), "tasks_ok": counts["ok"]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    env = environment()
    runs = {"source": [], "compiled": []}
    for _ in range(args.runs):
        for arm in runs:
            set_compiled(arm == "compiled")
            runs[arm].append(one_run(env))
            print(f"bench: {arm:8s} {runs[arm][-1]}", flush=True)
    median = {arm: {key: round(statistics.median(r[key] for r in done), 2)
                    for key in ("wall_s", "cpu_s")} for arm, done in runs.items()}
    ratio = {key: round(median["compiled"][key] / median["source"][key], 2)
             for key in ("wall_s", "cpu_s")}
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                            capture_output=True, text=True, check=False).stdout.strip()
    result = {"commit": commit, "playbook": "playbooks/deploy.yml (unchanged)",
              "strategy": "mitogen_linear", "runs": runs, "median": median,
              "compiled_over_source": ratio}
    out = ROOT / "bench/results/plugin-bytecode.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"bench: median controller CPU {median['source']['cpu_s']} s from source, "
          f"{median['compiled']['cpu_s']} s compiled (ratio {ratio['cpu_s']}); wall "
          f"{median['source']['wall_s']} s -> {median['compiled']['wall_s']} s "
          f"(ratio {ratio['wall_s']}); {out.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
