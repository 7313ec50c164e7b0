"""The vLLM test double (molecule/images/vllm-double): parser, HTTP, the #40756 crash, records."""

import concurrent.futures
import filecmp
import json
import os
import stat
import subprocess
import sys
import threading
import time
import urllib.request

import pytest
from vllm_double_fixtures import (
    DECODE_TEMPLATE,
    DOUBLE_IMAGE,
    DOUBLE_SRC,
    MTP,
    ROOT,
    double_env,
    double_factory,
    http,
    import_double,
    laid_out_double,
    parse_serve,
    run_in_double,
    run_vllm,
    write_flashinfer,
    write_rig_knobs,
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
    assert (result.returncode, result.stdout.strip()) == (0, "0.27.1")  # the committed layout
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


def test_a_request_that_names_no_model_is_served_by_the_first_name(double):
    """vLLM's OpenAIServing._is_model_supported: no model (absent or empty) is supported, and
    the answer names the first served model; only a name it does not serve is 404."""
    server = double(["--served-model-name", "qwen", "alias"], model="Org/Model")
    messages = [{"role": "user", "content": "Say hi."}]
    for body in ({"messages": messages, "max_tokens": 3},
                 {"model": "", "messages": messages, "max_tokens": 3}):
        status, answer = http("POST", server.base_url + "/v1/chat/completions", body)
        assert status == 200, answer
        assert answer["model"] == "qwen"
    status, tokens = http("POST", server.base_url + "/tokenize", {"model": "", "prompt": "x"})
    assert status == 200, tokens


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


def kill_once_partly_written(proc, home, repo, total_bytes, timeout_s=10):
    """Kills a download as soon as its partial file holds some but not all of the weights (an
    interrupted download at a point it really reached, not after a guessed sleep); the partial
    file."""
    pattern = f"hub/models--{repo.replace('/', '--')}/snapshots/*/model.safetensors.incomplete"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and proc.poll() is None:
        found = list(home.glob(pattern))
        if found and 0 < found[0].stat().st_size < total_bytes:
            break
        time.sleep(0.01)
    proc.kill()
    proc.wait(timeout=10)
    [partial] = list(home.glob(pattern))
    return partial


def test_hf_double_download_takes_its_knob_time_and_resumes_a_partial_file(tmp_path):
    env = double_env(tmp_path)
    home = tmp_path / "hf"
    home.mkdir(exist_ok=True)
    (home / "vllm-double.json").write_text(json.dumps({"weights_mb": 2, "download_s": 1.0}))
    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "vllm._double.hf_cli", "download", "Org/Slow"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    partial = kill_once_partly_written(proc, home, "Org/Slow", 2 * 1024 * 1024)
    have = partial.stat().st_size
    assert 0 < have < 2 * 1024 * 1024
    resumed = hf(env, "download", "Org/Slow")
    assert resumed.returncode == 0
    assert f"resuming at {have} bytes" in resumed.stderr
    weights = partial.with_name("model.safetensors")
    assert weights.stat().st_size == 2 * 1024 * 1024 and not partial.exists()
    # The knob's time (1 s), split across both runs: the rest of it taken by the resumed one.
    assert time.monotonic() - started >= 0.9



def test_hf_double_resume_takes_the_resume_knob_s_time_whatever_is_left(tmp_path):
    """A resumed download's remainder takes `resume_s` however far the first one got, so a rig
    test can watch it run for a known time. Before: the remainder was what was left of
    download_s, which on a slow run could end before the role's first progress line."""
    env = double_env(tmp_path)
    home = tmp_path / "hf"
    home.mkdir(exist_ok=True)
    knob = home / "vllm-double.json"
    knob.write_text(json.dumps({"weights_mb": 1, "download_s": 0.5, "resume_s": 1.5}))
    proc = subprocess.Popen([sys.executable, "-m", "vllm._double.hf_cli", "download", "Org/Resume"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    partial = kill_once_partly_written(proc, home, "Org/Resume", 1024 * 1024)
    assert 0 < partial.stat().st_size < 1024 * 1024
    started = time.monotonic()
    resumed = hf(env, "download", "Org/Resume")
    took = time.monotonic() - started
    assert resumed.returncode == 0 and "resuming at" in resumed.stderr
    assert 1.4 <= took < 5, took
    # a first download ignores resume_s: it takes download_s
    started = time.monotonic()
    assert hf(env, "download", "Org/Fresh").returncode == 0
    assert time.monotonic() - started < 1.4


# --- streaming (SSE) ---------------------------------------------------------------------------

def stream(server, max_tokens=16, include_usage=False, **extra):
    """POSTs a streamed chat completion; (status, content type, [(seconds since sent, data)])."""
    payload = {"model": server.model, "max_tokens": max_tokens, "stream": True,
               "messages": [{"role": "user", "content": "Say hi."}], **extra}
    if include_usage:
        payload["stream_options"] = {"include_usage": True}
    req = urllib.request.Request(server.base_url + "/v1/chat/completions",
                                 data=json.dumps(payload).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    start = time.monotonic()
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            events = [(time.monotonic() - start, line.decode().rstrip("\n")[len("data: "):])
                      for line in resp if line.startswith(b"data: ")]
            return resp.status, resp.headers["Content-Type"], events
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers["Content-Type"], []


def chunks(events):
    return [json.loads(data) for _, data in events if data != "[DONE]"]


def test_stream_is_sse_chunks_one_token_each_then_done(double):
    server = double()
    status, content_type, events = stream(server, max_tokens=30, ignore_eos=True)
    assert status == 200
    assert content_type.startswith("text/event-stream")
    assert events[-1][1] == "[DONE]"
    parsed = chunks(events)
    assert {c["object"] for c in parsed} == {"chat.completion.chunk"}
    assert parsed[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    tokens = [c["choices"][0]["delta"]["content"] for c in parsed[1:]]
    assert len(tokens) == 30  # ignore_eos: exactly max_tokens, one delta each
    assert "".join(tokens).split() == tokens[0:1] + [w.strip() for w in tokens[1:]]
    assert [c["choices"][0]["finish_reason"] for c in parsed[1:]] == [None] * 29 + ["length"]
    assert all("usage" not in c for c in parsed)  # not asked for


def test_stream_usage_chunk_when_asked_and_reasoning_deltas(double):
    server = double(["--reasoning-parser", "qwen3"])
    _, _, events = stream(server, max_tokens=16, include_usage=True)
    parsed = chunks(events)
    usage_chunk = parsed[-1]
    assert usage_chunk["choices"] == []
    deltas = [c["choices"][0]["delta"] for c in parsed[1:-1]]
    reasoning = [d for d in deltas if "reasoning_content" in d]
    content = [d for d in deltas if "content" in d]
    assert len(reasoning) == 8 and len(content) == 8
    assert all(d["reasoning"] == d["reasoning_content"] for d in reasoning)
    assert deltas.index(content[0]) == 8  # thinking first, as vLLM streams it
    assert usage_chunk["usage"]["completion_tokens"] == 16


def test_without_ignore_eos_the_answer_stays_short(double):
    server = double()
    _, _, events = stream(server, max_tokens=100, include_usage=True)
    assert chunks(events)[-1]["usage"]["completion_tokens"] == 12
    assert server.chat(max_tokens=100)[1]["usage"]["completion_tokens"] == 12
    status, body = http("POST", server.base_url + "/v1/chat/completions",
                        {"model": "m", "max_tokens": 40, "ignore_eos": True,
                         "messages": [{"role": "user", "content": "hi"}]})
    assert (status, body["usage"]["completion_tokens"]) == (200, 40)
    assert len(body["choices"][0]["message"]["content"].split()) == 40


@pytest.mark.parametrize("fault, check", [
    ("http-500@1", lambda status, events: status == 500 and events == []),
    ("empty-content@1", lambda status, events: status == 200 and not any(
        c["choices"] and c["choices"][0]["delta"].get("content") for c in chunks(events))
        and chunks(events)[-1]["usage"]["completion_tokens"] == 0),
    ("zero-usage@1", lambda status, events: chunks(events)[-1]["usage"]["completion_tokens"]
        == 0 and len(chunks(events)) == 1 + 12 + 1),
])
def test_faults_apply_to_streams(double, tmp_path, fault, check):
    server = double(env=double_env(tmp_path, VLLM_DOUBLE_FAULTS=fault))
    status, _, events = stream(server, max_tokens=12, include_usage=True)
    assert check(status, events), (status, events)


def test_rig_knobs_set_time_to_first_token_and_decode_rate(double, tmp_path):
    env = double_env(tmp_path)
    write_rig_knobs(env, tokens_per_s=50, ttft_s=0.4, weights_mb=1)
    server = double(env=env)
    _, _, events = stream(server, max_tokens=26, ignore_eos=True)
    token_times = [at for at, data in events[1:-1]]
    assert len(token_times) == 26
    assert 0.4 <= token_times[0] < 0.8
    rate = 25 / (token_times[-1] - token_times[0])
    assert 35 <= rate <= 50.5
    started = time.monotonic()
    assert server.chat(max_tokens=11)[0] == 200  # 0.4 s, then 10 more tokens at 50/s
    assert 0.6 <= time.monotonic() - started < 1.1
    record = json.loads((tmp_path / "state" / "last-start.json").read_text())
    assert record["knobs"] == {"tokens_per_s": 50.0, "ttft_s": 0.4}
    assert "rig knobs from $HF_HOME/vllm-double.json" in server.stdout()


def test_without_rig_knobs_timing_is_the_env_latency(double, tmp_path):
    server = double(env=double_env(tmp_path, VLLM_DOUBLE_LATENCY_S="0.2",
                                   VLLM_DOUBLE_TOKEN_S="0.02"))  # noqa: S106 (seconds)
    _, _, events = stream(server, max_tokens=11, ignore_eos=True)
    token_times = [at for at, _ in events[1:-1]]
    assert 0.22 <= token_times[0] < 0.5        # LATENCY + one TOKEN_S
    assert 0.2 <= token_times[-1] - token_times[0] < 0.45  # ten more at TOKEN_S
    record = json.loads((tmp_path / "state" / "last-start.json").read_text())
    assert record["knobs"] == {}


def test_fail_health_knob_keeps_health_503(double, tmp_path):
    env = double_env(tmp_path)
    write_rig_knobs(env, fail_health=True)
    server = double(env=env, wait=False)
    deadline = time.monotonic() + 15
    while http("GET", server.base_url + "/v1/models")[0] != 200:
        assert time.monotonic() < deadline and server.proc.poll() is None
        time.sleep(0.05)
    status, body = http("GET", server.base_url + "/health")
    assert status == 503
    assert "fail_health" in body["error"]
    assert server.chat()[0] == 200  # it answers; only its health says no


def test_bad_rig_knobs_are_ignored_and_named(double, tmp_path):
    env = double_env(tmp_path)
    write_rig_knobs(env, tokens_per_s=0, ttft_s="slow", fail_health="yes")
    server = double(env=env)
    assert http("GET", server.base_url + "/health")[0] == 200
    record = json.loads((tmp_path / "state" / "last-start.json").read_text())
    assert record["knobs"] == {}
    out = server.stdout()
    for key in ("tokens_per_s", "ttft_s", "fail_health"):
        assert f"WARNING vllm-double.json: {key} must be" in out


def test_rig_knobs_validation(monkeypatch):
    import_double(monkeypatch)
    from vllm._double.server import rig_knobs

    assert rig_knobs(None) == ({}, [])
    assert rig_knobs({"weights_mb": 4, "download_s": 9}) == ({}, [])
    assert rig_knobs({"tokens_per_s": 40, "ttft_s": 0, "fail_health": False}) == (
        {"tokens_per_s": 40.0, "ttft_s": 0.0, "fail_health": False}, [])
    knobs, warnings = rig_knobs({"tokens_per_s": -1, "ttft_s": True, "fail_health": 1})
    assert knobs == {} and len(warnings) == 3
    assert rig_knobs([1])[1] == ["vllm-double.json: not a JSON object; ignored"]


def test_streams_count_towards_the_crash_rule(double, tmp_path):
    env = double_env(tmp_path, write_flashinfer(tmp_path / "fi", pinned=True))
    server = double(["--max-num-seqs", "4", "--speculative-config", MTP], env=env)
    barrier = threading.Barrier(4)

    def one(_):
        barrier.wait(timeout=10)
        try:
            return stream(server, max_tokens=12)[0]
        except OSError:
            return None

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        statuses = list(pool.map(one, range(4)))
    assert server.proc.wait(timeout=10) == 134
    assert CUDA_ERROR in server.stderr()
    assert statuses.count(200) < 4


# --- module layouts (layout.py; VLLM_LAYOUT in the Dockerfile) -----------------------------------

@pytest.fixture
def src_0_33(tmp_path):
    """The double's tree laid out as vLLM 0.33.0, as the vdf-vllm-double:0.33.0 image has it."""
    return laid_out_double(tmp_path, "0.33.0")


def test_0_33_layout_moves_the_parser_and_sets_the_version(src_0_33, tmp_path):
    entrypoints = src_0_33 / "vllm" / "entrypoints"
    assert (entrypoints / "common" / "cli_args.py").is_file()
    assert (entrypoints / "common" / "__init__.py").is_file()
    assert not (entrypoints / "openai" / "cli_args.py").exists()
    assert (entrypoints / "openai" / "__init__.py").is_file()  # the package itself stays
    text = (entrypoints / "common" / "cli_args.py").read_text()
    assert text.startswith('"""vllm.entrypoints.common.cli_args (test double)')
    env = double_env(tmp_path, PYTHONPATH=str(src_0_33))
    result = run_vllm(["--version"], env)
    assert (result.returncode, result.stdout.strip()) == (0, "0.33.0")
    probe = subprocess.run(
        [sys.executable, "-c", "import vllm.entrypoints.common.cli_args as m; print(m.__name__)\n"
         "import importlib.util as u; print(u.find_spec('vllm.entrypoints.openai.cli_args'))"],
        env=env, capture_output=True, text=True, timeout=30, check=False)
    assert probe.stdout.split() == ["vllm.entrypoints.common.cli_args", "None"]


def test_0_33_layout_serves_and_refuses_like_0_27_1(src_0_33, double, tmp_path):
    env = double_env(tmp_path, PYTHONPATH=str(src_0_33))
    result = run_vllm(["serve", "m", "--bogus-flag"], env)
    assert (result.returncode, "unrecognized arguments: --bogus-flag" in result.stderr) == (2, True)
    result = run_vllm(["serve", "m", "--enable-auto-tool-choice"], env)
    assert result.returncode == 1
    server = double(["--max-num-seqs", "4"], env=env)
    assert server.chat()[0] == 200
    assert http("GET", server.base_url + "/version") == (200, {"version": "0.33.0"})
    # vLLM 0.33.0 lists bitsandbytes no more
    result = run_vllm(["serve", "m", "--quantization", "bitsandbytes"], env)
    assert result.returncode == 1
    assert "Unknown quantization method: bitsandbytes" in result.stderr
    assert "'inc'" in result.stderr


def test_quantization_list_follows_the_layout(src_0_33, tmp_path):
    code = ("from vllm.model_executor.layers.quantization import QUANTIZATION_METHODS as q; "
            "print(len(q), 'bitsandbytes' in q, 'inc' in q)")
    outputs = []
    for src in (DOUBLE_SRC, src_0_33):
        env = double_env(tmp_path, PYTHONPATH=str(src))
        outputs.append(subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                                      text=True, timeout=30, check=True).stdout.split())
    assert outputs == [["31", "True", "True"], ["30", "False", "True"]]
    code = ("import json; "
            "from vllm.model_executor.layers.quantization import QUANTIZATION_METHODS as q; "
            "print(json.dumps(list(q)))")
    for version, src in (("0.27.1", DOUBLE_SRC), ("0.33.0", src_0_33)):
        env = double_env(tmp_path, PYTHONPATH=str(src))
        listed = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                                text=True, timeout=30, check=True).stdout
        assert json.loads(listed) == REAL_VLLM[version]["quantization_methods"], version


def tree(root):
    return sorted(str(p.relative_to(root)) for p in root.rglob("*")
                  if "__pycache__" not in p.parts and p.suffix != ".pyc")


def test_layout_goes_back_to_the_committed_tree_and_is_idempotent(src_0_33):
    layout = src_0_33.parent / "layout.py"
    package = src_0_33 / "vllm"
    again = subprocess.run([sys.executable, str(layout), "0.33.0", str(package)],
                           capture_output=True, text=True, timeout=30, check=False)
    assert (again.returncode, again.stdout.strip()) == (0, "vllm-double layout 0.33.0: already so")
    back = subprocess.run([sys.executable, str(layout), "0.27.1", str(package)],
                          capture_output=True, text=True, timeout=30, check=False)
    assert back.returncode == 0
    assert "removed entrypoints/common" in back.stdout
    assert tree(src_0_33) == tree(DOUBLE_SRC)
    files = [p for p in tree(DOUBLE_SRC) if (DOUBLE_SRC / p).is_file()]
    match, mismatch, errors = filecmp.cmpfiles(DOUBLE_SRC, src_0_33, files, shallow=False)
    assert (mismatch, errors) == ([], [])


@pytest.mark.parametrize("args, message", [
    (["0.30.0", "{pkg}"], "unknown layout '0.30.0'"),
    (["0.33.0", "{tmp}"], "is not the vLLM double's package"),
    (["0.33.0"], "usage: layout.py"),
])
def test_layout_refuses_with_exit_2(tmp_path, args, message):
    args = [a.format(pkg=DOUBLE_SRC / "vllm", tmp=tmp_path) for a in args]
    result = subprocess.run([sys.executable, str(DOUBLE_IMAGE / "layout.py"), *args],
                            capture_output=True, text=True, timeout=30, check=False)
    assert result.returncode == 2
    assert message in result.stderr


def test_layout_refuses_a_tree_with_two_parsers(src_0_33):
    package = src_0_33 / "vllm"
    openai = package / "entrypoints" / "openai" / "cli_args.py"
    openai.write_text((package / "entrypoints" / "common" / "cli_args.py").read_text())
    result = subprocess.run([sys.executable, str(src_0_33.parent / "layout.py"), "0.27.1",
                             str(package)], capture_output=True, text=True, timeout=30,
                            check=False)
    assert result.returncode == 2
    assert "exactly one of" in result.stderr
    assert (package / "entrypoints" / "common" / "cli_args.py").is_file()  # nothing moved
    assert '__version__ = "0.33.0"' in (package / "__init__.py").read_text()


def test_install_over_an_installed_double_leaves_one_version(tmp_path):
    """What vllm-double-0.33/Dockerfile does: layout.py 0.33.0 on the 0.27.1 image's tree, then
    install_double.py again over the 0.27.1 install."""
    src = laid_out_double(tmp_path, "0.27.1")
    opt = src.parent
    site, bin_dir = tmp_path / "site", tmp_path / "bin"
    site.mkdir()
    bin_dir.mkdir()
    env = dict(double_env(tmp_path), VLLM_DOUBLE_SITE_DIR=str(site),
               VLLM_DOUBLE_BIN_DIR=str(bin_dir), PYTHONPATH=str(site))

    def installed_version():
        result = subprocess.run([str(bin_dir / "vllm"), "--version"], env=env,
                                capture_output=True, text=True, timeout=30, check=False)
        return result.stdout.strip()

    def install():
        subprocess.run([sys.executable, str(opt / "install_double.py")], env=env, check=True,
                       capture_output=True, text=True, timeout=30)

    install()
    assert installed_version() == "0.27.1"
    assert (site / "vllm" / "entrypoints" / "openai" / "cli_args.py").is_file()
    subprocess.run([sys.executable, str(opt / "layout.py"), "0.33.0", str(src / "vllm")],
                   check=True, capture_output=True, timeout=30)
    install()
    assert installed_version() == "0.33.0"
    assert [p.name for p in site.glob("vllm-*.dist-info")] == ["vllm-0.33.0.dist-info"]
    assert "Version: 0.33.0" in (site / "vllm-0.33.0.dist-info" / "METADATA").read_text()
    assert not (site / "vllm" / "entrypoints" / "openai" / "cli_args.py").exists()
    assert (site / "vllm" / "entrypoints" / "common" / "cli_args.py").is_file()


def test_dockerfiles_run_the_layout_script():
    """The image builds run layout.py (what the tests above run) before install_double.py."""
    main = (DOUBLE_IMAGE / "Dockerfile").read_text()
    assert "ARG VLLM_LAYOUT=0.27.1" in main
    assert main.index('layout.py "${VLLM_LAYOUT}"') < main.index("install_double.py \\")
    second = (DOUBLE_IMAGE.parent / "vllm-double-0.33" / "Dockerfile").read_text()
    assert "ARG BASE=vdf-vllm-double:latest" in second
    assert second.index("layout.py 0.33.0") < second.index("install_double.py")


def test_rig_knobs_of_one_version_apply_only_to_that_version(monkeypatch):
    import_double(monkeypatch)
    from vllm._double import server

    raw = {"tokens_per_s": 80,
           "by_version": {"0.27.1": {"tokens_per_s": 20, "fail_health": True}}}
    assert server.rig_knobs(raw, "0.27.1")[0] == {"tokens_per_s": 20.0, "fail_health": True}
    assert server.rig_knobs(raw, "0.33.0")[0] == {"tokens_per_s": 80.0}
    # a by_version that is not an object is named and ignored (the top-level keys still apply)
    assert server.rig_knobs({"tokens_per_s": 80, "by_version": ["0.27.1"]}, "0.27.1") == (
        {"tokens_per_s": 80.0},
        ["vllm-double.json: by_version must be an object, not ['0.27.1']; ignored"])


# --- serve flags against the real parsers (bench/results/vllm-parsers.{json,md}) ----------------

# What the real releases hold, as bench/vllm_parsers/probe.py read it from them: the double is
# checked against the measurement, not against a copy of its own lists.
REAL_VLLM = json.loads((ROOT / "bench/results/vllm-parsers.json").read_text())["targets"]
# vllm.config.cache.CacheDType, in order. 0.27.1's parser offers exactly these as --kv-cache-dtype
# choices; 0.33.0's parser takes any string and CacheConfig refuses one not listed.
VLLM_0_27_1_CACHE_DTYPES = REAL_VLLM["0.27.1"]["kv_cache_dtype_at_config"]["CacheDType"]
VLLM_0_33_0_CACHE_DTYPES = REAL_VLLM["0.33.0"]["kv_cache_dtype_at_config"]["CacheDType"]
# vLLM 0.33.0's FlexibleArgumentParser turns every BooleanOptionalAction into EnableDisableAction:
# --enable-X gains --disable-X and the reverse (--no-... still parses). 0.27.1 has neither.
VLLM_0_33_0_INVERSES = [
    ("--disable-prefix-caching", "enable_prefix_caching", False),
    ("--enable-custom-all-reduce", "disable_custom_all_reduce", False),
    ("--disable-chunked-prefill", "enable_chunked_prefill", False),
    ("--disable-auto-tool-choice", "enable_auto_tool_choice", False),
    ("--enable-uvicorn-access-log", "disable_uvicorn_access_log", False),
    ("--disable-log-requests", "enable_log_requests", False),
]


@pytest.fixture(params=["0.27.1", "0.33.0"])
def layout(request, tmp_path):
    """(version, src folder) of the double laid out as each release."""
    return request.param, laid_out_double(tmp_path, request.param)


def test_disable_log_stats_is_a_plain_switch(layout):
    """Both releases: store_true, so --no-disable-log-stats is an unknown flag."""
    _, src = layout
    code, args, _ = parse_serve(src, ["m", "--disable-log-stats"])
    assert (code, args["disable_log_stats"]) == (0, True)
    code, _, stderr = parse_serve(src, ["m", "--no-disable-log-stats"])
    assert code == 2
    assert "unrecognized arguments: --no-disable-log-stats" in stderr


def test_distributed_executor_backend_takes_any_string(layout):
    """Both releases: no choices at parse time (a class path is allowed too)."""
    _, src = layout
    for backend in ("mp", "ray", "my_pkg.executor.MyExecutor"):
        code, args, stderr = parse_serve(src, ["m", "--distributed-executor-backend", backend])
        assert (code, args and args["distributed_executor_backend"]) == (0, backend), stderr


def test_speculative_config_has_its_short_form(layout):
    _, src = layout
    code, args, stderr = parse_serve(src, ["m", "-sc", MTP])
    assert code == 0, stderr
    assert args["speculative_config"] == {"method": "mtp", "num_speculative_tokens": 4}


def test_kv_cache_dtype_choices_are_vllm_0_27_1s(double_parser):
    action = next(a for a in double_parser._actions if a.dest == "kv_cache_dtype")
    assert sorted(action.choices) == sorted(VLLM_0_27_1_CACHE_DTYPES)
    for name in ("float16", "nvfp4", "turboquant_k8v4", "fp8_per_token_head"):
        assert double_parser.parse_args(["m", "--kv-cache-dtype", name]).kv_cache_dtype == name


def test_kv_cache_dtype_refusal_lists_the_choices_as_vllm_0_27_1(tmp_path):
    result = run_vllm(["serve", "m", "--kv-cache-dtype", "nvfp4_ds_mla"], double_env(tmp_path))
    assert result.returncode == 2
    # as real 0.27.1 words it: the choices sorted (quoted or not, by Python version)
    assert ("invalid choice: nvfp4_ds_mla (choose from auto, bfloat16, float16, fp8, fp8_ds_mla, "
            "fp8_e4m3, fp8_e5m2, fp8_inc, fp8_per_token_head, int4_per_token_head"
            in result.stderr.replace("'", ""))


CACHE_CONFIG_CODE = """
import json, sys, typing
from vllm.config import CacheConfig
from vllm.config import cache
out = {"CacheDType": list(typing.get_args(cache.CacheDType)), "values": {}}
for value in sys.argv[1:]:
    try:
        out["values"][value] = "ok " + CacheConfig(cache_dtype=value).cache_dtype
    except Exception as exc:
        out["values"][value] = {"value_error": isinstance(exc, ValueError), "str": str(exc),
                                "type": type(exc).__name__,
                                "errors": [dict(e, loc=list(e["loc"])) for e in exc.errors()]}
print(json.dumps(out))
"""


def cache_config(src, *values):
    result = run_in_double(src, CACHE_CONFIG_CODE, *values)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_cache_config_refuses_as_vllm_0_27_1(tmp_path):
    got = cache_config(laid_out_double(tmp_path, "0.27.1"), "float16", "fp7", "nvfp4_4over6")
    assert got["CacheDType"] == VLLM_0_27_1_CACHE_DTYPES
    assert got["values"]["float16"] == "ok float16"
    literal = ", ".join(f"'{n}'" for n in VLLM_0_27_1_CACHE_DTYPES[:-1]) + " or 'nvfp4'"
    for name in ("fp7", "nvfp4_4over6"):
        refused = got["values"][name]
        assert (refused["type"], refused["value_error"]) == ("ValidationError", True)
        assert refused["str"] == (  # pydantic's words, less its link to errors.pydantic.dev
            f"1 validation error for CacheConfig\ncache_dtype\n  Input should be {literal} "
            f"[type=literal_error, input_value='{name}', input_type=str]")
        assert refused["errors"] == [{"type": "literal_error", "loc": ["cache_dtype"],
                                      "msg": f"Input should be {literal}", "input": name}]


def test_cache_config_refuses_as_vllm_0_33_0(tmp_path):
    got = cache_config(laid_out_double(tmp_path, "0.33.0"), "nvfp4_4over6", "fp7", "FP8")
    assert got["CacheDType"] == VLLM_0_33_0_CACHE_DTYPES
    assert got["values"]["nvfp4_4over6"] == "ok nvfp4_4over6"
    for name in ("fp7", "FP8"):
        refused = got["values"][name]
        message = (f"Value error, Invalid kv_cache_dtype: '{name}'. Valid values are: "
                   f"{VLLM_0_33_0_CACHE_DTYPES}")
        assert (refused["type"], refused["value_error"]) == ("ValidationError", True)
        assert refused["str"] == (f"1 validation error for CacheConfig\ncache_dtype\n  {message} "
                                  f"[type=value_error, input_value='{name}', input_type=str]")
        assert refused["errors"] == [{"type": "value_error", "loc": ["cache_dtype"],
                                      "msg": message, "input": name}]


def test_0_33_layout_parses_any_kv_cache_dtype_and_refuses_it_at_start(src_0_33, double,
                                                                       tmp_path):
    code, args, _ = parse_serve(src_0_33, ["m", "--kv-cache-dtype", "fp7"])
    assert (code, args["kv_cache_dtype"]) == (0, "fp7")
    env = double_env(tmp_path, PYTHONPATH=str(src_0_33))
    result = run_vllm(["serve", "m", "--kv-cache-dtype", "fp7"], env)
    assert result.returncode == 1
    assert "Invalid kv_cache_dtype: 'fp7'" in result.stderr
    assert "Application startup complete" not in result.stdout
    # a name only 0.33.0 lists starts there
    assert double(["--kv-cache-dtype", "nvfp4_4over6"], env=env).chat()[0] == 200


@pytest.mark.parametrize("flag, dest, value", VLLM_0_33_0_INVERSES)
def test_0_33_layout_pairs_enable_with_disable(src_0_33, tmp_path, flag, dest, value):
    code, args, stderr = parse_serve(src_0_33, ["m", flag])
    assert (code, args and args[dest]) == (0, value), stderr
    code, _, stderr = parse_serve(laid_out_double(tmp_path, "0.27.1"), ["m", flag])
    assert code == 2
    assert f"unrecognized arguments: {flag}" in stderr


def test_0_33_layout_keeps_the_older_spellings(src_0_33):
    code, args, stderr = parse_serve(src_0_33, [
        "m", "--no-enable-prefix-caching", "--disable-custom-all-reduce",
        "--enable-chunked-prefill", "--trust-remote-code", "--no-async-scheduling",
        "--enforce-eager"])
    assert code == 0, stderr
    assert (args["enable_prefix_caching"], args["disable_custom_all_reduce"],
            args["enable_chunked_prefill"], args["trust_remote_code"], args["async_scheduling"],
            args["enforce_eager"]) == (False, True, True, True, False, True)
    code, _, stderr = parse_serve(src_0_33, ["m", "--disable-trust-remote-code"])
    assert code == 2  # only --enable-/--disable- names gain an inverse


def test_0_33_layout_has_device_memory_utilization(src_0_33, tmp_path):
    code, args, stderr = parse_serve(src_0_33, ["m", "--device-memory-utilization", "0.5"])
    assert (code, args and args["gpu_memory_utilization"]) == (0, 0.5), stderr
    code, _, stderr = parse_serve(laid_out_double(tmp_path, "0.27.1"),
                                  ["m", "--device-memory-utilization", "0.5"])
    assert code == 2


# --- vLLM 0.27.1 routes, metrics, answers, timing and prefill memory ---------------------------

QUESTION = "What is 17 + 25? Reply with the number only."


def get_text(url, timeout=10):
    """(status, body text, content type) of one GET."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return resp.status, resp.read().decode(), resp.headers["Content-Type"]
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(), exc.headers["Content-Type"]


def sse(url, payload, key=None):
    """(status, [parsed data of each event], saw [DONE]) of one streamed POST."""
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    req = urllib.request.Request(url, data=json.dumps(payload).encode(), method="POST",
                                 headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            data = [line.decode().strip()[len("data: "):] for line in resp
                    if line.startswith(b"data: ")]
    except urllib.error.HTTPError as exc:
        return exc.code, [], False
    return resp.status, [json.loads(d) for d in data if d != "[DONE]"], data[-1:] == ["[DONE]"]


def ask(server, content, path="/v1/chat/completions", key=None, **extra):
    payload = {"model": server.model, "messages": [{"role": "user", "content": content}],
               **extra}
    return http("POST", server.base_url + path, payload, key=key, timeout=30)


def metric_samples(text):
    """{'name{labels}': value} of a Prometheus text page."""
    samples = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            samples[name] = float(value)
    return samples


def test_key_guard_covers_only_vllms_guarded_prefixes(double):
    server = double(["--api-key", "s3cret"])
    base = server.base_url
    assert server.chat()[0] == 401
    for path in ("/v1/models", "/v1/nothing", "/v2/models", "/inference/v1/generate",
                 "/cohere/v2/chat", "/v1/models?x=1"):
        assert http("GET", base + path) == (401, {"error": "Unauthorized"}), path
    assert http("GET", base + "/v1/nothing", key="s3cret")[0] == 404
    assert http("POST", base + "/v2/rerank", {}, key="s3cret")[0] == 404
    # the real hole: vLLM serves these without any key
    status, body = ask(server, "Say hi.", path="/invocations", max_tokens=5)
    assert status == 200 and body["object"] == "chat.completion"
    assert body["usage"]["completion_tokens"] == 5
    assert ask(server, "Say hi.", path="/tokenize")[0] == 200
    assert get_text(base + "/metrics")[0] == 200
    assert http("GET", base + "/ping")[0] == 200 and http("POST", base + "/ping", {})[0] == 200
    assert http("GET", base + "/unknown")[0] == 404
    assert http("POST", base + "/unknown", {})[0] == 404
    # the scheme is matched in any case, as vLLM's middleware does
    req = urllib.request.Request(base + "/v1/models", headers={"Authorization": "bearer s3cret"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        assert resp.status == 200


def test_invocations_route_chat_bodies_streams_included(double):
    server = double()
    status, events, done = sse(server.base_url + "/invocations", {
        "model": "m", "max_tokens": 6, "stream": True, "ignore_eos": True,
        "messages": [{"role": "user", "content": "Say hi."}]})
    assert (status, done) == (200, True)
    assert all(e["object"] == "chat.completion.chunk" for e in events)
    assert len([e for e in events if e["choices"][0]["delta"].get("content")]) == 6
    status, body = http("POST", server.base_url + "/invocations", {"model": "m", "prompt": "x"})
    assert status == 400
    assert "Cannot find suitable handler for request" in body["error"]["message"]


def test_tokenize_has_vllms_response_shape(double):
    server = double(["--max-model-len", "32k"])
    status, body = http("POST", server.base_url + "/tokenize",
                        {"model": "m", "prompt": "one two three four"})
    assert status == 200
    assert set(body) == {"count", "max_model_len", "tokens", "token_strs"}
    assert (body["count"], body["max_model_len"], len(body["tokens"])) == (4, 32000, 4)
    assert all(isinstance(t, int) for t in body["tokens"])
    messages = [{"role": "system", "content": "Be brief."},
                {"role": "user", "content": "Count these five words."}]
    status, body = http("POST", server.base_url + "/tokenize", {"model": "m",
                                                                "messages": messages})
    chat = http("POST", server.base_url + "/v1/chat/completions",
                {"model": "m", "messages": messages})[1]
    assert body["count"] == len(body["tokens"]) == chat["usage"]["prompt_tokens"] == 2 + 4 + 8
    assert http("POST", server.base_url + "/tokenize", {"model": "other", "prompt": "x"})[0] == 404
    assert http("POST", server.base_url + "/tokenize", {"model": "m"})[0] == 400


def test_metrics_count_tokens_and_spec_decode_as_vllm(double, tmp_path):
    env = double_env(tmp_path)
    write_rig_knobs(env, mtp_acceptance=0.5)
    server = double(["--served-model-name", "qwen", "--speculative-config",
                     '{"method": "mtp", "num_speculative_tokens": 2}'], env=env)
    status, text, kind = get_text(server.base_url + "/metrics")
    assert (status, kind) == (200, "text/plain; version=0.0.4; charset=utf-8")
    labels = 'engine="0",model_name="qwen"'
    assert metric_samples(text)[f"vllm:generation_tokens_total{{{labels}}}"] == 0.0
    payload = {"model": "qwen", "max_tokens": 30, "ignore_eos": True,
               "messages": [{"role": "user", "content": "Say hi."}]}
    assert http("POST", server.base_url + "/v1/chat/completions", payload)[0] == 200
    assert sse(server.base_url + "/v1/chat/completions", {**payload, "stream": True})[0] == 200
    text = get_text(server.base_url + "/metrics")[1]
    for name, kind_line in (("vllm:spec_decode_num_drafts_total", "counter"),
                            ("vllm:spec_decode_num_accepted_tokens_per_pos_total", "counter"),
                            ("vllm:prompt_tokens_total", "counter")):
        assert f"# TYPE {name} {kind_line}" in text and f"# HELP {name} " in text
    assert "# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts." in text
    samples = metric_samples(text)
    accepted_per_step = 0.5 + 0.25  # a + a**2
    drafts = 60 / (1 + accepted_per_step)
    assert samples[f"vllm:prompt_tokens_total{{{labels}}}"] == 12.0  # 2 x (2 words + 4)
    assert samples[f"vllm:generation_tokens_total{{{labels}}}"] == 60.0
    assert samples[f"vllm:spec_decode_num_drafts_total{{{labels}}}"] == pytest.approx(drafts)
    assert samples[f"vllm:spec_decode_num_draft_tokens_total{{{labels}}}"] == pytest.approx(
        2 * drafts)
    accepted = samples[f"vllm:spec_decode_num_accepted_tokens_total{{{labels}}}"]
    assert accepted == pytest.approx(0.75 * drafts)
    assert samples[f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{labels},position="0"}}'
                   ] == pytest.approx(0.5 * drafts)
    assert samples[f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{labels},position="1"}}'
                   ] == pytest.approx(0.25 * drafts)
    assert 1 + accepted / drafts == pytest.approx(1.75)  # vLLM's mean acceptance length
    plain = double()
    text = get_text(plain.base_url + "/metrics")[1]
    assert "vllm:generation_tokens_total" in text and "spec_decode" not in text


def test_metrics_show_requests_in_flight_kv_cache_use_and_ttft_as_vllm(double, tmp_path):
    """The gauges and histogram the monitoring rules read (vLLM 0.27's names and buckets):
    requests running while they are in flight, KV blocks they hold over the knob's capacity,
    and every finished prefill's TTFT."""
    env = double_env(tmp_path)
    write_rig_knobs(env, kv_cache_tokens=1600, ttft_s=0.6, tokens_per_s=20)
    # a pool of 1,600 tokens holds one request of 1,024, not the checkpoint's 40,960
    server = double(["--served-model-name", "qwen", "--max-model-len", "1024"], env=env)
    labels = 'engine="0",model_name="qwen"'
    text = get_text(server.base_url + "/metrics")[1]
    for name, kind in (("vllm:num_requests_running", "gauge"), ("vllm:kv_cache_usage_perc",
                       "gauge"), ("vllm:time_to_first_token_seconds", "histogram")):
        assert f"# TYPE {name} {kind}" in text, text
    idle = metric_samples(text)
    assert idle[f"vllm:num_requests_running{{{labels}}}"] == 0.0
    assert idle[f"vllm:kv_cache_usage_perc{{{labels}}}"] == 0.0
    payload = {"model": "qwen", "max_tokens": 40, "ignore_eos": True,
               "messages": [{"role": "user", "content": "Say hi."}]}
    busy = threading.Thread(target=http, args=("POST", server.base_url + "/v1/chat/completions",
                                               payload))
    busy.start()
    time.sleep(1.0)    # past its TTFT (0.6 s), decoding for 2 s more
    during = metric_samples(get_text(server.base_url + "/metrics")[1])
    busy.join()
    after = metric_samples(get_text(server.base_url + "/metrics")[1])
    assert during[f"vllm:num_requests_running{{{labels}}}"] == 1.0
    # 6 prompt tokens + 40 answer tokens: 3 blocks of 16 tokens, over 1600 tokens
    assert during[f"vllm:kv_cache_usage_perc{{{labels}}}"] == pytest.approx(48 / 1600)
    assert after[f"vllm:num_requests_running{{{labels}}}"] == 0.0
    assert after[f"vllm:kv_cache_usage_perc{{{labels}}}"] == 0.0
    ttft = "vllm:time_to_first_token_seconds"
    assert after[f"{ttft}_count{{{labels}}}"] == 1.0
    assert after[f"{ttft}_sum{{{labels}}}"] == pytest.approx(0.6, abs=0.001)    # + its prefill
    assert after[f'{ttft}_bucket{{{labels},le="0.5"}}'] == 0.0
    assert after[f'{ttft}_bucket{{{labels},le="0.75"}}'] == 1.0
    assert after[f'{ttft}_bucket{{{labels},le="+Inf"}}'] == 1.0


def test_spec_counts_default_acceptance(monkeypatch):
    import_double(monkeypatch)
    from vllm._double.server import spec_counts

    counts = spec_counts(277.31, 4, 0.7)
    assert counts["mean_acceptance_length"] == pytest.approx(2.7731)
    assert counts["drafts"] == pytest.approx(100.0)
    assert counts["accepted_per_pos"] == pytest.approx([70.0, 49.0, 34.3, 24.01])


def test_garbage_knob_answers_bangs_one_per_token(double, tmp_path):
    env = double_env(tmp_path)
    write_rig_knobs(env, garbage=True)
    server = double(["--reasoning-parser", "qwen3"], env=env)
    status, body = ask(server, QUESTION, max_tokens=16)
    message = body["choices"][0]["message"]
    assert status == 200
    # A broken KV cache never reaches an end of text: "!" up to max_tokens, sum answer or not.
    assert message["content"] == "!" * 16
    assert message["reasoning_content"] is None
    assert body["usage"]["completion_tokens"] == 16
    assert body["choices"][0]["finish_reason"] == "length"
    status, events, _ = sse(server.base_url + "/v1/chat/completions", {
        "model": "m", "stream": True, "max_tokens": 5, "ignore_eos": True,
        "messages": [{"role": "user", "content": "Say hi."}]})
    deltas = [e["choices"][0]["delta"].get("content") for e in events[1:]]
    assert deltas == ["!"] * 5


def test_arithmetic_question_gets_the_sum(double):
    server = double(["--reasoning-parser", "qwen3"])
    status, body = ask(server, QUESTION, max_tokens=32,
                       chat_template_kwargs={"enable_thinking": False})
    message = body["choices"][0]["message"]
    assert (status, message["content"], message["reasoning_content"]) == (200, "42", None)
    assert (body["usage"]["completion_tokens"], body["choices"][0]["finish_reason"]) == (1, "stop")
    status, body = ask(server, QUESTION, max_tokens=32)
    message = body["choices"][0]["message"]
    assert message["content"] == "42" and len(message["reasoning_content"].split()) == 8
    assert ask(server, "What is -3 + 10? Reply with the number only.",
               max_tokens=32)[1]["choices"][0]["message"]["content"] == "7"
    assert ask(server, "What is 2 + 2?", max_tokens=32)[1]["choices"][0]["message"][
        "content"] != "4"
    plain = double()
    status, events, _ = sse(plain.base_url + "/v1/chat/completions", {
        "model": "m", "stream": True, "messages": [{"role": "user", "content": QUESTION}]})
    assert "".join(e["choices"][0]["delta"].get("content") or "" for e in events) == "42"


def engine_with(monkeypatch, knobs, **kwargs):
    import_double(monkeypatch)
    monkeypatch.setenv("VLLM_DOUBLE_LATENCY_S", "0.1")
    monkeypatch.setenv("VLLM_DOUBLE_TOKEN_S", "0.01")
    monkeypatch.delenv("VLLM_MARLIN_INPUT_DTYPE", raising=False)
    from vllm._double import server as double_server

    return double_server, double_server.Engine(["m"], [], knobs=knobs, **kwargs)


SHORT = [{"role": "user", "content": "Say hi."}]


def test_jitter_bounds_and_seed_determinism(monkeypatch):
    knobs = {"ttft_jitter_s": 0.2, "rate_jitter_pct": 80, "seed": 7, "prefill_s_per_ktoken": 0}
    _, engine = engine_with(monkeypatch, knobs)
    plans = [engine.plan(SHORT) for _ in range(400)]
    ttfts = [p["ttft"] for p in plans]
    factors = [p["interval"] / 0.01 for p in plans]
    assert all(0.11 <= t <= 0.31 + 1e-9 for t in ttfts)
    assert max(ttfts) - min(ttfts) > 0.15  # it does vary
    assert all(0.5 <= f <= 1.8 + 1e-9 for f in factors)
    assert min(factors) == 0.5 and max(factors) > 1.5  # clamped at 0.5, spread up to 1.8
    _, again = engine_with(monkeypatch, knobs)
    assert [again.plan(SHORT)["ttft"] for _ in range(400)] == ttfts
    _, other = engine_with(monkeypatch, {**knobs, "seed": 8})
    assert [other.plan(SHORT)["ttft"] for _ in range(400)] != ttfts
    _, exact = engine_with(monkeypatch, {"prefill_s_per_ktoken": 0})
    assert {(p["ttft"], p["interval"]) for p in (exact.plan(SHORT) for _ in range(20))} == {
        (0.1 + 0.01, 0.01)}


def test_jitter_applies_to_served_requests(double, tmp_path):
    env = double_env(tmp_path, VLLM_DOUBLE_LATENCY_S="0.1")
    write_rig_knobs(env, ttft_jitter_s=0.4, seed=3)
    server = double(env=env)
    times = []
    for _ in range(6):
        started = time.monotonic()
        assert server.chat(max_tokens=1)[0] == 200
        times.append(time.monotonic() - started)
    assert all(0.1 <= t < 0.8 for t in times)
    assert max(times) - min(times) > 0.05


def words_prompt(n, first="w"):
    """n distinct words of one token each: digits spelt as letters (the double, like Qwen's
    tokenizer, makes every digit a token)."""
    return " ".join([first] + ["w" + str(i).translate(LETTER_DIGITS) for i in range(n - 1)])


LETTER_DIGITS = str.maketrans("0123456789", "abcdefghij")


def test_prefix_cache_makes_a_repeat_faster(double, tmp_path):
    env = double_env(tmp_path, VLLM_DOUBLE_LATENCY_S="0.05")
    write_rig_knobs(env, prefill_s_per_ktoken=0.3)
    server = double(env=env)
    prompt = words_prompt(3000)  # 3004 tokens: 0.9 s to prefill

    def timed(content):
        started = time.monotonic()
        assert ask(server, content, max_tokens=1)[0] == 200
        return time.monotonic() - started

    first = timed(prompt)
    repeat = timed(prompt)
    longer = timed(prompt + " and ten more words to read after the shared part")
    assert first >= 0.9
    assert repeat < 0.3 and longer < 0.3
    assert timed(words_prompt(3000, first="x")) >= 0.9  # a different start: no hit


def test_prefix_cache_hits_and_switch(monkeypatch):
    server_module, engine = engine_with(monkeypatch, {})
    long = [{"role": "user", "content": words_prompt(100)}]
    assert engine.plan(long)["cached_tokens"] == 0
    assert engine.prefill(engine.plan(long))
    assert engine.plan(long)["cached_tokens"] == 96  # 100 words, whole 16-token blocks
    assert server_module.common_words("a b cd e", "a b c") == 2
    assert server_module.common_words("a b c d", "a b c") == 3
    _, off = engine_with(monkeypatch, {}, prefix_caching=False)
    assert off.prefill(off.plan(long)) and off.plan(long)["cached_tokens"] == 0
    for _ in range(200):
        engine.seen.append("x")
    assert len(engine.seen) == server_module.PREFIX_CACHE_PROMPTS  # bounded


def test_prefix_caching_flag_reaches_the_engine(double, tmp_path):
    env = double_env(tmp_path, VLLM_DOUBLE_LATENCY_S="0.05")
    write_rig_knobs(env, prefill_s_per_ktoken=0.3)
    server = double(["--no-enable-prefix-caching"], env=env)
    prompt = words_prompt(2000)
    assert ask(server, prompt, max_tokens=1)[0] == 200
    started = time.monotonic()
    assert ask(server, prompt, max_tokens=1)[0] == 200
    assert time.monotonic() - started >= 0.6


class Args:
    def __init__(self, batched=8192, utilization=0.9):
        self.max_num_batched_tokens = batched
        self.gpu_memory_utilization = utilization


def test_memory_model_is_calibrated_on_the_measured_rig(monkeypatch):
    """One token budget per step, shared by the sequences in prefill (vLLM's scheduler): the
    measured figure (2 x 16K at 8192, 23,872 MiB) calibrates the per-step term, and 4 sequences
    then peak about as 2 do; the per-sequence terms are small and assumed."""
    import_double(monkeypatch)
    from vllm._double.server import (
        format_size,
        memory_model,
        prefill_mib,
        prefill_steps,
        step_peak_mib,
    )

    w4a8 = {"VLLM_MARLIN_INPUT_DTYPE": "int8"}

    def peak(seqs, batched, environ=w4a8, memory=None, tokens=16388, utilization=0.9):
        model = memory_model(Args(batched, utilization), memory, environ)
        return step_peak_mib(model, [tokens] * seqs, seqs)

    assert peak(2, 8192) == pytest.approx(23872.0)  # the measured figure
    assert peak(1, 8192) == pytest.approx(22118.4 + 1742.9 + 1 + 4.35)
    assert peak(4, 8192) == pytest.approx(22118.4 + 1742.9 + 4 + 17.4)   # one shared budget
    assert peak(4, 8192) < 24576
    assert peak(4, 4096) == pytest.approx(22118.4 + 871.45 + 4 + 17.4)
    assert peak(4, 8192, utilization=0.95) > 24576 > peak(4, 4096, utilization=0.95)
    assert peak(2, 8192, environ={}) == pytest.approx(22118.4 + 0.75 * 1742.9 + 2 + 8.7)
    assert peak(4, 8192, tokens=1000) == pytest.approx(22118.4)  # short prompts do not count
    # Two prompts of 3,000 tokens share one step of 6,000 at 8192, not two of 3,000 each.
    model = memory_model(Args(8192), None, w4a8)
    assert step_peak_mib(model, [3000, 3000], 2) == pytest.approx(
        22118.4 + 217.8625 * 6000 / 1024 + 2 + 8.7)
    assert prefill_mib(model, 16388) == pytest.approx(1742.9)
    assert [prefill_steps(model, n) for n in (0, 8192, 16388, 65472)] == [0, 1, 3, 8]
    assert memory_model(Args(None), None, w4a8)["max_num_batched_tokens"] == 2048
    assert format_size(24125) == "23.56 GiB" and format_size(876.8) == "876.80 MiB"


def long_burst(server, n, tokens=16384):
    """n chat requests of distinct ~16K-word prompts released together; their statuses."""
    barrier = threading.Barrier(n)

    def one(i):
        barrier.wait(timeout=10)
        first = "p" + str(i).translate(LETTER_DIGITS)
        return ask(server, words_prompt(tokens, first=first), max_tokens=2)[0]

    with concurrent.futures.ThreadPoolExecutor(n) as pool:
        return list(pool.map(one, range(n)))


def w4a8_env(tmp_path):
    return double_env(tmp_path, VLLM_MARLIN_INPUT_DTYPE="int8", VLLM_DOUBLE_LATENCY_S="0.6")


@pytest.mark.parametrize(("seqs", "batched", "peak"), [
    (1, "8192", 23867), (2, "8192", 23872), (4, "8192", 23883), (4, "4096", 23011)])
def test_long_prefills_that_fit_pass_and_log_their_peak(double, tmp_path, seqs, batched, peak):
    server = double(["--max-num-batched-tokens", batched], env=w4a8_env(tmp_path))
    assert long_burst(server, seqs) == [200] * seqs
    assert server.proc.poll() is None
    peaks = [line for line in server.stdout().splitlines() if "prefill peak" in line]
    assert len(peaks) == seqs
    assert all(f"vllm-double: prefill peak {peak} MiB per card" in line for line in peaks)
    record = json.loads((tmp_path / "state" / "last-start.json").read_text())
    assert record["memory"]["w4a8"] is True and record["memory"]["card_mib"] == 24576


def test_long_prefills_over_the_card_run_out_of_memory_and_exit_1(double, tmp_path):
    """At 0.95 the reserved budget leaves no room for a full 8192-token step of 16K prompts."""
    server = double(["--max-num-batched-tokens", "8192", "--gpu-memory-utilization", "0.95"],
                    env=w4a8_env(tmp_path))
    assert long_burst(server, 4) == [500] * 4
    assert server.proc.wait(timeout=10) == 1
    err = server.stderr()
    assert "EngineCore encountered a fatal error." in err
    assert ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.70 GiB. GPU 0 "
            "has a total capacity of 23.56 GiB of which ") in err
    assert "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True" in err
    assert "EngineDeadError" in err
    assert "over the card's 24576 MiB" in err


def test_health_answers_503_once_the_engine_ran_out_of_memory(double, tmp_path):
    # As vLLM after EngineDeadError, until its API server exits: never 200 again.
    server = double(["--max-num-batched-tokens", "8192", "--gpu-memory-utilization", "0.95"],
                    env=w4a8_env(tmp_path))
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        burst = pool.submit(long_burst, server, 4)
        statuses, deadline = [], time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                statuses.append(get_text(server.base_url + "/health", timeout=2)[0])
            except OSError:
                break                                   # the process exited
            time.sleep(0.02)
        assert burst.result(timeout=30) == [500] * 4
    assert 503 in statuses, statuses
    assert 200 not in statuses[statuses.index(503):], statuses


@pytest.mark.parametrize("knob", ["renamed", "dropped"])
def test_spec_decode_counters_can_be_renamed_or_dropped(double, tmp_path, knob):
    env = double_env(tmp_path)
    write_rig_knobs(env, spec_decode_metrics=knob)
    server = double(["--served-model-name", "qwen", "--speculative-config",
                     '{"method": "mtp", "num_speculative_tokens": 4}'], env=env)
    payload = {"model": "qwen", "max_tokens": 30, "ignore_eos": True,
               "messages": [{"role": "user", "content": "Say hi."}]}
    assert http("POST", server.base_url + "/v1/chat/completions", payload)[0] == 200
    text = get_text(server.base_url + "/metrics")[1]
    assert "vllm:spec_decode_" not in text and "vllm:generation_tokens_total" in text
    assert ("vllm:speculative_decoding_num_drafts_total" in text) is (knob == "renamed")


def test_memory_knobs_validation(monkeypatch):
    import_double(monkeypatch)
    from vllm._double.server import rig_knobs

    good = {"garbage": True, "mtp_acceptance": 1, "ttft_jitter_s": 0.5, "rate_jitter_pct": 10,
            "seed": 4, "prefill_s_per_ktoken": 0, "memory": {"card_mib": 49152,
                                                             "w4a16_factor": 1}}
    assert rig_knobs(good) == ({**good, "mtp_acceptance": 1.0, "ttft_jitter_s": 0.5,
                                "rate_jitter_pct": 10.0, "prefill_s_per_ktoken": 0.0,
                                "memory": {"card_mib": 49152.0, "w4a16_factor": 1.0}}, [])
    knobs, warnings = rig_knobs({"garbage": "yes", "mtp_acceptance": 1.5, "ttft_jitter_s": -1,
                                 "rate_jitter_pct": "5", "seed": 1.5,
                                 "memory": {"card_mib": 0, "gpus": 2}})
    assert knobs == {"memory": {}} and len(warnings) == 7
    assert rig_knobs({"memory": [1]})[0] == {}


def test_a_log_line_is_written_in_one_call(monkeypatch):
    """Request threads log their prefill peaks at once. print() writes the text and the newline
    in two calls, so another thread's line can land between them (two peaks on one line, seen
    under load in test_long_prefills_that_fit_pass_and_log_their_peak); one write per whole line
    cannot be split by the file's own lock."""
    import_double(monkeypatch)
    from vllm._double import server

    class Recorder:
        def __init__(self):
            self.calls = []

        def write(self, text):
            self.calls.append(text)
            return len(text)

        def flush(self):
            pass

    out = Recorder()
    monkeypatch.setattr(sys, "stdout", out)
    server.log("vllm-double: prefill peak 23872 MiB per card")
    assert len(out.calls) == 1 and out.calls[0].endswith("prefill peak 23872 MiB per card\n")


# --- the KV cache pool as vLLM 0.27.1 says it at start (issue 46, part 1) ----------------------

def start_facts(text):
    from ansible.module_utils.vllm_dual_fast_domain.envelope import engine_start_facts
    return engine_start_facts(text)


def test_the_double_logs_its_kv_pool_in_vllm_s_words(double, tmp_path):
    env = double_env(tmp_path)
    write_rig_knobs(env, kv_cache_tokens=100000)
    server = double(["--max-model-len", "32K"], env=env)
    assert server.chat()[0] == 200
    # 100,000 tokens of 16 KiB; a request of 32K (32,768; 32k would be 32,000) holds 2,048
    # blocks and 64 KiB of state: 3.05 of them, the pool's tokens counted as vLLM counts them
    # for a hybrid model (concurrency x max_model_len)
    concurrency = 100000 * 16384 / (65536 + 2048 * 16 * 16384)
    assert "GPU KV cache size: 99,987 tokens" in server.stdout()
    assert int(concurrency * 32768) == 99987
    assert "Maximum concurrency for 32,768 tokens per request: 3.05x" in server.stdout()
    facts = start_facts(server.stdout())
    assert {k: facts[k] for k in ("kv_cache_tokens", "max_concurrency", "concurrency_for_tokens",
                                  "refused")} == {
        "kv_cache_tokens": 99987, "max_concurrency": 3.05, "concurrency_for_tokens": 32768,
        "refused": {}}
    # the GPU worker's lines: the pool it got, and the one to pin: 150 MiB less, the buffer
    # vLLM 0.27.1 leaves (gpu_worker.py, redundancy_buffer_memory)
    assert facts["available_kv_gib"] == round(100000 * 16384 / 2**30, 2)
    assert facts["kv_cache_memory_to_fit"] == 100000 * 16384 - 150 * 2**20
    # --kv-cache-memory-bytes sizes the pool, as on real vLLM (the fit pins it)
    pinned = double(["--max-model-len", "4096", "--kv-cache-memory-bytes", "128M"], env=env)
    assert start_facts(pinned.stdout())["max_concurrency"] == 2.0
    assert start_facts(pinned.stdout())["pinned_kv_gib"] == 0.12
    assert "Available KV cache memory" not in pinned.stdout()


def test_a_max_model_len_the_pool_cannot_hold_is_refused_with_vllm_s_message(double, tmp_path):
    env = double_env(tmp_path)
    write_rig_knobs(env, kv_cache_tokens=3000)
    result = run_vllm(["serve", "m", "--max-model-len", "4096"], env)
    assert result.returncode == 1
    assert "Application startup complete" not in result.stdout
    assert ("ValueError: To serve at least one request with the model's max seq len (4096), "
            "(0.06 GiB KV cache is needed, which is larger than the available KV cache memory "
            "(0.05 GiB). Based on the available memory, the estimated maximum model length is "
            "2992. Try increasing `gpu_memory_utilization`") in result.stderr, result.stderr
    assert start_facts(result.stderr)["refused"] == {
        "max_model_len": 4096, "needed_gib": 0.06, "available_gib": 0.05,
        "estimated_max_model_len": 2992}
    assert "GPU KV cache size" not in result.stdout
    held = double(["--max-model-len", "2992"], env=env)    # the length it named starts
    assert start_facts(held.stdout())["max_concurrency"] == 1.0


def test_streams_the_pool_cannot_hold_together_wait_unpreempted(double, tmp_path):
    """The fit's signal: 4 streams of 1,000-token prompts over a pool of 3,300 tokens. Three
    hold together (3 x 1,024 tokens in blocks); the fourth waits for room, shown in
    vllm:num_requests_waiting and not in vllm:num_preemptions_total (what the real engine does:
    test_engine_contract.py)."""
    env = double_env(tmp_path)
    write_rig_knobs(env, kv_cache_tokens=3300, ttft_s=0.2, tokens_per_s=20)
    server = double(["--served-model-name", "qwen", "--max-model-len", "2048"], env=env)
    labels = 'engine="0",model_name="qwen"'

    def prompt(n):
        return {"model": "qwen", "max_tokens": 10, "ignore_eos": True, "messages": [
            {"role": "user", "content": " ".join([f"nonce{n}"] + ["w"] * 995)}]}

    def burst(streams):
        threads = [threading.Thread(target=http, args=(
            "POST", server.base_url + "/v1/chat/completions", prompt(n))) for n in range(streams)]
        for thread in threads:
            thread.start()
        time.sleep(0.3)
        seen = metric_samples(get_text(server.base_url + "/metrics")[1])
        for thread in threads:
            thread.join()
        return seen, metric_samples(get_text(server.base_url + "/metrics")[1])

    during, after = burst(3)
    assert after[f"vllm:num_preemptions_total{{{labels}}}"] == 0.0
    assert during[f"vllm:num_requests_waiting{{{labels}}}"] == 0.0
    during, after = burst(4)
    assert during[f"vllm:num_requests_waiting{{{labels}}}"] == 1.0
    assert during[f"vllm:num_requests_running{{{labels}}}"] == 3.0
    assert after[f"vllm:num_preemptions_total{{{labels}}}"] == 0.0
    assert after[f"vllm:num_requests_waiting{{{labels}}}"] == 0.0


def test_the_model_recalls_a_needle_and_only_when_asked(double):
    server = double()
    needle = "The secret number is 73519."
    text = " ".join(["filler"] * 300 + [needle] + ["filler"] * 300)
    asked = {"model": "m", "max_tokens": 16, "messages": [
        {"role": "user",
         "content": f"{text}\nWhat is the secret number? Reply with the number only."}]}
    status, body = http("POST", server.base_url + "/v1/chat/completions", asked)
    assert status == 200 and body["choices"][0]["message"]["content"] == "73519"
    missing = {**asked, "messages": [{"role": "user", "content": asked["messages"][0][
        "content"].replace(needle, "")}]}
    status, body = http("POST", server.base_url + "/v1/chat/completions", missing)
    assert status == 200 and "73519" not in body["choices"][0]["message"]["content"]


def test_the_cards_memory_is_written_where_the_nvidia_smi_double_reads_it(double, tmp_path):
    """$HF_HOME/vllm-double-gpu.json: the budget between steps, a long prefill's peak while it
    runs, the budget again after; a pinned pool moves it by its difference."""
    env = double_env(tmp_path)
    (tmp_path / "hf").mkdir()
    write_rig_knobs(env, kv_cache_tokens=131072, ttft_s=1.0, tokens_per_s=50)
    server = double(["--max-model-len", "8192", "--gpu-memory-utilization", "0.9"], env=env)
    path = tmp_path / "hf" / "vllm-double-gpu.json"
    idle = json.loads(path.read_text())
    assert idle["used_mib"] == round(0.9 * 24576) and idle["card_mib"] == 24576
    payload = {"model": "m", "max_tokens": 4, "messages": [
        {"role": "user", "content": " ".join(["w"] * 4000)}]}
    busy = threading.Thread(target=http, args=("POST", server.base_url + "/v1/chat/completions",
                                               payload))
    busy.start()
    time.sleep(0.5)
    peak = json.loads(path.read_text())["used_mib"]
    busy.join()
    assert peak > idle["used_mib"]
    assert json.loads(path.read_text())["used_mib"] == idle["used_mib"]
    server.stop()
    double(["--max-model-len", "8192", "--kv-cache-memory-bytes", str(131072 * 16384 - 2**30)],
           env=env)
    assert json.loads(path.read_text())["used_mib"] == round(0.9 * 24576) - 1024
