"""files/vllm_flags_check.py against the vLLM double's package (PYTHONPATH), as a subprocess."""

import json
import shutil
import subprocess
import sys

import pytest
from vllm_double_fixtures import (
    DOUBLE_SRC,
    FILES,
    MTP,
    double_env,
    laid_out_double,
    role_serve_args,
)

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
    assert result["vllm_version"] == "0.27.1"


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


def stub_vllm(tmp_path):
    """A copy of the double's package to reshape per test; returns its PYTHONPATH folder."""
    shutil.copytree(DOUBLE_SRC / "vllm", tmp_path / "stub" / "vllm")
    return tmp_path / "stub"


def test_the_role_argv_passes_the_check(tmp_path):
    for argv in (role_serve_args(),
                 role_serve_args(vllm_dual_fast_model_revision="v2",
                                 vllm_dual_fast_quantization="inc"),
                 role_serve_args(vllm_dual_fast_tool_calling=False),
                 # the pool a fit pinned (playbooks/fit.yml)
                 role_serve_args(vllm_dual_fast_kv_cache_memory_bytes=1081344000)):
        code, result = check(tmp_path, json.dumps(argv))
        assert (code, result["error"]) == (0, None), argv


def test_the_pool_is_pinned_only_when_a_fit_set_it():
    assert "--kv-cache-memory-bytes" not in role_serve_args()
    argv = role_serve_args(vllm_dual_fast_kv_cache_memory_bytes=1081344000)
    assert argv[argv.index("--kv-cache-memory-bytes") + 1] == "1081344000"


@pytest.mark.parametrize("name", ["auto_round", "auto-round", "INC"])
def test_refuses_a_quantization_the_image_does_not_list(tmp_path, name):
    code, result = check(tmp_path, json.dumps(GOOD + ["--quantization", name]))
    assert code == 2
    assert result["ok"] is False
    assert f"--quantization {name}" in result["error"]
    assert "inc" in result["error"]  # the names it does know are listed
    assert result["quantization_check"].startswith("refused")


def test_accepts_a_listed_quantization_and_says_so(tmp_path):
    code, result = check(tmp_path, json.dumps(GOOD + ["-q", "inc"]))
    assert (code, result["error"]) == (0, None)
    assert result["quantization_check"] == "ok: inc is one of 31 methods"
    code, result = check(tmp_path, json.dumps(GOOD))
    assert (code, result["quantization_check"]) == (0, "not given")


def test_an_unreadable_quantization_list_is_noted_not_fatal(tmp_path):
    stub = stub_vllm(tmp_path)
    shutil.rmtree(stub / "vllm" / "model_executor", ignore_errors=True)
    code, result = check(tmp_path, json.dumps(GOOD + ["--quantization", "auto_round"]),
                         PYTHONPATH=str(stub))
    assert (code, result["ok"]) == (0, True)
    assert result["quantization_check"].startswith(
        "skipped: cannot import vllm.model_executor.layers.quantization.QUANTIZATION_METHODS")


def move_parser_to_the_0_33_location(stub, keep_old=False):
    """vLLM 0.33.0 has make_arg_parser in vllm.entrypoints.common.cli_args (none in openai)."""
    common = stub / "vllm" / "entrypoints" / "common"
    common.mkdir()
    (common / "__init__.py").write_text("")
    old = stub / "vllm" / "entrypoints" / "openai" / "cli_args.py"
    shutil.copy(old, common / "cli_args.py")
    if not keep_old:
        old.unlink()


def test_finds_the_parser_where_vllm_0_33_keeps_it(tmp_path):
    stub = stub_vllm(tmp_path)
    move_parser_to_the_0_33_location(stub)
    code, result = check(tmp_path, json.dumps(GOOD), PYTHONPATH=str(stub))
    assert (code, result["error"]) == (0, None)
    assert result["parser_module"] == "vllm.entrypoints.common.cli_args"
    code, result = check(tmp_path, json.dumps(GOOD + ["--no-such-flag"]), PYTHONPATH=str(stub))
    assert code == 2


def test_prefers_the_new_location_and_falls_back_to_the_old(tmp_path):
    stub = stub_vllm(tmp_path)
    move_parser_to_the_0_33_location(stub, keep_old=True)
    code, result = check(tmp_path, json.dumps(GOOD), PYTHONPATH=str(stub))
    assert (code, result["parser_module"]) == (0, "vllm.entrypoints.common.cli_args")
    code, result = check(tmp_path, json.dumps(GOOD))  # the double as is: 0.27.1's layout
    assert (code, result["parser_module"]) == (0, "vllm.entrypoints.openai.cli_args")


