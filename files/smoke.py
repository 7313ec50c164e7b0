#!/usr/bin/env python3
"""Health smoke client for a vLLM OpenAI-compatible endpoint (standard library only, Python 3.9+).

    python3 smoke.py --base-url http://127.0.0.1:8000 --model NAME [--api-key-file F]
                     [--concurrency 4] [--health-timeout 600] [--max-tokens 64] [--json]
                     [--speed [--speed-max-tokens 256] [--speed-rounds 2]] [--soak-s 0]

1. waits for GET /health to answer 200 (up to --health-timeout seconds);
2. checks GET /v1/models lists NAME;
3. fires --concurrency chat completions truly at once (one thread each, released together by a
   barrier), each a short prompt; every one must be HTTP 200 with non-empty text and
   usage.completion_tokens > 0;
4. checks GET /health again: an engine that died under load (vllm issue #40756) fails here even
   when its answers got out.

Non-empty text: choices[0].message.content; when that is empty or null, the reasoning text
(message.reasoning_content, or message.reasoning in newer vLLM) counts instead, and the request
records content_source "reasoning". A reasoning model (vLLM started with --reasoning-parser) may
spend a small max_tokens entirely on thinking; the engine still generated tokens, which is what
this smoke proves. An answer with neither is a failure ("empty content").

--speed, after a smoke that passed: decode speed from streamed chat completions ("stream": true,
"stream_options": {"include_usage": true}, vLLM's "ignore_eos": true so the engine generates
--speed-max-tokens tokens), at concurrency 1 and at --concurrency N, each --speed-rounds times
(one request, or N released together, per round). Per request: time to first token (TTFT: from
sending to the first server-sent event whose delta carries content or reasoning text), tokens
(the stream's usage chunk when it has one, else one per such delta, as vLLM streams by default),
and decode tokens/s = (tokens - 1) / (time of the last token delta - time of the first). Per
round: aggregate tokens/s = all tokens / wall time. Reported under "speed" as medians:
{"c1": {"tokens_per_s", "ttft_s", "aggregate_tokens_per_s", "requests", "ok", "samples"},
 "cN": {...}, "concurrency": N, "max_tokens": M, "rounds": R}. A stream that fails (HTTP error,
no tokens, an error chunk, no final `data: [DONE]`) or /health not 200 afterwards is a failure of
the smoke (named "speed c=N round R request I: ..."); "cN" is left out when c=1 already failed.
A smoke that failed skips it: "speed": {"skipped": "the smoke failed"}.

Output: one JSON object on stdout (--json: one line; otherwise indented): per request
(latency_s, completion_tokens, tokens_per_s, status, ...), an aggregate (ok count, wall_s,
total completion tokens, aggregate tokens/s, p50 and max latency), ok: true|false and failures,
a list of what failed. The API key (--api-key-file, else env VDF_API_KEY) is sent only in the
Authorization header and never printed.

Exit codes: 0 all good; 1 smoke failed (the endpoint answered, something was wrong, in the
speed run too); 2 bad usage, unreadable key file, or the endpoint never became healthy within
the timeout.
"""

import argparse
import contextlib
import http.client
import json
import math
import os
import statistics
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
PROMPTS = (
    "Name one planet of the solar system.",
    "Give one word that rhymes with light.",
    "What is two plus three?",
    "Name a colour of the rainbow.",
    "Say hello in French.",
    "Name a prime number below ten.",
    "Name one ocean.",
    "Give a synonym of quick.",
)
SPEED_PROMPT = ("Tell a long story about a lighthouse keeper and the ships she guides, in plain "
                "prose, and keep going until you are stopped.")


