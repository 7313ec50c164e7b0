"""vllm.model_executor.layers (test double)."""
