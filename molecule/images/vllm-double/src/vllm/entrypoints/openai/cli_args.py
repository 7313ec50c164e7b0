"""vllm.entrypoints.openai.cli_args (test double): the `vllm serve` flags the project uses.

Same entry points as real vLLM: ``make_arg_parser(FlexibleArgumentParser(prog="vllm serve"))``
then ``parse_args([...])``, and ``validate_parsed_serve_args(args)``. Unknown flags and bad
choices exit 2 through argparse, as in vLLM. Only a subset of vLLM's flags exists here: every
flag below exists in real vLLM with the same spelling and kind of value, so a flag the double
accepts is one real vLLM accepts; the reverse is what vllm_flags_check.py checks on the real
image. Compared with the real parsers of 0.27.1 and 0.33.0 (bench/results/vllm-parsers.md).

What depends on the release (vllm.__version__, set by layout.py), as in vLLM:
--kv-cache-dtype offers vllm.config.cache's names as choices in 0.27.1 and takes any string in
0.33.0 (CacheConfig refuses an unknown one when the engine starts); 0.33.0 adds the alias
--device-memory-utilization and, through its FlexibleArgumentParser, the --enable-/--disable-
pairs of the boolean flags (vllm.utils.argparse_utils.EnableDisableAction).
"""

import argparse
import json

from vllm._double import release
from vllm.config import cache
from vllm.utils.argparse_utils import FlexibleArgumentParser

DTYPES = ["auto", "half", "float16", "bfloat16", "float", "float32"]
UVICORN_LOG_LEVELS = ["critical", "error", "warning", "info", "debug", "trace"]
# vLLM 0.33.0 also spells --gpu-memory-utilization --device-memory-utilization.
DEVICE_MEMORY_ALIAS_SINCE = (0, 33)
DEFAULT_MODEL = "Qwen/Qwen3-0.6B"


def human_readable_int(value: str) -> int:
    """'1k' -> 1000, '1K' -> 1024, '32768' -> 32768 (as vLLM)."""
    value = value.strip()
    decimal = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
    binary = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
    if value and value[-1] in decimal:
        return int(float(value[:-1]) * decimal[value[-1]])
    if value and value[-1] in binary:
        return int(value[:-1]) * binary[value[-1]]
    return int(value)


def human_readable_int_or_auto(value: str) -> int:
    if value.strip() in ("-1", "auto"):
        return -1
    return human_readable_int(value)


def json_object(value: str) -> dict:
    try:
        parsed = json.loads(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"invalid JSON: {exc}") from exc
    if not isinstance(parsed, dict):
        raise argparse.ArgumentTypeError("expected a JSON object")
    return parsed


def _speculative_config(value: str) -> dict:
    config = json_object(value)
    n = config.get("num_speculative_tokens")
    if n is not None and (not isinstance(n, int) or isinstance(n, bool) or n < 0):
        raise argparse.ArgumentTypeError("num_speculative_tokens must be a non-negative integer")
    return config


def _check_platform() -> None:
    from vllm.platforms import current_platform

    if current_platform.is_unspecified():
        raise RuntimeError(
            "Failed to infer device type, please set the environment variable "
            "`VLLM_LOGGING_LEVEL=DEBUG` to turn on verbose logging to help debug the issue."
        )