class Endpoint:
    """Base URL plus optional bearer key; the key stays inside the request headers."""

    def __init__(self, base_url: str, api_key=None, timeout: float = 120.0):
        if not base_url.startswith(("http://", "https://")):
            raise ValueError(f"base URL must be http:// or https://, not {base_url!r}")
        self.base_url = base_url.rstrip("/")
        self._api_key = api_key or None
        self.timeout = timeout

    def _build(self, method: str, path: str, payload, accept: str) -> urllib.request.Request:
        data = None if payload is None else json.dumps(payload).encode()
        req = urllib.request.Request(  # noqa: S310 (scheme checked in __init__)
            self.base_url + path, data=data, method=method)
        req.add_header("Accept", accept)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        if self._api_key:
            req.add_header("Authorization", "Bearer " + self._api_key)
        return req

    def open_stream(self, path: str, payload):
        """(status, open response or None, error text or None) for a POST answered with
        server-sent events; the caller reads and closes the response. Never raises for
        HTTP/network errors."""
        req = self._build("POST", path, payload, "text/event-stream")
        try:
            resp = urllib.request.urlopen(req, timeout=self.timeout)  # noqa: S310
            return resp.status, resp, None
        except urllib.error.HTTPError as exc:
            if exc.fp:
                exc.close()
            return exc.code, None, f"HTTP {exc.code}"
        except (urllib.error.URLError, OSError, ValueError) as exc:
            reason = getattr(exc, "reason", exc)
            return None, None, f"{type(reason).__name__}: {reason}"

    def request(self, method: str, path: str, payload=None, timeout=None):
        """(status, parsed JSON or None, error text or None); never raises for HTTP/network."""
        req = self._build(method, path, payload, "application/json")
        try:
            with urllib.request.urlopen(req, timeout=timeout or self.timeout) as resp:  # noqa: S310
                return resp.status, _parse(resp.read()), None
        except urllib.error.HTTPError as exc:
            body = exc.read() if exc.fp else b""
            return exc.code, _parse(body), f"HTTP {exc.code}"
        except (urllib.error.URLError, OSError, ValueError) as exc:
            reason = getattr(exc, "reason", exc)
            return None, None, f"{type(reason).__name__}: {reason}"

    def redact(self, text: str) -> str:
        return text.replace(self._api_key, "***") if self._api_key else text


def _parse(raw: bytes):
    try:
        return json.loads(raw) if raw else None
    except ValueError:
        return None


def container_watch(name: str):
    """A callable that says why the serving container can no longer become healthy (it exited,
    or Docker restarted it since the first call), naming its last log lines; None while it runs.
    Waiting out a 30-minute health timeout for a container that crashed helps nobody."""
    def inspect():
        fmt = "{{.State.Status}} {{.RestartCount}}"
        out = subprocess.run(["docker", "inspect", "-f", fmt, name],
                             capture_output=True, text=True, timeout=20).stdout.split()
        return (out[0], int(out[1])) if len(out) == 2 and out[1].isdigit() else ("missing", 0)

    _, first_restarts = inspect()

    def gone():
        status, restarts = inspect()
        if status not in ("exited", "dead", "missing") and restarts <= first_restarts:
            return None
        logs = subprocess.run(["docker", "logs", "--tail", "15", name], capture_output=True,
                              text=True, timeout=20)
        tail = " | ".join((logs.stdout + logs.stderr).strip().splitlines()[-15:])
        what = "is gone" if status == "missing" else (
            f"is {status}" if restarts <= first_restarts
            else f"restarted ({first_restarts} -> {restarts} restarts)")
        return f"container {name} {what}; its last log lines: {tail or '(none)'}"

    return gone


def wait_healthy(endpoint: Endpoint, timeout_s: float, interval_s: float = 1.0,
                 gone=None) -> dict:
    """Polls GET /health until 200 or timeout_s, or until gone() names a reason to stop;
    {'ok', 'waited_s', 'attempts', 'last'} (+ 'gone' when the container died)."""
    start = time.monotonic()
    deadline = start + timeout_s
    attempts, last = 0, None
    while True:
        reason = gone() if gone else None
        if reason:
            return {"ok": False, "waited_s": round(time.monotonic() - start, 3),
                    "attempts": attempts, "last": last, "gone": reason}
        attempts += 1
        remaining = max(deadline - time.monotonic(), 0.1)
        status, _, error = endpoint.request("GET", "/health", timeout=min(5.0, remaining))
        if status == 200:
            return {"ok": True, "waited_s": round(time.monotonic() - start, 3),
                    "attempts": attempts, "last": 200}
        last = error or f"HTTP {status}"
        if time.monotonic() + interval_s > deadline:
            return {"ok": False, "waited_s": round(time.monotonic() - start, 3),
                    "attempts": attempts, "last": last}
        time.sleep(interval_s)


