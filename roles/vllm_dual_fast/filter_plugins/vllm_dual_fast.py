"""Pure parsing helpers for the role: tool output in, plain data out (tested in tests/)."""

import re

_TOPO_GPU_ROW = re.compile(r"^GPU(\d+)\s")


def nvidia_smi_gpus(stdout):
    """Parse `nvidia-smi --query-gpu=index,name,memory.total,driver_version,pci.bus_id,
    compute_cap --format=csv,noheader` into a list of dicts (memory in MiB)."""
    gpus = []
    for line in stdout.splitlines():
        if not line.strip():
            continue
        fields = [f.strip() for f in line.split(",")]
        if len(fields) != 6:
            raise ValueError(f"unexpected nvidia-smi line: {line!r}")
        index, name, memory, driver, bus_id, cap = fields
        gpus.append(
            {
                "index": int(index),
                "name": name,
                "memory_mib": int(memory.split()[0]),
                "driver_version": driver,
                "pci_bus_id": bus_id,
                "compute_cap": cap,
            }
        )
    return gpus


def lspci_nvidia_gpus(stdout):
    """NVIDIA display/3D controllers from `lspci -Dnn`; memory and driver are unknown before
    a driver is loaded, so only what lspci can say is kept."""
    gpus = []
    for line in stdout.splitlines():
        if "[10de:" not in line or not re.search(r"\[03(00|02)\]", line):
            continue
        bus_id, _, rest = line.partition(" ")
        gpus.append({"index": len(gpus), "name": rest.split(": ", 1)[-1], "pci_bus_id": bus_id})
    return gpus


def nvidia_topo_has_nvlink(stdout):
    """True when `nvidia-smi topo -m` links some pair of GPUs with NVLink (an `NV<n>` cell)."""
    for line in stdout.splitlines():
        if _TOPO_GPU_ROW.match(line) and re.search(r"\bNV\d+\b", line):
            return True
    return False


def compute_cap_at_least(cap, minimum):
    """Compare "8.6"-style capabilities numerically (8.10 is newer than 8.9)."""

    def as_tuple(value):
        return tuple(int(part) for part in str(value).split("."))

    return as_tuple(cap) >= as_tuple(minimum)


def free_gib_at(mounts, path):
    """Free GiB of the mount that holds `path` (the longest mount point that prefixes it),
    from Ansible's `ansible_facts['mounts']`. Returns None when no mount matches."""
    best = None
    for mount in mounts:
        point = mount.get("mount", "")
        prefix = point.rstrip("/") + "/"
        if (path == point or path.startswith(prefix) or point == "/") and (
            best is None or len(point) > len(best["mount"])
        ):
            best = mount
    if best is None:
        return None
    return round(best.get("size_available", 0) / 1024**3, 1)


def daemon_json_merge(existing, options):
    """Merge the role's daemon.json options into the owner's: nested dicts merge, the role's
    scalar values win for the keys it manages, every other key survives untouched."""
    merged = dict(existing or {})
    for key, value in (options or {}).items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = daemon_json_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


class FilterModule:
    def filters(self):
        return {
            "vllm_dual_fast_nvidia_smi_gpus": nvidia_smi_gpus,
            "vllm_dual_fast_lspci_gpus": lspci_nvidia_gpus,
            "vllm_dual_fast_topo_has_nvlink": nvidia_topo_has_nvlink,
            "vllm_dual_fast_cap_at_least": compute_cap_at_least,
            "vllm_dual_fast_free_gib_at": free_gib_at,
            "vllm_dual_fast_daemon_json_merge": daemon_json_merge,
        }
