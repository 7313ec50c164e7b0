"""container_stack.yml's one check of the engine: Docker knows the nvidia runtime and its Compose
v2 plugin starts, read in one `docker info` call. The Go template runs against this machine's
real Docker (no nvidia runtime here, so the check must fail); the verdict on other answers is
judged from what real Docker CLIs printed for the same template (docker 26.1.5 in the simulated
rig, with the toolkit's runtime; docker 28.2.2 here, with a Compose plugin that exits 3)."""

import os
import shutil
from pathlib import Path

import pytest
import yaml
from ansible_runner import ROLE, run_playbook

NAME = "Check Docker knows the nvidia runtime and Compose v2 answers"
RIG = "io.containerd.runc.v2 nvidia runc \n2.26.1-4\n"
NO_NVIDIA = "io.containerd.runc.v2 runc \n2.26.1-4\n"
BROKEN_COMPOSE = ("io.containerd.runc.v2 nvidia runc \n error: failed to fetch metadata: "
                  "exit status 3\n")
NO_COMPOSE = "io.containerd.runc.v2 nvidia runc \n\n"


def check_task():
    tasks = yaml.safe_load((ROLE / "tasks/container_stack.yml").read_text())
    found = [task for task in tasks if task["name"] == NAME]
    assert len(found) == 1
    return found[0]


def run_check(tmp_path, task, env=None):
    play = [{"hosts": "localhost", "gather_facts": False, "tasks": [task]}]
    result, out = run_playbook(tmp_path, play, env=env)
    return result.returncode, out


def answering(task, stdout):
    """The task with Docker's answer replaced by a recorded one (the same failed_when judges it)."""
    return {**task, "ansible.builtin.command": {"argv": ["printf", "%s", stdout]}}


@pytest.mark.parametrize(("stdout", "passes"), [
    (RIG, True), (NO_NVIDIA, False), (BROKEN_COMPOSE, False), (NO_COMPOSE, False)],
    ids=["rig", "no-nvidia-runtime", "compose-cannot-start", "no-compose"])
def test_the_engine_passes_only_with_the_nvidia_runtime_and_a_compose_that_starts(
        tmp_path, stdout, passes):
    rc, out = run_check(tmp_path, answering(check_task(), stdout))
    assert (rc == 0) is passes, out


@pytest.mark.skipif(shutil.which("docker") is None, reason="needs the Docker CLI")
def test_the_template_runs_on_real_docker_and_fails_here_without_the_nvidia_runtime(tmp_path):
    rc, out = run_check(tmp_path, check_task())
    assert rc != 0, out
    assert "runc" in out and "failed=1" in out, out


@pytest.mark.skipif(shutil.which("docker") is None, reason="needs the Docker CLI")
def test_a_compose_plugin_that_cannot_start_is_read_as_its_error_by_real_docker(tmp_path):
    plugins = tmp_path / "docker-config/cli-plugins"
    plugins.mkdir(parents=True)
    compose = plugins / "docker-compose"
    compose.write_text("#!/bin/sh\nexit 3\n")
    compose.chmod(0o755)
    task = {**check_task(), "failed_when": False}
    task["register"] = "_read"
    shown = {"name": "Show the answer", "ansible.builtin.debug": {"var": "_read.stdout_lines"}}
    play = [{"hosts": "localhost", "gather_facts": False, "tasks": [task, shown]}]
    result, out = run_playbook(tmp_path, play, env={
        "DOCKER_CONFIG": str(Path(plugins).parent), "HOME": os.environ.get("HOME", "/root")})
    assert result.returncode == 0, out
    assert "error: failed to fetch metadata" in out, out
