#!/usr/bin/python
"""Read what preflight judges the host by, in one module run (was: up to nine command tasks,
each a round trip to the rig, run by each of site.yml's two playbooks).

It only reads: the GPUs as the loaded driver lists them (and the PCI devices and whether
nvidia-smi is there at all when it fails), the installed container toolkit's version, how the
GPUs are linked, what mokutil says of Secure Boot, and, for a run that downloads, whether the
weights are cached, where Docker keeps its data, whether it has the image and the free space
under both. What the readings mean stays in the role's filters and tasks (gpu_facts.yml,
preflight.yml): each reading is returned as the command task it replaces registered it."""

import os
import shutil

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.vllm_dual_fast_command import run_command

DOCUMENTATION = r"""
module: vllm_dual_fast_host_reads
short_description: Read the GPUs, toolkit, GPU links, Secure Boot and disk in one run
options:
  read:
    description: >-
      What to read: gpus (always read first), toolkit, topo (only when the driver listed GPUs),
      secure_boot, disk.
    type: list
    elements: str
    default: [gpus]
  toolkit_package:
    type: str
    default: nvidia-container-toolkit
  image:
    description: The image whose presence in Docker `disk` reports.
    type: str
    default: ""
  model_marker:
    description: The file that marks this model revision's finished download (`disk`).
    type: path
    default: ""
  data_root:
    description: The role's data root, whose nearest existing folder `disk` measures.
    type: path
    default: ""
  archive_record:
    description: >-
      The file model.yml writes when Docker has loaded an image archive: the archive's identity
      (lookup vllm_dual_fast_image_archive_id). `disk` returns what it holds.
    type: path
    default: ""
"""

RETURN = r"""
nvidia_smi:
  description: "{rc, stdout, stderr, stdout_lines, stderr_lines} of nvidia-smi --query-gpu=..."
  type: dict
lspci:
  description: "{rc, stdout} of lspci -Dnn; only when nvidia-smi failed"
  type: dict
nvidia_smi_path:
  description: "{rc}: 0 when nvidia-smi is on PATH; only when nvidia-smi failed"
  type: dict
toolkit:
  description: "{rc, stdout}: dpkg-query's version of the toolkit package"
  type: dict
topo:
  description: "{rc, stdout} of nvidia-smi topo -m; only when the driver listed GPUs"
  type: dict
secure_boot:
  description: "{rc, stdout, stderr} of mokutil --sb-state (rc 127 without mokutil)"
  type: dict
disk:
  description: >-
    {weights_cached (bool), docker_root, image_present (bool), free: [{fs, free_gib}] for the
    data root and Docker's data root, each at its nearest existing folder, archive_loaded (the
    archive record's text, '' without one)}
  type: dict
"""

GPU_QUERY = ["nvidia-smi", "--query-gpu=index,name,memory.total,driver_version,pci.bus_id,"
             "compute_cap", "--format=csv,noheader"]
GIB = 1024 ** 3


def run(argv, timeout=60):
    """argv's registered result (module_utils/vllm_dual_fast_command.py): a tool that is not
    there is rc 127, one that hangs 124."""
    return run_command(argv, timeout)


def gpus_listed(smi):
    return smi["rc"] == 0 and bool(smi["stdout"].strip())


def read_gpus(runner=run, which=shutil.which):
    smi = runner(GPU_QUERY)
    found = {"nvidia_smi": smi}
    if smi["rc"] != 0:
        lspci = runner(["lspci", "-Dnn"])
        found["lspci"] = {"rc": lspci["rc"], "stdout": lspci["stdout"]}
        found["nvidia_smi_path"] = {"rc": 0 if which("nvidia-smi") else 1}
    return found


def nearest_existing(path):
    while path and not os.path.exists(path):
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return path or "/"


def free_space(path, stat=os.stat, statvfs=os.statvfs):
    """{fs, free_gib} of path's nearest existing folder: its device number, and the space an
    unprivileged user may still write there (df's "Available"), in GiB to one decimal."""
    place = nearest_existing(path)
    vfs = statvfs(place)
    return {"fs": str(stat(place).st_dev), "free_gib": round(vfs.f_bavail * vfs.f_frsize / GIB, 1)}


def read_text(path):
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read(200).strip()
    except (OSError, UnicodeDecodeError):
        return ""


def read_disk(image, model_marker, data_root, archive_record="", runner=run):
    info = runner(["docker", "info", "--format", "{{.DockerRootDir}}"])
    docker_root = info["stdout"].strip() if info["rc"] == 0 and info["stdout"].strip() else (
        "/var/lib/docker")
    inspected = runner(["docker", "image", "inspect", "--format", "present", image])
    return {"weights_cached": bool(model_marker) and os.path.exists(model_marker),
            "docker_root": docker_root,
            "image_present": inspected["rc"] == 0 and inspected["stdout"].strip() == "present",
            "free": [free_space(data_root), free_space(docker_root)],
            "archive_loaded": read_text(archive_record) if archive_record else ""}


def read_host(read, toolkit_package="nvidia-container-toolkit", image="", model_marker="",
              data_root="", archive_record="", runner=run, which=shutil.which):
    found = read_gpus(runner, which)
    if "toolkit" in read:
        toolkit = runner(["dpkg-query", "--show", "--showformat=${Version}", toolkit_package])
        found["toolkit"] = {"rc": toolkit["rc"], "stdout": toolkit["stdout"]}
    if "topo" in read and gpus_listed(found["nvidia_smi"]):
        topo = runner(["nvidia-smi", "topo", "-m"])
        found["topo"] = {"rc": topo["rc"], "stdout": topo["stdout"]}
    if "secure_boot" in read:
        found["secure_boot"] = runner(["mokutil", "--sb-state"])
    if "disk" in read:
        found["disk"] = read_disk(image, model_marker, data_root, archive_record, runner)
    return found


def main():
    module = AnsibleModule(
        argument_spec={
            "read": {"type": "list", "elements": "str", "default": ["gpus"],
                     "choices": ["gpus", "toolkit", "topo", "secure_boot", "disk"]},
            "toolkit_package": {"type": "str", "default": "nvidia-container-toolkit"},
            "image": {"type": "str", "default": ""},
            "model_marker": {"type": "path", "default": ""},
            "data_root": {"type": "path", "default": ""},
            "archive_record": {"type": "path", "default": ""},
        },
        supports_check_mode=True,
    )
    params = module.params
    if "disk" in params["read"] and not (params["image"] and params["data_root"]):
        module.fail_json(msg="read: disk needs image and data_root")
    module.exit_json(changed=False, **read_host(
        params["read"], params["toolkit_package"], params["image"], params["model_marker"],
        params["data_root"], params["archive_record"]))


if __name__ == "__main__":
    main()
