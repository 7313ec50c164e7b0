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


def test_a_start_says_its_pool_and_the_concurrency_at_max_model_len():
    assert engine_start_facts(STARTED) == {"kv_cache_tokens": 113359, "max_concurrency": 27.68,
                                           "concurrency_for_tokens": 4096, "refused": {}}


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
                                      "concurrency_for_tokens": None, "refused": {}}
    assert engine_start_facts("ValueError: No available memory for the cache blocks. Try")[
        "refused"]["available_gib"] == 0.0
