"""`vllm` console command of the vLLM test double: `vllm --version`, `vllm serve MODEL ...`."""

import importlib
import sys
import traceback

from vllm import __version__
from vllm.utils.argparse_utils import FlexibleArgumentParser


def parser_module():
    """The serve parser's module where this tree's layout keeps it (see layout.py): vLLM 0.33.0's
    vllm.entrypoints.common.cli_args, else 0.27.1's vllm.entrypoints.openai.cli_args."""
    try:
        return importlib.import_module("vllm.entrypoints.common.cli_args")
    except ModuleNotFoundError as exc:
        if exc.name not in ("vllm.entrypoints.common", "vllm.entrypoints.common.cli_args"):
            raise
    return importlib.import_module("vllm.entrypoints.openai.cli_args")


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] in (["--version"], ["-v"]):
        print(__version__)
        return 0
    if argv[:1] != ["serve"]:
        top = FlexibleArgumentParser(prog="vllm", description="vLLM CLI (vllm-double: a test "
                                     "double; only `serve` and `--version`)")
        top.add_argument("-v", "--version", action="version", version=__version__)
        sub = top.add_subparsers(dest="subparser", required=True)
        sub.add_parser("serve")
        top.parse_args(argv)  # exits 2 on anything but serve
        return 2
    cli_args = parser_module()
    try:
        parser = cli_args.make_arg_parser(FlexibleArgumentParser(prog="vllm serve"))
    except RuntimeError:
        traceback.print_exc()
        return 1
    args = parser.parse_args(argv[1:])  # exits 2 on unknown flags and bad choices
    try:
        cli_args.validate_parsed_serve_args(args)
    except (TypeError, ValueError):
        traceback.print_exc()
        return 1
    from vllm._double.server import run_serve

    return run_serve(args, ["vllm", *argv])


if __name__ == "__main__":
    sys.exit(main())
