"""vllm.model_executor (test double): only the quantization list lives here."""
