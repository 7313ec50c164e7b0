"""The thin filter files find the domain library (the role's module_utils) from their own place,
as Ansible loads them: under its plugin loader's name, with the role reached through a roles
path in another folder, by a link or as a copy, and with nothing else naming the role's
module_utils (no ANSIBLE_FILTER_PLUGINS, no ANSIBLE_MODULE_UTILS)."""

import shutil

import pytest
from ansible_runner import ROLE, run_playbook

# One filter of each thin file, on inputs whose answer is known.
PROBES = {
    "release": ("{{ ({'release': '/r/a', 'current': {}, 'last_good': {}} "
                "| vllm_dual_fast_release_switch).fallback }}", "msg: stop"),
    "verdict": ("{{ ('updated' | vllm_dual_fast_outcome(release='/r/a')).release }}", "msg: a"),
    "maintenance": ("{{ ['/boot/vmlinuz-6.8.0-9-generic', '/boot/vmlinuz-6.8.0-10-generic'] "
                    "| vllm_dual_fast_newest_kernel }}", "msg: 6.8.0-10-generic"),
    "pull": ("{{ '3.12' | vllm_dual_fast_pull_python_problem("
             "'# installs on Python 3.11-3.13', 'python3') == '' }}", "msg: true"),
}


@pytest.mark.parametrize("how", ["link", "copy"])
def test_the_filters_load_from_a_roles_path_elsewhere(tmp_path, how):
    roles = tmp_path / "elsewhere" / "roles"
    roles.mkdir(parents=True)
    if how == "link":
        (roles / "vllm_dual_fast").symlink_to(ROLE)
    else:
        shutil.copytree(ROLE, roles / "vllm_dual_fast",
                        ignore=shutil.ignore_patterns("__pycache__"))
    plays = [{"hosts": "localhost", "gather_facts": False,
              # Loaded, never run: the role's plugin folders join the loaders all the same.
              "tasks": [{"ansible.builtin.import_role": {"name": "vllm_dual_fast"},
                         "when": False},
                        *[{"name": f"probe {name}", "ansible.builtin.debug": {"msg": expr}}
                          for name, (expr, _) in PROBES.items()]]}]
    result, out = run_playbook(tmp_path, plays, env={
        "ANSIBLE_ROLES_PATH": str(roles), "ANSIBLE_FILTER_PLUGINS": "",
        "ANSIBLE_MODULE_UTILS": "", "ANSIBLE_LIBRARY": ""})
    assert result.returncode == 0, out
    for name, (_, answer) in PROBES.items():
        assert answer in out.split(f"probe {name}", 1)[1], (name, out)
