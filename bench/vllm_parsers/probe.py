#!/usr/bin/env python3
"""Runs inside the Python under test (a vLLM venv, or any Python with the double on PYTHONPATH)
and prints one JSON object as the last line of stdout: what that vLLM is, its quantization list,
every option of the `vllm serve` parser, and warm timings of files/vllm_flags_check.py's check().

    PYTHON bench/vllm_parsers/probe.py CASES.json

CASES.json: {"name": [argv...], ...}. Standard library only (plus the vllm under test); it does
not import torch, it reads the installed distributions' metadata.

Timings: `first_check_seconds` is the first check() in this process (it imports vLLM's parser
modules); `warm_check_seconds[name]` is one more check() per case after that: build the parser
(make_arg_parser), parse, validate, look up the quantization list; the imports are done.
"""

import importlib.util
import json
import os
import platform
import sys
import time
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHECK = ROOT / "files" / "vllm_flags_check.py"


def load_check():
    spec = importlib.util.spec_from_file_location("vllm_flags_check", CHECK)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def dist_version(name):
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def jsonable(value):
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    return repr(value)


def describe(action, accepted):
    """The parts of one argparse action that decide accept/refuse. `accepted`: every option
    string the parser maps to it (a custom action may change its own option_strings after
    argparse registered them; what parses is the parser's table)."""
    choices = action.choices
    if choices is not None:
        choices = sorted(str(c) for c in choices)
    kind = getattr(action.type, "__name__", None) or type(action.type).__name__
    return {
        "options": sorted(accepted) or [action.dest],
        "dest": action.dest,
        "action": type(action).__name__,
        "nargs": jsonable(action.nargs),
        "takes_value": action.nargs != 0,
        "choices": choices,
        "type": None if action.type is None else kind,
        "default": jsonable(action.default),
    }


def parser_options(check):
    """describe() for every action of the serve parser the check builds (keyed by dest)."""
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    cli_args, problem = check.import_cli_args()
    if cli_args is None:
        return {"error": problem}
    parser = cli_args.make_arg_parser(FlexibleArgumentParser(prog="vllm serve"))
    accepted = {}
    for option, action in parser._option_string_actions.items():
        accepted.setdefault(id(action), []).append(option)
    return {a.dest: describe(a, accepted.get(id(a), [])) for a in parser._actions
            if a.dest != "help"}


def kv_cache_dtype_at_config(values):
    """Whether vLLM's CacheConfig, which the engine builds at start (the parser does not), takes
    each --kv-cache-dtype value; plus the CacheDType literal where vllm.config.cache has one."""
    try:
        from vllm.config import CacheConfig
    except Exception as exc:  # noqa: BLE001 (a double from before it had vllm.config)
        return {"error": f"{type(exc).__name__}: {exc}"[:200]}
    out = {}
    for value in values:
        try:
            CacheConfig(cache_dtype=value)
            out[value] = "accepted"
        except Exception as exc:  # noqa: BLE001
            lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
            said = next((ln for ln in lines if "nvalid" in ln or "Input should" in ln),
                        lines[-1] if lines else "")
            out[value] = f"refused: {type(exc).__name__}: {said}"[:300]
    try:
        import typing

        from vllm.config import cache

        out["CacheDType"] = list(typing.get_args(cache.CacheDType))
    except Exception as exc:  # noqa: BLE001
        out["CacheDType"] = f"{type(exc).__name__}: {exc}"[:200]
    return out


def quantization_methods(check):
    try:
        return list(importlib.import_module(check.QUANTIZATION_MODULE).QUANTIZATION_METHODS)
    except Exception as exc:  # noqa: BLE001
        return f"{type(exc).__name__}: {exc}"


def main(argv) -> int:
    cases = json.loads(Path(argv[0]).read_text())
    os.environ.setdefault("VLLM_CONFIGURE_LOGGING", "0")
    check = load_check()
    first_name = next(iter(cases))
    started = time.perf_counter()
    first_code, first_result = check.check(cases[first_name])
    first_seconds = time.perf_counter() - started
    warm = {}
    for name, args in cases.items():
        started = time.perf_counter()
        code, _ = check.check(args)
        warm[name] = {"exit": code, "seconds": round(time.perf_counter() - started, 4)}
    started = time.perf_counter()
    options = parser_options(check)
    build_seconds = time.perf_counter() - started
    reference = cases[first_name]
    role_kv = reference[reference.index("--kv-cache-dtype") + 1] \
        if "--kv-cache-dtype" in reference else "auto"
    # the role's, a bad one, one both releases list, one only 0.33.0 lists
    kv_config = kv_cache_dtype_at_config(
        list(dict.fromkeys([role_kv, "fp7", "float16", "nvfp4_4over6"])))
    vllm_module = sys.modules.get("vllm")
    report = {
        "python": platform.python_version(),
        "python_executable": sys.executable,
        "vllm_version": check.vllm_version(),
        "vllm_is_test_double": bool(getattr(vllm_module, "IS_TEST_DOUBLE", False)),
        "vllm_file": getattr(vllm_module, "__file__", None),
        "vllm_dist": dist_version("vllm"),
        "torch": dist_version("torch"),
        "torchvision": dist_version("torchvision"),
        "torchaudio": dist_version("torchaudio"),
        "flashinfer_python": dist_version("flashinfer-python"),
        "transformers": dist_version("transformers"),
        "platform": first_result.get("platform"),
        "parser_module": first_result.get("parser_module"),
        "first_check": {"case": first_name, "exit": first_code,
                        "seconds": round(first_seconds, 4)},
        "warm_check": warm,
        "parser_build_seconds": round(build_seconds, 4),
        "quantization_methods": quantization_methods(check),
        "parser_options": options,
        "kv_cache_dtype_at_config": kv_config,
    }
    print(json.dumps(report, sort_keys=True))
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[1:]))
