"""files/smoke.py against real HTTP: the vLLM double as a subprocess on a loopback port."""

import json
import time

import pytest
from vllm_double_fixtures import (
    MTP,
    double_env,
    double_factory,
    free_port,
    load_file_module,
    write_flashinfer,
)

smoke = load_file_module("smoke")
SECRET = "sk-vdf-test-0123456789"  # noqa: S105 (a test key)


@pytest.fixture
def double(tmp_path):
    yield from double_factory(tmp_path)


def run(capsys, *args):
    """smoke.main(args) -> (exit code, report dict, all text it printed)."""
    code = smoke.main(["--json", "--health-interval", "0.1", *args])
    out, err = capsys.readouterr()
    report = json.loads(out) if out.strip() else None
    return code, report, out + err


def test_healthy_concurrency_4_passes_with_figures(double, capsys):
    server = double()
    code, report, _ = run(capsys, "--base-url", server.base_url, "--model", "m",
                          "--concurrency", "4", "--max-tokens", "8")
    assert code == 0
    assert report["ok"] is True
    assert report["failures"] == []
    assert len(report["requests"]) == 4
    for r in report["requests"]:
        assert r["status"] == 200
        assert r["completion_tokens"] == 8
        assert r["latency_s"] >= 0.3
        assert r["tokens_per_s"] > 0
        assert r["content_source"] == "content"
    agg = report["aggregate"]
    assert agg["ok"] == 4
    assert agg["total_completion_tokens"] == 32
    # truly concurrent: four 0.3 s requests end well before 4 x 0.3 s
    assert 0.3 <= agg["wall_s"] < 0.9
    assert agg["aggregate_tokens_per_s"] == pytest.approx(32 / agg["wall_s"], rel=0.01)
    assert agg["latency_p50_s"] <= agg["latency_max_s"]
    assert report["health_after"]["ok"] is True


def test_key_required_fails_without_and_passes_with_key_file(double, capsys, tmp_path,
                                                             monkeypatch):
    monkeypatch.delenv("VDF_API_KEY", raising=False)
    server = double(["--api-key", SECRET])
    code, report, text = run(capsys, "--base-url", server.base_url, "--model", "m")
    assert code == 1
    assert report["ok"] is False
    assert "/v1/models: HTTP 401" in report["failures"]
    assert {r["status"] for r in report["requests"]} == {401}
    assert SECRET not in text
    key_file = tmp_path / "key"
    key_file.write_text(SECRET + "\n")
    code, report, text = run(capsys, "--base-url", server.base_url, "--model", "m",
                             "--api-key-file", str(key_file))
    assert (code, report["ok"]) == (0, True)
    assert SECRET not in text
    monkeypatch.setenv("VDF_API_KEY", SECRET)
    code, report, text = run(capsys, "--base-url", server.base_url, "--model", "m")
    assert (code, report["ok"]) == (0, True)
    assert SECRET not in text


def test_key_is_redacted_even_where_a_server_echoes_it(capsys):
    endpoint = smoke.Endpoint("http://127.0.0.1:1", SECRET)
    assert SECRET not in endpoint.redact(f"error: Bearer {SECRET} refused")


@pytest.mark.parametrize("fault, failure", [
    ("empty-content@2", "empty content"),
    ("http-500@3", "HTTP 500"),
    ("zero-usage@1", "usage.completion_tokens missing or 0"),
])
def test_one_bad_answer_fails_the_smoke_and_is_named(double, capsys, tmp_path, fault, failure):
    server = double(env=double_env(tmp_path, VLLM_DOUBLE_FAULTS=fault))
    code, report, _ = run(capsys, "--base-url", server.base_url, "--model", "m")
    assert code == 1
    assert report["ok"] is False
    assert len(report["failures"]) == 1
    assert report["failures"][0].endswith(": " + failure)
    assert report["aggregate"]["ok"] == 3
    bad = [r for r in report["requests"] if not r["ok"]]
    assert len(bad) == 1
    assert report["failures"][0] == f"request {bad[0]['index']}: {failure}"


def test_model_not_served_fails(double, capsys):
    server = double(["--served-model-name", "other"])
    code, report, _ = run(capsys, "--base-url", server.base_url, "--model", "m")
    assert code == 1
    assert report["failures"][0] == "/v1/models: 'm' not served (served: ['other'])"


def test_reasoning_only_answer_counts(double, capsys):
    server = double(["--reasoning-parser", "qwen3"])
    code, report, _ = run(capsys, "--base-url", server.base_url, "--model", "m",
                          "--max-tokens", "4")
    assert code == 0
    assert {r["content_source"] for r in report["requests"]} == {"reasoning"}