def served_models(endpoint: Endpoint) -> tuple:
    """(list of model ids, error text or None) from GET /v1/models."""
    status, body, error = endpoint.request("GET", "/v1/models")
    if status != 200:
        return [], f"/v1/models: {error or f'HTTP {status}'}"
    try:
        return [m["id"] for m in body["data"]], None
    except (KeyError, TypeError):
        return [], "/v1/models: unexpected answer (no data[].id)"


def answer_text(body) -> tuple:
    """(text, source) of a chat completion: content, else reasoning; ('', None) when none."""
    try:
        message = body["choices"][0]["message"]
    except (KeyError, IndexError, TypeError):
        return "", None
    if not isinstance(message, dict):
        return "", None
    content = message.get("content")
    if isinstance(content, str) and content.strip():
        return content, "content"
    for key in ("reasoning_content", "reasoning"):
        value = message.get(key)
        if isinstance(value, str) and value.strip():
            return value, "reasoning"
    return "", None


def check_completion(status, body, error) -> tuple:
    """(completion_tokens, content_source, problem or None) for one answer."""
    if status != 200:
        return 0, None, error or f"HTTP {status}"
    text, source = answer_text(body)
    usage = body.get("usage") if isinstance(body, dict) else None
    tokens = usage.get("completion_tokens") if isinstance(usage, dict) else None
    tokens = tokens if isinstance(tokens, int) and not isinstance(tokens, bool) else 0
    if not text:
        return tokens, source, "empty content"
    if tokens <= 0:
        return tokens, source, "usage.completion_tokens missing or 0"
    return tokens, source, None


def run_together(task, n: int) -> tuple:
    """Runs task(index) in n threads released together by a barrier; (results, wall_s). Each
    task returns a dict with '_start' and '_end' (time.monotonic), removed here."""
    barrier = threading.Barrier(n)
    results = [None] * n

    def one(index: int) -> None:
        with contextlib.suppress(threading.BrokenBarrierError):
            barrier.wait(timeout=30)
        results[index] = task(index)

    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = max(r["_end"] for r in results) - min(r["_start"] for r in results)
    for r in results:
        del r["_start"], r["_end"]
    return results, wall


def fire_concurrent(endpoint: Endpoint, model: str, concurrency: int, max_tokens: int) -> tuple:
    """Sends `concurrency` chat completions released together; (results, wall_s)."""
    def one(index: int) -> dict:
        payload = {"model": model, "max_tokens": max_tokens, "temperature": 0,
                   "messages": [{"role": "user", "content": PROMPTS[index % len(PROMPTS)]}]}
        start = time.monotonic()
        status, body, error = endpoint.request("POST", "/v1/chat/completions", payload)
        end = time.monotonic()
        tokens, source, problem = check_completion(status, body, error)
        latency = end - start
        return {
            "index": index, "status": status, "ok": problem is None, "error": problem,
            "latency_s": round(latency, 4), "completion_tokens": tokens,
            "tokens_per_s": round(tokens / latency, 2) if latency > 0 and tokens else 0.0,
            "content_source": source, "_start": start, "_end": end,
        }

    return run_together(one, concurrency)


def run_soak(endpoint: Endpoint, model: str, concurrency: int, max_tokens: int,
             seconds: float) -> dict:
    """Holds `concurrency` requests in flight for `seconds` (each worker sends its next request
    as soon as the last one answered); {'seconds', 'concurrency', 'requests', 'failed',
    'errors' (the first five)}."""
    deadline = time.monotonic() + seconds
    lock = threading.Lock()
    tally = {"requests": 0, "failed": 0, "errors": []}

    def worker(index: int) -> None:
        n = 0
        while time.monotonic() < deadline:
            prompt = PROMPTS[(index + n) % len(PROMPTS)]
            payload = {"model": model, "max_tokens": max_tokens, "temperature": 0,
                       "messages": [{"role": "user", "content": prompt}]}
            status, body, error = endpoint.request("POST", "/v1/chat/completions", payload)
            _, _, problem = check_completion(status, body, error)
            n += 1
            with lock:
                tally["requests"] += 1
                if problem:
                    tally["failed"] += 1
                    if len(tally["errors"]) < 5:
                        tally["errors"].append(problem)

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(concurrency)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return {"seconds": seconds, "concurrency": concurrency, **tally}


# --- speed (--speed): streamed chat completions -------------------------------------------------

