"""community.docker's Docker API connection, running again a command the engine never started.

The simulated rigs are systemd containers on a two-core machine, each with its own Docker inside.
Under that load runc now and then fails to start an exec ("OCI runtime exec failed: exec failed:
unable to start container process: waiting for init preliminary setup: read init-p: connection
reset by peer"): exit code 126, no process (the exec's Pid stays 0), the engine's message on
stdout. Ansible then fails the task ("Failed to set permissions on remote files (rc: 126, err: )",
CI of 2026-12-06). The command did not run, so running it again changes nothing twice; every
other result, a 126 of a command that ran included, is returned as the engine gave it.

The simulated rigs connect with this plugin (inventory/hosts.yml, .config/molecule/config.yml);
real rigs use SSH and never load it.
"""

from __future__ import annotations

import time

from ansible.utils.display import Display
from ansible_collections.community.docker.plugins.connection.docker_api import (
    Connection as DockerApiConnection,
)

DOCUMENTATION = r"""
name: vdf_docker_api
short_description: community.docker.docker_api, running again an exec the engine never started
description:
  - The Docker API connection of community.docker, unchanged but for one case. An exec the
    container runtime failed to start (exit code 126, no process, the engine's
    "OCI runtime exec failed" message as its output) is started again, up to two more times.
  - The simulated rigs of vllm-dual-fast use it; see the module's docstring for why.
extends_documentation_fragment:
  - community.docker.docker.api_documentation
  - community.docker.docker.var_names
options:
  remote_user:
    type: str
    description: The user commands run as in the container.
    vars:
      - name: ansible_user
      - name: ansible_docker_user
    keyword:
      - name: remote_user
  remote_addr:
    type: str
    description: The container's name.
    default: inventory_hostname
    vars:
      - name: inventory_hostname
      - name: ansible_host
      - name: ansible_docker_host
  container_timeout:
    type: integer
    description: Seconds to wait for a privilege escalation prompt.
    default: 10
    vars:
      - name: ansible_docker_timeout
  extra_env:
    type: dict
    description: Environment variables for the commands run in the container.
    vars:
      - name: ansible_docker_extra_env
  working_dir:
    type: string
    description: The directory commands run in.
    vars:
      - name: ansible_docker_working_dir
  privileged:
    type: boolean
    description: Whether commands run with extended privileges.
    default: false
    vars:
      - name: ansible_docker_privileged
"""

display = Display()

ENGINE_START_FAILURE = b"OCI runtime exec failed"
ATTEMPTS = 3
PAUSE_S = 1.0


def pause_before_starting_again(seconds: float) -> None:
    """The pause between two attempts (its own name: the tests count the attempts by it)."""
    time.sleep(seconds)


def never_started(returncode: int, stdout: bytes, pid: int) -> bool:
    """True for an exec the runtime refused before any process ran (safe to start again)."""
    return returncode == 126 and pid == 0 and stdout.lstrip().startswith(ENGINE_START_FAILURE)


class Connection(DockerApiConnection):
    """The Docker API connection that starts again an exec the runtime never started."""

    transport = "vdf_docker_api"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._last_exec_inspection = {}

    def _call_client(self, callable, not_found_can_be_resource=False):  # noqa: A002 (the parent's name)
        # The parent inspects each exec once it ended (/exec/{id}/json) but returns only its exit
        # code: keep the whole inspection, whose Pid tells whether a process ever ran.
        result = super()._call_client(callable, not_found_can_be_resource=not_found_can_be_resource)
        if isinstance(result, dict) and "ExitCode" in result and "Pid" in result:
            self._last_exec_inspection = result
        return result

    def exec_command(self, cmd, in_data=None, sudoable=False):
        for attempt in range(1, ATTEMPTS + 1):
            self._last_exec_inspection = {}
            returncode, stdout, stderr = super().exec_command(cmd, in_data, sudoable)
            pid = int(self._last_exec_inspection.get("Pid", -1) or 0)
            if attempt == ATTEMPTS or not never_started(returncode, stdout, pid):
                return returncode, stdout, stderr
            refusal = stdout.decode(errors="replace").strip()
            display.warning(f"{self.get_option('remote_addr')}: the container runtime did not "
                            f"start the command ({refusal}); starting it again "
                            f"({attempt + 1}/{ATTEMPTS})")
            pause_before_starting_again(PAUSE_S)
        raise AssertionError("unreachable: the last attempt returns")
