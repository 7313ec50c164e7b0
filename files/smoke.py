#!/usr/bin/env python3
"""Health smoke client for a vLLM OpenAI-compatible endpoint (standard library only, Python 3.9+).

    python3 smoke.py --base-url http://127.0.0.1:8000 --model NAME [--api-key-file F]
                     [--concurrency 4] [--health-timeout 600] [--max-tokens 64] [--json]
                     [--request-timeout 300] [--container NAME] [--no-answer-check] [--seed S]
                     [--speed [--speed-max-tokens 256] [--speed-rounds 5]] [--soak-s 0]
    python3 smoke.py --base-url ... --model NAME --long-prompt-tokens N [--concurrency M]
                     [--max-model-len L] [--request-timeout 300] [--container NAME] [--json]

1. waits for GET /health to answer 200 (up to --health-timeout seconds; with --container NAME it
   stops waiting as soon as that container exits or restarts, naming its last log lines);
2. checks GET /v1/models lists NAME;
3. fires --concurrency chat completions truly at once (one thread each, released together by a
   barrier), each a short prompt; every one must be HTTP 200 with non-empty, non-degenerate text
   and usage.completion_tokens > 0;
4. the answer check, when everything so far passed (--no-answer-check skips it: "answer_check":
   {"skipped": "--no-answer-check"}; after a failure {"skipped": "the burst failed"}): one chat
   completion at temperature 0, max_tokens 32, "chat_template_kwargs": {"enable_thinking":
   false} (Qwen3's template; other templates ignore it), asking "What is A + B? Reply with the
   number only." with A and B random 2-digit integers (random.Random(--seed); unseeded when
   --seed is not given). It passes when the answer holds str(A + B) as a whole number (not
   inside 1234, 0.123 or 12.5). The answer judged: the content without any <think>...</think>
   block (also a lone </think> and everything before it, an unclosed <think> and everything
   after it); when that is empty, the last 200 characters of the reasoning text
   (message.reasoning_content or message.reasoning, else the content's <think> block).
   Recorded as "answer_check": {"question", "expected" (A + B), "answer" (the judged text, cut
   to 200 characters), "ok"}; failures: "answer check: asked A + B, expected S, got '...'",
   "answer check: degenerate output: ..." or "answer check: HTTP 500";
5. --soak-s SECONDS > 0: holds --concurrency requests in flight that long (each worker sends
   its next request as soon as the last one answered), judged as the burst's; "soak":
   {"seconds", "concurrency", "requests", "failed", "errors" (the first five)}, failure
   "soak: F of R requests failed in S s: ...";
6. checks GET /health again: an engine that died under load (vllm issue #40756) fails here even
   when its answers got out.

Non-empty text: choices[0].message.content; when that is empty or null, the reasoning text
(message.reasoning_content, or message.reasoning in newer vLLM) counts instead, and the request
records content_source "reasoning". A reasoning model (vLLM started with --reasoning-parser) may
spend a small max_tokens entirely on thinking; the engine still generated tokens, which is what
this smoke proves. An answer with neither is a failure ("empty content").

Degenerate output (what a broken kernel or a garbage KV cache makes a model say), judged on
every answer the smoke reads (the burst, the answer check, the soak, the speed streams' text,
the long prompts) by degeneracy(text): runs of one character repeated more than 16 times in a
row (whitespace ignored) make up at least half of a text of 16 or more non-whitespace
characters ("!!!!!!!!!!!!!!!!!!!!"; a markdown rule of 20 "-" in prose or "====" separators in
code are not), or one word repeated more than 8 times in a row (case and surrounding
punctuation ignored: "the the the ..."), or at least half of the non-whitespace characters are
U+FFFD replacement characters. Such an answer fails its request: "degenerate output: WHY".

--speed (files/smoke_speed.py says what it measures and reports) measures decode speed and
MTP acceptance after a smoke that passed; --long-prompt-tokens (files/smoke_long.py) runs
prompts of about N tokens at once instead of the smoke. Both are loaded from beside this file.

Output: one JSON object on stdout (--json: one line; otherwise indented): per request
(latency_s, completion_tokens, tokens_per_s, status, ...), an aggregate (ok count, wall_s,
total completion tokens, aggregate tokens/s, p50 and max latency), "answer_check", "health",
"health_after", ok: true|false and failures, a list of what failed. The API key
(--api-key-file, else env VDF_API_KEY) is sent only in the Authorization header and never
printed.

Exit codes: 0 all good; 1 smoke failed (the endpoint answered, something was wrong, in the
answer check, speed run or long prompts too); 2 bad usage, unreadable key file, or the endpoint
never became healthy within the timeout (or its container died while waiting).
"""

