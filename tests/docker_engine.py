"""The Docker engine the tests start containers on (make setup starts it): one way to call it
and one mark for tests that need it."""

import shutil
import subprocess

import pytest

needs_docker = pytest.mark.skipif(
    shutil.which("docker") is None
    or subprocess.run(["docker", "info"], capture_output=True).returncode != 0,
    reason="needs the Docker engine make setup starts")


def docker(*args, check=True, timeout=120) -> subprocess.CompletedProcess:
    """`docker ARGS`, its output as text; raises on a non-zero exit when `check`."""
    return subprocess.run(["docker", *args], capture_output=True, text=True, check=check,
                          timeout=timeout)
