"""The plays gather only Ansible's `min` fact subset (about 3 s less per rig and run than every
subset): each fact the role and playbooks read must be one that `min` gathers, read from a real
`setup` run on this machine, not from a list written here."""
import json
import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
SOURCES = [ROOT / "site.yml", *(ROOT / "playbooks").rglob("*.yml"),
           *(ROOT / "roles").rglob("*.yml"), *(ROOT / "roles").rglob("*.j2"),
           *(ROOT / "inventory").rglob("*.yml")]
# ansible_facts['x'], ansible_facts["x"], ansible_facts.x, and the injected ansible_x
FACT_READ = re.compile(r"ansible_facts(?:\[['\"](\w+)['\"]\]|\.(\w+))|\bansible_(\w+)")
NOT_FROM_SETUP = {"packages"}    # package_facts' and the role's own dpkg read, not setup's


def gathered(subset: str) -> set:
    env = dict(os.environ, ANSIBLE_LOAD_CALLBACK_PLUGINS="1", ANSIBLE_STDOUT_CALLBACK="json",
               ANSIBLE_NOCOLOR="1")
    run = subprocess.run(["ansible", "localhost", "-c", "local", "-m", "ansible.builtin.setup",
                          "-a", f"gather_subset={subset}"],
                         capture_output=True, text=True, env=env, cwd=ROOT, timeout=120, check=True)
    facts = json.loads(run.stdout)["plays"][0]["tasks"][0]["hosts"]["localhost"]["ansible_facts"]
    return {name.removeprefix("ansible_") for name in facts}


@pytest.fixture(scope="module")
def subsets() -> dict:
    return {"min": gathered("min"), "all": gathered("all")}


def facts_read(all_facts: set) -> dict:
    """Fact name -> the files that read it: every ansible_facts[...] name, and the injected
    ansible_x where x is a fact `setup` returns (ansible_check_mode and such are not)."""
    found = {}
    for path in SOURCES:
        for keyed, dotted, injected in FACT_READ.findall(path.read_text(encoding="utf-8")):
            name = keyed or dotted or (injected if injected in all_facts else "")
            if name and name not in NOT_FROM_SETUP:
                found.setdefault(name, set()).add(str(path.relative_to(ROOT)))
    return found


def test_every_fact_the_role_reads_is_in_the_min_subset(subsets):
    read = facts_read(subsets["all"])
    assert {"distribution", "distribution_release", "kernel", "architecture"} <= set(read)
    missing = {name: sorted(files) for name, files in read.items() if name not in subsets["min"]}
    assert not missing, f"read but not gathered by gather_subset: [min]: {missing}"


def test_the_min_subset_is_smaller_than_all(subsets):
    # What the saving rests on: hardware facts (mounts, memory) are not gathered under `min`.
    assert "mounts" in subsets["all"] and "mounts" not in subsets["min"]
    assert subsets["min"] < subsets["all"]


def plays_that_gather():
    for path in [ROOT / "site.yml", *sorted((ROOT / "playbooks").glob("*.yml"))]:
        for play in yaml.safe_load(path.read_text(encoding="utf-8")) or []:
            imports = "import_playbook" in play or "ansible.builtin.import_playbook" in play
            if not imports and play.get("gather_facts", True):
                yield f"{path.name}: {play['name']}", play


def test_each_play_that_gathers_asks_for_min():
    plays = dict(plays_that_gather())
    assert len(plays) >= 5    # provision, deploy, verify, pull and the rollout's staging
    asked = {name: play.get("gather_subset") for name, play in plays.items()}
    assert asked == dict.fromkeys(plays, ["min"])


def test_the_rollout_switch_gathers_min():
    switch = ROOT / "playbooks/tasks/rollout_switch.yml"
    tasks = yaml.safe_load(switch.read_text(encoding="utf-8"))
    in_blocks = [task for block in tasks for task in block.get("block", [block])]
    setups = [task["ansible.builtin.setup"] for task in in_blocks
              if "ansible.builtin.setup" in task]
    assert setups and all(setup == {"gather_subset": ["min"]} for setup in setups)
