"""molecule/shared/progress: a playbook run inside another one (what the scenarios' verify does)
prints a line per task on the outer run's output as it goes; the outer run prints nothing more."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[2]
PLUGINS = ROOT / "molecule/shared/progress"


def test_a_nested_playbook_prints_its_tasks_on_the_outer_output(tmp_path):
    inner = tmp_path / "inner.yml"
    inner.write_text("- hosts: localhost\n  gather_facts: false\n  tasks:\n"
                     "    - name: Inner task one\n      ansible.builtin.debug: {msg: hi}\n"
                     "    - name: Inner task that fails\n      ansible.builtin.fail: {msg: boom}\n")
    playbook = Path(sys.executable).with_name("ansible-playbook")
    outer = tmp_path / "outer.yml"
    outer.write_text(
        "- hosts: localhost\n  gather_facts: false\n  tasks:\n"
        "    - name: Outer task runs the inner playbook\n"
        f"      ansible.builtin.command: {playbook} -i localhost, -c local {inner}\n"
        "      register: inner\n      failed_when: false\n      changed_when: false\n")
    env = dict(os.environ, ANSIBLE_CALLBACK_PLUGINS=str(PLUGINS),
               ANSIBLE_CALLBACKS_ENABLED="vdf_nested_progress", ANSIBLE_NOCOLOR="1",
               ANSIBLE_PYTHON_INTERPRETER=sys.executable)
    env.pop("VDF_PROGRESS_OUT", None)
    run = subprocess.run([str(playbook), "-i", "localhost,", "-c", "local", str(outer)],
                         capture_output=True, text=True, env=env, timeout=120, check=False)
    assert run.returncode == 0 and "ok=1" in run.stdout, run.stdout + run.stderr
    nested = [line for line in run.stdout.splitlines() if "nested|" in line]
    assert any("inner.yml" in line and "TASK Inner task one" in line for line in nested), nested
    assert any("failed on localhost: boom" in line for line in nested), nested
    assert any("localhost: ok=1 changed=0 failed=1" in line for line in nested), nested
    # The nested lines come before the outer task's end (as it runs), never for outer tasks.
    assert not any("Outer task" in line for line in nested)
    assert run.stdout.index("nested|") < run.stdout.index("PLAY RECAP")
