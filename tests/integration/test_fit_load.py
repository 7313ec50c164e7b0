"""fit_load.py (one fit candidate's load) against the vLLM double and the nvidia-smi double, the
cards' memory passed between them as on a simulated rig ($HF_HOME/vllm-double-gpu.json)."""

import json
import sys

import pytest
from vllm_double_fixtures import ROOT, double_env, double_factory, load_file_module, write_rig_knobs

fit_load = load_file_module("fit_load")
SMI = ROOT / "molecule" / "doubles" / "nvidia-smi-double"


@pytest.fixture
def double(tmp_path):
    yield from double_factory(tmp_path)


@pytest.fixture
def rig(tmp_path, monkeypatch):
    """An engine environment and an nvidia-smi reading what that engine holds."""
    env = double_env(tmp_path)
    (tmp_path / "hf").mkdir()
    config = tmp_path / "smi.json"
    config.write_text(json.dumps({"memory_used_file": str(tmp_path / "hf" /
                                                          "vllm-double-gpu.json")}))
    smi = tmp_path / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\nexec {sys.executable} {SMI} \"$@\"\n")
    smi.chmod(0o755)
    monkeypatch.setenv("NVIDIA_SMI_DOUBLE_CONFIG", str(config))
    monkeypatch.setenv("NVIDIA_SMI_DOUBLE_STATE_DIR", str(tmp_path / "smi-state"))
    return env, smi


def load(capsys, server, smi, *args):
    code = fit_load.main(["--base-url", server.base_url, "--model", "m", "--nvidia-smi",
                          str(smi), "--sample-s", "0.05", "--health-timeout", "10", *args])
    return code, json.loads(capsys.readouterr().out)


def test_three_streams_run_together_a_fourth_waits_and_the_ladder_recalls(double, rig, capsys):
    env, smi = rig
    # 3 x (1,000-token prompt + 16 answer) in blocks fit 3,300 tokens; a fourth does not. The
    # answers take long enough (16 tokens at 50/s: 0.3 s) for the 0.05 s sampler to see them.
    write_rig_knobs(env, kv_cache_tokens=3300, ttft_s=0.1, tokens_per_s=50)
    server = double(["--max-model-len", "2048"], env=env)
    common = ["--prompt-tokens", "1000", "--max-tokens", "16", "--max-model-len", "2048",
              "--ladder", "0.5,0.92"]
    code, three = load(capsys, server, smi, "--streams", "3", *common)
    assert code == 0, three["failures"]
    assert three["streams"]["ok"] == 3 and three["streams"]["total_completion_tokens"] == 48
    assert three["preemptions"]["delta"] == 0
    assert (three["streams"]["running_peak"], three["streams"]["waiting_peak"]) == (3, 0)
    assert [rung["recalled"] for rung in three["ladder"]] == [True, True]
    assert three["ladder"][1]["tokens"] == int(0.92 * 2048) - 64
    # the cards: 0.9 of 24,576 MiB held between steps (no prefill of 1,024 tokens or more)
    cards = three["gpu"]["cards"]
    assert [c["used_after_warmup_mib"] for c in cards] == [22118, 22118]
    assert [c["min_free_mib"] for c in cards] == [24576 - 22118 - 256] * 2
    code, four = load(capsys, server, smi, "--streams", "4", *common)
    assert code == 0    # every stream completed: the fourth waited its turn
    assert (four["streams"]["running_peak"], four["streams"]["waiting_peak"]) == (3, 1)
    assert four["preemptions"]["delta"] == 0    # waiting is not preemption, as on vLLM


def test_a_long_prefill_shows_in_the_least_free_memory_seen(double, rig, capsys):
    env, smi = rig
    write_rig_knobs(env, ttft_s=0.8, tokens_per_s=100)
    server = double(["--max-model-len", "16384", "--max-num-batched-tokens", "8192"], env=env)
    code, report = load(capsys, server, smi, "--streams", "2", "--prompt-tokens", "6000",
                        "--max-tokens", "8", "--max-model-len", "16384")
    assert code == 0, report["failures"]
    card = report["gpu"]["cards"][0]
    # two 6,000-token prefills in one 8,192-token step peak at 23,872 MiB (the double's model,
    # calibrated on the measured rig): under the fit's 1 GiB free, what docs/fit.md says of 8,192
    assert card["min_free_mib"] < 1024 < 24576 - 22118 - 256 < card["total_mib"]
    assert card["used_after_mib"] == card["used_after_warmup_mib"]


def test_another_process_on_one_card_fails_the_memory_bound_on_that_card(double, rig,
                                                                         capsys, tmp_path):
    """Rigs differ: a desktop holding 1,500 MiB of GPU 0 leaves it under 1 GiB free beside the
    engine's 0.90 (the verdict names GPU 0 only), where the other card keeps 2,202 MiB."""
    from ansible.module_utils.vllm_dual_fast_domain.fit import fit_candidate_verdict

    env, smi = rig
    config = tmp_path / "smi.json"
    config.write_text(json.dumps({**json.loads(config.read_text()), "other_used_mib": "1500,0"}))
    server = double(["--max-model-len", "4096"], env=env)
    code, report = load(capsys, server, smi, "--streams", "1", "--prompt-tokens", "100",
                        "--max-model-len", "4096")
    assert code == 0, report["failures"]
    assert [c["min_free_mib"] for c in report["gpu"]["cards"]] == [702, 2202]
    verdict = fit_candidate_verdict(
        {"max_num_seqs": 1, "max_model_len": 4096, "max_num_batched_tokens": 2048},
        {"kv_cache_tokens": 131072}, report, {"lines": [], "readable": True},
        {"min_free_mib": 1024})
    assert verdict["reasons"] == ["GPU 0 kept 702 MiB free, under 1024 MiB"]


def test_a_stream_that_fails_is_named_and_fails_the_run(double, rig, capsys, tmp_path):
    env, smi = rig
    env["VLLM_DOUBLE_FAULTS"] = "http-500@3"
    server = double(["--max-model-len", "4096"], env=env)
    code, report = load(capsys, server, smi, "--streams", "2", "--prompt-tokens", "100",
                        "--max-model-len", "4096")
    assert code == 1
    assert any(f.startswith("stream ") and "500" in f for f in report["failures"]), report


def test_no_nvidia_smi_is_said_not_guessed(double, rig, capsys, tmp_path):
    env, _smi = rig
    server = double(["--max-model-len", "4096"], env=env)
    code, report = load(capsys, server, tmp_path / "absent", "--streams", "1",
                        "--prompt-tokens", "100", "--max-model-len", "4096")
    assert code == 0
    assert report["gpu"] == {"cards": [], "samples": 0,
                             "unavailable": "nvidia-smi did not answer"}


def test_bad_arguments_exit_2():
    assert fit_load.main(["--base-url", "http://127.0.0.1:9", "--model", "m", "--streams", "1",
                          "--prompt-tokens", "0", "--max-model-len", "4096"]) == 2
