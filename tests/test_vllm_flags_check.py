"""files/vllm_flags_check.py against the vLLM double's package (PYTHONPATH), as a subprocess."""

import json
import shutil
import subprocess
import sys

import pytest
from vllm_double_fixtures import DOUBLE_SRC, FILES, MTP, double_env

CHECK = str(FILES / "vllm_flags_check.py")
GOOD = ["Org/Model", "--tensor-parallel-size", "2", "--max-num-seqs", "4",
        "--kv-cache-dtype", "fp8", "--enable-prefix-caching", "--speculative-config", MTP,
        "--served-model-name", "qwen"]


def check(tmp_path, *argv, **env_changes):
    env = double_env(tmp_path)
    del env["NVIDIA_VISIBLE_DEVICES"]  # as in a one-off container without GPUs
    env.update(env_changes)
    result = subprocess.run([sys.executable, CHECK, *argv], env=env, capture_output=True,
                            text=True, timeout=30, check=False)
    lines = result.stdout.strip().splitlines()
    return result.returncode, json.loads(lines[-1]) if lines else None


def test_accepts_the_role_argv_with_a_cpu_platform_set(tmp_path):
    code, result = check(tmp_path, json.dumps(GOOD))
    assert code == 0
    assert result["ok"] is True
    assert result["error"] is None
    assert result["platform"] == "CpuPlatform (set by vllm_flags_check)"
    assert result["vllm_version"] == "0.33.0"


def test_keeps_a_platform_vllm_inferred(tmp_path):
    code, result = check(tmp_path, json.dumps(GOOD), NVIDIA_VISIBLE_DEVICES="0,1")
    assert (code, result["platform"]) == (0, "CudaPlatform")


def test_argv_after_double_dash_and_leading_serve(tmp_path):
    assert check(tmp_path, "--", "serve", *GOOD)[0] == 0
    assert check(tmp_path, json.dumps(["vllm", "serve", *GOOD]))[0] == 0


@pytest.mark.parametrize("extra, message", [
    (["--no-such-flag"], "unrecognized arguments: --no-such-flag"),
    (["--kv-cache-dtype", "fp9"], "invalid choice: 'fp9'"),
    (["--speculative-config", "{broken"], "invalid JSON"),
    (["--enable-auto-tool-choice"], "--enable-auto-tool-choice requires --tool-call-parser"),
])
def test_rejects_with_exit_2(tmp_path, extra, message):
    code, result = check(tmp_path, json.dumps(GOOD + extra))
    assert code == 2
    assert result["ok"] is False
    assert message in result["error"]


def test_bad_usage_exits_2(tmp_path):
    assert check(tmp_path)[0] == 2
    assert check(tmp_path, '{"not": "a list"}')[0] == 2


def test_without_vllm_it_could_not_run(tmp_path):
    code, result = check(tmp_path, json.dumps(GOOD), PYTHONPATH=str(tmp_path))
    assert code == 1
    assert "cannot import vLLM's parser" in result["error"]


def test_platform_setting_is_what_makes_it_work(tmp_path):
    """Without the CPU platform the double, like vLLM, cannot build the parser (exit 1)."""
    # the double's package, less the CPU platform the check would set
    shutil.copytree(DOUBLE_SRC / "vllm", tmp_path / "stub" / "vllm")
    (tmp_path / "stub" / "vllm" / "platforms" / "cpu.py").unlink()
    code, result = check(tmp_path, json.dumps(GOOD), PYTHONPATH=str(tmp_path / "stub"))
    assert code == 1
    assert "Failed to infer device type" in result["error"]
    assert result["platform"].startswith("unspecified (could not set CpuPlatform")
