#!/usr/bin/env python3
"""One fit candidate's load (playbooks/fit.yml, tasks/fit.yml): what the engine serving now holds
at the owner's prompt lengths. It lands on the rig beside smoke.py (standard library only).

After /health answers 200 and one short warm-up request: --streams N streamed chat completions
released together, stream i with a prompt of its own of about --prompt-tokens[i mod len] tokens
(a nonce first, so no prefix is cached: cache-cold), each asked for --max-tokens tokens with
vLLM's "ignore_eos". Around them: vLLM's vllm:num_preemptions_total (GET /metrics) before and
after; every --sample-s seconds while the streams run, vllm:num_requests_running and
vllm:num_requests_waiting (the most of each seen: streams the pool cannot hold together wait,
and vLLM does not count that as preemption); every card's memory (nvidia-smi
--query-gpu=index,memory.used,memory.free,memory.total) after the warm-up, every --sample-s
seconds while the streams run, and after.
Then the long-context ladder: one prompt per rung, of --ladder fractions of --max-model-len
tokens (less the answer's room), with a needle ("The secret number is N.", N random) in its
middle and the question "What is the secret number? Reply with the number only." at its end;
the rung holds when the answer holds N. Last, /health must answer 200 again.

Output (stdout, JSON): {"ok", "failures" (what did not complete: a stream's or rung's error, an
unhealthy engine), "streams": {"requests", "ok", "wall_s", "total_completion_tokens",
"aggregate_tokens_per_s", "ttft_s_max", "prompt_tokens", "samples", "running_peak",
"waiting_peak" (null when /metrics did not say)}, "preemptions":
{"before", "after", "delta"} (null values when /metrics did not say), "gpu": {"cards": [{"index",
"total_mib", "used_after_warmup_mib", "used_after_mib", "min_free_mib"}], "samples",
"unavailable"}, "ladder": [{"fraction", "tokens", "prompt_tokens", "ok", "recalled", "error",
"latency_s"}], "wall_s"}. Whether the candidate holds is not judged here: the role's domain
library judges these figures (fit.fit_candidate_verdict). Exit 0 when every request
completed, 1 when one did not, 2 on bad arguments.
"""

import argparse
import json
import random
import subprocess
import sys
import threading
import time

from smoke import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    Endpoint,
    has_number,
    judged_answer,
    nonce,
    read_key,
    run_together,
    wait_healthy,
)
from smoke_long import long_prompt_text, size_long_prompt
from smoke_speed import parse_prometheus, stream_chat

PREEMPTIONS = "vllm:num_preemptions_total"
NEEDLE = "The secret number is {n}."
NEEDLE_QUESTION = "What is the secret number? Reply with the number only."
ANSWER_ROOM = 64    # tokens a rung leaves under max_model_len for the template and the answer
MEMORY_QUERY = ["--query-gpu=index,memory.used,memory.free,memory.total",
                "--format=csv,noheader,nounits"]


def counter(endpoint: Endpoint, name: str):
    """The sum of a counter's samples over its label sets, or None when /metrics did not say."""
    status, text, _error = endpoint.fetch_text("/metrics")
    if status != 200 or text is None:
        return None
    values = [value for sample, _labels, value in parse_prometheus(text) if sample == name]
    return sum(values) if values else None


def card_memory(nvidia_smi: str):
    """[{index, used, free, total}] in MiB per card, or None when nvidia-smi did not answer."""
    try:
        done = subprocess.run([nvidia_smi, *MEMORY_QUERY], capture_output=True, text=True,
                              timeout=20, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    if done.returncode != 0:
        return None
    cards = []
    for line in done.stdout.splitlines():
        fields = [field.strip() for field in line.split(",")]
        if len(fields) == 4 and all(field.isdigit() for field in fields):
            index, used, free, total = (int(field) for field in fields)
            cards.append({"index": index, "used": used, "free": free, "total": total})
    return cards or None


RUNNING, WAITING = "vllm:num_requests_running", "vllm:num_requests_waiting"


def gauges(endpoint: Endpoint) -> dict:
    """vLLM's running and waiting gauges now, summed over their label sets ({} unread)."""
    status, text, _error = endpoint.fetch_text("/metrics", timeout=5)
    if status != 200 or text is None:
        return {}
    found = {}
    for sample, _labels, value in parse_prometheus(text):
        if sample in (RUNNING, WAITING):
            found[sample] = found.get(sample, 0) + value
    return found


class LoadWatch:
    """Samples in a thread until stopped: every card's memory (the least free seen per card) and
    vLLM's running and waiting gauges (the most seen: a pool that cannot hold the streams
    together leaves some waiting, which vLLM 0.27.1 does not count as preempted)."""

    def __init__(self, nvidia_smi: str, endpoint: Endpoint, every_s: float):
        self.nvidia_smi, self.endpoint, self.every_s = nvidia_smi, endpoint, every_s
        self.least_free, self.samples = {}, 0
        self.running_peak = self.waiting_peak = None
        self.done = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def take(self) -> None:
        cards = card_memory(self.nvidia_smi)
        for card in cards or []:
            self.least_free[card["index"]] = min(card["free"],
                                                 self.least_free.get(card["index"], card["free"]))
        self.samples += bool(cards)    # samples read, not tried
        now = gauges(self.endpoint)
        if RUNNING in now:
            self.running_peak = max(self.running_peak or 0, int(now[RUNNING]))
        if WAITING in now:
            self.waiting_peak = max(self.waiting_peak or 0, int(now[WAITING]))

    def run(self) -> None:
        while not self.done.is_set():
            self.take()
            self.done.wait(self.every_s)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *_exc):
        self.done.set()
        self.thread.join()
        self.take()