def sse_data(line) -> object:
    """The data of one server-sent-event line ('data: X' -> 'X'); None for any other line
    (blank separators, ': comments', 'event:' and 'id:' fields)."""
    text = line.decode("utf-8", "replace") if isinstance(line, bytes) else line
    text = text.rstrip("\r\n")
    if not text.startswith("data:"):
        return None
    data = text[len("data:"):]
    return data[1:] if data.startswith(" ") else data


def chunk_info(chunk) -> tuple:
    """(carries a token?, usage.completion_tokens or None, error text or None) for one parsed
    chat.completion.chunk. A token: choices[0].delta with non-empty content, reasoning_content
    or reasoning (a role-only or empty delta is not one)."""
    if not isinstance(chunk, dict):
        return False, None, "stream chunk is not a JSON object"
    if chunk.get("error"):
        error = chunk["error"]
        message = error.get("message") if isinstance(error, dict) else error
        return False, None, f"error in the stream: {message}"
    usage = chunk.get("usage")
    used = usage.get("completion_tokens") if isinstance(usage, dict) else None
    used = used if isinstance(used, int) and not isinstance(used, bool) else None
    choices = chunk.get("choices")
    delta = choices[0].get("delta") if isinstance(choices, list) and choices and isinstance(
        choices[0], dict) else None
    token = isinstance(delta, dict) and any(
        isinstance(delta.get(k), str) and delta.get(k) != ""
        for k in ("content", "reasoning_content", "reasoning"))
    return token, used, None


def stream_figures(start: float, token_times, usage_tokens=None) -> dict:
    """Figures of one streamed answer from the times its token deltas arrived: completion_tokens
    (usage_tokens when positive, else one per delta) and its source, ttft_s, and decode
    tokens_per_s = (tokens - 1) / (last delta - first delta), None when it cannot be measured
    (fewer than 2 tokens, or all of them in one instant)."""
    deltas = len(token_times)
    if isinstance(usage_tokens, int) and usage_tokens > 0:
        tokens, source = usage_tokens, "usage"
    else:
        tokens, source = deltas, "deltas"
    ttft = round(token_times[0] - start, 4) if deltas else None
    span = token_times[-1] - token_times[0] if deltas else 0.0
    rate = round((tokens - 1) / span, 2) if tokens >= 2 and span > 0 else None
    return {"completion_tokens": tokens, "counted_from": source, "token_deltas": deltas,
            "ttft_s": ttft, "tokens_per_s": rate}


def speed_payload(model: str, max_tokens: int) -> dict:
    return {"model": model, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True,
            "stream": True, "stream_options": {"include_usage": True},
            "messages": [{"role": "user", "content": SPEED_PROMPT}]}


def stream_chat(endpoint: Endpoint, payload: dict) -> dict:
    """One streamed chat completion, read to its end; its figures plus status, ok, error,
    latency_s, and '_start'/'_end' for run_together."""
    start = time.monotonic()
    status, resp, error = endpoint.open_stream("/v1/chat/completions", payload)
    token_times, usage_tokens, done, problem = [], None, False, None
    if resp is None:
        problem = error or f"HTTP {status}"
    else:
        try:
            with resp:
                for line in resp:
                    data = sse_data(line)
                    if data is None:
                        continue
                    if data.strip() == "[DONE]":
                        done = True
                        break
                    now = time.monotonic()
                    token, used, problem = chunk_info(_parse(data.encode()))
                    if problem:
                        break
                    if token:
                        token_times.append(now)
                    if used is not None:
                        usage_tokens = used
        except (OSError, ValueError, http.client.HTTPException) as exc:
            problem = f"stream broken: {type(exc).__name__}: {exc}"
    end = time.monotonic()
    figures = stream_figures(start, token_times, usage_tokens)
    if problem is None and not done:
        problem = "stream ended without data: [DONE]"
    if problem is None and figures["completion_tokens"] < 1:
        problem = "no tokens streamed"
    return {"status": status, "ok": problem is None, "error": problem,
            "latency_s": round(end - start, 4), **figures, "_start": start, "_end": end}


def _median(values, digits: int):
    """The median of the values that are not None, rounded; None when there are none. Not
    percentile(values, 0.5): of an even count this is the mean of the two middle values (two
    rounds: their mean), where the nearest rank takes the lower one."""
    values = [v for v in values if v is not None]
    return round(statistics.median(values), digits) if values else None


