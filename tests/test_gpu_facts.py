"""What preflight makes of nvidia-smi (tasks/gpu_facts.yml and preflight's stop), with the
nvidia-smi double's faults: only a missing tool or exit 9 means no driver (the install path);
a loaded driver that cannot reach a GPU (exit 15, fallen off the bus) stops the run before
anything is installed or rebooted."""

import json
import os
import shutil
import sys

import pytest
import yaml
from ansible_runner import ROLE, run_playbook

SMI_DOUBLE = ROLE.parents[1] / "molecule/doubles/nvidia-smi-double"
PREFLIGHT = yaml.safe_load((ROLE / "tasks/preflight.yml").read_text())
STOP = next(t for t in PREFLIGHT if t["name"].startswith("Stop when the loaded driver cannot"))


def read_gpus(tmp_path, fault=None, installed=True):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    if installed:
        (bin_dir / "nvidia-smi").write_text(
            f"#!/bin/sh\nexec {sys.executable} {SMI_DOUBLE} \"$@\"\n")
        os.chmod(bin_dir / "nvidia-smi", 0o700)
    out = tmp_path / "facts.json"
    play = [{"hosts": "localhost", "gather_facts": False, "tasks": [
        {"name": "Read", "ansible.builtin.include_tasks": str(ROLE / "tasks/gpu_facts.yml")},
        {"name": "Keep", "ansible.builtin.copy": {"dest": str(out), "mode": "0644", "content":
            "{{ {'loaded': vllm_dual_fast_driver_loaded,"
            " 'unreachable': vllm_dual_fast_gpus_unreachable,"
            " 'gpus': vllm_dual_fast_gpus | length} | to_json }}"}},
        STOP,
    ]}]
    # Only the double's folder and what a shell needs: no real nvidia-smi or lspci of this host.
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin",
           "NVIDIA_SMI_DOUBLE_CONFIG": str(tmp_path / "none.json"),
           "NVIDIA_SMI_DOUBLE_STATE_DIR": str(tmp_path / "state"),
           "NVIDIA_SMI_DOUBLE_FAULT": fault or "",
           "VDF_VLLM_DUAL_FAST_DRIVER_MIN": "1"}
    if shutil.which("nvidia-smi", path="/usr/bin:/bin"):
        pytest.skip("this host has a real nvidia-smi on /usr/bin")
    result, text = run_playbook(tmp_path, play, {"vllm_dual_fast_driver_min_version": "550"},
                                env=env)
    facts = json.loads(out.read_text()) if out.exists() else None
    return result, text, facts


def test_a_working_driver_is_loaded_and_reads_two_gpus(tmp_path):
    result, text, facts = read_gpus(tmp_path)
    assert result.returncode == 0, text
    assert facts == {"loaded": True, "unreachable": False, "gpus": 2}


@pytest.mark.parametrize("fault, installed", [("no-driver", True), (None, False)])
def test_no_driver_loaded_or_none_installed_is_the_install_path(tmp_path, fault, installed):
    result, text, facts = read_gpus(tmp_path, fault, installed)
    assert result.returncode == 0, text
    assert facts["loaded"] is False and facts["unreachable"] is False


def test_a_gpu_fallen_off_the_bus_stops_preflight_and_says_why(tmp_path):
    result, text, facts = read_gpus(tmp_path, "gpu-lost")
    assert result.returncode != 0
    assert facts == {"loaded": False, "unreachable": True, "gpus": 0}
    assert "exit status 15" in text and "which fell off the bus" in text
    assert "Nothing was installed or changed" in text
