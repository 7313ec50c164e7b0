#!/usr/bin/env python3
"""smoke.py's long-prompt run (--long-prompt-tokens), instead of the smoke: prefill at
concurrency. It lands on the rig beside smoke.py (standard library only).

--long-prompt-tokens N > 0 runs instead of the smoke: after /health answers 200 (waited for as
in 1.), --concurrency M chat completions released together, each with a prompt of its own of
about N tokens (N capped at L - 64 when --max-model-len L > 0; L must then be > 64): a random
nonce, then the numbers 1, 2, 3, ... as words (so no two prompts share a prefix from the first
word on, and prefix caching cannot hide the prefill), max_tokens 32, temperature 0, each waited
for up to --request-timeout seconds. Sizing: POST /tokenize ({"model", "messages"}; its "count")
measures a prompt of N words, then the word counts between the longest prompt measured that fits
and the shortest one too long (scaled by N / count while one side is missing), up to 10 times,
until one lands within 1 % under N; an engine that does not answer it with a count gets one
whitespace word per token. Each must be HTTP 200 with
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
"""

import time

from smoke import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    LONG_CAP_MARGIN,
    Endpoint,
    check_completion,
    container_watch,
    nonce,
    run_together,
    wait_healthy,
)

LONG_MAX_TOKENS = 32     # enough for a degenerate run (> 16 of one character) to show


# --- long prompts (--long-prompt-tokens): prefill at concurrency -----------------------------

def long_prompt_text(first_word: str, words: int) -> str:
    """A prompt of `words` whitespace words: first_word (a nonce, so that no two prompts share
    a cached prefix), then the numbers 1, 2, ... (numbered words: the text never repeats)."""
    return " ".join([first_word] + [str(k) for k in range(1, max(words, 1))])


def long_messages(text: str) -> list:
    return [{"role": "user", "content": text}]


LONG_SIZE_ROUNDS = 10      # /tokenize measurements at most while sizing a long prompt
LONG_SIZE_TOLERANCE = 0.01  # a prompt this close under the target is the target


def tokenized_count(endpoint: Endpoint, model: str, words: int, first_word: str):
    """POST /tokenize's "count" (chat template included) of a long prompt of `words` words
    after `first_word`, or None when the server does not answer with one."""
    status, body, _ = endpoint.request(
        "POST", "/tokenize", {"model": model, "messages": long_messages(
            long_prompt_text(first_word, words))}, timeout=60)
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
    numbers into digits (Qwen's), one scaling lands about 13 % short. Every measurement starts
    with one nonce: a fresh one each time (its hex digits are a token each there) moved the count
    by up to a dozen tokens between rounds, more than 1 % of a 500-token target (make test, a
    500-token target sized to 494). Without a count from /tokenize: one word per token."""
    first = nonce()
    words, count = tokens, tokenized_count(endpoint, model, tokens, first)
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
            tokenized_count(endpoint, model, following, first))
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
