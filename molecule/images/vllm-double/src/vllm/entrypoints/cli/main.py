"""`vllm` console command of the vLLM test double: `vllm --version`, `vllm serve MODEL ...`."""

import sys
import traceback

from vllm import __version__
from vllm.utils.argparse_utils import FlexibleArgumentParser


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
    from vllm.entrypoints.openai.cli_args import make_arg_parser, validate_parsed_serve_args

    try:
        parser = make_arg_parser(FlexibleArgumentParser(prog="vllm serve"))
    except RuntimeError:
        traceback.print_exc()
        return 1
    args = parser.parse_args(argv[1:])  # exits 2 on unknown flags and bad choices
    try:
        validate_parsed_serve_args(args)
    except (TypeError, ValueError):
        traceback.print_exc()
        return 1
    from vllm._double.server import run_serve

    return run_serve(args, ["vllm", *argv])


if __name__ == "__main__":
    sys.exit(main())