import argparse
import contextlib
import importlib
import json
import math
import os
import random
import re
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid

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
ANSWER_QUESTION = "What is {a} + {b}? Reply with the number only."
ANSWER_MAX_TOKENS = 32
LONG_CAP_MARGIN = 64  # tokens left under --max-model-len for the chat template and the answer


def _network_error(exc) -> str:
    """'ConnectionRefusedError: [Errno 111] ...': what a request that got no HTTP answer met."""
    reason = getattr(exc, "reason", exc)
    return f"{type(reason).__name__}: {reason}"


def _closed_http_error(exc) -> tuple:
    """(status, None, 'HTTP <status>') of an HTTP error whose body is not read (it is closed)."""
    if exc.fp:
        exc.close()
    return exc.code, None, f"HTTP {exc.code}"


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
            return _closed_http_error(exc)
        except (urllib.error.URLError, OSError, ValueError) as exc:
            return None, None, _network_error(exc)

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
            return None, None, _network_error(exc)

    def fetch_text(self, path: str, timeout=None):
        """(status, body as text or None, error text or None) of a GET answered with text
        (Prometheus /metrics); never raises for HTTP/network errors."""
        req = self._build("GET", path, None, "text/plain")
        try:
            with urllib.request.urlopen(req, timeout=timeout or self.timeout) as resp:  # noqa: S310
                return resp.status, resp.read().decode("utf-8", "replace"), None
        except urllib.error.HTTPError as exc:
            return _closed_http_error(exc)
        except (urllib.error.URLError, OSError, ValueError) as exc:
            return None, None, _network_error(exc)

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


RUN_MIN_CHARS, RUN_MIN_SHARE = 16, 0.5   # judge character runs only in texts this long, ...
MAX_RUN, MAX_WORD_REPEATS = 16, 8         # ... of which runs longer than MAX_RUN make this share
_WORD_EDGES = ".,;:!?\"'()[]{}*_`"


def degeneracy(text) -> object:
    """Why `text` is degenerate output (what a broken kernel or KV cache makes a model say, e.g.
    "!!!!!!!!..."), or None. Degenerate: runs of one character repeated more than 16 times in a
    row (whitespace ignored) make up at least half of a text of 16 or more non-whitespace
    characters (a markdown rule of 20 "-" in prose or "====" separators in code do not); or one
    word repeated more than 8 times in a row (case and surrounding punctuation ignored); or at
    least half of the non-whitespace characters are U+FFFD (bytes that were not UTF-8)."""
    if not isinstance(text, str):
        return None
    dense = "".join(text.split())
    if not dense:
        return None
    replaced = dense.count("\ufffd")
    if replaced * 2 >= len(dense):
        share = round(100 * replaced / len(dense))
        return f"{share} % of the text is U+FFFD replacement characters"
    if len(dense) >= RUN_MIN_CHARS:
        runs = [m.group(0) for m in re.finditer(r"(.)\1{" + str(MAX_RUN) + ",}", dense, re.S)]
        covered = sum(len(r) for r in runs)
        if runs and covered >= RUN_MIN_SHARE * len(dense):
            longest = max(runs, key=len)
            return (f"{longest[0]!r} repeated {len(longest)} times in a row (runs of one "
                    f"character make up {round(100 * covered / len(dense))} % of the text)")
    last, count = None, 0
    for raw in text.split():
        word = raw.strip(_WORD_EDGES).lower() or raw
        count = count + 1 if word == last else 1
        last = word
        if count > MAX_WORD_REPEATS:
            return f"the word {raw!r} repeated more than {MAX_WORD_REPEATS} times in a row"
    return None


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
    why = degeneracy(text)
    if why:
        return tokens, source, f"degenerate output: {why}"
    return tokens, source, None


# --- the answer check: one question with a known answer ---------------------------------------

def strip_thinking(content: str) -> tuple:
    """(answer, thinking) of a content that may hold a <think>...</think> block: closed blocks
    go, so does everything up to a lone </think> (the template opened the block) and everything
    after an unclosed <think> (max_tokens ran out while thinking)."""
    thinking = re.findall(r"<think>(.*?)</think>", content, re.S)
    answer = re.sub(r"<think>.*?</think>", "", content, flags=re.S)
    if "</think>" in answer:
        before, _, answer = answer.rpartition("</think>")
        thinking.append(before)
    if "<think>" in answer:
        answer, _, after = answer.partition("<think>")
        thinking.append(after)
    return answer.strip(), " ".join(t.strip() for t in thinking).strip()


def judged_answer(body) -> str:
    """The text the answer check judges: the content without its thinking; when that is empty,
    the last 200 characters of the reasoning (message.reasoning_content or .reasoning, else the
    content's own <think> block)."""
    try:
        message = body["choices"][0]["message"]
    except (KeyError, IndexError, TypeError):
        return ""
    if not isinstance(message, dict):
        return ""
    content = message.get("content")
    answer, thinking = strip_thinking(content if isinstance(content, str) else "")
    if answer:
        return answer
    for key in ("reasoning_content", "reasoning"):
        value = message.get(key)
        if isinstance(value, str) and value.strip():
            thinking = value.strip()
            break
    return thinking[-200:]


