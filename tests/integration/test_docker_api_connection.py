"""The simulated rigs' connection (plugins/connection/vdf_docker_api.py) against the real engine:
an exec the container runtime refused before any process ran is started again, and nothing else
is. The runtime's transient refusal under load ("read init-p: connection reset by peer") cannot
be caused on purpose; a working directory that does not exist yet makes runc refuse the same way
(exit 126, Pid 0, "OCI runtime exec failed" on stdout), and one created between two attempts lets
the next one start."""

import configparser
import sys
import uuid
from pathlib import Path

import pytest
import yaml
from docker_engine import docker, needs_docker

ROOT = Path(__file__).resolve().parents[2]



@pytest.fixture(scope="module")
def container():
    name = f"vdf-connection-test-{uuid.uuid4().hex[:8]}"
    docker("run", "-d", "--name", name, "vdf-base:debian13", "sleep", "600")
    try:
        yield name
    finally:
        docker("rm", "-f", name, check=False)


@pytest.fixture(scope="module")
def loader():
    """Ansible's connection plugin loader, with the directory ansible.cfg names."""
    from ansible.plugins.loader import connection_loader, init_plugin_loader

    init_plugin_loader()
    connection_loader.add_directory(str(ROOT / "plugins/connection"))
    return connection_loader


@pytest.fixture
def connection(container, loader):
    """The plugin as Ansible loads it, set for `container`."""
    from ansible.playbook.play_context import PlayContext

    plugin = loader.get("vdf_docker_api", PlayContext(), sys.stdin)
    assert plugin is not None, "no vdf_docker_api under plugins/connection"

    def connect(**variables):
        plugin.set_options(var_options={"inventory_hostname": container, **variables})
        plugin._connect()
        return plugin
    return connect


def attempts_of(module, monkeypatch, between=lambda: None):
    """Counts the pauses the plugin takes before starting a command again (running `between`)."""
    pauses = []

    def pause(_seconds):
        pauses.append(_seconds)
        between()
    monkeypatch.setattr(module, "pause_before_starting_again", pause)
    return pauses


@needs_docker
def test_an_exec_the_runtime_never_started_is_started_again_once_it_can_be(
        container, connection, monkeypatch):
    workdir = f"/tmp/{uuid.uuid4().hex[:8]}"
    plugin = connection(ansible_docker_working_dir=workdir)
    module = sys.modules[type(plugin).__module__]
    pauses = attempts_of(module, monkeypatch, lambda: docker("exec", container, "mkdir", workdir))
    returncode, stdout, stderr = plugin.exec_command("pwd; echo ran")
    assert (returncode, stdout, stderr) == (0, f"{workdir}\nran\n".encode(), b""), stdout
    assert len(pauses) == 1, pauses


@needs_docker
def test_a_refusal_that_stays_is_returned_as_the_engine_gave_it(connection, monkeypatch):
    plugin = connection(ansible_docker_working_dir="/nonexistent")
    pauses = attempts_of(sys.modules[type(plugin).__module__], monkeypatch)
    returncode, stdout, _ = plugin.exec_command("echo ran")
    assert returncode == 126 and stdout.startswith(b"OCI runtime exec failed"), stdout
    assert b"/nonexistent" in stdout and b"ran" not in stdout, stdout
    assert len(pauses) == 2, pauses    # three attempts in all


@needs_docker
def test_a_command_that_ran_is_never_run_twice(container, connection, monkeypatch):
    # exit 126 and the runtime's words, from a process that ran: a second run would append again
    plugin = connection()
    pauses = attempts_of(sys.modules[type(plugin).__module__], monkeypatch)
    log = f"/tmp/{uuid.uuid4().hex[:8]}"
    returncode, stdout, _ = plugin.exec_command(
        f"echo ran >> {log}; echo 'OCI runtime exec failed: no'; exit 126")
    assert returncode == 126 and stdout.startswith(b"OCI runtime exec failed"), stdout
    assert docker("exec", container, "cat", log).stdout == "ran\n"
    assert pauses == []


@needs_docker
@pytest.mark.parametrize("source", [".config/molecule/config.yml", "inventory/hosts.yml"])
def test_the_simulated_rigs_wait_a_minute_for_the_engine_not_ten_seconds(connection, source):
    # CI failed on "Read timed out. (read timeout=10)": Ansible's own 10 s reached the client
    config = configparser.ConfigParser()
    config.read(ROOT / "ansible.cfg")
    assert config["defaults"]["connection_plugins"] == "plugins/connection"
    text = (ROOT / source).read_text()
    variables = (yaml.safe_load(text)["provisioner"]["connection_options"] if "molecule" in source
                 else yaml.safe_load(text)["all"]["children"]["sim"]["hosts"]["vdf-sim-rig"])
    assert "vdf_docker_api" in variables["ansible_connection"], variables
    plugin = connection(ansible_docker_timeout=variables["ansible_docker_timeout"])
    assert plugin.get_option("timeout") >= 60
    assert plugin.client.timeout >= 60
