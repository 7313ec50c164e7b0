"""The engine contract: what the project relies on an OpenAI-compatible vLLM server to answer,
observed the same way on any server, so the vLLM double can be held to the real vLLM
(tests/integration/test_engine_contract.py runs both).

observe(base_url, key, model) sends the same requests to a server and returns what the role,
smoke.py, nginx's rules and the monitoring role depend on, as plain data:
  health           GET /health without a key: status
  models           GET /v1/models: status without a key, with a wrong key, with the key;
                   the error body's shape; data[].id
  chat             POST /v1/chat/completions: status, body keys, message keys, usage keys,
                   finish_reason
  stream           the same with "stream": true and include_usage: every chunk's object, the
                   usage chunk (empty choices), the closing [DONE]
  too_long         a prompt over max_model_len and a max_tokens over it: status, error shape
  unkeyed          /tokenize, /invocations and /metrics without a key: status (nginx, not vLLM,
                   keeps them off the LAN)
  metrics          for every vllm:* series the project reads (read_metric_names): its type and
                   label names
compare(real, double) lists every difference, as "path: real X, double Y".
"""

import json
import re
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
METRIC_SUFFIXES = ("_total", "_bucket", "_sum", "_count", "_created")


def read_metric_names(root: Path = ROOT) -> list:
    """Every vllm:* series the roles read (smoke.py's counters, the alert rules, dashboards)."""
    names = set()
    for path in (root / "roles").rglob("*"):
        if path.is_file() and path.suffix in (".py", ".j2", ".yml", ".json"):
            names.update(re.findall(r"vllm:[a-z_]+", path.read_text(errors="replace")))
    return sorted(names)


def request(method, url, payload=None, key=None, timeout=120, raw=False):
    """(status or 'refused', body: parsed JSON, text when raw or not JSON, None when empty)."""
    data = None if payload is None else json.dumps(payload).encode()
    req = urllib.request.Request(url, data=data, method=method)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    if key:
        req.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            status, body = resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        status, body = exc.code, exc.read()
    except (urllib.error.URLError, OSError):
        return "refused", None
    text = body.decode(errors="replace")
    if raw or not text:
        return status, text or None
    try:
        return status, json.loads(text)
    except ValueError:
        return status, text


def shape(value):
    """The shape of a JSON value: dicts by their sorted keys (recursively), lists by their first
    item's shape, scalars by their type name."""
    if isinstance(value, dict):
        return {k: shape(v) for k, v in sorted(value.items())}
    if isinstance(value, list):
        return [shape(value[0])] if value else []
    return type(value).__name__


def health_while_starting(base_url, deadline_s) -> list:
    """The distinct answers of GET /health from now until it answers 200, in order."""
    seen, deadline = [], time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        status, _ = request("GET", base_url + "/health", timeout=2)
        if not seen or seen[-1] != status:
            seen.append(status)
        if status == 200:
            return seen
        time.sleep(0.2)
    return seen + ["timeout"]


