"""The module that reads what preflight judges the host by in one run
(library/vllm_dual_fast_host_reads.py): which commands it runs for each reading, and the shapes
it returns, which are those of the command tasks it replaced (gpu_facts.yml and preflight.yml
read them unchanged). Commands are answered by a recording runner; disk is read on real folders."""

import importlib.util
import os

from ansible.module_utils.vllm_dual_fast_command import command_result
from ansible_runner import ROLE

spec = importlib.util.spec_from_file_location(
    "vllm_dual_fast_host_reads", ROLE / "library/vllm_dual_fast_host_reads.py")
reads = importlib.util.module_from_spec(spec)
spec.loader.exec_module(reads)

TWO_GPUS = ("0, NVIDIA GeForce RTX 3090, 24576 MiB, 580.95.05, 00000000:01:00.0, 8.6\n"
            "1, NVIDIA GeForce RTX 3090, 24576 MiB, 580.95.05, 00000000:02:00.0, 8.6")


class Runner:
    """Answers each command by its first two words; records every argv it was given."""

    def __init__(self, answers):
        self.answers, self.ran = answers, []

    def __call__(self, argv, timeout=60):
        self.ran.append(argv)
        rc, out = self.answers.get(" ".join(argv[:2]), (127, ""))
        return command_result(rc, out, "" if rc != 127 else "not found", argv)


def test_a_loaded_driver_is_read_once_and_its_links_after_it():
    runner = Runner({"nvidia-smi --query-gpu=index,name,memory.total,driver_version,pci.bus_id,"
                     "compute_cap": (0, TWO_GPUS), "nvidia-smi topo": (0, "GPU0 X PHB"),
                     "dpkg-query --show": (0, "1.17.8-1"), "mokutil --sb-state": (
                         0, "SecureBoot disabled")})
    found = reads.read_host(["gpus", "toolkit", "topo", "secure_boot"], runner=runner,
                            which=lambda name: "/usr/bin/" + name)
    assert [argv[0] for argv in runner.ran] == ["nvidia-smi", "dpkg-query", "nvidia-smi",
                                                "mokutil"]
    assert found["nvidia_smi"]["stdout_lines"] == TWO_GPUS.splitlines()
    assert "lspci" not in found and "nvidia_smi_path" not in found
    assert found["toolkit"] == {"rc": 0, "stdout": "1.17.8-1"}
    assert found["topo"] == {"rc": 0, "stdout": "GPU0 X PHB"}
    assert found["secure_boot"]["stdout"] == "SecureBoot disabled"
    assert runner.ran[1][-1] == "nvidia-container-toolkit"


def test_without_a_driver_the_pci_devices_are_listed_and_the_links_not_asked():
    runner = Runner({"lspci -Dnn": (0, "0000:01:00.0 VGA [0300]: NVIDIA [10de:2204]")})
    found = reads.read_host(["gpus", "topo", "secure_boot"], runner=runner,
                            which=lambda name: None)
    assert found["nvidia_smi"]["rc"] == 127
    assert found["lspci"] == {"rc": 0, "stdout": "0000:01:00.0 VGA [0300]: NVIDIA [10de:2204]"}
    assert found["nvidia_smi_path"] == {"rc": 1}              # missing: no driver, not a lost GPU
    assert "topo" not in found
    assert found["secure_boot"]["rc"] == 127                  # no mokutil: the filter's "unknown"
    assert [argv[0] for argv in runner.ran] == ["nvidia-smi", "lspci", "mokutil"]


def test_disk_is_measured_at_the_nearest_existing_folders(tmp_path):
    (tmp_path / "data").mkdir()
    marker = tmp_path / "data/.done"
    marker.write_text("")
    runner = Runner({"docker info": (0, str(tmp_path / "docker-root")),
                     "docker image": (1, "")})
    found = reads.read_host(["gpus", "disk"], image="vllm:1", model_marker=str(marker),
                            data_root=str(tmp_path / "data/not/yet"), runner=runner,
                            which=lambda name: None)
    disk = found["disk"]
    assert disk["weights_cached"] is True and disk["image_present"] is False
    assert disk["docker_root"] == str(tmp_path / "docker-root")
    device = str(os.stat(tmp_path).st_dev)
    assert [place["fs"] for place in disk["free"]] == [device, device]
    assert all(isinstance(place["free_gib"], float) for place in disk["free"])
    assert ["docker", "image", "inspect", "--format", "present", "vllm:1"] in runner.ran


def test_a_docker_that_does_not_answer_means_the_default_data_root_and_no_image(tmp_path):
    runner = Runner({})
    disk = reads.read_host(["gpus", "disk"], image="vllm:1", model_marker=str(tmp_path / "no"),
                           data_root=str(tmp_path), runner=runner, which=lambda name: None)["disk"]
    assert disk["docker_root"] == "/var/lib/docker"
    assert (disk["weights_cached"], disk["image_present"]) == (False, False)


def test_a_tool_that_hangs_is_reported_not_waited_for():
    result = reads.run(["sleep", "5"], timeout=0.2)
    assert result["rc"] == 124 and "timed out" in result["stderr"]
    assert reads.run(["/nonexistent/tool"])["rc"] == 127
