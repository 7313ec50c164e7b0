"""Runs plays (a list, or a playbook file's path) with this virtualenv's ansible-playbook, the
project's ansible.cfg, roles and the role's filter plugins and modules, from a temporary folder;
by default on localhost over the local connection (tests of the role's files and playbooks,
without a rig)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).parents[1]
ROLE = ROOT / "roles/vllm_dual_fast"
ANSIBLE_PLAYBOOK = Path(sys.executable).parent / "ansible-playbook"
LOCALHOST = ("-i", "localhost,", "-c", "local")


def run_playbook(tmp_path, plays, extra_vars=None, env=None, args=(), inventory=LOCALHOST):
    if isinstance(plays, Path):
        playbook = plays
    else:
        playbook = tmp_path / f"play-{len(list(tmp_path.glob('play-*.yml')))}.yml"
        playbook.write_text(yaml.safe_dump(plays, sort_keys=False))
    full_env = {  # env wins over these (a copy of the role elsewhere: ANSIBLE_ROLES_PATH)
        **os.environ,
        "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
        "ANSIBLE_ROLES_PATH": str(ROOT / "roles"),
        "ANSIBLE_FILTER_PLUGINS": str(ROLE / "filter_plugins"),
        "ANSIBLE_LOOKUP_PLUGINS": str(ROLE / "lookup_plugins"),
        "ANSIBLE_LIBRARY": str(ROLE / "library"),
        "ANSIBLE_MODULE_UTILS": str(ROLE / "module_utils"),
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_FORCE_COLOR": "0",
        "ANSIBLE_LOCAL_TEMP": str(tmp_path / "ansible-tmp"),
        **(env or {}),
    }
    result = subprocess.run(
        [
            str(ANSIBLE_PLAYBOOK),
            *inventory,
            str(playbook),
            "-e",
            f"ansible_python_interpreter={sys.executable}",
            "-e",
            json.dumps(extra_vars or {}),
            *args,
        ],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=300,
        check=False,
        cwd=tmp_path,
    )
    return result, result.stdout + result.stderr


def render_role_template(tmp_path, template, extra_vars):
    """The role's `templates/<template>` as ansible.builtin.template renders it on a rig, with
    `extra_vars`: the rendered text."""
    dest = tmp_path / Path(template).name.removesuffix(".j2")
    play = [{"hosts": "localhost", "gather_facts": False, "tasks": [{
        "name": "Render the role's template", "ansible.builtin.template": {
            "src": str(ROLE / "templates" / template), "dest": str(dest), "mode": "0644"}}]}]
    result, out = run_playbook(tmp_path, play, extra_vars)
    assert result.returncode == 0, out
    return dest.read_text()
