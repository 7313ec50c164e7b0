"""The patch's effect on the real package: CPU torch 2.13.0 + flashinfer-python 0.7.2.post1.

On a machine without CUDA, FlashInfer's pinned plan buffer cannot be allocated at all, so building a
decode wrapper is a direct probe of what the patch changed. Runs in subprocesses against a private
copy of the package found through PYTHONPATH, as the container's python would find site-packages.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from flashinfer_releases import make_tree, run_patcher

VERSION = "0.7.2.post1"  # what vLLM 0.33.0 pins
PROBE = """
import json, torch, flashinfer
out = {"file": flashinfer.__file__}
try:
    buf = torch.empty(128 << 20, dtype=torch.uint8)
    w = flashinfer.BatchDecodeWithPagedKVCacheWrapper(buf, "NHD")
    out["pinned"] = w._pin_memory_int_workspace_buffer.is_pinned()
except RuntimeError as exc:
    out["error"] = str(exc)
print(json.dumps(out))
"""


def probe(site, cwd) -> dict:
    env = {**os.environ, "PYTHONPATH": str(site)}
    proc = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, cwd=cwd, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    base = tmp_path_factory.mktemp("fi-site")
    make_tree(VERSION, base)
    return base


def test_unpatched_raises_patched_constructs_unpinned(site, tmp_path):
    lib = site / "flashinfer"
    env = {"PYTHONPATH": str(site)}  # no --lib-root: located with find_spec, as in a container

    before = probe(site, tmp_path)
    assert before["file"] == str(lib / "__init__.py")
    assert "pin_memory=True requires a CUDA" in before.get("error", ""), before

    rc, res, proc = run_patcher(env=env)
    assert rc == 0, proc.stderr
    assert (res["status"], res["lib_root"], res["flashinfer_version"]) == (
        "patched",
        str(lib),
        VERSION,
    )
    after = probe(site, tmp_path)
    assert after.get("pinned") is False, after

    assert run_patcher("--revert", env=env)[0] == 0
    assert "error" in probe(site, tmp_path)