def speed_level(endpoint: Endpoint, model: str, concurrency: int, max_tokens: int,
                rounds: int) -> dict:
    """`rounds` rounds of `concurrency` streamed requests released together; medians over all
    requests (tokens_per_s, ttft_s) and over rounds (aggregate_tokens_per_s)."""
    samples, aggregates = [], []
    payload = speed_payload(model, max_tokens)
    for round_no in range(rounds):
        results, wall = run_together(lambda _i: stream_chat(endpoint, payload), concurrency)
        total = sum(r["completion_tokens"] for r in results if r["ok"])
        aggregates.append(total / wall if wall > 0 and total else None)
        for index, r in enumerate(results):
            samples.append({"round": round_no + 1, "index": index, **r})
    ok = [s for s in samples if s["ok"]]
    return {"tokens_per_s": _median([s["tokens_per_s"] for s in ok], 2),
            "ttft_s": _median([s["ttft_s"] for s in ok], 4),
            "aggregate_tokens_per_s": _median(aggregates, 2),
            "requests": len(samples), "ok": len(ok), "samples": samples}


def run_speed(endpoint: Endpoint, model: str, concurrency: int, max_tokens: int,
              rounds: int) -> tuple:
    """The speed measurement at c=1 and c=concurrency; (speed dict, failures)."""
    speed = {"concurrency": concurrency, "max_tokens": max_tokens, "rounds": rounds}
    failures = []
    for key, n in (("c1", 1), ("cN", concurrency)):
        level = speed_level(endpoint, model, n, max_tokens, rounds)
        speed[key] = level
        failures += [f"speed c={n} round {s['round']} request {s['index']}: {s['error']}"
                     for s in level["samples"] if not s["ok"]]
        if level["ok"] < level["requests"]:
            break  # an engine that fails streams at c=1 is not measured at c=N
    status, _, error = endpoint.request("GET", "/health", timeout=10)
    speed["health_after"] = {"ok": status == 200, "last": status if status else error}
    if status != 200:
        failures.append(f"health after the speed run: {error or f'HTTP {status}'}")
    return speed, failures


def percentile(values, fraction: float) -> float:
    """Nearest-rank percentile of a non-empty list (p50 of 4 values: the 2nd smallest)."""
    ordered = sorted(values)
    rank = min(max(1, math.ceil(fraction * len(ordered))), len(ordered))
    return ordered[rank - 1]


def aggregate(results, wall_s: float) -> dict:
    latencies = [r["latency_s"] for r in results]
    total = sum(r["completion_tokens"] for r in results)
    return {
        "requests": len(results),
        "ok": sum(1 for r in results if r["ok"]),
        "wall_s": round(wall_s, 4),
        "total_completion_tokens": total,
        "aggregate_tokens_per_s": round(total / wall_s, 2) if wall_s > 0 else 0.0,
        "latency_p50_s": percentile(latencies, 0.5) if latencies else None,
        "latency_max_s": max(latencies) if latencies else None,
    }


