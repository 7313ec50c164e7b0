"""vllm.utils (test double): only what the double's parser needs."""
