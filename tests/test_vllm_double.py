"""The vLLM test double (molecule/images/vllm-double): parser, HTTP, the #40756 crash, records."""

import concurrent.futures
import json
import os
import stat
import subprocess
import sys
import threading
import time

import pytest
from vllm_double_fixtures import (
    DECODE_TEMPLATE,
    MTP,
    double_env,
    double_factory,
    http,
    import_double,
    run_vllm,
    write_flashinfer,
)

CUDA_ERROR = "torch.AcceleratorError: CUDA error: an illegal memory access was encountered"
ALL_INTERFACES = "0.0.0.0"  # noqa: S104 (inside its container, vLLM listens on all of them)
ROLE_ARGV = [
    "Org/Model", "--host", ALL_INTERFACES, "--port", "8000", "--quantization", "inc",
    "--dtype", "bfloat16", "--tensor-parallel-size", "2", "--max-model-len", "32k",
    "--gpu-memory-utilization", "0.92", "--max-num-seqs", "8", "--max-num-batched-tokens", "8192",
    "--kv-cache-dtype", "fp8_e4m3", "--enable-prefix-caching", "--enable-chunked-prefill",
    "--reasoning-parser", "qwen3", "--tool-call-parser", "hermes", "--enable-auto-tool-choice",
    "--speculative-config", MTP, "--disable-custom-all-reduce", "--served-model-name", "qwen",
    "--api-key", "k", "--download-dir", "/models", "--trust-remote-code",
    "--generation-config", "vllm",
]


@pytest.fixture
def double(tmp_path):
    yield from double_factory(tmp_path)


@pytest.fixture
def double_parser(monkeypatch):
    """The double's make_arg_parser(FlexibleArgumentParser(...)), imported in-process."""
    import_double(monkeypatch)
    import vllm.platforms
    from vllm.entrypoints.openai.cli_args import make_arg_parser
    from vllm.platforms.cpu import CpuPlatform
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    vllm.platforms._current_platform = CpuPlatform()
    return make_arg_parser(FlexibleArgumentParser(prog="vllm serve"))


def burst(server, n, key=None):
    """n chat requests released together; their HTTP statuses (None: connection lost)."""
    barrier = threading.Barrier(n)

    def one(_):
        barrier.wait(timeout=10)
        return server.chat(key=key)[0]

    with concurrent.futures.ThreadPoolExecutor(n) as pool:
        return list(pool.map(one, range(n)))


# --- parser ------------------------------------------------------------------------------------

def test_parser_accepts_the_role_flags(double_parser):
    args = double_parser.parse_args(ROLE_ARGV)
    assert args.model_tag == "Org/Model"
    assert args.tensor_parallel_size == 2
    assert args.max_model_len == 32000
    assert args.kv_cache_dtype == "fp8_e4m3"
    assert args.enable_prefix_caching is True
    assert args.speculative_config == {"method": "mtp", "num_speculative_tokens": 4}
    assert args.served_model_name == ["qwen"]
    assert args.api_key == ["k"]


def test_parser_takes_underscores_like_vllm(double_parser):
    assert double_parser.parse_args(["m", "--max_num_seqs", "4"]).max_num_seqs == 4


@pytest.mark.parametrize("argv, message", [
    (["m", "--bogus-flag"], "unrecognized arguments: --bogus-flag"),
    (["m", "--kv-cache-dtype", "fp9"], "invalid choice: 'fp9'"),
    (["m", "--dtype", "int3"], "invalid choice: 'int3'"),
    (["m", "--speculative-config", "{not json"], "invalid JSON"),
    (["m", "--max-num-seqs", "four"], "invalid int value"),
])
def test_serve_rejects_bad_flags_with_exit_2(tmp_path, argv, message):
    result = run_vllm(["serve", *argv], double_env(tmp_path))
    assert result.returncode == 2
    assert message in result.stderr
    assert not (tmp_path / "state" / "last-start.json").exists()


def test_parser_needs_a_platform_like_vllm(monkeypatch):
    import_double(monkeypatch)
    from vllm.entrypoints.openai.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    with pytest.raises(RuntimeError, match="Failed to infer device type"):
        make_arg_parser(FlexibleArgumentParser(prog="vllm serve"))


def test_serve_without_gpus_fails(tmp_path):
    env = double_env(tmp_path)
    del env["NVIDIA_VISIBLE_DEVICES"]
    result = run_vllm(["serve", "m"], env)
    assert result.returncode == 1
    assert "Failed to infer device type" in result.stderr
    env["NVIDIA_VISIBLE_DEVICES"] = "0"
    result = run_vllm(["serve", "m", "--tensor-parallel-size", "2"], env)
    assert result.returncode == 1
    assert "number of required GPUs (2)" in result.stderr