def gpu_figures(after_warmup, after, least_free: dict, samples: int) -> dict:
    """Per card: memory used after the warm-up and after the load, the least free seen."""
    if not after_warmup or not after:
        return {"cards": [], "samples": samples, "unavailable": "nvidia-smi did not answer"}
    used_after = {card["index"]: card["used"] for card in after}
    return {"cards": [{"index": card["index"], "total_mib": card["total"],
                       "used_after_warmup_mib": card["used"],
                       "used_after_mib": used_after.get(card["index"]),
                       "min_free_mib": min(least_free.get(card["index"], card["free"]),
                                           card["free"])}
                      for card in after_warmup],
            "samples": samples, "unavailable": None}


def stream_payload(model: str, text: str, max_tokens: int) -> dict:
    return {"model": model, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True,
            "stream": True, "stream_options": {"include_usage": True},
            "messages": [{"role": "user", "content": text}]}


def run_streams(endpoint: Endpoint, model: str, streams: int, prompt_tokens: list,
                max_tokens: int) -> dict:
    """N cache-cold streams released together: what each did, and the burst's figures."""
    words = {tokens: size_long_prompt(endpoint, model, tokens)[0] for tokens in set(prompt_tokens)}
    texts = [long_prompt_text(nonce(), words[prompt_tokens[i % len(prompt_tokens)]])
             for i in range(streams)]
    results, wall = run_together(
        lambda i: stream_chat(endpoint, stream_payload(model, texts[i], max_tokens)), streams)
    total = sum(r["completion_tokens"] for r in results if r["ok"])
    ttfts = [r["ttft_s"] for r in results if r["ttft_s"] is not None]
    return {"requests": streams, "ok": sum(1 for r in results if r["ok"]),
            "wall_s": round(wall, 3), "total_completion_tokens": total,
            "aggregate_tokens_per_s": round(total / wall, 2) if wall > 0 else 0.0,
            "ttft_s_max": max(ttfts) if ttfts else None,
            "prompt_tokens": [prompt_tokens[i % len(prompt_tokens)] for i in range(streams)],
            "samples": [{k: r[k] for k in ("status", "ok", "error", "ttft_s", "tokens_per_s",
                                           "completion_tokens", "latency_s")} for r in results]}


