"""`vllm serve` of the vLLM test double: real HTTP, fake engine, and the issue #40756 crash.

Endpoints (http.server, one thread per request): GET /health (200 once listening, as vLLM),
GET /version, GET /v1/models, POST /v1/chat/completions (OpenAI-shaped, usage counted as
whitespace words; one word is one token). `/v1/...` needs `Authorization: Bearer KEY` when
--api-key or env VLLM_API_KEY is set (401 otherwise; --api-key wins over the environment), as vLLM.

Chat completions: the answer is at most 12 words (after up to 8 reasoning words with
--reasoning-parser), or exactly max_tokens words with vLLM's `"ignore_eos": true` (what a speed
measurement asks for). With `"stream": true` the answer comes as server-sent events, as vLLM
sends them: `data: {chunk}` lines of object chat.completion.chunk, the first delta holding the
role, then one delta per token (choices[0].delta.content, or delta.reasoning_content and
delta.reasoning while reasoning), finish_reason on the last token's chunk, a chunk with
`"choices": []` and usage when `"stream_options": {"include_usage": true}`, then `data: [DONE]`.
The first token comes after the time to first token (TTFT), each further one after 1/rate: by
default TTFT = VLLM_DOUBLE_LATENCY_S + VLLM_DOUBLE_TOKEN_S and one token per VLLM_DOUBLE_TOKEN_S
(so a non-streamed answer of n tokens takes LATENCY + n x TOKEN_S, as it always did).

Per-rig knobs (read once at start, like hf_cli's download knobs, from `$HF_HOME/vllm-double.json`,
the host's model cache the role mounts there; see rig_knobs): "tokens_per_s" (decode rate, > 0),
"ttft_s" (delay before the first token, >= 0), "fail_health": true (GET /health answers 503
always, so a release on that rig fails its health check), and "by_version": {"<vLLM version>":
{...}} (those keys for a double of that version only, winning over the top-level ones). A value
of the wrong kind is ignored with a warning on stdout; the knobs in effect are recorded with the
start.

The crash (vllm issue #40756, what the project patches): when speculative decoding is on
(--speculative-config with num_speculative_tokens >= 1), --max-num-seqs >= 4 (unset counts as
vLLM's default, 256) and FlashInfer's decode.py still allocates its plan buffer with
pin_memory=True (see flashinfer_check; judged once at start, when real vLLM imports FlashInfer),
the moment 4 chat requests are in flight together the process prints the CUDA error to stderr
(last line: "what():  CUDA error: an illegal memory access was encountered") and exits with status
134 (os._exit; 128 + SIGABRT, what Docker reports when the engine aborts on that error). Anything
else keeps serving.

At start, as vLLM: a --quantization name not in vllm.model_executor.layers.quantization's
QUANTIZATION_METHODS (vLLM 0.27.1's list, or 0.33.0's as laid out) exits 1 ("Unknown
quantization method"); none given is fine (the checkpoint's config decides). So does a
--kv-cache-dtype that vllm.config.CacheConfig refuses (0.33.0's parser takes any string:
"Invalid kv_cache_dtype"; 0.27.1's parser has already refused it).

Every start is recorded (argv, parsed flags, environment, FlashInfer state, crash decision, rig
knobs) in $VLLM_DOUBLE_STATE_DIR (default /var/lib/vllm-double): last-start.json (0600) and one
JSON line per start in starts.log. It holds the environment as given, secrets included: test
data only.

Knobs for tests (env): VLLM_DOUBLE_STARTUP_S (delay before listening, default 1),
VLLM_DOUBLE_LATENCY_S (per request, default 0.3), VLLM_DOUBLE_TOKEN_S (per token, default 0.005),
VLLM_DOUBLE_CRASH_INFLIGHT (default 4), VLLM_DOUBLE_FAULTS: comma list of KIND or KIND@N (N-th
chat request, 1-based) with KIND one of http-500, empty-content, zero-usage, never-healthy;
they apply to streams too (http-500 answers 500 before the stream starts).
"""

import json
import os
import signal
import sys
import threading
import time
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


def log(message: str) -> None:
    print(f"INFO {time.strftime('%m-%d %H:%M:%S')} [vllm-double] {message}", flush=True)


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


