"""Internals of the vLLM test double (vllm-double): not part of real vLLM."""
