"""files/smoke.py against real HTTP: the vLLM double as a subprocess on a loopback port."""

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from vllm_double_fixtures import (
    MTP,
    double_env,
    double_factory,
    free_port,
    load_file_module,
    write_flashinfer,
    write_rig_knobs,
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
    # the speed medians are not the nearest-rank p50: two rounds give their mean
    assert smoke._median([0.4, None, 0.1, 0.3, 0.2], 4) == 0.25
    assert smoke._median([None], 2) is None
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



# --- --speed: streamed completions ------------------------------------------------------------

def speed_double(double, tmp_path, args=(), **knobs):
    env = double_env(tmp_path)
    write_rig_knobs(env, **knobs)
    return double(list(args), env=env)


def test_speed_reports_medians_at_c1_and_cN_from_the_rig_rate(double, capsys, tmp_path):
    server = speed_double(double, tmp_path, tokens_per_s=100, ttft_s=0.2)
    code, report, _ = run(capsys, "--base-url", server.base_url, "--model", "m",
                          "--concurrency", "4", "--max-tokens", "8", "--speed",
                          "--speed-max-tokens", "31", "--speed-rounds", "1")
    assert (code, report["ok"], report["failures"]) == (0, True, [])
    # the smoke's own keys are as they were
    assert report["aggregate"]["total_completion_tokens"] == 32
    assert len(report["requests"]) == 4 and report["health_after"]["ok"] is True
    speed = report["speed"]
    assert (speed["concurrency"], speed["max_tokens"], speed["rounds"]) == (4, 31, 1)
    c1, cn = speed["c1"], speed["cN"]
    assert (c1["requests"], c1["ok"], cn["requests"], cn["ok"]) == (1, 1, 4, 4)
    for level in (c1, cn):
        assert 60 <= level["tokens_per_s"] <= 101  # 30 intervals of 10 ms, sleeps only overshoot
        assert 0.2 <= level["ttft_s"] < 0.6
        for sample in level["samples"]:
            assert sample["completion_tokens"] == 31
            assert sample["counted_from"] == "usage"
            assert sample["token_deltas"] == 31
    # four streams at once: about four times the tokens per second of one
    assert cn["aggregate_tokens_per_s"] > 2.5 * c1["aggregate_tokens_per_s"]
    assert c1["aggregate_tokens_per_s"] < c1["tokens_per_s"]  # TTFT counts in the wall time
    assert speed["health_after"]["ok"] is True


def test_speed_tells_a_slow_rig_from_a_fast_one(double, capsys, tmp_path):
    rates = []
    for rate in (40, 160):
        folder = tmp_path / str(rate)
        folder.mkdir()
        server = speed_double(double, folder, tokens_per_s=rate, ttft_s=0.05)
        code, report, _ = run(capsys, "--base-url", server.base_url, "--model", "m",
                              "--concurrency", "2", "--speed", "--speed-max-tokens", "21",
                              "--speed-rounds", "2")
        assert code == 0
        assert report["speed"]["c1"]["requests"] == 2
        rates.append(report["speed"]["c1"]["tokens_per_s"])
    slow, fast = rates
    assert 28 <= slow <= 40.5
    assert fast > 2.5 * slow


def test_speed_is_skipped_when_the_smoke_failed(double, capsys, tmp_path):
    server = double(env=double_env(tmp_path, VLLM_DOUBLE_FAULTS="empty-content@2"))
    code, report, _ = run(capsys, "--base-url", server.base_url, "--model", "m", "--speed")
    assert code == 1
    assert report["speed"] == {"skipped": "the smoke failed"}
    assert len(report["failures"]) == 1


def test_a_failing_stream_fails_the_smoke_and_is_named(double, capsys, tmp_path):
    # requests 1-4 are the smoke's; the 5th is the first speed request (c=1)
    server = double(env=double_env(tmp_path, VLLM_DOUBLE_FAULTS="http-500@5"))
    code, report, _ = run(capsys, "--base-url", server.base_url, "--model", "m", "--speed",
                          "--speed-max-tokens", "8", "--speed-rounds", "1")
    assert code == 1
    assert report["failures"] == ["speed c=1 round 1 request 0: HTTP 500"]
    assert report["speed"]["c1"]["ok"] == 0
    assert report["speed"]["c1"]["tokens_per_s"] is None
    assert "cN" not in report["speed"]
    assert report["aggregate"]["ok"] == 4


def test_stream_chat_counts_deltas_without_a_usage_chunk(double, tmp_path):
    server = speed_double(double, tmp_path, ["--reasoning-parser", "qwen3"], tokens_per_s=200)
    payload = smoke.speed_payload("m", 21)
    del payload["stream_options"]
    result = smoke.stream_chat(smoke.Endpoint(server.base_url), payload)
    assert (result["ok"], result["error"], result["status"]) == (True, None, 200)
    # 8 reasoning deltas then 13 content deltas, one token each
    assert (result["completion_tokens"], result["counted_from"]) == (21, "deltas")
    assert result["tokens_per_s"] > 50


class _SSE(BaseHTTPRequestHandler):
    """Answers every POST with the events in the server's `events` list, then closes."""

    def log_message(self, *args):
        pass

    def do_POST(self):  # noqa: N802
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        for line in self.server.events:
            self.wfile.write(line.encode() + b"\n")


@pytest.fixture
def sse_server():
    servers = []

    def start(events):
        server = ThreadingHTTPServer(("127.0.0.1", 0), _SSE)
        server.events = events
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}"

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def _delta(text):
    return "data: " + json.dumps({"choices": [{"index": 0, "delta": {"content": text}}]}) + "\n"


