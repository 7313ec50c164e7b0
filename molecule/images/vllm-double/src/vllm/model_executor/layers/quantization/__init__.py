"""vllm.model_executor.layers.quantization (test double): vLLM's list of quantization methods.

Real vLLM builds ``QUANTIZATION_METHODS`` from its ``QuantizationMethods`` literal; the names and
their order below are those of vLLM 0.27.1 (31 names); vLLM 0.33.0 has the same list less
"bitsandbytes", and so does the double laid out as 0.33.0 (``vllm.__version__``, see DROPPED).
There is no "auto_round" nor "auto-round": an AutoRound checkpoint loads as "inc". As in vLLM,
``--quantization`` parses any name and the engine refuses one that is not in this list when it
starts (exact spelling); a plugin may append names with ``register_quantization_config``.
"""

from vllm import __version__

QUANTIZATION_METHODS = [
    "awq",
    "auto_awq",
    "fp8",
    "fbgemm_fp8",
    "fp_quant",
    "modelopt",
    "modelopt_fp4",
    "modelopt_mxfp8",
    "modelopt_mixed",
    "auto_gptq",
    "gptq",
    "gptq_marlin",
    "awq_marlin",
    "humming",
    "compressed-tensors",
    "bitsandbytes",
    "experts_int8",
    "quark",
    "moe_wna16",
    "torchao",
    "inc",
    "mxfp4",
    "gpt_oss_mxfp4",
    "deepseek_v4_fp8",
    "online",
    "fp8_per_tensor",
    "fp8_per_block",
    "fp8_per_channel",
    "int8_per_channel_weight_only",
    "nvfp4_per_token",
    "mxfp8",
]
# Names vLLM dropped after 0.27.1, by the release that no longer has them.
DROPPED = {(0, 33): ("bitsandbytes",)}
_release = tuple(int(part) for part in __version__.split(".")[:2])
for _since, _names in DROPPED.items():
    if _release >= _since:
        QUANTIZATION_METHODS = [m for m in QUANTIZATION_METHODS if m not in _names]


def register_quantization_config(quantization: str):
    """Adds a name to QUANTIZATION_METHODS, as vLLM's decorator of the same name does."""

    def wrap(cls):
        if quantization not in QUANTIZATION_METHODS:
            QUANTIZATION_METHODS.append(quantization)
        return cls

    return wrap
