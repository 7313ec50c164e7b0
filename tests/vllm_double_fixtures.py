"""Helpers for tests of the vLLM test double, files/smoke.py and files/vllm_flags_check.py.

Not a conftest: test modules import what they need. The double runs as a subprocess
(`python -m vllm.entrypoints.cli.main serve ...` with PYTHONPATH on the double's source) on a
free loopback port, so its crash (os._exit) ends only that process.
"""

import importlib.util
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

from engine_contract import request

ROOT = Path(__file__).resolve().parents[1]
DOUBLE_IMAGE = ROOT / "molecule" / "images" / "vllm-double"
DOUBLE_SRC = DOUBLE_IMAGE / "src"
FILES = ROOT / "files"
MTP = '{"method": "mtp", "num_speculative_tokens": 4}'

# A minimal stand-in for flashinfer/decode.py: only the shape the double and patcher look at
# (the plan-buffer allocation, laid out as FlashInfer 0.7 lays it out). Not FlashInfer code.
DECODE_TEMPLATE = '''\
import torch


class BatchDecodeWithPagedKVCacheWrapper:
    def __init__(self, float_workspace_buffer):
        self._int_workspace_buffer = torch.empty((8 * 1024 * 1024,), dtype=torch.uint8)
        self._pin_memory_int_workspace_buffer = torch.empty(
            (8 * 1024 * 1024,),
            dtype=torch.uint8,
            pin_memory={pin},
            device="cpu",
        )

    def reset_workspace_buffer(self, float_workspace_buffer, int_workspace_buffer):
        self._pin_memory_int_workspace_buffer = torch.empty(
            self._int_workspace_buffer.shape,
            dtype=self._int_workspace_buffer.dtype,
            device="cpu",
            pin_memory={pin},
        )
'''


def write_flashinfer(directory: Path, pinned: bool = True, text=None) -> Path:
    """A fake flashinfer package folder holding decode.py; returns the folder."""
    package = directory / "flashinfer"
    package.mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text("")
    source = text if text is not None else DECODE_TEMPLATE.format(pin=pinned)
    (package / "decode.py").write_text(source)
    return package


