"""`vllm serve` of the vLLM test double: real HTTP, fake engine, and the issue #40756 crash.

Endpoints (http.server, one thread per request): GET /health and GET|POST /ping (200 once
listening, as vLLM), GET /version, GET /v1/models, POST /v1/chat/completions (OpenAI-shaped, usage
counted as whitespace words; one word is one token, plus 4 template tokens per message in the
prompt), POST /invocations, POST /tokenize, GET /metrics; any other path 404 {"detail": "Not
Found"}. The API key (--api-key, else env VLLM_API_KEY; --api-key wins) is checked as vLLM
0.27.1's AuthenticationMiddleware does: only for paths starting with one of GUARDED_PREFIX
("/v1", "/v2", "/inference", "/cohere"; the query string not counted), which need
`Authorization: Bearer KEY` (the scheme in any case) or get 401 {"error": "Unauthorized"} --
before routing, so an unknown guarded path is 401 too. /invocations, /tokenize, /metrics,
/health, /ping and /version are served without any key, as in vLLM (the hole a proxy must close).

POST /invocations (vLLM's SageMaker route): a body with "messages" is a chat completion,
answered exactly as /v1/chat/completions (stream included); any other body 400 ("Cannot find
suitable handler for request. Expected one of: ['ChatCompletionRequest', 'CompletionRequest']":
the double has no completions endpoint). POST /tokenize: {"model"?, "prompt": str} or {"model"?,
"messages": [...]} -> {"count", "max_model_len", "tokens": [ids], "token_strs": null} (vLLM's
TokenizeResponse); count is the prompt's whitespace words, or for messages exactly the
prompt_tokens a chat completion reports (words + 4 per message: <|im_start|> role \n ...
<|im_end|>); ids are crc32(word) mod 151643 and Qwen3's special ids; max_model_len is
--max-model-len, or 40960 when unset/auto; an unknown "model" 404 (none: the first served
name), neither field 400.

GET /metrics (Prometheus text 0.0.4, as prometheus_client writes it, no _created series):
counters vllm:prompt_tokens_total (prompt tokens of every request whose prefill finished,
cached ones included) and vllm:generation_tokens_total (tokens generated: a non-streamed answer
when it is answered, a stream per delta), labels {engine="0",model_name="<first served name>"},
each with its # HELP and # TYPE lines and vLLM's help text. Gauges vllm:num_requests_running
(the requests in flight whose blocks the pool holds) and vllm:num_requests_waiting (those
waiting for room: a request's prompt and answer tokens, in 16-token blocks, are taken from the
pool when it starts and given back when it ends; the pool is --kv-cache-memory-bytes / 16 KiB,
else the rig knob "kv_cache_tokens", default 131072: assumed, not measured on the real cards),
vllm:kv_cache_usage_perc (the blocks taken over the pool), and the histogram
vllm:time_to_first_token_seconds of every finished prefill's TTFT, with vLLM's buckets. With
speculative decoding on (--speculative-config with num_speculative_tokens k >= 1) also
vllm:spec_decode_num_drafts_total, vllm:spec_decode_num_draft_tokens_total,
vllm:spec_decode_num_accepted_tokens_total and
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="...",position="0".."k-1"},
from a deterministic expectation over the G generated tokens (floats, not rounded): draft
position i (1..k) is accepted with probability a**i (a = rig knob "mtp_acceptance", default 0.7),
so one draft step yields 1 + A tokens with A = sum(a**i, i=1..k); drafts = G / (1 + A),
draft_tokens = k x drafts, accepted = A x drafts, per position (label i-1) a**i x drafts, and
vLLM's mean acceptance length 1 + accepted/drafts = 1 + A (2.7731 at k=4, a=0.7).

Chat completions: the answer is at most 12 words (after up to 8 reasoning words with
--reasoning-parser), or exactly max_tokens words with vLLM's `"ignore_eos": true` (what a speed
measurement asks for). A checkable answer: when the last user message is exactly `What is A + B?
Reply with the number only.` (A, B integers, surrounding whitespace ignored) and ignore_eos is not
true, the content is str(A+B), one token. `"chat_template_kwargs": {"enable_thinking": false}`
turns the reasoning words off (content only, reasoning_content null, as Qwen3's template), else
they come first with --reasoning-parser. Rig knob "garbage": true (what fp8 KV-cache faults look
like, and it wins over the arithmetic answer) makes every answer max_tokens "!" in content (a
broken cache never reaches an end of text: finish_reason "length"; reasoning_content null, there
is no </think> for the reasoning parser), streamed one "!" per delta. With `"stream": true` the
answer comes as server-sent events, as vLLM sends them: `data: {chunk}` lines of object
chat.completion.chunk, the first delta holding the role, then one delta per token
(choices[0].delta.content, or delta.reasoning_content and delta.reasoning while reasoning),
finish_reason on the last token's chunk, a chunk with `"choices": []` and usage when
`"stream_options": {"include_usage": true}`, then `data: [DONE]`.

Timing: the first token comes after the time to first token (TTFT), each further one after the
decode interval. TTFT = base + jitter + prefill: base is VLLM_DOUBLE_LATENCY_S +
VLLM_DOUBLE_TOKEN_S (or the "ttft_s" knob); jitter is uniform in [0, "ttft_jitter_s"]; prefill is
(prompt tokens not cached) / 1000 x "prefill_s_per_ktoken" (default 0.002). The interval is
VLLM_DOUBLE_TOKEN_S (or 1/"tokens_per_s") times a factor drawn uniform in [1 - p, 1 + p],
p = "rate_jitter_pct"/100, never below 0.5 (one draw per request). Both jitters default to 0
(exact); they come from one random.Random seeded with knob "seed" when given, drawn in request
order. So without jitter a non-streamed answer of n tokens takes about LATENCY + n x TOKEN_S.
Prefix caching (on unless --no-enable-prefix-caching, as vLLM V1): a prompt (its messages' text
joined by newlines) shares its leading whole words with the most similar of the last 64 prompts
whose prefill finished; those words, at most prompt_tokens - 1 and rounded down to whole
16-token blocks, count as cached tokens and skip the prefill time.

Prefill memory (per card, MiB), after vLLM V1's scheduler (one token budget per step shared by
every sequence) and worker (the KV pool is what gpu_memory_utilization leaves after a profile
run of one full-budget step): while chat requests whose prompt tokens to prefill (not cached)
are >= 1024 are in their TTFT, a step peaks at gpu_memory_utilization x card_mib + per_ktoken x
step_tokens / 1024 + mib_per_prefill_seq x their number + mib_per_running_seq x requests in
flight, step_tokens = their tokens together, at most max_num_batched_tokens (--max-num-batched-
tokens; vLLM V1's API-server default on a < 70 GiB GPU: 2048); per_ktoken = mib_per_ktoken with
VLLM_MARLIN_INPUT_DTYPE=int8 (W4A8), else x w4a16_factor. Knob "memory" overrides MEMORY_DEFAULTS.
mib_per_ktoken is calibrated on the measured W4A8 rig (0.90, 8192, 2 x 16K prompts: 23,872 MiB),
the two per-sequence terms are assumed from tensor shapes (README). Each
long prefill logs `vllm-double: prefill peak N MiB per card (T prompt tokens to prefill, S
sequences in prefill)` on stdout when it ends, N its highest peak. A peak above card_mib is a
CUDA OOM in the engine core, as vLLM meets it: stderr gets the EngineCore fatal error with
torch's message (`torch.OutOfMemoryError: CUDA out of memory. Tried to allocate <this
sequence's MiB>. GPU 0 has a total capacity of <capacity_mib: 23.56 GiB> of which ... is free.
...`) and `EngineDeadError`; every in-flight chat request answers 500 (InternalServerError
"EngineCore encountered an issue. See stack trace (above) for the root cause.", a stream
already started gets that error as an event, then [DONE]), so does any new one, and the process
exits with status 1 once they are answered (5 s at most), which Docker's restart policy
restarts.

Per-rig knobs (read once at start, like hf_cli's download knobs, from `$HF_HOME/vllm-double.json`,
the host's model cache the role mounts there; see rig_knobs): "tokens_per_s" (decode rate, > 0),
"ttft_s" (delay before the first token, >= 0), "fail_health": true (GET /health and /ping answer
503 always, so a release on that rig fails its health check), "garbage" (bool), "mtp_acceptance"
(number in [0, 1]), "ttft_jitter_s", "rate_jitter_pct", "prefill_s_per_ktoken" (numbers >= 0),
"seed" (integer), "memory" (object, above; an unknown key is dropped), and "by_version":
{"<vLLM version>": {...}} (those keys for a double of that version only, winning over the
top-level ones). A value of the wrong kind is ignored with a warning on stdout; the knobs in
effect are recorded with the start, and the memory model in effect under "memory".

The crash (vllm issue #40756, what the project patches): when speculative decoding is on
(--speculative-config with num_speculative_tokens >= 1), --max-num-seqs >= 4 (unset counts as
vLLM's default, 256) and FlashInfer's decode.py still allocates its plan buffer with
pin_memory=True (see flashinfer_check; judged once at start, when real vLLM imports FlashInfer),
the moment 4 chat requests are in flight together (/invocations chats count) the process prints
the CUDA error to stderr (last line: "what():  CUDA error: an illegal memory access was
encountered") and exits with status 134 (os._exit; 128 + SIGABRT, what Docker reports when the
engine aborts on that error). Anything else keeps serving.

At start, as vLLM: a --quantization name not in vllm.model_executor.layers.quantization's
QUANTIZATION_METHODS (vLLM 0.27.1's list, or 0.33.0's as laid out) exits 1 ("Unknown
quantization method"); none given is fine (the checkpoint's config decides). So does a
--kv-cache-dtype that vllm.config.CacheConfig refuses (0.33.0's parser takes any string:
"Invalid kv_cache_dtype"; 0.27.1's parser has already refused it).

Every start is recorded (argv, parsed flags, environment, FlashInfer state, crash decision, rig
knobs, memory model) in $VLLM_DOUBLE_STATE_DIR (default /var/lib/vllm-double): last-start.json
(0600) and one JSON line per start in starts.log. It holds the environment as given, secrets
included: test data only.

Knobs for tests (env): VLLM_DOUBLE_STARTUP_S (delay before listening, default 1),
VLLM_DOUBLE_LATENCY_S (per request, default 0.3), VLLM_DOUBLE_TOKEN_S (per token, default 0.005),
VLLM_DOUBLE_CRASH_INFLIGHT (default 4), VLLM_DOUBLE_FAULTS: comma list of KIND or KIND@N (N-th
chat request, 1-based) with KIND one of http-500, empty-content, zero-usage, never-healthy;
they apply to streams too (http-500 answers 500 before the stream starts).
"""

