"""What preflight makes of nvidia-smi (tasks/gpu_facts.yml and preflight's stop), with the
nvidia-smi double's faults: a missing tool or exit 9 means no driver (the install path), exit
18 (NVML's library newer than the loaded module) a driver waiting for its reboot;
a loaded driver that cannot reach a GPU (exit 15, fallen off the bus) stops the run before
anything is installed or rebooted. A read-only check (the heartbeat's `verify` stage) that
preflight stops still writes the rig's report: unhealthy, naming preflight (main.yml's rescue)."""

import copy
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
SERVING_STOP = next(t for t in PREFLIGHT if t["name"].startswith("Stop a serving stage on a host"))
MAIN = yaml.safe_load((ROLE / "tasks/main.yml").read_text())
PREFLIGHT_BLOCK = next(t for t in MAIN if t.get("block", [{}])[0].get("name") == "Preflight")
REPORT_SCHEMA = json.loads((ROLE.parents[1] / "files/schemas/health-report.schema.json")
                           .read_text())


def read_gpus(tmp_path, fault=None, installed=True, tasks=None, extra_vars=None, env_extra=None):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    if installed:
        (bin_dir / "nvidia-smi").write_text(
            f"#!/bin/sh\nexec {sys.executable} {SMI_DOUBLE} \"$@\"\n")
        os.chmod(bin_dir / "nvidia-smi", 0o700)
    out = tmp_path / "facts.json"
    play = [{"hosts": "localhost", "gather_facts": False, "tasks": tasks or [
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
           "VDF_VLLM_DUAL_FAST_DRIVER_MIN": "1", **(env_extra or {})}
    if shutil.which("nvidia-smi", path="/usr/bin:/bin"):
        pytest.skip("this host has a real nvidia-smi on /usr/bin")
    result, text = run_playbook(tmp_path, play, {"vllm_dual_fast_driver_min_version": "550",
                                                 **(extra_vars or {})}, env=env)
    facts = json.loads(out.read_text()) if out.exists() else None
    return result, text, facts


def test_a_working_driver_is_loaded_and_reads_two_gpus(tmp_path):
    result, text, facts = read_gpus(tmp_path)
    assert result.returncode == 0, text
    assert facts == {"loaded": True, "unreachable": False, "gpus": 2}


def test_a_caller_s_registered_smi_does_not_change_what_the_gpus_are(tmp_path):
    """The driver scenario's verify registered its own `_smi` (another nvidia-smi query): a
    task var of that name in gpu_facts.yml lost to it (registered vars win) and the GPU parse
    failed on "NVIDIA GeForce RTX 3090, 580.95.05"."""
    tasks = [{"name": "A caller's own query", "register": "_smi",
              "ansible.builtin.command": "echo 'NVIDIA GeForce RTX 3090, 580.95.05'"},
             {"name": "Read", "ansible.builtin.include_tasks": str(ROLE / "tasks/gpu_facts.yml")},
             {"name": "Keep", "ansible.builtin.copy": {
                 "dest": str(tmp_path / "facts.json"), "mode": "0644", "content":
                 "{{ {'loaded': vllm_dual_fast_driver_loaded, 'unreachable': "
                 "vllm_dual_fast_gpus_unreachable, 'gpus': vllm_dual_fast_gpus | length}"
                 " | to_json }}"}}]
    result, text, facts = read_gpus(tmp_path, tasks=tasks)
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


def booted_with_newer_libraries(tmp_path):
    """The nvidia-smi double on a boot whose loaded module (580.95.05) is older than the NVML
    library installed since (580.105.08): an upgrade of the driver's packages without a reboot,
    what unattended upgrades do to a rig the role does not guard. nvidia-smi exits 18."""
    kernel, libs = tmp_path / "kernel-double", tmp_path / "lib"
    kernel.mkdir()
    libs.mkdir()
    (kernel / "release").write_text("6.8.0-50-generic\n")
    (kernel / "nvidia-module").write_text("580.95.05\n")
    (libs / "libnvidia-ml.so.580.105.08").write_text("")
    return {"NVIDIA_SMI_DOUBLE_KERNEL_DIR": str(kernel), "NVIDIA_SMI_DOUBLE_LIB_DIR": str(libs)}


def test_a_driver_library_mismatch_waits_for_a_reboot_rather_than_stopping_preflight(tmp_path):
    """Before: exit 18 read as a loaded driver that cannot reach a GPU, so every run stopped in
    preflight telling the owner to look for Xid 79 and reseat the cards; the driver stage never
    got to the reboot that loads the module installed with the new libraries."""
    result, text, facts = read_gpus(tmp_path, env_extra=booted_with_newer_libraries(tmp_path))
    assert result.returncode == 0, text
    assert facts == {"loaded": False, "unreachable": False, "gpus": 0}, text


def test_a_serving_stage_on_a_mismatched_driver_says_a_reboot_loads_the_new_module(tmp_path):
    tasks = [{"name": "Read", "ansible.builtin.include_tasks": str(ROLE / "tasks/gpu_facts.yml")},
             STOP, SERVING_STOP]
    result, text, _ = read_gpus(tmp_path, tasks=tasks,
                                extra_vars={"vllm_dual_fast_stages": ["preflight", "deploy"]},
                                env_extra=booted_with_newer_libraries(tmp_path))
    assert result.returncode != 0, text
    said = text.split("Task failed", 1)[1]     # the stop's own message, not the task names
    assert "Stop a serving stage" in text.split("Task failed", 1)[0].rsplit("TASK [", 1)[1]
    assert "Driver/library version mismatch" in said and "NVML library version: 580.105" in said
    assert "upgraded without a reboot" in said and "vllm_dual_fast_driver_reboot_allowed" in said
    assert "fell off the bus" not in said and "Xid" not in said


def driver_task(name):
    tasks = yaml.safe_load((ROLE / "tasks/driver.yml").read_text())
    return next(t for block in tasks for t in block.get("block", [block]) if t["name"] == name)


@pytest.mark.parametrize("mismatch, says", [
    (True, "loaded at another version than its libraries"), (False, "installed but not loaded")])
def test_a_driver_stage_that_may_not_reboot_says_what_waits_for_the_reboot(tmp_path, mismatch,
                                                                            says):
    result, text = run_playbook(tmp_path, [{
        "hosts": "localhost", "gather_facts": False,
        "tasks": [driver_task("Warn that the driver is installed but not loaded")]}],
        {"vllm_dual_fast_reboot_pending": True, "vllm_dual_fast_driver_mismatch": mismatch})
    assert result.returncode == 0, text
    said = " ".join(text.split())    # the callback wraps long messages
    assert says in said and "vllm_dual_fast_driver_reboot_allowed is false" in said, text
    assert ("Driver/library version mismatch" in said) is mismatch, text


def test_a_reboot_that_left_the_driver_unloaded_quotes_what_nvidia_smi_printed(tmp_path):
    """The real nvidia-smi prints its failure on stdout (the double does as well): the stop after
    the driver's reboot quoted only stderr, so it said nothing of why."""
    smi = {"rc": 9, "stdout_lines": ["NVIDIA-SMI has failed because it couldn't communicate "
                                     "with the NVIDIA driver."], "stderr_lines": []}
    result, text = run_playbook(tmp_path, [{
        "hosts": "localhost", "gather_facts": False,
        "tasks": [driver_task("Stop when the driver is still not loaded after the reboot")]}],
        {"_vllm_dual_fast_reboot": "reboot", "_vllm_dual_fast_nvidia_smi": smi,
         "vllm_dual_fast_driver_satisfied": False, "vllm_dual_fast_driver_loaded": False,
         "vllm_dual_fast_driver_min_version": "550"})
    assert result.returncode != 0, text
    assert "couldn't communicate with the NVIDIA driver" in " ".join(text.split()), text


@pytest.mark.parametrize("stages, reported", [(["preflight", "verify"], True),
                                              (["preflight", "deploy"], False)])
def test_a_read_only_check_stopped_in_preflight_reports_the_rig_unhealthy(tmp_path, stages,
                                                                          reported):
    """main.yml's preflight block and rescue as written, preflight cut to the GPU read and its
    stop: the heartbeat's report says the serving release is unhealthy because of preflight
    (it used to keep the old, healthy one); a deploy's stop writes no report."""
    import jsonschema

    release = tmp_path / "opt/releases/0123456789abcdef"
    release.mkdir(parents=True)
    (tmp_path / "opt/current").symlink_to(release)
    (tmp_path / "state").mkdir()
    (tmp_path / "state/report.json").write_text('{"healthy": true, "release": "old"}')
    guarded = copy.deepcopy(PREFLIGHT_BLOCK)
    guarded["block"] = [{"name": "Read", "ansible.builtin.include_tasks":
                         str(ROLE / "tasks/gpu_facts.yml")}, STOP]
    for task in guarded["rescue"]:
        if "ansible.builtin.include_tasks" in task:
            task["ansible.builtin.include_tasks"] = str(ROLE / "tasks/preflight_report.yml")
    result, text, _ = read_gpus(tmp_path, "gpu-lost", tasks=[guarded], extra_vars={
        "vllm_dual_fast_stages": stages, "_vllm_dual_fast_state_dir": str(tmp_path / "state"),
        "_vllm_dual_fast_current_link": str(tmp_path / "opt/current"),
        "vllm_dual_fast_report_dir": str(tmp_path / "reports")})
    assert result.returncode != 0 and "which fell off the bus" in text, text
    report = json.loads((tmp_path / "state/report.json").read_text())
    if not reported:
        assert report == {"healthy": True, "release": "old"}
        assert not (tmp_path / "reports").exists()
        return
    jsonschema.validate(report, REPORT_SCHEMA)
    assert (report["healthy"], report["release"]) == (False, "0123456789abcdef")
    [failure] = report["failures"]
    assert failure["check"] == "preflight" and "cannot reach a GPU" in failure["line"]
    assert json.loads((tmp_path / "reports/localhost.json").read_text()) == report
