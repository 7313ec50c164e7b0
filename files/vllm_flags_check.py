#!/usr/bin/env python3
"""Checks a `vllm serve` argument list against the vLLM in this Python (standard library + vllm).

Run with the vLLM image's own python, in a one-off container of the image that will serve:

    docker run --rm --entrypoint python3 -v ...:/check IMAGE /check/vllm_flags_check.py \\
        '["Org/Model", "--tensor-parallel-size", "2", ...]'
    ... vllm_flags_check.py -- Org/Model --tensor-parallel-size 2 ...

The arguments are what follows `vllm serve` (a leading "vllm" and/or "serve" is dropped): either
one JSON list as the only argument, or everything after `--`. They are parsed by vLLM's own
parser, built as `vllm serve` builds it: make_arg_parser(FlexibleArgumentParser(prog="vllm serve"))
from vllm.utils.argparse_utils and the first of PARSER_MODULES that exists
(vllm.entrypoints.common.cli_args since vLLM 0.33.0, vllm.entrypoints.openai.cli_args before),
then vLLM's validate_parsed_serve_args when it exists. On a machine without a GPU vLLM cannot
infer a platform and refuses to build the parser ("Failed to infer device type"), so an
unspecified platform is replaced by vLLM's CPU platform first (best effort, through
vllm.platforms; parsing does not depend on the device). Nothing is served and nothing is loaded.

vLLM's parser takes any --quantization name and refuses an unknown one only when the engine
starts, after the old release was stopped; so a given name is checked here against the image's
vllm.model_executor.layers.quantization.QUANTIZATION_METHODS (exact spelling, as vLLM compares).
When that list cannot be imported the check is skipped and the JSON says so; that alone does not
fail. (Methods a vLLM plugin registers at engine start are not in the list here.)

vLLM 0.33.0's parser takes any --kv-cache-dtype too, and refuses an unknown one when the engine
builds vllm.config.CacheConfig ("Invalid kv_cache_dtype"; 0.27.1's parser has the names as
choices). So the parsed value is also given to vllm.config.CacheConfig(cache_dtype=...) (cheap: no
model, no device), and refused when CacheConfig refuses the cache dtype: a ValueError whose
pydantic errors() put it on the cache_dtype field or, without errors(), whose text names
cache_dtype. CacheConfig missing, not importable, or failing for another reason (other required
arguments, another field, another exception) is noted in the JSON, and that alone does not fail.
(Cache dtypes a platform plugin registers when its platform activates are not known here when
the check had to set the CPU platform.)

Prints one JSON line, the last line of stdout: {"ok": bool, "error": str|null, "platform": str,
"vllm_version": str|null, "parser_module": str|null, "quantization_check": str,
"kv_cache_dtype_check": str}
(quantization_check, kv_cache_dtype_check: "not given", "ok: ...", "refused: ..." or
"skipped: ..."; when both refuse, error is the quantization's;
VLLM_CONFIGURE_LOGGING=0 is set unless given, so vLLM's own logging stays quiet; anything vLLM
still prints comes before it).
Exit codes: 0 accepted; 2 rejected by vLLM (unknown flag, bad choice or value, failed
validation), an unknown --quantization, a --kv-cache-dtype CacheConfig refuses, or bad usage of
this script; 1 could not run (vllm missing or broken).
"""

import contextlib
import importlib
import io
import json
import os
import sys

EXIT_OK, EXIT_UNEXPECTED, EXIT_REJECTED = 0, 1, 2
# Where make_arg_parser and validate_parsed_serve_args live, newest first.
PARSER_MODULES = ("vllm.entrypoints.common.cli_args", "vllm.entrypoints.openai.cli_args")
QUANTIZATION_MODULE = "vllm.model_executor.layers.quantization"
CACHE_CONFIG = "vllm.config.CacheConfig"


def serve_args(argv):
    """The `vllm serve` arguments from this script's argv (without the program name)."""
    if argv and argv[0] == "--":
        args = list(argv[1:])
    elif len(argv) == 1:
        args = json.loads(argv[0])
        if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
            raise ValueError("the JSON argument must be a list of strings")
    else:
        raise ValueError("give the serve arguments as one JSON list, or after --")
    if args[:1] == ["vllm"]:
        args = args[1:]
    if args[:1] == ["serve"]:
        args = args[1:]
    return args


