"""The kill points the scenarios name (molecule/shared/fault_injection fires when a task of that
name starts) are tasks the role and playbooks have: a renamed or gathered task would otherwise
leave a kill matrix cycle whose run is never killed, found only 20 minutes into `deploy`."""

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).parents[2]
NAME = re.compile(r"^\s*- name: (.+?)\s*$", re.M)
TEMPLATE = re.compile(r"^\{\{\s*(\w+)\s*\}\}$")


def task_names():
    """Every task name of the role and the playbooks, as the fault injector sees it."""
    names = set()
    for path in [*ROOT.glob("roles/*/tasks/*.yml"), *ROOT.glob("playbooks/**/*.yml")]:
        names.update(n.strip("'\"") for n in NAME.findall(path.read_text()))
    return names


def kill_points(node, variables):
    """The kill_at and VDF_FAULT_AT values a file names, a {{ var }} resolved from its play's
    vars (one passed on from an including file, such as run_killed_at.yml's, is that file's)."""
    if isinstance(node, dict):
        variables = {**variables, **(node.get("vars") or {})} if "hosts" in node else variables
        for key, value in node.items():
            if key in ("kill_at", "VDF_FAULT_AT") and isinstance(value, str):
                match = TEMPLATE.match(value.strip())
                if not match:
                    yield value
                elif match.group(1) in variables:
                    yield variables[match.group(1)]
            else:
                yield from kill_points(value, variables)
    elif isinstance(node, list):
        for item in node:
            yield from kill_points(item, variables)


def test_every_kill_point_names_a_task_that_exists():
    names = task_names()
    found = {}
    for path in ROOT.glob("molecule/**/*.yml"):
        for point in kill_points(yaml.safe_load(path.read_text()), {}):
            found.setdefault(point, []).append(path.relative_to(ROOT).as_posix())
    assert len(found) >= 6, found    # the kill matrix's points, the blip, the rollback
    missing = {point: files for point, files in found.items() if point not in names}
    assert not missing, missing
