#!/usr/bin/env python3
"""smoke.py's speed run (--speed): decode speed from streamed completions, and MTP acceptance
from vLLM's Prometheus counters. smoke.py runs it after a smoke that passed; it lands on the rig
beside smoke.py (standard library only).

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
"""

import http.client
import re
import statistics
import time

from smoke import Endpoint, _parse, degeneracy, nonce, percentile, run_together

SPEED_PROMPT = ("Tell a long story about a lighthouse keeper and the ships she guides, in plain "
                "prose, and keep going until you are stopped.")
SPEC_METRICS = {"drafts": "vllm:spec_decode_num_drafts_total",
                "draft_tokens": "vllm:spec_decode_num_draft_tokens_total",
                "accepted": "vllm:spec_decode_num_accepted_tokens_total"}
SPEC_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos_total"


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
