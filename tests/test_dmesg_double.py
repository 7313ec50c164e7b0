"""molecule/doubles/dmesg-double against this machine's Docker engine: a container that dies
with exit status 134 (the vLLM double's illegal-memory-access abort) shows as an Xid 31 line
at once, as the NVIDIA driver's line would, even when the log is read in the same second."""

import pathlib
import shutil
import subprocess
import uuid

import pytest

DOUBLE = pathlib.Path(__file__).resolve().parent.parent / "molecule/doubles/dmesg-double"

pytestmark = pytest.mark.skipif(
    shutil.which("docker") is None
    or subprocess.run(["docker", "info"], capture_output=True).returncode != 0,
    reason="needs the Docker engine make setup starts",
)


def test_a_fault_in_the_same_second_as_the_read_is_in_the_log():
    name = f"vdf-dmesg-double-test-{uuid.uuid4().hex[:8]}"
    try:
        subprocess.run(
            ["docker", "run", "--name", name, "vdf-target:debian13", "sh", "-c", "exit 134"],
            capture_output=True,
            timeout=60,
        )
        container_id = subprocess.run(
            ["docker", "inspect", "-f", "{{.Id}}", name], capture_output=True, text=True, check=True
        ).stdout.strip()
        log = subprocess.run(
            ["sh", str(DOUBLE), "--time-format=iso"], capture_output=True, text=True, timeout=60
        ).stdout
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True)
    pid = int(container_id[:4], 16) + 1000
    assert f"NVRM: Xid (PCI:0000:01:00): 31, pid={pid}," in log