def import_double(monkeypatch) -> None:
    """Makes the double's `vllm` importable in-process, fresh, without writing bytecode."""
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    monkeypatch.syspath_prepend(str(DOUBLE_SRC))
    for name in [m for m in sys.modules if m == "vllm" or m.startswith("vllm.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.delenv("NVIDIA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("VLLM_DOUBLE_DEVICE", raising=False)


def laid_out_double(directory: Path, version: str) -> Path:
    """The double as its image holds it in /opt/vllm-double (src/, install_double.py, layout.py),
    copied under `directory` and laid out as vLLM `version` by layout.py, the script the
    Dockerfiles run (VLLM_LAYOUT, vllm-double-0.33/Dockerfile); returns the copy's src folder,
    the PYTHONPATH for double_env(..., PYTHONPATH=str(src))."""
    opt = directory / f"opt-vllm-double-{version}"
    shutil.copytree(DOUBLE_SRC, opt / "src", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for name in ("install_double.py", "layout.py"):
        shutil.copy(DOUBLE_IMAGE / name, opt / name)
    result = subprocess.run([sys.executable, str(opt / "layout.py"), version,
                             str(opt / "src" / "vllm")], capture_output=True, text=True,
                            timeout=30, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"layout.py {version} exited {result.returncode}: {result.stderr}")
    return opt / "src"


# Runs in a subprocess with a laid-out double on PYTHONPATH: builds the serve parser as `vllm serve`
# does (with vLLM's CPU platform set, as vllm_flags_check.py sets it), parses argv (JSON in
# argv[1]) and prints the parsed flags as JSON; argparse's refusal exits 2 with its message.
PARSE_SERVE_CODE = """
import json, sys
import vllm.platforms
from vllm.platforms.cpu import CpuPlatform
vllm.platforms._current_platform = CpuPlatform()
from vllm.entrypoints.cli.main import parser_module
from vllm.utils.argparse_utils import FlexibleArgumentParser
parser = parser_module().make_arg_parser(FlexibleArgumentParser(prog="vllm serve"))
print(json.dumps(vars(parser.parse_args(json.loads(sys.argv[1]))), default=repr))
"""


def run_in_double(src: Path, code: str, *args) -> subprocess.CompletedProcess:
    """`python -c code args...` with the double's source folder `src` (DOUBLE_SRC, or a
    laid_out_double copy) on PYTHONPATH, no bytecode written, no GPU in the environment."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("VLLM_", "NVIDIA_", "HF_", "VDF_"))}
    env.update({"PYTHONPATH": str(src), "PYTHONDONTWRITEBYTECODE": "1"})
    return subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True,
                          text=True, timeout=30, check=False)


def parse_serve(src: Path, argv) -> tuple:
    """(exit code, parsed flags or None, stderr) of the serve parser of the double in `src`."""
    result = run_in_double(src, PARSE_SERVE_CODE, json.dumps(list(argv)))
    parsed = json.loads(result.stdout) if result.returncode == 0 else None
    return result.returncode, parsed, result.stderr


def write_rig_knobs(env: dict, **knobs) -> None:
    """Writes $HF_HOME/vllm-double.json of the double's environment (a rig's knob file)."""
    home = Path(env["HF_HOME"])
    home.mkdir(parents=True, exist_ok=True)
    (home / "vllm-double.json").write_text(json.dumps(knobs))


def load_file_module(name: str, path=None):
    """Imports files/<name>.py (or the file at `path`) as a module: scripts, not a package. It
    is registered under its name, and files/ is on the import path, as when it runs beside its
    siblings (smoke.py's smoke_speed.py and smoke_long.py import from it)."""
    if str(FILES) not in sys.path:
        sys.path.append(str(FILES))
    spec = importlib.util.spec_from_file_location(name, path or FILES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def double_env(tmp_path: Path, flashinfer_dir=None, **extra) -> dict:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("VLLM_", "NVIDIA_", "HF_", "VDF_"))}
    env.update({
        "PYTHONPATH": str(DOUBLE_SRC),
        "PYTHONDONTWRITEBYTECODE": "1",  # keep the image's build context free of __pycache__
        "VLLM_DOUBLE_STATE_DIR": str(tmp_path / "state"),
        "VLLM_DOUBLE_FLASHINFER_DIR": str(flashinfer_dir or write_flashinfer(tmp_path, False)),
        "VLLM_DOUBLE_STARTUP_S": "0",
        "VLLM_DOUBLE_LATENCY_S": "0.3",
        "VLLM_DOUBLE_TOKEN_S": "0",
        "NVIDIA_VISIBLE_DEVICES": "0,1",
        "HF_HOME": str(tmp_path / "hf"),
    })
    env.update({k: str(v) for k, v in extra.items()})
    return env


def run_vllm(args, env, timeout=30) -> subprocess.CompletedProcess:
    """Runs the double's `vllm` command to completion."""
    return subprocess.run([sys.executable, "-m", "vllm.entrypoints.cli.main", *args], env=env,
                          capture_output=True, text=True, timeout=timeout, check=False)


def http(method, url, payload=None, key=None, timeout=10):
    """(status, parsed JSON or None) for one request; status None on connection errors."""
    status, body = request(method, url, payload, key=key, timeout=timeout)
    if status == "refused":
        return None, None
    return status, None if isinstance(body, str) else body


class DoubleServer:
    """One `vllm serve` of the double as a subprocess on a free loopback port."""

    def __init__(self, tmp_path: Path, args=(), model="m", env=None, port=None):
        self.tmp_path = tmp_path
        self.port = port or free_port()    # a port: the same engine started again there
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.model = model
        self.args = ["serve", model, "--host", "127.0.0.1", "--port", str(self.port), *args]
        self.env = env if env is not None else double_env(tmp_path)
        self.proc = None
        self.stdout_path = tmp_path / f"double-{self.port}.out"
        self.stderr_path = tmp_path / f"double-{self.port}.err"

    def start(self, wait=True) -> "DoubleServer":
        with open(self.stdout_path, "w") as out, open(self.stderr_path, "w") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "vllm.entrypoints.cli.main", *self.args],
                env=self.env, stdout=out, stderr=err)
        if wait:
            self.wait_healthy()
        return self

    def wait_healthy(self, timeout=15.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"double exited {self.proc.returncode}: {self.stderr()}")
            if http("GET", self.base_url + "/health", timeout=1)[0] == 200:
                return
            time.sleep(0.05)
        raise RuntimeError("double never became healthy")

    def chat(self, key=None, max_tokens=16, model=None):
        payload = {"model": model or self.model, "max_tokens": max_tokens,
                   "messages": [{"role": "user", "content": "Say hi."}]}
        return http("POST", self.base_url + "/v1/chat/completions", payload, key=key)

    def stderr(self) -> str:
        return self.stderr_path.read_text() if self.stderr_path.exists() else ""

    def stdout(self) -> str:
        return self.stdout_path.read_text() if self.stdout_path.exists() else ""

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def double_factory(tmp_path: Path):
    """Generator for a fixture: yields start(args, env=None, model='m'), stops all at the end."""
    servers = []

    def start(args=(), env=None, model="m", wait=True) -> DoubleServer:
        server = DoubleServer(tmp_path, args, model, env)
        servers.append(server)
        return server.start(wait=wait)

    yield start
    for server in servers:
        server.stop()


ROLE = ROOT / "roles" / "vllm_dual_fast"


def role_filter_file(name: str = "vllm_dual_fast"):
    """One of the role's filter plugin files (roles/vllm_dual_fast/filter_plugins/<name>.py),
    loaded on its own as Ansible loads each."""
    spec = importlib.util.spec_from_file_location(
        f"vdf_role_{name}", ROLE / "filter_plugins" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def role_filters():
    """The role's serve filters (filter_plugins/vllm_dual_fast.py)."""
    return role_filter_file()


def role_cfg(**overrides) -> dict:
    """The settings dict deploy.yml hands to the serve filters (its `_cfg`), rendered from the
    role's defaults plus overrides with Jinja's native types, as Ansible keeps them."""
    import yaml
    from ansible.plugins.filter.core import FilterModule
    from jinja2.nativetypes import NativeEnvironment

    tasks = yaml.safe_load((ROLE / "tasks" / "deploy.yml").read_text())
    cfg = next(t["vars"]["_cfg"] for t in tasks if "_cfg" in (t.get("vars") or {}))
    variables = dict(yaml.safe_load((ROLE / "defaults" / "main.yml").read_text()), **overrides)
    env = NativeEnvironment()
    env.filters.update(FilterModule().filters())  # bool, to_json, ... as Ansible has them
    # the P2P check's decision (p2p_check.yml), which _cfg's p2p_decision reads
    env.filters.update(role_filter_file("vllm_dual_fast_p2p").FilterModule().filters())
    return {key: env.from_string(value).render(variables) if isinstance(value, str) else value
            for key, value in cfg.items()}


def role_serve_args(**overrides) -> list:
    """The `vllm serve` argv the role builds from its defaults plus overrides."""
    return role_filters().serve_args(role_cfg(**overrides))
