"""Pull mode updating itself: the role's own task that writes the pull script
(roles/vllm_dual_fast/tasks/pull_mode.yml, "Write the pull script"), run by the real template
module with its own validate, writing into a temporary folder. A pulled commit whose script the
shell cannot parse must leave the working one in place (the fleet scenario covers the rest:
signers rotated from the fleet repository, the rig's own files kept)."""

import copy

import yaml
from ansible_runner import ROLE, run_playbook

TEMPLATE = ROLE / "templates/usr/local/sbin/vllm-dual-fast-pull.j2"
WORKING = "#!/bin/sh\necho the script that pulls today\n"


def script_task(src, dest):
    tasks = yaml.safe_load((ROLE / "tasks/pull_mode.yml").read_text())
    task = copy.deepcopy(next(t for t in tasks if t["name"] == "Write the pull script"))
    task["ansible.builtin.template"].update(src=str(src), dest=str(dest))
    task["ansible.builtin.template"].pop("owner")
    task["ansible.builtin.template"].pop("group")
    return task


def write_script(tmp_path, src):
    dest = tmp_path / "vllm-dual-fast-pull"
    dest.write_text(WORKING)
    result, out = run_playbook(tmp_path, [{
        "name": "Write the pull script as a pulled run would",
        "hosts": "localhost",
        "gather_facts": False,
        "tasks": [script_task(src, dest)],
    }])
    return result.returncode, out, dest.read_text()


def test_a_script_the_shell_cannot_parse_leaves_the_working_one(tmp_path):
    broken = tmp_path / "broken.j2"
    broken.write_text(TEMPLATE.read_text().replace("\nfi\n", "\n", 1))   # an `if` never closed
    rc, out, script = write_script(tmp_path, broken)
    assert rc != 0 and "failed to validate" in out
    assert script == WORKING


def test_the_role_s_script_passes_its_own_check_and_replaces_the_old_one(tmp_path):
    rc, out, script = write_script(tmp_path, TEMPLATE)
    assert rc == 0, out
    assert script != WORKING and "ansible-pull" in script
