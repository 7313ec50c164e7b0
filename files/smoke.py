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

--speed, after a smoke that passed: decode speed from streamed chat completions ("stream": true,
"stream_options": {"include_usage": true}, vLLM's "ignore_eos": true so the engine generates
--speed-max-tokens tokens), at concurrency 1 and at --concurrency N, each --speed-rounds times
(default 5; one request, or N released together, per round). Every request of every round has
a prompt of its own: a random nonce is the first word of its user message, so the prefix cache
cannot serve one request from another's prefill (nor a rerun's: the nonces do not follow
--seed). Per request: time to first token (TTFT: from sending to the first server-sent event
whose delta carries content or reasoning text), tokens (the stream's usage chunk when it has
one, else one per such delta, as vLLM streams by default), and decode tokens/s = (tokens - 1) /
(time of the last token delta - time of the first). Per round: aggregate tokens/s = all tokens /
wall time. Reported under "speed":
{"c1": {"tokens_per_s", "ttft_s", "aggregate_tokens_per_s" (medians: over all requests of the
 level, the aggregate over rounds), "tokens_per_s_p10", "ttft_s_p90" (nearest-rank percentiles
 over all requests of the level: the slow tail), "round_aggregate_tokens_per_s" (one per round),
 "requests", "ok", "samples" (one per request: round, index, status, ok, error, latency_s,
 completion_tokens, counted_from, token_deltas, ttft_s, tokens_per_s)},
 "cN": {...}, "concurrency": N, "max_tokens": M, "rounds": R, "health_after": {"ok", "last"},
 "spec_decode": {...}}. Rounds are there to ignore noise: a release canary compares the