def has_number(text: str, number: int) -> bool:
    """Whether `number` stands in `text` as a whole number (not inside 1234, 0.123 or 12.5)."""
    return re.search(r"(?<![\d.,])" + str(number) + r"(?![\d]|[.,]\d)", text) is not None


def answer_question(rng) -> tuple:
    """(a, b, question) with a and b random 2-digit integers drawn from rng (random.Random)."""
    a, b = rng.randint(10, 99), rng.randint(10, 99)
    return a, b, ANSWER_QUESTION.format(a=a, b=b)


def run_answer_check(endpoint: Endpoint, model: str, rng) -> tuple:
    """One chat completion at temperature 0 asking for a sum; ({'question', 'expected',
    'answer', 'ok'}, failure text or None)."""
    a, b, question = answer_question(rng)
    payload = {"model": model, "max_tokens": ANSWER_MAX_TOKENS, "temperature": 0,
               "chat_template_kwargs": {"enable_thinking": False},
               "messages": [{"role": "user", "content": question}]}
    status, body, error = endpoint.request("POST", "/v1/chat/completions", payload)
    answer = judged_answer(body) if status == 200 else ""
    record = {"question": question, "expected": a + b, "answer": answer[:200], "ok": False}
    if status != 200:
        return record, f"answer check: {error or f'HTTP {status}'}"
    why = degeneracy(answer)
    if why:
        return record, f"answer check: degenerate output: {why}"
    if not has_number(answer, a + b):
        return record, f"answer check: asked {a} + {b}, expected {a + b}, got {answer[:200]!r}"
    record["ok"] = True
    return record, None


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


def nonce() -> str:
    """A word no earlier request began with (random, not from --seed: a seeded rerun must not
    meet its own prompts in the prefix cache)."""
    return "n" + uuid.uuid4().hex[:12]


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
              speed: bool = False, speed_max_tokens: int = 256, speed_rounds: int = 5,
              soak_s: float = 0.0, answer_check: bool = True, seed=None) -> tuple:
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
    if not answer_check:
        report["answer_check"] = {"skipped": "--no-answer-check"}
    elif report["failures"]:
        report["answer_check"] = {"skipped": "the burst failed"}
    else:
        report["answer_check"], failure = run_answer_check(
            endpoint, model, random.Random(seed))  # noqa: S311 (a question, not a secret)
        if failure:
            report["failures"].append(failure)
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
        report["speed"], failures = sibling("smoke_speed").run_speed(
            endpoint, model, concurrency, speed_max_tokens, speed_rounds)
        report["failures"] += failures
    report["ok"] = not report["failures"]
    return (EXIT_OK if report["ok"] else EXIT_FAILED), report


def sibling(name: str):
    """smoke_speed or smoke_long, from beside this file (the release holds all three)."""
    here = os.path.dirname(os.path.abspath(__file__))
    if here not in sys.path:
        sys.path.insert(0, here)
    return importlib.import_module(name)


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
    parser.add_argument("--speed-rounds", type=int, default=5,
                        help="rounds per concurrency level (default 5)")
    parser.add_argument("--no-answer-check", dest="answer_check", action="store_false",
                        help="skip the question with a known answer after the burst")
    parser.add_argument("--seed", type=int, help="seed of the answer check's numbers")
    parser.add_argument("--long-prompt-tokens", type=int, default=0, metavar="N",
                        help="instead of the smoke: --concurrency prompts of about N tokens")
    parser.add_argument("--max-model-len", type=int, default=0, metavar="L",
                        help="caps --long-prompt-tokens at L - 64 (default 0: no cap)")
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
        ("--long-prompt-tokens", args.long_prompt_tokens < 0, ">= 0"),
        ("--max-model-len", args.max_model_len != 0 and args.max_model_len <= LONG_CAP_MARGIN,
         f"0 or > {LONG_CAP_MARGIN}"),
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
    if args.long_prompt_tokens:
        code, report = sibling("smoke_long").run_long_prompt(
            endpoint, args.model, args.long_prompt_tokens, args.concurrency, args.max_model_len,
            args.health_timeout, args.health_interval, args.container)
    else:
        code, report = run_smoke(endpoint, args.model, args.concurrency, args.health_timeout,
                                 args.max_tokens, args.health_interval, args.container,
                                 args.speed, args.speed_max_tokens, args.speed_rounds,
                                 args.soak_s, args.answer_check, args.seed)
    text = json.dumps(report, sort_keys=True, indent=None if args.json else 2)
    print(endpoint.redact(text))
    return code


if __name__ == "__main__":
    sys.exit(main())