def ensure_platform() -> str:
    """Sets vLLM's CPU platform when none can be inferred; returns the platform's name."""
    try:
        import vllm.platforms as platforms
    except Exception as exc:  # noqa: BLE001 (any import failure: report, let the parser decide)
        return f"unknown ({type(exc).__name__})"
    try:
        current = platforms.current_platform
        unspecified = current.is_unspecified() if hasattr(current, "is_unspecified") else (
            not getattr(current, "device_type", ""))
    except Exception:  # noqa: BLE001 (platform detection itself failed)
        current, unspecified = None, True
    if not unspecified:
        return type(current).__name__
    try:
        from vllm.platforms.cpu import CpuPlatform

        platforms._current_platform = CpuPlatform()
        return "CpuPlatform (set by vllm_flags_check)"
    except Exception as exc:  # noqa: BLE001
        return f"unspecified (could not set CpuPlatform: {type(exc).__name__})"


def vllm_version():
    try:
        import vllm

        return getattr(vllm, "__version__", None)
    except Exception:  # noqa: BLE001
        return None


def import_cli_args():
    """(module, None) for the first of PARSER_MODULES that exists, else (None, error text).
    Only a module that is absent is skipped; one that exists and fails to import is reported."""
    missing = []
    for name in PARSER_MODULES:
        try:
            return importlib.import_module(name), None
        except ModuleNotFoundError as exc:
            if not (exc.name == name or name.startswith(f"{exc.name}.")):  # a dependency
                return None, f"{name}: {type(exc).__name__}: {exc}"
            missing.append(f"{name}: {exc}")
        except Exception as exc:  # noqa: BLE001 (present but broken: report it, do not skip it)
            return None, f"{name}: {type(exc).__name__}: {exc}"
    return None, "; ".join(missing)


def quantization_check(name) -> tuple:
    """(refused?, text) for the --quantization value vLLM parsed (None when not given)."""
    if name is None:
        return False, "not given"
    try:
        methods = list(importlib.import_module(QUANTIZATION_MODULE).QUANTIZATION_METHODS)
    except Exception as exc:  # noqa: BLE001 (an image whose vLLM keeps the list elsewhere)
        return False, (f"skipped: cannot import {QUANTIZATION_MODULE}.QUANTIZATION_METHODS "
                       f"({type(exc).__name__}: {exc})")
    if name in methods:
        return False, f"ok: {name} is one of {len(methods)} methods"
    return True, (f"refused: --quantization {name} is not one of this vLLM's "
                  f"{len(methods)} methods: {', '.join(sorted(methods))} (without --quantization "
                  "vLLM reads the method from the checkpoint's config)")


def one_line(text, limit=600) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit - 1] + "…"


def cache_dtype_refusal(exc):
    """What CacheConfig said against the cache dtype, or None when `exc` is about something else:
    a ValueError (pydantic's ValidationError is one) with an error of its errors() on the
    cache_dtype field or naming it (a model validator's error has no field), or, without a
    usable errors(), whose text names cache_dtype."""
    if not isinstance(exc, ValueError):
        return None
    errors = None
    if callable(getattr(exc, "errors", None)):
        try:
            errors = [e for e in exc.errors() if isinstance(e, dict)]
        except Exception:  # noqa: BLE001 (not pydantic's errors(): judge the text)
            errors = None
    if errors:
        said = [str(e.get("msg", "")) for e in errors
                if "cache_dtype" in [str(part) for part in e.get("loc") or ()]
                or "cache_dtype" in str(e.get("msg", ""))]
        return ("; ".join(m for m in said if m) or str(exc)) if said else None
    text = str(exc)
    return text if "cache_dtype" in text else None