medians with the previous release's, never a single request (the p10/p90 tails are reported,
not judged).
A stream that fails (HTTP error, no tokens, an error chunk, no final `data: [DONE]`, degenerate
text) or /health not 200 afterwards is a failure of the smoke (named "speed c=N round R request
I: ..."); "cN" is left out when c=1 already failed. A smoke that failed skips it: "speed":
{"skipped": "the smoke failed"}.

MTP acceptance (with --speed): GET /metrics (Prometheus text, with the API key header when there
is a key) before and after the speed run; vLLM's counters vllm:spec_decode_num_drafts_total,
vllm:spec_decode_num_draft_tokens_total, vllm:spec_decode_num_accepted_tokens_total and
vllm:spec_decode_num_accepted_tokens_per_pos_total{position="i"}, each summed over its label
sets (model_name, engine; per position apart), give from their deltas "spec_decode": {"drafts",
"draft_tokens", "accepted", "acceptance_rate" (accepted / draft_tokens), "mean_acceptance_length"
(1 + accepted / drafts), "per_position" (accepted at position i / drafts, by position)} (rates
null without drafts). When /metrics does not answer 200 (404, 401, no connection), lacks the
counters (speculative decoding off) or they went backwards: {"unavailable": WHY}, never a
failure.

--long-prompt-tokens N > 0 runs instead of the smoke: after /health answers 200 (waited for as
in 1.), --concurrency M chat completions released together, each with a prompt of its own of
about N tokens (N capped at L - 64 when --max-model-len L > 0; L must then be > 64): a random
nonce, then the numbers 1, 2, 3, ... as words (so no two prompts share a prefix from the first
word on, and prefix caching cannot hide the prefill), max_tokens 32, temperature 0, each waited
for up to --request-timeout seconds. Sizing: POST /tokenize ({"model", "messages"}; its "count")
measures a prompt of N words once and the word count is scaled by N / count; an engine that does
not answer it with a count gets one whitespace word per token. Each must be HTTP 200 with
usage.prompt_tokens (recorded) and non-empty, non-degenerate text with usage.completion_tokens >
0; then GET /health must answer 200. Output: {"ok", "failures", "base_url", "model", "health",
"health_after", "long_prompt": {"requested_tokens" (N), "target_tokens" (after the cap),
"max_model_len", "words", "sized_by" ("tokenize" or "whitespace words"), "sized_tokens" (what
/tokenize counted for that many words, null when not measured), "concurrency",
"prompt_tokens" (per request, null where not reported), "ok", "requests" (per request: index,
status, ok, error, prompt_tokens, completion_tokens, content_source, latency_s), "wall_s"}}.
Failures: "long prompt request I: HTTP 500: <the server's message>" (or any problem of the
burst's), "engine unhealthy after the long prompts: HTTP 503" (plus the container's state and
last log lines with --container, when it died).

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
import http.client
import json
import math
import os
import random
import re
import statistics
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
SPEED_PROMPT = ("Tell a long story about a lighthouse keeper and the ships she guides, in plain "
                "prose, and keep going until you are stopped.")
ANSWER_QUESTION = "What is {a} + {b}? Reply with the number only."
ANSWER_MAX_TOKENS = 32
LONG_MAX_TOKENS = 32     # enough for a degenerate run (> 16 of one character) to show
LONG_CAP_MARGIN = 64  # tokens left under --max-model-len for the chat template and the answer
SPEC_METRICS = {"drafts": "vllm:spec_decode_num_drafts_total",
                "draft_tokens": "vllm:spec_decode_num_draft_tokens_total",
                "accepted": "vllm:spec_decode_num_accepted_tokens_total"}
SPEC_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos_total"


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


def delta_text(chunk) -> str:
    """The text one chat.completion.chunk adds: its delta's reasoning (reasoning_content, else
    reasoning: vLLM may send both with the same text) then its content."""
    try:
        delta = chunk["choices"][0]["delta"]
    except (KeyError, IndexError, TypeError):
        return ""
    if not isinstance(delta, dict):
        return ""
    parts = []
    for keys in (("reasoning_content", "reasoning"), ("content",)):
        value = next((delta[k] for k in keys if isinstance(delta.get(k), str) and delta[k]), "")
        parts.append(value)
    return "".join(parts)


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


def nonce() -> str:
    """A word no earlier request began with (random, not from --seed: a seeded rerun must not
    meet its own prompts in the prefix cache)."""
    return "n" + uuid.uuid4().hex[:12]


def speed_payload(model: str, max_tokens: int, first_word=None) -> dict:
    """A streamed speed request; its prompt begins with first_word (a nonce) when given, so that
    no two requests share a cached prefix."""
    prompt = f"{first_word}: {SPEED_PROMPT}" if first_word else SPEED_PROMPT
    return {"model": model, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True,
            "stream": True, "stream_options": {"include_usage": True},
            "messages": [{"role": "user", "content": prompt}]}


def stream_chat(endpoint: Endpoint, payload: dict) -> dict:
    """One streamed chat completion, read to its end; its figures plus status, ok, error,
    latency_s, and '_start'/'_end' for run_together."""
    start = time.monotonic()
    status, resp, error = endpoint.open_stream("/v1/chat/completions", payload)
    token_times, usage_tokens, done, problem, texts = [], None, False, None, []
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
                    chunk = _parse(data.encode())
                    token, used, problem = chunk_info(chunk)
                    if problem:
                        break
                    texts.append(delta_text(chunk))
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
    why = degeneracy("".join(texts)) if problem is None else None
    if why:
        problem = f"degenerate output: {why}"
    return {"status": status, "ok": problem is None, "error": problem,
            "latency_s": round(end - start, 4), **figures, "_start": start, "_end": end}


def _median(values, digits: int):
    """The median of the values that are not None, rounded; None when there are none. Not
    percentile(values, 0.5): of an even count this is the mean of the two middle values (two
    rounds: their mean), where the nearest rank takes the lower one."""
    values = [v for v in values if v is not None]
    return round(statistics.median(values), digits) if values else None


def _percentile(values, fraction: float, digits: int):
    """percentile() of the values that are not None, rounded; None when there are none."""
    values = [v for v in values if v is not None]
    return round(percentile(values, fraction), digits) if values else None


def speed_level(endpoint: Endpoint, model: str, concurrency: int, max_tokens: int,
                rounds: int) -> dict:
    """`rounds` rounds of `concurrency` streamed requests released together, each request with a
    prompt of its own; medians over all requests (tokens_per_s, ttft_s) and over rounds
    (aggregate_tokens_per_s), the tails (ttft_s_p90, tokens_per_s_p10) and the per-round
    aggregates (round_aggregate_tokens_per_s)."""
    samples, aggregates = [], []
    for round_no in range(rounds):
        payloads = [speed_payload(model, max_tokens, nonce()) for _ in range(concurrency)]
        results, wall = run_together(
            lambda i, p=payloads: stream_chat(endpoint, p[i]), concurrency)
        total = sum(r["completion_tokens"] for r in results if r["ok"])
        aggregates.append(round(total / wall, 2) if wall > 0 and total else None)
        for index, r in enumerate(results):
            samples.append({"round": round_no + 1, "index": index, **r})
    ok = [s for s in samples if s["ok"]]
    rates, ttfts = [s["tokens_per_s"] for s in ok], [s["ttft_s"] for s in ok]
    return {"tokens_per_s": _median(rates, 2), "ttft_s": _median(ttfts, 4),
            "aggregate_tokens_per_s": _median(aggregates, 2),
            "tokens_per_s_p10": _percentile(rates, 0.1, 2),
            "ttft_s_p90": _percentile(ttfts, 0.9, 4),
            "round_aggregate_tokens_per_s": aggregates,
            "requests": len(samples), "ok": len(ok), "samples": samples}


# --- MTP acceptance from vLLM's Prometheus counters -------------------------------------------

_PROM_SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+-?\d+)?\s*$")
_PROM_LABEL = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')
_PROM_ESCAPES = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}