def make_arg_parser(parser: FlexibleArgumentParser) -> FlexibleArgumentParser:
    """Adds the serve flags to `parser` (test double of vLLM's function of the same name)."""
    _check_platform()
    boolean = argparse.BooleanOptionalAction
    add = parser.add_argument
    add("model_tag", type=str, nargs="?", help="The model tag to serve")
    # Frontend
    front = parser.add_argument_group("Frontend")
    front.add_argument("--host", type=str, default=None)
    front.add_argument("--port", type=int, default=8000)
    front.add_argument("--uvicorn-log-level", choices=UVICORN_LOG_LEVELS, default="info")
    front.add_argument("--disable-uvicorn-access-log", action=boolean, default=False)
    front.add_argument("--api-key", type=str, nargs="+", default=None)
    front.add_argument("--chat-template", type=str, default=None)
    front.add_argument("--enable-auto-tool-choice", action=boolean, default=False)
    front.add_argument("--tool-call-parser", type=str, default=None)
    # Engine
    eng = parser.add_argument_group("Engine")
    eng.add_argument("--model", type=str, default=DEFAULT_MODEL)
    eng.add_argument("--served-model-name", type=str, nargs="+", default=None)
    eng.add_argument("--tokenizer", type=str, default=None)
    eng.add_argument("--revision", type=str, default=None)
    eng.add_argument("--tokenizer-revision", type=str, default=None)
    eng.add_argument("--download-dir", type=str, default=None)
    eng.add_argument("--load-format", type=str, default="auto")
    eng.add_argument("--trust-remote-code", action=boolean, default=False)
    eng.add_argument("--dtype", choices=DTYPES, default="auto")
    # Any name parses (vLLM: `QuantizationMethods | str`); the engine refuses at start a name not
    # in vllm.model_executor.layers.quantization.QUANTIZATION_METHODS (see vllm._double.server).
    eng.add_argument("--quantization", "-q", type=str, default=None)
    eng.add_argument("--max-model-len", type=human_readable_int_or_auto, default=None)
    eng.add_argument("--tensor-parallel-size", "-tp", type=int, default=1)
    eng.add_argument("--pipeline-parallel-size", "-pp", type=int, default=1)
    # Any string (vLLM: a backend name or an executor class, checked when the engine starts).
    eng.add_argument("--distributed-executor-backend", type=str, default=None)
    eng.add_argument("--disable-custom-all-reduce", action=boolean, default=False)
    memory = ["--gpu-memory-utilization"]
    if release() >= DEVICE_MEMORY_ALIAS_SINCE:
        memory.append("--device-memory-utilization")
    eng.add_argument(*memory, dest="gpu_memory_utilization", type=float, default=0.9)
    # 0.27.1: the names of vllm.config.cache.CacheDType as choices; 0.33.0: any string here,
    # CacheConfig refuses an unknown one at start (see vllm._double.server).
    eng.add_argument("--kv-cache-dtype", type=str, choices=cache.PARSER_CHOICES, default="auto")
    # A byte count, vLLM's own option type (optional_type(human_readable_int)): e.g. 134217728.
    eng.add_argument("--kv-cache-memory-bytes", type=human_readable_int, default=None)
    eng.add_argument("--mamba-ssm-cache-dtype", choices=["auto", "bfloat16", "float16", "float32"],
                     default="auto")
    eng.add_argument("--language-model-only", action=boolean, default=False)
    eng.add_argument("--enable-prefix-caching", action=boolean, default=None)
    eng.add_argument("--enable-chunked-prefill", action=boolean, default=None)
    eng.add_argument("--max-num-seqs", type=int, default=None)
    eng.add_argument("--max-num-batched-tokens", type=human_readable_int, default=None)
    eng.add_argument("--async-scheduling", action=boolean, default=None)
    eng.add_argument("--speculative-config", "-sc", type=_speculative_config, default=None)
    eng.add_argument("--compilation-config", "-cc", type=json_object, default=None)
    eng.add_argument("--hf-overrides", type=json_object, default=None)
    eng.add_argument("--reasoning-parser", type=str, default="")
    eng.add_argument("--generation-config", type=str, default="auto")
    eng.add_argument("--override-generation-config", type=json_object, default=None)
    eng.add_argument("--enforce-eager", action=boolean, default=False)
    eng.add_argument("--seed", type=int, default=None)
    eng.add_argument("--disable-log-stats", action="store_true")  # no --no- form, as vLLM
    eng.add_argument("--enable-log-requests", action=boolean, default=False)
    return parser


def validate_parsed_serve_args(args: argparse.Namespace) -> None:
    """Quick checks that raise before loading, as vLLM's function of the same name."""
    if args.enable_auto_tool_choice and not args.tool_call_parser:
        raise TypeError("Error: --enable-auto-tool-choice requires --tool-call-parser")
