"""A rig's envelope (issue 46, part 1): what vLLM itself says at start of the KV cache pool it
got, read from its log. vLLM 0.27.1 logs "GPU KV cache size: N tokens" and "Maximum concurrency
for L tokens per request: Cx" once the pool is allocated (vllm/v1/core/kv_cache_utils.py,
get_kv_cache_configs), and refuses a max_model_len the pool cannot hold for one request with a
ValueError that names the length it could hold (_check_enough_kv_cache_memory). The same words
on the CPU build (its device is a CPU, the words still say GPU) and on the vLLM double
(tests/integration/test_engine_contract.py holds the two to each other)."""

from __future__ import annotations

import re

KV_POOL = re.compile(r"GPU KV cache size: ([\d,]+) tokens")
CONCURRENCY = re.compile(r"Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x")
REFUSAL = re.compile(
    r"To serve at least one request with the model's max seq len \((\d+)\), \(([\d.]+) GiB KV "
    r"cache is needed, which is larger than the available KV cache memory \(([\d.]+) GiB\)\. "
    r"(?:Based on the available memory, the estimated maximum model length is (\d+)\. )?")
NO_POOL = "No available memory for the cache blocks."
# vLLM 0.27.1's GPU worker (v1/worker/gpu_worker.py): what a profiled start got, and after warm-up
# the pool that fits the requested memory (the one to pin: the other fills the card, and a
# transient peak then has nowhere to go)
AVAILABLE = re.compile(r"Available KV cache memory: ([\d.]+) GiB")
TO_FIT = re.compile(r"`--kv-cache-memory=(\d+)` \([\d.]+ GiB\) to fit into requested memory")
PINNED = re.compile(r"reserved ([\d.]+) GiB memory for KV Cache as specified by "
                    r"kv_cache_memory_bytes")


def _int(text: str) -> int:
    return int(text.replace(",", ""))


def engine_start_facts(log_text) -> dict:
    """What one start's log says of the KV pool: {kv_cache_tokens, max_concurrency,
    concurrency_for_tokens, available_kv_gib, kv_cache_memory_to_fit (bytes: vLLM's own
    suggestion for --kv-cache-memory-bytes), pinned_kv_gib} (None where not said: the engine did
    not get that far, a CPU build, a pinned start), and
    refused: {} or {max_model_len, needed_gib, available_gib, estimated_max_model_len (0 when
    vLLM gave none)}. The last of each line counts (a log of several starts)."""
    text = str(log_text or "")
    pools, concurrency, refusals = (KV_POOL.findall(text), CONCURRENCY.findall(text),
                                    REFUSAL.findall(text))
    refused = {}
    if refusals:
        length, needed, available, estimated = refusals[-1]
        refused = {"max_model_len": int(length), "needed_gib": float(needed),
                   "available_gib": float(available),
                   "estimated_max_model_len": int(estimated) if estimated else 0}
    elif NO_POOL in text:
        refused = {"max_model_len": None, "needed_gib": None, "available_gib": 0.0,
                   "estimated_max_model_len": 0}
    available, to_fit, pinned = AVAILABLE.findall(text), TO_FIT.findall(text), PINNED.findall(text)
    # On every rank the same pool: the smallest said is what the engine can count on.
    return {"available_kv_gib": min(float(v) for v in available) if available else None,
            "kv_cache_memory_to_fit": min(int(v) for v in to_fit) if to_fit else None,
            "pinned_kv_gib": float(pinned[-1]) if pinned else None,
            "kv_cache_tokens": _int(pools[-1]) if pools else None,
            "max_concurrency": float(concurrency[-1][1]) if concurrency else None,
            "concurrency_for_tokens": _int(concurrency[-1][0]) if concurrency else None,
            "refused": refused}