def parse_prometheus(text: str) -> list:
    """[(name, {label: value}, float value)] of the samples in a Prometheus text exposition;
    comments (# HELP, # TYPE), blank and malformed lines are skipped."""
    samples = []
    for line in text.splitlines():
        match = _PROM_SAMPLE.match(line.strip())
        if not match or line.lstrip().startswith("#"):
            continue
        name, labels_text, raw = match.groups()
        try:
            value = float(raw)
        except ValueError:
            continue
        labels = {key: re.sub(r"\\[\\\"n]", lambda m: _PROM_ESCAPES[m.group(0)], val)
                  for key, val in _PROM_LABEL.findall(labels_text or "")}
        samples.append((name, labels, value))
    return samples


def spec_counters(samples) -> object:
    """vLLM's speculative-decoding counters summed over their label sets (model_name, engine):
    {'drafts', 'draft_tokens', 'accepted', 'per_position': {position: accepted}}; None when
    any of the three totals is missing (speculative decoding off, or not vLLM)."""
    totals, per_position = {}, {}
    names = {metric: key for key, metric in SPEC_METRICS.items()}
    for name, labels, value in samples:
        if name in names:
            totals[names[name]] = totals.get(names[name], 0.0) + value
        elif name == SPEC_PER_POS and str(labels.get("position", "")).isdigit():
            position = int(labels["position"])
            per_position[position] = per_position.get(position, 0.0) + value
    if set(totals) != set(SPEC_METRICS):
        return None
    return {**totals, "per_position": per_position}


def _count(value: float):
    return int(value) if float(value).is_integer() else round(value, 3)


def spec_decode_delta(before: dict, after: dict) -> dict:
    """The speculative decoding between two spec_counters() readings: drafts, draft_tokens and
    accepted tokens, acceptance_rate = accepted / draft_tokens, mean_acceptance_length =
    1 + accepted / drafts, per_position[i] = tokens accepted at draft position i / drafts (rates
    None without drafts); {'unavailable': why} when a counter went backwards (a restart)."""
    delta = {key: after[key] - before[key] for key in SPEC_METRICS}
    if any(v < 0 for v in delta.values()):
        return {"unavailable": "the counters went backwards between the readings (restart?)"}
    drafts, draft_tokens, accepted = delta["drafts"], delta["draft_tokens"], delta["accepted"]
    per_position = [
        round((after["per_position"][p] - before["per_position"].get(p, 0.0)) / drafts, 4)
        if drafts > 0 else None
        for p in sorted(after["per_position"])]
    return {"drafts": _count(drafts), "draft_tokens": _count(draft_tokens),
            "accepted": _count(accepted),
            "acceptance_rate": round(accepted / draft_tokens, 4) if draft_tokens > 0 else None,
            "mean_acceptance_length": round(1 + accepted / drafts, 4) if drafts > 0 else None,
            "per_position": per_position}


def read_spec_counters(endpoint: Endpoint) -> tuple:
    """(spec_counters() of GET /metrics or None, why not or None); an endpoint without
    /metrics (404, 401, no answer) is 'unavailable', never a failure."""
    status, text, error = endpoint.fetch_text("/metrics", timeout=10)
    if status != 200 or text is None:
        return None, f"/metrics: {error or f'HTTP {status}'}"
    counters = spec_counters(parse_prometheus(text))
    if counters is None:
        return None, "/metrics has no vllm:spec_decode_* counters (speculative decoding off?)"
    return counters, None


