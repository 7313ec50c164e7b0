"""vLLM's cached answer to "can GPU a reach GPU b" (issue 46, part 2): vLLM 0.27.1 writes
gpu_p2p_access_cache_for_<devices>.json under its cache root (vllm/distributed/
device_communicators/all_reduce_utils.py; the role mounts compile_cache_dir/vllm there) keyed by
the device numbers alone, and never tests again while it is there. model.yml's tasks, run as on
a rig against the nvidia-smi double: the cached answers go when the cards (UUIDs), the driver or
a VBIOS changed since they were made, or when that was never recorded; they stay otherwise."""

import json
import os
from pathlib import Path

import pytest
import yaml
from ansible_runner import run_playbook

ROOT = Path(__file__).resolve().parents[2]
ROLE = ROOT / "roles/vllm_dual_fast"
SMI = ROOT / "molecule/doubles/nvidia-smi-double"
FIRST = "Read the GPUs' identity"
LAST = "Record the identity they will be made under"


def identity_tasks():
    tasks = yaml.safe_load((ROLE / "tasks/model.yml").read_text())
    names = [t["name"] for t in tasks]
    return tasks[names.index(next(n for n in names if n.startswith(FIRST))):names.index(LAST) + 1]


@pytest.fixture
def rig(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").symlink_to(SMI)
    cache = tmp_path / "compile-cache/vllm"
    cache.mkdir(parents=True)
    state = tmp_path / "state"
    state.mkdir()
    config = tmp_path / "smi.json"

    def run(loaded=True, **knobs):
        config.write_text(json.dumps(knobs))
        env = {"PATH": f"{bin_dir}:{os.environ['PATH']}",
               "NVIDIA_SMI_DOUBLE_CONFIG": str(config),
               "NVIDIA_SMI_DOUBLE_STATE_DIR": str(tmp_path / "smi-state")}
        play = [{"hosts": "localhost", "gather_facts": False, "tasks": identity_tasks()}]
        result, out = run_playbook(tmp_path, play, {
            "vllm_dual_fast_driver_loaded": loaded,
            "vllm_dual_fast_compile_cache_dir": str(tmp_path / "compile-cache"),
            "_vllm_dual_fast_state_dir": str(state)}, env=env)
        assert result.returncode == 0, out
        return out

    run.cache, run.state = cache, state
    return run


def vllm_tested(rig, devices="0,1"):
    """What vLLM writes at a start once the file is gone."""
    path = rig.cache / f"gpu_p2p_access_cache_for_{devices}.json"
    path.write_text(json.dumps({"0->0": True, "0->1": False, "1->0": False, "1->1": True}))
    return path


def test_answers_of_unknown_provenance_go_and_the_identity_is_recorded(rig):
    old = vllm_tested(rig)
    other = rig.cache / "torch_compile_cache"    # the compile cache beside it stays
    other.mkdir()
    rig()
    assert not old.exists() and other.exists()
    assert "GPU-3090d0b1-e000-4000-8000-000000000001" in (rig.state / "gpu-identity").read_text()


def test_the_same_cards_driver_and_vbios_keep_the_answer(rig):
    rig()
    kept = vllm_tested(rig)
    out = rig()
    assert kept.exists(), out
    assert "changed=0" in out


@pytest.mark.parametrize("change", [{"uuid_base": 7}, {"driver_version": "580.105.08"}],
                         ids=["a card swapped", "another driver"])
def test_another_card_or_driver_makes_vllm_test_again(rig, change):
    """Before: the answer about the old hardware stayed until someone deleted it by hand."""
    rig()
    stale = vllm_tested(rig)
    rig(**change)
    assert not stale.exists()


def test_without_a_loaded_driver_nothing_is_read_or_removed(rig):
    kept = vllm_tested(rig)
    rig(loaded=False)
    assert kept.exists() and not (rig.state / "gpu-identity").exists()
