"""vllm.config.cache (test double): CacheConfig and its cache dtypes, by release.

Real vLLM's engine builds ``CacheConfig(cache_dtype=args.kv_cache_dtype, ...)`` when it starts
(a pydantic dataclass); the serve parser derives --kv-cache-dtype from its ``cache_dtype`` field:

    0.27.1  cache_dtype: CacheDType, a Literal of 16 names: the parser offers them as choices
            (exit 2 on another); CacheConfig refuses another with pydantic's literal_error
    0.33.0  cache_dtype: CacheDType | str: the parser takes any string; CacheConfig's validator
            refuses a name not in KV_CACHE_DTYPES (the 22 names of CacheDType, plus any that a
            platform plugin registers) with "Invalid kv_cache_dtype: ..."

The double has the same names, in the same order, picked by vllm.__version__ (layout.py), and
refuses in the same words: a ValidationError (a ValueError, as pydantic's is) whose str() and
errors() read as pydantic's (less its link to errors.pydantic.dev). Only the ``cache_dtype``
field exists here; vllm.entrypoints.*.cli_args takes PARSER_CHOICES from this module.
"""

import dataclasses
import typing

from vllm._double import release

_CACHE_DTYPES_0_27 = (
    "auto", "float16", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "fp8_ds_mla",
    "turboquant_k8v4", "turboquant_4bit_nc", "turboquant_k3v4_nc", "turboquant_3bit_nc",
    "int4_per_token_head", "int8_per_token_head", "fp8_per_token_head", "nvfp4",
)
_CACHE_DTYPES_0_33 = (
    "auto", "float16", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "fp8_ds_mla",
    "nvfp4_ds_mla", "turboquant_k8v4", "turboquant_4bit_nc", "turboquant_k3v4_nc",
    "turboquant_3bit_nc", "octave_k3v4", "octave_k3v3", "octave_k3v3_compact", "ultraquant_4bit",
    "int4_per_token_head", "int8_per_token_head", "fp8_per_token_head", "nvfp4", "nvfp4_4over6",
)
# Since 0.33.0 the field also takes a str, checked by a validator (not by the parser).
_ANY_STR_SINCE = (0, 33)
_ANY_STR = release() >= _ANY_STR_SINCE

CacheDType = typing.Literal[_CACHE_DTYPES_0_33 if _ANY_STR else _CACHE_DTYPES_0_27]
# The --kv-cache-dtype choices of the serve parser: the Literal's names (sorted, as vLLM's
# parser lists them), or None where it takes any string.
PARSER_CHOICES = None if _ANY_STR else sorted(typing.get_args(CacheDType))
if _ANY_STR:
    # 0.33.0's mutable mirror of CacheDType (register_kv_cache_dtype appends to it)
    KV_CACHE_DTYPES = list(typing.get_args(CacheDType))

    def is_known_kv_cache_dtype(name: str) -> bool:
        """Whether ``name`` is a valid ``--kv-cache-dtype`` value."""
        return name in KV_CACHE_DTYPES


class ValidationError(ValueError):
    """Stands in for pydantic_core.ValidationError: a ValueError; str() and errors() alike."""

    def __init__(self, title: str, errors: list):
        self.title = title
        self._errors = errors
        lines = [f"{len(errors)} validation error{'s' if len(errors) != 1 else ''} for {title}"]
        for error in errors:
            value = error["input"]
            lines += [".".join(str(part) for part in error["loc"]),
                      f"  {error['msg']} [type={error['type']}, input_value={value!r}, "
                      f"input_type={type(value).__name__}]"]
        super().__init__("\n".join(lines))

    def errors(self, **_options) -> list:
        return [dict(error) for error in self._errors]

    def error_count(self) -> int:
        return len(self._errors)


def _cache_dtype_error(value):
    """The pydantic error dict for a refused cache_dtype, or None when it is taken."""
    if _ANY_STR:
        if isinstance(value, str) and is_known_kv_cache_dtype(value):
            return None
        return {"type": "value_error", "loc": ("cache_dtype",), "input": value,
                "msg": f"Value error, Invalid kv_cache_dtype: {value!r}. "
                       f"Valid values are: {KV_CACHE_DTYPES}"}
    names = typing.get_args(CacheDType)
    if value in names:
        return None
    expected = ", ".join(repr(n) for n in names[:-1]) + f" or {names[-1]!r}"
    return {"type": "literal_error", "loc": ("cache_dtype",), "input": value,
            "msg": f"Input should be {expected}"}


@dataclasses.dataclass
class CacheConfig:
    """Configuration for the KV cache (test double: the cache dtype only)."""

    cache_dtype: str = "auto"

    def __post_init__(self):
        error = _cache_dtype_error(self.cache_dtype)
        if error is not None:
            raise ValidationError("CacheConfig", [error])
