"""A wrong variable fails at argument_specs validation, names the variable, and changes nothing."""

from pathlib import Path

import pytest
from ansible_runner import run_playbook

ROOT = Path(__file__).parents[2]
PLAYBOOK = ROOT / "molecule/shared/converge_provision.yml"


def run_role(tmp_path, extra_vars):
    result, _ = run_playbook(tmp_path, PLAYBOOK, extra_vars)
    return result


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
def test_bad_variable_fails_at_validation_and_changes_nothing(tmp_path, extra_vars, named):
    result = run_role(tmp_path, extra_vars)
    out = result.stdout + result.stderr
    assert result.returncode != 0, out
    assert named in out, out
    # The first task of the role is the validation: it failed there, before any other task.
    assert "Validating arguments against arg spec 'main'" in out, out
    assert "TASK [vllm_dual_fast : Load distribution facts]" not in out, out
    assert "changed=0" in out and "failed=1" in out, out
