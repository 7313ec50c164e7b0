"""The role's runtime outputs (meta/outputs.yml) are declared as its inputs are (argument_specs):
every public fact the tasks set is declared there, with the task files that set it, what reads it,
the function that builds it and its schema; every file it declares is written where it says."""

import re
from pathlib import Path

import yaml
from ansible_runner import ROLE

ROOT = ROLE.parents[1]
OUTPUTS = yaml.safe_load((ROLE / "meta/outputs.yml").read_text())
TASKS = {p.name: p for p in (ROLE / "tasks").glob("*.yml")}


def walk(tasks):
    for task in tasks or []:
        if isinstance(task, dict):
            yield task
            for key in ("block", "rescue", "always"):
                yield from walk(task.get(key))


def public_facts_set():
    """{fact: {task files}} for each vllm_dual_fast_* name a set_fact sets (no leading _)."""
    found = {}
    for name, path in TASKS.items():
        for task in walk(yaml.safe_load(path.read_text())):
            for key in task.get("ansible.builtin.set_fact") or {}:
                if key.startswith("vllm_dual_fast_"):
                    found.setdefault(key, set()).add(name)
    return found


def test_every_public_fact_is_declared_where_it_is_set():
    declared = {name: set(spec["set_in"]) for name, spec in OUTPUTS["facts"].items()}
    assert public_facts_set() == declared


def test_what_reads_a_fact_names_it():
    for name, spec in OUTPUTS["facts"].items():
        for reader in spec["read_by"]:
            path = ROOT / reader if "/" in reader else ROLE / "tasks" / reader
            assert re.search(rf"\b{name}\b", path.read_text()), (name, reader)


def test_each_builder_and_schema_is_there():
    for section in ("facts", "files"):
        for name, spec in OUTPUTS[section].items():
            if "built_by" in spec:
                module, *functions = spec["built_by"].replace(",", " ").split()
                source = (ROLE / module).read_text()
                for function in functions:
                    assert f"def {function}(" in source, (name, function)
            if "schema" in spec:
                assert (ROLE / spec["schema"]).is_file(), (name, spec["schema"])


def test_each_declared_file_is_written_where_it_says():
    for path, spec in OUTPUTS["files"].items():
        base = Path(path).name.replace("<rig>", "{{ inventory_hostname }}")
        for task_file in spec["written_in"]:
            dests = [str(task[module]["dest"]) for task in walk(yaml.safe_load(
                TASKS[task_file].read_text())) for module in ("ansible.builtin.copy",
                                                               "ansible.builtin.fetch")
                     if module in task and "dest" in task[module]]
            assert [d for d in dests if d.endswith(base) or (base == "speed-reference.json" and
                                                             "speed_reference_file" in d)], \
                (path, task_file, dests)
