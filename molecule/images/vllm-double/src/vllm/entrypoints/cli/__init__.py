"""Part of the vLLM test double (vllm-double)."""