def run_smoke(endpoint: Endpoint, model: str, concurrency: int = 4, health_timeout: float = 600,
              max_tokens: int = 64, health_interval: float = 1.0, container=None,
              speed: bool = False, speed_max_tokens: int = 256, speed_rounds: int = 2,
              soak_s: float = 0.0) -> tuple:
    """The whole smoke (then the speed measurement when `speed`); (exit code, report dict)."""
    report = {"ok": False, "base_url": endpoint.base_url, "model": model,
              "concurrency": concurrency, "max_tokens": max_tokens, "failures": []}
    gone = container_watch(container) if container else None
    health = wait_healthy(endpoint, health_timeout, health_interval, gone)
    report["health"] = health
    if health.get("gone"):
        report["failures"].append(f"health: {health['gone']}")
        return EXIT_USAGE, report
    if not health["ok"]:
        report["failures"].append(
            f"health: /health not 200 within {health_timeout}s (last: {health['last']})")
        return EXIT_USAGE, report
    models, error = served_models(endpoint)
    report["served_models"] = models
    if error:
        report["failures"].append(error)
    elif model not in models:
        report["failures"].append(f"/v1/models: {model!r} not served (served: {models})")
    results, wall = fire_concurrent(endpoint, model, concurrency, max_tokens)
    report["requests"] = results
    report["aggregate"] = aggregate(results, wall)
    for r in results:
        if not r["ok"]:
            report["failures"].append(f"request {r['index']}: {r['error']}")
    if soak_s > 0 and not report["failures"]:
        soak = run_soak(endpoint, model, concurrency, max_tokens, soak_s)
        report["soak"] = soak
        if soak["failed"]:
            report["failures"].append(f"soak: {soak['failed']} of {soak['requests']} requests "
                                      f"failed in {soak_s:g} s: " + "; ".join(soak["errors"]))
    status, _, error = endpoint.request("GET", "/health", timeout=10)
    report["health_after"] = {"ok": status == 200, "last": status if status else error}
    if status != 200:
        report["failures"].append(f"health after the burst: {error or f'HTTP {status}'}")
    if speed and report["failures"]:
        report["speed"] = {"skipped": "the smoke failed"}
    elif speed:
        report["speed"], failures = run_speed(endpoint, model, concurrency, speed_max_tokens,
                                              speed_rounds)
        report["failures"] += failures
    report["ok"] = not report["failures"]
    return (EXIT_OK if report["ok"] else EXIT_FAILED), report


def read_key(path) -> str:
    if path:
        with open(path, encoding="utf-8") as f:
            return f.read().strip()
    return os.environ.get("VDF_API_KEY", "").strip()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--model", required=True, help="served model name")
    parser.add_argument("--api-key-file", help="file holding the API key (else env VDF_API_KEY)")
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--health-timeout", type=float, default=600.0, metavar="SECONDS")
    parser.add_argument("--health-interval", type=float, default=1.0, metavar="SECONDS")
    parser.add_argument("--request-timeout", type=float, default=300.0, metavar="SECONDS")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--json", action="store_true", help="one-line JSON (default: indented)")
    parser.add_argument("--container", help="serving container: stop waiting when it exits or "
                        "restarts, naming its last log lines (needs the docker CLI)")
    parser.add_argument("--speed", action="store_true", help="after the smoke, measure decode "
                        "speed with streamed completions at c=1 and c=--concurrency")
    parser.add_argument("--speed-max-tokens", type=int, default=256,
                        help="tokens each speed request generates (>= 2; default 256)")
    parser.add_argument("--soak-s", type=float, default=0.0, metavar="SECONDS",
                        help="after the burst, hold --concurrency requests in flight this long; "
                        "any failed request fails the smoke")
    parser.add_argument("--speed-rounds", type=int, default=2,
                        help="rounds per concurrency level (default 2)")
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return EXIT_USAGE if exc.code else EXIT_OK
    if args.concurrency < 1 or args.max_tokens < 1 or args.health_timeout < 0:
        parser.print_usage(sys.stderr)
        sys.stderr.write("smoke: --concurrency and --max-tokens must be >= 1\n")
        return EXIT_USAGE
    bad = [f"smoke: {flag} must be {bound}\n" for flag, wrong, bound in (
        ("--speed-max-tokens", args.speed_max_tokens < 2, ">= 2"),
        ("--speed-rounds", args.speed_rounds < 1, ">= 1"),
        ("--soak-s", args.soak_s < 0, ">= 0"),
    ) if wrong]
    if bad:
        parser.print_usage(sys.stderr)
        sys.stderr.write("".join(bad))
        return EXIT_USAGE
    try:
        key = read_key(args.api_key_file)
    except OSError as exc:
        sys.stderr.write(f"smoke: cannot read the API key file: {exc.strerror}\n")
        return EXIT_USAGE
    try:
        endpoint = Endpoint(args.base_url, key, args.request_timeout)
    except ValueError as exc:
        sys.stderr.write(f"smoke: {exc}\n")
        return EXIT_USAGE
    code, report = run_smoke(endpoint, args.model, args.concurrency, args.health_timeout,
                             args.max_tokens, args.health_interval, args.container,
                             args.speed, args.speed_max_tokens, args.speed_rounds,
                             args.soak_s)
    text = json.dumps(report, sort_keys=True, indent=None if args.json else 2)
    print(endpoint.redact(text))
    return code


if __name__ == "__main__":
    sys.exit(main())