# vLLM 0.27.1's QUANTIZATION_METHODS (vllm/model_executor/layers/quantization/__init__.py),
# in order.
VLLM_0_27_1_QUANTIZATION_METHODS = [
    "awq", "auto_awq", "fp8", "fbgemm_fp8", "fp_quant", "modelopt", "modelopt_fp4",
    "modelopt_mxfp8", "modelopt_mixed", "auto_gptq", "gptq", "gptq_marlin", "awq_marlin",
    "humming", "compressed-tensors", "bitsandbytes", "experts_int8", "quark", "moe_wna16",
    "torchao", "inc", "mxfp4", "gpt_oss_mxfp4", "deepseek_v4_fp8", "online", "fp8_per_tensor",
    "fp8_per_block", "fp8_per_channel", "int8_per_channel_weight_only", "nvfp4_per_token", "mxfp8",
]


def test_quantization_methods_are_vllm_0_27_1s(monkeypatch):
    import_double(monkeypatch)
    from vllm.model_executor.layers.quantization import QUANTIZATION_METHODS

    assert QUANTIZATION_METHODS == VLLM_0_27_1_QUANTIZATION_METHODS
    assert len(QUANTIZATION_METHODS) == 31
    assert "auto_round" not in QUANTIZATION_METHODS and "auto-round" not in QUANTIZATION_METHODS


@pytest.mark.parametrize("name", ["no_such_method", "auto_round", "auto-round", "INC"])
def test_unknown_quantization_parses_but_fails_at_start(tmp_path, double_parser, name):
    assert double_parser.parse_args(["m", "--quantization", name]).quantization == name
    result = run_vllm(["serve", "m", "--quantization", name], double_env(tmp_path))
    assert result.returncode == 1
    assert f"Unknown quantization method: {name}" in result.stderr
    assert "Application startup complete" not in result.stdout


@pytest.mark.parametrize("args", [["--quantization", "inc"], ["-q", "gptq_marlin"], []])
def test_a_listed_quantization_or_none_starts(double, args):
    assert double(args).chat()[0] == 200


def test_auto_tool_choice_without_a_parser_is_refused(tmp_path):
    result = run_vllm(["serve", "m", "--enable-auto-tool-choice"], double_env(tmp_path))
    assert result.returncode == 1
    assert "--enable-auto-tool-choice requires --tool-call-parser" in result.stderr
    assert not (tmp_path / "state" / "last-start.json").exists()


def test_revision_and_tokenizer_revision_are_accepted(double_parser, double, tmp_path):
    args = double_parser.parse_args(["m", "--revision", "v1", "--tokenizer-revision", "v1"])
    assert (args.revision, args.tokenizer_revision) == ("v1", "v1")
    double(["--revision", "main", "--tokenizer-revision", "main"]).stop()
    record = json.loads((tmp_path / "state" / "last-start.json").read_text())
    assert record["args"]["tokenizer_revision"] == "main"


def test_version_and_unknown_subcommand(tmp_path):
    result = run_vllm(["--version"], double_env(tmp_path))
    assert (result.returncode, result.stdout.strip()) == (0, "0.33.0")
    assert run_vllm(["bench"], double_env(tmp_path)).returncode == 2


# --- HTTP --------------------------------------------------------------------------------------

def test_serves_openai_shaped_answers(double):
    server = double(["--served-model-name", "qwen", "alias"], model="Org/Model")
    status, models = http("GET", server.base_url + "/v1/models")
    assert status == 200
    assert [m["id"] for m in models["data"]] == ["qwen", "alias"]
    status, body = server.chat(model="qwen", max_tokens=5)
    assert status == 200
    assert body["choices"][0]["message"]["content"]
    usage = body["usage"]
    assert usage["completion_tokens"] == 5
    assert usage["total_tokens"] == usage["prompt_tokens"] + 5
    assert server.chat(model="Org/Model")[0] == 404


def test_api_key_from_flag_and_env(double, tmp_path):
    server = double(["--api-key", "s3cret"])
    assert http("GET", server.base_url + "/health")[0] == 200
    assert http("GET", server.base_url + "/v1/models") == (401, {"error": "Unauthorized"})
    assert server.chat()[0] == 401
    assert server.chat(key="wrong")[0] == 401
    assert server.chat(key="s3cret")[0] == 200
    by_env = double(env=double_env(tmp_path, VLLM_API_KEY="from-env"))
    assert http("GET", by_env.base_url + "/v1/models")[0] == 401
    assert by_env.chat()[0] == 401
    assert by_env.chat(key="wrong")[0] == 401
    assert by_env.chat(key="from-env")[0] == 200
    assert http("GET", by_env.base_url + "/health")[0] == 200
    # as vLLM: --api-key wins over VLLM_API_KEY
    both = double(["--api-key", "flag"], env=double_env(tmp_path, VLLM_API_KEY="from-env"))
    assert both.chat(key="from-env")[0] == 401
    assert both.chat(key="flag")[0] == 200


