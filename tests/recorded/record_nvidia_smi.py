"""Records what the real nvidia-smi answers to every invocation the role makes (and a few it
must understand when they fail), as JSON: [{"argv", "rc", "stdout", "stderr"}]. Run on a machine
with NVIDIA GPUs and a driver (the device machine: `python3 tests/recorded/record_nvidia_smi.py
OUT.json`); tests/integration/test_nvidia_smi_recorded.py holds the nvidia-smi double to what it
recorded.
"""

import json
import subprocess
import sys

RIG_METRICS = ("index,pci.bus_id,temperature.gpu,power.draw,power.limit,clocks.sm,"
               "pcie.link.gen.current,pcie.link.gen.max,pcie.link.width.current,"
               "pcie.link.width.max,memory.used,utilization.gpu,clocks_event_reasons.active")
INVOCATIONS = [
    ["--query-gpu=index,name,memory.total,driver_version,pci.bus_id,compute_cap",
     "--format=csv,noheader"],                                          # tasks/gpu_facts.yml
    ["--query-gpu=driver_version", "--format=csv,noheader"],            # tasks/driver.yml
    ["--query-gpu=power.limit,temperature.gpu,clocks.sm,clocks_event_reasons.active,"
     "driver_version", "--format=csv,noheader,nounits"],                # tasks/health.yml
    ["--query-gpu=name,driver_version", "--format=csv,noheader"],       # files/race_check.py
    [f"--query-gpu={RIG_METRICS}", "--format=csv,noheader,nounits"],    # files/rig_metrics.py
    ["--query-gpu=clocks_throttle_reasons.active", "--format=csv,noheader"],  # the older name
    ["topo", "-m"],                                                     # tasks/gpu_facts.yml
    ["-q", "-d", "POWER", "-i", "0"],
    ["-q", "-d", "TEMPERATURE", "-i", "0"],
    ["--query-gpu=no.such.field", "--format=csv,noheader"],             # refusals: exit codes
    ["--query-gpu=index", "--format=csv,noheader", "-i", "99"],
    ["--no-such-option"],
]


def main() -> int:
    records = []
    for args in INVOCATIONS:
        done = subprocess.run(["nvidia-smi", *args], capture_output=True, text=True, timeout=60)
        records.append({"argv": ["nvidia-smi", *args], "rc": done.returncode,
                        "stdout": done.stdout, "stderr": done.stderr})
    with open(sys.argv[1], "w") as f:
        json.dump(records, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