def needle_text(words: int, number: int) -> str:
    """A prompt of about `words` words, the needle in its middle, the question at its end."""
    half = max(words // 2, 1)
    return "\n".join([long_prompt_text(nonce(), half), NEEDLE.format(n=number),
                      long_prompt_text(nonce(), half), NEEDLE_QUESTION])


def ladder_rung(endpoint: Endpoint, model: str, fraction: float, max_model_len: int,
                rng: random.Random) -> dict:
    """One rung: a needle prompt of fraction x max_model_len tokens (less ANSWER_ROOM)."""
    tokens = max(int(fraction * max_model_len) - ANSWER_ROOM, 32)
    words, _sized_by, _measured = size_long_prompt(endpoint, model, tokens)
    number = rng.randint(10000, 99999)
    text = needle_text(max(words - 16, 1), number)    # the needle and question take ~16 words
    payload = {"model": model, "max_tokens": 32, "temperature": 0,
               "chat_template_kwargs": {"enable_thinking": False},
               "messages": [{"role": "user", "content": text}]}
    start = time.monotonic()
    status, body, error = endpoint.request("POST", "/v1/chat/completions", payload)
    latency = round(time.monotonic() - start, 3)
    usage = body.get("usage") if isinstance(body, dict) else None
    answer = judged_answer(body) if status == 200 else ""
    recalled = status == 200 and has_number(answer, number)
    problem = None if recalled else (
        f"HTTP {status}: {error}" if status != 200 else f"the needle {number} was not recalled "
        f"(answer {answer[:60]!r})")
    return {"fraction": fraction, "tokens": tokens,
            "prompt_tokens": usage.get("prompt_tokens") if isinstance(usage, dict) else None,
            "ok": recalled, "recalled": recalled, "error": problem, "latency_s": latency}


def run_fit_load(endpoint: Endpoint, model: str, args) -> tuple:
    """(exit code, report): warm-up, the burst with its counters and memory, the ladder."""
    started = time.monotonic()
    failures = []
    health = wait_healthy(endpoint, args.health_timeout)
    if not health["ok"]:
        return EXIT_FAILED, {"ok": False, "failures": [f"engine not healthy: {health['last']}"]}
    warm = stream_chat(endpoint, stream_payload(model, f"{nonce()} Say hello.", 8))
    if not warm["ok"]:
        failures.append(f"warm-up request: {warm['error']}")
    before = counter(endpoint, PREEMPTIONS)
    after_warmup = card_memory(args.nvidia_smi)
    with LoadWatch(args.nvidia_smi, endpoint, args.sample_s) as watch:
        streams = run_streams(endpoint, model, args.streams, args.prompt_tokens, args.max_tokens)
    streams.update(running_peak=watch.running_peak, waiting_peak=watch.waiting_peak)
    after = counter(endpoint, PREEMPTIONS)
    gpu = gpu_figures(after_warmup, card_memory(args.nvidia_smi), watch.least_free,
                      watch.samples)
    failures += [f"stream {i}: {s['error']}" for i, s in enumerate(streams["samples"])
                 if not s["ok"]]
    rng = random.Random()  # noqa: S311 (a needle, not a secret)
    ladder = [ladder_rung(endpoint, model, fraction, args.max_model_len, rng)
              for fraction in args.ladder]
    failures += [f"ladder {rung['tokens']} tokens: {rung['error']}" for rung in ladder
                 if not rung["ok"]]
    health_after = wait_healthy(endpoint, 10)
    if not health_after["ok"]:
        failures.append(f"engine unhealthy after the load: {health_after['last']}")
    report = {"ok": not failures, "failures": [endpoint.redact(f) for f in failures],
              "streams": streams,
              "preemptions": {"before": before, "after": after,
                              "delta": after - before if None not in (before, after) else None},
              "gpu": gpu, "ladder": ladder, "wall_s": round(time.monotonic() - started, 3)}
    return (EXIT_OK if not failures else EXIT_FAILED), report


def positive_ints(text: str) -> list:
    values = [int(part) for part in text.split(",") if part.strip()]
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"positive integers, comma-separated: {text!r}")
    return values


def fractions(text: str) -> list:
    values = [float(part) for part in text.split(",") if part.strip()]
    if any(not 0 < value <= 1 for value in values):
        raise argparse.ArgumentTypeError(f"fractions in (0, 1], comma-separated: {text!r}")
    return values


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--api-key-file", default=None)
    parser.add_argument("--streams", type=int, required=True)
    parser.add_argument("--prompt-tokens", type=positive_ints, required=True)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--max-model-len", type=int, required=True)
    parser.add_argument("--ladder", type=fractions, default=[])
    parser.add_argument("--nvidia-smi", default="nvidia-smi")
    parser.add_argument("--sample-s", type=float, default=0.1)
    parser.add_argument("--health-timeout", type=float, default=600)
    parser.add_argument("--request-timeout", type=float, default=900)
    return parser


def main(argv=None) -> int:
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:
        return EXIT_USAGE if exc.code else EXIT_OK
    if args.streams < 1 or args.max_tokens < 1 or args.max_model_len <= ANSWER_ROOM:
        print(json.dumps({"ok": False, "failures": ["streams and max tokens must be at least 1, "
                                                    f"max model len above {ANSWER_ROOM}"]}))
        return EXIT_USAGE
    endpoint = Endpoint(args.base_url, read_key(args.api_key_file), timeout=args.request_timeout)
    code, report = run_fit_load(endpoint, args.model, args)
    print(json.dumps(report, sort_keys=True))
    return code


if __name__ == "__main__":
    sys.exit(main())
