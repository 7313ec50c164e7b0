"""Secrets stay out of the release's compose file, the container's command line and its
configured environment (`docker inspect` Config.Env): the API key reaches vLLM as a Compose file
secret read by the entrypoint into VLLM_API_KEY, and the hub token never reaches the serving
container. The templates are rendered as the role renders them (Jinja with Ansible's filters and
trim_blocks), from deploy.yml's own settings; `docker compose config` checks the result where
the Compose CLI exists (it needs no Docker engine)."""

import json
import os
import shutil
import stat
import subprocess

import jinja2
import pytest
import yaml
from ansible.plugins.filter.core import FilterModule
from vllm_double_fixtures import ROLE, role_cfg, role_filters

KEY = "sk-known-Key-0123456789abcdef"
TOKEN = "hf_KnownTokenAbCdEf0123456789"  # noqa: S105 (test data)
RELEASE_TEMPLATES = ROLE / "templates" / "opt" / "vllm-dual-fast" / "releases" / "RELEASE"
SECRET_PATH = "/run/secrets/vllm_api_key"  # noqa: S105 (a path)
filters = role_filters()


# vars/main.yml: names the templates use as they are (not derived from other variables).
ROLE_INTERNAL_VARS = yaml.safe_load((ROLE / "vars" / "main.yml").read_text(encoding="utf-8"))


def role_vars(api_key=KEY, hf_token=TOKEN, **overrides):
    """The variables the release templates see, with deploy.yml's derived facts."""
    cfg = role_cfg(**overrides)
    args = filters.serve_args(cfg)
    variables = {
        "ansible_managed": "Ansible managed",
        "inventory_hostname": "rig1",
        "vllm_dual_fast_image": "vllm/vllm-openai:v0.27.1",
        "_vllm_dual_fast_image_ref": "vllm/vllm-openai@sha256:" + "0" * 64,     # after a pull
        "vllm_dual_fast_bind_address": "127.0.0.1",
        "vllm_dual_fast_port": 8000,
        "_vllm_dual_fast_engine_address": "127.0.0.1",    # vars/main.yml's, for a loopback bind
        "_vllm_dual_fast_engine_host_port": 8000,
        "_vllm_dual_fast_engine_bridge": ROLE_INTERNAL_VARS["_vllm_dual_fast_engine_bridge"],
        "vllm_dual_fast_hf_cache_dir": "/opt/vllm-dual-fast/hf-cache",
        "vllm_dual_fast_compile_cache_dir": "/opt/vllm-dual-fast/compile-cache",
        "vllm_dual_fast_patch_enabled": True,
        "vllm_dual_fast_tensor_parallel_size": 2,
        "vllm_dual_fast_healthcheck_start_period": "20m",
        "vllm_dual_fast_api_key": api_key,
        "vllm_dual_fast_hf_token": hf_token,
        "_vllm_dual_fast_serve_args": args,
        "_vllm_dual_fast_environment": filters.serve_environment(cfg),
        "_vllm_dual_fast_entrypoint": filters.entrypoint_script(args, True, len(api_key) > 0),
    }
    return variables


def render(name, variables):
    env = jinja2.Environment(  # noqa: S701 (renders YAML, as Ansible does: no HTML escaping)
        loader=jinja2.FileSystemLoader(str(RELEASE_TEMPLATES)), trim_blocks=True,
        undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    env.filters.update(FilterModule().filters())
    return env.get_template(name).render(variables)


def compose(api_key=KEY, hf_token=TOKEN):
    variables = role_vars(api_key, hf_token)
    text = render("compose.yml.j2", variables)
    return text, yaml.safe_load(text), variables


def test_key_and_token_appear_nowhere_in_the_compose_file():
    text, data, _ = compose()
    service = data["services"]["vllm"]
    entrypoint = service["entrypoint"][2]
    assert KEY not in text and TOKEN not in text
    assert KEY not in entrypoint and TOKEN not in entrypoint
    assert "--api-key" not in entrypoint
    assert not any(KEY in str(v) or TOKEN in str(v) for v in service["environment"].values())
    assert not {"VLLM_API_KEY", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"} & set(service["environment"])


def test_the_key_is_a_compose_file_secret_only_when_set():
    _, data, _ = compose()
    assert data["secrets"] == {"vllm_api_key": {"file": "./api-key"}}
    assert data["services"]["vllm"]["secrets"] == ["vllm_api_key"]
    assert f'VLLM_API_KEY="$$(cat {SECRET_PATH})"; export VLLM_API_KEY' in \
        data["services"]["vllm"]["entrypoint"][2]
    _, open_data, _ = compose(api_key="")
    assert "secrets" not in open_data
    assert "secrets" not in open_data["services"]["vllm"]
    assert "VLLM_API_KEY" not in open_data["services"]["vllm"]["entrypoint"][2]


def test_the_env_file_holds_no_secret():
    for key, token in ((KEY, TOKEN), ("", "")):
        text = render("vllm.env.j2", role_vars(key, token))
        assert KEY not in text and TOKEN not in text
        assert not [ln for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]


def test_the_secret_file_is_a_0600_release_file_beside_compose():
    tasks = yaml.safe_load((ROLE / "tasks" / "deploy.yml").read_text())
    files = next(t["vars"]["_files"] for t in tasks if "_files" in (t.get("vars") or {}))
    _, data, _ = compose()
    secret_file = data["secrets"]["vllm_api_key"]["file"]
    assert secret_file.startswith("./")
    assert files[secret_file[2:]]["mode"] == "0600"
    assert files[secret_file[2:]]["content"] == "{{ vllm_dual_fast_api_key }}"


def run_entrypoint(tmp_path, script, secret_text):
    """Runs the entrypoint as the container would (Compose turns `$$` into `$`), the secret at a
    temporary path and a fake `vllm` that records its argv and VLLM_API_KEY."""
    secret = tmp_path / "vllm_api_key"
    if secret_text is not None:
        secret.write_text(secret_text)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    fake = bin_dir / "vllm"
    fake.write_text('#!/bin/sh\nprintf "%s\\n" "$@" > "$OUT/argv"\n'
                    'printf "%s" "${VLLM_API_KEY-unset}" > "$OUT/key"\n')
    fake.chmod(0o755)
    body = script.replace("$$", "$").replace(SECRET_PATH, str(secret))
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "OUT": str(tmp_path)}
    return subprocess.run(["/bin/sh", "-c", body], env=env, capture_output=True, text=True,
                          timeout=10, check=False)


def test_entrypoint_exports_the_key_from_the_secret_and_keeps_it_off_argv(tmp_path):
    args = filters.serve_args(role_cfg())
    script = filters.entrypoint_script(args, False, True)
    result = run_entrypoint(tmp_path, script, KEY)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "key").read_text() == KEY
    argv = (tmp_path / "argv").read_text().splitlines()
    assert argv[:2] == ["serve", args[0]]
    assert KEY not in argv and "--api-key" not in argv


