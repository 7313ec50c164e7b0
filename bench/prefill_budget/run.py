#!/usr/bin/env python3
"""What the prefill token budget costs on the vLLM double: time to first token and step peak.

    bench/prefill_budget/run.py [--budgets 4096,8192] [--max-model-len 65536] [--repeats 3]
        [--json-out bench/results/prefill-budget.json]

For each budget (--max-num-batched-tokens) the double starts afresh as the role starts vLLM
(W4A8, gpu_memory_utilization 0.90, --max-model-len) and is sent, one at a time, a prompt of
16K tokens and one of max_model_len less 64 (what the long-prompt gate sends), each --repeats
times with a fresh nonce (no prefix cache hit); it prints the median time to first token and the
prefill peak the double logged, then 4 prompts of 16K at once (the gate's burst) and their peak.
These are the double's figures: its prefill time is per-token cost plus an assumed per-step cost
(its "prefill_step_s" knob, 0.03 s), so they show how the budget moves TTFT on the model, not on
a real rig. Standard library only; run by hand, by no test.
"""

import argparse
import concurrent.futures
import datetime
import importlib.util
import json
import re
import statistics
import sys
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("speed_noise_run", ROOT / "bench/speed_noise/run.py")
noise = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(noise)
smoke, smoke_speed, smoke_long = noise.smoke, noise.smoke_speed, noise.smoke_long
PEAK = re.compile(r"prefill peak (\d+) MiB per card")


def first_token_s(url: str, tokens: int) -> float:
    """TTFT of one streamed chat of about `tokens` tokens, sized by POST /tokenize as the
    long-prompt gate sizes its prompts (numbers as words cost several tokens each)."""
    endpoint = smoke.Endpoint(url, None, timeout=120)
    words, _, _ = smoke_long.size_long_prompt(endpoint, noise.MODEL, tokens)
    text = smoke_long.long_prompt_text(smoke.nonce(), words)
    payload = {"model": noise.MODEL, "max_tokens": 4, "temperature": 0, "stream": True,
               "ignore_eos": True, "messages": smoke_long.long_messages(text)}
    result = smoke_speed.stream_chat(endpoint, payload)
    if not result["ok"]:
        raise RuntimeError(f"long prompt of {tokens} tokens failed: {result['error']}")
    return result["ttft_s"]


def burst(url: str, n: int, tokens: int) -> list:
    barrier = threading.Barrier(n)
    endpoint = smoke.Endpoint(url, None, timeout=120)

    words, _, _ = smoke_long.size_long_prompt(endpoint, noise.MODEL, tokens)

    def one(_):
        text = smoke_long.long_prompt_text(smoke.nonce(), words)
        barrier.wait(timeout=10)
        return smoke_long.long_request(endpoint, noise.MODEL, text)["status"]

    with concurrent.futures.ThreadPoolExecutor(n) as pool:
        return list(pool.map(one, range(n)))


def measure(budget: int, max_model_len: int, repeats: int) -> dict:
    serve = ["--max-num-batched-tokens", str(budget), "--max-model-len", str(max_model_len),
             "--gpu-memory-utilization", "0.9"]
    out = {"budget": budget}
    for label, tokens in (("16k", 16384), ("max_model_len", max_model_len - 64)):
        with noise.double({}, serve_args=serve,
                          extra_env={"VLLM_MARLIN_INPUT_DTYPE": "int8"}) as url:
            ttfts = [first_token_s(url, tokens) for _ in range(repeats)]
        out[label] = {"tokens": tokens, "ttft_s": round(statistics.median(ttfts), 3),
                      "ttft_runs_s": ttfts}
    with noise.double({}, serve_args=serve,
                      extra_env={"VLLM_MARLIN_INPUT_DTYPE": "int8"}) as url:
        out["burst_4x16k_status"] = burst(url, 4, 16384)
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--budgets", default="4096,8192")
    parser.add_argument("--max-model-len", type=int, default=65536)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json-out", default=str(ROOT / "bench/results/prefill-budget.json"))
    args = parser.parse_args(argv)
    rows = [measure(int(b), args.max_model_len, args.repeats) for b in args.budgets.split(",")]
    print("| budget | TTFT at 16K (s) | TTFT at max_model_len (s) | 4 x 16K at once |")
    print("| --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r['budget']} | {r['16k']['ttft_s']} | {r['max_model_len']['ttft_s']} "
              f"| {r['burst_4x16k_status']} |")
    if len(rows) >= 2:
        a, b = rows[0], rows[-1]
        for label in ("16k", "max_model_len"):
            print(f"TTFT {label}: budget {a['budget']} / {b['budget']} = "
                  f"{a[label]['ttft_s'] / b[label]['ttft_s']:.2f}")
    Path(args.json_out).write_text(json.dumps({
        "bench": "prefill-budget", "double_figures": True,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "max_model_len": args.max_model_len, "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