def rig_knobs(raw, version=__version__) -> tuple:
    """(knobs, warnings): the serving knobs of a rig's vllm-double.json (dict as loaded), checked.
    tokens_per_s: number > 0; ttft_s: number >= 0; fail_health: bool. Other keys (the download
    knobs hf_cli reads) are left alone; a bad value is dropped and named. Keys under
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
    for key, low, strict in (("tokens_per_s", 0.0, True), ("ttft_s", 0.0, False)):
        if key not in raw:
            continue
        value = raw[key]
        if (isinstance(value, (int, float)) and not isinstance(value, bool)
                and (value > low if strict else value >= low)):
            knobs[key] = float(value)
        else:
            warnings.append(f"{RIG_KNOBS}: {key} must be a number {'>' if strict else '>='} "
                            f"{low:g}, not {value!r}; ignored")
    if "fail_health" in raw:
        if isinstance(raw["fail_health"], bool):
            knobs["fail_health"] = raw["fail_health"]
        else:
            warnings.append(f"{RIG_KNOBS}: fail_health must be true or false, not "
                            f"{raw['fail_health']!r}; ignored")
    return knobs, warnings


def words(n: int) -> list:
    """The double's answer: n words, WORDS over and over."""
    return [WORDS[i % len(WORDS)] for i in range(n)]


def count_tokens(messages) -> int:
    total = 0
    for message in messages:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list):
            content = " ".join(p.get("text", "") for p in content if isinstance(p, dict))
        total += len(str(content or "").split()) + 4
    return total


class Engine:
    """Shared state of one double server: names, keys, in-flight count, crash rule, faults."""

    def __init__(self, served_names, api_keys, crash_armed=False, crash_inflight=4,
                 reasoning=False, max_model_len=None, root=None, knobs=None):
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
        self.faults = parse_faults(os.environ.get("VLLM_DOUBLE_FAULTS", ""))
        self.lock = threading.Lock()
        self.in_flight = 0
        self.requests = 0
        self.crash = self._crash

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

    def generation_s(self, tokens: int) -> float:
        """Seconds to generate `tokens` tokens: the first after ttft_s, then one per interval."""
        return self.ttft_s + self.token_interval_s * max(tokens - 1, 0)

    def completion(self, body: dict, emit) -> tuple:
        """(status, payload) for one chat completion; may crash the process. A stream
        (`"stream": true`) is written through emit(data) as it is generated, one call per SSE
        `data:` line, and answers (200, None). The http-500 fault answers 500 after the TTFT
        (a stream, before its first event) or the whole generation time (not streamed)."""
        model = body.get("model")
        if model not in self.served_names:
            return 404, error_body(f"The model `{model}` does not exist.", "NotFoundError", 404)
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            return 400, error_body("messages: a non-empty list is required", "BadRequestError")
        stream = bool(body.get("stream"))
        max_tokens = body.get("max_completion_tokens") or body.get("max_tokens") or 16
        if not isinstance(max_tokens, int) or max_tokens < 1:
            return 400, error_body("max_tokens must be a positive integer", "BadRequestError")
        with self.lock:
            self.requests += 1
            self.in_flight += 1
            ordinal, in_flight = self.requests, self.in_flight
        try:
            if self.crash_armed and in_flight >= self.crash_inflight:
                self.crash(in_flight)
            answer = self.answer(body, messages, max_tokens, ordinal)
            if self.fault("http-500", ordinal):
                time.sleep(self.ttft_s if stream else self.generation_s(answer["generated"]))
                return 500, error_body("vllm-double: injected fault http-500",
                                       "InternalServerError", 500)
            if stream:
                self.stream(answer, model, body, emit)
                return 200, None
            time.sleep(self.generation_s(answer["generated"]))
            content = " ".join(answer["content"]) if answer["content"] else None
            reasoning = " ".join(answer["reasoning"]) if answer["reasoning"] else None
            if answer["empty"]:
                content, reasoning = "", None
            message = {"role": "assistant", "content": content, "tool_calls": []}
            if self.reasoning:
                message["reasoning_content"] = reasoning
                message["reasoning"] = reasoning
            return 200, {
                "id": f"chatcmpl-double-{ordinal}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": model,
                "choices": [{"index": 0, "message": message, "logprobs": None,
                             "finish_reason": answer["finish_reason"]}],
                "usage": answer["usage"],
            }
        finally:
            with self.lock:
                self.in_flight -= 1

    def answer(self, body: dict, messages, max_tokens: int, ordinal: int) -> dict:
        """What one request answers: reasoning and content words, usage, finish reason."""
        reasoning_tokens = min(max_tokens, 8) if self.reasoning else 0
        cap = max_tokens if body.get("ignore_eos") is True else 12
        answer_tokens = min(max_tokens - reasoning_tokens, cap)
        generated = answer_tokens + reasoning_tokens
        empty = self.fault("empty-content", ordinal)
        reasoning = WORDS[-reasoning_tokens:] if reasoning_tokens else []
        content = words(answer_tokens)
        if empty:
            reasoning, content = [], []
        completion_tokens = len(reasoning) + len(content)
        prompt_tokens = count_tokens(messages)
        usage = {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                 "total_tokens": prompt_tokens + completion_tokens}
        if self.fault("zero-usage", ordinal):
            usage = {"prompt_tokens": prompt_tokens, "completion_tokens": 0,
                     "total_tokens": prompt_tokens}
        return {"id": f"chatcmpl-double-{ordinal}", "generated": generated, "empty": empty,
                "reasoning": reasoning, "content": content, "usage": usage,
                "finish_reason": "length" if completion_tokens >= max_tokens else "stop"}

    def stream(self, answer: dict, model: str, body: dict, emit) -> None:
        """Writes one answer as vLLM streams it: a role delta, one delta per token (TTFT before
        the first, the decode interval between the others), usage when asked, [DONE]."""
        created = int(time.time())

        def chunk(delta, finish_reason=None) -> str:
            return json.dumps({
                "id": answer["id"], "object": "chat.completion.chunk", "created": created,
                "model": model, "choices": [{"index": 0, "delta": delta, "logprobs": None,
                                             "finish_reason": finish_reason}]})

        tokens = [("reasoning", w) for w in answer["reasoning"]]
        tokens += [("content", w if i == 0 else " " + w) for i, w in enumerate(answer["content"])]
        time.sleep(self.ttft_s)
        emit(chunk({"role": "assistant", "content": ""}))
        for i, (kind, text) in enumerate(tokens):
            if i:
                time.sleep(self.token_interval_s)
            delta = ({"reasoning_content": text, "reasoning": text} if kind == "reasoning"
                     else {"content": text})
            emit(chunk(delta, answer["finish_reason"] if i == len(tokens) - 1 else None))
        if not tokens:
            emit(chunk({}, answer["finish_reason"]))
        options = body.get("stream_options")
        if isinstance(options, dict) and options.get("include_usage"):
            emit(json.dumps({"id": answer["id"], "object": "chat.completion.chunk",
                             "created": created, "model": model, "choices": [],
                             "usage": answer["usage"]}))
        emit("[DONE]")

    def models(self) -> dict:
        return {"object": "list", "data": [
            {"id": name, "object": "model", "created": int(time.time()), "owned_by": "vllm",
             "root": self.root, "parent": None, "max_model_len": self.max_model_len}
            for name in self.served_names]}


