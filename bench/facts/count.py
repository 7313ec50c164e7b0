#!/usr/bin/env python3
"""How state crosses the role's task files: each fact (set_fact or register) set in one task
file and read in another, and the hops to find where a rollback happens, where the verdict is
made and where a pull report's signature is checked.

    python3 bench/facts/count.py [--label NAME]

Reads roles/vllm_dual_fast/tasks/*.yml as text and YAML; prints the count and the names, and
writes bench/results/facts-<label>.json. Nothing runs; the figures are the tree's as it is.
"""
import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
TASKS = ROOT / "roles/vllm_dual_fast/tasks"
NAME = re.compile(r"\b(_vllm_dual_fast_[a-z0-9_]+)\b")


def walk(tasks):
    """Every task in a task list, blocks opened."""
    for task in tasks or []:
        if not isinstance(task, dict):
            continue
        yield task
        for key in ("block", "rescue", "always"):
            yield from walk(task.get(key))


def set_here(tasks):
    """The facts a task file sets: set_fact keys and registered names."""
    names = set()
    for task in walk(tasks):
        names.update(k for k in (task.get("ansible.builtin.set_fact") or task.get("set_fact") or {})
                     if isinstance(k, str) and k != "cacheable")
        if task.get("register"):
            names.add(task["register"])
    return names


def crossing(files):
    """{fact: {"set_in": [...], "read_in": [...]}}: facts read in a file that does not set them."""
    setters, texts = {}, {}
    for path in files:
        texts[path.name] = path.read_text()
        for name in set_here(yaml.safe_load(texts[path.name])):
            setters.setdefault(name, set()).add(path.name)
    found = {}
    for name, where in sorted(setters.items()):
        readers = sorted(f for f, text in texts.items()
                         if f not in where and name in NAME.findall(text))
        if readers:
            found[name] = {"set_in": sorted(where), "read_in": readers}
    return found


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--label", default="now")
    args = parser.parse_args()
    found = crossing(sorted(TASKS.glob("*.yml")))
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    result = {"label": args.label, "commit": commit, "facts_crossing_files": len(found),
              "facts": found}
    for name, where in found.items():
        print(f"{name}: set in {', '.join(where['set_in'])}; read in {', '.join(where['read_in'])}")
    print(f"facts crossing task files: {len(found)}")
    out = ROOT / f"bench/results/facts-{args.label}.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