def test_entrypoint_without_a_readable_secret_does_not_serve(tmp_path):
    script = filters.entrypoint_script(["Org/Model"], False, True)
    result = run_entrypoint(tmp_path, script, None)
    assert result.returncode != 0
    assert not (tmp_path / "argv").exists()


def test_entrypoint_without_a_key_sets_none(tmp_path):
    script = filters.entrypoint_script(["Org/Model"], False, False)
    assert run_entrypoint(tmp_path, script, KEY).returncode == 0
    assert (tmp_path / "key").read_text() == "unset"


def docker_compose():
    if not shutil.which("docker"):
        return None
    try:
        ok = subprocess.run(["docker", "compose", "version"], capture_output=True, timeout=20,
                            check=False).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return None
    return ok or None


@pytest.mark.skipif(not docker_compose(), reason="no Docker Compose CLI here")
@pytest.mark.parametrize("api_key", [KEY, ""])
def test_docker_compose_resolves_no_secret_into_the_environment(tmp_path, api_key):
    """`docker compose config` shows the environment the container is created with (env_file
    merged in), i.e. what `docker inspect` would show as Config.Env."""
    variables = role_vars(api_key, TOKEN)
    (tmp_path / "compose.yml").write_text(render("compose.yml.j2", variables))
    (tmp_path / "vllm.env").write_text(render("vllm.env.j2", variables))
    fd = os.open(tmp_path / "api-key", os.O_WRONLY | os.O_CREAT, 0o600)
    os.write(fd, api_key.encode())
    os.close(fd)
    result = subprocess.run(
        ["docker", "compose", "--file", str(tmp_path / "compose.yml"), "config", "--format",
         "json"], capture_output=True, text=True, timeout=60, check=False, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    config = json.loads(result.stdout)
    service = config["services"]["vllm"]
    assert KEY not in json.dumps(service["environment"]) + json.dumps(service["entrypoint"])
    assert TOKEN not in result.stdout
    if api_key:
        assert KEY not in result.stdout
        assert config["secrets"]["vllm_api_key"]["file"] == str(tmp_path / "api-key")
        assert service["secrets"] == [{"source": "vllm_api_key", "target": SECRET_PATH}]
        assert stat.S_IMODE((tmp_path / "api-key").stat().st_mode) == 0o600
    else:
        assert "secrets" not in config and "secrets" not in service


@pytest.mark.skipif(not docker_compose(), reason="no Docker Compose CLI here")
def test_the_engine_is_alone_on_the_bridge_the_engine_guard_names(tmp_path):
    """The engine guard (tasks/engine_guard.yml) drops connections forwarded into one bridge by
    its interface name: the engine must be on that bridge, on no other network, with no IPv6
    address a neighbour could route to."""
    variables = role_vars()
    (tmp_path / "compose.yml").write_text(render("compose.yml.j2", variables))
    (tmp_path / "vllm.env").write_text(render("vllm.env.j2", variables))
    (tmp_path / "api-key").write_text(KEY)
    result = subprocess.run(
        ["docker", "compose", "--file", str(tmp_path / "compose.yml"), "config", "--format",
         "json"], capture_output=True, text=True, timeout=60, check=False, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    config = json.loads(result.stdout)
    bridge = variables["_vllm_dual_fast_engine_bridge"]
    assert list(config["services"]["vllm"]["networks"]) == ["engine"]
    network = config["networks"]["engine"]
    assert network["driver_opts"]["com.docker.network.bridge.name"] == bridge
    assert network.get("enable_ipv6") is False
    assert len(bridge) <= 15    # a Linux interface name
    guard = (ROLE / "templates/usr/local/sbin/vllm-dual-fast-engine-guard.j2").read_text()
    assert "bridge={{ _vllm_dual_fast_engine_bridge | quote }}" in guard