def test_a_broken_new_location_is_reported_not_skipped(tmp_path):
    stub = stub_vllm(tmp_path)
    move_parser_to_the_0_33_location(stub, keep_old=True)
    (stub / "vllm" / "entrypoints" / "common" / "cli_args.py").write_text("import no_such_dep\n")
    code, result = check(tmp_path, json.dumps(GOOD), PYTHONPATH=str(stub))
    assert code == 1
    assert "vllm.entrypoints.common.cli_args" in result["error"]
    assert "no_such_dep" in result["error"]


def test_the_0_33_0_image_layout_passes_with_the_new_parser_module(tmp_path):
    """The double laid out by layout.py as the vdf-vllm-double:0.33.0 image has it."""
    src = laid_out_double(tmp_path, "0.33.0")
    code, result = check(tmp_path, json.dumps(role_serve_args()), PYTHONPATH=str(src))
    assert (code, result["error"]) == (0, None)
    assert result["parser_module"] == "vllm.entrypoints.common.cli_args"
    assert result["vllm_version"] == "0.33.0"
    assert result["platform"] == "CpuPlatform (set by vllm_flags_check)"
    code, result = check(tmp_path, json.dumps(GOOD + ["--no-such-flag"]), PYTHONPATH=str(src))
    assert (code, result["parser_module"]) == (2, "vllm.entrypoints.common.cli_args")
    assert "unrecognized arguments: --no-such-flag" in result["error"]
    code, result = check(tmp_path, json.dumps(GOOD + ["--enable-auto-tool-choice"]),
                         PYTHONPATH=str(src))
    assert code == 2
    assert "--enable-auto-tool-choice requires --tool-call-parser" in result["error"]


def test_the_0_33_0_image_layout_knows_its_own_quantization_list(tmp_path):
    src = laid_out_double(tmp_path, "0.33.0")
    code, result = check(tmp_path, json.dumps(GOOD + ["-q", "inc"]), PYTHONPATH=str(src))
    assert (code, result["quantization_check"]) == (0, "ok: inc is one of 30 methods")
    code, result = check(tmp_path, json.dumps(GOOD + ["-q", "bitsandbytes"]), PYTHONPATH=str(src))
    assert code == 2
    assert result["quantization_check"].startswith("refused: --quantization bitsandbytes")
    assert check(tmp_path, json.dumps(GOOD + ["-q", "bitsandbytes"]))[0] == 0  # 0.27.1 lists it


# --- --kv-cache-dtype at vllm.config.CacheConfig (what the engine builds at start) --------------

def test_the_0_33_0_layout_refuses_a_kv_cache_dtype_its_cache_config_refuses(tmp_path):
    """vLLM 0.33.0's parser takes any --kv-cache-dtype; its CacheConfig refuses fp7 (exit 2)."""
    src = laid_out_double(tmp_path, "0.33.0")
    code, result = check(tmp_path, json.dumps(GOOD + ["--kv-cache-dtype", "fp7"]),
                         PYTHONPATH=str(src))
    assert code == 2
    assert result["ok"] is False
    assert result["error"].startswith("--kv-cache-dtype fp7 is refused by vllm.config.CacheConfig")
    assert "Invalid kv_cache_dtype: 'fp7'" in result["error"]
    assert result["kv_cache_dtype_check"].startswith("refused: --kv-cache-dtype fp7")
    code, result = check(tmp_path, json.dumps(GOOD + ["--kv-cache-dtype", "nvfp4_4over6"]),
                         PYTHONPATH=str(src))
    assert (code, result["error"]) == (0, None)
    assert result["kv_cache_dtype_check"] == "ok: nvfp4_4over6 (vllm.config.CacheConfig)"


@pytest.mark.parametrize("version", ["0.27.1", "0.33.0"])
def test_the_kv_cache_dtype_check_says_ok(tmp_path, version):
    src = laid_out_double(tmp_path, version)
    code, result = check(tmp_path, json.dumps(GOOD), PYTHONPATH=str(src))
    assert (code, result["kv_cache_dtype_check"]) == (0, "ok: fp8 (vllm.config.CacheConfig)")
    code, result = check(tmp_path, json.dumps(role_serve_args()), PYTHONPATH=str(src))
    assert (code, result["error"]) == (0, None)
    assert result["kv_cache_dtype_check"].startswith("ok: ")
    # a name both releases list, which the double of 0.27.1 used to refuse at parse time
    code, result = check(tmp_path, json.dumps(GOOD + ["--kv-cache-dtype", "float16"]),
                         PYTHONPATH=str(src))
    assert (code, result["kv_cache_dtype_check"]) == (0, "ok: float16 (vllm.config.CacheConfig)")


