#!/usr/bin/env python3
"""How many facts cross the role's task files (issue 44: "state crosses task files through 30
facts set in one file and read in another"): each name a task file sets (set_fact) or registers,
read by another task file, template or handler of the role. Prints the count and the names, for
the role at ROOT (default: this checkout; pass a worktree of an older commit to compare).

    python3 bench/design/facts_crossing.py [ROOT] [--json]
"""
import json
import re
import sys
from pathlib import Path

import yaml


def tasks_of(node):
    """Every task dict in a task file, blocks and rescue/always included."""
    if isinstance(node, list):
        for item in node:
            yield from tasks_of(item)
    elif isinstance(node, dict):
        yield node
        for key in ("block", "rescue", "always"):
            if key in node:
                yield from tasks_of(node[key])


def names_set(task):
    names = set()
    if isinstance(task.get("register"), str):
        names.add(task["register"])
    for key in ("ansible.builtin.set_fact", "set_fact"):
        if isinstance(task.get(key), dict):
            names |= {name for name in task[key] if name != "cacheable"}
    return names


def crossing(role):
    task_files = sorted((role / "tasks").glob("*.yml"))
    defined = {}
    for path in task_files:
        for task in tasks_of(yaml.safe_load(path.read_text()) or []):
            for name in names_set(task):
                defined.setdefault(name, set()).add(path.name)
    readers = [*task_files, *(role / "templates").rglob("*.j2"), *(role / "handlers").glob("*.yml")]
    texts = {path: path.read_text() for path in readers}
    found = {}
    for name, where in sorted(defined.items()):
        word = re.compile(r"(?<![\w.])" + re.escape(name) + r"\b")
        read_in = sorted(str(path.relative_to(role)) for path, text in texts.items()
                         if path.name not in where and word.search(text))
        if read_in:
            found[name] = {"set_in": sorted(where), "read_in": read_in}
    return found


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    root = Path(args[0]) if args else Path(__file__).resolve().parents[2]
    found = crossing(root / "roles/vllm_dual_fast")
    if "--json" in sys.argv:
        print(json.dumps(found, indent=2))
        return
    for name, info in found.items():
        print(f"{name}: set in {', '.join(info['set_in'])}; read in {', '.join(info['read_in'])}")
    print(f"facts crossing task files: {len(found)}")


if __name__ == "__main__":
    main()