def kv_cache_dtype_check(value) -> tuple:
    """(refused?, text) for the --kv-cache-dtype value vLLM parsed, through CacheConfig."""
    if value is None:
        return False, "not given"
    try:
        from vllm.config import CacheConfig
    except Exception as exc:  # noqa: BLE001 (a vLLM without it, or an import that fails here)
        return False, (f"skipped: cannot import {CACHE_CONFIG} "
                       f"({type(exc).__name__}: {one_line(exc, 300)})")
    try:
        with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
            CacheConfig(cache_dtype=value)
    except Exception as exc:  # noqa: BLE001 (judged below: the cache dtype, or something else)
        said = cache_dtype_refusal(exc)
        if said is None:
            return False, (f"skipped: {CACHE_CONFIG}(cache_dtype={value!r}) failed for another "
                           f"reason ({type(exc).__name__}: {one_line(exc, 300)})")
        return True, (f"refused: --kv-cache-dtype {value} is refused by {CACHE_CONFIG}, which the "
                      f"engine builds at start ({type(exc).__name__}: {one_line(said)})")
    return False, f"ok: {value} ({CACHE_CONFIG})"


def check(args) -> tuple:
    """(exit code, result dict) for one serve argument list."""
    result = {"ok": False, "error": None, "platform": ensure_platform(),
              "vllm_version": vllm_version(), "parser_module": None,
              "quantization_check": "not run", "kv_cache_dtype_check": "not run"}
    try:
        from vllm.utils.argparse_utils import FlexibleArgumentParser
    except Exception as exc:  # noqa: BLE001
        result["error"] = f"cannot import vLLM's parser: {type(exc).__name__}: {exc}"
        return EXIT_UNEXPECTED, result
    cli_args, problem = import_cli_args()
    if cli_args is None:
        result["error"] = f"cannot import vLLM's parser: {problem}"
        return EXIT_UNEXPECTED, result
    result["parser_module"] = cli_args.__name__
    try:
        parser = cli_args.make_arg_parser(FlexibleArgumentParser(prog="vllm serve"))
    except Exception as exc:  # noqa: BLE001
        result["error"] = f"cannot build vLLM's parser: {type(exc).__name__}: {exc}"
        return EXIT_UNEXPECTED, result
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
            namespace = parser.parse_args(args)
    except SystemExit as exc:
        lines = [ln for ln in stderr.getvalue().splitlines() if ln.strip()]
        result["error"] = lines[-1] if lines else f"parser exited {exc.code}"
        return (EXIT_OK if exc.code == 0 else EXIT_REJECTED), result
    except (TypeError, ValueError) as exc:
        result["error"] = f"{type(exc).__name__}: {exc}"
        return EXIT_REJECTED, result
    validate = getattr(cli_args, "validate_parsed_serve_args", None)
    if validate is not None:
        try:
            validate(namespace)
        except (TypeError, ValueError) as exc:
            result["error"] = f"{type(exc).__name__}: {exc}"
            return EXIT_REJECTED, result
        except Exception as exc:  # noqa: BLE001 (version skew in a check: note, do not reject)
            result["warning"] = f"validate_parsed_serve_args: {type(exc).__name__}: {exc}"
    refused_quantization, result["quantization_check"] = quantization_check(
        getattr(namespace, "quantization", None))
    refused_cache, result["kv_cache_dtype_check"] = kv_cache_dtype_check(
        getattr(namespace, "kv_cache_dtype", None))
    for refused, key in ((refused_quantization, "quantization_check"),
                         (refused_cache, "kv_cache_dtype_check")):
        if refused:
            result["error"] = result[key][len("refused: "):]
            return EXIT_REJECTED, result
    result["ok"] = True
    return EXIT_OK, result


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    os.environ.setdefault("VLLM_CONFIGURE_LOGGING", "0")
    try:
        args = serve_args(argv)
    except ValueError as exc:
        print(json.dumps({"ok": False, "error": f"usage: {exc}"}))
        return EXIT_REJECTED
    try:
        code, result = check(args)
    except Exception as exc:  # noqa: BLE001
        code, result = EXIT_UNEXPECTED, {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    print(json.dumps(result, sort_keys=True))
    return code


if __name__ == "__main__":
    sys.exit(main())