def test_reasoning_parser_answers_with_reasoning(double):
    server = double(["--reasoning-parser", "qwen3"])
    status, body = server.chat(max_tokens=4)
    message = body["choices"][0]["message"]
    assert status == 200
    assert message["content"] is None
    assert message["reasoning_content"]
    status, body = server.chat(max_tokens=20)
    assert body["choices"][0]["message"]["content"]


# --- the crash rule (vllm issue #40756) --------------------------------------------------------

def test_pinned_mtp_four_in_flight_kills_the_process(double, tmp_path):
    env = double_env(tmp_path, write_flashinfer(tmp_path / "fi", pinned=True))
    server = double(["--max-num-seqs", "4", "--speculative-config", MTP], env=env)
    assert burst(server, 3) == [200, 200, 200]
    assert server.proc.poll() is None
    statuses = burst(server, 4)
    assert server.proc.wait(timeout=10) == 134  # aborted, as a CUDA illegal memory access ends
    assert 200 not in statuses
    assert CUDA_ERROR in server.stderr()
    last_line = server.stderr().splitlines()[-1]
    assert "CUDA error: an illegal memory access was encountered" in last_line
    record = json.loads((tmp_path / "state" / "last-start.json").read_text())
    assert record["crash"]["armed"] is True
    assert record["flashinfer"]["state"] == "pinned"


def test_unpinned_survives_four_and_eight(double, tmp_path):
    env = double_env(tmp_path, write_flashinfer(tmp_path / "fi", pinned=False))
    server = double(["--max-num-seqs", "8", "--speculative-config", MTP], env=env)
    assert burst(server, 4) == [200] * 4
    assert burst(server, 8) == [200] * 8
    assert server.proc.poll() is None
    assert http("GET", server.base_url + "/health")[0] == 200
    assert CUDA_ERROR not in server.stderr()


@pytest.mark.parametrize("args", [
    ["--max-num-seqs", "4"],                                   # no speculative decoding
    ["--max-num-seqs", "3", "--speculative-config", MTP],      # never 4 in flight in the engine
    ["--max-num-seqs", "4", "--speculative-config",
     '{"method": "mtp", "num_speculative_tokens": 0}'],
])
def test_pinned_survives_without_the_other_conditions(double, tmp_path, args):
    env = double_env(tmp_path, write_flashinfer(tmp_path / "fi", pinned=True))
    server = double(args, env=env)
    assert burst(server, 4) == [200] * 4
    assert server.proc.poll() is None


def test_broken_decode_py_stops_the_start(tmp_path):
    env = double_env(tmp_path, write_flashinfer(tmp_path / "fi", text="def broken(:\n"))
    result = run_vllm(["serve", "m"], env)
    assert result.returncode == 1
    assert "SyntaxError" in result.stderr


def test_decode_judgement(monkeypatch, tmp_path):
    import_double(monkeypatch)
    from vllm._double import flashinfer_check as fc

    one_line = "self._pin_memory_int_workspace_buffer = torch.empty(n, pin_memory=True)\n"
    assert fc.pinned_allocations(one_line) == [(1, True)]
    assert fc.pinned_allocations(one_line.replace("True", "False")) == [(1, False)]
    assert fc.pinned_allocations("self._pin_memory_int_workspace_buffer = torch.empty(n)\n") \
        == [(1, False)]
    assert fc.pinned_allocations(one_line.replace("True", "pinned")) == [(1, True)]
    assert fc.pinned_allocations("self._pin_memory_int_workspace_buffer_p = torch.empty("
                                 "n, pin_memory=True)\n") == [(1, True)]
    assert fc.pinned_allocations("other = torch.empty(n, pin_memory=True)\n") == []
    mixed = DECODE_TEMPLATE.format(pin=True).replace("pin_memory=True", "pin_memory=False", 1)
    assert [p for _, p in fc.pinned_allocations(mixed)] == [False, True]
    assert fc.decode_state(str(write_flashinfer(tmp_path / "a", pinned=False)))["state"] \
        == "unpinned"
    assert fc.decode_state(str(tmp_path / "nowhere"))["state"] == "missing"
    monkeypatch.setenv("VLLM_DOUBLE_FLASHINFER_DIR", str(tmp_path / "x"))
    assert fc.flashinfer_dir() == str(tmp_path / "x")


