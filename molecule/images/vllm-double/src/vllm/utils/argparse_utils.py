"""vllm.utils.argparse_utils (test double): FlexibleArgumentParser as real vLLM names it.

Like the real class: accepts `--max_model_len` for `--max-model-len` (underscores in flag names
become dashes), ignores the `deprecated=` keyword, and fails with exit 2 on unknown flags.
"""

import argparse
import sys


class FlexibleArgumentParser(argparse.ArgumentParser):
    """ArgumentParser that allows both underscore and dash in flag names (test double)."""

    def __init__(self, *args, **kwargs):
        kwargs.pop("add_json_tip", None)
        super().__init__(*args, **kwargs)

    def add_argument(self, *args, **kwargs):
        kwargs.pop("deprecated", None)
        return super().add_argument(*args, **kwargs)

    def parse_args(self, args=None, namespace=None):
        if args is None:
            args = sys.argv[1:]
        processed = []
        for arg in args:
            if arg.startswith("--") and arg != "--":
                key, sep, value = arg.partition("=")
                head, dot, tail = key[2:].partition(".")
                processed.append("--" + head.replace("_", "-") + dot + tail + sep + value)
            else:
                processed.append(arg)
        return super().parse_args(processed, namespace)
