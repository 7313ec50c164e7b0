"""What fit.yml reads of an engine's start (module_utils/vllm_dual_fast_domain/envelope.py):
vLLM 0.27.1's KV pool lines and its refusal, as the real engine printed them here
(tests/integration/test_engine_contract.py runs it; the lines below are its own, with their
prefixes: the EngineCore process of a tensor-parallel start, the real_engine group's flags, a
128 MiB pool, then a 256 KiB one)."""

from ansible.module_utils.vllm_dual_fast_domain.envelope import engine_start_facts

STARTED = """\
(EngineCore pid=25) INFO 12-06 21:42:03 [kv_cache_utils.py:2235] GPU KV cache size: 113,359 tokens
(EngineCore pid=25) INFO 12-06 21:42:03 [kv_cache_utils.py:2236] Maximum concurrency for 4,096 \
tokens per request: 27.68x
"""
REFUSED = (
    "(EngineCore pid=25) ValueError: To serve at least one request with the model's max seq len "
    "(4096), (0.0 GiB KV cache is needed, which is larger than the available KV cache memory "
    "(0.0 GiB). Try increasing `gpu_memory_utilization` (which also controls CPU memory on the "
    "CPU backend) or decreasing `max_model_len` when initializing the engine. See "
    "https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details.\n")


NOTHING_OF_THE_GPU_WORKER = {"available_kv_gib": None, "kv_cache_memory_to_fit": None,
                             "pinned_kv_gib": None}
# vLLM 0.27.1's GPU worker (v1/worker/gpu_worker.py lines 564 and 785 of the real image's
# source: the CPU build does not run it), each tensor-parallel rank its own line; the figures
# are made up, the words are the source's format strings filled in.
GPU_WORKER = "".join(
    f"(Worker_TP{rank} pid={51 + rank}) INFO 12-07 01:02:03 [gpu_worker.py:564] Available KV "
    f"cache memory: {gib} GiB\n" for rank, gib in ((0, "1.86"), (1, "1.84"))) + "".join(
    f"(Worker_TP{rank} pid={51 + rank}) INFO 12-07 01:02:41 [gpu_worker.py:785] Free memory on "
    "device (23.56/24.0 GiB) on startup. Desired GPU memory utilization is (0.9, 21.6 GiB). "
    "Actual usage is 17.9 GiB for consumed memory (weights + non-torch), 1.6 GiB for peak "
    "activation, and 0.5 GiB for CUDAGraph memory. Replace gpu_memory_utilization config with "
    f"`--kv-cache-memory={to_fit}` (1.8 GiB) to fit into requested memory, or "
    "`--kv-cache-memory=3892314112` (3.62 GiB) to fully utilize gpu memory. Current kv cache "
    "memory in use is 1.86 GiB.\n" for rank, to_fit in ((0, 1997537280), (1, 1975517184)))
PINNED = (
    "(Worker_TP0 pid=51) INFO 12-07 01:09:10 [gpu_worker.py:490] Initial free memory 23.56 GiB, "
    "reserved 1.84 GiB memory for KV Cache as specified by kv_cache_memory_bytes config and "
    "skipped memory profiling. This does not respect the gpu_memory_utilization config.\n")


def test_a_start_says_its_pool_and_the_concurrency_at_max_model_len():
    assert engine_start_facts(STARTED) == {"kv_cache_tokens": 113359, "max_concurrency": 27.68,
                                           "concurrency_for_tokens": 4096, "refused": {},
                                           **NOTHING_OF_THE_GPU_WORKER}


def test_the_gpu_worker_says_the_pool_to_pin_and_the_smallest_rank_counts():
    facts = engine_start_facts(GPU_WORKER + STARTED)
    assert facts["available_kv_gib"] == 1.84
    # the first suggestion (to fit the requested memory), never the one that fills the card
    assert facts["kv_cache_memory_to_fit"] == 1975517184
    assert facts["pinned_kv_gib"] is None
    pinned = engine_start_facts(PINNED + STARTED)
    assert pinned["pinned_kv_gib"] == 1.84 and pinned["kv_cache_memory_to_fit"] is None


def test_a_refusal_names_the_length_and_the_one_vllm_could_hold_when_it_gives_one():
    facts = engine_start_facts(REFUSED)
    assert facts["kv_cache_tokens"] is None and facts["max_concurrency"] is None
    assert facts["refused"] == {"max_model_len": 4096, "needed_gib": 0.0, "available_gib": 0.0,
                                "estimated_max_model_len": 0}
    estimated = REFUSED.replace(
        "(0.0 GiB). Try", "(0.0 GiB). Based on the available memory, the estimated maximum "
        "model length is 2992. Try")
    assert engine_start_facts(estimated)["refused"]["estimated_max_model_len"] == 2992


def test_the_last_start_of_a_log_counts_and_nothing_said_is_none():
    assert engine_start_facts(REFUSED + STARTED)["refused"] != {}    # both said: both read
    later = STARTED.replace("113,359", "4,092").replace("27.68x", "1.00x")
    assert engine_start_facts(STARTED + later)["kv_cache_tokens"] == 4092
    assert engine_start_facts("") == {"kv_cache_tokens": None, "max_concurrency": None,
                                      "concurrency_for_tokens": None, "refused": {},
                                      **NOTHING_OF_THE_GPU_WORKER}
    assert engine_start_facts("ValueError: No available memory for the cache blocks. Try")[
        "refused"]["available_gib"] == 0.0