# --- records and model cache -------------------------------------------------------------------

def test_records_argv_and_environment(double, tmp_path):
    env = double_env(tmp_path, VDF_MARKER="from-compose")
    double(["--max-num-seqs", "4", "--kv-cache-dtype", "fp8"], env=env).stop()
    double(["--max-num-seqs", "2"], env=env)
    state = tmp_path / "state"
    record = json.loads((state / "last-start.json").read_text())
    assert record["argv"][:3] == ["vllm", "serve", "m"]
    assert "--max-num-seqs" in record["argv"] and "2" in record["argv"]
    assert record["args"]["max_num_seqs"] == 2
    assert record["env"]["VDF_MARKER"] == "from-compose"
    assert stat.S_IMODE(os.stat(state / "last-start.json").st_mode) == 0o600
    starts = [json.loads(line) for line in (state / "starts.log").read_text().splitlines()]
    assert [s["args"]["max_num_seqs"] for s in starts] == [4, 2]
    assert starts[0]["args"]["kv_cache_dtype"] == "fp8"


def hf(env, *args):
    return subprocess.run([sys.executable, "-m", "vllm._double.hf_cli", *args], env=env,
                          capture_output=True, text=True, check=False, timeout=30)


def test_hf_double_downloads_once_and_serve_finds_it(double, tmp_path):
    env = double_env(tmp_path, HF_HUB_OFFLINE="1")
    result = run_vllm(["serve", "Org/Model"], env)
    assert result.returncode == 1
    assert "HF_HUB_OFFLINE" in result.stderr
    first = hf(env, "download", "Org/Model", "--token", "hf_secret")
    snapshot = first.stdout.strip()
    assert first.returncode == 0
    assert snapshot.startswith(str(tmp_path / "hf" / "hub" / "models--Org--Model" / "snapshots"))
    config = os.path.join(snapshot, "config.json")
    mtime = os.stat(config).st_mtime_ns
    second = hf(env, "download", "Org/Model", "--token", "hf_secret")
    assert (second.returncode, second.stdout.strip()) == (0, snapshot)
    assert "already present" in second.stderr
    assert os.stat(config).st_mtime_ns == mtime
    assert "hf_secret" not in first.stdout + first.stderr + second.stdout + second.stderr
    local = hf(env, "download", "Org/Model", "--local-dir", str(tmp_path / "local"))
    assert local.returncode == 0
    assert (tmp_path / "local" / "config.json").is_file()
    assert hf(dict(env, VLLM_DOUBLE_HF_FAIL="1"), "download", "A/B").returncode == 1
    commit = "0123456789abcdef0123456789abcdef01234567"
    pinned_rev = hf(env, "download", "Org/Pinned", f"--revision={commit}")
    assert pinned_rev.stdout.strip().endswith("/snapshots/" + commit)
    # offline, a commit-only download is found with --revision and not without (no refs/main)
    assert run_vllm(["serve", "Org/Pinned"], env).returncode == 1
    assert double(["--revision", commit], env=env, model="Org/Pinned").chat(
        model="Org/Pinned")[0] == 200
    server = double(env=env, model="Org/Model")
    assert server.chat(model="Org/Model")[0] == 200
    record = json.loads((tmp_path / "state" / "last-start.json").read_text())
    assert record["model_resolved"] == {"path": snapshot}


def test_hf_double_download_takes_its_knob_time_and_resumes_a_partial_file(tmp_path):
    env = double_env(tmp_path)
    home = tmp_path / "hf"
    home.mkdir(exist_ok=True)
    (home / "vllm-double.json").write_text(json.dumps({"weights_mb": 2, "download_s": 1.0}))
    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "vllm._double.hf_cli", "download", "Org/Slow"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(0.5)
    proc.kill()  # an interrupted download
    proc.wait(timeout=10)
    [partial] = list(home.glob("hub/models--Org--Slow/snapshots/*/model.safetensors.incomplete"))
    have = partial.stat().st_size
    assert 0 < have < 2 * 1024 * 1024
    resumed = hf(env, "download", "Org/Slow")
    assert resumed.returncode == 0
    assert f"resuming at {have} bytes" in resumed.stderr
    weights = partial.with_name("model.safetensors")
    assert weights.stat().st_size == 2 * 1024 * 1024 and not partial.exists()
    assert time.monotonic() - started >= 0.9  # the knob's time, split across both runs