import json
import os
import random
import re
import signal
import sys
import threading
import time
import zlib
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from vllm import __version__
from vllm._double import flashinfer_check, hf_cli

CRASH_LINES = (
    "ERROR [core.py] EngineCore encountered a fatal error.",
    "Traceback (most recent call last):",
    '  File "/usr/local/lib/python3/dist-packages/vllm/v1/engine/core.py", line 701, '
    "in run_engine_core",
    "    engine_core.run_busy_loop()",
    '  File "/usr/local/lib/python3/dist-packages/vllm/v1/spec_decode/eagle.py", line 288, '
    "in propose",
    "    self.attn_metadata_builder.build_for_drafting(...)",
    "torch.AcceleratorError: CUDA error: an illegal memory access was encountered",
    "CUDA kernel errors might be asynchronously reported at some other API call, so the "
    "stacktrace below might be incorrect.",
    "For debugging consider passing CUDA_LAUNCH_BLOCKING=1",
    "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.",
    "ERROR [async_llm.py] AsyncLLM output_handler failed. EngineCore died unexpectedly.",
    "vllm-double: simulated vllm issue #40756 (pinned FlashInfer plan buffer, MTP, "
    "{n} requests in flight); aborting with exit status 134",
    "terminate called after throwing an instance of 'c10::AcceleratorError'",
    "  what():  CUDA error: an illegal memory access was encountered",
)
CRASH_EXIT = 134  # 128 + SIGABRT: a process aborting on an uncaught CUDA error (Exited (134))
WORDS = [
    "the", "quick", "brown", "fox", "jumps", "over", "the", "lazy", "dog", "while", "the",
    "double", "answers", "every", "request", "with", "a", "short", "and", "plain", "reply",
]
DEFAULT_MAX_NUM_SEQS = 256


_LOG_LOCK = threading.Lock()


def log(message: str) -> None:
    """One INFO line on stdout, written whole: print() writes the text and its newline apart, so
    two request threads logging at once could share a line."""
    line = f"INFO {time.strftime('%m-%d %H:%M:%S')} [vllm-double] {message}\n"
    with _LOG_LOCK:
        sys.stdout.write(line)
        sys.stdout.flush()


def env_float(name: str, default: float) -> float:
    try:
        return float(os.environ.get(name, default))
    except ValueError:
        return default


def parse_faults(text: str) -> dict:
    """'http-500@2,never-healthy' -> {'http-500': {2}, 'never-healthy': None} (None: always)."""
    faults = {}
    for item in (text or "").split(","):
        item = item.strip()
        if not item:
            continue
        kind, _, nth = item.partition("@")
        if nth:
            current = faults.get(kind, set())
            if current is not None:
                current.add(int(nth))
            faults[kind] = current
        else:
            faults[kind] = None
    return faults


def state_dir() -> str:
    return os.environ.get("VLLM_DOUBLE_STATE_DIR", "/var/lib/vllm-double")


