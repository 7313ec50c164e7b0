"""After a reboot the role reads the GPUs, the kernel and Docker at once. ansible.builtin.reboot
returns once the boot_id changed and `whoami` answers, which over a fast transport (and on the
simulated rigs over `docker exec`, from the container's first second) can be before the boot has
loaded the module, run the power-limit unit or started the persistence daemon. Every reboot of
the role therefore waits, as its test command, until systemd says the start-up is over."""

import subprocess
from pathlib import Path

import pytest
import yaml

ROLE = Path(__file__).resolve().parents[2] / "roles/vllm_dual_fast"


def reboot_test_command():
    role_vars = yaml.safe_load((ROLE / "vars/main.yml").read_text())
    return role_vars.get("_vllm_dual_fast_reboot_test_command")


def _reboots(tasks):
    for task in tasks or []:
        if "ansible.builtin.reboot" in task:
            yield task
        for key in ("block", "rescue", "always"):
            yield from _reboots(task.get(key))


def test_every_reboot_of_the_role_waits_for_the_start_up():
    reboots = [(path.name, task) for path in sorted((ROLE / "tasks").glob("*.yml"))
               for task in _reboots(yaml.safe_load(path.read_text()))]
    assert len(reboots) >= 3
    for name, task in reboots:
        assert task["ansible.builtin.reboot"].get("test_command") == (
            "{{ _vllm_dual_fast_reboot_test_command }}"), (name, task["name"])


@pytest.mark.parametrize(("said", "rc", "up"), [
    ("running", 0, True),
    ("degraded", 1, True),      # a unit failed (on the simulated rigs: persistenced without GPUs)
    ("starting", 1, False),     # --wait returned early: not over yet
    ("maintenance", 1, False),  # the emergency shell: not booted as it should
    ("", 1, False),             # systemd not answering yet (no bus)
])
def test_the_test_command_passes_only_once_the_start_up_is_over(tmp_path, said, rc, up):
    fake = tmp_path / "systemctl"
    fake.write_text(f"#!/bin/sh\n[ \"$*\" = 'is-system-running --wait' ] || exit 9\n"
                    f"[ -z '{said}' ] || echo {said}\nexit {rc}\n")
    fake.chmod(0o755)
    command = reboot_test_command()
    assert command, "vars/main.yml names no _vllm_dual_fast_reboot_test_command"
    proc = subprocess.run(["/bin/sh", "-c", command], env={"PATH": f"{tmp_path}:/usr/bin:/bin"},
                          capture_output=True, text=True, timeout=10)
    assert (proc.returncode == 0) is up, (proc.stdout, proc.stderr)