def test_engine_crash_under_load_fails(double, capsys, tmp_path):
    env = double_env(tmp_path, write_flashinfer(tmp_path / "fi", pinned=True))
    server = double(["--max-num-seqs", "4", "--speculative-config", MTP], env=env)
    code, report, _ = run(capsys, "--base-url", server.base_url, "--model", "m")
    assert code == 1
    assert report["aggregate"]["ok"] == 0
    assert any(f.startswith("health after the burst:") for f in report["failures"])
    assert server.proc.wait(timeout=10) == 134


def test_never_healthy_exits_2_within_the_timeout(capsys):
    start = time.monotonic()
    code, report, _ = run(capsys, "--base-url", f"http://127.0.0.1:{free_port()}",
                          "--model", "m", "--health-timeout", "1.5")
    elapsed = time.monotonic() - start
    assert code == 2
    assert 1.2 <= elapsed < 4
    assert report["ok"] is False
    assert report["failures"][0].startswith("health: /health not 200 within 1.5s")
    assert "requests" not in report


def test_unhealthy_503_exits_2(double, capsys, tmp_path):
    port_env = double_env(tmp_path, VLLM_DOUBLE_FAULTS="never-healthy")
    server = double(env=port_env, wait=False)
    code, report, _ = run(capsys, "--base-url", server.base_url, "--model", "m",
                          "--health-timeout", "1")
    assert code == 2
    assert "HTTP 503" in report["failures"][0]


@pytest.mark.parametrize("args", [
    ["--model", "m"],
    ["--base-url", "http://127.0.0.1:1", "--model", "m", "--concurrency", "0"],
    ["--base-url", "ftp://127.0.0.1:1", "--model", "m"],
    ["--base-url", "http://127.0.0.1:1", "--model", "m", "--api-key-file", "/nonexistent/k"],
])
def test_bad_usage_exits_2(capsys, args):
    assert smoke.main(args) == 2
    assert capsys.readouterr().out == ""


def test_helpers():
    assert smoke.percentile([0.4, 0.1, 0.3, 0.2], 0.5) == 0.2
    assert smoke.percentile([0.5], 0.5) == 0.5
    message = {"choices": [{"message": {"content": None, "reasoning": "thinking"}}]}
    assert smoke.answer_text(message) == ("thinking", "reasoning")
    assert smoke.answer_text({"choices": [{"message": {"content": "  "}}]}) == ("", None)
    body = {"choices": [{"message": {"content": "hi"}}], "usage": {"completion_tokens": 3}}
    assert smoke.check_completion(200, body, None) == (3, "content", None)
    assert smoke.check_completion(500, None, "HTTP 500")[2] == "HTTP 500"


def _docker_double(tmp_path, monkeypatch, states):
    """A `docker` on PATH that answers `inspect` with the next of `states` ("STATUS RESTARTS")
    and `logs` with a crash's last lines: the serving container as the Docker CLI reports it."""
    state_file = tmp_path / "states"
    state_file.write_text("\n".join(states) + "\n")
    script = tmp_path / "bin" / "docker"
    script.parent.mkdir()
    script.write_text(
        "#!/bin/sh\n"
        f'f="{state_file}"\n'
        'case "$1" in\n'
        '  inspect) head -n 1 "$f"; [ "$(wc -l < "$f")" -gt 1 ] && sed -i 1d "$f"; exit 0 ;;\n'
        '  logs) echo "fi-pinq: unpatched decode.py"; '
        'echo "RuntimeError: CUDA error: an illegal memory access was encountered"; exit 0 ;;\n'
        "esac\nexit 1\n")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{script.parent}:{__import__('os').environ['PATH']}")


@pytest.mark.parametrize("states", [["running 0", "exited 0"], ["running 0", "restarting 1"]])
def test_waiting_for_health_stops_when_the_container_dies(tmp_path, monkeypatch, capsys, states):
    _docker_double(tmp_path, monkeypatch, states)
    start = time.monotonic()
    code, report, _ = run(capsys, "--base-url", f"http://127.0.0.1:{free_port()}", "--model", "m",
                          "--health-timeout", "60", "--container", "vllm-dual-fast")
    assert time.monotonic() - start < 10
    assert code == 2
    [failure] = report["failures"]
    assert "vllm-dual-fast" in failure
    assert "illegal memory access" in failure     # the container's last log lines are named


def test_waiting_for_health_goes_on_while_the_container_runs(tmp_path, monkeypatch, capsys):
    _docker_double(tmp_path, monkeypatch, ["running 0"])
    code, report, _ = run(capsys, "--base-url", f"http://127.0.0.1:{free_port()}", "--model", "m",
                          "--health-timeout", "1.5", "--container", "vllm-dual-fast")
    assert code == 2
    assert report["failures"][0].startswith("health: /health not 200 within 1.5s")