def parse_metric_families(text: str) -> dict:
    """{sample name: (family type, sorted label names)} from Prometheus text."""
    types, out = {}, {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            types[name] = kind.strip()
        elif line and not line.startswith("#"):
            match = re.match(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([^}]*)\})?\s", line)
            if not match:
                continue
            name = match.group(1)
            labels = sorted(re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="', match.group(3) or ""))
            family = name
            for suffix in METRIC_SUFFIXES:
                if name.endswith(suffix) and name[: -len(suffix)] in types:
                    family = name[: -len(suffix)]
                    break
            labels = [label for label in labels if label != "le"]
            out.setdefault(name, (types.get(family, "untyped"), labels))
    return out


def chat_payload(model, max_tokens=16, **extra) -> dict:
    """A short chat request with thinking off (as smoke.py asks its answer check): which field
    carries a reasoning model's text otherwise depends on the model, not on the engine."""
    return dict({"model": model, "max_tokens": max_tokens, "temperature": 0,
                 "chat_template_kwargs": {"enable_thinking": False},
                 "messages": [{"role": "user", "content": "Say hello in one sentence."}]}, **extra)


def stream_chunks(base_url, key, model) -> dict:
    """The shape of a streamed completion: chunk objects, the usage chunk, [DONE] last."""
    payload = chat_payload(model, stream=True, stream_options={"include_usage": True})
    status, text = request("POST", base_url + "/v1/chat/completions", payload, key=key, raw=True)
    events = [line[len("data: "):] for line in (text or "").splitlines()
              if line.startswith("data: ")]
    chunks = [json.loads(e) for e in events if e != "[DONE]"]
    usage = [c for c in chunks if c.get("usage") and not c.get("choices")]
    return {"status": status,
            "objects": sorted({c.get("object") for c in chunks}),
            "content_chunks": sum(1 for c in chunks for choice in c.get("choices", [])
                                  if (choice.get("delta") or {}).get("content")) > 0,
            "usage_chunk": shape(usage[-1]["usage"]) if usage else None,
            "done_last": bool(events) and events[-1] == "[DONE]"}


def error_shape(status, body) -> dict:
    """Status, the body's shape, and which parameter a 4xx names (vLLM's `param`)."""
    error = body.get("error") if isinstance(body, dict) else None
    return {"status": status, "body": shape(body),
            "param": error.get("param") if isinstance(error, dict) else None}


def observe(base_url, key, model, max_model_len) -> dict:
    """What the project depends on, as this server answers it (see the module's docstring)."""
    obs = {"health": request("GET", base_url + "/health")[0]}
    no_key = request("GET", base_url + "/v1/models")
    wrong_key = request("GET", base_url + "/v1/models", key=key + "-wrong")
    status, models = request("GET", base_url + "/v1/models", key=key)
    obs["models"] = {"no_key": error_shape(*no_key), "wrong_key": error_shape(*wrong_key),
                     "status": status, "ids": [m.get("id") for m in models.get("data", [])]
                     if isinstance(models, dict) else None,
                     "object": models.get("object") if isinstance(models, dict) else None}
    status, body = request("POST", base_url + "/v1/chat/completions", chat_payload(model), key=key)
    body = body if isinstance(body, dict) else {}
    choice = (body.get("choices") or [{}])[0]
    obs["chat"] = {"status": status, "object": body.get("object"),
                   "keys": sorted(k for k in ("id", "choices", "usage", "model", "object")
                                  if k in body),
                   "message_has_role": (choice.get("message") or {}).get("role"),
                   "usage": sorted((body.get("usage") or {}).keys() & {
                       "prompt_tokens", "completion_tokens", "total_tokens"}),
                   # which of the two depends on the model's answer, not on the engine
                   "finish_reason_known": choice.get("finish_reason") in ("stop", "length")}
    obs["stream"] = stream_chunks(base_url, key, model)
    over = {"model": model, "max_tokens": 8, "messages": [
        {"role": "user", "content": " ".join(["word"] * (max_model_len + 16))}]}
    obs["too_long"] = {
        "prompt": error_shape(*request("POST", base_url + "/v1/chat/completions", over, key=key)),
        "max_tokens": error_shape(*request("POST", base_url + "/v1/chat/completions",
                                           chat_payload(model, max_tokens=max_model_len + 1),
                                           key=key))}
    obs["unkeyed"] = {
        "tokenize": request("POST", base_url + "/tokenize", {"model": model, "prompt": "hi"})[0],
        "invocations": request("POST", base_url + "/invocations", chat_payload(model, 4))[0],
        "metrics": request("GET", base_url + "/metrics", raw=True)[0]}
    families = parse_metric_families(request("GET", base_url + "/metrics", raw=True)[1] or "")
    obs["metrics"] = {name: families.get(name, "absent") for name in read_metric_names()}
    return obs


def compare(real, double, path="") -> list:
    """Every leaf where the two observations differ, as 'path: real X, double Y'."""
    if isinstance(real, dict) and isinstance(double, dict):
        out = []
        for key in sorted(set(real) | set(double), key=str):
            out += compare(real.get(key, "absent"), double.get(key, "absent"),
                           f"{path}.{key}" if path else str(key))
        return out
    if isinstance(real, tuple):
        real = list(real)
    if isinstance(double, tuple):
        double = list(double)
    return [] if real == double else [f"{path}: real {real!r}, double {double!r}"]
