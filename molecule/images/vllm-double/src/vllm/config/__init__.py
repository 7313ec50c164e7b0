"""vllm.config (test double): only CacheConfig, the config that judges --kv-cache-dtype."""

from vllm.config.cache import CacheConfig

__all__ = ["CacheConfig"]
