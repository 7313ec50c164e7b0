"""A wrong variable fails at argument_specs validation, names the variable, and changes nothing."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
PLAYBOOK = ROOT / "molecule/shared/converge_provision.yml"
ANSIBLE_PLAYBOOK = Path(sys.executable).parent / "ansible-playbook"


def run_role(extra_vars):
    env = dict(
        os.environ,
        ANSIBLE_ROLES_PATH=str(ROOT / "roles"),
        ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_FORCE_COLOR="0",
    )
    return subprocess.run(
        [str(ANSIBLE_PLAYBOOK), "-i", "localhost,", "-c", "local", str(PLAYBOOK),
         "-e", f"ansible_python_interpreter={sys.executable}", "-e", json.dumps(extra_vars)],
        capture_output=True, text=True, env=env, timeout=300, check=False,
    )


@pytest.mark.parametrize(
    ("extra_vars", "named"),
    [
        ({"vllm_dual_fast_min_gpus": "two"}, "vllm_dual_fast_min_gpus"),
        ({"vllm_dual_fast_driver_source": "nouveau"}, "vllm_dual_fast_driver_source"),
        ({"vllm_dual_fast_docker_source": "snap"}, "vllm_dual_fast_docker_source"),
        ({"vllm_dual_fast_stages": ["preflight", "yolo"]}, "vllm_dual_fast_stages"),
        ({"vllm_dual_fast_docker_daemon_options": "nope"}, "vllm_dual_fast_docker_daemon_options"),
        ({"vllm_dual_fast_tensor_parallel_size": 3}, "vllm_dual_fast_tensor_parallel_size"),
        ({"vllm_dual_fast_max_num_seqs": "many"}, "vllm_dual_fast_max_num_seqs"),
    ],
)
def test_bad_variable_fails_at_validation_and_changes_nothing(extra_vars, named):
    result = run_role(extra_vars)
    out = result.stdout + result.stderr
    assert result.returncode != 0, out
    assert named in out, out
    # The first task of the role is the validation: it failed there, before any other task.
    assert "Validating arguments against arg spec 'main'" in out, out
    assert "TASK [vllm_dual_fast : Load distribution facts]" not in out, out
    assert "changed=0" in out and "failed=1" in out, out