def stub_cache_config(tmp_path, body):
    """A copy of the double, 0.33.0's layout (any --kv-cache-dtype parses), whose
    vllm/config/__init__.py is `body` (a CacheConfig standing in for the image's; the parser's
    vllm.config.cache stays); returns its PYTHONPATH folder."""
    src = laid_out_double(tmp_path, "0.33.0")
    (src / "vllm" / "config" / "__init__.py").write_text(body)
    return src


def raising(statement):
    """A CacheConfig whose constructor runs `statement`."""
    return f"class CacheConfig:\n    def __init__(self, cache_dtype='auto'):\n        {statement}\n"


PYDANTIC_SHAPED = ("class Err(ValueError):\n    def errors(self):\n"
                   "        return [{{'loc': ({loc!r},), 'msg': {msg!r}, 'type': 'x'}}]\n")


@pytest.mark.parametrize("body, noted", [
    # the image's CacheConfig needs more than the cache dtype
    ("class CacheConfig:\n    def __init__(self, block_size, cache_dtype='auto'):\n        pass\n",
     "TypeError"),
    # it refuses something else than the cache dtype (pydantic-shaped: errors() with a loc)
    (PYDANTIC_SHAPED.format(loc="block_size", msg="Field required")
     + raising("raise Err('1 validation error for CacheConfig\\nblock_size\\n  Field required')"),
     "Field required"),
    (raising("raise RuntimeError('no device to size the cache for')"), "RuntimeError"),
    # importing it fails (a lazy import, as vLLM has some)
    ("def __getattr__(name):\n    if name == 'CacheConfig':\n"
     "        import no_such_dependency_of_vllm_config\n    raise AttributeError(name)\n",
     "no_such_dependency_of_vllm_config"),
    ("", "ImportError"),  # a vLLM without vllm.config.CacheConfig
], ids=["needs-more-args", "another-field", "runtime-error", "broken-import", "absent"])
def test_cache_config_failing_for_another_reason_is_noted_not_fatal(tmp_path, body, noted):
    src = stub_cache_config(tmp_path, body)
    code, result = check(tmp_path, json.dumps(GOOD + ["--kv-cache-dtype", "fp7"]),
                         PYTHONPATH=str(src))
    assert (code, result["ok"], result["error"]) == (0, True, None)
    assert result["kv_cache_dtype_check"].startswith("skipped: ")
    assert noted in result["kv_cache_dtype_check"]


@pytest.mark.parametrize("body", [
    # a plain ValueError naming the cache dtype (no pydantic errors())
    raising("raise ValueError(f'Invalid kv_cache_dtype: {cache_dtype!r}')"),
    # pydantic-shaped, the error on the cache_dtype field
    PYDANTIC_SHAPED.format(loc="cache_dtype", msg="Input should be 'auto'")
    + raising("raise Err('1 validation error for CacheConfig')"),
], ids=["plain-value-error", "pydantic-shaped"])
def test_cache_config_refusing_the_cache_dtype_is_a_refusal(tmp_path, body):
    src = stub_cache_config(tmp_path, body)
    code, result = check(tmp_path, json.dumps(GOOD + ["--kv-cache-dtype", "fp7"]),
                         PYTHONPATH=str(src))
    assert (code, result["ok"]) == (2, False)
    assert result["error"].startswith("--kv-cache-dtype fp7 is refused by vllm.config.CacheConfig")
    assert result["kv_cache_dtype_check"].startswith("refused: ")


def test_a_refused_quantization_still_reports_the_kv_cache_dtype(tmp_path):
    src = laid_out_double(tmp_path, "0.33.0")
    code, result = check(tmp_path, json.dumps(GOOD + ["-q", "bitsandbytes", "--kv-cache-dtype",
                                                      "fp7"]), PYTHONPATH=str(src))
    assert code == 2
    assert result["error"].startswith("--quantization bitsandbytes")  # the first refusal
    assert result["kv_cache_dtype_check"].startswith("refused: --kv-cache-dtype fp7")