def run_speed(endpoint: Endpoint, model: str, concurrency: int, max_tokens: int,
              rounds: int) -> tuple:
    """The speed measurement at c=1 and c=concurrency; (speed dict, failures)."""
    speed = {"concurrency": concurrency, "max_tokens": max_tokens, "rounds": rounds}
    failures = []
    before, why = read_spec_counters(endpoint)
    for key, n in (("c1", 1), ("cN", concurrency)):
        level = speed_level(endpoint, model, n, max_tokens, rounds)
        speed[key] = level
        failures += [f"speed c={n} round {s['round']} request {s['index']}: {s['error']}"
                     for s in level["samples"] if not s["ok"]]
        if level["ok"] < level["requests"]:
            break  # an engine that fails streams at c=1 is not measured at c=N
    after, why_after = read_spec_counters(endpoint) if before else (None, why)
    speed["spec_decode"] = (spec_decode_delta(before, after) if before and after
                            else {"unavailable": why_after})
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


# --- long prompts (--long-prompt-tokens): prefill at concurrency -----------------------------

def long_prompt_text(first_word: str, words: int) -> str:
    """A prompt of `words` whitespace words: first_word (a nonce, so that no two prompts share
    a cached prefix), then the numbers 1, 2, ... (numbered words: the text never repeats)."""
    return " ".join([first_word] + [str(k) for k in range(1, max(words, 1))])


def long_messages(text: str) -> list:
    return [{"role": "user", "content": text}]


LONG_SIZE_ROUNDS = 10      # /tokenize measurements at most while sizing a long prompt
LONG_SIZE_TOLERANCE = 0.01  # a prompt this close under the target is the target


def tokenized_count(endpoint: Endpoint, model: str, words: int):
    """POST /tokenize's "count" (chat template included) of a long prompt of `words` words, or
    None when the server does not answer with one."""
    status, body, _ = endpoint.request(
        "POST", "/tokenize", {"model": model, "messages": long_messages(
            long_prompt_text(nonce(), words))}, timeout=60)
    count = body.get("count") if status == 200 and isinstance(body, dict) else None
    return count if isinstance(count, int) and not isinstance(count, bool) and count > 0 else None