def error_body(message: str, kind: str, code: int = 400) -> dict:
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


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

    def authorised(self) -> bool:
        keys = self.engine.api_keys
        if not keys or not self.path.startswith("/v1"):
            return True
        header = self.headers.get("Authorization", "")
        if header.startswith("Bearer ") and header[len("Bearer "):] in keys:
            return True
        self.send_json(401, {"error": "Unauthorized"})
        return False

    def do_GET(self):  # noqa: N802 (http.server's naming)
        path = self.path.split("?", 1)[0]
        if path == "/health":
            if self.engine.fault("never-healthy") or self.engine.fail_health:
                which = "never-healthy" if self.engine.fault("never-healthy") else (
                    f"fail_health in {RIG_KNOBS}")
                self.send_json(503, {"error": f"vllm-double: injected fault {which}"})
                return
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()
        elif path == "/version":
            self.send_json(200, {"version": __version__})
        elif path == "/v1/models":
            if self.authorised():
                self.send_json(200, self.engine.models())
        else:
            self.send_json(404, {"detail": "Not Found"})

    def do_POST(self):  # noqa: N802
        path = self.path.split("?", 1)[0]
        if path != "/v1/chat/completions":
            self.send_json(404, {"detail": "Not Found"})
            return
        if not self.authorised():
            return
        try:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length) or b"{}")
            if not isinstance(body, dict):
                raise ValueError("expected a JSON object")
        except ValueError as exc:
            self.send_json(400, error_body(f"invalid JSON body: {exc}", "BadRequestError"))
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
    })
    if decode["state"] == "broken":
        sys.stderr.write(f"ERROR importing flashinfer ({decode['file']}): {decode['error']}\n")
        return 1
    problem = gpu_error(args) or quantization_error(args) or cache_config_error(args)
    if problem is None and model_where.get("error"):
        problem = model_where["error"]
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
                    root=model, knobs=knobs)
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