def record_start(record: dict) -> None:
    """Writes last-start.json (0600) and appends to starts.log; warns when it cannot."""
    directory = state_dir()
    try:
        os.makedirs(directory, exist_ok=True)
        path = os.path.join(directory, "last-start.json")
        fd = os.open(path + ".part", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(record, f, indent=2, sort_keys=True, default=str)
        os.replace(path + ".part", path)
        fd = os.open(os.path.join(directory, "starts.log"),
                     os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        with os.fdopen(fd, "a") as f:
            f.write(json.dumps(record, sort_keys=True, default=str) + "\n")
    except OSError as exc:
        log(f"WARNING could not record the start in {directory}: {exc}")


def speculative_tokens(args) -> int:
    config = args.speculative_config or {}
    n = config.get("num_speculative_tokens") or 0
    return n if isinstance(n, int) else 0


def crash_decision(args, decode: dict) -> dict:
    """Whether this start will crash at c>=4, and why (recorded and logged)."""
    max_num_seqs = args.max_num_seqs if args.max_num_seqs is not None else DEFAULT_MAX_NUM_SEQS
    crash_at = int(env_float("VLLM_DOUBLE_CRASH_INFLIGHT", 4))
    spec = speculative_tokens(args)
    reasons = {
        "speculative_decoding": spec >= 1,
        "max_num_seqs_at_least_crash_inflight": max_num_seqs >= crash_at,
        "flashinfer_decode_pinned": decode.get("state") == "pinned",
    }
    return {"armed": all(reasons.values()), "crash_inflight": crash_at,
            "num_speculative_tokens": spec, "max_num_seqs": max_num_seqs, "reasons": reasons}


RIG_KNOBS = "vllm-double.json"
# The memory model, per card, after vLLM V1's own rules (vllm/v1/core/sched/scheduler.py: one
# token budget per step, max_num_batched_tokens, shared by every running and waiting request;
# gpu_worker.py: the KV pool is what gpu_memory_utilization leaves after a profile run of one
# full-budget step). A step's peak is the reserved budget plus what the profile run did not
# measure: a term per 1024 tokens scheduled in the step (calibrated), one per sequence in
# prefill and one per running sequence (assumed from tensor shapes).
MEMORY_DEFAULTS = {
    "card_mib": 24576.0,       # an RTX 3090
    "capacity_mib": None,      # what torch reports as total capacity: card_mib - 451 by default
    # W4A8: MiB per 1024 tokens scheduled in one step beyond the profile run's reservation
    # (calibrated: 0.90, 8192 batched tokens, 2 x 16K prompts peaked at 23,872 MiB).
    "mib_per_ktoken": 217.8625,
    "w4a16_factor": 0.75,      # without int8 activations (no VLLM_MARLIN_INPUT_DTYPE=int8)
    # Assumed, not measured: the gated-delta-net layers' initial-state gather per sequence in
    # prefill ([16 heads, 128, 128] fp32 on each card at TP=2, not in the profile run), and the
    # sampler's logits per running sequence ((k+1) x 151,936 x (2 + 4 bytes) at k=4).
    "mib_per_prefill_seq": 1.0,
    "mib_per_running_seq": 4.35,
}
CAPACITY_GAP_MIB = 451  # 24,576 MiB card -> torch's "total capacity of 23.56 GiB"
DEFAULT_MAX_NUM_BATCHED_TOKENS = 2048  # vLLM V1, API server, GPU under 70 GiB
LONG_PREFILL_TOKENS = 1024
PREFIX_BLOCK_TOKENS = 16  # vLLM's default KV block: cache hits are whole blocks
PREFIX_CACHE_PROMPTS = 64  # prompts remembered for prefix caching (bounded memory)
GUARDED_PREFIX = ("/v1", "/v2", "/inference", "/cohere")  # vLLM's AuthenticationMiddleware
ARITHMETIC = re.compile(r"What is (-?\d+) \+ (-?\d+)\? Reply with the number only\.")
VOCAB = 151643  # Qwen3's plain-token vocabulary; special ids follow
IM_START, IM_END, NEWLINE = 151644, 151645, 198


def is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def memory_knobs(raw) -> tuple:
    """(memory dict or None, warnings) for the rig knob "memory": card_mib, capacity_mib (> 0),
    mib_per_ktoken, w4a16_factor (>= 0); a bad or unknown key is dropped and named."""
    if not isinstance(raw, dict):
        return None, [f"{RIG_KNOBS}: memory must be an object, not {raw!r}; ignored"]
    memory, warnings = {}, []
    for key, value in raw.items():
        strict = key in ("card_mib", "capacity_mib")
        if key not in MEMORY_DEFAULTS:
            warnings.append(f"{RIG_KNOBS}: memory.{key} is not a memory knob; ignored")
        elif is_number(value) and (value > 0 if strict else value >= 0):
            memory[key] = float(value)
        else:
            warnings.append(f"{RIG_KNOBS}: memory.{key} must be a number "
                            f"{'>' if strict else '>='} 0, not {value!r}; ignored")
    return memory, warnings


def memory_model(args, memory=None, environ=None) -> dict:
    """The step peak model of one start (MEMORY_DEFAULTS, overridden by the "memory" knob):
    budget_mib (utilization x card_mib) and per_ktoken_mib (mib_per_ktoken, x w4a16_factor
    without W4A8) with the start's max_num_batched_tokens."""
    environ = os.environ if environ is None else environ
    model = {**MEMORY_DEFAULTS, **(memory or {})}
    if model["capacity_mib"] is None:
        model["capacity_mib"] = model["card_mib"] - CAPACITY_GAP_MIB
    w4a8 = environ.get("VLLM_MARLIN_INPUT_DTYPE") == "int8"
    batched = getattr(args, "max_num_batched_tokens", None) or DEFAULT_MAX_NUM_BATCHED_TOKENS
    utilization = getattr(args, "gpu_memory_utilization", None) or 0.9
    model.update({
        "w4a8": w4a8, "max_num_batched_tokens": batched, "gpu_memory_utilization": utilization,
        "budget_mib": utilization * model["card_mib"],
        "per_ktoken_mib": model["mib_per_ktoken"] * (1.0 if w4a8 else model["w4a16_factor"]),
    })
    return model


def step_tokens(model: dict, prefilling) -> int:
    """Tokens one step schedules for the long prefills in flight: their tokens together, at
    most the one shared budget (max_num_batched_tokens). Prefills under 1024 tokens are left
    out: short chats do not reach the peak."""
    return min(model["max_num_batched_tokens"],
               sum(t for t in prefilling if t >= LONG_PREFILL_TOKENS))


def step_peak_mib(model: dict, prefilling, running: int) -> float:
    """A step's peak MiB per card: the reserved budget, the step's tokens beyond the profile
    run (per_ktoken_mib per 1024), each long sequence in prefill and each running sequence."""
    long = [t for t in prefilling if t >= LONG_PREFILL_TOKENS]
    if not long:
        return model["budget_mib"]
    return (model["budget_mib"] + model["per_ktoken_mib"] * step_tokens(model, long) / 1024
            + model["mib_per_prefill_seq"] * len(long) + model["mib_per_running_seq"] * running)


def prefill_mib(model: dict, tokens: int) -> float:
    """What one sequence's chunk of a step takes (what torch tried to allocate when it did not
    fit): its tokens up to the budget, per_ktoken_mib per 1024 (0 below 1024 tokens)."""
    if tokens < LONG_PREFILL_TOKENS:
        return 0.0
    return model["per_ktoken_mib"] * min(tokens, model["max_num_batched_tokens"]) / 1024


def prefill_steps(model: dict, tokens: int) -> int:
    """Steps a prompt of `tokens` to prefill takes alone: ceil(tokens / budget)."""
    return -(-int(tokens) // int(model["max_num_batched_tokens"])) if tokens > 0 else 0


def format_size(mib: float) -> str:
    """torch's format_size (c10/util): bytes, KiB, MiB or GiB with two decimals."""
    size = max(int(mib * 1048576), 0)
    if size <= 1024:
        return f"{size} bytes"
    for limit, divisor, unit in ((1048576, 1024, "KiB"), (1073741824, 1048576, "MiB")):
        if size <= limit:
            return f"{size / divisor:.2f} {unit}"
    return f"{size / 1073741824:.2f} GiB"


def oom_message(model: dict, alloc_mib: float, before_mib: float) -> str:
    """torch's CUDA out-of-memory text for an allocation of alloc_mib with before_mib in use."""
    capacity = model["capacity_mib"]
    in_use = min(before_mib, capacity - 20.0)
    by_torch = max(in_use - 600.0, 0.0)  # CUDA context, cuBLAS and NCCL are not PyTorch's
    return (f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate "
            f"{format_size(alloc_mib)}. GPU 0 has a total capacity of {format_size(capacity)} "
            f"of which {format_size(capacity - in_use)} is free. Including non-PyTorch memory, "
            f"this process has {format_size(in_use)} memory in use. Of the allocated memory "
            f"{format_size(by_torch - 64.0)} is allocated by PyTorch, and {format_size(64.0)} "
            "is reserved by PyTorch but unallocated. If reserved but unallocated memory is "
            "large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid "
            "fragmentation.  See documentation for Memory Management  (https://docs.pytorch.org/"
            "docs/stable/notes/cuda.html#optimizing-memory-usage-with-pytorch-cuda-alloc-conf)")


def spec_counts(generated: float, k: int, acceptance: float) -> dict:
    """Expected spec-decode counters for `generated` tokens: position i (1..k) is accepted with
    probability acceptance**i; one draft step yields 1 + sum of those tokens."""
    per_pos = [acceptance ** i for i in range(1, k + 1)]
    accepted_per_step = sum(per_pos)
    drafts = generated / (1 + accepted_per_step)
    return {"drafts": drafts, "draft_tokens": drafts * k,
            "accepted_tokens": drafts * accepted_per_step,
            "accepted_per_pos": [drafts * p for p in per_pos],
            "mean_acceptance_length": 1 + accepted_per_step}


def prom_value(value: float) -> str:
    """A sample value as prometheus_client writes it (floats: 12.0, 3.5)."""
    return repr(float(value))


def common_chars(text: str, seen: str) -> int:
    """Length of the common start of two strings: galloping, then a binary search, so the cost
    follows the shared length (a prompt that differs at once costs nothing)."""
    n = min(len(text), len(seen))
    low, step = 0, 64
    while low < n:
        high = min(n, low + step)
        if text[low:high] != seen[low:high]:
            break
        low, step = high, step * 2
    else:
        return n
    while low < high:  # text[:low] is shared, text[:high] is not
        mid = (low + high + 1) // 2
        if text[low:mid] == seen[low:mid]:
            low = mid
        else:
            high = mid - 1
    return low


def common_words(text: str, seen: str) -> int:
    """Whole words `text` shares at its start with `seen`."""
    low = common_chars(text, seen)
    ends_word = all(low == len(t) or t[low].isspace() for t in (text, seen))
    at_boundary = low == 0 or text[low - 1].isspace() or ends_word
    shared = len(text[:low].split())
    return shared if at_boundary else shared - 1


# How the spec-decode counters appear on /metrics (knob "spec_decode_metrics"): as vLLM 0.27.1
# exports them; renamed (as vLLM does to a metric over a deprecation cycle: it is deprecated in
# one minor release, hidden in the next, removed in the one after), here to a "speculative"
# prefix the role's reader does not know; or dropped altogether.
SPEC_METRICS = ("exported", "renamed", "dropped")
# vLLM's buckets for vllm:time_to_first_token_seconds (vllm/v1/metrics/loggers.py).
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0,
                7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
KV_BLOCK_TOKENS = 16    # vLLM's default --block-size
RENAMED_SPEC_PREFIX = "vllm:speculative_decoding_"


def rig_knobs(raw, version=__version__) -> tuple:
    """(knobs, warnings): the serving knobs of a rig's vllm-double.json (dict as loaded), checked.
    tokens_per_s, kv_cache_tokens: numbers > 0; ttft_s, ttft_jitter_s, rate_jitter_pct,
    prefill_s_per_ktoken:
    numbers >= 0; mtp_acceptance: number in [0, 1]; seed: integer; fail_health, garbage: bool;
    spec_decode_metrics: one of SPEC_METRICS; memory: object (memory_knobs). Other keys (the
    download knobs hf_cli reads) are left alone; a bad value is dropped and named. Keys under
    "by_version": {"<vLLM version>": {...}} apply only to a double of that version and win over
    the top-level ones, so a rig can make one release slow or unhealthy and not the other (a
    rollback then brings back a release that behaves as before). None (no file, or `null`): no
    knobs, no warning."""
    knobs, warnings = {}, []
    if not isinstance(raw, dict):
        return knobs, ([f"{RIG_KNOBS}: not a JSON object; ignored"] if raw is not None else [])
    by_version = raw.get("by_version", {})
    if not isinstance(by_version, dict):
        warnings.append(f"{RIG_KNOBS}: by_version must be an object, not {by_version!r}; ignored")
        by_version = {}
    per_version = by_version.get(version)
    if isinstance(per_version, dict):
        raw = {**raw, **per_version}
    for key, low, strict in (("tokens_per_s", 0.0, True), ("kv_cache_tokens", 0.0, True),
                             ("ttft_s", 0.0, False),
                             ("ttft_jitter_s", 0.0, False), ("rate_jitter_pct", 0.0, False),
                             ("prefill_s_per_ktoken", 0.0, False),
                             ("prefill_step_s", 0.0, False)):
        if key not in raw:
            continue
        value = raw[key]
        if is_number(value) and (value > low if strict else value >= low):
            knobs[key] = float(value)
        else:
            warnings.append(f"{RIG_KNOBS}: {key} must be a number {'>' if strict else '>='} "
                            f"{low:g}, not {value!r}; ignored")
    if "mtp_acceptance" in raw:
        value = raw["mtp_acceptance"]
        if is_number(value) and 0 <= value <= 1:
            knobs["mtp_acceptance"] = float(value)
        else:
            warnings.append(f"{RIG_KNOBS}: mtp_acceptance must be a number in [0, 1], not "
                            f"{value!r}; ignored")
    if "seed" in raw:
        if isinstance(raw["seed"], int) and not isinstance(raw["seed"], bool):
            knobs["seed"] = raw["seed"]
        else:
            warnings.append(f"{RIG_KNOBS}: seed must be an integer, not {raw['seed']!r}; ignored")
    if "spec_decode_metrics" in raw:
        value = raw["spec_decode_metrics"]
        if value in SPEC_METRICS:
            knobs["spec_decode_metrics"] = value
        else:
            warnings.append(f"{RIG_KNOBS}: spec_decode_metrics must be one of "
                            f"{', '.join(SPEC_METRICS)}, not {value!r}; ignored")
    for key in ("fail_health", "garbage"):
        if key not in raw:
            continue
        if isinstance(raw[key], bool):
            knobs[key] = raw[key]
        else:
            warnings.append(f"{RIG_KNOBS}: {key} must be true or false, not "
                            f"{raw[key]!r}; ignored")
    if "memory" in raw:
        memory, memory_warnings = memory_knobs(raw["memory"])
        warnings += memory_warnings
        if memory is not None:
            knobs["memory"] = memory
    return knobs, warnings


def words(n: int) -> list:
    """The double's answer: n words, WORDS over and over."""
    return [WORDS[i % len(WORDS)] for i in range(n)]


def message_text(message) -> str:
    """A chat message's text (a list of parts: their "text" joined by spaces)."""
    content = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, list):
        content = " ".join(p.get("text", "") for p in content if isinstance(p, dict))
    return str(content or "")


def word_id(word: str) -> int:
    return zlib.crc32(word.encode()) % VOCAB


def word_tokens(word: str) -> list:
    """A whitespace word's pieces as Qwen's pre-tokenizer splits them: every digit alone, each
    run of other characters one piece, and the space before a word that starts with a digit a
    piece of its own. So "12345" costs 6 tokens and "fox" 1: a text of growing numbers costs
    more per word the longer it gets, as on the real tokenizer."""
    pieces = [" "] if word[:1].isdigit() else []
    for char in word:
        if char.isdigit() or not pieces or pieces[-1] == " " or pieces[-1].isdigit():
            pieces.append(char)
        else:
            pieces[-1] += char
    return pieces


def text_token_ids(text: str) -> list:
    return [word_id(piece) for word in text.split() for piece in word_tokens(word)]


def count_tokens(messages) -> int:
    """Prompt tokens: the message texts' pieces (word_tokens), plus 4 per message (its template
    tokens)."""
    return sum(len(text_token_ids(message_text(m))) + 4 for m in messages)


def chat_token_ids(messages) -> list:
    """Token ids of a chat prompt, count_tokens long: <|im_start|> role \\n text <|im_end|>."""
    ids = []
    for message in messages:
        role = message.get("role", "user") if isinstance(message, dict) else "user"
        ids += [IM_START, word_id(str(role)), NEWLINE]
        ids += text_token_ids(message_text(message)) + [IM_END]
    return ids


def arithmetic_answer(messages):
    """str(A+B) when the last user message is `What is A + B? Reply with the number only.`"""
    users = [m for m in messages if isinstance(m, dict) and m.get("role") == "user"]
    match = ARITHMETIC.fullmatch(message_text(users[-1]).strip()) if users else None
    return str(int(match.group(1)) + int(match.group(2))) if match else None


NEEDLE = re.compile(r"The secret number is (\d+)\.")
NEEDLE_QUESTION = "What is the secret number? Reply with the number only."


def needle_answer(messages):
    """The production model recalls a needle (the double stands in for it): when the last user
    message ends with NEEDLE_QUESTION, the number of the last "The secret number is N." in the
    messages, else None (no needle: it answers as usual)."""
    users = [m for m in messages if isinstance(m, dict) and m.get("role") == "user"]
    if not users or not message_text(users[-1]).strip().endswith(NEEDLE_QUESTION):
        return None
    found = NEEDLE.findall("\n".join(message_text(m) for m in messages))
    return found[-1] if found else None


def thinking_off(body: dict) -> bool:
    kwargs = body.get("chat_template_kwargs")
    return isinstance(kwargs, dict) and kwargs.get("enable_thinking") is False


def prom_label(value) -> str:
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


INVOCATION_MISS = ("Cannot find suitable handler for request. Expected one of: "
                   "['ChatCompletionRequest', 'CompletionRequest']")
ENGINE_DEAD = "EngineCore encountered an issue. See stack trace (above) for the root cause."
OOM_LINES = (
    "ERROR [core.py] EngineCore encountered a fatal error.",
    "Traceback (most recent call last):",
    '  File "/usr/local/lib/python3/dist-packages/vllm/v1/engine/core.py", line 701, '
    "in run_engine_core",
    "    engine_core.run_busy_loop()",
    '  File "/usr/local/lib/python3/dist-packages/vllm/v1/worker/gpu_model_runner.py", '
    "line 2473, in execute_model",
    "    model_output = self._model_forward(...)",
    "{oom}",
    "ERROR [async_llm.py] AsyncLLM output_handler failed. EngineCore died unexpectedly.",
    "vllm.v1.engine.exceptions.EngineDeadError: " + ENGINE_DEAD,
    "vllm-double: simulated CUDA out of memory in prefill (peak {peak:.0f} MiB per card over "
    "the card's {card:.0f} MiB, {seqs} sequences in prefill); exiting with status 1",
)
OOM_EXIT = 1  # the API server shuts down after EngineDeadError; Docker's restart policy acts


class Engine:
    """Shared state of one double server: names, keys, in-flight count, crash rule, faults,
    timing, prefix cache, prefill memory and the metrics counters."""

    def __init__(self, served_names, api_keys, crash_armed=False, crash_inflight=4,
                 reasoning=False, max_model_len=None, root=None, knobs=None,
                 num_speculative_tokens=0, prefix_caching=True, memory=None,
                 kv_cache_tokens=None, gpu_memory_file=None, idle_used_mib=None):
        self.served_names = list(served_names)
        self.root = root or self.served_names[0]
        self.api_keys = [k for k in api_keys if k]
        self.crash_armed = crash_armed
        self.crash_inflight = crash_inflight
        self.reasoning = reasoning
        self.max_model_len = max_model_len
        self.latency_s = env_float("VLLM_DOUBLE_LATENCY_S", 0.3)
        self.token_s = env_float("VLLM_DOUBLE_TOKEN_S", 0.005)
        knobs = knobs or {}
        self.ttft_s = knobs.get("ttft_s", self.latency_s + self.token_s)
        self.token_interval_s = (1.0 / knobs["tokens_per_s"] if "tokens_per_s" in knobs
                                 else self.token_s)
        self.fail_health = bool(knobs.get("fail_health"))
        self.garbage = bool(knobs.get("garbage"))
        self.ttft_jitter_s = knobs.get("ttft_jitter_s", 0.0)
        self.rate_jitter = knobs.get("rate_jitter_pct", 0.0) / 100
        # timing jitter, not secrets: a seeded generator makes a run repeatable
        self.rng = random.Random(knobs.get("seed"))  # noqa: S311
        self.prefill_s_per_ktoken = knobs.get("prefill_s_per_ktoken", 0.002)
        # Assumed: what each prefill step costs beyond its tokens (launches, TP all-reduces).
        self.prefill_step_s = knobs.get("prefill_step_s", 0.03)
        self.spec_tokens = num_speculative_tokens
        self.acceptance = knobs.get("mtp_acceptance", 0.7)
        self.spec_metrics = knobs.get("spec_decode_metrics", "exported")
        self.prefix_caching = prefix_caching
        self.seen = deque(maxlen=PREFIX_CACHE_PROMPTS)
        self.memory = memory or memory_model(None, knobs.get("memory"))
        self.prefilling = {}
        self.faults = parse_faults(os.environ.get("VLLM_DOUBLE_FAULTS", ""))
        self.lock = threading.Lock()
        self.dead = threading.Event()
        self.in_flight = 0
        # The pool this start got (kv_pool: --kv-cache-memory-bytes, else the knob)
        self.kv_cache_tokens = (kv_cache_tokens if kv_cache_tokens
                                else knobs.get("kv_cache_tokens", 131072.0))
        self.kv_tokens_in_use = 0
        self.waiting = 0
        # What the cards hold between steps (the engine's budget), and where nvidia-smi's
        # double reads it (gpu_memory_file; None: not written)
        self.idle_used_mib = idle_used_mib if idle_used_mib else self.memory["budget_mib"]
        self.gpu_memory_file = gpu_memory_file
        self.write_gpu_memory(self.idle_used_mib)
        self.ttft_buckets = [0] * len(TTFT_BUCKETS)
        self.ttft_sum = 0.0
        self.ttft_count = 0
        self.requests = 0
        self.prompt_tokens_total = 0
        self.generation_tokens_total = 0
        self.crash = self._crash
        self.die = self._die

    def write_gpu_memory(self, used_mib: float) -> None:
        """Writes what each card holds now (MiB) where the nvidia-smi double reads it: the GPU
        memory both see, as the driver would report it (written whole, then renamed)."""
        if not self.gpu_memory_file:
            return
        temporary = f"{self.gpu_memory_file}.{os.getpid()}.tmp"
        try:
            with open(temporary, "w", encoding="utf-8") as handle:
                json.dump({"used_mib": round(used_mib), "card_mib": self.memory["card_mib"],
                           "time": time.time()}, handle)
            os.replace(temporary, self.gpu_memory_file)
        except OSError as exc:
            log(f"WARNING cannot write {self.gpu_memory_file}: {exc}")

    def admit(self, kv_tokens: int) -> bool:
        """Waits until the pool holds this request's blocks beside those in flight, counted in
        vllm:num_requests_waiting meanwhile: what vLLM 0.27.1's V1 scheduler does with a request
        whose blocks it cannot allocate (it stays waiting; it is not preempted: recorded on the
        real CPU build, tests/integration/test_engine_contract.py). The double reserves a whole
        request at admission, so it never grows into a full pool and never preempts. False when
        the engine died meanwhile."""
        waited = False
        while True:
            with self.lock:
                if (not self.kv_tokens_in_use
                        or self.kv_tokens_in_use + kv_tokens <= self.kv_cache_tokens):
                    self.kv_tokens_in_use += kv_tokens
                    self.waiting -= waited
                    return True
                if not waited:
                    self.waiting += 1
            waited = True
            if not self.wait(0.02):
                with self.lock:
                    self.waiting -= 1
                return False

    def fault(self, kind: str, ordinal: int = 0) -> bool:
        if kind not in self.faults:
            return False
        ordinals = self.faults[kind]
        return ordinals is None or ordinal in ordinals

    def _crash(self, n: int) -> None:
        sys.stdout.flush()
        for line in CRASH_LINES:
            sys.stderr.write(line.format(n=n) + "\n")
        sys.stderr.flush()
        os._exit(CRASH_EXIT)

    def _die(self) -> None:
        """After an OOM: lets the in-flight requests get their 500 (5 s at most), then exits."""
        deadline = time.monotonic() + 5
        while self.in_flight and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(0.2)  # their handlers write the answers after leaving the engine
        log("Shutting down API server (EngineCore died)")
        sys.stdout.flush()
        os._exit(OOM_EXIT)

    def oom(self, alloc_mib: float, peak_mib: float, seqs: int) -> None:
        """What vLLM does on a CUDA OOM in the engine core: torch's message and the fatal
        error on stderr, 500 to every in-flight request, then exit status 1."""
        with self.lock:
            if self.dead.is_set():
                return
            self.dead.set()
        sys.stdout.flush()
        oom = oom_message(self.memory, alloc_mib, peak_mib - alloc_mib)
        for line in OOM_LINES:
            sys.stderr.write(line.format(oom=oom, peak=peak_mib, card=self.memory["card_mib"],
                                         seqs=seqs) + "\n")
        sys.stderr.flush()
        threading.Thread(target=self.die, daemon=True).start()

    def wait(self, seconds: float) -> bool:
        """Sleeps `seconds`; False (at once) when the engine died meanwhile."""
        if seconds > 0:
            return not self.dead.wait(seconds)
        return not self.dead.is_set()

    def plan(self, messages) -> dict:
        """One request's prompt, cache hit and timing: TTFT = ttft_s + jitter + prefill of the
        uncached tokens; the decode interval times the rate jitter factor."""
        prompt_tokens = count_tokens(messages)
        text = "\n".join(message_text(m) for m in messages)
        with self.lock:
            seen = list(self.seen) if self.prefix_caching else []
            jitter, factor = self.jitter()
        shared = max((common_words(text, prompt) for prompt in seen), default=0)
        cached = min(shared, prompt_tokens - 1) // PREFIX_BLOCK_TOKENS * PREFIX_BLOCK_TOKENS
        prefill_tokens = prompt_tokens - cached
        return {"text": text, "prompt_tokens": prompt_tokens, "cached_tokens": cached,
                "prefill_tokens": prefill_tokens,
                "ttft": (self.ttft_s + jitter + prefill_tokens / 1000 * self.prefill_s_per_ktoken
                         # the base TTFT holds one step; a longer prefill pays the others
                         + max(prefill_steps(self.memory, prefill_tokens) - 1, 0)
                         * self.prefill_step_s),
                "interval": self.token_interval_s * factor}

    def jitter(self) -> tuple:
        """(extra TTFT seconds, decode-interval factor) of one request: uniform in
        [0, ttft_jitter_s] and in [1 - p, 1 + p] (p = rate_jitter_pct / 100), never below 0.5."""
        extra = self.rng.uniform(0, self.ttft_jitter_s) if self.ttft_jitter_s else 0.0
        factor = 1.0
        if self.rate_jitter:
            factor = max(0.5, self.rng.uniform(1 - self.rate_jitter, 1 + self.rate_jitter))
        return extra, factor

    def prefill(self, plan: dict) -> bool:
        """The TTFT wait, counted in the step's memory when the prompt is long (may OOM); False
        when the engine died. A finished prefill joins the prefix cache."""
        mib = prefill_mib(self.memory, plan["prefill_tokens"])
        key = object()
        if mib:
            with self.lock:
                self.prefilling[key] = {"tokens": plan["prefill_tokens"], "peak": 0.0, "seqs": 0}
                tokens = [e["tokens"] for e in self.prefilling.values()]
                total = step_peak_mib(self.memory, tokens, max(self.in_flight, len(tokens)))
                seqs = len(self.prefilling)
                for entry in self.prefilling.values():
                    if total > entry["peak"]:
                        entry.update(peak=total, seqs=seqs)
                # written under the lock: the last change is the last written
                self.write_gpu_memory(total - self.memory["budget_mib"] + self.idle_used_mib)
            if total > self.memory["card_mib"]:
                self.oom(mib, total, seqs)
        alive = self.wait(plan["ttft"])
        if mib:
            with self.lock:
                entry = self.prefilling.pop(key)
                still = [e["tokens"] for e in self.prefilling.values()]
                now = step_peak_mib(self.memory, still, self.in_flight)
                self.write_gpu_memory(now - self.memory["budget_mib"] + self.idle_used_mib)
            log(f"vllm-double: prefill peak {entry['peak']:.0f} MiB per card "
                f"({plan['prefill_tokens']} prompt tokens to prefill, {entry['seqs']} "
                "sequences in prefill)")
        if alive:
            with self.lock:
                self.seen.append(plan["text"])
                self.prompt_tokens_total += plan["prompt_tokens"]
                self.ttft_sum += plan["ttft"]
                self.ttft_count += 1
                for index, bound in enumerate(TTFT_BUCKETS):
                    self.ttft_buckets[index] += plan["ttft"] <= bound
        return alive

    def count_generated(self, tokens: int) -> None:
        with self.lock:
            self.generation_tokens_total += tokens

    def completion(self, body: dict, emit) -> tuple:
        """(status, payload) for one chat completion; may crash the process. A stream
        (`"stream": true`) is written through emit(data) as it is generated, one call per SSE
        `data:` line, and answers (200, None). The http-500 fault answers 500 after the TTFT
        (a stream, before its first event) or the whole generation time (not streamed)."""
        # vLLM takes a request that names no model (absent or empty) for its first served name.
        model = body.get("model") or self.served_names[0]
        if model not in self.served_names:
            return 404, error_body(f"The model `{model}` does not exist.", "NotFoundError", 404)
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            return 400, error_body("messages: a non-empty list is required", "BadRequestError")
        stream = bool(body.get("stream"))
        max_tokens = body.get("max_completion_tokens") or body.get("max_tokens") or 16
        if not isinstance(max_tokens, int) or max_tokens < 1:
            return 400, error_body("max_tokens must be a positive integer", "BadRequestError")
        too_long = self.over_context(messages, max_tokens)
        if too_long:
            return 400, too_long
        if self.dead.is_set():
            return 500, error_body(ENGINE_DEAD, "InternalServerError", 500)
        with self.lock:
            self.requests += 1
            self.in_flight += 1
            ordinal, in_flight = self.requests, self.in_flight
        kv_tokens = 0
        try:
            if self.crash_armed and in_flight >= self.crash_inflight:
                self.crash(in_flight)
            plan = self.plan(messages)
            answer = self.answer(body, messages, max_tokens, ordinal, plan["prompt_tokens"])
            # the request's KV blocks, held until it ends
            kv_tokens = -(-(plan["prompt_tokens"] + answer["generated"]) // KV_BLOCK_TOKENS) \
                * KV_BLOCK_TOKENS
            if not self.admit(kv_tokens):
                kv_tokens = 0
                return 500, error_body(ENGINE_DEAD, "InternalServerError", 500)
            if not self.prefill(plan):
                return 500, error_body(ENGINE_DEAD, "InternalServerError", 500)
            decode_s = plan["interval"] * max(answer["generated"] - 1, 0)
            if self.fault("http-500", ordinal):
                if not stream:
                    self.wait(decode_s)
                return 500, error_body("vllm-double: injected fault http-500",
                                       "InternalServerError", 500)
            if stream:
                self.stream(answer, model, body, emit, plan["interval"])
                return 200, None
            if not self.wait(decode_s):
                return 500, error_body(ENGINE_DEAD, "InternalServerError", 500)
            self.count_generated(answer["generated"])
            return 200, self.message(answer, model)
        finally:
            with self.lock:
                self.in_flight -= 1
                self.kv_tokens_in_use -= kv_tokens

    def message(self, answer: dict, model: str) -> dict:
        """The non-streamed chat.completion body of one answer."""
        sep = answer["sep"]
        content = sep.join(answer["content"]) if answer["content"] else None
        reasoning = " ".join(answer["reasoning"]) if answer["reasoning"] else None
        if answer["empty"]:
            content, reasoning = "", None
        message = {"role": "assistant", "content": content, "tool_calls": []}
        if self.reasoning:
            message["reasoning_content"] = reasoning
            message["reasoning"] = reasoning
        return {
            "id": answer["id"],
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "choices": [{"index": 0, "message": message, "logprobs": None,
                         "finish_reason": answer["finish_reason"]}],
            "usage": answer["usage"],
        }

    def answer(self, body: dict, messages, max_tokens: int, ordinal: int,
               prompt_tokens=None) -> dict:
        """What one request answers: reasoning and content words, usage, finish reason."""
        thinking = self.reasoning and not thinking_off(body)
        reasoning_tokens = min(max_tokens, 8) if thinking else 0
        ignore_eos = body.get("ignore_eos") is True
        total = arithmetic_answer(messages) if not ignore_eos else None
        if total is None and not ignore_eos:
            total = needle_answer(messages)
        if total is not None:
            content = [total][:max_tokens - reasoning_tokens]
        else:
            content = words(min(max_tokens - reasoning_tokens, max_tokens if ignore_eos else 12))
        reasoning = WORDS[-reasoning_tokens:] if reasoning_tokens else []
        generated = len(reasoning) + len(content)
        sep = " "
        if self.garbage:
            # A broken KV cache never reaches an end of text: "!" until max_tokens, with no
            # </think> for the reasoning parser to split off, so all of it is content.
            reasoning, content, sep = [], ["!"] * max_tokens, ""
            generated = max_tokens
        empty = self.fault("empty-content", ordinal)
        if empty:
            reasoning, content = [], []
        completion_tokens = len(reasoning) + len(content)
        if prompt_tokens is None:
            prompt_tokens = count_tokens(messages)
        usage = {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                 "total_tokens": prompt_tokens + completion_tokens}
        if self.fault("zero-usage", ordinal):
            usage = {"prompt_tokens": prompt_tokens, "completion_tokens": 0,
                     "total_tokens": prompt_tokens}
        return {"id": f"chatcmpl-double-{ordinal}", "generated": generated, "empty": empty,
                "reasoning": reasoning, "content": content, "sep": sep, "usage": usage,
                "finish_reason": "length" if completion_tokens >= max_tokens else "stop"}

    def stream(self, answer: dict, model: str, body: dict, emit, interval=None) -> None:
        """Writes one answer as vLLM streams it (its TTFT already waited): a role delta, one
        delta per token (the decode interval between them), usage when asked, [DONE]. When the
        engine dies mid-stream: an error event, then [DONE]."""
        interval = self.token_interval_s if interval is None else interval
        created = int(time.time())

        def chunk(delta, finish_reason=None) -> str:
            return json.dumps({
                "id": answer["id"], "object": "chat.completion.chunk", "created": created,
                "model": model, "choices": [{"index": 0, "delta": delta, "logprobs": None,
                                             "finish_reason": finish_reason}]})

        sep = answer["sep"]
        tokens = [("reasoning", w) for w in answer["reasoning"]]
        tokens += [("content", w if i == 0 else sep + w) for i, w in enumerate(answer["content"])]
        emit(chunk({"role": "assistant", "content": ""}))
        for i, (kind, text) in enumerate(tokens):
            if i and not self.wait(interval):
                emit(json.dumps(error_body(ENGINE_DEAD, "InternalServerError", 500)))
                emit("[DONE]")
                return
            delta = ({"reasoning_content": text, "reasoning": text} if kind == "reasoning"
                     else {"content": text})
            self.count_generated(1)
            emit(chunk(delta, answer["finish_reason"] if i == len(tokens) - 1 else None))
        if not tokens:
            emit(chunk({}, answer["finish_reason"]))
        options = body.get("stream_options")
        if isinstance(options, dict) and options.get("include_usage"):
            emit(json.dumps({"id": answer["id"], "object": "chat.completion.chunk",
                             "created": created, "model": model, "choices": [],
                             "usage": answer["usage"]}))
        emit("[DONE]")

    def tokenize(self, body: dict) -> tuple:
        """(status, payload) of POST /tokenize: {"model", "prompt"} or {"model", "messages"}
        -> vLLM's TokenizeResponse (count, max_model_len, tokens, token_strs)."""
        model = body.get("model")
        if model and model not in self.served_names:
            return 404, error_body(f"The model `{model}` does not exist.", "NotFoundError", 404)
        if isinstance(body.get("messages"), list):
            tokens = chat_token_ids(body["messages"])
        elif isinstance(body.get("prompt"), str):
            tokens = text_token_ids(body["prompt"])
        else:
            return 400, error_body("prompt (a string) or messages (a list) is required",
                                   "BadRequestError")
        return 200, {"count": len(tokens), "max_model_len": self.model_len(), "tokens": tokens,
                     "token_strs": None}

    def over_context(self, messages, max_tokens: int):
        """vLLM 0.27.1's 400 for a request that cannot fit max_model_len (vllm/renderers/
        params.py; bodies recorded from the real engine,
        tests/integration/test_engine_contract.py), or
        None. Its tokenizer stops at one token past what fits, hence "at least"."""
        limit = self.model_len()
        if max_tokens > limit:
            return error_body(
                f"max_tokens={max_tokens} cannot be greater than max_model_len=max_total_tokens="
                f"{limit}. Please request fewer output tokens. (parameter=max_tokens, "
                f"value={max_tokens})", "BadRequestError", param="max_tokens")
        fits = limit - max_tokens
        prompt = min(count_tokens(messages), fits + 1)
        if prompt <= fits:
            return None
        at_least = "at least " if prompt == fits + 1 else ""
        return error_body(
            f"This model's maximum context length is {limit} tokens. However, you requested "
            f"{max_tokens} output tokens and your prompt contains {at_least}{prompt} input "
            f"tokens, for a total of {at_least}{prompt + max_tokens} tokens. Please reduce the "
            f"length of the input prompt or the number of requested output tokens. "
            f"(parameter=input_tokens, value={prompt})", "BadRequestError", param="input_tokens")

    def model_len(self) -> int:
        """--max-model-len, or the checkpoint's (the double's: 40960) when unset or auto."""
        length = self.max_model_len
        return length if isinstance(length, int) and length > 0 else DEFAULT_MAX_MODEL_LEN

    def metrics(self) -> str:
        """GET /metrics: vLLM's token counters, and its spec-decode counters when speculative
        decoding is on, in Prometheus' text format as prometheus_client writes it."""
        labels = f'engine="0",model_name="{prom_label(self.served_names[0])}"'
        with self.lock:
            prompt, generated = self.prompt_tokens_total, self.generation_tokens_total
        families = [
            ("vllm:prompt_tokens", "Number of prefill tokens processed.", [(labels, prompt)]),
            ("vllm:generation_tokens", "Number of generation tokens processed.",
             [(labels, generated)]),
            # The double never preempts (Engine.admit); the real vLLM exports it from the start,
            # and the alert rules and the fit read it.
            ("vllm:num_preemptions", "Cumulative number of preemption from the engine.",
             [(labels, 0)]),
        ]
        if self.spec_tokens >= 1 and self.spec_metrics != "dropped":
            counts = spec_counts(generated, self.spec_tokens, self.acceptance)
            spec = [
                ("vllm:spec_decode_num_drafts", "Number of spec decoding drafts.",
                 [(labels, counts["drafts"])]),
                ("vllm:spec_decode_num_draft_tokens", "Number of draft tokens.",
                 [(labels, counts["draft_tokens"])]),
                ("vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens.",
                 [(labels, counts["accepted_tokens"])]),
                ("vllm:spec_decode_num_accepted_tokens_per_pos",
                 "Accepted tokens per draft position.",
                 [(f'{labels},position="{pos}"', value)
                  for pos, value in enumerate(counts["accepted_per_pos"])]),
            ]
            if self.spec_metrics == "renamed":
                spec = [(name.replace("vllm:spec_decode_", RENAMED_SPEC_PREFIX), text, samples)
                        for name, text, samples in spec]
            families += spec
        with self.lock:
            running, kv_tokens = self.in_flight - self.waiting, self.kv_tokens_in_use
            waiting = self.waiting
            buckets, ttft_sum, ttft_count = list(self.ttft_buckets), self.ttft_sum, self.ttft_count
        gauges = [
            ("vllm:num_requests_running", "Number of requests in model execution batches.",
             running),
            ("vllm:num_requests_waiting", "Number of requests waiting to be processed.",
             waiting),
            ("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.",
             min(kv_tokens / self.kv_cache_tokens, 1.0)),
        ]
        lines = []
        for name, text, value in gauges:
            lines += [f"# HELP {name} {text}", f"# TYPE {name} gauge",
                      f"{name}{{{labels}}} {prom_value(value)}"]
        for name, text, samples in families:
            lines += [f"# HELP {name}_total {text}", f"# TYPE {name}_total counter"]
            lines += [f"{name}_total{{{label}}} {prom_value(value)}" for label, value in samples]
        ttft = "vllm:time_to_first_token_seconds"
        lines += [f"# HELP {ttft} Histogram of time to first token in seconds.",
                  f"# TYPE {ttft} histogram"]
        lines += [f'{ttft}_bucket{{{labels},le="{bound}"}} {prom_value(float(count))}'
                  for bound, count in zip(TTFT_BUCKETS, buckets, strict=True)]
        lines += [f'{ttft}_bucket{{{labels},le="+Inf"}} {prom_value(float(ttft_count))}',
                  f"{ttft}_count{{{labels}}} {prom_value(float(ttft_count))}",
                  f"{ttft}_sum{{{labels}}} {prom_value(ttft_sum)}"]
        return "\n".join(lines) + "\n"

    def models(self) -> dict:
        return {"object": "list", "data": [
            {"id": name, "object": "model", "created": int(time.time()), "owned_by": "vllm",
             "root": self.root, "parent": None, "max_model_len": self.max_model_len}
            for name in self.served_names]}


def error_body(message: str, kind: str, code: int = 400, param=None) -> dict:
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


class Handler(BaseHTTPRequestHandler):
    server_version = "vllm-double"
    engine: Engine = None  # set on the subclass make_server builds

    def log_message(self, format, *args):  # noqa: A002 (http.server's signature)
        sys.stdout.write(f'INFO:     {self.client_address[0]} - "{self.requestline}" '
                         f"{args[1] if len(args) > 1 else ''}\n")
        sys.stdout.flush()

    def send_json(self, status: int, payload) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def send_text(self, status: int, text: str, content_type: str) -> None:
        data = text.encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def authorised(self, path: str) -> bool:
        """vLLM's AuthenticationMiddleware: only paths starting with GUARDED_PREFIX need
        `Authorization: Bearer KEY` (scheme in any case); 401 {"error": "Unauthorized"}."""
        keys = self.engine.api_keys
        if not keys or not path.startswith(GUARDED_PREFIX):
            return True
        scheme, _, token = self.headers.get("Authorization", "").partition(" ")
        if scheme.lower() == "bearer" and token in keys:
            return True
        self.send_json(401, {"error": "Unauthorized"})
        return False

    def health(self) -> None:
        if self.engine.dead.is_set():   # as vLLM after EngineDeadError, until the process exits
            self.send_json(503, {"error": "EngineCore encountered an issue."})
            return
        if self.engine.fault("never-healthy") or self.engine.fail_health:
            which = "never-healthy" if self.engine.fault("never-healthy") else (
                f"fail_health in {RIG_KNOBS}")
            self.send_json(503, {"error": f"vllm-double: injected fault {which}"})
            return
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_GET(self):  # noqa: N802 (http.server's naming)
        path = self.path.split("?", 1)[0]
        if not self.authorised(path):
            return
        if path in ("/health", "/ping"):
            self.health()
        elif path == "/version":
            self.send_json(200, {"version": __version__})
        elif path == "/v1/models":
            self.send_json(200, self.engine.models())
        elif path == "/metrics":
            self.send_text(200, self.engine.metrics(), "text/plain; version=0.0.4; charset=utf-8")
        else:
            self.send_json(404, {"detail": "Not Found"})

    def read_body(self):
        """The request's JSON object, or None after answering 400."""
        try:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length) or b"{}")
            if not isinstance(body, dict):
                raise ValueError("expected a JSON object")
        except ValueError as exc:
            self.send_json(400, error_body(f"invalid JSON body: {exc}", "BadRequestError"))
            return None
        return body

    def do_POST(self):  # noqa: N802
        path = self.path.split("?", 1)[0]
        if not self.authorised(path):
            return
        if path == "/ping":
            self.health()
            return
        if path not in ("/v1/chat/completions", "/invocations", "/tokenize"):
            self.send_json(404, {"detail": "Not Found"})
            return
        body = self.read_body()
        if body is None:
            return
        if path == "/tokenize":
            self.send_json(*self.engine.tokenize(body))
            return
        if path == "/invocations" and "messages" not in body:
            self.send_json(400, error_body(INVOCATION_MISS, "BadRequestError"))
            return
        self.streaming = False
        try:
            status, payload = self.engine.completion(body, self.send_event)
        except (BrokenPipeError, ConnectionResetError):
            return  # the client went away mid-stream
        if payload is not None:
            self.send_json(status, payload)

    def send_event(self, data: str) -> None:
        """One server-sent event `data: ...`; the first one sends the stream's headers."""
        if not self.streaming:
            self.streaming = True
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream; charset=utf-8")
            self.send_header("Cache-Control", "no-cache")
            self.end_headers()
        self.wfile.write(f"data: {data}\n\n".encode())
        self.wfile.flush()


def make_server(engine: Engine, host: str = "127.0.0.1", port: int = 0) -> ThreadingHTTPServer:
    """A ready-to-serve double server (port 0: any free port; see server.server_address)."""
    handler = type("BoundHandler", (Handler,), {"engine": engine})
    ThreadingHTTPServer.allow_reuse_address = True
    server = ThreadingHTTPServer((host, port), handler)
    server.daemon_threads = True
    return server


def quantization_error(args):
    """vLLM's start-time check of --quantization: any name parses, and one not in
    QUANTIZATION_METHODS (exact spelling) fails here, as ModelConfig._verify_quantization does.
    None given: the method comes from the checkpoint's config."""
    from vllm.model_executor.layers.quantization import QUANTIZATION_METHODS

    if args.quantization is None or args.quantization in QUANTIZATION_METHODS:
        return None
    return (f"ValueError: Unknown quantization method: {args.quantization}. Must be one of "
            f"{QUANTIZATION_METHODS}.")


def cache_config_error(args):
    """vLLM's start-time CacheConfig(cache_dtype=--kv-cache-dtype): the error it raises, or None
    (since 0.33.0 the parser takes any string and this is where an unknown one fails)."""
    from vllm.config import CacheConfig

    try:
        CacheConfig(cache_dtype=args.kv_cache_dtype)
    except ValueError as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


def gpu_error(args):
    """Why real vLLM could not start with the GPUs this container has, or None."""
    from vllm.platforms import visible_gpus

    gpus = visible_gpus()
    world = args.tensor_parallel_size * args.pipeline_parallel_size
    if gpus is not None and gpus and len(gpus) < world:
        return (f"ValueError: The number of required GPUs ({world}) exceeds the number of "
                f"available GPUs ({len(gpus)}) (NVIDIA_VISIBLE_DEVICES)")
    return None


# The KV pool's bytes per token of context on each rank (fp8 KV of the production model's
# attention layers) and per sequence whatever its length (the hybrid model's recurrent GDN
# state), the double's own figures. The pool is kv_cache_tokens tokens' worth of bytes unless
# --kv-cache-memory-bytes names its size, as on real vLLM.
KV_BYTES_PER_TOKEN = 16384
DEFAULT_MAX_MODEL_LEN = 40960    # the double's checkpoint's (max_position_embeddings)
KV_STATE_BYTES_PER_SEQUENCE = 65536
GIB = 1 << 30


def kv_needed_bytes(length: int) -> int:
    """What one request of `length` tokens holds in the pool: its state and whole blocks."""
    return KV_STATE_BYTES_PER_SEQUENCE + -(-int(length) // KV_BLOCK_TOKENS) * (
        KV_BLOCK_TOKENS * KV_BYTES_PER_TOKEN)


def kv_pool(args, knobs) -> dict:
    """The KV cache pool this start gets, in vLLM's terms: {available_bytes, max_model_len,
    needed_bytes (one request at max_model_len), max_concurrency (requests at max_model_len
    the pool holds), tokens (max_concurrency x max_model_len, as vLLM counts the pool of a
    hybrid model), estimated_max_model_len (the longest one request that fits: 0 none)}."""
    available = getattr(args, "kv_cache_memory_bytes", None)
    if not available:
        available = int(knobs.get("kv_cache_tokens", 131072.0)) * KV_BYTES_PER_TOKEN
    available = int(available)
    block = KV_BLOCK_TOKENS * KV_BYTES_PER_TOKEN
    # --max-model-len, or the checkpoint's when unset or auto (Engine.max_model_len's rule)
    length = getattr(args, "max_model_len", None)
    max_len = length if isinstance(length, int) and length > 0 else DEFAULT_MAX_MODEL_LEN
    fits = available >= kv_needed_bytes(1)
    longest = (available - KV_STATE_BYTES_PER_SEQUENCE) // block * KV_BLOCK_TOKENS if fits else 0
    needed = kv_needed_bytes(max_len) if max_len else 0
    concurrency = available / needed if needed else None
    return {"available_bytes": available, "max_model_len": max_len or None,
            "needed_bytes": needed, "max_concurrency": concurrency,
            "tokens": int(concurrency * max_len) if concurrency else available // block
            * KV_BLOCK_TOKENS,
            "estimated_max_model_len": min(longest, max_len) if max_len else longest}


def kv_pool_error(pool):
    """vLLM 0.27.1's refusal of a max_model_len its KV pool cannot hold for one request
    (vllm/v1/core/kv_cache_utils.py, _check_enough_kv_cache_memory; GiB as format_gib rounds
    them), or None."""
    if pool["available_bytes"] <= 0:
        return ("ValueError: No available memory for the cache blocks. Try increasing "
                "`gpu_memory_utilization` when initializing the engine (this flag also controls "
                "CPU memory reservation on the CPU backend, despite its name). See "
                "https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details.")
    if not pool["max_model_len"] or pool["needed_bytes"] <= pool["available_bytes"]:
        return None
    estimated = pool["estimated_max_model_len"]
    said = (f"Based on the available memory, the estimated maximum model length is {estimated}. "
            if estimated > 0 else "")
    return (f"ValueError: To serve at least one request with the model's max seq len "
            f"({pool['max_model_len']}), ({round(pool['needed_bytes'] / GIB, 2)} GiB KV cache is "
            f"needed, which is larger than the available KV cache memory "
            f"({round(pool['available_bytes'] / GIB, 2)} GiB). {said}Try increasing "
            f"`gpu_memory_utilization` (which also controls CPU memory on the CPU backend) or "
            f"decreasing `max_model_len` when initializing the engine. See "
            f"https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details.")


def kv_pool_lines(pool) -> list:
    """What vLLM 0.27.1 logs of its KV pool at start (kv_cache_utils.py, get_kv_cache_configs)."""
    lines = [f"GPU KV cache size: {pool['tokens']:,} tokens"]
    if pool["max_model_len"]:
        lines.append(f"Maximum concurrency for {pool['max_model_len']:,} tokens per request: "
                     f"{pool['max_concurrency']:.2f}x")
    return lines


MIB = 1 << 20
CUDA_GRAPH_BYTES = 512 * MIB   # assumed: what the double's CUDA graphs take beside the pool
REDUNDANCY_BYTES = 150 * MIB   # vLLM 0.27.1's redundancy_buffer_memory (gpu_worker.py)
GPU_MEMORY_FILE = "vllm-double-gpu.json"   # in $HF_HOME: what the nvidia-smi double reads


def format_gib(size: float) -> str:
    """vLLM's format_gib (vllm/utils/mem_utils.py): GiB rounded to 2 places."""
    return f"{round(size / GIB, 2)}"


def gpu_worker_lines(args, pool, memory) -> list:
    """What vLLM 0.27.1's GPU worker logs of its memory at start (v1/worker/gpu_worker.py, read
    from the real image's source): a pinned pool (--kv-cache-memory-bytes) skips profiling and
    says so; a profiled one says what it got ("Available KV cache memory") and, after warm-up,
    the two pool sizes it would pin to (to fit into the requested memory, to fill the card).
    The double's terms (assumed): the card's free memory at start is torch's capacity, CUDA
    graphs 512 MiB, peak activation one full-budget step, the rest of the budget consumed."""
    free = memory["capacity_mib"] * MIB
    requested = memory["budget_mib"] * MIB
    pinned = getattr(args, "kv_cache_memory_bytes", None)
    if pinned:
        return [f"Initial free memory {format_gib(free)} GiB, reserved {format_gib(pinned)} GiB "
                "memory for KV Cache as specified by kv_cache_memory_bytes config and skipped "
                "memory profiling. This does not respect the gpu_memory_utilization config. "
                "Only use kv_cache_memory_bytes config when you want manual control of KV cache "
                "memory size. If OOM'ed, check the difference of initial free memory between "
                "the current run and the previous run where kv_cache_memory_bytes is suggested "
                "and update it correspondingly."]
    available = pool["available_bytes"]
    peak = memory["per_ktoken_mib"] * memory["max_num_batched_tokens"] / 1024 * MIB
    consumed = max(requested - available - peak - CUDA_GRAPH_BYTES, 0)
    non_kv = consumed + peak + CUDA_GRAPH_BYTES
    # vLLM leaves 150 MiB beside both suggestions ("the memory profiling may slightly
    # underestimate"): a pool pinned to fit is that much smaller than the profiled one
    to_fit = int(requested - non_kv - REDUNDANCY_BYTES)
    to_gpu = int(free - non_kv - REDUNDANCY_BYTES)
    return [
        f"Available KV cache memory: {format_gib(available)} GiB",
        f"Free memory on device ({format_gib(free)}/{format_gib(memory['card_mib'] * MIB)} GiB) "
        f"on startup. Desired GPU memory utilization is ({memory['gpu_memory_utilization']}, "
        f"{format_gib(requested)} GiB). Actual usage is {format_gib(consumed)} GiB for consumed "
        f"memory (weights + non-torch), {format_gib(peak)} GiB for peak activation, and "
        f"{format_gib(CUDA_GRAPH_BYTES)} GiB for CUDAGraph memory. Replace "
        f"gpu_memory_utilization config with `--kv-cache-memory={to_fit}` ({format_gib(to_fit)} "
        f"GiB) to fit into requested memory, or `--kv-cache-memory={to_gpu}` "
        f"({format_gib(to_gpu)} GiB) to fully utilize gpu memory. Current kv cache memory in use "
        f"is {format_gib(available)} GiB."]


def gpu_memory_path():
    """$HF_HOME/vllm-double-gpu.json when $HF_HOME is a folder (the host's model cache), else
    None."""
    home = os.environ.get("HF_HOME", "")
    return os.path.join(home, GPU_MEMORY_FILE) if home and os.path.isdir(home) else None


def run_serve(args, argv) -> int:
    """Runs the double's server until SIGTERM/SIGINT or the crash; returns the exit code."""
    model = args.model_tag or args.model
    log(f"vllm-double {__version__}: TEST DOUBLE of `vllm serve` (not vLLM), model {model}")
    decode = flashinfer_check.decode_state()
    decision = crash_decision(args, decode)
    model_where = hf_cli.resolve_model(model, args.download_dir, args.revision)
    knobs, knob_warnings = rig_knobs(hf_cli.knobs())
    for warning in knob_warnings:
        log(f"WARNING {warning}")
    memory = memory_model(args, knobs.get("memory"))
    record_start({
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "pid": os.getpid(),
        "argv": list(argv),
        "args": vars(args),
        "env": dict(os.environ),
        "model": model,
        "model_resolved": model_where,
        "flashinfer": decode,
        "crash": decision,
        "knobs": knobs,
        "memory": memory,
    })
    if decode["state"] == "broken":
        sys.stderr.write(f"ERROR importing flashinfer ({decode['file']}): {decode['error']}\n")
        return 1
    problem = gpu_error(args) or quantization_error(args) or cache_config_error(args)
    if problem is None and model_where.get("error"):
        problem = model_where["error"]
    pool = kv_pool(args, knobs)
    if problem is None:
        problem = kv_pool_error(pool)
    if problem is None:
        worker = gpu_worker_lines(args, pool, memory)
        # the GPU worker says what it got before the pool is laid out, and its hint after
        for line in worker[:1] + kv_pool_lines(pool) + worker[1:]:
            log(line)
    if problem:
        sys.stderr.write(problem + "\n")
        return 1
    log(f"flashinfer decode.py {decode['file']}: {decode['state']} "
        f"({decode.get('error') or len(decode['allocations'])} plan-buffer allocations)")
    log("crash rule (vllm issue #40756) "
        + ("ARMED: the engine dies when {n} requests are in flight".format(
            n=decision["crash_inflight"]) if decision["armed"] else "not armed")
        + f" {json.dumps(decision['reasons'], sort_keys=True)}")
    time.sleep(env_float("VLLM_DOUBLE_STARTUP_S", 1.0))
    api_keys = args.api_key or [os.environ.get("VLLM_API_KEY", "")]
    engine = Engine(args.served_model_name or [model], api_keys,
                    crash_armed=decision["armed"], crash_inflight=decision["crash_inflight"],
                    reasoning=bool(args.reasoning_parser), max_model_len=args.max_model_len,
                    root=model, knobs=knobs, num_speculative_tokens=speculative_tokens(args),
                    prefix_caching=args.enable_prefix_caching is not False, memory=memory,
                    kv_cache_tokens=pool["available_bytes"] // KV_BYTES_PER_TOKEN,
                    gpu_memory_file=gpu_memory_path(),
                    # a pinned pool moves what the cards hold by its difference from the
                    # profiled one (the knob's)
                    idle_used_mib=memory["budget_mib"] + (pool["available_bytes"] - int(
                        knobs.get("kv_cache_tokens", 131072.0)) * KV_BYTES_PER_TOKEN) / MIB)
    if knobs:
        log(f"rig knobs from $HF_HOME/{RIG_KNOBS}: {json.dumps(knobs, sort_keys=True)}")
    server = make_server(engine, args.host or "0.0.0.0", args.port)

    def stop(signum, _frame):
        log(f"signal {signum}: shutting down")
        sys.stdout.flush()
        os._exit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    host, port = server.server_address[:2]
    log(f"Starting vLLM API server 0 on http://{host}:{port}")
    print("INFO:     Application startup complete.", flush=True)
    server.serve_forever()
    return 0