def next_word_count(tokens: int, fitting, too_long):
    """The word count to measure next, from the longest text measured that fits and the
    shortest one too long, each (words, count) or None. Between the two: where the target lies
    on the line through them (a text of numbers costs more tokens per word the longer it is, so
    plain scaling undershoots on the way up and overshoots on the way down, and four scalings
    stopped 5 % short). With one side only: scaled by tokens / count. None when no whole word
    count is left to try."""
    if fitting and too_long:
        (short_words, short_count), (long_words, long_count) = fitting, too_long
        if long_words - short_words <= 1:
            return None
        guess = short_words + (long_words - short_words) * (tokens - short_count) // max(
            long_count - short_count, 1)
        return min(max(guess, short_words + 1), long_words - 1)
    words, count = fitting or too_long
    guess = max(1, words * tokens // count)
    if fitting:
        return max(guess, words + 1)
    return min(guess, words - 1) if words > 1 else None


def size_long_prompt(endpoint: Endpoint, model: str, tokens: int) -> tuple:
    """(words, sized_by, tokens measured) for a prompt of about `tokens` tokens, not more (but
    for the few tokens by which one nonce differs from another). POST /tokenize measures a text
    of `tokens` words, then the word counts next_word_count picks, up to LONG_SIZE_ROUNDS
    times, until one is within LONG_SIZE_TOLERANCE under the target: on a tokenizer that splits
    numbers into digits (Qwen's), one scaling lands about 13 % short. Without a count from
    /tokenize: one word per token."""
    words, count = tokens, tokenized_count(endpoint, model, tokens)
    if count is None:
        return tokens, "whitespace words", None
    fitting = too_long = None
    for measured in range(1, LONG_SIZE_ROUNDS + 1):
        if count <= tokens:
            fitting = max(fitting or (words, count), (words, count))
        else:
            too_long = min(too_long or (words, count), (words, count))
        if fitting and fitting[1] >= tokens * (1 - LONG_SIZE_TOLERANCE):
            break
        following = next_word_count(tokens, fitting, too_long)
        following_count = None if following is None or measured == LONG_SIZE_ROUNDS else (
            tokenized_count(endpoint, model, following))
        if following_count is None:
            break
        words, count = following, following_count
    if fitting:
        return fitting[0], "tokenize", fitting[1]
    # every text measured was too long: scale the shortest down, unmeasured
    return next_word_count(tokens, None, too_long) or 1, "tokenize", None


def error_detail(body) -> str:
    """The server's error message of an error answer (OpenAI shape), cut to 200 characters."""
    error = body.get("error") if isinstance(body, dict) else None
    message = error.get("message") if isinstance(error, dict) else (error or (
        body.get("detail") if isinstance(body, dict) else None))
    return f": {str(message)[:200]}" if message else ""


def long_request(endpoint: Endpoint, model: str, text: str) -> dict:
    """One long-prompt chat completion and what it proved (status, ok, error, prompt_tokens,
    completion_tokens, latency_s, '_start'/'_end' for run_together)."""
    payload = {"model": model, "max_tokens": LONG_MAX_TOKENS, "temperature": 0,
               "messages": long_messages(text)}
    start = time.monotonic()
    status, body, error = endpoint.request("POST", "/v1/chat/completions", payload)
    end = time.monotonic()
    tokens, source, problem = check_completion(status, body, error)
    if status not in (None, 200):
        problem = f"{problem}{error_detail(body)}"
    usage = body.get("usage") if isinstance(body, dict) else None
    prompt_tokens = usage.get("prompt_tokens") if isinstance(usage, dict) else None
    if not isinstance(prompt_tokens, int) or isinstance(prompt_tokens, bool):
        prompt_tokens = None
        if problem is None:
            problem = "usage.prompt_tokens missing"
    return {"status": status, "ok": problem is None, "error": problem,
            "prompt_tokens": prompt_tokens, "completion_tokens": tokens,
            "content_source": source, "latency_s": round(end - start, 4),
            "_start": start, "_end": end}


def run_long_prompt(endpoint: Endpoint, model: str, tokens: int, concurrency: int = 4,
                    max_model_len: int = 0, health_timeout: float = 600,
                    health_interval: float = 1.0, container=None) -> tuple:
    """The long-prompt mode instead of the smoke; (exit code, report dict)."""
    target = min(tokens, max_model_len - LONG_CAP_MARGIN) if max_model_len > 0 else tokens
    report = {"ok": False, "base_url": endpoint.base_url, "model": model, "failures": []}
    gone = container_watch(container) if container else None
    health = wait_healthy(endpoint, health_timeout, health_interval, gone)
    report["health"] = health
    if not health["ok"]:
        report["failures"].append(f"health: {health['gone']}" if health.get("gone") else
                                  f"health: /health not 200 within {health_timeout}s "
                                  f"(last: {health['last']})")
        return EXIT_USAGE, report
    words, sized_by, sized_tokens = size_long_prompt(endpoint, model, target)
    texts = [long_prompt_text(nonce(), words) for _ in range(concurrency)]
    results, wall = run_together(lambda i: long_request(endpoint, model, texts[i]), concurrency)
    for index, r in enumerate(results):
        r["index"] = index
        if not r["ok"]:
            report["failures"].append(f"long prompt request {index}: {r['error']}")
    status, _, error = endpoint.request("GET", "/health", timeout=10)
    report["health_after"] = {"ok": status == 200, "last": status if status else error}
    if status != 200:
        reason = gone() if gone else None
        report["failures"].append(f"engine unhealthy after the long prompts: "
                                  f"{error or f'HTTP {status}'}" + (f"; {reason}" if reason
                                                                    else ""))
    report["long_prompt"] = {
        "requested_tokens": tokens, "target_tokens": target, "max_model_len": max_model_len,
        "words": words, "sized_by": sized_by, "sized_tokens": sized_tokens,
        "concurrency": concurrency,
        "prompt_tokens": [r["prompt_tokens"] for r in results],
        "ok": not report["failures"], "requests": results, "wall_s": round(wall, 4)}
    report["ok"] = not report["failures"]
    return (EXIT_OK if report["ok"] else EXIT_FAILED), report


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
        code, report = run_long_prompt(endpoint, args.model, args.long_prompt_tokens,
                                       args.concurrency, args.max_model_len,
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