@pytest.mark.parametrize("events, error", [
    ([_delta("a"), _delta(" b")], "stream ended without data: [DONE]"),
    ([_delta("a"), 'data: {"error": {"message": "engine died"}}'], "error in the stream: "
     "engine died"),
    (["data: [DONE]"], "no tokens streamed"),
    (["data: {not json"], "stream chunk is not a JSON object"),
])
def test_broken_streams_are_failures(sse_server, events, error):
    base = sse_server(events)
    result = smoke.stream_chat(smoke.Endpoint(base), smoke.speed_payload("m", 8))
    assert (result["ok"], result["error"]) == (False, error)


def test_sse_comments_and_other_fields_are_skipped(sse_server):
    base = sse_server([": keep-alive", "event: message", _delta("a"), "id: 7", _delta(" b"),
                       "data:" + json.dumps({"choices": [], "usage": {"completion_tokens": 5}}),
                       "", "data: [DONE]"])
    result = smoke.stream_chat(smoke.Endpoint(base), smoke.speed_payload("m", 8))
    assert result["ok"] is True
    assert (result["completion_tokens"], result["counted_from"], result["token_deltas"]) == (
        5, "usage", 2)


def test_speed_helpers():
    assert smoke.sse_data(b"data: {\"a\": 1}\r\n") == '{"a": 1}'
    assert smoke.sse_data("data:[DONE]\n") == "[DONE]"
    assert smoke.sse_data(b": ping\n") is None
    assert smoke.sse_data(b"\n") is None
    role = {"choices": [{"delta": {"role": "assistant", "content": ""}}]}
    assert smoke.chunk_info(role) == (False, None, None)
    assert smoke.chunk_info({"choices": [{"delta": {"reasoning": "hm"}}]}) == (True, None, None)
    assert smoke.chunk_info({"choices": [], "usage": {"completion_tokens": 9}}) == (
        False, 9, None)
    figures = smoke.stream_figures(10.0, [10.5, 10.6, 10.7])
    assert (figures["completion_tokens"], figures["counted_from"]) == (3, "deltas")
    assert figures["ttft_s"] == 0.5
    assert figures["tokens_per_s"] == pytest.approx(10.0)  # 2 tokens after the first in 0.2 s
    # speculative decoding: fewer deltas than tokens; usage counts
    assert smoke.stream_figures(10.0, [10.5, 10.6, 10.7], 9)["tokens_per_s"] == pytest.approx(40)
    assert smoke.stream_figures(10.0, [10.5])["tokens_per_s"] is None
    assert smoke.stream_figures(10.0, [])["ttft_s"] is None
    assert smoke.stream_figures(10.0, [10.5, 10.5])["tokens_per_s"] is None


@pytest.mark.parametrize(("args", "named"), [
    (["--speed-max-tokens", "1"], "--speed-max-tokens"),
    (["--speed-rounds", "0"], "--speed-rounds"),
    (["--soak-s", "-1"], "--soak-s"),
])
def test_bad_speed_usage_exits_2(capsys, args, named):
    assert smoke.main(["--base-url", "http://127.0.0.1:1", "--model", "m", "--speed",
                       *args]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert f"smoke: {named} must be" in captured.err


def test_soak_holds_the_concurrency_for_its_time_without_a_failure(double, capsys):
    server = double()
    start = time.monotonic()
    code, report, _ = run(capsys, "--base-url", server.base_url, "--model", "m",
                          "--concurrency", "2", "--max-tokens", "4", "--soak-s", "1.5")
    assert code == 0
    assert time.monotonic() - start >= 1.5
    soak = report["soak"]
    assert soak["seconds"] == 1.5 and soak["concurrency"] == 2
    assert soak["requests"] > 2 and soak["failed"] == 0


def test_soak_fails_on_a_failed_request_after_the_burst(double, capsys, tmp_path):
    # The burst is requests 1-2; the 6th chat request, inside the soak, answers 500.
    server = double(env=double_env(tmp_path, VLLM_DOUBLE_FAULTS="http-500@6"))
    code, report, _ = run(capsys, "--base-url", server.base_url, "--model", "m",
                          "--concurrency", "2", "--max-tokens", "4", "--soak-s", "2")
    assert code == 1
    assert report["aggregate"]["ok"] == 2
    assert report["soak"]["failed"] == 1
    assert any(f.startswith("soak: 1 of ") and "HTTP 500" in f for f in report["failures"])
