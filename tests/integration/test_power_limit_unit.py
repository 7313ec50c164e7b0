"""The power-limit boot unit (templates/etc/systemd/system/vllm-dual-fast-power-limit.service.j2)
rendered by Ansible for the GPUs the role read, its ExecStart lines then run against the
nvidia-smi double after the rig changed: the caps must land on the cards the role saw, whatever
nvidia-smi's indexes have become (it numbers cards in PCI bus order)."""

import json
import os
import subprocess
import sys
from pathlib import Path

from ansible_runner import render_role_template

SMI = Path(__file__).parents[2] / "molecule/doubles/nvidia-smi-double"
UNIT = "etc/systemd/system/vllm-dual-fast-power-limit.service.j2"


def smi(env, *args):
    return subprocess.run([sys.executable, str(SMI), *args], env=env, capture_output=True,
                          text=True, timeout=30, check=False)


def double_env(tmp_path, **config):
    (tmp_path / "smi.json").write_text(json.dumps(config))
    return {**{k: v for k, v in os.environ.items() if not k.startswith("NVIDIA_SMI_DOUBLE_")},
            "NVIDIA_SMI_DOUBLE_CONFIG": str(tmp_path / "smi.json"),
            "NVIDIA_SMI_DOUBLE_STATE_DIR": str(tmp_path / "smi-state")}


def rendered_unit(tmp_path, gpus, watts):
    return render_role_template(tmp_path, UNIT, {"vllm_dual_fast_gpus": gpus,
                                                 "vllm_dual_fast_power_limit_watts": watts})


def run_exec_starts(unit, env):
    for line in unit.splitlines():
        if line.startswith("ExecStart=/usr/bin/nvidia-smi"):
            done = smi(env, *line.split()[1:])
            assert done.returncode == 0, (line, done.stderr)


def limits_by_bus(env):
    out = smi(env, "--query-gpu=pci.bus_id,power.limit", "--format=csv,noheader,nounits").stdout
    return dict(tuple(field.strip() for field in row.split(",")) for row in out.splitlines())


def gpus_as_read(env):
    """vllm_dual_fast_gpus as preflight parses nvidia-smi (the fields the unit reads)."""
    out = smi(env, "--query-gpu=index,pci.bus_id", "--format=csv,noheader").stdout
    return [{"index": int(index), "pci_bus_id": bus.strip()}
            for index, bus in (row.split(",") for row in out.splitlines())]


def test_a_card_added_in_front_leaves_the_caps_on_the_cards_the_role_saw(tmp_path):
    # The role ran with the two 3090s on buses 2 and 3, then the owner added a display card on
    # bus 1: nvidia-smi now calls it GPU 0 and the 3090s GPU 1 and 2.
    seen = gpus_as_read(double_env(tmp_path, first_pci_bus=2))
    unit = rendered_unit(tmp_path, seen, 280)
    after = double_env(tmp_path, first_pci_bus=1, gpu_count=3)
    run_exec_starts(unit, after)
    assert limits_by_bus(after) == {"00000000:01:00.0": "350.00",       # not the role's card
                                    "00000000:02:00.0": "280.00", "00000000:03:00.0": "280.00"}


def test_the_unit_caps_every_card_it_names_and_no_index(tmp_path):
    env = double_env(tmp_path)
    unit = rendered_unit(tmp_path, gpus_as_read(env), 300)
    assert " -i 0 " not in unit and " -i 1 " not in unit
    run_exec_starts(unit, env)
    assert set(limits_by_bus(env).values()) == {"300.00"}
